// The CUDA driver as cachalot sees it: the few types, constants and entry points of the driver
// API (cuda.h) that the CUDA backend calls, declared here instead of taken from the toolkit,
// and the loader that finds them at run time in libcuda.so.1.
//
// Why our own declarations: libcachalot.so must build, load and run its tests on machines
// without a CUDA toolkit, and it must never link the driver (only dlopen it). Every declaration
// below is the ABI of one versioned driver entry point (the version is in the X-macro lists),
// and tests/cuda/driver_abi_test.cpp checks each against cuda.h/cudaTypedefs.h wherever a
// toolkit is installed: with static_asserts, and at run time on the fake driver (built against
// the toolkit's headers) for the names, versions and flags the loader really asks for. Names
// avoid cuda.h's macros (cuMemAlloc, CU_STREAM_LEGACY, ...) so that both headers can be included
// together there.
//
// Loader invariants:
//  - the process loads the driver once (thread-safe), from $CACHALOT_CUDA_DRIVER if set, else
//    "libcuda.so.1"; the library is never unloaded; a failure is remembered with its cause;
//  - cuDriverGetVersion, cuInit, cuGetErrorName/String and cuGetProcAddress are taken with
//    dlsym (each has a single ABI); every other entry point comes from cuGetProcAddress with the
//    CUDA version whose ABI is declared here and the legacy-stream flag, so that a NULL stream
//    means the legacy default stream, as in the runtime without --default-stream per-thread;
//  - a driver older than CUDA 11.3 (no cuGetProcAddress) is refused with that reason.
#pragma once

#include <cstddef>
#include <cstdint>
#include <string>

// Opaque driver handles: the same tags as cuda.h (and cudaStream_t, cudaEvent_t of the runtime,
// which are CUstream_st* and CUevent_st*), so a runtime stream is a CUstream without a cast.
struct CUctx_st;
struct CUstream_st;
struct CUevent_st;

namespace cachalot::detail::cu {

using CUresult = int;                                     ///< cudaError_enum
using CUdevice = int;                                     ///< CUdevice_v1
using CUdeviceptr = unsigned long long;                   ///< CUdeviceptr_v2
using CUcontext = ::CUctx_st*;                            ///< CUcontext
using CUstream = ::CUstream_st*;                          ///< CUstream
using CUevent = ::CUevent_st*;                            ///< CUevent
using CUmemGenericAllocationHandle = unsigned long long;  ///< CUmemGenericAllocationHandle_v1

// --- CUresult values ----------------------------------------------------------------------
inline constexpr CUresult kSuccess = 0;
inline constexpr CUresult kErrorInvalidValue = 1;
inline constexpr CUresult kErrorOutOfMemory = 2;
inline constexpr CUresult kErrorNotInitialized = 3;
inline constexpr CUresult kErrorDeinitialized = 4;  ///< the driver is shutting down
inline constexpr CUresult kErrorNoDevice = 100;
inline constexpr CUresult kErrorInvalidDevice = 101;
inline constexpr CUresult kErrorInvalidContext = 201;
inline constexpr CUresult kErrorInvalidHandle = 400;
inline constexpr CUresult kErrorNotFound = 500;
inline constexpr CUresult kErrorNotReady = 600;
inline constexpr CUresult kErrorContextIsDestroyed = 709;
inline constexpr CUresult kErrorNotSupported = 801;
inline constexpr CUresult kErrorStreamCaptureUnsupported = 900;
inline constexpr CUresult kErrorStreamCaptureInvalidated = 901;
inline constexpr CUresult kErrorStreamCaptureImplicit = 906;
inline constexpr CUresult kErrorCapturedEvent = 907;
inline constexpr CUresult kErrorUnknown = 999;

// --- Enumerations (C enums are 32-bit integers in the driver's ABI) ---------------------------
inline constexpr int kDeviceAttributeVirtualMemoryManagementSupported = 102;
inline constexpr unsigned kEventDisableTiming = 0x2;
inline constexpr int kStreamCaptureStatusNone = 0;
inline constexpr int kStreamCaptureStatusActive = 1;
inline constexpr int kStreamCaptureStatusInvalidated = 2;
inline constexpr int kStreamCaptureModeGlobal = 0;
inline constexpr int kStreamCaptureModeThreadLocal = 1;
inline constexpr int kStreamCaptureModeRelaxed = 2;
inline constexpr int kMemAllocationTypePinned = 0x1;
inline constexpr int kMemHandleTypeNone = 0x0;
inline constexpr int kMemLocationTypeDevice = 0x1;
inline constexpr int kMemAccessFlagsProtReadWrite = 0x3;
inline constexpr int kMemAllocGranularityMinimum = 0x0;
inline constexpr int kMemAllocGranularityRecommended = 0x1;
inline constexpr std::uint64_t kGetProcAddressLegacyStream = 1u << 0;
inline constexpr int kGetProcAddressSuccess = 0;

/// The special stream handles (cuda.h's CU_STREAM_LEGACY, CU_STREAM_PER_THREAD; the runtime's
/// cudaStreamLegacy, cudaStreamPerThread have the same values).
inline CUstream stream_legacy() noexcept {
  return reinterpret_cast<CUstream>(std::uintptr_t{0x1});
}
inline CUstream stream_per_thread() noexcept {
  return reinterpret_cast<CUstream>(std::uintptr_t{0x2});
}

// --- Structures of the virtual memory API ------------------------------------------------------
/// CUmemLocation_v1.
struct CUmemLocation {
  int type;  ///< CUmemLocationType
  int id;
};
/// CUmemAllocationProp_v1.
struct CUmemAllocationProp {
  int type;                  ///< CUmemAllocationType
  int requestedHandleTypes;  ///< CUmemAllocationHandleType
  CUmemLocation location;
  void* win32HandleMetaData;
  struct {
    unsigned char compressionType;
    unsigned char gpuDirectRDMACapable;
    unsigned short usage;
    unsigned char reserved[4];
  } allocFlags;
};
/// CUmemAccessDesc_v1.
struct CUmemAccessDesc {
  CUmemLocation location;
  int flags;  ///< CUmemAccess_flags
};

// --- Entry points ------------------------------------------------------------------------------
// X(name, version, parameters): cu<name> at the ABI of CUDA <version> (1000*major +
// 10*minor), as cudaTypedefs.h spells it: PFN_cu<name>_v<version>.

/// Entry points the backend cannot work without.
#define CACHALOT_CU_REQUIRED_ENTRY_POINTS(X)                                      \
  X(DeviceGet, 2000, (CUdevice * device, int ordinal))                            \
  X(DeviceGetCount, 2000, (int* count))                                           \
  X(DeviceGetAttribute, 2000, (int* value, int attribute, CUdevice device))       \
  X(DeviceCanAccessPeer, 4000, (int* can_access, CUdevice device, CUdevice peer)) \
  X(DevicePrimaryCtxRetain, 7000, (CUcontext * context, CUdevice device))         \
  X(DevicePrimaryCtxRelease, 11000, (CUdevice device))                            \
  X(CtxGetCurrent, 4000, (CUcontext * context))                                   \
  X(CtxSetCurrent, 4000, (CUcontext context))                                     \
  X(CtxSynchronize, 2000, ())                                                     \
  X(MemAlloc, 3020, (CUdeviceptr * ptr, std::size_t bytes))                       \
  X(MemFree, 3020, (CUdeviceptr ptr))                                             \
  X(MemGetInfo, 3020, (std::size_t * free_bytes, std::size_t * total_bytes))      \
  X(EventCreate, 2000, (CUevent * event, unsigned int flags))                     \
  X(EventRecord, 2000, (CUevent event, CUstream stream))                          \
  X(EventQuery, 2000, (CUevent event))                                            \
  X(EventSynchronize, 2000, (CUevent event))                                      \
  X(EventDestroy, 4000, (CUevent event))                                          \
  X(StreamGetCtx, 9020, (CUstream stream, CUcontext * context))                   \
  X(StreamIsCapturing, 10000, (CUstream stream, int* status))                     \
  X(ThreadExchangeStreamCaptureMode, 10010, (int* mode))

/// The virtual memory management API (expandable segments); optional.
#define CACHALOT_CU_VM_ENTRY_POINTS(X)                                                            \
  X(MemAddressReserve, 10020,                                                                     \
    (CUdeviceptr * ptr, std::size_t bytes, std::size_t alignment, CUdeviceptr addr,               \
     unsigned long long flags))                                                                   \
  X(MemAddressFree, 10020, (CUdeviceptr ptr, std::size_t bytes))                                  \
  X(MemCreate, 10020,                                                                             \
    (CUmemGenericAllocationHandle * handle, std::size_t bytes, const CUmemAllocationProp* prop,   \
     unsigned long long flags))                                                                   \
  X(MemRelease, 10020, (CUmemGenericAllocationHandle handle))                                     \
  X(MemMap, 10020,                                                                                \
    (CUdeviceptr ptr, std::size_t bytes, std::size_t offset, CUmemGenericAllocationHandle handle, \
     unsigned long long flags))                                                                   \
  X(MemUnmap, 10020, (CUdeviceptr ptr, std::size_t bytes))                                        \
  X(MemSetAccess, 10020,                                                                          \
    (CUdeviceptr ptr, std::size_t bytes, const CUmemAccessDesc* desc, std::size_t count))         \
  X(MemGetAllocationGranularity, 10020,                                                           \
    (std::size_t * granularity, const CUmemAllocationProp* prop, int option))

/// Pinned host memory and copies between it and device memory (sleep and wake of memory
/// pools); optional.
#define CACHALOT_CU_HOST_ENTRY_POINTS(X)                                                     \
  X(MemHostAlloc, 2020, (void** ptr, std::size_t bytes, unsigned int flags))                 \
  X(MemFreeHost, 2000, (void* ptr))                                                          \
  X(MemcpyDtoHAsync, 3020, (void* dst, CUdeviceptr src, std::size_t bytes, CUstream stream)) \
  X(MemcpyHtoDAsync, 3020, (CUdeviceptr dst, const void* src, std::size_t bytes, CUstream stream))

/// Entry points with a single ABI, taken from the library with dlsym.
using pfn_DriverGetVersion = CUresult (*)(int* version);
using pfn_Init = CUresult (*)(unsigned int flags);
using pfn_GetErrorName = CUresult (*)(CUresult error, const char** name);
using pfn_GetErrorString = CUresult (*)(CUresult error, const char** text);
/// cuGetProcAddress as exported since CUDA 11.3 ("cuGetProcAddress").
using pfn_GetProcAddress_v11030 = CUresult (*)(const char* symbol, void** pfn, int version,
                                               std::uint64_t flags);
/// cuGetProcAddress as exported since CUDA 12.0 ("cuGetProcAddress_v2").
using pfn_GetProcAddress_v12000 = CUresult (*)(const char* symbol, void** pfn, int version,
                                               std::uint64_t flags, int* symbol_status);

// `params` is a parenthesized parameter list already.
#define CACHALOT_CU_DECLARE_PFN(name, version, params) \
  using pfn_##name = CUresult(*) params;  // NOLINT(bugprone-macro-parentheses)
CACHALOT_CU_REQUIRED_ENTRY_POINTS(CACHALOT_CU_DECLARE_PFN)
CACHALOT_CU_VM_ENTRY_POINTS(CACHALOT_CU_DECLARE_PFN)
CACHALOT_CU_HOST_ENTRY_POINTS(CACHALOT_CU_DECLARE_PFN)
#undef CACHALOT_CU_DECLARE_PFN

/// The driver's entry points: a member per function, named as in cuda.h without "cu".
struct driver_api {
  pfn_DriverGetVersion DriverGetVersion = nullptr;
  pfn_Init Init = nullptr;
  pfn_GetErrorName GetErrorName = nullptr;
  pfn_GetErrorString GetErrorString = nullptr;
#define CACHALOT_CU_MEMBER(name, version, params) pfn_##name name = nullptr;
  CACHALOT_CU_REQUIRED_ENTRY_POINTS(CACHALOT_CU_MEMBER)
  CACHALOT_CU_VM_ENTRY_POINTS(CACHALOT_CU_MEMBER)
  CACHALOT_CU_HOST_ENTRY_POINTS(CACHALOT_CU_MEMBER)
#undef CACHALOT_CU_MEMBER
};

/// The oldest driver cachalot accepts (cuGetProcAddress appeared in CUDA 11.3).
inline constexpr int kMinimumDriverVersion = 11030;

/// The outcome of loading a driver library.
struct driver_load {
  driver_api api;          ///< every required entry point set when `error` is empty
  std::string path;        ///< the library asked for
  int version = 0;         ///< cuDriverGetVersion (e.g. 12040), 0 when unknown
  std::string error;       ///< why the driver cannot be used ("" when it can)
  std::string vm_missing;  ///< why the virtual memory API is unavailable ("" when it is)
  /// why pinned host memory and its copies are unavailable ("" when they are)
  std::string host_missing;
  bool ok() const noexcept { return error.empty(); }
};

/// Loads the driver library at `path`, calls cuInit(0) and resolves every entry point. Never
/// throws except std::bad_alloc; the library stays loaded. The process uses it once, through
/// process_driver(); tests call it directly to see each failure.
driver_load load_driver(const char* path);

/// The library the process loads: $CACHALOT_CUDA_DRIVER when set and not empty, else
/// "libcuda.so.1".
std::string driver_path();

/// The process's driver, loaded on first use (thread-safe). Never throws except bad_alloc.
const driver_load& process_driver();

/// The process's driver entry points. @throws backend_error naming why there is no driver
const driver_api& driver();

/// "12.4" for 12040.
std::string version_string(int version);

/// "CUDA_ERROR_OUT_OF_MEMORY (out of memory)" for a result of `api`'s driver.
std::string describe(const driver_api& api, CUresult result);

/// Throws the backend_error of a failed driver call: the call as written, the result's name and
/// string, and the source location.
[[noreturn, gnu::cold]] void throw_error(CUresult result, const char* call, const char* file,
                                         int line);

/// Devices the process's driver sees; 0 with `*why` set (when not null) to the reason otherwise.
int device_count(std::string* why) noexcept;

}  // namespace cachalot::detail::cu

/// Checks a CUresult: anything but success throws backend_error naming `call_text`.
#define CACHALOT_CU_CHECK(result, call_text)                                                \
  do {                                                                                      \
    const ::cachalot::detail::cu::CUresult cachalot_cu_res_ = (result);                     \
    if (cachalot_cu_res_ != ::cachalot::detail::cu::kSuccess) [[unlikely]] {                \
      ::cachalot::detail::cu::throw_error(cachalot_cu_res_, call_text, __FILE__, __LINE__); \
    }                                                                                       \
  } while (false)

/// Calls cu<fn>(args...) through the table `api`; a failure throws backend_error naming the
/// call ("cuMemFree(dptr)"), the CUDA error and the source location.
#define CACHALOT_CU_TRY(api, fn, ...) \
  CACHALOT_CU_CHECK((api).fn(__VA_ARGS__), "cu" #fn "(" #__VA_ARGS__ ")")
