// The vocabulary of the fake CUDA driver (fake_cuda.cpp): the types, constants and function
// pointer types of the driver API, taken from the CUDA toolkit's cuda.h and cudaTypedefs.h
// wherever a toolkit is installed (FAKECU_WITH_CUDA_H, which CMake sets then), so that the fake
// shares no ABI mistake with cachalot's own declarations (src/detail/cuda_driver.hpp) and its
// cuGetProcAddress answers as the real driver would (fake_cuda_abi_versions.inc, generated from
// cudaTypedefs.h). Without a toolkit it falls back to cachalot's declarations, spelled as in
// cuda.h; the few values those lack are written out below from cuda.h.
//
// Invariant: fake_cuda.cpp uses only cuda.h's names (CUDA_SUCCESS, CUmemAllocationProp,
// CU_STREAM_CAPTURE_MODE_GLOBAL, ...); with a toolkit, each entry point it hands out is checked
// at compile time against cudaTypedefs.h's PFN_cu<name>_v<version> (FAKECU_CHECKED_PFN).
#pragma once

#include <cstdint>

#if defined(FAKECU_WITH_CUDA_H)

#include <cuda.h>
#include <cudaTypedefs.h>

// cuda.h maps cuGetProcAddress to cuGetProcAddress_v2 (the CUDA 12.0 ABI); the fake also exports
// the CUDA 11.3 one under its own name.
#undef cuGetProcAddress

#define FAKECU_CHECKED_PFN(name, version) PFN_cu##name##_v##version

/// One function pointer typedef of cudaTypedefs.h: the entry point, the CUDA version of its
/// ABI, and whether it is the per-thread default stream variant (PFN_..._ptsz / _ptds).
struct fakecu_toolkit_abi {
  const char* name;
  int version;
  bool per_thread;
};

#else  // !FAKECU_WITH_CUDA_H: cachalot's declarations, under cuda.h's names

#include "detail/cuda_driver.hpp"

using namespace cachalot::detail::cu;  // NOLINT: CUresult, CUdevice, CUmemAllocationProp, ...

using cuuint64_t = std::uint64_t;
using CUdevice_attribute = int;
using CUstreamCaptureStatus = int;
using CUstreamCaptureMode = int;
using CUmemAllocationGranularity_flags = int;
using CUdriverProcAddressQueryResult = int;

inline constexpr CUresult CUDA_SUCCESS = kSuccess;
inline constexpr CUresult CUDA_ERROR_INVALID_VALUE = kErrorInvalidValue;
inline constexpr CUresult CUDA_ERROR_OUT_OF_MEMORY = kErrorOutOfMemory;
inline constexpr CUresult CUDA_ERROR_NOT_INITIALIZED = kErrorNotInitialized;
inline constexpr CUresult CUDA_ERROR_DEINITIALIZED = kErrorDeinitialized;
inline constexpr CUresult CUDA_ERROR_INVALID_DEVICE = kErrorInvalidDevice;
inline constexpr CUresult CUDA_ERROR_INVALID_CONTEXT = kErrorInvalidContext;
inline constexpr CUresult CUDA_ERROR_INVALID_HANDLE = kErrorInvalidHandle;
inline constexpr CUresult CUDA_ERROR_NOT_READY = kErrorNotReady;
inline constexpr CUresult CUDA_ERROR_CONTEXT_IS_DESTROYED = kErrorContextIsDestroyed;
inline constexpr CUresult CUDA_ERROR_NOT_SUPPORTED = kErrorNotSupported;
inline constexpr CUresult CUDA_ERROR_STREAM_CAPTURE_UNSUPPORTED = kErrorStreamCaptureUnsupported;
inline constexpr CUresult CUDA_ERROR_STREAM_CAPTURE_INVALIDATED = kErrorStreamCaptureInvalidated;
inline constexpr CUresult CUDA_ERROR_STREAM_CAPTURE_IMPLICIT = kErrorStreamCaptureImplicit;
inline constexpr CUresult CUDA_ERROR_CAPTURED_EVENT = kErrorCapturedEvent;
inline constexpr CUresult CUDA_ERROR_UNKNOWN = kErrorUnknown;
inline constexpr int CU_DEVICE_ATTRIBUTE_VIRTUAL_MEMORY_MANAGEMENT_SUPPORTED =
    kDeviceAttributeVirtualMemoryManagementSupported;
inline constexpr int CU_STREAM_CAPTURE_STATUS_NONE = kStreamCaptureStatusNone;
inline constexpr int CU_STREAM_CAPTURE_STATUS_ACTIVE = kStreamCaptureStatusActive;
inline constexpr int CU_STREAM_CAPTURE_STATUS_INVALIDATED = kStreamCaptureStatusInvalidated;
inline constexpr int CU_STREAM_CAPTURE_MODE_GLOBAL = kStreamCaptureModeGlobal;
inline constexpr int CU_STREAM_CAPTURE_MODE_THREAD_LOCAL = kStreamCaptureModeThreadLocal;
inline constexpr int CU_STREAM_CAPTURE_MODE_RELAXED = kStreamCaptureModeRelaxed;
inline constexpr int CU_MEM_ALLOCATION_TYPE_PINNED = kMemAllocationTypePinned;
inline constexpr int CU_MEM_LOCATION_TYPE_DEVICE = kMemLocationTypeDevice;
inline constexpr int CU_MEM_ACCESS_FLAGS_PROT_READWRITE = kMemAccessFlagsProtReadWrite;
inline constexpr int CU_MEM_ALLOC_GRANULARITY_MINIMUM = kMemAllocGranularityMinimum;
inline constexpr int CU_MEM_ALLOC_GRANULARITY_RECOMMENDED = kMemAllocGranularityRecommended;
inline constexpr std::uint64_t CU_GET_PROC_ADDRESS_LEGACY_STREAM = kGetProcAddressLegacyStream;
inline constexpr std::uint64_t CU_GET_PROC_ADDRESS_PER_THREAD_DEFAULT_STREAM = 1u << 1;
inline constexpr int CU_GET_PROC_ADDRESS_SUCCESS = kGetProcAddressSuccess;
inline constexpr int CU_GET_PROC_ADDRESS_SYMBOL_NOT_FOUND = 1;
inline constexpr int CU_GET_PROC_ADDRESS_VERSION_NOT_SUFFICIENT = 2;
// CUevent_flags, CUstream_flags (cuda.h).
inline constexpr unsigned CU_EVENT_BLOCKING_SYNC = 0x1;
inline constexpr unsigned CU_EVENT_DISABLE_TIMING = kEventDisableTiming;
inline constexpr unsigned CU_EVENT_INTERPROCESS = 0x4;
inline constexpr unsigned CU_STREAM_NON_BLOCKING = 0x1;

#endif  // FAKECU_WITH_CUDA_H
