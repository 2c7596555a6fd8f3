// The CUDA runtime backend (see cuda_backend.hpp for its invariants), the CUDA side of the
// backend factory (detail::make_cuda_backend, cuda_device_count, cuda_backend_built) and the
// public cachalot::make_cuda_backend. In a build without CUDA only the last is defined, and it
// throws not_supported; backend_factory.cpp then provides the other fallbacks.
#include "cachalot/cuda_backend.hpp"

#include <memory>
#include <string>

#include "cachalot/allocator.hpp"
#include "cachalot/errors.hpp"

#ifdef CACHALOT_WITH_CUDA

#include "cuda_backend.hpp"
#include "detail/cuda_factory.hpp"

namespace cachalot::detail {

namespace {

// Errors that mean "the runtime or the context is going away": releasing resources then is a
// no-op, since the driver reclaims everything of a dying context.
bool is_shutdown_error(cudaError_t err) noexcept {
  return err == cudaErrorCudartUnloading || err == cudaErrorContextIsDestroyed;
}

// Clears the runtime's per-thread last error, which a failed call may have set.
void clear_last_error() noexcept {
  (void)cudaGetLastError();
}

}  // namespace

void throw_cuda_error(cudaError_t err, const char* call, const char* file, int line) {
  clear_last_error();
  std::string msg = "CUDA call ";
  msg += call;
  msg += " failed: ";
  msg += cudaGetErrorName(err);
  msg += " (";
  msg += cudaGetErrorString(err);
  msg += ")";
  throw backend_error(msg, file, line);
}

device_guard::device_guard(int device) {
  const cudaError_t err = cudaGetDevice(&previous_);
  if (is_shutdown_error(err)) {  // process exit: nothing to switch, the call that follows no-ops
    clear_last_error();
    return;
  }
  CACHALOT_CUDA_TRY(err);
  if (previous_ != device) {
    CACHALOT_CUDA_TRY(cudaSetDevice(device));
    switched_ = true;
  }
}

device_guard::~device_guard() {
  if (switched_ && cudaSetDevice(previous_) != cudaSuccess) clear_last_error();
}

cuda_backend::cuda_backend(int device) : device_(device) {
  int count = 0;
  CACHALOT_CUDA_TRY(cudaGetDeviceCount(&count));
  if (device < 0 || device >= count) {
    throw backend_error("CUDA device " + std::to_string(device) + " does not exist (" +
                            std::to_string(count) + " device(s) visible)",
                        __FILE__, __LINE__);
  }
  // Make the device current once so that its primary context exists before the first
  // allocation: errors of context creation surface here, not in the middle of a request.
  const device_guard guard(device_);
  CACHALOT_CUDA_TRY(cudaFree(nullptr));
}

std::string cuda_backend::name() const {
  return "cuda";
}

int cuda_backend::device() const {
  return device_;
}

void* cuda_backend::allocate_segment(std::size_t bytes, stream_t stream) {
  (void)stream;  // cudaMalloc memory is usable by every stream of the device
  const device_guard guard(device_);
  void* ptr = nullptr;
  const cudaError_t err = cudaMalloc(&ptr, bytes);
  if (err == cudaErrorMemoryAllocation) {
    clear_last_error();  // not sticky: leave no trace for the caller's next error check
    return nullptr;
  }
  CACHALOT_CUDA_TRY(err);
  return ptr;
}

void cuda_backend::free_segment(void* ptr, std::size_t bytes) {
  (void)bytes;
  const device_guard guard(device_);
  const cudaError_t err = cudaFree(ptr);
  if (is_shutdown_error(err)) {
    clear_last_error();
    return;
  }
  CACHALOT_CUDA_TRY(err);
}

event_t cuda_backend::create_event() {
  const device_guard guard(device_);
  cudaEvent_t event = nullptr;
  CACHALOT_CUDA_TRY(cudaEventCreateWithFlags(&event, cudaEventDisableTiming));
  return static_cast<event_t>(event);
}

void cuda_backend::destroy_event(event_t event) {
  const device_guard guard(device_);
  const cudaError_t err = cudaEventDestroy(static_cast<cudaEvent_t>(event));
  if (is_shutdown_error(err)) {
    clear_last_error();
    return;
  }
  CACHALOT_CUDA_TRY(err);
}

void cuda_backend::record_event(event_t event, stream_t stream) {
  const device_guard guard(device_);
  CACHALOT_CUDA_TRY(
      cudaEventRecord(static_cast<cudaEvent_t>(event), static_cast<cudaStream_t>(stream)));
}

bool cuda_backend::query_event(event_t event) {
  const device_guard guard(device_);
  const cudaError_t err = cudaEventQuery(static_cast<cudaEvent_t>(event));
  if (err == cudaErrorNotReady) {
    clear_last_error();
    return false;
  }
  CACHALOT_CUDA_TRY(err);
  return true;
}

void cuda_backend::synchronize_event(event_t event) {
  const device_guard guard(device_);
  CACHALOT_CUDA_TRY(cudaEventSynchronize(static_cast<cudaEvent_t>(event)));
}

void cuda_backend::synchronize_device() {
  const device_guard guard(device_);
  CACHALOT_CUDA_TRY(cudaDeviceSynchronize());
}

device_memory_info cuda_backend::memory_info() {
  const device_guard guard(device_);
  std::size_t free_bytes = 0;
  std::size_t total_bytes = 0;
  CACHALOT_CUDA_TRY(cudaMemGetInfo(&free_bytes, &total_bytes));
  device_memory_info info;
  info.total = total_bytes;
  info.free = free_bytes;
  return info;
}

bool cuda_backend::is_capturing(stream_t stream) {
  const device_guard guard(device_);
  cudaStreamCaptureStatus status = cudaStreamCaptureStatusNone;
  const cudaError_t err = cudaStreamIsCapturing(static_cast<cudaStream_t>(stream), &status);
  if (err == cudaErrorStreamCaptureImplicit) {
    // The legacy default stream, queried while another stream captures in global or relaxed
    // mode: work on it would join that capture, so treat it as capturing.
    clear_last_error();
    return true;
  }
  CACHALOT_CUDA_TRY(err);
  return status != cudaStreamCaptureStatusNone;
}

capture_mode cuda_backend::exchange_capture_mode(capture_mode mode) {
  // Per thread, not per device: no device guard (which would itself call the runtime).
  auto m = static_cast<cudaStreamCaptureMode>(static_cast<int>(mode));
  static_assert(static_cast<int>(cudaStreamCaptureModeGlobal) == 0 &&
                static_cast<int>(cudaStreamCaptureModeThreadLocal) == 1 &&
                static_cast<int>(cudaStreamCaptureModeRelaxed) == 2);
  CACHALOT_CUDA_TRY(cudaThreadExchangeStreamCaptureMode(&m));
  return static_cast<capture_mode>(static_cast<int>(m));
}

std::size_t cuda_backend::segment_alignment() const {
  return 256;
}

std::shared_ptr<device_backend> make_cuda_backend(int device) {
  return std::make_shared<cuda_backend>(device);
}

}  // namespace cachalot::detail

namespace cachalot {

std::shared_ptr<device_backend> make_cuda_backend(int device) {
  return detail::make_cuda_backend(device);
}

int cuda_device_count() noexcept {
  int count = 0;
  if (cudaGetDeviceCount(&count) != cudaSuccess) {
    (void)cudaGetLastError();  // no driver or no device: not an error for the caller
    return 0;
  }
  return count;
}

bool cuda_backend_built() noexcept {
  return true;
}

}  // namespace cachalot

#else  // !CACHALOT_WITH_CUDA

namespace cachalot {

std::shared_ptr<device_backend> make_cuda_backend(int device) {
  throw not_supported("make_cuda_backend(" + std::to_string(device) +
                          "): this build of cachalot has no CUDA backend",
                      __FILE__, __LINE__);
}

}  // namespace cachalot

#endif  // CACHALOT_WITH_CUDA
