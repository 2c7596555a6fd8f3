// The benchmark workloads, written once for every allocator under test. A "pool" is any type
// with `void* alloc(std::size_t, cachalot::stream_t)` and `void free(void*, cachalot::stream_t)`:
// cachalot, its pass-through mode, glibc malloc, and on a GPU cudaMalloc, cudaMallocAsync and
// CUB. Everything random is drawn before timing from fixed seeds, so every pool sees the same
// operations. C++17, so that nvcc can compile it for the GPU baselines.
#pragma once

#include <benchmark/benchmark.h>

#include <cstddef>
#include <cstdint>
#include <random>
#include <vector>

#include "cachalot/types.hpp"

namespace cachalot::bench {

/// Allocate+free pairs of one size on one stream (the cache-hit path once warm).
template <typename Pool>
void hot_pairs(benchmark::State& state, Pool& pool, std::size_t bytes, stream_t stream) {
  pool.free(pool.alloc(bytes, stream), stream);  // warm
  for (auto _ : state) {
    void* p = pool.alloc(bytes, stream);
    benchmark::DoNotOptimize(p);
    pool.free(p, stream);
  }
  state.SetItemsProcessed(state.iterations());
}

/// One operation of a random workload: allocate into `slot`, or free what `slot` holds.
struct random_op {
  bool allocate = true;
  std::uint32_t slot = 0;
  std::size_t size = 0;
};

/// RMM's random-allocations shape: 73 % allocations while fewer than `n` were made and
/// `max_live` bytes are not exceeded, sizes uniform in [1, max_size]; then everything freed.
inline std::vector<random_op> random_ops(std::size_t n, std::size_t max_size, std::size_t max_live,
                                         std::uint64_t seed = 42) {
  std::mt19937_64 rng(seed);
  std::uniform_int_distribution<std::size_t> size_dist(1, max_size);
  std::uniform_int_distribution<int> percent(0, 99);
  std::vector<random_op> ops;
  std::vector<std::pair<std::uint32_t, std::size_t>> live;
  std::size_t live_bytes = 0, made = 0;
  for (std::size_t i = 0; i < 2 * n; ++i) {
    const std::size_t size = size_dist(rng);
    const bool can_alloc = made < n && live_bytes + size <= max_live;
    if (can_alloc && (live.empty() || percent(rng) < 73)) {
      ops.push_back({true, static_cast<std::uint32_t>(made), size});
      live.emplace_back(static_cast<std::uint32_t>(made++), size);
      live_bytes += size;
    } else if (!live.empty()) {
      const std::size_t k = std::uniform_int_distribution<std::size_t>(0, live.size() - 1)(rng);
      ops.push_back({false, live[k].first, 0});
      live_bytes -= live[k].second;
      live[k] = live.back();
      live.pop_back();
    }
  }
  for (const auto& l : live) ops.push_back({false, l.first, 0});
  return ops;
}

/// Number of slots the ops of random_ops use.
inline std::size_t slot_count(const std::vector<random_op>& ops) {
  std::size_t n = 0;
  for (const random_op& op : ops) n = op.allocate ? n + 1 : n;
  return n;
}

/// Runs a random workload once per iteration; items are operations.
template <typename Pool>
void random_run(benchmark::State& state, Pool& pool, const std::vector<random_op>& ops,
                stream_t stream) {
  std::vector<void*> slots(slot_count(ops), nullptr);
  for (auto _ : state) {
    for (const random_op& op : ops) {
      if (op.allocate) {
        slots[op.slot] = pool.alloc(op.size, stream);
      } else {
        pool.free(slots[op.slot], stream);
      }
    }
    benchmark::ClobberMemory();
  }
  state.SetItemsProcessed(state.iterations() * static_cast<std::int64_t>(ops.size()));
}

/// Blocks kept live while the many-holes benchmarks run.
template <typename Pool>
struct hole_field {
  Pool& pool;
  stream_t stream;
  std::vector<void*> live;
  ~hole_field() {
    for (void* p : live) pool.free(p, stream);
  }
};

/// Sizes (512 B to 16 KiB, multiples of 512) of the blocks laid down before the pairs run.
inline std::vector<std::size_t> hole_sizes(std::size_t count) {
  std::mt19937_64 rng(7);
  std::uniform_int_distribution<std::size_t> d(1, 32);
  std::vector<std::size_t> sizes(count);
  for (std::size_t& s : sizes) s = d(rng) * 512;
  return sizes;
}

/// Lays down 2 x `holes` blocks and frees every other one (`holes` free holes that cannot
/// merge), or, with `make_holes` false, only the blocks that stay live (no holes).
template <typename Pool>
void lay_field(hole_field<Pool>& f, std::size_t holes, bool make_holes) {
  const std::vector<std::size_t> sizes = hole_sizes(2 * holes);
  std::vector<void*> gaps;
  for (std::size_t i = 0; i < sizes.size(); ++i) {
    const bool gap = i % 2 == 0;
    if (gap && !make_holes) continue;
    (gap ? gaps : f.live).push_back(f.pool.alloc(sizes[i], f.stream));
  }
  for (void* p : gaps) f.pool.free(p, f.stream);
}

/// Allocate+free pairs of 1-8 KiB with (or without) `holes` free holes in the pool.
template <typename Pool>
void hole_pairs(benchmark::State& state, Pool& pool, std::size_t holes, bool make_holes,
                stream_t stream) {
  hole_field<Pool> field{pool, stream, {}};
  lay_field(field, holes, make_holes);
  std::mt19937_64 rng(3);
  std::uniform_int_distribution<std::size_t> d(1024, 8192);
  std::vector<std::size_t> sizes(64);
  for (std::size_t& s : sizes) s = d(rng);
  std::size_t i = 0;
  for (auto _ : state) {
    void* p = pool.alloc(sizes[i++ & 63], stream);
    benchmark::DoNotOptimize(p);
    pool.free(p, stream);
  }
  state.SetItemsProcessed(state.iterations());
}

/// One thread's share of the multi-thread benchmark: a window of 8 live blocks of mixed sizes
/// (512 B to 256 KiB), each iteration freeing the oldest and allocating a new one.
template <typename Pool>
void window_pairs(benchmark::State& state, Pool& pool, stream_t stream) {
  static constexpr std::size_t sizes[16] = {512,    1024,   4096, 8192, 16384, 768,   32768, 65536,
                                            131072, 262144, 2048, 3072, 6144,  12288, 49152, 98304};
  void* window[8] = {};
  std::size_t i = 0;
  for (auto _ : state) {
    void*& slot = window[i & 7];
    if (slot != nullptr) pool.free(slot, stream);
    slot = pool.alloc(sizes[(i * 7 + static_cast<std::size_t>(state.thread_index())) & 15], stream);
    ++i;
  }
  for (void* p : window) {
    if (p != nullptr) pool.free(p, stream);
  }
  state.SetItemsProcessed(state.iterations());
}

}  // namespace cachalot::bench
