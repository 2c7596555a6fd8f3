// Releasing cached memory through the engine: the adaptive release policy (frugal while
// in-use memory is well below the limit, tight near it), the idle index behind every release
// pass (largest first whatever the stream, stale entries), and exact peaks across
// many streams, with thread-cache lanes and without (where the peak ledger alone settles).
#include <gtest/gtest.h>

#include <algorithm>
#include <cstdint>
#include <memory>
#include <random>
#include <string>
#include <thread>
#include <unordered_map>
#include <vector>

#include "cachalot/allocator.hpp"
#include "cachalot/simulated_device.hpp"
#include "support/invariants.hpp"
#include "support/sim_fixture.hpp"

namespace cachalot::testing {
namespace {

stream_t s(int i) {
  return reinterpret_cast<stream_t>(static_cast<std::uintptr_t>(i * 64));
}

using fixture = sim_fixture;

// --- the adaptive policy ---------------------------------------------------------------------

TEST(release_policy, RelaxedSplitsALargeCachedBlockInsteadOfGrowing) {
  fixture f("", 16 * GiB);  // 16 GiB: blocks of 128 MiB (1/128) and more stay whole
  void* big = f.alloc->allocate(100 * MiB, s(1));
  f.alloc->deallocate(big);
  void* a = f.alloc->allocate(5 * MiB, s(1));  // below max_split_size: split, no new segment
  void* b = f.alloc->allocate(40 * MiB, s(1));
  EXPECT_EQ(a, big);
  EXPECT_EQ(f.dev->counters().segment_allocs, 1u);
  EXPECT_EQ(f.alloc->stats().inactive_split_bytes.all.current, 55 * MiB);
  f.alloc->deallocate(a);
  f.alloc->deallocate(b);
  void* huge = f.alloc->allocate(200 * MiB, s(1));  // holds 1/80 of the device
  f.alloc->deallocate(huge);
  void* c = f.alloc->allocate(150 * MiB, s(1));  // a 200 MiB block stays whole: new segment
  EXPECT_NE(c, huge);
  EXPECT_EQ(f.dev->counters().segment_allocs, 3u);
  EXPECT_EQ(f.dev->counters().segment_frees, 0u);
  f.alloc->deallocate(c);
  expect_stats_match_snapshot(*f.alloc);
  expect_device_matches(*f.alloc, *f.dev);
}

TEST(release_policy, TightOnceInUseMemoryPassedThePressureThreshold) {
  fixture f("pressure_threshold:0.5", GiB);
  void* fill = f.alloc->allocate(600 * MiB, s(1));  // in use above half the device: tight
  f.alloc->deallocate(fill);
  void* big = f.alloc->allocate(100 * MiB, s(2));
  f.alloc->deallocate(big);
  void* a = f.alloc->allocate(5 * MiB, s(2));  // the oversize rule: never takes the 100 MiB
  EXPECT_NE(a, big);
  void* b = f.alloc->allocate(90 * MiB, s(2));  // 100 < 90 + 20: takes it whole
  EXPECT_EQ(b, big);
  EXPECT_EQ(f.alloc->allocation_size(b), 100 * MiB);
  f.alloc->deallocate(a);
  f.alloc->deallocate(b);
  f.alloc->reset_peak_stats();  // nothing in use: relaxed again
  void* c = f.alloc->allocate(5 * MiB, s(2));
  EXPECT_EQ(c, a) << "its 20 MiB segment still fits";
  f.alloc->deallocate(c);
  expect_stats_match_snapshot(*f.alloc);
}

TEST(release_policy, RelaxedKeepsTheCacheUntilTheDeviceRefuses) {
  // gc_threshold 0.5 only applies once memory is tight: here in-use bytes stay below 90 %.
  fixture f("gc_threshold:0.5", 100 * MiB);
  void* a = f.alloc->allocate(30 * MiB, s(1));
  void* b = f.alloc->allocate(30 * MiB, s(1));
  f.alloc->deallocate(a);
  f.alloc->deallocate(b);                       // 60 MiB cached, above gc_threshold x 100 MiB
  void* c = f.alloc->allocate(34 * MiB, s(1));  // nothing fits (oversize rule off: 30 < 34)
  EXPECT_EQ(f.alloc->stats().num_segment_frees, 0u) << "94 MiB fit: no release";
  EXPECT_EQ(f.alloc->stats().num_alloc_retries, 0u);
  void* d = f.alloc->allocate(20 * MiB, s(1));  // splits a cached 30 MiB block
  EXPECT_EQ(f.alloc->stats().reserved_bytes.all.current, 94 * MiB);
  f.alloc->deallocate(c);
  f.alloc->deallocate(d);
  void* e = f.alloc->allocate(40 * MiB, s(1));  // 94 + 40 > 100: the device refuses, retry
  EXPECT_EQ(f.alloc->stats().num_alloc_retries, 1u);
  EXPECT_GE(f.alloc->stats().num_segment_frees, 1u);
  f.alloc->deallocate(e);
  expect_stats_match_snapshot(*f.alloc);
  expect_device_matches(*f.alloc, *f.dev);
}

TEST(release_policy, EagerReleasesBeforeAGrowthAsBefore) {
  fixture f("gc_threshold:0.5,release_policy:eager", 100 * MiB);
  void* a = f.alloc->allocate(30 * MiB, s(1));
  void* b = f.alloc->allocate(30 * MiB, s(1));
  f.alloc->deallocate(a);
  f.alloc->deallocate(b);
  void* c = f.alloc->allocate(34 * MiB, s(1));  // 60 + 34 > 50: release first (largest first)
  EXPECT_EQ(f.alloc->stats().num_segment_frees, 2u);
  EXPECT_EQ(f.alloc->stats().num_alloc_retries, 0u);
  f.alloc->deallocate(c);
  expect_stats_match_snapshot(*f.alloc);
}

// --- the idle index --------------------------------------------------------------------------

TEST(release_pass, TrimTakesTheLargestIdleSegmentsFirstAmongThousands) {
  fixture f("", 64 * GiB);
  std::vector<void*> live;
  for (int i = 0; i < 2000; ++i) live.push_back(f.alloc->allocate((12 + i % 7 * 2) * MiB, s(1)));
  void* biggest = f.alloc->allocate(300 * MiB, s(1));
  for (void* p : live) f.alloc->deallocate(p);
  f.alloc->deallocate(biggest);
  const std::size_t before = f.alloc->stats().reserved_bytes.all.current;
  EXPECT_EQ(f.alloc->trim(before - 300 * MiB), 300 * MiB) << "one segment, the largest";
  EXPECT_EQ(f.alloc->stats().num_segment_frees, 1u);
  EXPECT_EQ(f.alloc->trim(before - 300 * MiB - 24 * MiB), 24 * MiB) << "then a 24 MiB one";
  f.alloc->empty_cache();
  EXPECT_EQ(f.alloc->stats().reserved_bytes.all.current, 0u);
  EXPECT_EQ(f.alloc->stats().num_segment_frees, 2001u);
  expect_device_matches(*f.alloc, *f.dev);
}

TEST(release_pass, ASegmentInUseAgainIsNeverReleased) {
  // Segments enter the idle index when their last block is freed and stay there while used
  // again: a pass must skip them.
  fixture f("", 8 * GiB);
  void* a = f.alloc->allocate(40 * MiB, s(1));
  void* b = f.alloc->allocate(50 * MiB, s(1));
  f.alloc->deallocate(a);
  f.alloc->deallocate(b);
  void* b2 = f.alloc->allocate(50 * MiB, s(1));  // the 50 MiB segment is in use again
  EXPECT_EQ(b2, b);
  EXPECT_EQ(f.alloc->trim(0), 40 * MiB);
  EXPECT_EQ(f.alloc->stats().reserved_bytes.all.current, 50 * MiB);
  f.alloc->deallocate(b2);
  EXPECT_EQ(f.alloc->trim(0), 50 * MiB);
  expect_device_matches(*f.alloc, *f.dev);
}

TEST(release_pass, TheLargestIdleSegmentOfAnyStreamGoesFirst) {
  fixture f("gc_threshold:0.6,release_policy:eager", 100 * MiB);
  void* a = f.alloc->allocate(30 * MiB, s(1));
  void* b = f.alloc->allocate(20 * MiB, s(2));
  f.alloc->deallocate(a);
  f.alloc->deallocate(b);                       // 30 MiB cached on stream 1, 20 on stream 2
  void* c = f.alloc->allocate(25 * MiB, s(2));  // 50 + 26 > 60: down to 34 MiB first
  EXPECT_EQ(f.alloc->stats().num_segment_frees, 1u);
  const memory_snapshot snap = f.alloc->snapshot();
  ASSERT_EQ(snap.segments.size(), 2u);
  for (const segment_info& seg : snap.segments) {
    EXPECT_NE(seg.size, 30 * MiB) << "the largest, on stream 1, went";
  }
  f.alloc->deallocate(c);
  expect_stats_match_snapshot(*f.alloc);
  expect_device_matches(*f.alloc, *f.dev);
}

// --- exact peaks without the all-streams lock ------------------------------------------------

// Each with the thread cache (a crossed ceiling takes all_streams_lock, lane marks need it) and
// without (a crossed ceiling settles with the peak ledger alone).
class peaks : public ::testing::TestWithParam<const char*> {};
INSTANTIATE_TEST_SUITE_P(lanes, peaks, ::testing::Values("", "thread_cache:0"));

TEST_P(peaks, ExactOverRandomTrafficOnManyStreamsAndLanes) {
  // One thread, 40 streams: with the thread cache, blocks freed on the stream that allocated
  // them go to lanes, others pay the stream path; the model tracks exact totals.
  fixture f(GetParam(), 64 * GiB);
  std::mt19937_64 rng(2021);
  struct live_block {
    std::size_t size;
    stream_t stream;
  };
  std::unordered_map<void*, live_block> live;
  std::vector<void*> order;
  std::uint64_t requested = 0, peak = 0, count_peak = 0;
  for (int step = 0; step < 30000; ++step) {
    if (order.empty() || rng() % 100 < 55) {
      const std::size_t n = rng() % 4 == 0 ? 1 + rng() % (48 * MiB) : 1 + rng() % (256 * KiB);
      const stream_t st = s(1 + static_cast<int>(rng() % 40));
      void* p = f.alloc->allocate(n, st);
      live[p] = {n, st};
      order.push_back(p);
      requested += n;
    } else {
      const std::size_t i = rng() % order.size();
      void* p = order[i];
      order[i] = order.back();
      order.pop_back();
      requested -= live[p].size;
      f.alloc->deallocate(p, live[p].stream);
      live.erase(p);
    }
    peak = std::max(peak, requested);
    count_peak = std::max<std::uint64_t>(count_peak, live.size());
    if (step % 5000 == 0) {
      const memory_stats st = f.alloc->stats();
      ASSERT_EQ(st.requested_bytes.all.peak, peak) << "step " << step;
      ASSERT_EQ(st.allocations.all.peak, count_peak) << "step " << step;
    }
  }
  const memory_stats st = f.alloc->stats();
  EXPECT_EQ(st.requested_bytes.all.peak, peak);
  EXPECT_EQ(st.allocations.all.peak, count_peak);
  for (auto& [p, b] : live) f.alloc->deallocate(p, b.stream);
  expect_stats_match_snapshot(*f.alloc);
}

TEST_P(peaks, ConcurrentGrowthOnManyStreamsKeepsPeaksWithinTheirBounds) {
  // Threads raise peaks on their own streams while 200 idle streams hold cached memory: peaks
  // stay between the largest single thread's and the sum of all, and stats match the snapshot.
  fixture f(GetParam(), 64 * GiB);
  for (int i = 0; i < 200; ++i) f.alloc->deallocate(f.alloc->allocate(3 * MiB, s(100 + i)));
  constexpr int threads = 4;
  std::vector<std::thread> pool;
  for (int t = 0; t < threads; ++t) {
    pool.emplace_back([&, t] {
      std::vector<void*> mine;
      for (int i = 0; i < 300; ++i) mine.push_back(f.alloc->allocate((1 + i % 5) * MiB, s(1 + t)));
      for (void* p : mine) f.alloc->deallocate(p, s(1 + t));
    });
  }
  for (auto& th : pool) th.join();
  const memory_stats st = f.alloc->stats();
  std::uint64_t one = 0;
  for (int i = 0; i < 300; ++i) one += (1 + i % 5) * MiB;
  EXPECT_GE(st.allocated_bytes.all.peak, one);
  EXPECT_LE(st.allocated_bytes.all.peak, threads * one);
  EXPECT_EQ(st.allocated_bytes.all.current, 0u);
  expect_stats_match_snapshot(*f.alloc);
}

}  // namespace
}  // namespace cachalot::testing
