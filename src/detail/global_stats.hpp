// The engine-wide half of the stats scheme (detail/stats_tracker.hpp): the allocator's peaks,
// the full rebalance that sums every holder and shares out the headroom under the peaks as new
// ceilings (under the stats mutex with every holder locked: all_streams_lock), the reserved
// bytes the memory limit is checked against, and the engine's event counters.
// Invariants: peaks are read and written only under the stats mutex; after a rebalance, per
// quantity and size class, the ceilings of every memory pool's holders sum to at most its
// peaks and all holders' to at most the allocator's, each ceiling at least its current value.
// `committed()` is exact at every instant (reserve_room / release_room pair every segment).
#pragma once

#include <algorithm>
#include <atomic>
#include <cstddef>
#include <cstdint>

#include "detail/stats_tracker.hpp"

namespace cachalot::detail {

/// The engine-wide part: peaks, event counters, and the reserved bytes the memory limit is
/// checked against. Peaks are read and written only under the engine's stats mutex.
class global_stats {
 public:
  /// Sums `streams` (all locked by the caller, with the stats mutex), raises the peaks of the
  /// allocator and of every memory pool (each stream's `peaks`) to the totals and sets new
  /// ceilings. Invariant, per quantity: in every pool, the streams' ceilings of a size class
  /// sum to at most the pool's peak of that class, and over both classes to at most the pool's
  /// all-classes peak; over all pools the same holds against the allocator's peaks. Each stream
  /// keeps the ceiling it had (the room it freed is its own to reuse) as far as the invariant
  /// allows; what is left under every peak goes to `trigger`, the stream whose change crossed
  /// its ceiling (nullptr: none). `reset`: peaks become the totals and every ceiling the
  /// stream's current value.
  template <class StreamList, class Stream>
  void rebalance(const StreamList& streams, const Stream* trigger, bool reset) noexcept {
    constexpr std::size_t all = pool_count;
    for (std::size_t q = 0; q < quantity_count; ++q) {
      std::uint64_t total[pool_count + 1] = {};
      for (auto* ss : streams) {
        std::fill(std::begin(ss->peaks->total), std::end(ss->peaks->total), 0);
        std::fill(std::begin(ss->peaks->sum), std::end(ss->peaks->sum), 0);
      }
      for (auto* ss : streams) {
        for (std::size_t p = 0; p < pool_count; ++p) {
          const std::uint64_t c = ss->stats.current(q, p);
          for (std::uint64_t* t :
               {&total[p], &total[all], &ss->peaks->total[p], &ss->peaks->total[all]}) {
            *t += c;
          }
        }
      }
      for (std::size_t p = 0; p <= all; ++p) {
        peak_[q][p] = reset ? total[p] : std::max(peak_[q][p], total[p]);
      }
      for (auto* ss : streams) {  // idempotent: a pool with several streams is seen again
        pool_peaks& pp = *ss->peaks;
        for (std::size_t p = 0; p <= all; ++p) {
          pp.peak[q][p] = reset ? pp.total[p] : std::max(pp.peak[q][p], pp.total[p]);
        }
      }
      // Wanted ceilings: the old ones, never below current; trimmed where they overshoot.
      std::uint64_t sum[pool_count + 1] = {};
      for (auto* ss : streams) {
        auto& st = ss->stats;
        for (std::size_t p = 0; p < pool_count; ++p) {
          const std::uint64_t c = st.current(q, p);
          const std::uint64_t want = reset ? c : signed_max(c, st.ceiling(q, p));
          st.set_ceiling(q, p, want);
          for (std::uint64_t* t : {&sum[p], &sum[all], &ss->peaks->sum[p], &ss->peaks->sum[all]}) {
            *t += want;
          }
        }
      }
      // Trim: each pool's classes, each pool's total, then the allocator's classes and total.
      const auto over = [](std::uint64_t s, std::uint64_t peak) { return s > peak ? s - peak : 0; };
      for (std::size_t p = 0; p < pool_count; ++p) {
        for (auto* ss : streams) {
          cut(*ss, q, p, over(ss->peaks->sum[p], ss->peaks->peak[q][p]), sum);
        }
      }
      for (auto* ss : streams) {
        for (std::size_t p = 0; p < pool_count; ++p) {
          cut(*ss, q, p, over(ss->peaks->sum[all], ss->peaks->peak[q][all]), sum);
        }
      }
      for (std::size_t p = 0; p < pool_count; ++p) {
        for (auto* ss : streams) cut(*ss, q, p, over(sum[p], peak_[q][p]), sum);
      }
      for (auto* ss : streams) {
        for (std::size_t p = 0; p < pool_count; ++p)
          cut(*ss, q, p, over(sum[all], peak_[q][all]), sum);
      }
      if (trigger == nullptr || reset) continue;
      const auto it = std::find(streams.begin(), streams.end(), trigger);
      if (it == streams.end()) continue;
      auto& st = (*it)->stats;
      pool_peaks& pp = *(*it)->peaks;
      for (std::size_t p = 0; p < pool_count; ++p) {
        const std::uint64_t room =
            std::min({pp.peak[q][p] - pp.sum[p], pp.peak[q][all] - pp.sum[all],
                      peak_[q][p] - sum[p], peak_[q][all] - sum[all]});
        st.set_ceiling(q, p, st.ceiling(q, p) + room);
        for (std::uint64_t* t : {&sum[p], &sum[all], &pp.sum[p], &pp.sum[all]}) *t += room;
      }
    }
  }

  /// The peak of quantity `q` for pool index `p` (pool_count: all pools).
  std::uint64_t peak(std::size_t q, std::size_t p) const noexcept { return peak_[q][p]; }
  /// Every peak, for the peak ledger (stats mutex).
  std::uint64_t (&peaks() noexcept)[quantity_count][pool_count + 1] { return peak_; }

  /// Reserves room for a new segment against `limit` (0: none). False if it would exceed it.
  bool reserve_room(std::size_t bytes, std::size_t limit) noexcept {
    std::size_t now = committed_.load(std::memory_order_relaxed);
    do {
      if (limit != 0 && now + bytes > limit) return false;
    } while (!committed_.compare_exchange_weak(now, now + bytes, std::memory_order_relaxed));
    return true;
  }
  /// Returns room taken by reserve_room (a refused segment, or a released one).
  void release_room(std::size_t bytes) noexcept {
    committed_.fetch_sub(bytes, std::memory_order_relaxed);
  }
  /// Bytes in segments plus segments being allocated.
  std::size_t committed() const noexcept { return committed_.load(std::memory_order_relaxed); }

  std::atomic<std::uint64_t> num_ooms{0};
  std::atomic<std::uint64_t> num_retries{0};
  std::atomic<std::uint64_t> num_flushes{0};
  std::atomic<std::uint64_t> num_syncs{0};
  /// Synchronizations of releases before a growth (memory_stats::num_gc_syncs).
  std::atomic<std::uint64_t> num_gc_syncs{0};
  std::atomic<std::uint64_t> num_use_after_free{0};

 private:
  // Lowers the ceiling of size class `p` of stream `ss` towards its current value by up to
  // `excess` bytes, keeping the sums (the allocator's `sum` and the stream's pool's) in step.
  template <class Stream>
  static void cut(Stream& ss, std::size_t q, std::size_t p, std::uint64_t excess,
                  std::uint64_t* sum) noexcept {
    if (excess == 0) return;
    auto& st = ss.stats;
    const std::uint64_t slack = st.ceiling(q, p) - st.current(q, p);
    const std::uint64_t c = std::min(slack, excess);
    st.set_ceiling(q, p, st.ceiling(q, p) - c);
    for (std::uint64_t* t :
         {&sum[p], &sum[pool_count], &ss.peaks->sum[p], &ss.peaks->sum[pool_count]}) {
      *t -= c;
    }
  }

  std::uint64_t peak_[quantity_count][pool_count + 1] = {};
  std::atomic<std::size_t> committed_{0};
};

}  // namespace cachalot::detail
