// The engine's all-streams lock: the stats mutex, then every stream lock and each stream's
// thread-cache lanes, in registry order, for the rare operations that need one consistent view
// of everything (a new segment, a stats or snapshot read, a change that crosses a stats
// ceiling, draining lanes). On release it rebalances the stats ceilings of every holder
// (detail/stats_tracker.hpp). Included by detail/engine.hpp after the engine class.
#pragma once

#include <mutex>
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

}  // namespace cachalot::detail
