// The driver functions of the host-only stand-in (standin/cuda.h declares them): the virtual
// memory management calls of expandable segments, on the same device as the runtime's (physical
// handles charged against its capacity, maps checked against reservations).

#include "standin_state.hpp"

using cachalot::device_call;
using cachalot::pytorch_peer::standin_granularity;
namespace peer = cachalot::pytorch_peer::detail;

extern "C" {

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
