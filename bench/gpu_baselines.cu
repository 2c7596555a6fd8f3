// The CUDA baselines (see gpu_baselines.hpp): cudaMalloc/cudaFree, cudaMallocAsync on the
// device's default pool with its release threshold at the maximum (a warm pool), and CUB's
// CachingDeviceAllocator (bins growing by 8 from 512 B, cached up to 128 MiB blocks), each on
// the same workloads and streams as cachalot: hot pairs and random runs for all three, the
// many-holes pair for cudaMallocAsync only (CUB and cudaMalloc would cudaMalloc 131,072 blocks
// of setup each time).
#include <cuda_runtime_api.h>

#include <cstdint>
#include <cub/util_allocator.cuh>
#include <new>
#include <string>

#include "gpu_baselines.hpp"
#include "pools.hpp"
#include "workloads.hpp"

namespace cachalot::bench {
namespace {

void check(cudaError_t e) {
  if (e != cudaSuccess) throw std::bad_alloc();
}

struct cuda_malloc_pool {
  void* alloc(std::size_t n, stream_t) {
    void* p = nullptr;
    check(cudaMalloc(&p, n));
    return p;
  }
  void free(void* p, stream_t) { check(cudaFree(p)); }
};

struct cuda_async_pool {
  cuda_async_pool() {
    cudaMemPool_t pool = nullptr;
    check(cudaDeviceGetDefaultMemPool(&pool, 0));
    std::uint64_t threshold = UINT64_MAX;
    check(cudaMemPoolSetAttribute(pool, cudaMemPoolAttrReleaseThreshold, &threshold));
    pool_ = pool;
  }
  ~cuda_async_pool() {  // give the pool's memory back before the next benchmark
    cudaDeviceSynchronize();
    cudaMemPoolTrimTo(pool_, 0);
  }
  cuda_async_pool(const cuda_async_pool&) = delete;
  cuda_async_pool& operator=(const cuda_async_pool&) = delete;
  void* alloc(std::size_t n, stream_t s) {
    void* p = nullptr;
    check(cudaMallocAsync(&p, n, static_cast<cudaStream_t>(s)));
    return p;
  }
  void free(void* p, stream_t s) { check(cudaFreeAsync(p, static_cast<cudaStream_t>(s))); }

 private:
  cudaMemPool_t pool_ = nullptr;
};

struct cub_pool {
  cub::CachingDeviceAllocator cub{8, 3, 9, std::size_t{8} << 30};
  void* alloc(std::size_t n, stream_t s) {
    void* p = nullptr;
    check(cub.DeviceAllocate(&p, n, static_cast<cudaStream_t>(s)));
    return p;
  }
  void free(void* p, stream_t) { check(cub.DeviceFree(p)); }
};

stream_t stream(std::size_t i) {
  return (*env().streams)[i];
}

/// Registers a pool's benchmarks. `slow`: its device calls take tens of microseconds (random
/// runs limited to n <= 10k); `holes`: run the many-holes pair (131,072 setup allocations).
template <typename Pool>
void register_pool(const std::string& name, bool slow, bool holes) {
  benchmark::RegisterBenchmark(("hot_pair/" + name).c_str(),
                               [](benchmark::State& st) {
                                 Pool p;
                                 hot_pairs(st, p, static_cast<std::size_t>(st.range(0)), stream(0));
                                 cudaDeviceSynchronize();
                               })
      ->RangeMultiplier(8)
      ->Range(512, 64 << 20);
  auto* r = benchmark::RegisterBenchmark(("random/" + name).c_str(), [](benchmark::State& st) {
    const auto ops = random_ops(static_cast<std::size_t>(st.range(0)),
                                static_cast<std::size_t>(st.range(1)) << 20, env().max_live);
    Pool p;
    random_run(st, p, ops, stream(0));
    cudaDeviceSynchronize();
  });
  r->ArgNames({"n", "max_mib"})->Unit(benchmark::kMicrosecond);
  for (const std::int64_t n : {1000, 10000, 100000}) {
    for (const std::int64_t max : {1, 4, 64, 256}) {
      if (!slow || n <= 10000) r->Args({n, max});
    }
  }
  if (!holes) return;
  for (const bool make : {true, false}) {
    benchmark::RegisterBenchmark(((make ? "many_holes/" : "no_holes/") + name).c_str(),
                                 [make](benchmark::State& st) {
                                   Pool p;
                                   hole_pairs(st, p, 65536, make, stream(0));
                                 })
        ->Arg(65536);
  }
}

}  // namespace

bool register_gpu_baselines(std::string& why) {
  int devices = 0;
  if (cudaGetDeviceCount(&devices) != cudaSuccess || devices == 0) {
    why = "no CUDA device";
    return false;
  }
  register_pool<cuda_malloc_pool>("cudaMalloc", true, false);
  register_pool<cuda_async_pool>("cudaMallocAsync", false, true);
  register_pool<cub_pool>("cub", false, false);  // uncached setup: cudaMalloc each
  return true;
}

}  // namespace cachalot::bench
