// The peak ledger alone (src/detail/peak_ledger.hpp), with no engine: holders change their
// counts as streams and thread-cache lanes do (some going below zero, as a lane that frees what
// its stream allocated), cross their ceilings and settle; after every change the peaks must be
// the exact maxima of the totals so far, the granted sums the sums of the ceilings, and a holder
// with slack listed. And a new peak must not visit holders that have not changed.
#include <gtest/gtest.h>

#include <array>
#include <cstdint>
#include <memory>
#include <random>
#include <vector>

#include "detail/peak_ledger.hpp"

namespace cachalot::detail {
namespace {

struct holder_box {
  spinlock lock;
  stats_holder h;
  holder_box(pool_peaks* pp, peak_ledger* l) : h(pp, &lock, l) {}
};

/// Holders in two memory pools, the allocator's peaks, and a model of the true totals.
class ledger_world {
 public:
  explicit ledger_world(std::size_t holders) {
    ledger.reserve(holders);
    for (std::size_t i = 0; i < holders; ++i) {
      boxes.push_back(std::make_unique<holder_box>(&pools[i % 2], &ledger));
    }
  }

  /// Changes holder `i`'s quantity q, class p by `d` (checked against its ceiling like the hot
  /// path; a crossing is redone unchecked and settled, as under a ceiling_lock).
  void change(std::size_t i, std::size_t q, std::size_t p, std::int64_t d) {
    stats_holder& h = boxes[i]->h;
    stats_delta delta;
    delta.d[q] = d;
    const bool crosses = d > 0 && h.stats.crosses(q, p, static_cast<std::uint64_t>(d));
    h.guard->lock();
    h.stats.apply(static_cast<pool_kind>(p), delta);
    if (!crosses) h.sync();
    h.guard->unlock();
    if (crosses) {
      h.guard->lock();
      stats_holder* held[] = {&h};
      h.seized = true;  // (as a ceiling_lock holds it)
      ledger.settle(h, held, 1, global);
      h.seized = false;
      h.guard->unlock();
    }
    auto& t = totals[i % 2][q];
    t[p] += d;
    for (std::size_t k : {p, pool_count}) {
      std::int64_t pool_total = 0, all_total = 0;
      for (std::size_t c = 0; c < pool_count; ++c) {
        if (k == pool_count || c == k) {
          pool_total += totals[i % 2][q][c];
          all_total += totals[0][q][c] + totals[1][q][c];
        }
      }
      model_pool[i % 2][q][k] = std::max(model_pool[i % 2][q][k], pool_total);
      model_global[q][k] = std::max(model_global[q][k], all_total);
    }
  }

  /// Empty string if the peaks, granted sums and lists are as the ledger promises.
  std::string check() const {
    for (std::size_t q = 0; q < quantity_count; ++q) {
      for (std::size_t p = 0; p <= pool_count; ++p) {
        if (global[q][p] != static_cast<std::uint64_t>(model_global[q][p])) {
          return "global peak q" + std::to_string(q) + " p" + std::to_string(p) + ": " +
                 std::to_string(global[q][p]) + " != " + std::to_string(model_global[q][p]);
        }
        for (int k = 0; k < 2; ++k) {
          if (pools[k].peak[q][p] != static_cast<std::uint64_t>(model_pool[k][q][p])) {
            return "pool peak " + std::to_string(k) + " q" + std::to_string(q);
          }
        }
      }
      for (std::size_t p = 0; p < pool_count; ++p) {
        std::uint64_t sum = 0;
        for (const auto& b : boxes) {
          sum += b->h.stats.ceiling(q, p);
          if (b->h.stats.slack(q, p) < 0) return "a holder above its ceiling";
          if (b->h.stats.slack(q, p) > 0 && (b->h.listed & bit_of(q)) == 0) {
            return "a holder with slack is not listed";
          }
        }
        if (sum != ledger.granted(q, p)) return "granted sum differs from the ceilings";
        if (sum > global[q][p]) return "ceilings above the peak";
      }
    }
    return "";
  }

  peak_ledger ledger;
  std::array<pool_peaks, 2> pools;
  peak_table global = {};
  std::vector<std::unique_ptr<holder_box>> boxes;
  std::int64_t totals[2][quantity_count][pool_count] = {};
  std::int64_t model_pool[2][quantity_count][pool_count + 1] = {};
  std::int64_t model_global[quantity_count][pool_count + 1] = {};
};

TEST(peak_ledger, PeaksStayExactOverRandomChangesOfManyHolders) {
  ledger_world w(24);
  std::mt19937_64 rng(21);
  for (int step = 0; step < 20000; ++step) {
    const std::size_t i = rng() % w.boxes.size();
    const std::size_t q = rng() % quantity_count;
    const std::size_t p = rng() % pool_count;
    auto d = static_cast<std::int64_t>(rng() % 4096) + 1;
    // Decreases may take a holder below zero (a lane), never its pool's class total.
    if (rng() % 2 == 0 && w.totals[i % 2][q][p] >= d) d = -d;
    w.change(i, q, p, d);
    if (step % 97 == 0) {
      ASSERT_EQ(w.check(), "") << "step " << step;
    }
  }
  EXPECT_EQ(w.check(), "");
  EXPECT_GT(w.ledger.pulls(), 0u);
}

TEST(peak_ledger, AnIdleHolderIsNeverVisitedAgain) {
  // 1,000 holders change once and settle; then one holder raises the peak 1,000 times. The
  // first pull takes the others' slack; after that they are at their ceilings and unlisted, so
  // no later pull visits them: a new peak costs the same with 1 or 1,000 idle holders.
  ledger_world w(1000);
  for (std::size_t i = 0; i < w.boxes.size(); ++i) w.change(i, q_allocated, 1, 4096);
  for (std::size_t i = 0; i < w.boxes.size(); ++i) w.change(i, q_allocated, 1, -4096);
  w.change(0, q_allocated, 1, 4096 + 1);  // takes everyone's slack
  ASSERT_EQ(w.check(), "");
  const std::uint64_t visits = w.ledger.visits();
  EXPECT_GE(visits, 999u);
  const std::uint64_t pulls = w.ledger.pulls();
  for (int k = 0; k < 1000; ++k) {
    w.change(0, q_allocated, 1, 8 * 1024 * 1024);  // each a new peak once the room is used
    w.change(0, q_allocated, 1, -4 * 1024 * 1024);
  }
  EXPECT_EQ(w.check(), "");
  EXPECT_GT(w.ledger.pulls(), pulls);
  EXPECT_EQ(w.ledger.visits(), visits) << "no idle holder was locked again";
}

TEST(peak_ledger, SettlingSeveralHoldersOfOneDrainGivesTheExactPeak) {
  // A drain moves counts from lanes back to their stream under one lock: each lane rises above
  // its ceiling while the stream falls; settling them one after another passes through sums
  // below zero and must end at the exact peak, never above it.
  ledger_world w(3);
  w.change(0, q_allocated, 0, 10000);  // the stream allocates
  w.change(1, q_allocated, 0, -6000);  // two lanes free what it allocated
  w.change(2, q_allocated, 0, -3000);
  ASSERT_EQ(w.check(), "");
  for (auto& b : w.boxes) b->lock.lock();
  stats_holder* held[] = {&w.boxes[0]->h, &w.boxes[1]->h, &w.boxes[2]->h};
  stats_delta up, down;
  up.d[q_allocated] = 6000;
  w.boxes[1]->h.stats.apply(pool_kind::small, up);
  up.d[q_allocated] = 3000;
  w.boxes[2]->h.stats.apply(pool_kind::small, up);
  down.d[q_allocated] = -9000;
  w.boxes[0]->h.stats.apply(pool_kind::small, down);
  for (stats_holder* h : held) h->seized = true;
  for (stats_holder* h : held) w.ledger.settle(*h, held, 3, w.global);
  for (stats_holder* h : held) h->seized = false;
  for (auto& b : w.boxes) b->lock.unlock();
  EXPECT_EQ(w.global[q_allocated][0], 10000u);
  EXPECT_EQ(w.global[q_allocated][pool_count], 10000u);
}

TEST(peak_ledger, ASettledHolderKeepsThePeaksHeadroomForItsNextIncreases) {
  // Holder 0 reaches 1 MiB and frees it; holder 2 (same memory pool) then needs 64 KiB: the
  // pull takes holder 0's slack back and holder 2 gets, with what it lacked, all the room
  // below the peak, so that its next increases up to the peak cross nothing (no settling on
  // the allocation path).
  ledger_world w(3);
  w.change(0, q_allocated, 1, 1 << 20);
  w.change(0, q_allocated, 1, -(1 << 20));
  w.change(2, q_allocated, 1, 64 << 10);
  ASSERT_EQ(w.check(), "");
  const stats_holder& h = w.boxes[2]->h;
  EXPECT_EQ(h.stats.ceiling(q_allocated, 1), std::uint64_t{1} << 20);
  EXPECT_FALSE(h.stats.crosses(q_allocated, 1, (1 << 20) - (64 << 10)));
  EXPECT_TRUE(h.stats.crosses(q_allocated, 1, (1 << 20) - (64 << 10) + 1));
  // Holder 0 needs room again: one pull takes it back from holder 2, and the peak stays.
  const std::uint64_t pulls = w.ledger.pulls();
  w.change(0, q_allocated, 1, 512 << 10);
  EXPECT_EQ(w.ledger.pulls(), pulls + 1);
  EXPECT_EQ(w.check(), "");
  EXPECT_EQ(w.global[q_allocated][pool_count], std::uint64_t{1} << 20);
}

TEST(peak_ledger, TheRoomBelowTheAllClassesPeakIsSharedBetweenTheClasses) {
  // Small blocks peaked at 100, large ones at 1,000, both together at 1,000. A small increase
  // settles: the room the all-classes peak leaves (999 once it is counted) is shared, so that
  // the large class keeps what its next increases need and does not pull it back from the
  // small class (which would leave small at its ceiling, and so on at each change of class).
  ledger_world w(1);
  w.change(0, q_active, 0, 100);
  w.change(0, q_active, 0, -100);
  w.change(0, q_active, 1, 1000);
  w.change(0, q_active, 1, -1000);
  w.change(0, q_active, 0, 1);  // settles: small's ceiling 100, large's 1000 - 100
  ASSERT_EQ(w.check(), "");
  const stats_holder& h = w.boxes[0]->h;
  EXPECT_EQ(h.stats.ceiling(q_active, 0), 100u);
  EXPECT_EQ(h.stats.ceiling(q_active, 1), 900u);
  const std::uint64_t pulls = w.ledger.pulls();
  for (int k = 0; k < 9; ++k) {
    w.change(0, q_active, 1, 100);  // alternating classes, all below the peaks: no settling
    w.change(0, q_active, 0, k % 2 == 0 ? 10 : -10);
  }
  EXPECT_EQ(w.ledger.pulls(), pulls);
  EXPECT_EQ(w.check(), "");
  w.change(0, q_active, 1, 100);  // 1,011 in all (small 11, large 1,000): a new peak
  EXPECT_EQ(w.check(), "");
  EXPECT_EQ(w.global[q_active][pool_count], 1011u);
  EXPECT_EQ(w.global[q_active][1], 1000u);
  EXPECT_EQ(w.global[q_active][0], 100u);
}

TEST(peak_ledger, OneSettleShortOfSeveralQuantitiesPullsOnce) {
  // An allocation raises requested, allocated, active and allocations at once: when none has
  // room, one pull takes the listed holders' slack of all four (each holder locked once).
  ledger_world w(3);
  const std::size_t qs[] = {q_requested, q_allocated, q_active, q_allocations};
  for (std::size_t i : {0, 1}) {
    for (std::size_t q : qs) w.change(i, q, 1, 4096);
    for (std::size_t q : qs) w.change(i, q, 1, -4096);
  }
  ASSERT_EQ(w.check(), "");
  const std::uint64_t pulls = w.ledger.pulls(), visits = w.ledger.visits();
  stats_holder& h = w.boxes[2]->h;
  stats_delta d;
  for (std::size_t q : qs) d.d[q] = 12288;  // above the peaks: each is a new peak, too
  h.guard->lock();
  h.stats.apply(pool_kind::large, d);
  stats_holder* held[] = {&h};
  h.seized = true;
  EXPECT_TRUE(w.ledger.settle(h, held, 1, w.global));
  h.seized = false;
  h.guard->unlock();
  for (std::size_t q : qs) w.totals[0][q][1] += 12288;  // (holder 2 is in pool 0)
  EXPECT_EQ(w.ledger.pulls(), pulls + 1);
  // Holder 0's slack went to holder 1 when holder 1 settled; holder 1 freed it again and is
  // listed for all four quantities: the one pull locks it once.
  EXPECT_EQ(w.ledger.visits(), visits + 1);
  for (std::size_t q : qs) EXPECT_EQ(w.global[q][pool_count], 12288u);
}

/// A stream state with two lanes, as the engine makes them (each lane's `outer` is the state),
/// and a lane_group that counts a pending mark on a lane when it settles the state: lane 1
/// holds `unmarked` inactive-split bytes that a drain would count wholly free.
struct lane_world final : lane_group {
  lane_world() {
    ledger.reserve(8);
    ledger.set_lanes(this);
    for (auto* s : {&a, &b}) s->h.watched |= marks_bit;
    for (auto& l : lanes) {
      l.h.peaks = &pools;  // (b's memory pool)
      l.h.ledger = &ledger;
      l.h.outer = &b.h;
      l.h.lane_guard = &l.lock;
      l.h.watched |= marks_bit;
    }
  }
  struct lane_box {
    lane_lock lock;
    stats_holder h{nullptr, nullptr, nullptr};
  };
  void lock_lanes(stats_holder& state, std::vector<stats_holder*>& out) noexcept override {
    EXPECT_EQ(&state, &b.h);
    EXPECT_FALSE(b.lock.try_lock()) << "a lane is locked after its stream state";
    for (auto& l : lanes) {
      if (l.h.seized) continue;
      l.lock.lock();
      l.h.seized = true;
      out.push_back(&l.h);
    }
  }
  void settle_marks(stats_holder& state) noexcept override {
    EXPECT_EQ(&state, &b.h);
    ++settled;
    if (unmarked != 0) {  // the mark: the lane's inactive-split bytes go (add_whole)
      stats_delta d;
      d.d[q_inactive] = -static_cast<std::int64_t>(unmarked);
      lanes[1].h.stats.apply(pool_kind::small, d);
      unmarked = 0;
    }
    for (stats_holder* h : {&b.h, &lanes[0].h, &lanes[1].h}) h->sync();
  }
  /// Changes `h` (locked after its state) by `d` of inactive-split bytes, settling a crossing.
  void change(stats_holder& h, std::int64_t d) {
    stats_delta delta;
    delta.d[q_inactive] = d;
    const bool crosses = d > 0 && h.stats.crosses(q_inactive, 0, static_cast<std::uint64_t>(d));
    stats_holder* state = h.outer != nullptr ? h.outer : &h;
    std::vector<stats_holder*> held = {state};
    if (state != &h) held.push_back(&h);
    for (stats_holder* x : held) x->lock();
    h.stats.apply(pool_kind::small, delta);
    for (stats_holder* x : held) x->sync();
    if (crosses) {
      for (stats_holder* x : held) x->seized = true;
      ledger.settle(h, held.data(), held.size(), global);
      for (stats_holder* x : held) x->seized = false;
    }
    for (auto it = held.rbegin(); it != held.rend(); ++it) (*it)->unlock();
  }

  peak_ledger ledger;
  pool_peaks pools;
  peak_table global = {};
  holder_box a{&pools, &ledger}, b{&pools, &ledger};
  std::array<lane_box, 2> lanes;
  std::uint64_t unmarked = 0;
  int settled = 0;
};

TEST(peak_ledger, AnInactiveSplitPeakIsRaisedFromSettledMarksOfOtherStates) {
  // State b's lanes hold a segment's last blocks without a mark: their inactive-split count is
  // 2 MiB above a drain's. State a then raises the inactive-split peak: the pull must settle
  // b's marks (b listed for marks_bit by its decrease) before it raises the peak, so that the
  // peak is the drain's total, never the overcount.
  lane_world w;
  constexpr std::int64_t mib = 1 << 20;
  w.change(w.b.h, 3 * mib);         // b's stream: a peak of 3 MiB
  w.change(w.b.h, -3 * mib);        // (slack, listed)
  w.change(w.lanes[1].h, 2 * mib);  // fits under the peak: room from the headroom, or a pull
  EXPECT_EQ(w.global[q_inactive][0], 3u * mib);
  w.unmarked = 2 * mib;        // a drain would count those 2 MiB wholly free: the true total is 0
  w.change(w.lanes[0].h, -1);  // a decrease (a put) lists b for its marks
  w.change(w.lanes[0].h, 1);
  const int before = w.settled;
  w.change(w.a.h, 4 * mib);  // a new peak: 4 MiB in truth (b's lanes hold nothing a drain keeps)
  EXPECT_GT(w.settled, before) << "the pull settled b's marks";
  EXPECT_EQ(w.global[q_inactive][0], 4u * mib);
  EXPECT_EQ(w.global[q_inactive][pool_count], 4u * mib);
  EXPECT_EQ(w.pools.peak[q_inactive][0], 4u * mib);
  // Once settled and unlisted, b is not visited again by the next peaks.
  const std::uint64_t visits = w.ledger.visits();
  w.change(w.a.h, 1 * mib);
  w.change(w.a.h, 1 * mib);
  EXPECT_EQ(w.global[q_inactive][0], 6u * mib);
  EXPECT_EQ(w.ledger.visits(), visits);
}

}  // namespace
}  // namespace cachalot::detail
