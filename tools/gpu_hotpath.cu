// First comparison of allocation hot paths on a real GPU, standalone: builds with just
//   nvcc -O2 -std=c++17 -Iinclude tools/gpu_hotpath.cu -o gpu_hotpath -ldl
// and loads libcachalot.so at run time (path: argv[1], else CACHALOT_LIBRARY), so it needs
// neither CMake nor cachalot's build dependencies. For each size it times, per allocate+free
// pair on one stream, after a warm-up:
//   cudaMalloc/cudaFree            (no cache; cudaFree synchronizes)
//   cudaMallocAsync/cudaFreeAsync  (driver pool, release threshold raised: warm pool)
//   cachalot C API                 (cachalot_malloc/cachalot_free, backend:cuda)
//   cachalot torch hook            (cachalot_torch_malloc/free: the PyTorch path)
// and a "burst" pattern (64 allocations, then 64 frees). It also runs a pair with a kernel
// between allocate and free, the shape of real use. A second table puts cachalot with
// caching:0 (every call goes to the CUDA backend: cuMemAlloc/cuMemFree through the driver API,
// with its context switch) next to cudaMalloc/cudaFree of the same run. Times are host
// wall-clock medians of 5 repetitions, in microseconds per pair. Prints Markdown tables. Exit 77
// without a GPU.
// `gpu_hotpath --probe` only reports the device count and driver/runtime versions.
#include <cuda_runtime.h>
#include <dlfcn.h>

#include <algorithm>
#include <chrono>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <string>
#include <vector>

#include "cachalot/cachalot.h"

namespace {

__global__ void touch_kernel(unsigned* p) {
  if (threadIdx.x == 0) p[0] = 1;
}

#define CK(call)                                                       \
  do {                                                                 \
    cudaError_t e_ = (call);                                           \
    if (e_ != cudaSuccess) {                                           \
      std::fprintf(stderr, "%s: %s\n", #call, cudaGetErrorString(e_)); \
      std::exit(1);                                                    \
    }                                                                  \
  } while (0)

struct cachalot_api {
  decltype(&cachalot_create) create;
  decltype(&cachalot_destroy) destroy;
  decltype(&cachalot_malloc) malloc_;
  decltype(&cachalot_free) free_;
  decltype(&cachalot_last_error) last_error;
  void* (*torch_malloc)(size_t, int, void*);
  void (*torch_free)(void*, size_t, int, void*);
};

template <class F>
double median_us_per_op(int reps, int ops, F&& body) {
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

}  // namespace

int main(int argc, char** argv) {
  int devices = 0;
  const cudaError_t count_err = cudaGetDeviceCount(&devices);
  if (argc > 1 && std::string(argv[1]) == "--probe") {  // what gpu-check.sh asks first
    int driver = 0;
    int runtime = 0;
    (void)cudaDriverGetVersion(&driver);
    (void)cudaRuntimeGetVersion(&runtime);
    std::printf("probe: %d device(s), %s, driver API %d, runtime %d\n", devices,
                cudaGetErrorName(count_err), driver, runtime);
    return count_err == cudaSuccess && devices > 0 ? 0 : 77;
  }
  if (count_err != cudaSuccess || devices == 0) {
    std::printf("gpu_hotpath: no CUDA device (%s), skipped\n", cudaGetErrorName(count_err));
    return 77;
  }
  const char* path = argc > 1 ? argv[1] : std::getenv("CACHALOT_LIBRARY");
  if (path == nullptr) {
    std::fprintf(stderr, "usage: gpu_hotpath path/to/libcachalot.so (or set CACHALOT_LIBRARY)\n");
    return 2;
  }
  void* lib = dlopen(path, RTLD_NOW | RTLD_LOCAL);
  if (lib == nullptr) {
    std::fprintf(stderr, "dlopen %s: %s\n", path, dlerror());
    return 1;
  }
  cachalot_api api{};
  api.create = reinterpret_cast<decltype(api.create)>(dlsym(lib, "cachalot_create"));
  api.destroy = reinterpret_cast<decltype(api.destroy)>(dlsym(lib, "cachalot_destroy"));
  api.malloc_ = reinterpret_cast<decltype(api.malloc_)>(dlsym(lib, "cachalot_malloc"));
  api.free_ = reinterpret_cast<decltype(api.free_)>(dlsym(lib, "cachalot_free"));
  api.last_error = reinterpret_cast<decltype(api.last_error)>(dlsym(lib, "cachalot_last_error"));
  api.torch_malloc =
      reinterpret_cast<decltype(api.torch_malloc)>(dlsym(lib, "cachalot_torch_malloc"));
  api.torch_free = reinterpret_cast<decltype(api.torch_free)>(dlsym(lib, "cachalot_torch_free"));
  if (!api.create || !api.destroy || !api.malloc_ || !api.free_ || !api.torch_malloc ||
      !api.torch_free) {
    std::fprintf(stderr, "libcachalot.so lacks an entry point\n");
    return 1;
  }

  cudaDeviceProp prop{};
  CK(cudaGetDeviceProperties(&prop, 0));
  CK(cudaSetDevice(0));
  cudaStream_t s = nullptr;
  CK(cudaStreamCreateWithFlags(&s, cudaStreamNonBlocking));
  cudaMemPool_t pool = nullptr;
  CK(cudaDeviceGetDefaultMemPool(&pool, 0));
  std::uint64_t threshold = UINT64_MAX;
  CK(cudaMemPoolSetAttribute(pool, cudaMemPoolAttrReleaseThreshold, &threshold));

  cachalot_allocator* ca = nullptr;
  if (api.create("backend:cuda,device:0", &ca) != CACHALOT_SUCCESS) {
    std::fprintf(stderr, "cachalot_create: %s\n", api.last_error());
    return 1;
  }
  cachalot_allocator* passthrough = nullptr;  // caching:0: the backend on every call
  if (api.create("backend:cuda,device:0,caching:0", &passthrough) != CACHALOT_SUCCESS) {
    std::fprintf(stderr, "cachalot_create(caching:0): %s\n", api.last_error());
    return 1;
  }
  std::vector<std::string> segment_rows;

  std::printf("Device: %s (sm_%d%d), %.1f GiB\n\n", prop.name, prop.major, prop.minor,
              static_cast<double>(prop.totalGlobalMem) / (1 << 30));
  std::printf(
      "| size | pattern | cudaMalloc/Free µs | cudaMallocAsync (warm) µs | "
      "cachalot C API µs | cachalot torch hook µs |\n");
  std::printf("|---|---|---|---|---|---|\n");

  const std::size_t sizes[] = {512, 64 << 10, 1 << 20, 16 << 20};
  const char* names[] = {"512 B", "64 KiB", "1 MiB", "16 MiB"};
  for (int si = 0; si < 4; ++si) {
    const std::size_t size = sizes[si];
    const int n_sync = 200;
    const int n = 20000;
    const int burst = 64;
    void* p = nullptr;
    std::vector<void*> ps(burst);

    // Pair: allocate then free at once.
    const double t_malloc = median_us_per_op(5, n_sync, [&] {
      for (int i = 0; i < n_sync; ++i) {
        CK(cudaMalloc(&p, size));
        CK(cudaFree(p));
      }
    });
    for (int i = 0; i < 100; ++i) {  // warm the pool
      CK(cudaMallocAsync(&p, size, s));
      CK(cudaFreeAsync(p, s));
    }
    const double t_async = median_us_per_op(5, n, [&] {
      for (int i = 0; i < n; ++i) {
        CK(cudaMallocAsync(&p, size, s));
        CK(cudaFreeAsync(p, s));
      }
    });
    api.malloc_(ca, &p, size, s);
    api.free_(ca, p, s);
    const double t_ca = median_us_per_op(5, n, [&] {
      for (int i = 0; i < n; ++i) {
        api.malloc_(ca, &p, size, s);
        api.free_(ca, p, s);
      }
    });
    const double t_torch = median_us_per_op(5, n, [&] {
      for (int i = 0; i < n; ++i) {
        p = api.torch_malloc(size, 0, s);
        api.torch_free(p, size, 0, s);
      }
    });
    std::printf("| %s | pair | %.2f | %.3f | %.3f | %.3f |\n", names[si], t_malloc, t_async, t_ca,
                t_torch);
    const double t_pass = median_us_per_op(5, n_sync, [&] {
      for (int i = 0; i < n_sync; ++i) {
        api.malloc_(passthrough, &p, size, s);
        api.free_(passthrough, p, s);
      }
    });
    char row[160];
    std::snprintf(row, sizeof row, "| %s | %.2f | %.2f |", names[si], t_malloc, t_pass);
    segment_rows.emplace_back(row);

    // Burst: 64 allocations, then 64 frees (per pair).
    const double b_async = median_us_per_op(5, n, [&] {
      for (int i = 0; i < n / burst; ++i) {
        for (auto& q : ps) CK(cudaMallocAsync(&q, size, s));
        for (auto& q : ps) CK(cudaFreeAsync(q, s));
      }
    });
    const double b_ca = median_us_per_op(5, n, [&] {
      for (int i = 0; i < n / burst; ++i) {
        for (auto& q : ps) api.malloc_(ca, &q, size, s);
        for (auto& q : ps) api.free_(ca, q, s);
      }
    });
    const double b_torch = median_us_per_op(5, n, [&] {
      for (int i = 0; i < n / burst; ++i) {
        for (auto& q : ps) q = api.torch_malloc(size, 0, s);
        for (auto& q : ps) api.torch_free(q, size, 0, s);
      }
    });
    std::printf("| %s | burst of 64 | - | %.3f | %.3f | %.3f |\n", names[si], b_async, b_ca,
                b_torch);

    // With a kernel between allocate and free (stream-ordered reuse), synchronized at the end.
    const int nk = 2000;
    const double k_malloc = median_us_per_op(3, 200, [&] {
      for (int i = 0; i < 200; ++i) {
        CK(cudaMalloc(&p, size));
        touch_kernel<<<1, 32, 0, s>>>(static_cast<unsigned*>(p));
        CK(cudaFree(p));
      }
      CK(cudaStreamSynchronize(s));
    });
    const double k_async = median_us_per_op(3, nk, [&] {
      for (int i = 0; i < nk; ++i) {
        CK(cudaMallocAsync(&p, size, s));
        touch_kernel<<<1, 32, 0, s>>>(static_cast<unsigned*>(p));
        CK(cudaFreeAsync(p, s));
      }
      CK(cudaStreamSynchronize(s));
    });
    const double k_ca = median_us_per_op(3, nk, [&] {
      for (int i = 0; i < nk; ++i) {
        api.malloc_(ca, &p, size, s);
        touch_kernel<<<1, 32, 0, s>>>(static_cast<unsigned*>(p));
        api.free_(ca, p, s);
      }
      CK(cudaStreamSynchronize(s));
    });
    std::printf("| %s | pair + kernel | %.2f | %.3f | %.3f | - |\n", names[si], k_malloc, k_async,
                k_ca);
  }
  std::printf(
      "\n| size | cudaMalloc/cudaFree µs | cachalot caching:0 (driver backend: "
      "cuMemAlloc/cuMemFree) µs |\n");
  std::printf("|---|---|---|\n");
  for (const std::string& row : segment_rows) std::printf("%s\n", row.c_str());
  CK(cudaGetLastError());
  api.destroy(passthrough);
  api.destroy(ca);
  CK(cudaStreamDestroy(s));
  return 0;
}
