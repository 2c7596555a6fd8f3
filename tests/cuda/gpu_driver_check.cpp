// GPU checks and measurements of the driver-API backend, for scripts/gpu-check.sh (a plain
// program: the GPU machine may lack GoogleTest). Two modes, each meant for a fresh process:
//
//   cachalot_gpu_driver_check --contexts
//     The context rule on a real driver, before anything else in the process touched CUDA:
//      1. a thread without a current context still has none after allocating, freeing and
//         emptying the cache through an allocator of the last device;
//      2. with two devices or more: using only the last device's allocator leaves device 0's
//         primary context inactive (no context, and no memory, on GPU 0: issue 9 item 8);
//      3. with two devices or more: a thread current on device 0 is still current on device 0
//         after using the last device's allocator;
//      4. with two devices or more (and a CUDA runtime that sees them): a block of the last
//         device's allocator used on a stream of device 0 (record_stream) is freed without an
//         error and becomes reusable once that stream's work is done (the event is recorded in
//         device 0's context: cuEventRecord refuses an event and a stream of two contexts).
//     Prints one line per check (PASS, FAIL or SKIP with the reason); exit 0 when none failed,
//     1 when one did, 77 without a device.
//
//   cachalot_gpu_driver_check --bench
//     Host wall-clock medians (of 5 repetitions) on device 0, in the same run: a segment
//     allocate+free pair through the backend (cuMemAlloc/cuMemFree) against cudaMalloc/cudaFree;
//     map_chunk and unmap_chunk of 2 MiB and 20 MiB chunks (cuMemCreate + cuMemMap +
//     cuMemSetAccess, cuMemUnmap + cuMemRelease); a completed event's query through the backend
//     against cudaEventQuery. Prints a Markdown table (lines starting with '|').
#include <cuda_runtime_api.h>
#include <dlfcn.h>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstring>
#include <string>
#include <thread>
#include <vector>

#include "cachalot/cachalot.hpp"
#include "cachalot/cuda_backend.hpp"
#include "detail/cuda_driver.hpp"

namespace {

namespace cu = cachalot::detail::cu;
using cachalot::MiB;

int g_failed = 0;

void report(const char* check, bool pass, const std::string& detail) {
  std::printf("context check: %s: %s%s%s\n", check, pass ? "PASS" : "FAIL",
              detail.empty() ? "" : " - ", detail.c_str());
  if (!pass) ++g_failed;
}

void skip(const char* check, const std::string& why) {
  std::printf("context check: %s: SKIP - %s\n", check, why.c_str());
}

cu::CUcontext current_context() {
  cu::CUcontext ctx = nullptr;
  if (cu::driver().CtxGetCurrent(&ctx) != cu::kSuccess) return nullptr;
  return ctx;
}

// Allocations of several sizes through an allocator of `device`, freed, cache emptied.
void use_allocator(int device) {
  cachalot::config cfg;
  cfg.backend = cachalot::backend_kind::cuda;
  cfg.device = device;
  cachalot::allocator a(cfg);
  std::vector<void*> ptrs;
  for (std::size_t bytes : {std::size_t{512}, MiB, 12 * MiB, 64 * MiB})
    ptrs.push_back(a.allocate(bytes));
  for (void* p : ptrs) a.deallocate(p);
  a.empty_cache();
}

// cuDevicePrimaryCtxGetState (one ABI since CUDA 7.0), from the process's driver library.
int primary_context_active(int device) {
  using get_state_fn = cu::CUresult (*)(cu::CUdevice, unsigned*, int*);
  void* lib = dlopen(cu::driver_path().c_str(), RTLD_NOW | RTLD_LOCAL);
  auto* get_state = lib != nullptr
                        ? reinterpret_cast<get_state_fn>(dlsym(lib, "cuDevicePrimaryCtxGetState"))
                        : nullptr;
  unsigned flags = 0;
  int active = -1;
  if (get_state == nullptr || get_state(device, &flags, &active) != cu::kSuccess) return -1;
  return active;
}

// Check 4: record_stream with a runtime stream of device 0 on the last device's allocator.
void check_stream_of_another_device(int last) {
  const char* check = "a block used on another device's stream waits for that stream";
  int runtime_devices = 0;
  if (cudaGetDeviceCount(&runtime_devices) != cudaSuccess || runtime_devices <= last) {
    skip(check, "the CUDA runtime does not see the devices (a fake driver?)");
    return;
  }
  cudaStream_t s0 = nullptr;
  if (cudaSetDevice(0) != cudaSuccess ||
      cudaStreamCreateWithFlags(&s0, cudaStreamNonBlocking) != cudaSuccess) {
    report(check, false, "could not create a stream on device 0");
    return;
  }
  std::string detail;
  bool ok = false;
  try {
    cachalot::config cfg;
    cfg.backend = cachalot::backend_kind::cuda;
    cfg.device = last;
    cachalot::allocator a(cfg);
    void* p = a.allocate(MiB);
    a.record_stream(p, s0);
    a.deallocate(p);  // records an event on s0, in device 0's context
    (void)cudaStreamSynchronize(s0);
    a.process_events();
    ok = a.stats().num_pending_blocks == 0;
    detail = "pending blocks after device 0's stream finished: " +
             std::to_string(a.stats().num_pending_blocks);
  } catch (const std::exception& e) {
    detail = e.what();
  }
  (void)cudaStreamDestroy(s0);
  report(check, ok, detail);
}

int check_contexts() {
  const int n = cachalot::cuda_device_count();
  if (n == 0) {
    std::printf("context check: no CUDA device: %s\n", cachalot::cuda_unavailable_reason().c_str());
    return 77;
  }
  std::printf("context check: %d device(s), driver %s\n", n,
              cu::version_string(cachalot::cuda_driver_version()).c_str());
  const int last = n - 1;
  std::thread([&] {
    if (current_context() != nullptr) {
      skip("a thread without a context keeps none", "the new thread already had a context");
      return;
    }
    use_allocator(last);
    report("a thread without a context keeps none", current_context() == nullptr,
           "allocator of device " + std::to_string(last));
  }).join();
  if (n < 2) {
    skip("no context on device 0 when using device 1", "needs 2 devices");
    skip("a thread on device 0 stays on device 0", "needs 2 devices");
    skip("a block used on another device's stream waits for that stream", "needs 2 devices");
    return g_failed == 0 ? 0 : 1;
  }
  const int active = primary_context_active(0);
  report("no context on device 0 when using device 1", active == 0,
         "cuDevicePrimaryCtxGetState(0).active = " + std::to_string(active));
  std::thread([&] {
    const cu::driver_api& d = cu::driver();
    cu::CUdevice dev0 = 0;
    cu::CUcontext ctx0 = nullptr;
    if (d.DeviceGet(&dev0, 0) != cu::kSuccess ||
        d.DevicePrimaryCtxRetain(&ctx0, dev0) != cu::kSuccess ||
        d.CtxSetCurrent(ctx0) != cu::kSuccess) {
      report("a thread on device 0 stays on device 0", false, "could not make device 0 current");
      return;
    }
    use_allocator(last);
    report("a thread on device 0 stays on device 0", current_context() == ctx0,
           "allocator of device " + std::to_string(last));
    (void)d.CtxSetCurrent(nullptr);
    (void)d.DevicePrimaryCtxRelease(dev0);
  }).join();
  std::thread([&] { check_stream_of_another_device(last); }).join();
  return g_failed == 0 ? 0 : 1;
}

template <class F>
double median_us(int reps, int ops, F&& body) {
  std::vector<double> t;
  for (int r = 0; r < reps; ++r) {
    const auto t0 = std::chrono::steady_clock::now();
    body();
    const auto t1 = std::chrono::steady_clock::now();
    t.push_back(std::chrono::duration<double, std::micro>(t1 - t0).count() / ops);
  }
  std::sort(t.begin(), t.end());
  return t[t.size() / 2];
}

bool cuda_ok(cudaError_t e, const char* what) {
  if (e == cudaSuccess) return true;
  std::printf("bench: %s: %s\n", what, cudaGetErrorString(e));
  ++g_failed;
  return false;
}

int bench() {
  if (cachalot::cuda_device_count() == 0) {
    std::printf("bench: no CUDA device: %s\n", cachalot::cuda_unavailable_reason().c_str());
    return 77;
  }
  int runtime_devices = 0;
  if (const cudaError_t e = cudaGetDeviceCount(&runtime_devices);
      e != cudaSuccess || runtime_devices == 0) {  // a driver the runtime does not use (the fake)
    std::printf("bench: the CUDA runtime sees no device (%s), the comparison cannot run\n",
                cudaGetErrorName(e));
    return 77;
  }
  if (!cuda_ok(cudaSetDevice(0), "cudaSetDevice")) return 1;
  auto b = cachalot::make_cuda_backend(0);
  std::printf("| operation | size | cachalot driver backend µs | CUDA runtime µs |\n");
  std::printf("|---|---|---|---|\n");
  const int n = 100;
  for (std::size_t bytes : {2 * MiB, 20 * MiB, 256 * MiB}) {
    void* p = nullptr;
    const double ours = median_us(5, n, [&] {
      for (int i = 0; i < n; ++i) b->free_segment(b->allocate_segment(bytes, nullptr), bytes);
    });
    const double theirs = median_us(5, n, [&] {
      for (int i = 0; i < n; ++i) {
        if (!cuda_ok(cudaMalloc(&p, bytes), "cudaMalloc")) return;
        (void)cudaFree(p);
      }
    });
    std::printf(
        "| segment allocate+free (cuMemAlloc/cuMemFree vs cudaMalloc/cudaFree) | %zu MiB "
        "| %.2f | %.2f |\n",
        bytes / MiB, ours, theirs);
  }
  if (b->supports_virtual_memory()) {
    const std::size_t g = b->vm_granularity();
    std::printf("bench: device 0 virtual memory granularity (minimum): %zu bytes\n", g);
    for (std::size_t chunk : {2 * MiB, 20 * MiB}) {
      const std::size_t bytes = (chunk + g - 1) / g * g;
      char* range = static_cast<char*>(b->reserve_address_range(4 * bytes));
      std::vector<double> map_t;
      std::vector<double> unmap_t;
      for (int i = 0; i < 5 * 20; ++i) {
        const auto t0 = std::chrono::steady_clock::now();
        const bool mapped = b->map_chunk(range, bytes);
        const auto t1 = std::chrono::steady_clock::now();
        if (!mapped) {
          std::printf("bench: map_chunk(%zu MiB) ran out of memory\n", bytes / MiB);
          ++g_failed;
          break;
        }
        b->unmap_chunk(range, bytes);
        const auto t2 = std::chrono::steady_clock::now();
        map_t.push_back(std::chrono::duration<double, std::micro>(t1 - t0).count());
        unmap_t.push_back(std::chrono::duration<double, std::micro>(t2 - t1).count());
      }
      b->release_address_range(range, 4 * bytes);
      if (map_t.empty()) continue;
      std::sort(map_t.begin(), map_t.end());
      std::sort(unmap_t.begin(), unmap_t.end());
      std::printf(
          "| map_chunk (cuMemCreate+cuMemMap+cuMemSetAccess), median of %zu | %zu MiB | "
          "%.2f | - |\n",
          map_t.size(), bytes / MiB, map_t[map_t.size() / 2]);
      std::printf("| unmap_chunk (cuMemUnmap+cuMemRelease), median of %zu | %zu MiB | %.2f | - |\n",
                  unmap_t.size(), bytes / MiB, unmap_t[unmap_t.size() / 2]);
    }
  } else {
    std::printf("bench: device 0 has no virtual memory management: map/unmap not measured\n");
  }
  const cachalot::event_t ev = b->create_event();
  b->record_event(ev, nullptr);
  b->synchronize_event(ev);
  cudaEvent_t rev = nullptr;
  if (cuda_ok(cudaEventCreateWithFlags(&rev, cudaEventDisableTiming), "cudaEventCreate")) {
    (void)cudaEventRecord(rev, nullptr);
    (void)cudaEventSynchronize(rev);
    const int q = 10000;
    const double ours = median_us(5, q, [&] {
      for (int i = 0; i < q; ++i) (void)b->query_event(ev);
    });
    const double theirs = median_us(5, q, [&] {
      for (int i = 0; i < q; ++i) (void)cudaEventQuery(rev);
    });
    std::printf("| query of a completed event (with the context switch) | - | %.3f | %.3f |\n",
                ours, theirs);
    (void)cudaEventDestroy(rev);
  }
  b->destroy_event(ev);
  return g_failed == 0 ? 0 : 1;
}

}  // namespace

int main(int argc, char** argv) {
  const std::string mode = argc > 1 ? argv[1] : "";
  try {
    if (mode == "--contexts") return check_contexts();
    if (mode == "--bench") return bench();
  } catch (const std::exception& e) {
    std::printf("gpu_driver_check %s: %s\n", mode.c_str(), e.what());
    return 1;
  }
  std::fprintf(stderr, "usage: cachalot_gpu_driver_check --contexts | --bench\n");
  return 2;
}
