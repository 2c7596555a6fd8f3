// The replay of a prepared trace through PyTorch's own CUDA caching allocator (c10, built from
// PyTorch's source against the host-only stand-in): every allocate through
// c10::cuda::CUDACachingAllocator::raw_alloc_with_stream on the trace's stream, every free
// through raw_delete, in log order, on one thread. The allocator is a process singleton that
// reads PYTORCH_CUDA_ALLOC_CONF once, so one process replays one trace with one setting: the
// caller runs pytorch_replay() once per process. A refused allocation (c10::OutOfMemoryError) is
// counted and the replay goes on, skipping its free, as cachalot-replay does.
// This header names no c10 type, so that the C++20 tool code can include it.
#pragma once

#include <cstddef>
#include <cstdint>
#include <string>
#include <vector>

#include "standin_device.hpp"

namespace cachalot::pytorch_peer {

/// One operation (allocate: `size` bytes into `slot` on `stream`; free: the pointer in `slot`).
struct peer_op {
  bool allocate = true;
  std::uint32_t slot = 0;
  std::size_t size = 0;
  std::uintptr_t stream = 0;  ///< the logged stream handle, passed as the cudaStream_t
};

/// How to replay.
struct peer_options {
  std::size_t capacity = std::size_t{80} << 30;  ///< device bytes
  std::string conf;                  ///< PYTORCH_CUDA_ALLOC_CONF (e.g. "expandable_segments:True")
  bool stop_at_oom = false;          ///< stop at the first refused allocation (capacity searches)
  cachalot::device_cost_model cost;  ///< prices the device calls (cachalot's defaults)
};

/// What the replay measured: c10's own statistics (getDeviceStats) and the stand-in's calls.
struct peer_result {
  std::string version;                    ///< PyTorch's version, from the build
  std::size_t ops = 0;                    ///< operations issued
  std::size_t ooms = 0;                   ///< allocations refused (c10::OutOfMemoryError)
  std::size_t skipped_frees = 0;          ///< frees of refused allocations
  bool stopped = false;                   ///< stopped at the first refusal (stop_at_oom)
  std::int64_t peak_reserved = 0;         ///< reserved_bytes peak (all pools)
  std::int64_t peak_allocated = 0;        ///< allocated_bytes peak (rounded block sizes)
  std::int64_t peak_requested = 0;        ///< requested_bytes peak
  std::int64_t end_reserved = 0;          ///< reserved_bytes at the end of the trace
  std::int64_t end_allocated = 0;         ///< allocated_bytes at the end of the trace
  std::int64_t end_requested = 0;         ///< requested_bytes at the end of the trace
  std::int64_t num_device_alloc = 0;      ///< c10: segments allocated (cudaMalloc, expandable
                                          ///< segments created)
  std::int64_t num_device_free = 0;       ///< c10: segments freed
  std::int64_t num_alloc_retries = 0;     ///< c10: allocations retried after freeing cache
  std::int64_t num_sync_all_streams = 0;  ///< c10: synchronize_and_free_events calls
  std::int64_t num_ooms = 0;              ///< c10's own count
  standin_counters calls;                 ///< the stand-in's count of every call
  std::string error;  ///< a c10 error other than out of memory, which ended the replay
};

/// Replays `ops` (see the file comment); call once per process.
peer_result pytorch_replay(const std::vector<peer_op>& ops, std::size_t slots,
                           const peer_options& options);

}  // namespace cachalot::pytorch_peer
