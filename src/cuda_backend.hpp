// The CUDA backend on the driver API (internal; users reach it through make_backend or
// cachalot::make_cuda_backend). Invariants:
//  - the device's primary context is retained for the backend's life and released by its
//    destructor (a no-op while the driver shuts down);
//  - every driver call runs under a context_guard: the primary context is current for the call
//    and the caller's current context (or none) is restored afterwards;
//  - a failed call becomes a backend_error naming the call, the CUDA error name and string and
//    the source location (CACHALOT_CU_TRY); the driver API has no sticky per-thread error, so
//    nothing is left for the caller's next error check;
//  - out of memory in allocate_segment and map_chunk is not an error: nullptr / false, and a
//    failed map_chunk leaves nothing mapped or allocated;
//  - while the driver shuts down (process exit), releasing segments, events, chunks and ranges
//    is a silent no-op: the driver reclaims them anyway;
//  - chunks_ maps the base address of every live chunk to its physical handle and size, under
//    vm_mutex_; the mutex is never held across a driver call;
//  - pinned host memory and copies (src/cuda_host.cpp): host_ maps every live pinned
//    allocation to its size, under host_mutex_, never held across a driver call;
//  - every driver call that the cost model names (cachalot/device_cost.hpp) is timed on the
//    steady clock, failed ones included, and recorded on clock_ (call_stats(), timing measured);
//  - an event_t is a cu::cuda_event (detail/cuda_event.hpp): recorded on a stream of another
//    context (another device's), it uses an event of that context.
// Only compiled in builds with the CUDA backend (CACHALOT_CUDA_BACKEND).
#pragma once

#include <cstddef>
#include <cstdint>
#include <map>
#include <mutex>
#include <string>
#include <vector>

#include "cachalot/backend.hpp"
#include "detail/cuda_driver.hpp"
#include "detail/device_clock.hpp"

namespace cachalot::detail {

/// The CUDA driver API implementation of device_backend. See the file comment.
class cuda_backend final : public device_backend {
 public:
  /// @throws backend_error when there is no driver, no such device, or a peer cannot access it
  /// @throws invalid_argument for a peer equal to `device` or given twice
  cuda_backend(int device, std::vector<int> peers);
  ~cuda_backend() override;

  std::string name() const override;
  int device() const override;
  void* allocate_segment(std::size_t bytes, stream_t stream) override;
  void free_segment(void* ptr, std::size_t bytes) override;
  event_t create_event() override;
  void destroy_event(event_t event) override;
  void record_event(event_t event, stream_t stream) override;
  bool query_event(event_t event) override;
  void synchronize_event(event_t event) override;
  void synchronize_device() override;
  device_memory_info memory_info() override;
  /// Measured wall time of every driver call made so far, by kind (timing measured).
  device_call_stats call_stats() const override;
  bool is_capturing(stream_t stream) override;
  capture_mode exchange_capture_mode(capture_mode mode) override;
  std::size_t segment_alignment() const override;

  bool supports_virtual_memory() const override;
  std::size_t vm_granularity() const override;
  void* reserve_address_range(std::size_t bytes) override;
  void release_address_range(void* base, std::size_t bytes) override;
  bool map_chunk(void* addr, std::size_t bytes) override;
  void unmap_chunk(void* addr, std::size_t bytes) override;

  // Pinned host memory and copies (src/cuda_host.cpp).
  bool supports_host_copies() const override;
  void* allocate_host(std::size_t bytes) override;
  void free_host(void* ptr, std::size_t bytes) override;
  void copy_to_host(void* dst, const void* src, std::size_t bytes, stream_t stream) override;
  void copy_to_device(void* dst, const void* src, std::size_t bytes, stream_t stream) override;

 private:
  struct chunk {
    cu::CUmemGenericAllocationHandle handle;
    std::size_t bytes;
  };
  void init_virtual_memory();
  void check_peers();
  void require_vm(const char* op) const;
  void check_vm_range(const char* op, const void* addr, std::size_t bytes) const;
  void require_host(const char* op) const;
  void check_host_span(const char* op, const void* ptr, std::size_t bytes) const;
  /// Releases `handle`, unmapping [ptr, ptr + bytes) first when `mapped`; errors ignored.
  void discard_chunk(cu::CUdeviceptr ptr, std::size_t bytes, cu::CUmemGenericAllocationHandle h,
                     bool mapped) noexcept;
  /// Runs the driver call `f` timed as a call of kind `c` (recorded even when it throws).
  template <class F>
  auto timed(device_call c, F&& f) {
    const timed_call t(clock_, c);
    return f();
  }

  const cu::driver_api& api_;
  int device_;
  std::vector<int> peers_;
  cu::CUdevice dev_ = 0;
  cu::CUcontext context_ = nullptr;
  bool vm_supported_ = false;
  std::string vm_unsupported_why_;
  std::size_t vm_granularity_ = 2u << 20;
  mutable std::mutex vm_mutex_;
  std::map<std::uintptr_t, chunk> chunks_;  // guarded by vm_mutex_
  mutable std::mutex host_mutex_;
  std::map<std::uintptr_t, std::size_t> host_;  // pinned host allocations; host_mutex_
  device_clock clock_{device_cost_model{}, true};
};

}  // namespace cachalot::detail
