// The engine's locks for stats changes that may cross a ceiling (detail/stats_tracker.hpp):
//  - ceiling_lock: the stats mutex and one stream state with every thread-cache lane of it
//    that may hold stats, for a change applied unchecked (a new segment, a forced hit or cache
//    of a lane, a pending block completing, an undone release, a growth draining the state's
//    lanes); on release it settles the state's lane marks, then each holder with the peak
//    ledger (detail/peak_ledger.hpp), in amortized O(1) whatever the number of streams and
//    lanes (a pull locks only listed holders, each after its stream state);
//  - all_streams_lock: the stats mutex, then every stream lock and each stream's thread-cache
//    lanes, in registry order, for the rare operations that need one consistent view of
//    everything (a stats or snapshot read, draining every lane, resetting peaks, sleep and
//    wake); on release it rebalances the ceilings of every holder and rebuilds the ledger.
//
// Locks, in the order they are taken: the capture fence (detail/capture.hpp; shared around
// device calls a capture may forbid, exclusive only with no engine lock held), release_mutex_
// (serializes the deletion of segments), stats_mutex_, registry_mutex_ (shared; also guards
// pools and routes), stream spinlocks and lanes, then leaves (pointer-map shards, the ledger's
// and the pools' idle locks, idle_mutex_, events_mutex_, budget_mutex_). A thread holds one
// stream lock (or lane) on the hot path; it waits for a second one only under stats_mutex_
// (ceiling_lock, the peak ledger's pulls, all_streams_lock). A lane is taken after its stream's
// lock by every thread that waits for it: a stream operation in a segment a lane owns takes
// that lane; a stats_mutex_ holder takes each lane after the lane's stream lock; a hot path in
// a lane only tries others (a sibling, its stream) and, holding its stream's lock so got, may
// take the lane owning an evicted block's segment. So a thread waiting for a lane holds that
// lane's stream lock, and none waits for a lock with the ledger's held: no cycle.
// pending_mutex_ is never held with a stream lock.
// Included by detail/engine.hpp after the engine class.
#pragma once

#include <array>
#include <mutex>
#include <vector>

#include "detail/engine.hpp"

namespace cachalot::detail {

/// Every lock held: marks the segments whose live blocks all lie in thread-cache lanes, so that
/// the stats count them as a drain would leave them (thread_cache_marks.cpp). `scratch` has room
/// for every lane slot of a stream state.
void settle_marks(const std::vector<stream_state*>& list, std::vector<tc_held>& scratch) noexcept;
/// settle_marks for one stream state, locked with each of its lanes that holds blocks (seized).
void settle_state_marks(stream_state& state, std::vector<tc_held>& scratch) noexcept;

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
          if (l.seized || !(l.used.load(std::memory_order_acquire) || &l == trigger)) continue;
          l.lock.lock();
          l.seized = true;
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
    e_.ledger_.rebuild(holders_);
    const std::size_t in_use = e_.gstats_.peak(q_active, pool_count);
    if (reset_) {
      e_.policy_->on_peak_reset(in_use);
    } else {
      e_.policy_->on_in_use_peak(in_use);
    }
    for (auto it = lanes_.rbegin(); it != lanes_.rend(); ++it) {
      (*it)->seized = false;
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

/// The stats mutex and the locks of one stream state and of each of its thread-cache lanes that
/// may hold stats (used, or the trigger): at most 1 + thread_cache::lane_count holders, whatever
/// the number of streams. On release, settles the state's lane marks (a segment belongs to one
/// state), then each holder with the peak ledger (raising peaks as needed; a pull locks other
/// holders after their stream states), and tells the release policy of a new in-use peak.
/// A forced change under it may take or free in a segment a lane owns: the owner, a used lane
/// of the state, is held.
class engine::ceiling_lock {
 public:
  /// `h`: the stream state whose change crosses a ceiling, or a lane of it (the trigger).
  ceiling_lock(const engine& e, stats_holder& h) : e_(e), guard_(e.stats_mutex_) {
    stats_holder& s = h.outer != nullptr ? *h.outer : h;
    state_ = static_cast<stream_state*>(&s);
    hold(s);
    if (!state_->tcache) return;
    // Lanes as all_streams_lock takes them: only those that may hold stats (an unused lane
    // cannot gain any while this lock is held), in passes until none locks a new lane.
    for (bool more = true; more;) {
      more = false;
      for (tc_lane& l : state_->tcache->lanes) {
        if (l.seized || !(l.used.load(std::memory_order_acquire) || &l == &h)) continue;
        hold(l);
        more = true;
      }
    }
  }
  ~ceiling_lock() {
    // Marks lower only inactive-split counts: settled before an inactive-split peak is raised,
    // and not otherwise (a sort of every lane slot).
    if (count_ > 1 && crosses_inactive()) settle_state_marks(*state_, e_.tc_scratch_);
    for (std::size_t i = 0; i < count_; ++i) held_[i]->sync();  // slack listed, then settled
    bool raised = false;
    for (std::size_t i = 0; i < count_; ++i) {
      raised |= e_.ledger_.settle(*held_[i], held_.data(), count_, e_.gstats_.peaks());
    }
    if (raised) e_.policy_->on_in_use_peak(e_.gstats_.peak(q_active, pool_count));
    for (std::size_t i = count_; i-- > 0;) {
      held_[i]->seized = false;
      held_[i]->unlock();
    }
  }
  ceiling_lock(const ceiling_lock&) = delete;
  ceiling_lock& operator=(const ceiling_lock&) = delete;

 private:
  bool crosses_inactive() const noexcept {
    for (std::size_t i = 0; i < count_; ++i) {
      for (std::size_t p = 0; p < pool_count; ++p) {
        if (held_[i]->stats.slack(q_inactive, p) < 0) return true;
      }
    }
    return false;
  }
  void hold(stats_holder& h) noexcept {
    h.lock();
    h.seized = true;
    held_[count_++] = &h;
  }

  const engine& e_;
  std::lock_guard<std::mutex> guard_;
  stream_state* state_ = nullptr;
  std::array<stats_holder*, 1 + thread_cache::lane_count> held_{};
  std::size_t count_ = 0;
};

}  // namespace cachalot::detail
