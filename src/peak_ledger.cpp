// The peak ledger (detail/peak_ledger.hpp): listing, settling a crossed ceiling, pulls.
#include "detail/peak_ledger.hpp"

#include <algorithm>
#include <bit>
#include <mutex>

namespace cachalot::detail {

void stats_holder::list_grown() noexcept {
  ledger->list(*this, static_cast<quantity_mask>(stats.grown() & ~listed));
}

void peak_ledger::list(stats_holder& h, quantity_mask m) noexcept {
  m = static_cast<quantity_mask>(m & ~h.listed);
  if (m == 0) return;
  std::lock_guard<spinlock> lock(lock_);
  for (std::size_t q = 0; q < quantity_count; ++q) {
    // (Never allocates: each list has room for every holder, reserve(), and holds a holder at
    // most once, while its bit is set.)
    if ((m & bit_of(q)) != 0) lists_[q].push_back(&h);
  }
  h.listed |= m;
}

namespace {
/// Room a peak leaves over a granted sum. (Signed: while several holders settle one after
/// another, a sum may be above a peak for a moment, the ceilings of those not settled yet lying
/// below their current values.)
std::uint64_t left(std::uint64_t peak, std::uint64_t granted) noexcept {
  const auto d = static_cast<std::int64_t>(peak - granted);
  return d > 0 ? static_cast<std::uint64_t>(d) : 0;
}
}  // namespace

std::uint64_t peak_ledger::class_room(const stats_holder& h, std::size_t q, std::size_t p,
                                      const peak_table& global) const noexcept {
  return std::min(left(h.peaks->peak[q][p], h.peaks->granted[q][p]),
                  left(global[q][p], granted_[q][p]));
}

std::uint64_t peak_ledger::all_room(const stats_holder& h, std::size_t q,
                                    const peak_table& global) const noexcept {
  return std::min(left(h.peaks->peak[q][pool_count], h.peaks->granted[q][pool_count]),
                  left(global[q][pool_count], granted_[q][pool_count]));
}

std::uint64_t peak_ledger::room(const stats_holder& h, std::size_t q, std::size_t p,
                                const peak_table& global) const noexcept {
  return std::min(class_room(h, q, p, global), all_room(h, q, global));
}

bool peak_ledger::settle(stats_holder& h, stats_holder* const* held, std::size_t held_count,
                         peak_table& global) noexcept {
  const std::uint32_t deficits = h.stats.deficits();  // bit q * pool_count + p
  const auto each = [deficits](auto&& fn) {
    for (std::uint32_t m = deficits; m != 0; m &= m - 1) {
      const auto bit = static_cast<std::size_t>(std::countr_zero(m));
      fn(bit / pool_count, bit % pool_count);
    }
  };
  const auto need = [&h](std::size_t q, std::size_t p) {
    return static_cast<std::uint64_t>(-h.stats.slack(q, p));
  };
  // The quantities whose deficit the peaks' headroom does not cover: pulled in one pass.
  quantity_mask short_of = 0;
  each([&](std::size_t q, std::size_t p) {
    if (room(h, q, p, global) < need(q, p)) short_of |= bit_of(q);
  });
  if (short_of != 0) pull(short_of, held, held_count);
  bool raised = false;
  each([&](std::size_t q, std::size_t p) {
    const std::uint64_t n = need(q, p);
    if (room(h, q, p, global) < n) {
      // Every other holder is at its ceiling: the granted sums plus `n` are the totals.
      pool_peaks& pp = *h.peaks;
      for (auto [peak, granted] : {std::pair{&pp.peak[q][p], pp.granted[q][p]},
                                   std::pair{&pp.peak[q][pool_count], pp.granted[q][pool_count]},
                                   std::pair{&global[q][p], granted_[q][p]},
                                   std::pair{&global[q][pool_count], granted_[q][pool_count]}}) {
        if (static_cast<std::int64_t>(granted + n) > static_cast<std::int64_t>(*peak)) {
          *peak = granted + n;
          raised = true;
        }
      }
    }
    h.stats.set_ceiling(q, p, h.stats.current(q, p));
    grant(h, q, p, n);
  });
  // Every deficit covered: what the peaks leave over goes to h for the quantities it was short
  // of, so that its next increases there need no settling (a holder that needs it takes it
  // back by a pull: h is listed for it). Shared between the size classes, but for
  // inactive-split bytes: their room is only where h was short (a holder with lanes that lists
  // itself for them makes the next pull of them settle its lane marks).
  quantity_mask short_q = 0;
  each([&](std::size_t q, std::size_t p) {
    if (q != q_inactive) {
      short_q |= bit_of(q);
    } else if (const std::uint64_t spare = room(h, q, p, global); spare != 0) {
      h.stats.add_room(q, p, spare);
      grant(h, q, p, spare);
    }
  });
  for (quantity_mask m = short_q; m != 0; m &= static_cast<quantity_mask>(m - 1)) {
    share_spare(h, static_cast<std::size_t>(std::countr_zero(m)), global);
  }
  h.sync();
  return raised;
}

void peak_ledger::share_spare(stats_holder& h, std::size_t q, const peak_table& global) noexcept {
  // The all-classes peak bounds the sum of the classes' ceilings: all of its room given to the
  // class that was short would leave the other at its ceiling, and each change of class would
  // then settle and pull the room back from the other. So each class gets the room its own
  // peaks leave, up to an equal share of what the all-classes peaks leave, and what one class
  // cannot use goes to the other.
  static_assert(pool_count == 2, "two size classes share the all-classes room");
  const std::uint64_t want0 = class_room(h, q, 0, global), want1 = class_room(h, q, 1, global);
  const std::uint64_t all = all_room(h, q, global);
  std::uint64_t give0 = want0, give1 = want1;
  if (want0 > all || want1 > all - want0) {
    give0 = std::min(want0, all / 2);
    give1 = std::min(want1, all - give0);
    give0 = std::min(want0, all - give1);
  }
  const std::uint64_t give[pool_count] = {give0, give1};
  for (std::size_t p = 0; p < pool_count; ++p) {
    if (give[p] == 0) continue;
    h.stats.add_room(q, p, give[p]);
    grant(h, q, p, give[p]);
  }
}

bool peak_ledger::pending(const stats_holder& x, bool marks) noexcept {
  if (!marks) return !x.seized;
  return !(x.outer != nullptr ? x.outer : &x)->grouped;
}

void peak_ledger::grab(stats_holder& x) noexcept {
  x.lock();
  x.seized = true;
  locked_.push_back(&x);
}

void peak_ledger::seize(stats_holder& x, bool marks) noexcept {
  stats_holder& state = x.outer != nullptr ? *x.outer : x;
  if (!state.seized) grab(state);  // (a lane's stream state first: the lock order)
  if (marks) {
    if (state.grouped) return;
    state.grouped = true;
    lanes_->lock_lanes(state, locked_);  // (x among them if a lane)
    lanes_->settle_marks(state);         // lists what it lowered: seized, so not pending
  } else if (!x.seized) {
    grab(x);
  }
}

void peak_ledger::pull(quantity_mask m, stats_holder* const* held,
                       std::size_t held_count) noexcept {
  ++pulls_;
  locked_.clear();
  {
    // Room for every holder in the scratch lists (grown here, under the stats mutex, only
    // after reserve() made more holders; a look collects from every list pulled and marks').
    std::size_t holders = 0;
    {
      std::lock_guard<spinlock> lock(lock_);
      holders = lists_[0].capacity();
    }
    if (locked_.capacity() < holders) locked_.reserve(holders);
    if (todo_.capacity() < (quantity_count + 1) * holders)
      todo_.reserve((quantity_count + 1) * holders);
  }
  // Inactive-split counts are raised from settled marks: the states listed for marks (and of
  // every holder listed for a pulled quantity) are locked whole and settled (file comment).
  const bool marks = (m & bit_of(q_inactive)) != 0 && lanes_ != nullptr;
  // Lock every listed holder (none of them with the ledger lock held), until a look under the
  // ledger lock finds no listed holder unlocked: that instant is the consistent state.
  std::array<std::size_t, quantity_count + 1> seen{};
  for (;;) {
    lock_.lock();
    todo_.clear();
    for (std::size_t slot = 0; slot <= quantity_count; ++slot) {
      const bool pulled = slot < quantity_count ? (m & bit_of(slot)) != 0 : marks;
      if (!pulled) continue;
      const std::vector<stats_holder*>& list = lists_[slot];
      for (; seen[slot] < list.size(); ++seen[slot]) {
        if (pending(*list[seen[slot]], marks)) todo_.push_back(list[seen[slot]]);
      }
    }
    if (todo_.empty()) break;  // (ledger lock held)
    lock_.unlock();
    for (stats_holder* x : todo_) {
      if (pending(*x, marks)) seize(*x, marks);  // (listed twice, or a lane of a state seen)
    }
  }
  for (std::size_t q = 0; q < quantity_count; ++q) {
    if ((m & bit_of(q)) == 0) continue;
    for (stats_holder* x : lists_[q]) {
      if ((x->listed & bit_of(q)) == 0) continue;  // a stale entry, or seen already
      for (std::size_t p = 0; p < pool_count; ++p) {
        const std::int64_t s = x->stats.slack(q, p);
        if (s <= 0) continue;
        x->stats.set_ceiling(q, p, x->stats.current(q, p));
        grant(*x, q, p, -static_cast<std::uint64_t>(s));
      }
      x->listed = static_cast<quantity_mask>(x->listed & ~bit_of(q));
      x->stats.clear_grown(bit_of(q));
    }
    lists_[q].clear();
  }
  if (marks) {  // every listed state is settled, and locked: none holds an unmarked segment
    for (stats_holder* x : lists_[marks_slot]) {
      x->listed = static_cast<quantity_mask>(x->listed & ~marks_bit);
      x->stats.clear_grown(marks_bit);
    }
    lists_[marks_slot].clear();
  }
  lock_.unlock();
  visits_ += locked_.size();
  for (auto it = locked_.rbegin(); it != locked_.rend(); ++it) {  // (lanes before their state)
    (*it)->seized = false;
    (*it)->grouped = false;
    (*it)->unlock();
  }
  for (std::size_t i = 0; i < held_count; ++i) held[i]->grouped = false;
}

void peak_ledger::reserve(std::size_t holders) {
  std::lock_guard<spinlock> lock(lock_);
  const auto grow = [](std::vector<stats_holder*>& v, std::size_t n) {
    if (v.capacity() < n) v.reserve(std::max(n, 2 * v.capacity()));
  };
  for (auto& list : lists_) grow(list, holders);
}

void peak_ledger::forget(stats_holder& h) noexcept {
  for (std::size_t q = 0; q < quantity_count; ++q) {
    for (std::size_t p = 0; p < pool_count; ++p) {
      grant(h, q, p, -h.stats.ceiling(q, p));
    }
  }
  std::lock_guard<spinlock> lock(lock_);
  for (auto& list : lists_) list.erase(std::remove(list.begin(), list.end(), &h), list.end());
  h.listed = 0;
}

}  // namespace cachalot::detail
