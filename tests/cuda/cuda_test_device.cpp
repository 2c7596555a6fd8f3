// cuda_test_device (see cuda_test_device.hpp). Invariant: every flag in holds_ is pinned,
// mapped host memory still read by a wait kernel; it is freed only after its stream was
// synchronized.
#include "cuda_test_device.hpp"

#include <cuda_runtime_api.h>

#include <string>

#include "cachalot/allocator.hpp"
#include "cachalot/cuda_backend.hpp"
#include "cachalot/errors.hpp"
#include "kernels.hpp"

namespace cachalot::testing {

namespace {

void check(cudaError_t err, const char* what) {
  if (err != cudaSuccess) {
    (void)cudaGetLastError();
    throw backend_error(std::string(what) + ": " + cudaGetErrorName(err) + " (" +
                        cudaGetErrorString(err) + ")");
  }
}

}  // namespace

std::string cuda_test_device::no_device_reason() {
  int count = 0;
  const cudaError_t err = cudaGetDeviceCount(&count);
  if (err != cudaSuccess) {
    (void)cudaGetLastError();
    return std::string("no CUDA device: cudaGetDeviceCount returned ") + cudaGetErrorName(err) +
           " (" + cudaGetErrorString(err) + ")";
  }
  if (count == 0) return "no CUDA device: cudaGetDeviceCount found none";
  return "";
}

std::unique_ptr<cuda_test_device> cuda_test_device::create(int device, std::string* skip_reason) {
  const std::string reason = no_device_reason();
  if (!reason.empty() || device >= cuda_device_count()) {
    if (skip_reason != nullptr) {
      *skip_reason = reason.empty() ? "no CUDA device " + std::to_string(device) : reason;
    }
    return nullptr;
  }
  return std::unique_ptr<cuda_test_device>(new cuda_test_device(device));
}

cuda_test_device::cuda_test_device(int device)
    : device_(device), backend_(make_cuda_backend(device)) {}

cuda_test_device::~cuda_test_device() {
  for (auto& [stream, flags] : holds_) {
    for (int* flag : flags) *reinterpret_cast<volatile int*>(flag) = 1;
    (void)cudaStreamSynchronize(static_cast<cudaStream_t>(stream));
    for (int* flag : flags) (void)cudaFreeHost(flag);
  }
  for (stream_t s : streams_) (void)cudaStreamDestroy(static_cast<cudaStream_t>(s));
  (void)cudaGetLastError();
}

stream_t cuda_test_device::new_stream() {
  check(cudaSetDevice(device_), "cudaSetDevice");
  cudaStream_t s = nullptr;
  check(cudaStreamCreateWithFlags(&s, cudaStreamNonBlocking), "cudaStreamCreateWithFlags");
  streams_.push_back(s);
  return s;
}

bool cuda_test_device::can_hold() const noexcept {
  return kernels_available();
}

void cuda_test_device::hold_stream(stream_t stream) {
  check(cudaSetDevice(device_), "cudaSetDevice");
  void* raw = nullptr;
  check(cudaHostAlloc(&raw, sizeof(int), cudaHostAllocMapped), "cudaHostAlloc");
  int* flag = static_cast<int*>(raw);
  *reinterpret_cast<volatile int*>(flag) = 0;
  holds_[stream].push_back(flag);
  void* device_flag = nullptr;
  check(cudaHostGetDevicePointer(&device_flag, raw, 0), "cudaHostGetDevicePointer");
  wait_for_flag(static_cast<const volatile int*>(device_flag), 30000.0, stream);
}

void cuda_test_device::release_stream(stream_t stream) {
  auto it = holds_.find(stream);
  if (it == holds_.end()) return;
  for (int* flag : it->second) *reinterpret_cast<volatile int*>(flag) = 1;
  check(cudaStreamSynchronize(static_cast<cudaStream_t>(stream)), "cudaStreamSynchronize");
  for (int* flag : it->second) check(cudaFreeHost(flag), "cudaFreeHost");
  holds_.erase(it);
}

}  // namespace cachalot::testing
