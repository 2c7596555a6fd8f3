// The allocator's counters, exact and consistent. Every change is one call that takes a short
// spinlock (a leaf lock: nothing else is acquired while it is held) and updates current, peak
// and cumulative values for the pool and for all pools. Inactive-split bytes are derived:
// reserved - active - bytes of segments that are entirely free.
#pragma once

#include <algorithm>
#include <cstddef>
#include <cstdint>
#include <mutex>

#include "cachalot/stats.hpp"
#include "detail/spinlock.hpp"

namespace cachalot::detail {

/// Thread-safe counters of one allocator.
class stats_tracker {
 public:
  /// A block of `size` bytes (asked: `requested`) was handed out; `whole_taken` is the size
  /// of a wholly free segment it was carved from (0 if none).
  void on_alloc(pool_kind p, std::size_t size, std::size_t requested, std::size_t whole_taken,
                bool oversize) noexcept {
    std::lock_guard<spinlock> lock(lock_);
    up(s_.allocated_bytes, p, size);
    up(s_.requested_bytes, p, requested);
    up(s_.active_bytes, p, size);
    up(s_.allocations, p, 1);
    whole_free_[index(p)] -= whole_taken;
    ++s_.num_allocs;
    if (oversize) ++s_.num_oversize_allocs;
    refresh_inactive(p);
  }

  /// A block was freed; `deferred`: it awaits events (stays active); `whole_made`: the size of
  /// the segment it made wholly free (0 if none).
  void on_free(pool_kind p, std::size_t size, std::size_t requested, bool deferred,
               std::size_t whole_made) noexcept {
    std::lock_guard<spinlock> lock(lock_);
    down(s_.allocated_bytes, p, size);
    down(s_.requested_bytes, p, requested);
    down(s_.allocations, p, 1);
    if (deferred) {
      ++s_.num_deferred_frees;
      ++s_.num_pending_blocks;
    } else {
      down(s_.active_bytes, p, size);
    }
    whole_free_[index(p)] += whole_made;
    ++s_.num_frees;
    refresh_inactive(p);
  }

  /// A pending block's events completed: it is free now.
  void on_pending_done(pool_kind p, std::size_t size, std::size_t whole_made) noexcept {
    std::lock_guard<spinlock> lock(lock_);
    down(s_.active_bytes, p, size);
    --s_.num_pending_blocks;
    whole_free_[index(p)] += whole_made;
    refresh_inactive(p);
  }

  /// A segment of `size` bytes was added (wholly free).
  void on_segment_alloc(pool_kind p, std::size_t size) noexcept {
    std::lock_guard<spinlock> lock(lock_);
    up(s_.reserved_bytes, p, size);
    up(s_.segments, p, 1);
    whole_free_[index(p)] += size;
    ++s_.num_segment_allocs;
    refresh_inactive(p);
  }

  /// A wholly free segment of `size` bytes was returned to the device.
  void on_segment_free(pool_kind p, std::size_t size) noexcept {
    std::lock_guard<spinlock> lock(lock_);
    down(s_.reserved_bytes, p, size);
    down(s_.segments, p, 1);
    whole_free_[index(p)] -= size;
    ++s_.num_segment_frees;
    refresh_inactive(p);
  }

  /// Reserves room for a new segment against `limit` (0: none). False if it would exceed it.
  bool reserve_room(std::size_t bytes, std::size_t limit) noexcept {
    std::lock_guard<spinlock> lock(lock_);
    if (limit != 0 && s_.reserved_bytes.all.current + in_flight_ + bytes > limit) return false;
    in_flight_ += bytes;
    return true;
  }
  /// Ends a reserve_room (after the segment was added or the device refused it).
  void unreserve_room(std::size_t bytes) noexcept {
    std::lock_guard<spinlock> lock(lock_);
    in_flight_ -= bytes;
  }

  void count_oom() noexcept { bump(&memory_stats::num_ooms); }
  void count_retry() noexcept { bump(&memory_stats::num_alloc_retries); }
  void count_flush() noexcept { bump(&memory_stats::num_cache_flushes); }
  void count_sync() noexcept { bump(&memory_stats::num_device_syncs); }
  void count_use_after_free() noexcept { bump(&memory_stats::num_use_after_free_writes); }

  /// A copy of the counters.
  memory_stats get() const noexcept {
    std::lock_guard<spinlock> lock(lock_);
    return s_;
  }
  /// Current reserved bytes.
  std::size_t reserved() const noexcept {
    std::lock_guard<spinlock> lock(lock_);
    return s_.reserved_bytes.all.current;
  }
  /// Sets every peak to its current value.
  void reset_peaks() noexcept {
    std::lock_guard<spinlock> lock(lock_);
    for (pool_stats* ps :
         {&s_.requested_bytes, &s_.allocated_bytes, &s_.reserved_bytes, &s_.active_bytes,
          &s_.inactive_split_bytes, &s_.allocations, &s_.segments}) {
      for (stat* st : {&ps->all, &ps->small, &ps->large}) st->peak = st->current;
    }
  }

 private:
  static std::size_t index(pool_kind p) noexcept { return static_cast<std::size_t>(p); }
  static stat& of(pool_stats& ps, pool_kind p) noexcept {
    return p == pool_kind::small ? ps.small : ps.large;
  }
  static void up(stat& st, std::uint64_t d) noexcept {
    st.current += d;
    st.allocated += d;
    st.peak = std::max(st.peak, st.current);
  }
  static void down(stat& st, std::uint64_t d) noexcept {
    st.current -= d;
    st.freed += d;
  }
  static void up(pool_stats& ps, pool_kind p, std::uint64_t d) noexcept {
    up(ps.all, d);
    up(of(ps, p), d);
  }
  static void down(pool_stats& ps, pool_kind p, std::uint64_t d) noexcept {
    down(ps.all, d);
    down(of(ps, p), d);
  }
  static void set(stat& st, std::uint64_t v) noexcept {
    if (v >= st.current) {
      up(st, v - st.current);
    } else {
      down(st, st.current - v);
    }
  }
  void refresh_inactive(pool_kind p) noexcept {
    const std::size_t i = index(p);
    stat& pool = of(s_.inactive_split_bytes, p);
    const stat& other =
        of(s_.inactive_split_bytes, p == pool_kind::small ? pool_kind::large : pool_kind::small);
    set(pool, of(s_.reserved_bytes, p).current - of(s_.active_bytes, p).current - whole_free_[i]);
    set(s_.inactive_split_bytes.all, pool.current + other.current);
  }
  void bump(std::uint64_t memory_stats::*field) noexcept {
    std::lock_guard<spinlock> lock(lock_);
    ++(s_.*field);
  }

  mutable spinlock lock_;
  memory_stats s_;
  std::size_t whole_free_[pool_count] = {};
  std::size_t in_flight_ = 0;
};

}  // namespace cachalot::detail
