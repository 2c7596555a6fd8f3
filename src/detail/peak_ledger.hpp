// The peak ledger: how a change that crosses a stats ceiling raises the peaks exactly without
// locking every stream and lane.
//
// The ceiling scheme (detail/stats_tracker.hpp): every holder (a stream state, or a lane of
// its thread cache) counts its changes under its own lock against its own ceilings, and per
// quantity and size class the ceilings sum to at most the peaks, of each memory pool and of the
// allocator. The ledger keeps those sums (`granted`) exact at all times, and one list per
// quantity of the holders that may hold *slack* there (ceiling above current): a holder lists
// itself, under the ledger's lock, in the critical section of the change that gives it slack
// (stats_holder::sync), so a holder that is not listed for a quantity is at its ceiling.
//
// A holder whose change crossed its ceiling settles (under the stats mutex, its lock held):
//  1. it takes the room it lacks from what the peaks leave over the granted sums: O(1);
//  2. if that is not enough, a *pull*: it locks the holders listed for the quantity (and only
//     them) and, holding all of them and the ledger lock at once (one consistent state: every
//     other holder is at its ceiling and can only move down, or list itself, after that
//     instant), takes their slack back and unlists them; the granted sums are then the exact
//     totals;
//  3. what room is still missing is a new maximum: the peaks rise to the totals.
// One pull serves every quantity the change is short of (an allocation raises four at once).
// Once its deficits are covered, the holder also takes what room the peaks still leave for the
// quantities it was short of (its ceiling above its current value, listed like any slack),
// shared between the size classes where the all-classes peak bounds their sum, so that its next
// increases below the peaks, of either class, need no settling; another holder that needs it
// pulls it back.
// Thread-cache lanes (detail/thread_cache.hpp) count a segment whose live blocks all lie in
// lanes as inactive split until a *mark* counts it wholly free: inactive-split counts may be
// above a drain's, never below, and a peak of them must be raised from settled counts. So a
// stream state that may hold such a segment unmarked has a holder listed for marks_bit (every
// decrease lists it), and a pull of inactive-split bytes locks, with each listed holder, its
// whole state (the stream, then all its lanes: `lanes`, a lane_group) and settles the state's
// marks, then unlists every marks_bit entry: at its instant every count is a drain's.
// A pull visits each listed holder (or its state) once and unlists it, and a holder lists
// itself at most once per quantity (and for marks) between two pulls, so a new peak costs
// amortized O(1) whatever the number of streams and lanes. A list holds a holder at most once
// (while its bit is set) and has room for every holder (reserve), so listing never allocates.
// Lock order: the stats mutex, then each holder after its stream state (a lane after its
// stream's lock, `outer`), stream states in any order (a thread that waits for a second
// stream lock, or for a lane while holding a stream lock, holds the stats mutex, or holds the
// lane's own stream lock: the hot paths only try); the ledger lock last (a leaf, never held
// while waiting for a holder).
#pragma once

#include <array>
#include <cstddef>
#include <cstdint>
#include <vector>

#include "detail/spinlock.hpp"
#include "detail/stats_tracker.hpp"

namespace cachalot::detail {

/// The allocator's peaks as a table (global_stats owns it).
using peak_table = std::uint64_t[quantity_count][pool_count + 1];

/// What a pull needs of thread caches (the engine's, detail/thread_cache.hpp): the lanes of a
/// stream state, and the settling of its segment marks. Called under the stats mutex only.
class lane_group {
 public:
  /// `state` (a stream state) locked and seized: locks its lanes that are not seized, seizes
  /// them and appends them to `out` (room reserved: no allocation).
  virtual void lock_lanes(stats_holder& state, std::vector<stats_holder*>& out) noexcept = 0;
  /// `state` and its lanes seized: counts the segments its lanes hold whole as wholly free
  /// (marks), then syncs the state and its lanes with the ledger.
  virtual void settle_marks(stats_holder& state) noexcept = 0;

 protected:
  ~lane_group() = default;
};

/// See the file comment. Thread-safe as described there.
class peak_ledger {
 public:
  /// Under h's lock: lists `h` for the quantities in `m` it is not listed for.
  void list(stats_holder& h, quantity_mask m) noexcept;

  /// Under the stats mutex, with `h` and every holder of `held` locked and seized by the caller
  /// (`h` among them), every lane of them with its stream state, and the marks of their
  /// stream state settled: raises h's ceilings to its current values (changes applied
  /// unchecked), taking room from the peaks' headroom, else from listed holders' slack, else
  /// raising the peaks (`global`: the allocator's). Returns true if a peak rose.
  bool settle(stats_holder& h, stats_holder* const* held, std::size_t held_count,
              peak_table& global) noexcept;

  /// With thread caches (before any holder is made): the engine's lane_group.
  void set_lanes(lane_group* lanes) noexcept { lanes_ = lanes; }

  /// Under the stats mutex with every holder of `holders` locked and every other holder at
  /// zero with no ceiling (after a full rebalance): recomputes the granted sums from their
  /// ceilings and lists each holder for the quantities where it has slack.
  template <class List>
  void rebuild(const List& holders) noexcept {
    for (auto* h : holders) zero(*h->peaks);
    for (auto& row : granted_) {
      for (std::uint64_t& g : row) g = 0;
    }
    for (auto* h : holders) {
      for (std::size_t q = 0; q < quantity_count; ++q) {
        for (std::size_t p = 0; p < pool_count; ++p) grant(*h, q, p, h->stats.ceiling(q, p));
        bool slack = false;
        for (std::size_t p = 0; p < pool_count; ++p) slack = slack || h->stats.slack(q, p) > 0;
        if (slack) list(*h, bit_of(q));
      }
    }
  }

  /// Makes room in every list for `holders` holders in all (when holders are made; may throw).
  void reserve(std::size_t holders);

  /// Under the stats mutex with `h` locked, its ceilings about to be zeroed at zero current (a
  /// stream state leaving a retired pool): takes its ceilings out of the granted sums and its
  /// entries out of the lists.
  void forget(stats_holder& h) noexcept;

  /// The allocator-wide granted sum of quantity `q`, size class `p` (tests; stats mutex).
  std::uint64_t granted(std::size_t q, std::size_t p) const noexcept { return granted_[q][p]; }
  /// Pulls so far (stats mutex).
  std::uint64_t pulls() const noexcept { return pulls_; }
  /// Holders pulls have locked so far, the settling ones not counted (stats mutex).
  std::uint64_t visits() const noexcept { return visits_; }

 private:
  /// Adds `c` (two's complement) to the granted sums of h's pool and of the allocator.
  void grant(const stats_holder& h, std::size_t q, std::size_t p, std::uint64_t c) noexcept {
    for (std::uint64_t* g : {&h.peaks->granted[q][p], &h.peaks->granted[q][pool_count],
                             &granted_[q][p], &granted_[q][pool_count]}) {
      *g += c;
    }
  }
  static void zero(pool_peaks& pp) noexcept {
    for (auto& row : pp.granted) {
      for (std::uint64_t& g : row) g = 0;
    }
  }
  /// Room left for h's class `p` of quantity `q` under the four peaks it counts against.
  std::uint64_t room(const stats_holder& h, std::size_t q, std::size_t p,
                     const peak_table& global) const noexcept;
  /// Room left for h's class `p` of quantity `q` under the two peaks of that class.
  std::uint64_t class_room(const stats_holder& h, std::size_t q, std::size_t p,
                           const peak_table& global) const noexcept;
  /// Room left for h's quantity `q` under the two all-classes peaks.
  std::uint64_t all_room(const stats_holder& h, std::size_t q,
                         const peak_table& global) const noexcept;
  /// After h's deficits of quantity `q` are covered: gives h the room the peaks leave, shared
  /// between the size classes.
  void share_spare(stats_holder& h, std::size_t q, const peak_table& global) noexcept;
  /// Takes back the slack of the quantities in `m` of every listed holder, in one consistent
  /// state (see the file comment).
  void pull(quantity_mask m, stats_holder* const* held, std::size_t held_count) noexcept;
  /// In a pull: true if `x` (listed) is still to be locked (`marks`: its state grouped).
  static bool pending(const stats_holder& x, bool marks) noexcept;
  /// In a pull: locks `x` after its stream state (`marks`: the whole state, marks settled).
  void seize(stats_holder& x, bool marks) noexcept;
  void grab(stats_holder& x) noexcept;

  spinlock lock_;  ///< guards lists_
  /// Per quantity, then marks_slot: the holders listed (a holder at most once per bit).
  std::array<std::vector<stats_holder*>, quantity_count + 1> lists_;
  std::uint64_t granted_[quantity_count][pool_count + 1] = {};  ///< stats mutex
  std::uint64_t pulls_ = 0;                                     ///< stats mutex
  std::uint64_t visits_ = 0;                                    ///< stats mutex
  lane_group* lanes_ = nullptr;                                 ///< with thread caches
  std::vector<stats_holder*> locked_, todo_;                    ///< scratch of pull()
};

}  // namespace cachalot::detail
