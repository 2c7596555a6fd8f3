// Host-only stand-in for the CUDA driver API header, for compiling PyTorch's c10 CUDA caching
// allocator without a CUDA toolkit (tools/pytorch_peer): the types, values and functions that
// c10/cuda of PyTorch 2.6 names (virtual memory management for expandable segments, and what
// driver_api.h lists), with the driver's names and values. standin_device.cpp defines them on a
// simulated device. CUDA_VERSION says which API level c10 compiles against (12.0: no multicast).
#pragma once

#include <cstddef>

#define CUDA_VERSION 12000

typedef int CUresult;
#define CUDA_SUCCESS 0
#define CUDA_ERROR_INVALID_VALUE 1
#define CUDA_ERROR_OUT_OF_MEMORY 2
#define CUDA_ERROR_NOT_SUPPORTED 801

typedef int CUdevice;
typedef unsigned long long CUdeviceptr;
typedef unsigned long long CUmemGenericAllocationHandle;
typedef struct CUstream_st* CUstream;
typedef struct CUstream_st* cudaStream_t;

typedef enum CUdevice_attribute_enum {
  CU_DEVICE_ATTRIBUTE_VIRTUAL_MEMORY_MANAGEMENT_SUPPORTED = 102,
  CU_DEVICE_ATTRIBUTE_HANDLE_TYPE_POSIX_FILE_DESCRIPTOR_SUPPORTED = 103
} CUdevice_attribute;

typedef enum CUmemAllocationType_enum {
  CU_MEM_ALLOCATION_TYPE_INVALID = 0,
  CU_MEM_ALLOCATION_TYPE_PINNED = 1
} CUmemAllocationType;

typedef enum CUmemAllocationHandleType_enum {
  CU_MEM_HANDLE_TYPE_NONE = 0,
  CU_MEM_HANDLE_TYPE_POSIX_FILE_DESCRIPTOR = 1
} CUmemAllocationHandleType;

typedef enum CUmemLocationType_enum {
  CU_MEM_LOCATION_TYPE_INVALID = 0,
  CU_MEM_LOCATION_TYPE_DEVICE = 1
} CUmemLocationType;

typedef enum CUmemAccess_flags_enum {
  CU_MEM_ACCESS_FLAGS_PROT_NONE = 0,
  CU_MEM_ACCESS_FLAGS_PROT_READ = 1,
  CU_MEM_ACCESS_FLAGS_PROT_READWRITE = 3
} CUmemAccess_flags;

typedef enum CUmemAllocationGranularity_flags_enum {
  CU_MEM_ALLOC_GRANULARITY_MINIMUM = 0,
  CU_MEM_ALLOC_GRANULARITY_RECOMMENDED = 1
} CUmemAllocationGranularity_flags;

typedef struct CUmemLocation_st {
  CUmemLocationType type;
  int id;
} CUmemLocation;

typedef struct CUmemAllocationProp_st {
  CUmemAllocationType type;
  CUmemAllocationHandleType requestedHandleTypes;
  CUmemLocation location;
  void* win32HandleMetaData;
  struct {
    unsigned char compressionType;
    unsigned char gpuDirectRDMACapable;
    unsigned short usage;
    unsigned char reserved[4];
  } allocFlags;
} CUmemAllocationProp;

typedef struct CUmemAccessDesc_st {
  CUmemLocation location;
  CUmemAccess_flags flags;
} CUmemAccessDesc;

extern "C" {
CUresult cuDeviceGetAttribute(int* value, CUdevice_attribute attr, CUdevice device);
CUresult cuMemAddressReserve(CUdeviceptr* ptr, std::size_t size, std::size_t alignment,
                             CUdeviceptr addr, unsigned long long flags);
CUresult cuMemAddressFree(CUdeviceptr ptr, std::size_t size);
CUresult cuMemCreate(CUmemGenericAllocationHandle* handle, std::size_t size,
                     const CUmemAllocationProp* prop, unsigned long long flags);
CUresult cuMemRelease(CUmemGenericAllocationHandle handle);
CUresult cuMemMap(CUdeviceptr ptr, std::size_t size, std::size_t offset,
                  CUmemGenericAllocationHandle handle, unsigned long long flags);
CUresult cuMemUnmap(CUdeviceptr ptr, std::size_t size);
CUresult cuMemSetAccess(CUdeviceptr ptr, std::size_t size, const CUmemAccessDesc* desc,
                        std::size_t count);
CUresult cuMemGetAllocationGranularity(std::size_t* granularity, const CUmemAllocationProp* prop,
                                       CUmemAllocationGranularity_flags option);
CUresult cuMemExportToShareableHandle(void* handle, CUmemGenericAllocationHandle source,
                                      CUmemAllocationHandleType type, unsigned long long flags);
CUresult cuMemImportFromShareableHandle(CUmemGenericAllocationHandle* handle, void* os_handle,
                                        CUmemAllocationHandleType type);
CUresult cuMemsetD32Async(CUdeviceptr dst, unsigned int value, std::size_t count, CUstream stream);
CUresult cuStreamWriteValue32(CUstream stream, CUdeviceptr addr, unsigned int value,
                              unsigned int flags);
CUresult cuGetErrorString(CUresult error, const char** text);
}
