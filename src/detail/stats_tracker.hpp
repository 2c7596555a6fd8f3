// The allocator's counters, exact and consistent. Every change is one call that takes a short
// spinlock (a leaf lock: nothing else is acquired while it is held). Each quantity is kept as
// two monotonic totals, increases and decreases (current = inc - dec), plus a peak, for all
// pools and for each pool, so that an update is an add and a compare. Inactive-split bytes are
// derived: reserved - active - bytes of segments that are entirely free.
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
    const std::size_t i = index(p);
    std::lock_guard<spinlock> lock(lock_);
    up(allocated_, i, size);
    up(requested_, i, requested);
    up(active_, i, size);
    up(allocations_, i, 1);
    whole_free_[i] -= whole_taken;
    ++num_allocs_;
    num_oversize_ += oversize ? 1 : 0;
    refresh_inactive(i);
  }

  /// A block was freed; `deferred`: it awaits events (stays active); `whole_made`: the size of
  /// the segment it made wholly free (0 if none).
  void on_free(pool_kind p, std::size_t size, std::size_t requested, bool deferred,
               std::size_t whole_made) noexcept {
    const std::size_t i = index(p);
    std::lock_guard<spinlock> lock(lock_);
    down(allocated_, i, size);
    down(requested_, i, requested);
    down(allocations_, i, 1);
    if (deferred) [[unlikely]] {
      ++num_deferred_;
      ++num_pending_;
    } else {
      down(active_, i, size);
    }
    whole_free_[i] += whole_made;
    ++num_frees_;
    refresh_inactive(i);
  }

  /// A pending block's events completed: it is free now.
  void on_pending_done(pool_kind p, std::size_t size, std::size_t whole_made) noexcept {
    const std::size_t i = index(p);
    std::lock_guard<spinlock> lock(lock_);
    down(active_, i, size);
    --num_pending_;
    whole_free_[i] += whole_made;
    refresh_inactive(i);
  }

  /// A segment of `size` bytes was added (wholly free).
  void on_segment_alloc(pool_kind p, std::size_t size) noexcept {
    const std::size_t i = index(p);
    std::lock_guard<spinlock> lock(lock_);
    up(reserved_, i, size);
    up(segments_, i, 1);
    whole_free_[i] += size;
    ++num_segment_allocs_;
    refresh_inactive(i);
  }

  /// A wholly free segment of `size` bytes was returned to the device.
  void on_segment_free(pool_kind p, std::size_t size) noexcept {
    const std::size_t i = index(p);
    std::lock_guard<spinlock> lock(lock_);
    down(reserved_, i, size);
    down(segments_, i, 1);
    whole_free_[i] -= size;
    ++num_segment_frees_;
    refresh_inactive(i);
  }

  /// Reserves room for a new segment against `limit` (0: none). False if it would exceed it.
  bool reserve_room(std::size_t bytes, std::size_t limit) noexcept {
    std::lock_guard<spinlock> lock(lock_);
    if (limit != 0 && reserved_[all].current() + in_flight_ + bytes > limit) return false;
    in_flight_ += bytes;
    return true;
  }
  /// Ends a reserve_room (after the segment was added or the device refused it).
  void unreserve_room(std::size_t bytes) noexcept {
    std::lock_guard<spinlock> lock(lock_);
    in_flight_ -= bytes;
  }

  void count_oom() noexcept { bump(num_ooms_); }
  void count_retry() noexcept { bump(num_retries_); }
  void count_flush() noexcept { bump(num_flushes_); }
  void count_sync() noexcept { bump(num_syncs_); }
  void count_use_after_free() noexcept { bump(num_use_after_free_); }

  /// A copy of the counters.
  memory_stats get() const noexcept {
    std::lock_guard<spinlock> lock(lock_);
    memory_stats s;
    export_to(s.allocated_bytes, allocated_);
    export_to(s.requested_bytes, requested_);
    export_to(s.active_bytes, active_);
    export_to(s.reserved_bytes, reserved_);
    export_to(s.inactive_split_bytes, inactive_);
    export_to(s.allocations, allocations_);
    export_to(s.segments, segments_);
    s.num_allocs = num_allocs_;
    s.num_frees = num_frees_;
    s.num_segment_allocs = num_segment_allocs_;
    s.num_segment_frees = num_segment_frees_;
    s.num_ooms = num_ooms_;
    s.num_alloc_retries = num_retries_;
    s.num_cache_flushes = num_flushes_;
    s.num_device_syncs = num_syncs_;
    s.num_oversize_allocs = num_oversize_;
    s.num_deferred_frees = num_deferred_;
    s.num_pending_blocks = num_pending_;
    s.num_use_after_free_writes = num_use_after_free_;
    return s;
  }
  /// Current reserved bytes.
  std::size_t reserved() const noexcept {
    std::lock_guard<spinlock> lock(lock_);
    return reserved_[all].current();
  }
  /// Sets every peak to its current value.
  void reset_peaks() noexcept {
    std::lock_guard<spinlock> lock(lock_);
    for (counter* group : {allocated_, requested_, active_, reserved_, inactive_, allocations_,
                           segments_}) {
      for (std::size_t i = 0; i < 3; ++i) group[i].peak = group[i].current();
    }
  }

 private:
  static constexpr std::size_t all = 2;  // index of the all-pools counter
  struct counter {
    std::uint64_t inc = 0;
    std::uint64_t dec = 0;
    std::uint64_t peak = 0;
    std::uint64_t current() const noexcept { return inc - dec; }
  };

  static std::size_t index(pool_kind p) noexcept { return static_cast<std::size_t>(p); }
  static void raise(counter& c, std::uint64_t d) noexcept {
    c.inc += d;
    c.peak = std::max(c.peak, c.inc - c.dec);
  }
  static void up(counter* group, std::size_t i, std::uint64_t d) noexcept {
    raise(group[i], d);
    raise(group[all], d);
  }
  static void down(counter* group, std::size_t i, std::uint64_t d) noexcept {
    group[i].dec += d;
    group[all].dec += d;
  }
  static void move_to(counter& c, std::uint64_t v) noexcept {
    const std::uint64_t now = c.current();
    if (v >= now) {
      raise(c, v - now);
    } else {
      c.dec += now - v;
    }
  }
  void refresh_inactive(std::size_t i) noexcept {
    const std::uint64_t v = reserved_[i].current() - active_[i].current() - whole_free_[i];
    const std::uint64_t delta_all = v - inactive_[i].current();  // modular: may "wrap" down
    move_to(inactive_[i], v);
    move_to(inactive_[all], inactive_[all].current() + delta_all);
  }
  static void export_to(pool_stats& out, const counter* group) noexcept {
    stat* dst[3] = {&out.small, &out.large, &out.all};
    for (std::size_t i = 0; i < 3; ++i) {
      *dst[i] = stat{group[i].current(), group[i].peak, group[i].inc, group[i].dec};
    }
  }
  void bump(std::uint64_t& field) noexcept {
    std::lock_guard<spinlock> lock(lock_);
    ++field;
  }

  mutable spinlock lock_;
  counter allocated_[3];
  counter requested_[3];
  counter active_[3];
  counter reserved_[3];
  counter inactive_[3];
  counter allocations_[3];
  counter segments_[3];
  std::uint64_t whole_free_[pool_count] = {};
  std::uint64_t num_allocs_ = 0, num_frees_ = 0, num_segment_allocs_ = 0,
                num_segment_frees_ = 0, num_ooms_ = 0, num_retries_ = 0, num_flushes_ = 0,
                num_syncs_ = 0, num_oversize_ = 0,
                num_deferred_ = 0, num_pending_ = 0, num_use_after_free_ = 0;
  std::size_t in_flight_ = 0;
};

}  // namespace cachalot::detail
