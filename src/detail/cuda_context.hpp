// The context rule of the CUDA backend: every driver call runs with the backend's context (the
// device's primary context) current, and the caller's current context is given back afterwards,
// whatever it was, none included. So a thread that never chose a device still has no context
// after any cachalot call (no context is created on GPU 0 behind its back), and a thread
// current on GPU 1 stays on GPU 1 after using GPU 0's allocator.
// Invariants: the guard switches only when the caller's context differs from the backend's, and
// restores only what it switched; while the driver shuts down (process exit) it does nothing,
// and the call it guards then reports CUDA_ERROR_DEINITIALIZED.
#pragma once

#include "detail/cuda_driver.hpp"

namespace cachalot::detail::cu {

/// True for the results that mean "the driver or the context is going away" (process exit):
/// releasing memory or events then is a no-op, the driver reclaims everything anyway.
inline bool is_shutdown_error(CUresult result) noexcept {
  return result == kErrorDeinitialized || result == kErrorContextIsDestroyed;
}

/// Makes a context current for its lifetime, then restores the caller's. See the file comment.
class context_guard {
 public:
  /// @throws backend_error when the current context cannot be read or set
  context_guard(const driver_api& api, CUcontext context);
  /// Restores the caller's context; never throws.
  ~context_guard();
  context_guard(const context_guard&) = delete;
  context_guard& operator=(const context_guard&) = delete;

 private:
  const driver_api& api_;
  CUcontext previous_ = nullptr;
  bool switched_ = false;
};

}  // namespace cachalot::detail::cu
