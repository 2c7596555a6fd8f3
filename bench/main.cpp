// cachalot_bench: cachalot against its baselines (pass-through, glibc malloc, and on a GPU
// cudaMalloc, cudaMallocAsync and CUB) in one binary and one run. Names read
// FAMILY/ALLOCATOR/PARAMETERS, which is what scripts/bench_report.py groups by.
#include <benchmark/benchmark.h>

#include <cstdio>
#include <functional>
#include <memory>
#include <string>

#include "gpu_baselines.hpp"
#include "pools.hpp"
#include "scaling.hpp"
#include "workloads.hpp"

namespace cachalot::bench {
namespace {

constexpr std::size_t holes = 65536;
std::unique_ptr<cachalot_pool> shared_pool;
malloc_pool shared_malloc;

stream_t stream(std::size_t i) {
  return (*env().streams)[i];
}

/// Runs `fn` with a fresh pool of kind `impl` ("cachalot", "cachalot_expandable",
/// "passthrough" or "malloc").
template <typename Fn>
void with_pool(const std::string& impl, Fn&& fn) {
  if (impl == "malloc") {
    malloc_pool p;
    fn(p);
    return;
  }
  cachalot_pool p(impl != "passthrough", impl == "cachalot_expandable");
  fn(p);
}

void register_hot_path(const std::string& impl) {
  benchmark::RegisterBenchmark(("hot_pair/" + impl).c_str(),
                               [impl](benchmark::State& st) {
                                 with_pool(impl, [&](auto& p) {
                                   hot_pairs(st, p, static_cast<std::size_t>(st.range(0)),
                                             stream(0));
                                 });
                               })
      ->RangeMultiplier(8)
      ->Range(512, 64 << 20);
}

void register_random(const std::string& impl) {
  auto* b = benchmark::RegisterBenchmark(("random/" + impl).c_str(), [impl](benchmark::State& st) {
    const auto ops = random_ops(static_cast<std::size_t>(st.range(0)),
                                static_cast<std::size_t>(st.range(1)) << 20, env().max_live);
    with_pool(impl, [&](auto& p) { random_run(st, p, ops, stream(0)); });
  });
  b->ArgNames({"n", "max_mib"})->Unit(benchmark::kMicrosecond);
  for (const std::int64_t n : {1000, 10000, 100000}) {
    for (const std::int64_t max : {1, 4, 64, 256}) b->Args({n, max});
  }
}

void register_holes(const std::string& impl) {
  for (const bool make : {true, false}) {
    const std::string family = make ? "many_holes/" : "no_holes/";
    benchmark::RegisterBenchmark((family + impl).c_str(), [impl, make](benchmark::State& st) {
      with_pool(impl, [&](auto& p) { hole_pairs(st, p, holes, make, stream(0)); });
    })->Arg(static_cast<std::int64_t>(holes));
  }
}

void setup_caching(const benchmark::State&) {
  shared_pool = std::make_unique<cachalot_pool>(true);
}
void setup_passthrough(const benchmark::State&) {
  shared_pool = std::make_unique<cachalot_pool>(false);
}
void teardown(const benchmark::State&) {
  shared_pool.reset();
}

void register_threads(const std::string& impl) {
  for (const bool own : {true, false}) {
    if (impl == "malloc" && !own) continue;
    const std::string family = own ? "threads_own_stream/" : "threads_one_stream/";
    auto* b =
        benchmark::RegisterBenchmark((family + impl).c_str(), [impl, own](benchmark::State& st) {
          const stream_t s = stream(own ? static_cast<std::size_t>(st.thread_index()) + 1 : 1);
          if (impl == "malloc") return window_pairs(st, shared_malloc, s);
          window_pairs(st, *shared_pool, s);
        });
    if (impl != "malloc") b->Setup(impl == "cachalot" ? setup_caching : setup_passthrough);
    if (impl != "malloc") b->Teardown(teardown);
    b->UseRealTime()->Threads(1)->Threads(2)->Threads(4)->Threads(8);
  }
}

/// Allocate on stream 0; then free on it, or record_stream on stream 9 and free, or free on 9.
void stream_case(benchmark::State& st, cachalot_pool& p, int mode) {
  const auto bytes = static_cast<std::size_t>(st.range(0));
  allocator& a = p.get();
  a.deallocate(a.allocate(bytes, stream(0)));
  for (auto _ : st) {
    void* ptr = a.allocate(bytes, stream(0));
    if (mode == 1) a.record_stream(ptr, stream(9));
    if (mode == 2) {
      a.deallocate(ptr, stream(9));
    } else {
      a.deallocate(ptr);
    }
  }
  st.SetItemsProcessed(st.iterations());
}

void register_streams(const std::string& impl) {
  const char* families[] = {"stream_same/", "stream_record/", "stream_free_other/"};
  for (int mode = 0; mode < 3; ++mode) {
    benchmark::RegisterBenchmark((families[mode] + impl).c_str(),
                                 [impl, mode](benchmark::State& st) {
                                   cachalot_pool p(impl == "cachalot");
                                   stream_case(st, p, mode);
                                 })
        ->Arg(4096)
        ->Arg(1 << 20);
  }
}

void register_all() {
  // Expandable segments: the cache-hit pair and the random workloads, against fixed segments
  // in the same run (issue 10: hit cost within 5 %).
  if (env().virtual_memory) {
    register_hot_path("cachalot_expandable");
    register_random("cachalot_expandable");
  }
  for (const std::string impl : {"cachalot", "passthrough", "malloc"}) {
    register_hot_path(impl);
    register_random(impl);
    register_holes(impl);
    register_threads(impl);
    if (impl != "malloc") register_streams(impl);
  }
  register_scaling();
}

}  // namespace
}  // namespace cachalot::bench

int main(int argc, char** argv) {
  using namespace cachalot::bench;
  init_environment();
  register_all();
  std::string why = "no CUDA device";
  const bool gpu = env().gpu && register_gpu_baselines(why);
  benchmark::AddCustomContext("cachalot_backend", env().gpu ? "cuda" : "simulated");
  benchmark::AddCustomContext("cachalot_config", env().config);
  benchmark::AddCustomContext("expandable_segments",
                              env().virtual_memory ? "run" : "skipped: no virtual memory");
  benchmark::AddCustomContext("gpu_baselines", gpu ? "run" : "skipped: " + why);
  if (!gpu) std::fprintf(stderr, "cachalot_bench: GPU baselines skipped: %s\n", why.c_str());
  benchmark::Initialize(&argc, argv);
  if (benchmark::ReportUnrecognizedArguments(argc, argv)) return 1;
  benchmark::RunSpecifiedBenchmarks();
  benchmark::Shutdown();
  return 0;
}
