// Size policies and the stats they produce: the large-pool split rule, max_split_size
// (oversize blocks never split and never given to small requests), pool separation, size
// bands, active and inactive-split accounting.
#include <gtest/gtest.h>

#include <memory>
#include <string>
#include <thread>
#include <type_traits>
#include <vector>

#include "cachalot/allocator.hpp"
#include "cachalot/simulated_device.hpp"
#include "support/invariants.hpp"

namespace cachalot::testing {
namespace {

std::unique_ptr<allocator> make(const std::string& conf) {
  return std::make_unique<allocator>(config::parse("backend:simulated,capacity:8GiB," + conf));
}

TEST(size_policy, LargeBlocksSplitOnlyWhenMoreThanOneMiBRemains) {
  auto a = make("caching:1");
  void* x = a->allocate(9 * MiB);              // 20 MiB segment: 11 MiB remain, split
  void* y = a->allocate(8 * MiB + 512 * KiB);  // 2.5 MiB remain: split
  void* z = a->allocate(2 * MiB + 200 * KiB);  // takes the 2.5 MiB block whole
  EXPECT_EQ(a->allocation_size(z), 2 * MiB + 512 * KiB);
  EXPECT_EQ(a->stats().segments.all.current, 1u);
  EXPECT_EQ(a->stats().requested_bytes.all.current,
            9 * MiB + 8 * MiB + 512 * KiB + 2 * MiB + 200 * KiB);
  for (void* p : {x, y, z}) a->deallocate(p);
  expect_stats_match_snapshot(*a);
}

TEST(size_policy, SmallAndLargePoolsNeverShareSegments) {
  auto a = make("caching:1");
  void* big = a->allocate(2 * MiB);
  a->deallocate(big);  // a free 20 MiB large segment
  void* small = a->allocate(4 * KiB);
  const memory_stats s = a->stats();
  EXPECT_EQ(s.segments.small.current, 1u);
  EXPECT_EQ(s.segments.large.current, 1u);
  EXPECT_EQ(s.reserved_bytes.small.current, 2 * MiB);
  EXPECT_EQ(s.allocated_bytes.small.current, 4 * KiB);
  EXPECT_EQ(s.allocated_bytes.large.current, 0u);
  a->deallocate(small);
  expect_stats_match_snapshot(*a);
}

TEST(size_policy, OversizeBlocksAreNeverSplit) {
  // (The rule at every growth: release_policy:eager. Adaptive applies it once memory is tight.)
  auto a = make("max_split_size:64MiB,release_policy:eager");
  void* p = a->allocate(100 * MiB);
  EXPECT_EQ(a->stats().num_oversize_allocs, 1u);
  a->deallocate(p);
  void* q = a->allocate(90 * MiB);  // 100 < 90 + 20: reused whole
  EXPECT_EQ(q, p);
  EXPECT_EQ(a->allocation_size(q), 100 * MiB);
  a->deallocate(q);
  void* r = a->allocate(70 * MiB);  // 100 >= 70 + 20: too wasteful, new segment
  EXPECT_NE(r, p);
  void* t = a->allocate(5 * MiB);  // below max_split_size: never takes the oversize block
  EXPECT_NE(t, p);
  EXPECT_EQ(a->stats().segments.all.current, 3u);
  a->deallocate(r);
  a->deallocate(t);
  expect_stats_match_snapshot(*a);
}

TEST(size_policy, WithoutMaxSplitBigBlocksAreSplit) {
  auto a = make("max_split_size:none");
  void* p = a->allocate(100 * MiB);
  a->deallocate(p);
  void* q = a->allocate(30 * MiB);
  EXPECT_EQ(q, p);
  EXPECT_EQ(a->allocation_size(q), 30 * MiB);
  EXPECT_EQ(a->stats().inactive_split_bytes.all.current, 70 * MiB);
  a->deallocate(q);
  EXPECT_EQ(a->stats().inactive_split_bytes.all.current, 0u);
  expect_stats_match_snapshot(*a);
}

TEST(size_policy, CustomSizeClasses) {
  auto a = make(
      "granularity:4KiB,small_size:64KiB,small_segment:1MiB,large_segment:8MiB,"
      "mid_size:4MiB,segment_rounding:1MiB");
  void* p = a->allocate(1);
  EXPECT_EQ(a->allocation_size(p), 4 * KiB);
  EXPECT_EQ(a->stats().reserved_bytes.small.current, MiB);
  void* q = a->allocate(2 * MiB);
  EXPECT_EQ(a->stats().reserved_bytes.large.current, 8 * MiB);
  void* r = a->allocate(5 * MiB + 1);  // fits in the rest of the 8 MiB segment
  EXPECT_EQ(a->stats().reserved_bytes.large.current, 8 * MiB);
  void* t = a->allocate(5 * MiB + 1);  // >= mid_size: its own segment, rounded to 1 MiB
  EXPECT_EQ(a->stats().reserved_bytes.large.current, 8 * MiB + 6 * MiB);
  // Large pool, below segment_rounding: the lower band. No free block of the pool fits (r took
  // the rest of the first segment, less than large_split_min) and the pool has segments: the
  // band gets one of its own (size_bands:lazy).
  void* u = a->allocate(65 * KiB);
  EXPECT_EQ(a->stats().reserved_bytes.large.current, 8 * MiB + 6 * MiB + 8 * MiB);
  for (void* x : {p, q, r, t, u}) a->deallocate(x);
  expect_stats_match_snapshot(*a);
}

TEST(size_policy, SmallRequestsKeepToTheirOwnSegmentsInEachPool) {
  // Size bands, eager: below 64 KiB (small pool) and below 2 MiB (large pool), requests take
  // segments of their own, so that a long-lived small block never pins a segment of larger ones.
  auto a = make("caching:1,size_bands:eager");
  void* tiny = a->allocate(4 * KiB);
  void* small = a->allocate(512 * KiB);
  void* sub = a->allocate(MiB + 512 * KiB);
  void* mid = a->allocate(3 * MiB);
  EXPECT_EQ(a->stats().segments.small.current, 2u);
  EXPECT_EQ(a->stats().segments.large.current, 2u);
  a->deallocate(small);
  a->deallocate(mid);
  a->empty_cache();  // the segments of the freed blocks go back, the tiny block pins nothing
  EXPECT_EQ(a->stats().segments.all.current, 2u);
  EXPECT_EQ(a->stats().reserved_bytes.all.current, 2 * MiB + 20 * MiB);
  a->deallocate(tiny);
  a->deallocate(sub);
  expect_stats_match_snapshot(*a);
}

TEST(size_policy, LazyBandsShareAPoolsFirstSegment) {
  // size_bands:lazy (the default): a pool's first segment serves both bands, as PyTorch's one
  // segment would; a lower band gets a segment of its own only when it must grow while its pool
  // has one, and then keeps to its own segments while it has any.
  auto a = make("caching:1");
  void* tiny = a->allocate(4 * KiB);
  void* small = a->allocate(512 * KiB);
  void* sub = a->allocate(MiB + 512 * KiB);
  void* mid = a->allocate(3 * MiB);
  EXPECT_EQ(a->stats().segments.small.current, 1u);
  EXPECT_EQ(a->stats().segments.large.current, 1u);
  EXPECT_EQ(a->stats().num_segment_allocs, 2u);
  // Fill the small segment: 4 KiB + 512 KiB + 510 KiB + 510 KiB + 512 KiB = 2 MiB.
  std::vector<void*> fill;
  for (const std::size_t kib : {510, 510, 512}) fill.push_back(a->allocate(kib * KiB));
  EXPECT_EQ(a->stats().segments.small.current, 1u);
  EXPECT_EQ(a->stats().allocated_bytes.small.current, 2 * MiB);
  // A tiny request now needs a growth while its pool has a segment: the lower band opens.
  void* tiny2 = a->allocate(4 * KiB);
  EXPECT_EQ(a->stats().segments.small.current, 2u);
  // Its band keeps to its own segment from now on, though the first one has room again.
  a->deallocate(small);
  void* tiny3 = a->allocate(4 * KiB);
  EXPECT_EQ(a->stats().segments.small.current, 2u);
  EXPECT_TRUE(same_segment(a->snapshot(), tiny3, tiny2));
  EXPECT_FALSE(same_segment(a->snapshot(), tiny3, tiny));
  // ... and the upper band to its own: a 512 KiB request takes the room the freed one left.
  void* again = a->allocate(512 * KiB);
  EXPECT_TRUE(same_segment(a->snapshot(), again, tiny));
  // Once the lower band's segment is gone, the first segment serves it again.
  a->deallocate(tiny2);
  a->deallocate(tiny3);
  a->empty_cache();
  EXPECT_EQ(a->stats().segments.small.current, 1u);
  a->deallocate(again);
  a->empty_cache();  // (the freed block back in its segment, not in a thread's cache)
  void* tiny4 = a->allocate(4 * KiB);
  EXPECT_EQ(a->stats().segments.small.current, 1u);
  EXPECT_TRUE(same_segment(a->snapshot(), tiny4, tiny));
  for (void* x : fill) a->deallocate(x);
  for (void* x : {tiny, tiny4, sub, mid}) a->deallocate(x);
  EXPECT_EQ(a->stats().allocated_bytes.all.current, 0u);
  expect_stats_match_snapshot(*a);
}

TEST(size_policy, BandsOffShareEverySegment) {
  // size_bands:off: PyTorch's layout, every request of a pool in the same segments.
  for (const char* bands : {"off", "eager"}) {
    auto a = make(std::string("caching:1,size_bands:") + bands);
    std::vector<void*> mids;
    for (int i = 0; i < 3; ++i) mids.push_back(a->allocate(680 * KiB));  // 2040 KiB of 2 MiB
    void* tiny = a->allocate(4 * KiB);                                   // fits in the rest
    const bool off = std::string(bands) == "off";
    EXPECT_EQ(a->stats().segments.small.current, off ? 1u : 2u) << bands;
    EXPECT_EQ(same_segment(a->snapshot(), tiny, mids[0]), off) << bands;
    for (void* x : mids) a->deallocate(x);
    a->deallocate(tiny);
    expect_stats_match_snapshot(*a);
  }
}

TEST(size_policy, CumulativeCountersAddUp) {
  auto a = make("caching:1");
  for (int i = 0; i < 10; ++i) a->deallocate(a->allocate(1000));
  const memory_stats s = a->stats();
  EXPECT_EQ(s.num_allocs, 10u);
  EXPECT_EQ(s.num_frees, 10u);
  EXPECT_EQ(s.allocated_bytes.all.allocated, 10 * 1024u);
  EXPECT_EQ(s.allocated_bytes.all.freed, 10 * 1024u);
  EXPECT_EQ(s.requested_bytes.all.allocated, 10 * 1000u);
  EXPECT_EQ(s.allocations.all.allocated, 10u);
  EXPECT_EQ(s.allocations.all.peak, 1u);
  EXPECT_EQ(s.num_segment_allocs, 1u);
  EXPECT_EQ(s.num_streams, 1u);
}

}  // namespace
}  // namespace cachalot::testing

namespace cachalot::testing {
namespace {

// Peaks are kept with per-stream ceilings (see stats_tracker.hpp): they must be exact across
// streams, for every pool, whichever stream made the peak.
TEST(peaks, ExactAcrossStreamsAndPools) {
  auto a = make("caching:1");
  const auto st = [](int i) {
    return reinterpret_cast<stream_t>(static_cast<std::uintptr_t>(i * 64));
  };
  void* x = a->allocate(300 * KiB, st(1));
  void* y = a->allocate(5 * MiB, st(2));
  a->deallocate(x);
  void* z = a->allocate(100 * KiB, st(3));  // below the earlier peak
  a->deallocate(z);
  void* w = a->allocate(700 * KiB, st(1));  // new small-pool peak: 700 KiB > 300 KiB
  memory_stats s = a->stats();
  EXPECT_EQ(s.allocated_bytes.small.peak, 700 * KiB);
  EXPECT_EQ(s.allocated_bytes.large.peak, 5 * MiB);
  EXPECT_EQ(s.allocated_bytes.all.peak, 5 * MiB + 700 * KiB);
  EXPECT_EQ(s.requested_bytes.all.peak, 5 * MiB + 700 * KiB);
  EXPECT_EQ(s.allocations.all.peak, 2u);
  a->deallocate(y);
  a->deallocate(w);
  for (int round = 0; round < 100; ++round) {  // churn below the peak on many streams
    void* p = a->allocate(64 * KiB * (1 + round % 5), st(1 + round % 7));
    a->deallocate(p);
  }
  s = a->stats();
  EXPECT_EQ(s.allocated_bytes.all.peak, 5 * MiB + 700 * KiB);
  EXPECT_EQ(s.allocated_bytes.all.current, 0u);
  void* big = a->allocate(6 * MiB, st(5));
  EXPECT_EQ(a->stats().allocated_bytes.all.peak, 6 * MiB);
  a->reset_peak_stats();
  EXPECT_EQ(a->stats().allocated_bytes.all.peak, 6 * MiB);
  a->deallocate(big);
  a->reset_peak_stats();
  EXPECT_EQ(a->stats().allocated_bytes.all.peak, 0u);
  void* again = a->allocate(KiB, st(2));
  EXPECT_EQ(a->stats().allocated_bytes.all.peak, KiB);
  a->deallocate(again);
  expect_stats_match_snapshot(*a);
}

TEST(peaks, ConcurrentStreamsNeverExceedOrMissThePeak) {
  auto a = make("caching:1");
  constexpr int threads = 4;
  std::vector<std::thread> pool;
  for (int t = 0; t < threads; ++t) {
    pool.emplace_back([&, t] {
      const auto s = reinterpret_cast<stream_t>(static_cast<std::uintptr_t>(0x100 + t * 64));
      for (int i = 0; i < 5000; ++i) {
        void* p = a->allocate(MiB / 2, s);  // each thread holds at most two blocks
        void* q = a->allocate(MiB / 2, s);
        a->deallocate(p);
        a->deallocate(q);
      }
    });
  }
  for (auto& th : pool) th.join();
  const memory_stats s = a->stats();
  EXPECT_LE(s.allocated_bytes.all.peak, static_cast<std::uint64_t>(threads) * MiB);
  EXPECT_GE(s.allocated_bytes.all.peak, MiB);
  EXPECT_EQ(s.allocated_bytes.all.current, 0u);
  EXPECT_EQ(s.num_allocs, 2u * threads * 5000);
  expect_stats_match_snapshot(*a);
}

// PyTorch's names (torch.cuda.memory_stats() keys, as the Python package's dict) are aliases of
// the fields: same objects, same values, and the struct keeps its layout and copy semantics.
TEST(stats_names, PyTorchNamesAliasTheFields) {
  static_assert(std::is_aggregate_v<memory_stats> && std::is_trivially_copyable_v<memory_stats>);
  static_assert(std::is_aggregate_v<pool_stats> && std::is_trivially_copyable_v<pool_stats>);
  static_assert(sizeof(pool_stats) == 3 * sizeof(stat));
  auto a = make("caching:1");
  void* small = a->allocate(KiB);
  void* large = a->allocate(30 * MiB);
  a->deallocate(small);
  a->empty_cache();
  memory_stats s = a->stats();
  const memory_stats& c = s;
  EXPECT_EQ(&s.reserved_bytes.small_pool(), &s.reserved_bytes.small);
  EXPECT_EQ(&c.reserved_bytes.large_pool(), &c.reserved_bytes.large);
  EXPECT_EQ(&s.allocation(), &s.allocations);
  EXPECT_EQ(&c.segment(), &c.segments);
  EXPECT_EQ(&s.num_device_alloc(), &s.num_segment_allocs);
  EXPECT_EQ(&s.num_device_free(), &s.num_segment_frees);
  EXPECT_EQ(c.allocation().large_pool().current, 1u);
  EXPECT_EQ(c.allocation().small_pool().allocated, 1u);
  EXPECT_EQ(c.segment().small_pool().freed, 1u);
  EXPECT_EQ(c.num_device_alloc(), 2u);
  EXPECT_EQ(c.num_device_free(), 1u);
  s.num_device_free() = 7;  // writable where the struct is
  EXPECT_EQ(s.num_segment_frees, 7u);
  a->deallocate(large);
}

}  // namespace
}  // namespace cachalot::testing
