// The engine's locks for stats changes that may cross a ceiling (detail/stats_tracker.hpp):
//  - ceiling_lock: the stats mutex and one stream state (or lane), maybe with some of its lanes,
//    for a change applied unchecked (a new segment, a forced hit, a pending block completing,
//    an undone release); on release each holder settles with the peak ledger
//    (detail/peak_ledger.hpp), in amortized O(1) whatever the number of streams; with thread
//    caches on, an all_streams_lock (lane marks are settled with every lock held);
//  - all_streams_lock: the stats mutex, then every stream lock and each stream's thread-cache
//    lanes, in registry order, for the rare operations that need one consistent view of
//    everything (a stats or snapshot read, draining every lane, resetting peaks); on release it
//    rebalances the ceilings of every holder and rebuilds the ledger.
//
// Locks, in the order they are taken: the capture fence (detail/capture.hpp; shared around
// device calls a capture may forbid, exclusive only with no engine lock held), release_mutex_
// (serializes the deletion of segments), stats_mutex_, registry_mutex_ (shared; also guards
// pools and routes), stream spinlocks and lanes, then leaves (pointer-map shards, the ledger's
// and the pools' idle locks, idle_mutex_, events_mutex_, budget_mutex_). A thread holds one
// stream lock (or lane) on the hot path; it waits for a second one only under stats_mutex_
// (ceiling_lock, the peak ledger's pulls, all_streams_lock: detail/all_streams_lock.hpp).
// A lane is taken after its stream's lock: a stream operation in a segment a lane owns takes
// that lane; a hot path in a lane only tries others (a sibling, its stream) and, holding its
// stream's lock so got, may take the lane owning an evicted block's segment. pending_mutex_
// is never held with a stream lock.
// Included by detail/engine.hpp after the engine class.
#pragma once

#include <array>
#include <mutex>
#include <optional>
#include <vector>

#include "detail/engine.hpp"

namespace cachalot::detail {

/// Every lock held: marks the segments whose live blocks all lie in thread-cache lanes, so that
/// the stats count them as a drain would leave them (thread_cache_marks.cpp). `scratch` has room
/// for every lane slot of a stream state.
void settle_marks(const std::vector<stream_state*>& list, std::vector<tc_held>& scratch) noexcept;

/// Holds the stats mutex, every stream lock (in registry order) and every used lane's lock; on
/// release, raises the peaks and shares out new stats ceilings. Lock order: release_mutex_,
/// stats_mutex_, registry_mutex_ (shared), stream locks, lane locks.
class engine::all_streams_lock {
 public:
  explicit all_streams_lock(const engine& e, const stats_holder* trigger = nullptr,
                            bool reset_peaks = false)
      : e_(e), guard_(e.stats_mutex_), list_(e.states()), trigger_(trigger), reset_(reset_peaks) {
    holders_.reserve(list_.size());
    for (stream_state* ss : list_) {
      ss->lock.lock();
      holders_.push_back(ss);
    }
    // Lanes: only those ever used are locked and rebalanced (an unused lane has no block, no
    // count and no ceiling, and cannot gain any while this lock is held: its first cache must
    // borrow room from a holder this lock holds, or take this lock). Passes repeat until none
    // locks a new lane: a lane that borrowed from one locked in a pass is seen used after it.
    for (bool more = true; more;) {
      more = false;
      for (stream_state* ss : list_) {
        if (!ss->tcache) continue;
        for (tc_lane& l : ss->tcache->lanes) {
          if (l.locked_by_all || !(l.used.load(std::memory_order_acquire) || &l == trigger)) {
            continue;
          }
          l.lock.lock();
          l.locked_by_all = true;
          lanes_.push_back(&l);
          holders_.push_back(&l);
          more = true;
        }
      }
    }
    if (!lanes_.empty()) settle_marks(list_, e_.tc_scratch_);  // counts as a drain would leave
  }
  ~all_streams_lock() {
    // An empty lane whose counts are all back to zero (and that owns no segment) gives up its
    // ceilings and leaves the next rebalances (until it caches again): lowering a ceiling keeps
    // the invariant, and the room goes to the trigger.
    if (!lanes_.empty()) settle_marks(list_, e_.tc_scratch_);  // before the peaks are raised
    holders_.resize(list_.size());
    for (tc_lane* l : lanes_) {
      if (l != trigger_ && l->count == 0 && l->owned_count == 0 && l->stats.at_zero()) {
        l->stats.clear_ceilings();
        l->used.store(false, std::memory_order_relaxed);
      } else {
        holders_.push_back(l);
      }
    }
    e_.gstats_.rebalance(holders_, trigger_, reset_);
    // (With thread caches no ceiling_lock settles with the ledger: it is rebuilt only without.)
    if (!e_.tc_on_) e_.ledger_.rebuild(holders_);
    const std::size_t in_use = e_.gstats_.peak(q_active, pool_count);
    if (reset_) {
      e_.policy_->on_peak_reset(in_use);
    } else {
      e_.policy_->on_in_use_peak(in_use);
    }
    for (auto it = lanes_.rbegin(); it != lanes_.rend(); ++it) {
      (*it)->locked_by_all = false;
      (*it)->lock.unlock();
    }
    for (auto it = list_.rbegin(); it != list_.rend(); ++it) (*it)->lock.unlock();
  }
  all_streams_lock(const all_streams_lock&) = delete;
  all_streams_lock& operator=(const all_streams_lock&) = delete;
  const std::vector<stream_state*>& streams() const noexcept { return list_; }
  /// The streams and their used thread-cache lanes: everything that holds stats.
  const std::vector<stats_holder*>& holders() const noexcept { return holders_; }

 private:
  const engine& e_;
  std::lock_guard<std::mutex> guard_;
  std::vector<stream_state*> list_;
  std::vector<stats_holder*> holders_;
  std::vector<tc_lane*> lanes_;  // the lanes locked (ever used, or the trigger)
  const stats_holder* trigger_;
  bool reset_;
};

/// The stats mutex and the locks of up to 1 + thread_cache::lane_count holders (of one stream
/// state); on release, settles each with the peak ledger (raising peaks as needed) and tells the
/// release policy of a new in-use peak. With thread caches on it is an all_streams_lock (trigger
/// `h`): a peak must be raised from settled lane marks (settle_marks), which needs every lock,
/// and a stream operation in a segment a lane owns waits for that lane holding its stream's
/// lock, which a pull (locking listed lanes and streams in any order) could deadlock against.
class engine::ceiling_lock {
 public:
  ceiling_lock(const engine& e, stats_holder& h) : e_(e) {
    if (e.tc_on_) {
      all_.emplace(e, &h);
      return;
    }
    guard_.emplace(e.stats_mutex_);
    add(h);
  }
  /// Locks one more holder of the same stream state (after the first; lanes after the stream).
  void add(stats_holder& h) noexcept {
    if (all_) return;  // (every used lane is locked, and a lane with blocks is used)
    h.guard->lock();
    held_[count_++] = &h;
  }
  ~ceiling_lock() {
    if (all_) return;
    bool raised = false;
    for (std::size_t i = 0; i < count_; ++i) {
      raised |= e_.ledger_.settle(*held_[i], held_.data(), count_, e_.gstats_.peaks());
    }
    if (raised) e_.policy_->on_in_use_peak(e_.gstats_.peak(q_active, pool_count));
    for (std::size_t i = count_; i-- > 0;) held_[i]->guard->unlock();
  }
  ceiling_lock(const ceiling_lock&) = delete;
  ceiling_lock& operator=(const ceiling_lock&) = delete;

 private:
  const engine& e_;
  std::optional<all_streams_lock> all_;
  std::optional<std::lock_guard<std::mutex>> guard_;
  std::array<stats_holder*, 1 + thread_cache::lane_count> held_{};
  std::size_t count_ = 0;
};

}  // namespace cachalot::detail
