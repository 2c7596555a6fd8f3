// The host-only CUDA runtime and driver stand-in (see standin_device.hpp): the functions the
// standin/ headers declare, on one simulated device. State lives in one heap object that is never
// destroyed, so that the allocator's static destructors may still call in at process exit.
#include "standin_device.hpp"

#include <cuda.h>
#include <cuda_runtime_api.h>

#include <algorithm>
#include <cstdio>
#include <map>
#include <mutex>
#include <unordered_map>

namespace cachalot::pytorch_peer {
namespace {

struct device_state {
  std::mutex mutex;
  std::size_t capacity = std::size_t{80} << 30;
  std::size_t in_use = 0;
  std::size_t peak = 0;
  std::uintptr_t next_address = std::uintptr_t{1} << 44;    // 16 TiB: far from host addresses
  std::unordered_map<std::uintptr_t, std::size_t> mallocs;  // pointer -> charged bytes
  std::unordered_map<CUmemGenericAllocationHandle, std::size_t> handles;  // -> bytes
  CUmemGenericAllocationHandle next_handle = 1;
  std::map<std::uintptr_t, std::size_t> reservations;  // virtual ranges: start -> bytes
  std::map<std::uintptr_t, std::size_t> mappings;      // mapped pages: start -> bytes
  std::uintptr_t next_object = 0x1000;                 // stream and event handles
  cudaError_t last_error = cudaSuccess;
  int device = 0;
  cachalot::device_cost_model cost;
  standin_counters calls;
};

device_state& state() {
  static device_state* s = new device_state;  // never destroyed (see the file comment)
  return *s;
}

std::size_t pages(std::size_t bytes) {
  return (bytes + standin_granularity - 1) / standin_granularity * standin_granularity;
}

std::uintptr_t take_addresses(device_state& s, std::size_t bytes, std::size_t alignment) {
  const std::size_t align = std::max(alignment, standin_granularity);
  s.next_address = (s.next_address + align - 1) / align * align;
  const std::uintptr_t at = s.next_address;
  s.next_address += pages(std::max<std::size_t>(bytes, 1));
  return at;
}

/// Charges `bytes` of physical memory; false when the capacity would be exceeded.
bool charge(device_state& s, std::size_t bytes) {
  if (bytes > s.capacity - s.in_use) return false;
  s.in_use += bytes;
  s.peak = std::max(s.peak, s.in_use);
  return true;
}

/// Counts and prices one call of kind `c` on `bytes` (the caller holds the mutex).
void price(device_state& s, cachalot::device_call c, std::size_t bytes = 0) {
  const auto k = static_cast<std::size_t>(c);
  ++s.calls.kind_calls[k];
  s.calls.kind_ns[k] += s.cost.cost_ns(c, bytes);
  if (c == cachalot::device_call::segment_free) {
    ++s.calls.implied_syncs;
    s.calls.implied_sync_ns += s.cost.cost_ns(cachalot::device_call::device_sync, 0);
  }
}

void* new_object(device_state& s) {
  s.next_object += 0x10;
  return reinterpret_cast<void*>(s.next_object);
}

cudaError_t unsupported(const char* name) {
  device_state& s = state();
  std::lock_guard<std::mutex> lock(s.mutex);
  if (s.calls.unsupported++ == 0) s.calls.first_unsupported = name;
  s.last_error = cudaErrorNotSupported;
  return cudaErrorNotSupported;
}

CUresult unsupported_driver(const char* name) {
  unsupported(name);
  return CUDA_ERROR_NOT_SUPPORTED;
}

}  // namespace

void standin_configure(std::size_t capacity, const cachalot::device_cost_model& cost) {
  device_state& s = state();
  std::lock_guard<std::mutex> lock(s.mutex);
  s.capacity = capacity;
  s.cost = cost;
}

std::size_t standin_capacity() {
  return state().capacity;
}

std::size_t standin_in_use() {
  return state().in_use;
}

std::size_t standin_peak_in_use() {
  return state().peak;
}

const standin_counters& standin_calls() {
  return state().calls;
}

}  // namespace cachalot::pytorch_peer

using cachalot::device_call;
using cachalot::pytorch_peer::standin_granularity;
namespace peer = cachalot::pytorch_peer;

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

// --- driver: virtual memory management (expandable segments) ---------------------------------

CUresult cuDeviceGetAttribute(int* value, CUdevice_attribute, CUdevice device) {
  if (device != 0) return CUDA_ERROR_INVALID_VALUE;
  *value = 1;
  return CUDA_SUCCESS;
}

CUresult cuMemAddressReserve(CUdeviceptr* ptr, std::size_t size, std::size_t alignment, CUdeviceptr,
                             unsigned long long) {
  peer::device_state& s = peer::state();
  std::lock_guard<std::mutex> lock(s.mutex);
  if (size == 0 || size % standin_granularity != 0) return CUDA_ERROR_INVALID_VALUE;
  ++s.calls.address_reserve;
  peer::price(s, device_call::range_reserve, size);
  const std::uintptr_t at = peer::take_addresses(s, size, alignment);
  s.reservations.emplace(at, size);
  *ptr = at;
  return CUDA_SUCCESS;
}

CUresult cuMemAddressFree(CUdeviceptr ptr, std::size_t size) {
  peer::device_state& s = peer::state();
  std::lock_guard<std::mutex> lock(s.mutex);
  const auto it = s.reservations.find(ptr);
  if (it == s.reservations.end() || it->second != size) return CUDA_ERROR_INVALID_VALUE;
  s.reservations.erase(it);
  ++s.calls.address_free;
  peer::price(s, device_call::range_release, size);
  return CUDA_SUCCESS;
}

CUresult cuMemCreate(CUmemGenericAllocationHandle* handle, std::size_t size,
                     const CUmemAllocationProp*, unsigned long long) {
  peer::device_state& s = peer::state();
  std::lock_guard<std::mutex> lock(s.mutex);
  if (size == 0 || size % standin_granularity != 0) return CUDA_ERROR_INVALID_VALUE;
  peer::price(s, device_call::chunk_create, size);
  if (!peer::charge(s, size)) {
    ++s.calls.mem_create_failures;
    return CUDA_ERROR_OUT_OF_MEMORY;
  }
  ++s.calls.mem_create;
  *handle = s.next_handle++;
  s.handles.emplace(*handle, size);
  return CUDA_SUCCESS;
}

CUresult cuMemRelease(CUmemGenericAllocationHandle handle) {
  peer::device_state& s = peer::state();
  std::lock_guard<std::mutex> lock(s.mutex);
  const auto it = s.handles.find(handle);
  if (it == s.handles.end()) return CUDA_ERROR_INVALID_VALUE;
  s.in_use -= it->second;
  ++s.calls.mem_release;
  peer::price(s, device_call::chunk_release, it->second);
  s.handles.erase(it);
  return CUDA_SUCCESS;
}

CUresult cuMemMap(CUdeviceptr ptr, std::size_t size, std::size_t offset,
                  CUmemGenericAllocationHandle handle, unsigned long long) {
  peer::device_state& s = peer::state();
  std::lock_guard<std::mutex> lock(s.mutex);
  const auto h = s.handles.find(handle);
  if (h == s.handles.end() || offset != 0 || size != h->second) return CUDA_ERROR_INVALID_VALUE;
  auto r = s.reservations.upper_bound(ptr);
  if (r == s.reservations.begin()) return CUDA_ERROR_INVALID_VALUE;
  --r;
  if (ptr + size > r->first + r->second) return CUDA_ERROR_INVALID_VALUE;
  if (!s.mappings.emplace(ptr, size).second) return CUDA_ERROR_INVALID_VALUE;
  ++s.calls.mem_map;
  peer::price(s, device_call::chunk_map, size);
  return CUDA_SUCCESS;
}

CUresult cuMemUnmap(CUdeviceptr ptr, std::size_t size) {
  peer::device_state& s = peer::state();
  std::lock_guard<std::mutex> lock(s.mutex);
  auto it = s.mappings.lower_bound(ptr);
  if (it == s.mappings.end() || it->first != ptr) return CUDA_ERROR_INVALID_VALUE;
  while (it != s.mappings.end() && it->first < ptr + size) it = s.mappings.erase(it);
  ++s.calls.mem_unmap;
  peer::price(s, device_call::chunk_unmap, size);
  return CUDA_SUCCESS;
}

CUresult cuMemSetAccess(CUdeviceptr, std::size_t size, const CUmemAccessDesc*, std::size_t) {
  peer::device_state& s = peer::state();
  std::lock_guard<std::mutex> lock(s.mutex);
  ++s.calls.mem_set_access;
  peer::price(s, device_call::chunk_access, size);
  return CUDA_SUCCESS;
}

CUresult cuMemGetAllocationGranularity(std::size_t* granularity, const CUmemAllocationProp*,
                                       CUmemAllocationGranularity_flags) {
  *granularity = standin_granularity;
  return CUDA_SUCCESS;
}

CUresult cuMemExportToShareableHandle(void*, CUmemGenericAllocationHandle,
                                      CUmemAllocationHandleType, unsigned long long) {
  return peer::unsupported_driver("cuMemExportToShareableHandle");
}

CUresult cuMemImportFromShareableHandle(CUmemGenericAllocationHandle*, void*,
                                        CUmemAllocationHandleType) {
  return peer::unsupported_driver("cuMemImportFromShareableHandle");
}

CUresult cuMemsetD32Async(CUdeviceptr, unsigned int, std::size_t, CUstream) {
  return peer::unsupported_driver("cuMemsetD32Async");
}

CUresult cuStreamWriteValue32(CUstream, CUdeviceptr, unsigned int, unsigned int) {
  return peer::unsupported_driver("cuStreamWriteValue32");
}

CUresult cuGetErrorString(CUresult error, const char** text) {
  switch (error) {
    case CUDA_SUCCESS:
      *text = "no error";
      break;
    case CUDA_ERROR_OUT_OF_MEMORY:
      *text = "out of memory";
      break;
    case CUDA_ERROR_INVALID_VALUE:
      *text = "invalid argument";
      break;
    case CUDA_ERROR_NOT_SUPPORTED:
      *text = "operation not supported by the host-only stand-in";
      break;
    default:
      *text = "unknown error";
      break;
  }
  return CUDA_SUCCESS;
}

}  // extern "C"
