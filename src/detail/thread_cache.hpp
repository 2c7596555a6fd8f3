// The thread cache: a few recently freed blocks kept aside, per stream state and per thread
// slot, so that a thread that frees and allocates on a stream several threads share takes no
// shared lock and writes no shared cache line on a hit (docs/design.md, "Threads").
//
// A stream state of the default pool has `lane_count` lanes; a thread uses lane
// (its slot number mod lane_count), slots being handed out to threads in order of first use.
// Each lane has its own lock (uncontended unless more than lane_count threads use the stream),
// at most `capacity` blocks, and its own stats counters (a stats_holder in the ceiling scheme
// of detail/stats_tracker.hpp, so peaks stay exact without a shared write).
// Invariants:
//  - A block in a lane is free in the stats: the lane counted its free (allocated, requested,
//    active bytes and allocations down; inactive split bytes up by its size). For its stream it
//    is still allocated: it stays in the pointer map (with block::released set) and keeps its
//    segment live (so the segment is not wholly free while a lane holds one of its blocks).
//  - Only plain blocks enter a lane: default pool, no other stream recorded or named at the
//    free, at most the configured size, never oversize; never in checked, pass-through or
//    max_cached modes (the engine creates no lanes then). Tracing: a put and a take are
//    traced while the lane lock is held, so the trace stays in ownership order.
//  - A lane hands out only blocks of its own stream state, so stream order makes reuse safe,
//    whichever thread freed the block.
//  - drain() (under the engine's all_streams_lock) takes every block back exactly: the lane's
//    count of the free is cancelled and the stream frees the block the ordinary way.
// Lanes belong to the stream state, not to a thread: a thread that exits leaves its blocks to
// the next thread of its slot (and to every drain), and lanes die with their allocator, so no
// thread ever holds a pointer into an allocator that is gone.
#pragma once

#include <array>
#include <atomic>
#include <cstddef>
#include <cstdint>

#include "detail/block.hpp"
#include "detail/segment.hpp"
#include "detail/spinlock.hpp"
#include "detail/stats_tracker.hpp"

namespace cachalot::detail {

/// One lane: a small stack of free blocks of one stream state, and their stats.
struct alignas(128) tc_lane : stats_holder {
  static constexpr std::uint32_t max_capacity = 64;  ///< most blocks a lane can hold

  tc_lane() noexcept : stats_holder(nullptr, &lock, nullptr) {}

  enum class put_result : std::uint8_t { done, full, over_ceiling };

  /// Under `lock`: the most recently cached block of `pool` whose size `fits`, counted as
  /// allocated (`requested` bytes asked), or nullptr. With `forced` false, a block whose stats
  /// would cross a ceiling is left in place and `*over_ceiling` is set to its size.
  template <class Fits>
  block* take(pool_kind pool, std::size_t requested, bool forced, std::size_t* over_ceiling,
              Fits&& fits) {
    for (std::uint32_t i = count; i-- > 0;) {
      const std::size_t size = sizes[i];
      if (pools[i] != pool || !fits(size)) continue;
      if (!stats.try_alloc(pool, size, requested, 0, !forced)) [[unlikely]] {
        *over_ceiling = size;
        return nullptr;
      }
      block* b = slots[i];
      --count;
      filled.store(count, std::memory_order_relaxed);
      slots[i] = slots[count];
      sizes[i] = sizes[count];
      pools[i] = pools[count];
      b->requested = requested;
      b->in_lane.store(false, std::memory_order_relaxed);
      ++stats.num_allocs;
      misses = 0;
      backoff = min_backoff;
      return b;
    }
    if (++misses >= miss_limit) {  // a workload the lane does not serve (random sizes)
      misses = 0;
      cold.store(backoff, std::memory_order_relaxed);
      backoff = backoff < max_backoff ? 2 * backoff : max_backoff;
    }
    return nullptr;
  }

  /// Hot path, no lock: true if the lane is cold (its recent lookups missed), counting this
  /// allocation off the cold period; a cold lane is skipped by allocations and frees.
  bool skip_cold() noexcept {
    const std::uint32_t c = cold.load(std::memory_order_relaxed);
    if (c == 0) [[likely]]
      return false;
    cold.store(c - 1, std::memory_order_relaxed);  // (racy between threads of a slot: harmless)
    return true;
  }

  /// Under `lock`, with `count` == `capacity`: makes room by taking the oldest block out (its
  /// free no longer counted here, if that crosses no ceiling), for the caller to free on its
  /// stream once the lock is released, so that a lane follows its thread's working set.
  block* evict_oldest() noexcept {
    block* b = slots[0];
    const auto p = static_cast<std::size_t>(pools[0]);
    if (stats.crosses(q_allocated, p, b->size) || stats.crosses(q_requested, p, b->requested) ||
        stats.crosses(q_active, p, b->size) || stats.crosses(q_allocations, p, 1)) {
      return nullptr;
    }
    stats.cancel_cached_free(pools[0], b->size, b->requested);
    b->in_lane.store(false, std::memory_order_relaxed);
    --count;
    for (std::uint32_t i = 0; i < count; ++i) {
      slots[i] = slots[i + 1];
      sizes[i] = sizes[i + 1];
      pools[i] = pools[i + 1];
    }
    filled.store(count, std::memory_order_relaxed);
    return b;
  }

  /// Under `lock`: caches allocated block `b`, counting its free, unless `capacity` blocks are
  /// held or (with `forced` false) its stats would cross a ceiling.
  put_result put(block* b, std::uint32_t capacity, bool forced) noexcept {
    if (count >= capacity) return put_result::full;
    if (!used.load(std::memory_order_relaxed)) used.store(true, std::memory_order_release);
    const pool_kind pool = b->seg->pool;
    if (!stats.try_free(pool, b->size, b->requested, 0, !forced)) [[unlikely]]
      return put_result::over_ceiling;
    b->in_lane.store(true, std::memory_order_relaxed);
    slots[count] = b;
    sizes[count] = b->size;
    pools[count] = pool;
    ++count;
    filled.store(count, std::memory_order_relaxed);
    ++stats.num_frees;
    return put_result::done;
  }

  /// Under `lock` (and the stream's): takes every block back, cancelling the lane's count of
  /// its free, and hands it to `release` (which frees it on its stream). True if any.
  template <class Release>
  bool drain(Release&& release) {
    const bool any = count != 0;
    if (!any) return false;  // (an unused lane is not locked: write nothing)
    for (std::uint32_t i = 0; i < count; ++i) {
      block* b = slots[i];
      stats.cancel_cached_free(b->seg->pool, b->size, b->requested);
      b->in_lane.store(false, std::memory_order_relaxed);
      release(b);
    }
    count = 0;
    filled.store(0, std::memory_order_relaxed);
    return any;
  }

  /// Guards everything in the lane (taken after its stream's lock, if both). The hot path only
  /// tries it: a lane busy with another thread of its slot (or a drain) is skipped for that
  /// call, the stream serves it.
  spinlock lock;
  std::uint32_t count = 0;
  /// `count`, readable without the lock: a hit skips the lock of an empty lane (a stale value
  /// only costs a needless try, or a miss).
  std::atomic<std::uint32_t> filled{0};
  // Adaptive bypass: `miss_limit` misses in a row make the lane cold for `backoff` allocations,
  // doubling (up to max_backoff) while it keeps missing, back to min_backoff at a hit.
  static constexpr std::uint32_t miss_limit = 32, min_backoff = 64, max_backoff = 8192;
  std::uint32_t misses = 0;
  std::uint32_t backoff = min_backoff;
  std::atomic<std::uint32_t> cold{0};  ///< allocations left to skip the lane (lock-free reads)
  /// Has held a block (so may have counts and a ceiling); an unused lane is left out of
  /// all_streams_lock. Written under `lock`.
  std::atomic<bool> used{false};
  bool locked_by_all = false;  ///< locked by the all_streams_lock (stats_mutex_ holder) now
  // The blocks, and their sizes and pools (a hit reads no block but the one it takes).
  std::array<block*, max_capacity> slots{};
  std::array<std::size_t, max_capacity> sizes{};
  std::array<pool_kind, max_capacity> pools{};
};

/// The lanes of one stream state.
struct thread_cache {
  static constexpr std::size_t lane_count = 8;  ///< a power of two

  thread_cache(pool_peaks* peaks, peak_ledger* ledger) noexcept {
    for (tc_lane& l : lanes) {
      l.peaks = peaks;
      l.ledger = ledger;
    }
  }
  thread_cache(const thread_cache&) = delete;
  thread_cache& operator=(const thread_cache&) = delete;

  /// The calling thread's lane.
  tc_lane& mine() noexcept { return lanes[thread_slot() & (lane_count - 1)]; }

  /// Keeps lane 0 off the lines before the object (the end of its stream state, read by every
  /// thread of the stream: measured, sharing them cost a quarter of the 2-thread throughput).
  alignas(128) char guard[128] = {};
  std::array<tc_lane, lane_count> lanes;

 private:
  /// This thread's slot number (given in order of first use, process-wide).
  static std::uint32_t thread_slot() noexcept {
    static thread_local std::uint32_t slot = next_slot();
    return slot;
  }
  static std::uint32_t next_slot() noexcept;
};

}  // namespace cachalot::detail
