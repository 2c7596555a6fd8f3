// The CUDA runtime backend (internal; users reach it through make_backend or
// cachalot::make_cuda_backend). Invariants:
//  - every CUDA runtime call runs under a device_guard: the backend's device is made current
//    for the call and the caller's current device is restored afterwards, so one thread may
//    drive allocators of several GPUs;
//  - a failed call becomes a backend_error naming the call, the CUDA error name and string,
//    and the source location (CACHALOT_CUDA_TRY); the runtime's per-thread last error is
//    cleared so that no stale error is blamed on the caller's next kernel launch;
//  - out of memory in allocate_segment is not an error: it returns nullptr;
//  - while the CUDA runtime is unloading (process exit), releasing segments and events is a
//    silent no-op: the driver reclaims them anyway.
// Only compiled in CUDA builds (CACHALOT_WITH_CUDA).
#pragma once

#include <cuda_runtime_api.h>

#include <cstddef>
#include <string>

#include "cachalot/backend.hpp"

namespace cachalot::detail {

/// Throws the backend_error for `err`, returned by the runtime call spelled `call`.
[[noreturn]] void throw_cuda_error(cudaError_t err, const char* call, const char* file, int line);

/// Checks a CUDA runtime call: anything but cudaSuccess throws backend_error.
#define CACHALOT_CUDA_TRY(call)                                                            \
  do {                                                                                     \
    const cudaError_t cachalot_cuda_err_ = (call);                                         \
    if (cachalot_cuda_err_ != cudaSuccess) {                                               \
      ::cachalot::detail::throw_cuda_error(cachalot_cuda_err_, #call, __FILE__, __LINE__); \
    }                                                                                      \
  } while (false)

/// Makes a device current for its lifetime and restores the previous one afterwards.
class device_guard {
 public:
  /// Switches to `device` (no runtime call when it is already current).
  /// @throws backend_error when the device cannot be made current
  explicit device_guard(int device);
  /// Restores the previous device; never throws.
  ~device_guard();
  device_guard(const device_guard&) = delete;
  device_guard& operator=(const device_guard&) = delete;

 private:
  int previous_ = -1;
  bool switched_ = false;
};

/// The CUDA runtime implementation of device_backend. See the file comment.
class cuda_backend final : public device_backend {
 public:
  /// @throws backend_error when there is no driver or `device` does not exist
  explicit cuda_backend(int device);
  ~cuda_backend() override = default;

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
  bool is_capturing(stream_t stream) override;
  capture_mode exchange_capture_mode(capture_mode mode) override;
  std::size_t segment_alignment() const override;

 private:
  int device_;
};

}  // namespace cachalot::detail
