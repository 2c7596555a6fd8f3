// The CUDA backend's pinned host memory and host <-> device copies (backend.hpp, "Pinned host
// memory and copies"), used by the sleep and wake of memory pools: cuMemHostAlloc and
// cuMemFreeHost, cuMemcpyDtoHAsync and cuMemcpyHtoDAsync on the caller's stream (the
// legacy-stream variants, so that a null stream is the legacy default stream). Invariants:
// host_ maps every live pinned allocation to its size, under host_mutex_, never held across a
// driver call; a host span of a copy must lie in one of them (the driver checks the device
// side); every call is timed on the backend's clock; out of pinned memory is nullptr, not an
// error; while the driver shuts down, freeing is a silent no-op. Only in builds with the CUDA
// backend (CACHALOT_CUDA_BACKEND).
#ifdef CACHALOT_CUDA_BACKEND

#include "cachalot/errors.hpp"
#include "cuda_backend.hpp"
#include "detail/checks.hpp"
#include "detail/cuda_context.hpp"

namespace cachalot::detail {

namespace {
cu::CUdeviceptr device_address(const void* p) noexcept {
  return static_cast<cu::CUdeviceptr>(reinterpret_cast<std::uintptr_t>(p));
}
}  // namespace

bool cuda_backend::supports_host_copies() const {
  return cu::process_driver().host_missing.empty();
}

void cuda_backend::require_host(const char* op) const {
  const std::string& missing = cu::process_driver().host_missing;
  CACHALOT_EXPECTS(missing.empty(), not_supported, "CUDA device {}: {}: {}", device_, op, missing);
}

void cuda_backend::check_host_span(const char* op, const void* ptr, std::size_t bytes) const {
  const auto addr = reinterpret_cast<std::uintptr_t>(ptr);
  CACHALOT_EXPECTS(ptr != nullptr && bytes != 0, backend_error,
                   "CUDA device {}: {} of {} B at {:#x}", device_, op, bytes, addr);
  const std::lock_guard lock(host_mutex_);
  auto it = host_.upper_bound(addr);
  const bool inside = it != host_.begin() && (--it, addr - it->first <= it->second &&
                                                        bytes <= it->second - (addr - it->first));
  CACHALOT_EXPECTS(inside, backend_error,
                   "CUDA device {}: {}: [{:#x}, +{} B) is not inside one pinned host allocation "
                   "of this backend",
                   device_, op, addr, bytes);
}

void* cuda_backend::allocate_host(std::size_t bytes) {
  require_host("allocate_host");
  CACHALOT_EXPECTS(bytes != 0, backend_error, "CUDA device {}: allocate_host of 0 bytes", device_);
  const cu::context_guard guard(api_, context_);
  void* ptr = nullptr;
  const cu::CUresult res =
      timed(device_call::host_alloc, [&] { return api_.MemHostAlloc(&ptr, bytes, 0); });
  if (res == cu::kErrorOutOfMemory) return nullptr;
  CACHALOT_CU_CHECK(res, "cuMemHostAlloc(&ptr, bytes, 0)");
  const std::lock_guard lock(host_mutex_);
  host_.emplace(reinterpret_cast<std::uintptr_t>(ptr), bytes);
  return ptr;
}

void cuda_backend::free_host(void* ptr, std::size_t bytes) {
  require_host("free_host");
  const auto addr = reinterpret_cast<std::uintptr_t>(ptr);
  {
    const std::lock_guard lock(host_mutex_);
    const auto it = host_.find(addr);
    CACHALOT_EXPECTS(it != host_.end() && it->second == bytes, backend_error,
                     "CUDA device {}: free_host({:#x}, {} B) is not one pinned allocation of "
                     "this backend",
                     device_, addr, bytes);
    host_.erase(it);  // a concurrent free of the same memory now fails cleanly
  }
  const cu::context_guard guard(api_, context_);
  const cu::CUresult res = timed(device_call::host_free, [&] { return api_.MemFreeHost(ptr); });
  if (res == cu::kSuccess || cu::is_shutdown_error(res)) return;
  {
    const std::lock_guard lock(host_mutex_);
    host_.emplace(addr, bytes);  // still allocated
  }
  CACHALOT_CU_CHECK(res, "cuMemFreeHost(ptr)");
}

void cuda_backend::copy_to_host(void* dst, const void* src, std::size_t bytes, stream_t stream) {
  require_host("copy_to_host");
  check_host_span("copy_to_host", dst, bytes);
  const cu::context_guard guard(api_, context_);
  timed(device_call::copy, [&] {
    CACHALOT_CU_TRY(api_, MemcpyDtoHAsync, dst, device_address(src), bytes,
                    static_cast<cu::CUstream>(stream));
  });
}

void cuda_backend::copy_to_device(void* dst, const void* src, std::size_t bytes, stream_t stream) {
  require_host("copy_to_device");
  check_host_span("copy_to_device", src, bytes);
  const cu::context_guard guard(api_, context_);
  timed(device_call::copy, [&] {
    CACHALOT_CU_TRY(api_, MemcpyHtoDAsync, device_address(dst), src, bytes,
                    static_cast<cu::CUstream>(stream));
  });
}

}  // namespace cachalot::detail

#endif  // CACHALOT_CUDA_BACKEND
