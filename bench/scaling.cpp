// Scaling sweeps (issue 21): the host cost of the cold paths that used to walk every segment
// or every stream, against the number of cached segments and of streams. Always on a
// simulated device (they measure cachalot's own bookkeeping; a GPU could not hold 100,000
// cached segments), whatever backend the other benchmarks use. Per operation cost should stay
// flat from 10 to 100,000 segments and from 1 to 1,000 streams.
//  - release_sweep/cachalot/segments:N: N idle 12 MiB segments cached on a device twice their
//    size; each iteration grows a segment for a block no cached one holds, frees it, and trims
//    it back (the release pass must find the largest idle segment among N+1).
//  - gc_sweep/cachalot/segments:N: the same N idle segments just below the release mark
//    (gc_threshold, with release_policy:eager: the mark at every growth, no hysteresis band);
//    each iteration allocates a 40 MiB or a 64 MiB block in turn, which no cached block serves
//    (the oversize rule), so that each growth first returns the other one's idle segment, then
//    frees it. The engine before the release index scanned and sorted every cached segment at
//    each of these growths (the random 64/256 MiB regression).
//  - growth_sweep/cachalot/streams:K: K streams that allocated (and freed) before; each
//    iteration grows a 64 MiB segment on the first, frees it and trims it back (a growth counts
//    its segment against the stats ceilings and drains its own stream's lanes: once that locked
//    every stream and lane, now only that stream state and its lanes).
//  - peak_sweep/cachalot/streams:K: K streams with cached blocks; each iteration allocates a
//    512 B block on one stream and keeps it, so that every allocation raises the peaks (the
//    blocks are freed, and the peaks reset, every 65,536 allocations).
//  - growth_sweep/cachalot_lanes_off, peak_sweep/cachalot_lanes_off: the same with
//    thread_cache:0 (no lanes to lock or to settle the marks of; with lanes a crossed ceiling
//    locks its stream state's lanes too: detail/all_streams_lock.hpp, ceiling_lock).
#include <benchmark/benchmark.h>

#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "cachalot/allocator.hpp"
#include "cachalot/simulated_device.hpp"
#include "scaling.hpp"

namespace cachalot::bench {
namespace {

stream_t fake_stream(std::size_t i) {
  return reinterpret_cast<stream_t>(static_cast<std::uintptr_t>(0x1000 + 64 * i));
}

std::unique_ptr<allocator> simulated(std::size_t capacity, const char* conf = "") {
  sim_options o;
  o.capacity = capacity;
  return std::make_unique<allocator>(
      config::parse(std::string("backend:simulated") + (*conf ? "," : "") + conf),
      std::make_shared<simulated_device>(o));
}

void release_sweep(benchmark::State& st) {
  const auto n = static_cast<std::size_t>(st.range(0));
  constexpr std::size_t seg = std::size_t{12} << 20;
  auto a = simulated(2 * (n + 8) * seg);
  std::vector<void*> blocks;
  for (std::size_t i = 0; i < n; ++i) blocks.push_back(a->allocate(seg, fake_stream(0)));
  for (void* p : blocks) a->deallocate(p, fake_stream(0));  // N idle segments
  const std::size_t cached = a->stats().reserved_bytes.all.current;
  for (auto _ : st) {
    void* p = a->allocate(seg + (std::size_t{2} << 20), fake_stream(0));  // a new segment
    a->deallocate(p, fake_stream(0));
    a->trim(cached);  // the largest idle segment goes: the one just made
  }
  st.SetItemsProcessed(st.iterations());
  st.counters["segments"] = static_cast<double>(a->stats().segments.all.current);
}

void gc_sweep(benchmark::State& st) {
  const auto n = static_cast<std::size_t>(st.range(0));
  constexpr std::size_t seg = std::size_t{12} << 20;
  // The mark (90 % of the device) is 80 MiB above the idle segments: every 40 or 64 MiB growth
  // must first return the other block's idle segment.
  constexpr std::size_t mib = std::size_t{1} << 20;
  auto a = simulated((n * seg + 80 * mib) * 10 / 9, "release_policy:eager");
  std::vector<void*> blocks;
  for (std::size_t i = 0; i < n; ++i) blocks.push_back(a->allocate(seg, fake_stream(0)));
  for (void* p : blocks) a->deallocate(p, fake_stream(0));
  std::size_t i = 0;
  for (auto _ : st) {
    const std::size_t size = (i++ % 2 == 0 ? 40 : 64) * mib;
    a->deallocate(a->allocate(size, fake_stream(0)), fake_stream(0));
  }
  st.SetItemsProcessed(st.iterations());
  const memory_stats s = a->stats();
  st.counters["segments"] = static_cast<double>(s.segments.all.current);
  st.counters["frees_per_op"] =
      static_cast<double>(s.num_segment_frees) / static_cast<double>(st.iterations());
}

/// K streams, each of which allocated and freed a small and a 3 MiB block (its state, a lane
/// and cached segments exist).
void touch_streams(allocator& a, std::size_t k) {
  for (std::size_t i = 0; i < k; ++i) {
    void* small = a.allocate(4096, fake_stream(i));
    void* mid = a.allocate(std::size_t{3} << 20, fake_stream(i));
    a.deallocate(small, fake_stream(i));
    a.deallocate(mid, fake_stream(i));
  }
}

void growth_sweep(benchmark::State& st, const char* conf) {
  const auto k = static_cast<std::size_t>(st.range(0));
  auto a = simulated(std::size_t{64} << 30, conf);
  touch_streams(*a, k);
  const std::size_t cached = a->stats().reserved_bytes.all.current;
  for (auto _ : st) {
    void* p = a->allocate(std::size_t{64} << 20, fake_stream(0));
    a->deallocate(p, fake_stream(0));
    a->trim(cached);
  }
  st.SetItemsProcessed(st.iterations());
}

void peak_sweep(benchmark::State& st, const char* conf) {
  const auto k = static_cast<std::size_t>(st.range(0));
  auto a = simulated(std::size_t{64} << 30, conf);
  touch_streams(*a, k);
  std::vector<void*> kept;
  kept.reserve(65536);
  for (auto _ : st) {
    kept.push_back(a->allocate(512, fake_stream(0)));
    if (kept.size() == 65536) {
      for (void* p : kept) a->deallocate(p, fake_stream(0));
      kept.clear();
      a->reset_peak_stats();
    }
  }
  for (void* p : kept) a->deallocate(p, fake_stream(0));
  st.SetItemsProcessed(st.iterations());
}

}  // namespace

void register_scaling() {
  auto* r = benchmark::RegisterBenchmark("release_sweep/cachalot", release_sweep);
  r->ArgName("segments")->Unit(benchmark::kNanosecond);
  for (const std::int64_t n : {10, 100, 1000, 10000, 100000}) r->Arg(n);
  auto* c = benchmark::RegisterBenchmark("gc_sweep/cachalot", gc_sweep);
  c->ArgName("segments");
  for (const std::int64_t n : {10, 100, 1000, 10000, 100000}) c->Arg(n);
  // The defaults (thread caches) and thread_cache:0: a crossed ceiling settles with the peak
  // ledger either way.
  for (const auto& [impl, conf] :
       {std::pair{"cachalot", ""}, {"cachalot_lanes_off", "thread_cache:0"}}) {
    const std::string suffix = std::string("/") + impl;
    auto* g = benchmark::RegisterBenchmark(("growth_sweep" + suffix).c_str(), growth_sweep, conf);
    g->ArgName("streams");
    for (const std::int64_t k : {1, 10, 100, 1000}) g->Arg(k);
    auto* p = benchmark::RegisterBenchmark(("peak_sweep" + suffix).c_str(), peak_sweep, conf);
    p->ArgName("streams");
    for (const std::int64_t k : {1, 10, 100, 1000}) p->Arg(k);
  }
}

}  // namespace cachalot::bench
