// cachalot's own declarations of the CUDA driver ABI (src/detail/cuda_driver.hpp) and its run-time
// choices, checked against the toolkit's cuda.h and cudaTypedefs.h. Built only where a CUDA
// toolkit is found (CI has one).
//
// At compile time: every entry point's function type at the version cachalot asks
// cuGetProcAddress for (PFN_cu<name>_v<version>), every constant, and the layout of every
// structure. Types are compared as the ABI sees them: an enum as an integer of its size, integers
// by size, cachalot's structures as the toolkit's (whose layouts are checked separately).
//
// At run time, on the fake driver (compiled against the toolkit's headers, not cachalot's; its
// path is compiled in, or given with --fake PATH): what the loader really asks cuGetProcAddress
// for (exactly the entry points of the X-macro lists, each by its base name, at its declared
// version, with CU_GET_PROC_ADDRESS_LEGACY_STREAM, and each selecting that very ABI by
// cudaTypedefs.h's table) and what the backend really passes (CU_EVENT_DISABLE_TIMING,
// CU_MEM_ALLOC_GRANULARITY_MINIMUM, a chunk's properties and access flags, which the fake checks
// against cuda.h's values). Then, where a real driver loads (libcuda.so.1, or --driver PATH), that
// it hands out every entry point at cachalot's versions; without one that part says why it was
// skipped. Also the special stream handles, which are not constant expressions.
// Prints a PASS/FAIL/SKIP line per check; exit 0 when none failed, else 1.
#include <cuda.h>
#include <cudaTypedefs.h>

#include <cstddef>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <set>
#include <string>
#include <type_traits>

#include "cachalot/backend.hpp"
#include "cachalot/cuda_backend.hpp"
#include "detail/cuda_driver.hpp"
#include "fake_driver/fake_cuda_control.hpp"

namespace cu = cachalot::detail::cu;

namespace {

template <class T>
struct type_is {
  using type = T;
};

template <std::size_t N>
using uint_of_size =
    std::conditional_t<N == 8, std::uint64_t,
                       std::conditional_t<N == 4, std::uint32_t,
                                          std::conditional_t<N == 2, std::uint16_t, std::uint8_t>>>;

// The type `T` is as far as the calling convention is concerned.
template <class T>
constexpr auto abi_of() {
  using U = std::remove_cv_t<T>;
  if constexpr (std::is_pointer_v<U>) {
    using P = std::remove_pointer_t<U>;
    using Q = typename decltype(abi_of<P>())::type;
    if constexpr (std::is_const_v<P>) {
      return type_is<const Q*>{};
    } else {
      return type_is<Q*>{};
    }
  } else if constexpr (std::is_enum_v<U> || std::is_integral_v<U>) {
    return type_is<uint_of_size<sizeof(U)>>{};
  } else if constexpr (std::is_same_v<U, cu::CUmemAllocationProp>) {
    return type_is<::CUmemAllocationProp>{};
  } else if constexpr (std::is_same_v<U, cu::CUmemAccessDesc>) {
    return type_is<::CUmemAccessDesc>{};
  } else {
    return type_is<U>{};
  }
}
template <class T>
using abi_t = typename decltype(abi_of<T>())::type;

template <class F>
struct abi_fn;
template <class R, class... A>
struct abi_fn<R (*)(A...)> {
  using type = abi_t<R> (*)(abi_t<A>...);
};
template <class F>
using abi_fn_t = typename abi_fn<F>::type;

template <class Mine, class Cuda>
constexpr bool same_abi = std::is_same_v<abi_fn_t<Mine>, abi_fn_t<Cuda>>;

// --- Entry points -------------------------------------------------------------------------------
#define CACHALOT_CHECK_PFN(name, version, params)                    \
  static_assert(same_abi<cu::pfn_##name, PFN_cu##name##_v##version>, \
                "cu" #name " differs from PFN_cu" #name "_v" #version);
CACHALOT_CU_REQUIRED_ENTRY_POINTS(CACHALOT_CHECK_PFN)
CACHALOT_CU_VM_ENTRY_POINTS(CACHALOT_CHECK_PFN)
CACHALOT_CU_HOST_ENTRY_POINTS(CACHALOT_CHECK_PFN)
#undef CACHALOT_CHECK_PFN
static_assert(same_abi<cu::pfn_DriverGetVersion, PFN_cuDriverGetVersion_v2020>);
static_assert(same_abi<cu::pfn_Init, PFN_cuInit_v2000>);
static_assert(same_abi<cu::pfn_GetErrorName, PFN_cuGetErrorName_v6000>);
static_assert(same_abi<cu::pfn_GetErrorString, PFN_cuGetErrorString_v6000>);
static_assert(same_abi<cu::pfn_GetProcAddress_v11030, PFN_cuGetProcAddress_v11030>);
static_assert(same_abi<cu::pfn_GetProcAddress_v12000, PFN_cuGetProcAddress_v12000>);

// --- Handles and scalar types -------------------------------------------------------------------
static_assert(std::is_same_v<cu::CUcontext, ::CUcontext>);
static_assert(std::is_same_v<cu::CUstream, ::CUstream>);
static_assert(std::is_same_v<cu::CUevent, ::CUevent>);
static_assert(std::is_same_v<cu::CUdevice, ::CUdevice>);
static_assert(std::is_same_v<cu::CUdeviceptr, ::CUdeviceptr>);
static_assert(std::is_same_v<cu::CUmemGenericAllocationHandle, ::CUmemGenericAllocationHandle>);
static_assert(sizeof(cu::CUresult) == sizeof(::CUresult));

// --- Constants ----------------------------------------------------------------------------------
static_assert(cu::kSuccess == CUDA_SUCCESS);
static_assert(cu::kErrorInvalidValue == CUDA_ERROR_INVALID_VALUE);
static_assert(cu::kErrorOutOfMemory == CUDA_ERROR_OUT_OF_MEMORY);
static_assert(cu::kErrorNotInitialized == CUDA_ERROR_NOT_INITIALIZED);
static_assert(cu::kErrorDeinitialized == CUDA_ERROR_DEINITIALIZED);
static_assert(cu::kErrorNoDevice == CUDA_ERROR_NO_DEVICE);
static_assert(cu::kErrorInvalidDevice == CUDA_ERROR_INVALID_DEVICE);
static_assert(cu::kErrorInvalidContext == CUDA_ERROR_INVALID_CONTEXT);
static_assert(cu::kErrorInvalidHandle == CUDA_ERROR_INVALID_HANDLE);
static_assert(cu::kErrorNotFound == CUDA_ERROR_NOT_FOUND);
static_assert(cu::kErrorNotReady == CUDA_ERROR_NOT_READY);
static_assert(cu::kErrorContextIsDestroyed == CUDA_ERROR_CONTEXT_IS_DESTROYED);
static_assert(cu::kErrorNotSupported == CUDA_ERROR_NOT_SUPPORTED);
static_assert(cu::kErrorStreamCaptureUnsupported == CUDA_ERROR_STREAM_CAPTURE_UNSUPPORTED);
static_assert(cu::kErrorStreamCaptureInvalidated == CUDA_ERROR_STREAM_CAPTURE_INVALIDATED);
static_assert(cu::kErrorStreamCaptureImplicit == CUDA_ERROR_STREAM_CAPTURE_IMPLICIT);
static_assert(cu::kErrorCapturedEvent == CUDA_ERROR_CAPTURED_EVENT);
static_assert(cu::kErrorUnknown == CUDA_ERROR_UNKNOWN);
static_assert(cu::kDeviceAttributeVirtualMemoryManagementSupported ==
              CU_DEVICE_ATTRIBUTE_VIRTUAL_MEMORY_MANAGEMENT_SUPPORTED);
static_assert(cu::kEventDisableTiming == CU_EVENT_DISABLE_TIMING);
static_assert(cu::kStreamCaptureStatusNone == CU_STREAM_CAPTURE_STATUS_NONE);
static_assert(cu::kStreamCaptureStatusActive == CU_STREAM_CAPTURE_STATUS_ACTIVE);
static_assert(cu::kStreamCaptureStatusInvalidated == CU_STREAM_CAPTURE_STATUS_INVALIDATED);
static_assert(cu::kStreamCaptureModeGlobal == CU_STREAM_CAPTURE_MODE_GLOBAL);
static_assert(cu::kStreamCaptureModeThreadLocal == CU_STREAM_CAPTURE_MODE_THREAD_LOCAL);
static_assert(cu::kStreamCaptureModeRelaxed == CU_STREAM_CAPTURE_MODE_RELAXED);
static_assert(cu::kMemAllocationTypePinned == CU_MEM_ALLOCATION_TYPE_PINNED);
static_assert(cu::kMemHandleTypeNone == CU_MEM_HANDLE_TYPE_NONE);
static_assert(cu::kMemLocationTypeDevice == CU_MEM_LOCATION_TYPE_DEVICE);
static_assert(cu::kMemAccessFlagsProtReadWrite == CU_MEM_ACCESS_FLAGS_PROT_READWRITE);
static_assert(cu::kMemAllocGranularityMinimum == CU_MEM_ALLOC_GRANULARITY_MINIMUM);
static_assert(cu::kMemAllocGranularityRecommended == CU_MEM_ALLOC_GRANULARITY_RECOMMENDED);
static_assert(cu::kGetProcAddressLegacyStream == CU_GET_PROC_ADDRESS_LEGACY_STREAM);
static_assert(cu::kGetProcAddressSuccess == CU_GET_PROC_ADDRESS_SUCCESS);
// cachalot's capture_mode values are the driver's (cuda_backend passes them through).
static_assert(static_cast<int>(cachalot::capture_mode::global) == CU_STREAM_CAPTURE_MODE_GLOBAL);
static_assert(static_cast<int>(cachalot::capture_mode::this_thread) ==
              CU_STREAM_CAPTURE_MODE_THREAD_LOCAL);
static_assert(static_cast<int>(cachalot::capture_mode::relaxed) == CU_STREAM_CAPTURE_MODE_RELAXED);

// --- Structure layouts --------------------------------------------------------------------------
#define CACHALOT_CHECK_FIELD(mine, cuda, field)                                     \
  static_assert(offsetof(mine, field) == offsetof(cuda, field), #mine "::" #field); \
  static_assert(sizeof(mine::field) == sizeof(cuda::field), #mine "::" #field)
static_assert(sizeof(cu::CUmemLocation) == sizeof(::CUmemLocation));
CACHALOT_CHECK_FIELD(cu::CUmemLocation, ::CUmemLocation, type);
CACHALOT_CHECK_FIELD(cu::CUmemLocation, ::CUmemLocation, id);
static_assert(sizeof(cu::CUmemAllocationProp) == sizeof(::CUmemAllocationProp));
CACHALOT_CHECK_FIELD(cu::CUmemAllocationProp, ::CUmemAllocationProp, type);
CACHALOT_CHECK_FIELD(cu::CUmemAllocationProp, ::CUmemAllocationProp, requestedHandleTypes);
CACHALOT_CHECK_FIELD(cu::CUmemAllocationProp, ::CUmemAllocationProp, location);
CACHALOT_CHECK_FIELD(cu::CUmemAllocationProp, ::CUmemAllocationProp, win32HandleMetaData);
CACHALOT_CHECK_FIELD(cu::CUmemAllocationProp, ::CUmemAllocationProp, allocFlags);
static_assert(sizeof(cu::CUmemAccessDesc) == sizeof(::CUmemAccessDesc));
CACHALOT_CHECK_FIELD(cu::CUmemAccessDesc, ::CUmemAccessDesc, location);
CACHALOT_CHECK_FIELD(cu::CUmemAccessDesc, ::CUmemAccessDesc, flags);
#undef CACHALOT_CHECK_FIELD

// --- Run time -----------------------------------------------------------------------------------
int g_failed = 0;

void check(bool ok, const std::string& what) {
  std::printf("%s: %s\n", ok ? "PASS" : "FAIL", what.c_str());
  if (!ok) ++g_failed;
}

struct entry_point {
  const char* name;
  int version;
};
#define CACHALOT_ENTRY(name, version, params) {"cu" #name, version},
constexpr entry_point kEntryPoints[] = {CACHALOT_CU_REQUIRED_ENTRY_POINTS(CACHALOT_ENTRY)
                                            CACHALOT_CU_VM_ENTRY_POINTS(CACHALOT_ENTRY)
                                                CACHALOT_CU_HOST_ENTRY_POINTS(CACHALOT_ENTRY)};
#undef CACHALOT_ENTRY

// The loader's requests and the backend's arguments, as the fake driver recorded them.
void check_on_fake_driver(const std::string& path) {
  setenv("CACHALOT_CUDA_DRIVER", path.c_str(), 1);  // before anything loads the driver
  cachalot::testing::fake_cuda_control ctl(path);
  if (!ctl.ok()) {
    check(false, "fake driver " + path + ": " + ctl.error);
    return;
  }
  const cu::driver_load& d = cu::process_driver();
  check(d.ok() && d.vm_missing.empty(),
        "the loader resolves every entry point on the fake driver " + path +
            (d.ok() ? d.vm_missing : d.error));
  std::string expected;
  std::set<std::string> names;
  for (const entry_point& e : kEntryPoints) names.insert(e.name);
  for (const std::string& n : names) expected += (expected.empty() ? "" : "+") + n;
  const std::string asked = ctl.requested_symbols();
  check(asked == expected,
        "cuGetProcAddress asked for exactly the declared entry points, by base "
        "name (asked: " +
            asked + ")");
  for (const entry_point& e : kEntryPoints) {
    const int version = ctl.proc_version(e.name);
    const long long flags = ctl.proc_flags(e.name);
    const int other = ctl.abi_mismatch(e.name);
    check(version == e.version && flags == CU_GET_PROC_ADDRESS_LEGACY_STREAM && other == 0,
          std::string(e.name) + " asked at CUDA " + std::to_string(version) + " (declared " +
              std::to_string(e.version) + "), flags " + std::to_string(flags) +
              " (CU_GET_PROC_ADDRESS_LEGACY_STREAM is " +
              std::to_string(CU_GET_PROC_ADDRESS_LEGACY_STREAM) + ")" +
              (other != 0 ? ", but that version selects the ABI of CUDA " + std::to_string(other)
                          : std::string()));
  }
  try {
    auto b = cachalot::make_cuda_backend(0);
    check(ctl.last_granularity_option() == CU_MEM_ALLOC_GRANULARITY_MINIMUM,
          "cuMemGetAllocationGranularity is asked for CU_MEM_ALLOC_GRANULARITY_MINIMUM (option " +
              std::to_string(ctl.last_granularity_option()) + ")");
    const cachalot::event_t ev = b->create_event();
    check(ctl.last_event_flags() == CU_EVENT_DISABLE_TIMING,
          "cuEventCreate gets CU_EVENT_DISABLE_TIMING (flags " +
              std::to_string(ctl.last_event_flags()) + ")");
    b->destroy_event(ev);
    const std::size_t g = b->vm_granularity();
    void* range = b->reserve_address_range(2 * g);
    const bool mapped = b->map_chunk(range, g);
    check(mapped && ctl.mapping_access(reinterpret_cast<std::uintptr_t>(range)) == 1u,
          "cuMemCreate, cuMemMap and cuMemSetAccess accept the chunk's properties and access "
          "(pinned device memory, read-write: cuda.h's values)");
    if (mapped) b->unmap_chunk(range, g);
    b->release_address_range(range, 2 * g);
  } catch (const std::exception& e) {
    check(false, std::string("the backend on the fake driver: ") + e.what());
  }
}

// A real driver hands out every entry point at cachalot's versions.
void check_on_real_driver(const std::string& path) {
  const cu::driver_load d = cu::load_driver(path.c_str());
  if (!d.ok() && d.error.find("lacks cu") == std::string::npos) {  // no driver, or cuInit failed
    std::printf("SKIP: the real driver's entry points: %s\n", d.error.c_str());
    return;
  }
  check(d.ok(), "the real driver " + path + " (CUDA " + cu::version_string(d.version) +
                    ") has every required entry point at cachalot's versions" +
                    (d.ok() ? std::string() : ": " + d.error));
  if (d.ok()) {
    check(d.vm_missing.empty(), "and the virtual memory ones" +
                                    (d.vm_missing.empty() ? std::string() : ": " + d.vm_missing));
  }
}

}  // namespace

int main(int argc, char** argv) {
  std::string fake;
#ifdef CACHALOT_TEST_FAKE_CUDA
  fake = CACHALOT_TEST_FAKE_CUDA;
#endif
  std::string real = "libcuda.so.1";
  for (int i = 1; i + 1 < argc; i += 2) {
    const std::string opt = argv[i];
    if (opt == "--fake") fake = argv[i + 1];
    if (opt == "--driver") real = argv[i + 1];
  }
  int bad = 0;
  if (cu::stream_legacy() != CU_STREAM_LEGACY) {
    std::puts("cu::stream_legacy() differs from CU_STREAM_LEGACY");
    ++bad;
  }
  if (cu::stream_per_thread() != CU_STREAM_PER_THREAD) {
    std::puts("cu::stream_per_thread() differs from CU_STREAM_PER_THREAD");
    ++bad;
  }
  std::printf("driver ABI declarations match cuda.h of CUDA %d.%d\n", CUDA_VERSION / 1000,
              (CUDA_VERSION % 1000) / 10);
  g_failed += bad;
  if (fake.empty()) {
    check(false, "no fake driver to check the loader's requests on (--fake PATH)");
  } else {
    check_on_fake_driver(fake);
  }
  check_on_real_driver(real);
  return g_failed == 0 ? 0 : 1;
}
