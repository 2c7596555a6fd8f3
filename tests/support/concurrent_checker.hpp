// Test support: a concurrent checker. On a thread of its own it reads an allocator over and
// over while a test, the stress program or a fuzzer drives it (each round: stats(), pools() and
// stats(pool) of every pool, snapshot(), stats() again; every call is one consistent cut) and
// checks every documented invariant of the stats that can be checked while other threads run.
//  In one read (the allocator's, and each pool's):
//   - peak >= current, for every quantity and size class; current = allocated - freed; the all
//     value is small + large (current, allocated, freed);
//   - requested <= allocated <= active <= reserved and active + inactive split <= reserved, in
//     each size class; the largest free block <= reserved - active;
//   - num_segment_allocs - num_segment_frees == segments, num_allocs - num_frees == allocations,
//     and those counters equal the segments' and allocations' cumulative values;
//   - max(small, large) <= all <= small + large, for every peak;
//   - no pending block exactly when active == allocated; no free block exactly when the largest
//     free block is 0; reserved never above the device's capacity (when given).
//  Between two reads, the earlier one first:
//   - cumulative values never decrease (allocated and freed of every stat, every num_ counter,
//     num_streams of the allocator);
//   - peaks never decrease, unless the peaks were reset in between;
//   - every peak is reached by some state since the last reset: any state s since then had
//     current_s = current - (allocated - allocated_s) + (freed - freed_s), so
//     peak <= current + (freed - freed_r), r the last read before the reset (zero before any);
//     in particular, right after a reset with nothing changed, peak == current;
//   - pools against the allocator read before (b) and after (a) them: the pools' cumulative
//     counters sum to between b's and a's; a pool's peak is at most a's; b's peak is at most the
//     sum of the pools' peaks (a maximum of sums is at most the sum of the maxima).
//  In each snapshot: segments sorted and disjoint, and each well formed (blocks tile it, free
//  blocks and holes coalesced, holes on chunk boundaries: reliability/invariants.hpp).
// What needs two calls to agree (snapshot sums against stats, the device against reserved)
// holds only at quiescent points: tests check that there (invariants.hpp). Peaks may only be
// reset through the checker (reset_peak_stats()), so that it knows where the reset lies.
// Failures are collected as text, not as gtest assertions: the stress program and the fuzzers
// use the checker too.
#pragma once

#include <algorithm>
#include <atomic>
#include <chrono>
#include <cstdint>
#include <map>
#include <mutex>
#include <string>
#include <thread>
#include <vector>

#include "cachalot/allocator.hpp"
#include "reliability/invariants.hpp"

namespace cachalot::testing {

/// How a concurrent_checker reads.
struct checker_options {
  std::chrono::microseconds pause{50};  ///< between two rounds of reads
  unsigned reset_every = 0;             ///< reset the peaks after every N rounds (0: never)
  unsigned snapshot_every = 1;          ///< a snapshot every N rounds (0: never)
  std::uint64_t capacity = 0;           ///< reserved bytes never above it (0: not checked)
};

namespace detail_cc {

struct group {
  const char* name;
  pool_stats memory_stats::*field;
};
inline constexpr group groups[] = {
    {"requested", &memory_stats::requested_bytes},
    {"allocated", &memory_stats::allocated_bytes},
    {"reserved", &memory_stats::reserved_bytes},
    {"active", &memory_stats::active_bytes},
    {"inactive_split", &memory_stats::inactive_split_bytes},
    {"allocations", &memory_stats::allocations},
    {"segments", &memory_stats::segments},
};
struct size_class {
  const char* name;
  stat pool_stats::*field;
};
inline constexpr size_class classes[] = {
    {"small", &pool_stats::small}, {"large", &pool_stats::large}, {"all", &pool_stats::all}};

struct counter {
  const char* name;
  std::uint64_t memory_stats::*field;
  enum kind { additive, upper_bound, allocator_wide } sum;  ///< how pools add up to the allocator
};
inline constexpr counter counters[] = {
    {"num_allocs", &memory_stats::num_allocs, counter::additive},
    {"num_frees", &memory_stats::num_frees, counter::additive},
    {"num_segment_allocs", &memory_stats::num_segment_allocs, counter::additive},
    {"num_segment_frees", &memory_stats::num_segment_frees, counter::additive},
    {"num_chunk_maps", &memory_stats::num_chunk_maps, counter::additive},
    {"num_chunk_unmaps", &memory_stats::num_chunk_unmaps, counter::additive},
    {"num_oversize_allocs", &memory_stats::num_oversize_allocs, counter::additive},
    {"num_deferred_frees", &memory_stats::num_deferred_frees, counter::additive},
    // impossible sizes fail before any pool is chosen; retries after the OOM callback, and
    // use-after-free writes, are the allocator's too
    {"num_ooms", &memory_stats::num_ooms, counter::upper_bound},
    {"num_alloc_retries", &memory_stats::num_alloc_retries, counter::upper_bound},
    {"num_use_after_free_writes", &memory_stats::num_use_after_free_writes, counter::upper_bound},
    {"num_cache_flushes", &memory_stats::num_cache_flushes, counter::allocator_wide},
    {"num_device_syncs", &memory_stats::num_device_syncs, counter::allocator_wide},
};

inline std::string num(std::uint64_t v) {
  return std::to_string(v);
}

/// What breaks an invariant of one read (file comment), or "".
inline std::string check_read(const memory_stats& s, std::uint64_t capacity) {
  for (const group& g : groups) {
    const pool_stats& ps = s.*g.field;
    for (const size_class& c : classes) {
      const stat& st = ps.*c.field;
      const std::string what = std::string(g.name) + " (" + c.name + ")";
      if (st.peak < st.current)
        return what + ": peak " + num(st.peak) + " < current " + num(st.current);
      if (st.current != st.allocated - st.freed) {
        return what + ": current " + num(st.current) + " != allocated " + num(st.allocated) +
               " - freed " + num(st.freed);
      }
    }
    if (ps.all.current != ps.small.current + ps.large.current ||
        ps.all.allocated != ps.small.allocated + ps.large.allocated ||
        ps.all.freed != ps.small.freed + ps.large.freed) {
      return std::string(g.name) + ": all != small + large";
    }
    if (ps.all.peak < std::max(ps.small.peak, ps.large.peak) ||
        ps.all.peak > ps.small.peak + ps.large.peak) {
      return std::string(g.name) + ": peak (all) " + num(ps.all.peak) + " outside [max, sum] of " +
             num(ps.small.peak) + " and " + num(ps.large.peak);
    }
  }
  for (const size_class& c : classes) {
    const std::uint64_t req = (s.requested_bytes.*c.field).current;
    const std::uint64_t alloc = (s.allocated_bytes.*c.field).current;
    const std::uint64_t active = (s.active_bytes.*c.field).current;
    const std::uint64_t reserved = (s.reserved_bytes.*c.field).current;
    const std::uint64_t inactive = (s.inactive_split_bytes.*c.field).current;
    if (req > alloc || alloc > active || active > reserved || active + inactive > reserved) {
      return std::string(
                 "requested <= allocated <= active <= reserved, active + inactive <= "
                 "reserved (") +
             c.name + "): " + num(req) + ", " + num(alloc) + ", " + num(active) + ", " +
             num(reserved) + ", inactive " + num(inactive);
    }
  }
  const std::uint64_t free_bytes = s.reserved_bytes.all.current - s.active_bytes.all.current;
  if (s.largest_free_block > free_bytes) {
    return "largest free block " + num(s.largest_free_block) + " > free bytes " + num(free_bytes);
  }
  if (s.num_segment_allocs != s.num_segment_frees + s.segments.all.current) {
    return "num_segment_allocs " + num(s.num_segment_allocs) + " - num_segment_frees " +
           num(s.num_segment_frees) + " != segments " + num(s.segments.all.current);
  }
  if (s.num_allocs != s.num_frees + s.allocations.all.current) {
    return "num_allocs " + num(s.num_allocs) + " - num_frees " + num(s.num_frees) +
           " != allocations " + num(s.allocations.all.current);
  }
  if (s.segments.all.allocated != s.num_segment_allocs ||
      s.segments.all.freed != s.num_segment_frees) {
    return "segments allocated/freed " + num(s.segments.all.allocated) + "/" +
           num(s.segments.all.freed) + " != num_segment_allocs/frees " + num(s.num_segment_allocs) +
           "/" + num(s.num_segment_frees);
  }
  if (s.allocations.all.allocated != s.num_allocs || s.allocations.all.freed != s.num_frees) {
    return "allocations allocated/freed " + num(s.allocations.all.allocated) + "/" +
           num(s.allocations.all.freed) + " != num_allocs/frees " + num(s.num_allocs) + "/" +
           num(s.num_frees);
  }
  if ((s.num_pending_blocks == 0) !=
      (s.active_bytes.all.current == s.allocated_bytes.all.current)) {
    return num(s.num_pending_blocks) + " pending blocks, but active " +
           num(s.active_bytes.all.current) + " and allocated " + num(s.allocated_bytes.all.current);
  }
  if ((s.num_free_blocks == 0) != (s.largest_free_block == 0)) {
    return num(s.num_free_blocks) + " free blocks, but the largest is " + num(s.largest_free_block);
  }
  if (capacity != 0 && s.reserved_bytes.all.peak > capacity) {
    return "reserved peak " + num(s.reserved_bytes.all.peak) + " above the device's " +
           num(capacity);
  }
  return "";
}

/// What breaks an invariant between `earlier` and `later` (file comment), or "". `reset`: the
/// peaks were reset in between; `streams`: num_streams is cumulative (the allocator's).
inline std::string check_pair(const memory_stats& earlier, const memory_stats& later, bool reset,
                              bool streams) {
  for (const counter& k : counters) {
    if (later.*k.field < earlier.*k.field) {
      return std::string(k.name) + " went back from " + num(earlier.*k.field) + " to " +
             num(later.*k.field);
    }
  }
  if (streams && later.num_streams < earlier.num_streams) return "num_streams went back";
  for (const group& g : groups) {
    for (const size_class& c : classes) {
      const stat& e = earlier.*g.field.*c.field;
      const stat& l = later.*g.field.*c.field;
      const std::string what = std::string(g.name) + " (" + c.name + ")";
      if (l.allocated < e.allocated || l.freed < e.freed) {
        return what + ": cumulative allocated/freed went back from " + num(e.allocated) + "/" +
               num(e.freed) + " to " + num(l.allocated) + "/" + num(l.freed);
      }
      if (!reset && l.peak < e.peak) {
        return what + ": peak went back from " + num(e.peak) + " to " + num(l.peak);
      }
    }
  }
  return "";
}

/// Every peak of `s` is reached by a state since the last reset; `base`: the last read before
/// that reset (all zero if none).
inline std::string check_peak_bound(const memory_stats& s, const memory_stats& base) {
  for (const group& g : groups) {
    for (const size_class& c : classes) {
      const stat& st = s.*g.field.*c.field;
      const std::uint64_t before = (base.*g.field.*c.field).freed;
      const std::uint64_t bound = st.current + (st.freed >= before ? st.freed - before : 0);
      if (st.peak > bound) {
        return std::string(g.name) + " (" + c.name + "): peak " + num(st.peak) +
               " reached by no state since the reset (current " + num(st.current) +
               ", freed since " + num(st.freed - std::min(st.freed, before)) + ")";
      }
    }
  }
  return "";
}

/// The pools (read between `before` and `after`, no reset in between) against the allocator.
inline std::string check_pools(const memory_stats& before, const std::vector<memory_stats>& pools,
                               const memory_stats& after) {
  for (const counter& k : counters) {
    std::uint64_t sum = 0;
    for (const memory_stats& p : pools) {
      sum += p.*k.field;
      if (k.sum == counter::allocator_wide &&
          (p.*k.field < before.*k.field || p.*k.field > after.*k.field)) {
        return std::string("a pool's ") + k.name + " is not the allocator's";
      }
    }
    if (k.sum == counter::allocator_wide) continue;
    if (sum > after.*k.field || (k.sum == counter::additive && sum < before.*k.field)) {
      return std::string("the pools' ") + k.name + " sum to " + num(sum) + ", the allocator's " +
             num(before.*k.field) + " before and " + num(after.*k.field) + " after";
    }
  }
  for (const group& g : groups) {
    for (const size_class& c : classes) {
      std::uint64_t allocated = 0, freed = 0, peaks = 0;
      for (const memory_stats& p : pools) {
        const stat& st = p.*g.field.*c.field;
        allocated += st.allocated;
        freed += st.freed;
        peaks += st.peak;
        if (st.peak > (after.*g.field.*c.field).peak) {
          return std::string(g.name) + " (" + c.name + "): a pool's peak " + num(st.peak) +
                 " above the allocator's " + num((after.*g.field.*c.field).peak);
        }
      }
      const stat& b = before.*g.field.*c.field;
      const stat& a = after.*g.field.*c.field;
      if (allocated < b.allocated || allocated > a.allocated || freed < b.freed ||
          freed > a.freed) {
        return std::string(g.name) + " (" + c.name +
               "): the pools' cumulative values do not "
               "add up to the allocator's";
      }
      if (!pools.empty() && b.peak > peaks) {
        return std::string(g.name) + " (" + c.name + "): the allocator's peak " + num(b.peak) +
               " above the sum of the pools' peaks " + num(peaks);
      }
    }
  }
  return "";
}

/// The shape of a snapshot taken while others run (file comment), or "".
inline std::string check_snapshot(const memory_snapshot& snap) {
  std::uintptr_t end = 0;
  detail_inv::pool_sums sums;
  std::uint64_t pending = 0, free_blocks = 0, largest = 0;
  for (const segment_info& seg : snap.segments) {
    if (seg.address < end) return "snapshot segments overlap or are not sorted";
    end = seg.address + seg.range_size;
    std::string e = detail_inv::check_segment(seg, sums, pending, free_blocks, largest);
    if (!e.empty()) return "snapshot: " + e;
  }
  return "";
}

}  // namespace detail_cc

/// Reads an allocator on its own thread from construction to stop() (or destruction) and
/// checks the invariants of the file comment.
class concurrent_checker {
 public:
  explicit concurrent_checker(allocator& a, checker_options o = {})
      : a_(a), o_(o), thread_([this] { loop(); }) {}
  ~concurrent_checker() { stop(); }
  concurrent_checker(const concurrent_checker&) = delete;
  concurrent_checker& operator=(const concurrent_checker&) = delete;

  /// Stops the thread after one last round of reads (so that there is at least one).
  void stop() {
    if (!thread_.joinable()) return;
    stop_.store(true, std::memory_order_release);
    thread_.join();
  }

  /// Resets the allocator's peaks between two rounds of reads (the only way a test may reset
  /// them while the checker runs).
  void reset_peak_stats() {
    std::lock_guard<std::mutex> lock(round_mutex_);
    reset_locked();
  }

  /// True if no invariant broke.
  bool ok() const { return failures_.load(std::memory_order_acquire) == 0; }
  /// The first failures, one a line.
  std::string report() const {
    std::lock_guard<std::mutex> lock(log_mutex_);
    std::string out = std::to_string(failures_.load()) + " failure(s) in " +
                      std::to_string(rounds_.load()) + " rounds of reads";
    for (const std::string& l : log_) out += "\n  " + l;
    return out;
  }
  /// Rounds of reads done.
  std::uint64_t rounds() const { return rounds_.load(std::memory_order_acquire); }

 private:
  void loop() {
    for (bool last = false; !last;) {
      last = stop_.load(std::memory_order_acquire);
      {
        std::lock_guard<std::mutex> lock(round_mutex_);
        try {
          round();
        } catch (const std::exception& e) {
          fail(std::string("a read threw: ") + e.what());
        }
        const std::uint64_t n = rounds_.fetch_add(1, std::memory_order_acq_rel) + 1;
        if (o_.reset_every != 0 && n % o_.reset_every == 0) reset_locked();
      }
      if (!last && o_.pause.count() != 0) std::this_thread::sleep_for(o_.pause);
    }
  }

  void reset_locked() {
    base_ = last_;
    base_pools_ = last_pools_;
    reset_ = true;
    a_.reset_peak_stats();
  }

  void round() {
    using namespace detail_cc;
    const memory_stats before = a_.stats();
    const std::vector<pool_info> infos = a_.pools();
    std::vector<memory_stats> pools;
    for (const pool_info& p : infos) pools.push_back(a_.stats(p.id));
    const bool snap = o_.snapshot_every != 0 && rounds_.load() % o_.snapshot_every == 0;
    const memory_snapshot snapshot = snap ? a_.snapshot() : memory_snapshot{};
    const memory_stats after = a_.stats();
    const bool reset = reset_;
    reset_ = false;
    check("allocator (before pools)", check_read(before, o_.capacity));
    check("allocator (after pools)", check_read(after, o_.capacity));
    check("allocator since the last round", check_pair(last_, before, reset, true));
    check("allocator across the round", check_pair(before, after, false, true));
    check("allocator (before pools)", check_peak_bound(before, base_));
    check("allocator (after pools)", check_peak_bound(after, base_));
    check("pools against the allocator", check_pools(before, pools, after));
    for (std::size_t i = 0; i < infos.size(); ++i) {
      const std::string who = "pool " + std::to_string(infos[i].id);
      const memory_stats& s = pools[i];
      check(who, check_read(s, o_.capacity));
      if (infos[i].limit != 0 && s.reserved_bytes.all.peak > infos[i].limit) {
        check(who, "reserved peak " + num(s.reserved_bytes.all.peak) + " above its limit");
      }
      check(who + " since the last round", check_pair(last_pools_[infos[i].id], s, reset, false));
      check(who, check_peak_bound(s, base_pools_[infos[i].id]));
      last_pools_[infos[i].id] = s;
    }
    if (snap) check("snapshot", check_snapshot(snapshot));
    last_ = after;
  }

  void check(const std::string& who, const std::string& e) {
    if (!e.empty()) fail(who + ": " + e);
  }
  void fail(const std::string& what) {
    std::lock_guard<std::mutex> lock(log_mutex_);
    failures_.fetch_add(1, std::memory_order_acq_rel);
    if (log_.size() < 12) log_.push_back("round " + std::to_string(rounds_.load()) + ": " + what);
  }

  allocator& a_;
  const checker_options o_;
  std::atomic<bool> stop_{false};
  std::atomic<std::uint64_t> rounds_{0};
  std::atomic<std::uint64_t> failures_{0};
  std::mutex round_mutex_;  // a round of reads, or a reset
  mutable std::mutex log_mutex_;
  std::vector<std::string> log_;
  // Read and written by rounds and resets only (round_mutex_).
  memory_stats last_{}, base_{};
  std::map<pool_id, memory_stats> last_pools_, base_pools_;
  bool reset_ = false;
  std::thread thread_;  // last: starts once everything above is built
};

}  // namespace cachalot::testing
