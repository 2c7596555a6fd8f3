// The replay through c10's CUDA caching allocator (see pytorch_replay.hpp). Compiled with
// PyTorch's include paths and the stand-in headers, as C++17 like c10 itself.
#include "pytorch_replay.hpp"

#include <c10/core/CachingDeviceAllocator.h>
#include <c10/cuda/CUDACachingAllocator.h>
#include <c10/util/Exception.h>

#include <cstdlib>

namespace cachalot::pytorch_peer {
namespace {

namespace alloc = c10::cuda::CUDACachingAllocator;

constexpr std::size_t aggregate =
    static_cast<std::size_t>(c10::CachingDeviceAllocator::StatType::AGGREGATE);

void take_stats(peer_result& r) {
  const c10::CachingDeviceAllocator::DeviceStats s = alloc::getDeviceStats(0);
  r.peak_reserved = s.reserved_bytes[aggregate].peak;
  r.peak_allocated = s.allocated_bytes[aggregate].peak;
  r.peak_requested = s.requested_bytes[aggregate].peak;
  r.end_reserved = s.reserved_bytes[aggregate].current;
  r.end_allocated = s.allocated_bytes[aggregate].current;
  r.end_requested = s.requested_bytes[aggregate].current;
  r.num_device_alloc = s.num_device_alloc;
  r.num_device_free = s.num_device_free;
  r.num_alloc_retries = s.num_alloc_retries;
  r.num_sync_all_streams = s.num_sync_all_streams;
  r.num_ooms = s.num_ooms;
}

}  // namespace

peer_result pytorch_replay(const std::vector<peer_op>& ops, std::size_t slots,
                           const peer_options& options) {
  peer_result r;
  r.version = CACHALOT_PYTORCH_VERSION;
  standin_configure(options.capacity, options.cost);
  // c10 reads PYTORCH_CUDA_ALLOC_CONF once, at its first use: set it before.
  if (options.conf.empty()) {
    ::unsetenv("PYTORCH_CUDA_ALLOC_CONF");
  } else {
    ::setenv("PYTORCH_CUDA_ALLOC_CONF", options.conf.c_str(), 1);
  }
  std::vector<void*> pointers(slots, nullptr);
  try {
    alloc::init(1);
    for (const peer_op& op : ops) {
      ++r.ops;
      if (!op.allocate) {
        void*& p = pointers[op.slot];
        if (p == nullptr) {
          ++r.skipped_frees;
          continue;
        }
        alloc::raw_delete(p);
        p = nullptr;
        continue;
      }
      try {
        pointers[op.slot] = alloc::raw_alloc_with_stream(
            op.size,
            reinterpret_cast<cudaStream_t>(op.stream));  // NOLINT(performance-no-int-to-ptr)
      } catch (const c10::OutOfMemoryError&) {
        ++r.ooms;
        if (options.stop_at_oom) {
          r.stopped = true;
          break;
        }
      }
    }
    take_stats(r);
  } catch (const c10::Error& e) {
    r.error = e.what_without_backtrace();
  }
  r.calls = standin_calls();
  return r;
}

}  // namespace cachalot::pytorch_peer
