// The thread cache's stats are those of a drain (detail/thread_cache.hpp): the same calls made
// with lanes (thread_cache:N) and without (thread_cache:0) give the same current and peak of
// every quantity, also when a segment's last live blocks sit in lanes (its bytes are then not
// inactive-split), after reset_peak_stats (peak == current), when a lane evicts, when another
// size is served from a segment lanes hold whole, and when two threads' lanes hold one
// segment's last blocks; with fixed and with expandable segments. Several threads cycling the
// last blocks of segments, with a reader meanwhile, keep peaks and currents consistent.
#include <gtest/gtest.h>

#include <atomic>
#include <condition_variable>
#include <deque>
#include <functional>
#include <memory>
#include <mutex>
#include <string>
#include <thread>
#include <vector>

#include "cachalot/allocator.hpp"
#include "cachalot/simulated_device.hpp"
#include "support/concurrent_checker.hpp"
#include "support/invariants.hpp"

namespace cachalot::testing {
namespace {

stream_t s1() {
  return reinterpret_cast<stream_t>(std::uintptr_t{64});
}
stream_t s2() {
  return reinterpret_cast<stream_t>(std::uintptr_t{128});
}

/// A thread that runs the closures it is given, one at a time, each before run() returns: its
/// thread-cache slot (and so its lane) stays the same for the whole test.
class worker {
 public:
  worker() : thread_([this] { loop(); }) {}
  ~worker() {
    run(nullptr);
    thread_.join();
  }
  worker(const worker&) = delete;
  worker& operator=(const worker&) = delete;

  /// Runs `fn` on the worker and waits for it (nullptr: the worker ends).
  void run(std::function<void()> fn) {
    std::unique_lock<std::mutex> lock(mutex_);
    job_ = std::move(fn);
    has_job_ = true;
    cv_.notify_all();
    cv_.wait(lock, [this] { return !has_job_; });
  }

 private:
  void loop() {
    for (;;) {
      std::unique_lock<std::mutex> lock(mutex_);
      cv_.wait(lock, [this] { return has_job_; });
      std::function<void()> job = std::move(job_);
      const bool stop = job == nullptr;
      if (job) job();
      has_job_ = false;
      cv_.notify_all();
      if (stop) return;
    }
  }

  std::mutex mutex_;
  std::condition_variable cv_;
  std::function<void()> job_;
  bool has_job_ = false;
  std::thread thread_;
};

/// Two allocators on two identical simulated devices, one with lanes and one without, given
/// the same calls; check() compares their stats.
class twin {
 public:
  explicit twin(const std::string& conf, const std::string& lanes = "thread_cache:16")
      : lanes_(config::parse("backend:simulated,capacity:1GiB," + conf + "," + lanes)),
        plain_(config::parse("backend:simulated,capacity:1GiB," + conf + ",thread_cache:0")) {}

  /// Allocates `bytes` into `slot` (on the calling thread, or on `w`) on `stream`.
  void alloc(std::size_t slot, std::size_t bytes, worker* w = nullptr, stream_t stream = s1()) {
    if (slot >= l_.size()) {
      l_.resize(slot + 1);
      p_.resize(slot + 1);
    }
    on(w, [&] {
      l_[slot] = lanes_.allocate(bytes, stream);
      p_[slot] = plain_.allocate(bytes, stream);
    });
  }
  /// Frees what `slot` holds (on the calling thread, or on `w`).
  void free(std::size_t slot, worker* w = nullptr) {
    on(w, [&] {
      lanes_.deallocate(l_[slot]);
      plain_.deallocate(p_[slot]);
    });
  }
  void reset_peaks() {
    lanes_.reset_peak_stats();
    plain_.reset_peak_stats();
  }
  void empty_cache() {
    lanes_.empty_cache();
    plain_.empty_cache();
  }

  /// Every current and peak of the two agree. (Where free blocks lie may differ: a lane keeps
  /// its blocks apart, and hands one back where a best fit might not take it.)
  void check(const std::string& where) {
    SCOPED_TRACE(where);
    const memory_stats l = lanes_.stats();
    const memory_stats p = plain_.stats();
    // (Cumulative inactive-split totals depend on the order in which blocks are coalesced.)
    const auto same = [](const pool_stats& a, const pool_stats& b, const char* what,
                         bool totals = true) {
      for (const auto& [x, y, pool] :
           {std::tuple{&a.all, &b.all, "all"}, std::tuple{&a.small, &b.small, "small"},
            std::tuple{&a.large, &b.large, "large"}}) {
        EXPECT_EQ(x->current, y->current) << what << "." << pool << ".current";
        EXPECT_EQ(x->peak, y->peak) << what << "." << pool << ".peak";
        EXPECT_GE(x->peak, x->current) << what << "." << pool;
        if (!totals) continue;
        EXPECT_EQ(x->allocated, y->allocated) << what << "." << pool << ".allocated";
        EXPECT_EQ(x->freed, y->freed) << what << "." << pool << ".freed";
      }
    };
    same(l.requested_bytes, p.requested_bytes, "requested_bytes");
    same(l.allocated_bytes, p.allocated_bytes, "allocated_bytes");
    same(l.active_bytes, p.active_bytes, "active_bytes");
    same(l.inactive_split_bytes, p.inactive_split_bytes, "inactive_split_bytes", false);
    same(l.reserved_bytes, p.reserved_bytes, "reserved_bytes");
    same(l.allocations, p.allocations, "allocations");
    same(l.segments, p.segments, "segments");
    EXPECT_EQ(l.num_allocs, p.num_allocs);
    EXPECT_EQ(l.num_frees, p.num_frees);
    expect_stats_match_snapshot(lanes_);
  }

  allocator& lanes() { return lanes_; }

 private:
  template <class Fn>
  static void on(worker* w, Fn&& fn) {
    if (w == nullptr) {
      fn();
    } else {
      w->run(fn);
    }
  }

  allocator lanes_;
  allocator plain_;
  std::vector<void*> l_, p_;
};

class lane_stats : public ::testing::TestWithParam<const char*> {};

INSTANTIATE_TEST_SUITE_P(segments, lane_stats,
                         ::testing::Values("expandable_segments:0", "expandable_segments:1"),
                         [](const ::testing::TestParamInfo<const char*>& p) {
                           return std::string(p.param).back() == '1' ? "expandable" : "fixed";
                         });

TEST_P(lane_stats, ASegmentsLastLiveBlockInALaneIsNotInactiveSplit) {
  // The case: one 512 KiB block of a 2 MiB segment, freed into the lane. Without lanes
  // the segment is wholly free and the inactive-split peak stays 1.5 MiB.
  twin t(GetParam());
  t.alloc(0, 512 * KiB);
  t.check("allocated");
  t.free(0);
  t.check("freed into the lane");
  t.reset_peaks();
  t.check("after reset_peak_stats");
  EXPECT_EQ(t.lanes().stats().inactive_split_bytes.all.peak, 0u);
  t.alloc(0, 512 * KiB);
  t.check("from the lane");
  t.free(0);
  t.reset_peaks();
  t.check("reset again");
  for (int i = 0; i < 100; ++i) {  // the hot pair: every free is the segment's last
    t.alloc(0, 512 * KiB);
    t.free(0);
  }
  t.check("after 100 pairs");
}

TEST_P(lane_stats, EveryLiveBlockOfASegmentInOneLane) {
  twin t(GetParam());
  t.alloc(0, 256 * KiB);
  t.alloc(1, 128 * KiB);
  t.alloc(2, 64 * KiB);
  t.free(1);
  t.check("one in the lane");
  t.free(0);
  t.check("two in the lane");
  t.free(2);
  t.check("all three in the lane");
  t.reset_peaks();
  t.check("reset");
  t.alloc(2, 64 * KiB);
  t.check("one back");
  t.alloc(0, 256 * KiB);
  t.free(2);
  t.free(0);
  t.check("back in the lane");
}

TEST_P(lane_stats, AnotherSizeFromASegmentLanesHoldWhole) {
  // The lane holds the segment's only live block; an allocation the lane cannot serve takes
  // the segment's free space from the stream: the segment is split again.
  twin t(GetParam());
  t.alloc(0, 4 * KiB);
  t.free(0);
  t.reset_peaks();
  t.alloc(1, 64 * KiB);
  t.check("64 KiB from the stream");
  t.free(1);
  t.check("both in the lane");
  t.alloc(0, 4 * KiB);
  t.alloc(1, 64 * KiB);
  t.check("both from the lane");
  t.free(0);
  t.free(1);
  t.check("end");
}

TEST_P(lane_stats, ALaneThatEvictsLeavesTheSameStats) {
  // Two blocks per lane: the third free evicts the oldest, which its stream frees.
  twin t(GetParam(), "thread_cache:2");
  t.alloc(0, 8 * KiB);
  t.alloc(1, 8 * KiB);
  t.alloc(2, 8 * KiB);
  t.free(0);
  t.free(1);
  t.check("lane full");
  t.free(2);
  t.check("evicted");
  t.reset_peaks();
  t.alloc(3, 16 * KiB);
  t.check("from the stream");
  t.free(3);
  t.check("end");
}

TEST_P(lane_stats, AStreamAllocationTakesTheRoomItsLanesFreed) {
  // A training step: the stream hands out blocks, the thread frees them into its lane (the
  // lane's counts go below zero: it holds the room), and the next allocations are of sizes the
  // lane cannot serve, so the stream serves them above its own ceilings and takes the room its
  // lanes freed (a worker thread's lane too), or raises the peaks where there is none; small
  // and large blocks alternate near the all-classes peak. Every current and peak as without
  // lanes, at each step.
  twin t(GetParam());
  worker w;
  for (std::size_t i = 0; i < 8; ++i) t.alloc(i, 4 * KiB);
  t.alloc(8, 4 * MiB);
  for (std::size_t i = 0; i < 4; ++i) t.free(i);
  for (std::size_t i = 4; i < 8; ++i) t.free(i, &w);
  t.check("eight blocks in two lanes");
  for (std::size_t i = 10; i < 14; ++i) t.alloc(i, 64 * KiB);  // the stream, above its ceiling
  t.check("64 KiB blocks from the stream");
  t.free(8);
  t.alloc(9, 2 * MiB);
  for (std::size_t i = 14; i < 24; ++i) {
    t.alloc(i, i % 2 == 0 ? 3 * MiB : 128 * KiB);  // new peaks of both classes
    t.check("block " + std::to_string(i));
  }
  for (std::size_t i = 14; i < 24; i += 2) t.free(i);
  for (std::size_t i = 14; i < 24; i += 2) t.alloc(i, 2 * MiB + 4 * KiB);
  t.check("large blocks again");
  t.reset_peaks();
  for (std::size_t i = 0; i < 8; ++i) t.alloc(i, 4 * KiB, i < 4 ? nullptr : &w);
  t.check("back from the lanes");
  for (std::size_t i = 0; i < 24; ++i) {
    if (i != 8) t.free(i, i % 3 == 0 ? &w : nullptr);
  }
  t.check("end");
}

TEST_P(lane_stats, TwoThreadsLanesHoldASegmentsLastBlocks) {
  twin t(GetParam());
  worker a, b;
  t.alloc(0, 32 * KiB, &a);
  t.alloc(1, 32 * KiB, &b);
  t.free(0, &a);
  t.check("one in a's lane");
  t.free(1, &b);
  t.check("both lanes");
  t.reset_peaks();
  t.check("reset");
  for (int i = 0; i < 20; ++i) {
    t.alloc(0, 32 * KiB, &a);
    t.check("a took its block");
    t.alloc(1, 32 * KiB, &b);
    t.free(0, &a);
    t.free(1, &b);
  }
  t.check("after 20 rounds");
  t.alloc(2, 100 * KiB);  // the main thread: from the stream, the segment split again
  t.check("another thread's allocation");
  t.free(2);
  t.empty_cache();
  t.check("emptied");
}

/// After the threads: nothing allocated, and a peak reset leaves every peak at its current value.
void expect_reset_peaks_at_current(allocator& a) {
  a.reset_peak_stats();
  const memory_stats st = a.stats();
  EXPECT_EQ(st.allocated_bytes.all.current, 0u);
  for (const pool_stats* g :
       {&st.requested_bytes, &st.allocated_bytes, &st.active_bytes, &st.inactive_split_bytes,
        &st.reserved_bytes, &st.allocations, &st.segments}) {
    for (const stat* x : {&g->all, &g->small, &g->large}) EXPECT_EQ(x->peak, x->current);
  }
}

/// Reads `a` and checks the read, and it against `last` (the read before, no reset between), as
/// the concurrent checker does: cumulative totals never go back, peaks are reached by a state.
void expect_consistent_after(const allocator& a, memory_stats& last, const memory_stats& base,
                             const char* where) {
  SCOPED_TRACE(where);
  const memory_stats now = a.stats();
  EXPECT_EQ(detail_cc::check_read(now, 0), "");
  EXPECT_EQ(detail_cc::check_pair(last, now, false, true), "");
  EXPECT_EQ(detail_cc::check_peak_bound(now, base), "");
  last = now;
}

TEST_P(lane_stats, CumulativeTotalsNeverGoBackWhenTheStreamLeavesALaneTheLastBlock) {
  // A lane holds a 32 KiB block of a segment whose other live block, 4 KiB, the stream frees
  // (used on another stream, it bypasses the lanes): the next read marks the segment wholly
  // free. The mark took back the lane block's 32 KiB of cumulative inactive-split increases
  // that an earlier read had seen (2 MiB, then 2 MiB - 28 KiB), and the peak bound
  // broke with it.
  allocator a(config::parse(std::string("backend:simulated,capacity:1GiB,") + GetParam()));
  memory_stats last{}, base{};
  void* big = a.allocate(32 * KiB, s1());
  void* small = a.allocate(4 * KiB, s1());
  a.deallocate(big);  // into the lane
  expect_consistent_after(a, last, base, "a lane holds the big block");
  a.record_stream(small, s2());
  a.deallocate(small);
  a.process_events();
  expect_consistent_after(a, last, base, "the stream freed the small one");
  EXPECT_EQ(last.num_pending_blocks, 0u);
  EXPECT_EQ(last.inactive_split_bytes.all.current, 0u);  // wholly free, as a drain leaves it
  a.empty_cache();
  expect_consistent_after(a, last, base, "emptied");
  EXPECT_EQ(last.reserved_bytes.all.current, 0u);
}

TEST_P(lane_stats, ThreadsCyclingTheLastBlocksOfSegmentsKeepPeaksConsistent) {
  // Four threads on one stream keep one or two small blocks each, so that segments keep
  // becoming held whole by one lane, by several, or by none; a fifth reads stats, snapshots
  // and resets the peaks meanwhile. Every read has peak >= current and current values a
  // snapshot could have; at the end the stats match the snapshot, and a reset makes every
  // peak its current value.
  allocator a(config::parse(std::string("backend:simulated,capacity:1GiB,") + GetParam()));
  constexpr int threads = 4;
  std::atomic<bool> done{false};
  std::atomic<int> reads{0};
  std::thread reader([&] {
    int n = 0;
    while (!done.load(std::memory_order_acquire)) {
      const memory_stats st = a.stats();
      for (const pool_stats* g :
           {&st.requested_bytes, &st.allocated_bytes, &st.active_bytes, &st.inactive_split_bytes,
            &st.reserved_bytes, &st.allocations, &st.segments}) {
        for (const stat* x : {&g->all, &g->small, &g->large}) EXPECT_GE(x->peak, x->current);
      }
      EXPECT_LE(st.active_bytes.all.current + st.inactive_split_bytes.all.current,
                st.reserved_bytes.all.current);
      EXPECT_LE(st.allocated_bytes.all.current, st.active_bytes.all.current);
      if (++n % 8 == 0) a.reset_peak_stats();
      if (n % 16 == 0) expect_well_formed(a.snapshot());
      reads.store(n, std::memory_order_relaxed);
      std::this_thread::yield();
    }
  });
  std::vector<std::thread> pool;
  for (int t = 0; t < threads; ++t) {
    pool.emplace_back([&, t] {
      void* keep = nullptr;
      for (int i = 0; i < 3000 || (reads.load(std::memory_order_relaxed) < 200 && i < 300000);
           ++i) {
        const std::size_t size = (1 + (i + t) % 3) * 8 * KiB;
        void* p = a.allocate(size, s1());
        if (i % 5 == 0) std::swap(p, keep);
        if (p != nullptr) a.deallocate(p);
      }
      if (keep != nullptr) a.deallocate(keep);
    });
  }
  for (auto& t : pool) t.join();
  done.store(true, std::memory_order_release);
  reader.join();
  expect_stats_match_snapshot(a);
  expect_reset_peaks_at_current(a);
  a.empty_cache();
  EXPECT_EQ(a.stats().reserved_bytes.all.current, 0u);
}

stream_t nth_stream(std::size_t i) {
  return reinterpret_cast<stream_t>(std::uintptr_t{4096} + 64 * i);
}

TEST_P(lane_stats, PeaksOfManyStreamsAndLanesAreADrainsWithNoStatsReadBetween) {
  // 120 streams, each with blocks in two threads' lanes (one segment's last blocks among
  // them), then rounds in which one stream raises every peak (a new segment, more allocated
  // and inactive-split bytes than ever) while the others' lanes keep their blocks and slack.
  // No stats read comes between the rounds' calls (a read settles every lane's marks), so a
  // peak can only be exact if each crossing settles what it needs: the peaks must equal those
  // of the same calls without lanes after every round.
  twin t(GetParam());
  worker w1, w2;
  constexpr std::size_t streams = 120;
  for (std::size_t i = 0; i < streams; ++i) {
    t.alloc(3 * i, 64 * KiB, &w1, nth_stream(i));
    t.alloc(3 * i + 1, 64 * KiB, &w2, nth_stream(i));
    t.alloc(3 * i + 2, 128 * KiB, &w1, nth_stream(i));
    t.free(3 * i, &w1);      // into w1's lane
    t.free(3 * i + 1, &w2);  // into w2's lane
  }
  t.check("every stream has lane blocks");
  std::size_t slot = 3 * streams;
  for (std::size_t round = 0; round < 6; ++round) {
    const stream_t grower = nth_stream(round % 3);
    // The others' last blocks go to the lanes: their segments are then held whole by lanes.
    for (std::size_t i = 3; i < streams; i += 7) {
      if (round % 2 == 0) {
        t.free(3 * i + 2, i % 2 == 0 ? &w1 : &w2);
      } else {
        t.alloc(3 * i + 2, 128 * KiB, i % 2 == 0 ? &w1 : &w2, nth_stream(i));
      }
    }
    for (std::size_t k = 0; k <= round; ++k)
      t.alloc(slot++, (1 + round) * 3 * MiB, nullptr, grower);
    t.alloc(slot++, 96 * KiB, &w2, grower);  // a small one too: inactive-split bytes rise
    t.check("round " + std::to_string(round));
  }
  t.reset_peaks();
  t.check("peaks reset");
}

TEST_P(lane_stats, APeakOnOneStreamSettlesTheMarksOfAnotherStreamsLanes) {
  // Stream b's segment ends up with its last live blocks in two threads' lanes, the last put
  // fitting under room its lane borrowed (so nothing settled b's marks: its inactive-split
  // count is the segment's 2 MiB above a drain's). Then stream a raises the inactive-split
  // peak: the peak must be the drain's, as without lanes, not the overcount.
  twin t(GetParam(), "thread_cache:16,thread_cache_max_size:512KiB");
  worker w1, w2;
  const stream_t b = nth_stream(1), a = nth_stream(2);
  t.alloc(0, 448 * KiB, &w1, b);  // p, q, r: one small segment, too full for the next
  t.alloc(1, 448 * KiB, &w1, b);
  t.alloc(2, 448 * KiB, &w2, b);
  t.alloc(3, 768 * KiB, nullptr, b);  // (no lane takes it) another small segment
  t.free(2, &w2);                     // r into w2's lane (a crossing: b's marks settled, none)
  t.free(3);                          // b's stream gains room in the small class
  t.free(1, &w1);                     // q into w1's lane, which borrows room for two
  t.free(0, &w1);                     // p: fits; the segment's live blocks all lie in lanes
  t.alloc(4, 2 * MiB, nullptr, a);    // a large segment: a new inactive-split peak
  t.check("a's peak");
}

TEST(lane_peaks, APeakRaisedWhileOtherThreadsLanesHoldSlackIsExact) {
  // Four threads free into their lanes on 64 streams (the lanes then hold slack under the
  // peaks); the main thread then raises allocated bytes to a new peak on a stream of its own.
  // The peak is exactly the largest total: the lanes' slack is taken back, not counted twice.
  allocator a(config::parse("backend:simulated,capacity:4GiB"));
  std::vector<std::unique_ptr<worker>> ws;
  for (int i = 0; i < 4; ++i) ws.push_back(std::make_unique<worker>());
  std::vector<void*> blocks(64 * 4);
  for (std::size_t s = 0; s < 64; ++s) {
    for (std::size_t k = 0; k < 4; ++k) {
      ws[k]->run([&, s, k] { blocks[4 * s + k] = a.allocate(256 * KiB, nth_stream(s)); });
    }
  }
  const std::uint64_t top = 64 * 4 * 256 * KiB;  // every block live at once
  EXPECT_EQ(a.stats().allocated_bytes.all.peak, top);
  for (std::size_t s = 0; s < 64; ++s) {
    for (std::size_t k = 0; k < 4; ++k) ws[k]->run([&, s, k] { a.deallocate(blocks[4 * s + k]); });
  }
  std::vector<void*> mine;
  std::uint64_t live = 0;
  for (int i = 0; i < 40; ++i) {
    mine.push_back(a.allocate(8 * MiB, nth_stream(500)));
    live += 8 * MiB;
  }
  const memory_stats st = a.stats();
  EXPECT_EQ(st.allocated_bytes.all.current, live);
  EXPECT_EQ(st.allocated_bytes.all.peak, std::max(top, live));
  EXPECT_EQ(st.allocations.all.peak, std::max<std::uint64_t>(64 * 4, 40));
  expect_stats_match_snapshot(a);
  for (void* p : mine) a.deallocate(p);
}

TEST(lane_peaks, ThreadsOnManyStreamsKeepPeaksConsistentWithAReader) {
  // Eight threads allocate and free on 64 streams (blocks land in every thread's lane of many
  // states, and segments cross between lanes and streams), raising peaks as they go, while a
  // concurrent checker reads the stats and resets the peaks (every documented invariant of a
  // read, and between reads). At the end, the stats match a snapshot and a reset makes every
  // peak its current value.
  allocator a(config::parse("backend:simulated,capacity:2GiB"));
  checker_options co;
  co.reset_every = 8;
  co.capacity = 2 * GiB;
  concurrent_checker watch(a, co);
  std::vector<std::thread> pool;
  for (int t = 0; t < 8; ++t) {
    pool.emplace_back([&, t] {
      std::vector<std::pair<void*, stream_t>> keep;
      for (int i = 0; i < 4000; ++i) {
        const stream_t s = nth_stream(static_cast<std::size_t>((i * 7 + t * 13) % 64));
        const std::size_t size = (1 + (i + t) % 5) * 16 * KiB + (i % 11 == 0 ? 3 * MiB : 0);
        keep.emplace_back(a.allocate(size, s), s);
        if (keep.size() > 6 || i % 3 == 0) {
          const std::size_t j = static_cast<std::size_t>(i) % keep.size();
          a.deallocate(keep[j].first, keep[j].second);
          keep.erase(keep.begin() + static_cast<std::ptrdiff_t>(j));
        }
      }
      for (auto& [p, s] : keep) a.deallocate(p, s);
    });
  }
  for (auto& t : pool) t.join();
  watch.stop();
  EXPECT_TRUE(watch.ok()) << watch.report();
  expect_stats_match_snapshot(a);
  expect_reset_peaks_at_current(a);
}

TEST(lane_marks, AMarkOnAnOlderLaneBlockNeverTakesCumulativeTotalsBack) {
  // A (older, larger) and X lie in one lane, C is freed by the stream: the read after X's free
  // marks the segment on A. Counting that mark as taking back A's free made the cumulative
  // inactive-split total go back by |A| - |X| between two reads (the concurrent checker's
  // "cumulative allocated/freed went back").
  sim_options o;
  o.capacity = 512 * MiB;
  allocator a(config::parse(""), std::make_shared<simulated_device>(o));
  const auto s2 = reinterpret_cast<stream_t>(std::uintptr_t{128});
  void* big = a.allocate(600 * KiB, s1());
  void* x = a.allocate(100 * KiB, s1());
  void* c = a.allocate(300 * KiB, s1());
  a.deallocate(big, s1());
  a.deallocate(c, s2);  // another stream named: not into a lane, freed once its event is done
  a.process_events();
  const memory_stats before = a.stats();
  a.deallocate(x, s1());
  const memory_stats after = a.stats();
  EXPECT_EQ(after.inactive_split_bytes.small.current, 0u) << "the segment is counted wholly free";
  EXPECT_GE(after.inactive_split_bytes.small.allocated,
            before.inactive_split_bytes.small.allocated);
  EXPECT_GE(after.inactive_split_bytes.small.freed, before.inactive_split_bytes.small.freed);
}

}  // namespace
}  // namespace cachalot::testing
