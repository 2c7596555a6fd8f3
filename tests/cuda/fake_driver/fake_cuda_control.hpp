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
  }
  fake_cuda_control(const fake_cuda_control&) = delete;
  fake_cuda_control& operator=(const fake_cuda_control&) = delete;
  bool ok() const { return error.empty(); }

 private:
  template <class F>
  void find(F& fn, const char* name) {
    fn = reinterpret_cast<F>(dlsym(handle, name));
    if (fn == nullptr && error.empty()) error = std::string("fake driver lacks ") + name;
  }
};

}  // namespace cachalot::testing
