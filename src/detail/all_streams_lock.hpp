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

/// Holds the stats mutex and every stream lock (in registry order); on release, raises the
/// peaks and shares out new stats ceilings. Lock order: release_mutex_, stats_mutex_,
/// registry_mutex_ (shared), stream locks.
class engine::all_streams_lock {
 public:
  explicit all_streams_lock(const engine& e, const stats_holder* trigger = nullptr,
                            bool reset_peaks = false)
      : e_(e), guard_(e.stats_mutex_), list_(e.states()), trigger_(trigger), reset_(reset_peaks) {
    holders_.reserve(list_.size());
    for (stream_state* ss : list_) {
      ss->lock.lock();
      holders_.push_back(ss);
      if (ss->tcache) {
        for (tc_lane& l : ss->tcache->lanes) {
          l.lock.lock();
          holders_.push_back(&l);
        }
      }
    }
  }
  ~all_streams_lock() {
    e_.gstats_.rebalance(holders_, trigger_, reset_);
    for (auto it = list_.rbegin(); it != list_.rend(); ++it) {
      if ((*it)->tcache) {
        for (tc_lane& l : (*it)->tcache->lanes) l.lock.unlock();
      }
      (*it)->lock.unlock();
    }
  }
  all_streams_lock(const all_streams_lock&) = delete;
  all_streams_lock& operator=(const all_streams_lock&) = delete;
  const std::vector<stream_state*>& streams() const noexcept { return list_; }
  /// The streams and their thread-cache lanes: everything that holds stats.
  const std::vector<stats_holder*>& holders() const noexcept { return holders_; }

 private:
  const engine& e_;
  std::lock_guard<std::mutex> guard_;
  std::vector<stream_state*> list_;
  std::vector<stats_holder*> holders_;
  const stats_holder* trigger_;
  bool reset_;
};

}  // namespace cachalot::detail
