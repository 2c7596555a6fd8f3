// Memory pools on the cache-hit path, in one run: an allocate/free pair that hits the cache,
// on the default pool of an allocator without pools (pool_hot_pair/none), on the default pool
// of an allocator that also has two tenant pools and a graph pool with routes on other streams
// (pool_hot_pair/default_with_pools), and on a tenant pool that a stream route selects
// (pool_hot_pair/routed). Target: default_with_pools within 5 % of none.
#include <benchmark/benchmark.h>

#include "cachalot/allocator.hpp"
#include "pools.hpp"

namespace cachalot::bench {
namespace {

enum mode { none, default_with_pools, routed };

void pool_hot_pair(benchmark::State& st, mode m) {
  allocator a(config::parse(env().config));
  const stream_t s = (*env().streams)[0];
  if (m != none) {
    pool_options critical;
    critical.name = "critical";
    critical.priority = 1;
    critical.guarantee = std::size_t{1} << 30;
    pool_options batch;
    batch.name = "batch";
    batch.limit = std::size_t{8} << 30;
    pool_options graph;
    graph.name = "graph";
    graph.type = pool_type::graph;
    graph.declares_capture = false;
    const pool_id c = a.create_pool(critical);
    a.begin_allocate_to_pool(c, (*env().streams)[1]);
    a.begin_allocate_to_pool(a.create_pool(batch), (*env().streams)[2]);
    a.begin_allocate_to_pool(a.create_pool(graph), (*env().streams)[3]);
    if (m == routed) a.begin_allocate_to_pool(c, s);
  }
  const auto bytes = static_cast<std::size_t>(st.range(0));
  a.deallocate(a.allocate(bytes, s), s);  // warm
  for (auto _ : st) {
    void* p = a.allocate(bytes, s);
    benchmark::DoNotOptimize(p);
    a.deallocate(p, s);
  }
  st.SetItemsProcessed(st.iterations());
}

BENCHMARK_CAPTURE(pool_hot_pair, none, none)->Arg(512)->Arg(4096)->Arg(1 << 20);
BENCHMARK_CAPTURE(pool_hot_pair, default_with_pools, default_with_pools)
    ->Arg(512)
    ->Arg(4096)
    ->Arg(1 << 20);
BENCHMARK_CAPTURE(pool_hot_pair, routed, routed)->Arg(512)->Arg(4096)->Arg(1 << 20);

}  // namespace
}  // namespace cachalot::bench
