// The CUDA driver loader (see detail/cuda_driver.hpp for its invariants): dlopen of the driver
// library, the version check, cuInit, entry points by version through cuGetProcAddress, the
// process-wide instance, and the error text of failed driver calls.
#include "detail/cuda_driver.hpp"

#include <dlfcn.h>

#include <cstdlib>
#include <string>

#include "cachalot/errors.hpp"
#include "detail/checks.hpp"

namespace cachalot::detail::cu {

namespace {

// One way of asking the driver for an entry point: cuGetProcAddress_v2 (CUDA 12.0+) or the
// original cuGetProcAddress (CUDA 11.3+).
struct proc_lookup {
  pfn_GetProcAddress_v12000 v2 = nullptr;
  pfn_GetProcAddress_v11030 v1 = nullptr;

  // The entry point `symbol` at the ABI of CUDA `version`, legacy-stream variant; nullptr with
  // `*why` set when the driver has none.
  void* find(const char* symbol, int version, std::string* why) const {
    void* fn = nullptr;
    CUresult res = kSuccess;
    int status = kGetProcAddressSuccess;
    if (v2 != nullptr) {
      res = v2(symbol, &fn, version, kGetProcAddressLegacyStream, &status);
    } else {
      res = v1(symbol, &fn, version, kGetProcAddressLegacyStream);
    }
    if (res == kSuccess && fn != nullptr && status == kGetProcAddressSuccess) return fn;
    *why = fmt::format("cuGetProcAddress(\"{}\", CUDA {}) found nothing (result {}, status {})",
                       symbol, version_string(version), res, status);
    return nullptr;
  }
};

template <class F>
F symbol(void* lib, const char* name) {
  return reinterpret_cast<F>(dlsym(lib, name));
}

// dlsym of the entry points that have a single ABI. False with `out.error` set on failure.
bool find_exported(void* lib, driver_load& out, proc_lookup& lookup) {
  out.api.DriverGetVersion = symbol<pfn_DriverGetVersion>(lib, "cuDriverGetVersion");
  out.api.Init = symbol<pfn_Init>(lib, "cuInit");
  out.api.GetErrorName = symbol<pfn_GetErrorName>(lib, "cuGetErrorName");
  out.api.GetErrorString = symbol<pfn_GetErrorString>(lib, "cuGetErrorString");
  if (out.api.DriverGetVersion == nullptr || out.api.Init == nullptr) {
    out.error =
        fmt::format("{} is not a CUDA driver: it has no cuDriverGetVersion/cuInit", out.path);
    return false;
  }
  const CUresult res = out.api.DriverGetVersion(&out.version);
  if (res != kSuccess) {
    out.error =
        fmt::format("cuDriverGetVersion of {} failed: {}", out.path, describe(out.api, res));
    return false;
  }
  lookup.v2 = symbol<pfn_GetProcAddress_v12000>(lib, "cuGetProcAddress_v2");
  lookup.v1 = symbol<pfn_GetProcAddress_v11030>(lib, "cuGetProcAddress");
  if (out.version < kMinimumDriverVersion) {
    out.error = fmt::format(
        "the CUDA driver {} is version {}, older than the {} cachalot needs: cuGetProcAddress, "
        "its entry points by version, appeared in CUDA 11.3 (update the NVIDIA driver)",
        out.path, version_string(out.version), version_string(kMinimumDriverVersion));
    return false;
  }
  if (lookup.v1 == nullptr && lookup.v2 == nullptr) {
    out.error = fmt::format("the CUDA driver {} (version {}) exports no cuGetProcAddress", out.path,
                            version_string(out.version));
    return false;
  }
  return true;
}

// Every entry point through cuGetProcAddress. False with `out.error` set when a required one is
// missing; a missing virtual memory (host copy) entry point only sets `out.vm_missing`
// (`out.host_missing`).
bool find_versioned(const proc_lookup& lookup, driver_load& out) {
  std::string why;
#define CACHALOT_CU_FIND_REQUIRED(name, abi, params)                                           \
  out.api.name = reinterpret_cast<pfn_##name>(lookup.find("cu" #name, abi, &why));             \
  if (out.api.name == nullptr) {                                                               \
    out.error = fmt::format("the CUDA driver {} (version {}) lacks cu" #name ": {}", out.path, \
                            version_string(out.version), why);                                 \
    return false;                                                                              \
  }
  CACHALOT_CU_REQUIRED_ENTRY_POINTS(CACHALOT_CU_FIND_REQUIRED)
#undef CACHALOT_CU_FIND_REQUIRED
  // An optional entry point: a missing one names itself in `missing` (the first only).
  const auto find_optional = [&](const char* name, int abi, std::string& missing) {
    void* p = lookup.find(name, abi, &why);
    if (p == nullptr && missing.empty()) {
      missing = fmt::format("the CUDA driver (version {}) lacks {}: {}",
                            version_string(out.version), name, why);
    }
    return p;
  };
#define CACHALOT_CU_FIND_VM(name, abi, params) \
  out.api.name = reinterpret_cast<pfn_##name>(find_optional("cu" #name, abi, out.vm_missing));
  CACHALOT_CU_VM_ENTRY_POINTS(CACHALOT_CU_FIND_VM)
#undef CACHALOT_CU_FIND_VM
#define CACHALOT_CU_FIND_HOST(name, abi, params) \
  out.api.name = reinterpret_cast<pfn_##name>(find_optional("cu" #name, abi, out.host_missing));
  CACHALOT_CU_HOST_ENTRY_POINTS(CACHALOT_CU_FIND_HOST)
#undef CACHALOT_CU_FIND_HOST
  return true;
}

}  // namespace

std::string version_string(int version) {
  return fmt::format("{}.{}", version / 1000, (version % 1000) / 10);
}

std::string describe(const driver_api& api, CUresult result) {
  const char* name = nullptr;
  const char* text = nullptr;
  if (api.GetErrorName == nullptr || api.GetErrorName(result, &name) != kSuccess ||
      name == nullptr) {
    return fmt::format("CUDA driver error {}", result);
  }
  if (api.GetErrorString == nullptr || api.GetErrorString(result, &text) != kSuccess ||
      text == nullptr) {
    return name;
  }
  return fmt::format("{} ({})", name, text);
}

driver_load load_driver(const char* path) {
  driver_load out;
  out.path = path;
  void* lib = dlopen(path, RTLD_NOW | RTLD_LOCAL);
  if (lib == nullptr) {
    const char* err = dlerror();
    out.error = fmt::format(
        "cannot load the CUDA driver {}: {} (is the NVIDIA driver installed? "
        "CACHALOT_CUDA_DRIVER may name the library)",
        path, err != nullptr ? err : "dlopen failed");
    return out;
  }
  proc_lookup lookup;
  if (!find_exported(lib, out, lookup)) return out;
  const CUresult init = out.api.Init(0);
  if (init != kSuccess) {
    out.error = fmt::format("cuInit(0) of the CUDA driver {} (version {}) failed: {}", path,
                            version_string(out.version), describe(out.api, init));
    return out;
  }
  find_versioned(lookup, out);
  return out;
}

std::string driver_path() {
  const char* env = std::getenv("CACHALOT_CUDA_DRIVER");
  return (env != nullptr && *env != '\0') ? env : "libcuda.so.1";
}

const driver_load& process_driver() {
  // Never destroyed: allocators destroyed during exit, after this function's statics, still
  // call through the table.
  static const driver_load* const loaded = new driver_load(load_driver(driver_path().c_str()));
  return *loaded;
}

const driver_api& driver() {
  const driver_load& d = process_driver();
  CACHALOT_EXPECTS(d.ok(), backend_error, "no CUDA driver: {}", d.error);
  return d.api;
}

void throw_error(CUresult result, const char* call, const char* file, int line) {
  throw backend_error(
      fmt::format("CUDA driver call {} failed: {}", call, describe(process_driver().api, result)),
      file, line);
}

int device_count(std::string* why) noexcept {
  try {
    const driver_load& d = process_driver();
    if (!d.ok()) {
      if (why != nullptr) *why = d.error;
      return 0;
    }
    int count = 0;
    const CUresult res = d.api.DeviceGetCount(&count);
    if (res != kSuccess) {
      if (why != nullptr) *why = "cuDeviceGetCount failed: " + describe(d.api, res);
      return 0;
    }
    if (count == 0 && why != nullptr) {
      const char* visible = std::getenv("CUDA_VISIBLE_DEVICES");
      *why = fmt::format(
          "the CUDA driver (version {}) sees no device{}", version_string(d.version),
          visible != nullptr ? fmt::format(" (CUDA_VISIBLE_DEVICES={})", visible) : std::string());
    }
    return count;
  } catch (...) {  // bad_alloc while formatting: no device we can report on
    if (why != nullptr) why->clear();
    return 0;
  }
}

}  // namespace cachalot::detail::cu
