// The control functions of the fake CUDA driver (fake_cuda.cpp), reached with dlopen/dlsym on
// the same library the loader under test opened (dlopen of one path gives one instance). A test
// creates one fake_cuda_control per library path; a missing library or symbol fails the test.
#pragma once

#include <dlfcn.h>

#include <string>

namespace cachalot::testing {

/// The fakecu_* functions of one fake driver library.
struct fake_cuda_control {
  void (*configure)(const char* spec) = nullptr;
  void (*fail)(const char* fn, long nth, int result) = nullptr;
  void (*set_deinitialized)(int on) = nullptr;
  long (*calls)(const char* fn) = nullptr;
  int (*current_device)() = nullptr;
  int (*context_depth)() = nullptr;
  void (*runtime_set_device)(int device) = nullptr;
  void (*runtime_reset)(int device) = nullptr;
  void (*reclaim)() = nullptr;
  int (*primary_refcount)(int device) = nullptr;
  int (*device_of)(unsigned long long addr) = nullptr;
  unsigned long long (*used_bytes)(int device) = nullptr;
  int (*live)(const char* what) = nullptr;
  unsigned (*mapping_access)(unsigned long long addr) = nullptr;
  unsigned (*last_event_flags)() = nullptr;
  void* (*last_record_stream)() = nullptr;
  int (*proc_version)(const char* symbol) = nullptr;
  long long (*proc_flags)(const char* symbol) = nullptr;
  void (*hold_stream)(void* stream, int on) = nullptr;
  void (*begin_capture)(int device, void* stream, int mode) = nullptr;
  int (*end_capture)(void* stream) = nullptr;
  int (*thread_capture_mode)() = nullptr;
  void* (*create_stream)(int device) = nullptr;
  void (*destroy_stream)(void* stream) = nullptr;
  int (*proc_symbols)(char* out, int size) = nullptr;
  int (*abi_mismatch)(const char* symbol) = nullptr;
  int (*last_granularity_option)() = nullptr;

  void* handle = nullptr;
  std::string error;  ///< why the control functions could not be found ("" when they were)

  /// Opens the fake driver at `path` and finds every control function.
  explicit fake_cuda_control(const std::string& path) {
    handle = dlopen(path.c_str(), RTLD_NOW | RTLD_LOCAL);
    if (handle == nullptr) {
      const char* e = dlerror();
      error = "dlopen(" + path + "): " + (e != nullptr ? e : "failed");
      return;
    }
    find(configure, "fakecu_configure");
    find(fail, "fakecu_fail");
    find(set_deinitialized, "fakecu_set_deinitialized");
    find(calls, "fakecu_calls");
    find(current_device, "fakecu_current_device");
    find(context_depth, "fakecu_context_depth");
    find(runtime_set_device, "fakecu_runtime_set_device");
    find(runtime_reset, "fakecu_runtime_reset");
    find(reclaim, "fakecu_reclaim");
    find(primary_refcount, "fakecu_primary_refcount");
    find(device_of, "fakecu_device_of");
    find(used_bytes, "fakecu_used_bytes");
    find(live, "fakecu_live");
    find(mapping_access, "fakecu_mapping_access");
    find(last_event_flags, "fakecu_last_event_flags");
    find(last_record_stream, "fakecu_last_record_stream");
    find(proc_version, "fakecu_proc_version");
    find(proc_flags, "fakecu_proc_flags");
    find(hold_stream, "fakecu_hold_stream");
    find(begin_capture, "fakecu_begin_capture");
    find(end_capture, "fakecu_end_capture");
    find(thread_capture_mode, "fakecu_thread_capture_mode");
    find(create_stream, "fakecu_create_stream");
    find(destroy_stream, "fakecu_destroy_stream");
    find(proc_symbols, "fakecu_proc_symbols");
    find(abi_mismatch, "fakecu_abi_mismatch");
    find(last_granularity_option, "fakecu_last_granularity_option");
  }
  fake_cuda_control(const fake_cuda_control&) = delete;
  fake_cuda_control& operator=(const fake_cuda_control&) = delete;
  bool ok() const { return error.empty(); }
  /// Every symbol asked of cuGetProcAddress since the last configure, sorted, '+'-joined.
  std::string requested_symbols() const {
    std::string out(static_cast<std::size_t>(proc_symbols(nullptr, 0)) + 1, '\0');
    out.resize(static_cast<std::size_t>(proc_symbols(out.data(), static_cast<int>(out.size()))));
    return out;
  }

 private:
  template <class F>
  void find(F& fn, const char* name) {
    fn = reinterpret_cast<F>(dlsym(handle, name));
    if (fn == nullptr && error.empty()) error = std::string("fake driver lacks ") + name;
  }
};

}  // namespace cachalot::testing
