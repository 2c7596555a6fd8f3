// The CUDA runtime functions of the host-only stand-in (standin/cuda_runtime_api.h declares
// them; standin_device.hpp says what they model): one device, capacity enforced in 2 MiB pages,
// streams and events that complete at once, every call counted and priced.
#include <cstdio>

#include "standin_state.hpp"

using cachalot::device_call;
using cachalot::pytorch_peer::standin_granularity;
namespace peer = cachalot::pytorch_peer::detail;

extern "C" {

// --- device and error state ------------------------------------------------------------------

cudaError_t cudaGetDeviceCount(int* count) {
  *count = 1;
  return cudaSuccess;
}

cudaError_t cudaGetDevice(int* device) {
  *device = peer::state().device;
  return cudaSuccess;
}

cudaError_t cudaSetDevice(int device) {
  return device == 0 ? cudaSuccess : cudaErrorInvalidDevice;
}

cudaError_t cudaGetDeviceProperties(cudaDeviceProp* prop, int device) {
  if (device != 0) return cudaErrorInvalidDevice;
  *prop = cudaDeviceProp{};
  std::snprintf(prop->name, sizeof prop->name, "cachalot host stand-in");
  prop->totalGlobalMem = peer::state().capacity;
  prop->major = 9;
  prop->minor = 0;
  prop->multiProcessorCount = 132;
  return cudaSuccess;
}

cudaError_t cudaDeviceGetAttribute(int* value, cudaDeviceAttr attr, int device) {
  if (device != 0) return cudaErrorInvalidDevice;
  *value = attr == cudaDevAttrComputeCapabilityMajor ? 9 : 0;
  return cudaSuccess;
}

cudaError_t cudaDeviceGetStreamPriorityRange(int* least, int* greatest) {
  if (least != nullptr) *least = 0;
  if (greatest != nullptr) *greatest = -5;
  return cudaSuccess;
}

cudaError_t cudaDriverGetVersion(int* version) {
  *version = CUDA_VERSION;
  return cudaSuccess;
}

cudaError_t cudaDeviceSynchronize(void) {
  peer::device_state& s = peer::state();
  std::lock_guard<std::mutex> lock(s.mutex);
  ++s.calls.device_syncs;
  peer::price(s, device_call::device_sync);
  return cudaSuccess;
}

cudaError_t cudaDeviceEnablePeerAccess(int, unsigned int) {
  return peer::unsupported("cudaDeviceEnablePeerAccess");
}

cudaError_t cudaGetLastError(void) {
  peer::device_state& s = peer::state();
  std::lock_guard<std::mutex> lock(s.mutex);
  const cudaError_t e = s.last_error;
  s.last_error = cudaSuccess;
  return e;
}

cudaError_t cudaPeekAtLastError(void) {
  return peer::state().last_error;
}

const char* cudaGetErrorName(cudaError_t error) {
  switch (error) {
    case cudaSuccess:
      return "cudaSuccess";
    case cudaErrorMemoryAllocation:
      return "cudaErrorMemoryAllocation";
    case cudaErrorInvalidValue:
      return "cudaErrorInvalidValue";
    case cudaErrorInvalidDevice:
      return "cudaErrorInvalidDevice";
    case cudaErrorNotSupported:
      return "cudaErrorNotSupported";
    default:
      return "cudaErrorUnknown";
  }
}

const char* cudaGetErrorString(cudaError_t error) {
  switch (error) {
    case cudaSuccess:
      return "no error";
    case cudaErrorMemoryAllocation:
      return "out of memory";
    case cudaErrorInvalidValue:
      return "invalid argument";
    case cudaErrorInvalidDevice:
      return "invalid device ordinal";
    case cudaErrorNotSupported:
      return "operation not supported by the host-only stand-in";
    default:
      return "unknown error";
  }
}

// --- memory -----------------------------------------------------------------------------------

cudaError_t cudaMalloc(void** ptr, std::size_t size) {
  peer::device_state& s = peer::state();
  std::lock_guard<std::mutex> lock(s.mutex);
  const std::size_t charged = peer::pages(size);
  peer::price(s, device_call::segment_alloc, size);
  if (!peer::charge(s, charged)) {
    ++s.calls.malloc_failures;
    s.last_error = cudaErrorMemoryAllocation;
    *ptr = nullptr;
    return cudaErrorMemoryAllocation;
  }
  ++s.calls.malloc_calls;
  s.calls.malloc_sizes.push_back(size);
  const std::uintptr_t at = peer::take_addresses(s, size, standin_granularity);
  s.mallocs.emplace(at, charged);
  *ptr = reinterpret_cast<void*>(at);
  return cudaSuccess;
}

cudaError_t cudaFree(void* ptr) {
  if (ptr == nullptr) return cudaSuccess;
  peer::device_state& s = peer::state();
  std::lock_guard<std::mutex> lock(s.mutex);
  const auto it = s.mallocs.find(reinterpret_cast<std::uintptr_t>(ptr));
  if (it == s.mallocs.end()) {
    s.last_error = cudaErrorInvalidValue;
    return cudaErrorInvalidValue;
  }
  s.in_use -= it->second;
  ++s.calls.free_calls;
  peer::price(s, device_call::segment_free, it->second);
  s.mallocs.erase(it);
  return cudaSuccess;
}

cudaError_t cudaMemGetInfo(std::size_t* free, std::size_t* total) {
  peer::device_state& s = peer::state();
  std::lock_guard<std::mutex> lock(s.mutex);
  ++s.calls.mem_get_info;
  *free = s.capacity - s.in_use;
  *total = s.capacity;
  return cudaSuccess;
}

cudaError_t cudaMallocManaged(void**, std::size_t, unsigned int) {
  return peer::unsupported("cudaMallocManaged");
}

cudaError_t cudaMemAdvise(const void*, std::size_t, cudaMemoryAdvise, int) {
  return peer::unsupported("cudaMemAdvise");
}

cudaError_t cudaMemcpy(void*, const void*, std::size_t, cudaMemcpyKind) {
  return peer::unsupported("cudaMemcpy");
}

cudaError_t cudaMemcpyAsync(void*, const void*, std::size_t, cudaMemcpyKind, cudaStream_t) {
  return peer::unsupported("cudaMemcpyAsync");
}

cudaError_t cudaMemcpyPeerAsync(void*, int, const void*, int, std::size_t, cudaStream_t) {
  return peer::unsupported("cudaMemcpyPeerAsync");
}

cudaError_t cudaIpcGetMemHandle(cudaIpcMemHandle_t*, void*) {
  return peer::unsupported("cudaIpcGetMemHandle");
}

cudaError_t cudaIpcOpenMemHandle(void**, cudaIpcMemHandle_t, unsigned int) {
  return peer::unsupported("cudaIpcOpenMemHandle");
}

cudaError_t cudaIpcCloseMemHandle(void*) {
  return peer::unsupported("cudaIpcCloseMemHandle");
}

// --- streams and events: complete at once ----------------------------------------------------

cudaError_t cudaStreamCreateWithPriority(cudaStream_t* stream, unsigned int, int) {
  peer::device_state& s = peer::state();
  std::lock_guard<std::mutex> lock(s.mutex);
  ++s.calls.stream_creates;
  *stream = static_cast<cudaStream_t>(peer::new_object(s));
  return cudaSuccess;
}

cudaError_t cudaStreamDestroy(cudaStream_t) {
  return cudaSuccess;
}

cudaError_t cudaStreamSynchronize(cudaStream_t) {
  peer::device_state& s = peer::state();
  std::lock_guard<std::mutex> lock(s.mutex);
  ++s.calls.stream_syncs;
  peer::price(s, device_call::stream_sync);
  return cudaSuccess;
}

cudaError_t cudaStreamQuery(cudaStream_t) {
  return cudaSuccess;
}

cudaError_t cudaStreamGetPriority(cudaStream_t, int* priority) {
  *priority = 0;
  return cudaSuccess;
}

cudaError_t cudaStreamWaitEvent(cudaStream_t, cudaEvent_t, unsigned int) {
  return cudaSuccess;
}

cudaError_t cudaStreamIsCapturing(cudaStream_t, cudaStreamCaptureStatus* status) {
  *status = cudaStreamCaptureStatusNone;
  return cudaSuccess;
}

cudaError_t cudaStreamGetCaptureInfo(cudaStream_t, cudaStreamCaptureStatus* status,
                                     unsigned long long* id) {
  *status = cudaStreamCaptureStatusNone;
  if (id != nullptr) *id = 0;
  return cudaSuccess;
}

cudaError_t cudaThreadExchangeStreamCaptureMode(cudaStreamCaptureMode*) {
  return cudaSuccess;
}

cudaError_t cudaEventCreate(cudaEvent_t* event) {
  return cudaEventCreateWithFlags(event, cudaEventDefault);
}

cudaError_t cudaEventCreateWithFlags(cudaEvent_t* event, unsigned int) {
  peer::device_state& s = peer::state();
  std::lock_guard<std::mutex> lock(s.mutex);
  ++s.calls.event_creates;
  peer::price(s, device_call::event_create);
  *event = static_cast<cudaEvent_t>(peer::new_object(s));
  return cudaSuccess;
}

cudaError_t cudaEventDestroy(cudaEvent_t) {
  return cudaSuccess;
}

cudaError_t cudaEventRecord(cudaEvent_t, cudaStream_t) {
  peer::device_state& s = peer::state();
  std::lock_guard<std::mutex> lock(s.mutex);
  ++s.calls.event_records;
  peer::price(s, device_call::event_record);
  return cudaSuccess;
}

cudaError_t cudaEventQuery(cudaEvent_t) {
  peer::device_state& s = peer::state();
  std::lock_guard<std::mutex> lock(s.mutex);
  ++s.calls.event_queries;
  peer::price(s, device_call::event_query);
  return cudaSuccess;
}

cudaError_t cudaEventSynchronize(cudaEvent_t) {
  peer::device_state& s = peer::state();
  std::lock_guard<std::mutex> lock(s.mutex);
  ++s.calls.event_syncs;
  peer::price(s, device_call::event_sync);
  return cudaSuccess;
}

cudaError_t cudaEventElapsedTime(float* ms, cudaEvent_t, cudaEvent_t) {
  *ms = 0.0f;
  return cudaSuccess;
}

}  // extern "C"
