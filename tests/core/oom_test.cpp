// Out of memory: the release-and-retry sequence, memory limits in bytes and percent, the
// message's numbers, and that a failed allocation changes no byte stat.
#include <gtest/gtest.h>

#include <memory>
#include <string>

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

TEST(out_of_memory, ReleasesOtherStreamsCacheThenRetries) {
  fixture f("gc_threshold:0", 40 * MiB);
  void* p = f.alloc->allocate(15 * MiB, s(1));  // 16 MiB segment on stream 1
  f.alloc->deallocate(p);                       // cached there
  void* q = f.alloc->allocate(30 * MiB, s(2));  // needs 30 MiB: only 24 MiB free
  ASSERT_NE(q, nullptr);
  const memory_stats st = f.alloc->stats();
  EXPECT_EQ(st.num_alloc_retries, 1u);
  EXPECT_EQ(st.num_cache_flushes, 1u);
  EXPECT_EQ(st.num_segment_frees, 1u);
  EXPECT_EQ(st.num_ooms, 0u);
  EXPECT_EQ(st.reserved_bytes.all.current, 30 * MiB);
  // 16 MiB held + 30 MiB > 40 MiB: the first try is refused without a device call.
  EXPECT_EQ(f.dev->counters().failed_segment_allocs, 0u);
  EXPECT_EQ(f.dev->counters().segment_allocs, 2u);
  f.alloc->deallocate(q);
  expect_stats_match_snapshot(*f.alloc);
  expect_device_matches(*f.alloc, *f.dev);
}

TEST(out_of_memory, AGrowthTheDeviceCannotHoldIsNotTriedOnIt) {
  // 3 x 30 MiB on a 64 MiB device: the third growth would take 90 MiB, more than the device
  // holds in all, so no cudaMalloc is made for it (a refused call costs as much as one that
  // succeeds); the allocation fails with the out-of-memory sequence's numbers.
  fixture f("", 64 * MiB);
  void* a = f.alloc->allocate(30 * MiB);
  void* b = f.alloc->allocate(30 * MiB);
  EXPECT_THROW((void)f.alloc->allocate(30 * MiB), out_of_memory);
  const memory_stats st = f.alloc->stats();
  EXPECT_EQ(st.num_ooms, 1u);
  EXPECT_EQ(st.num_alloc_retries, 1u);
  EXPECT_EQ(st.num_segment_allocs, 2u);
  EXPECT_EQ(f.dev->counters().segment_allocs, 2u);
  EXPECT_EQ(f.dev->counters().failed_segment_allocs, 0u);
  f.alloc->deallocate(a);
  f.alloc->deallocate(b);
  expect_stats_match_snapshot(*f.alloc);
  expect_device_matches(*f.alloc, *f.dev);
}

TEST(out_of_memory, AGrowthThatMayFitIsTriedOnTheDevice) {
  // Another user holds 30 MiB of the 64 MiB device: 30 MiB held here + 30 MiB is no more than
  // the device, so the call is made; the device refuses it, and the retry frees this
  // allocator's cached segment and gets the memory.
  fixture f("gc_threshold:0", 64 * MiB);
  allocator other(config::parse(""), f.dev);
  void* theirs = other.allocate(30 * MiB);
  void* mine = f.alloc->allocate(16 * MiB);
  f.alloc->deallocate(mine);  // cached: 16 MiB held, 18 MiB free on the device
  void* p = f.alloc->allocate(30 * MiB);
  ASSERT_NE(p, nullptr);
  EXPECT_EQ(f.dev->counters().failed_segment_allocs, 1u);
  EXPECT_EQ(f.alloc->stats().num_segment_frees, 1u);
  EXPECT_EQ(f.alloc->stats().num_alloc_retries, 1u);
  f.alloc->deallocate(p);
  other.deallocate(theirs);
  expect_stats_match_snapshot(*f.alloc);
}

TEST(out_of_memory, CompletesPendingEventsBeforeGivingUp) {
  fixture f("", 40 * MiB);
  void* p = f.alloc->allocate(30 * MiB, s(1));
  f.alloc->record_stream(p, s(2));
  f.dev->hold_stream(s(2));
  f.alloc->deallocate(p);                       // pending on stream 2
  void* q = f.alloc->allocate(30 * MiB, s(1));  // waits for stream 2, then reuses the block
  EXPECT_EQ(q, p);
  EXPECT_EQ(f.alloc->stats().num_alloc_retries, 1u);
  EXPECT_GE(f.alloc->stats().num_device_syncs, 1u);
  EXPECT_EQ(f.dev->counters().event_syncs, 1u);
  f.alloc->deallocate(q);
  expect_stats_match_snapshot(*f.alloc);
}

TEST(out_of_memory, FailsWithTheNumbersAndLeavesStatsUnchanged) {
  fixture f("", 64 * MiB);
  void* keep = f.alloc->allocate(30 * MiB, s(1));
  void* cached = f.alloc->allocate(12 * MiB, s(1));
  f.alloc->deallocate(cached);  // 30 + 12 = 42 MiB reserved, 12 cached
  const memory_stats before = f.alloc->stats();
  try {
    (void)f.alloc->allocate(40 * MiB, s(1));
    FAIL() << "expected out of memory";
  } catch (const out_of_memory& e) {
    EXPECT_EQ(e.code(), status::out_of_memory);
    EXPECT_EQ(e.info().requested_bytes, 40 * MiB);
    EXPECT_EQ(e.info().device_total, 64 * MiB);
    EXPECT_EQ(e.info().device_free, 34 * MiB);  // the cached 12 MiB were released
    EXPECT_EQ(e.info().reserved_bytes, 30 * MiB);
    EXPECT_EQ(e.info().allocated_bytes, 30 * MiB);
    const std::string msg = e.what();
    for (const char* part :
         {"tried to allocate 40.00 MiB", "capacity 64.00 MiB", "34.00 MiB free",
          "30.00 MiB reserved", "30.00 MiB allocated", "largest free block", "Hint"}) {
      EXPECT_NE(msg.find(part), std::string::npos) << part << " in: " << msg;
    }
  }
  const memory_stats after = f.alloc->stats();
  EXPECT_EQ(after.num_ooms, before.num_ooms + 1);
  EXPECT_EQ(after.num_alloc_retries, before.num_alloc_retries + 1);
  EXPECT_EQ(after.allocated_bytes.all.current, before.allocated_bytes.all.current);
  EXPECT_EQ(after.requested_bytes.all.current, before.requested_bytes.all.current);
  EXPECT_EQ(after.allocations.all.current, before.allocations.all.current);
  EXPECT_EQ(after.num_allocs, before.num_allocs);
  EXPECT_EQ(after.allocated_bytes.all.peak, before.allocated_bytes.all.peak);
  void* small = f.alloc->allocate(MiB, s(1));  // the allocator keeps working
  EXPECT_NE(small, nullptr);
  f.alloc->deallocate(small);
  f.alloc->deallocate(keep);
  expect_stats_match_snapshot(*f.alloc);
  expect_device_matches(*f.alloc, *f.dev);
}

TEST(out_of_memory, MemoryLimitInBytes) {
  fixture f("memory_limit:64MiB", 80 * GiB);
  EXPECT_EQ(f.alloc->get_config().memory_limit, 64 * MiB);
  void* a = f.alloc->allocate(40 * MiB);
  EXPECT_THROW((void)f.alloc->allocate(30 * MiB), out_of_memory);
  void* b = f.alloc->allocate(24 * MiB);
  EXPECT_EQ(f.alloc->stats().reserved_bytes.all.current, 64 * MiB);
  f.alloc->deallocate(a);
  f.alloc->deallocate(b);
  EXPECT_THROW((void)f.alloc->allocate(65 * MiB), out_of_memory);
  EXPECT_EQ(f.alloc->stats().num_segment_frees, 0u) << "an impossible request flushed the cache";
}

TEST(out_of_memory, MemoryLimitAsPercentOfTheDevice) {
  fixture f("memory_limit:25%", 400 * MiB);
  EXPECT_EQ(f.alloc->get_config().memory_limit, 100 * MiB);
  void* a = f.alloc->allocate(100 * MiB);
  EXPECT_THROW((void)f.alloc->allocate(512), out_of_memory);
  f.alloc->deallocate(a);
}

TEST(out_of_memory, NearTheLimitGrowthFirstReturnsCachedSegmentsThatDoNotFit) {
  // (release_policy:eager: at every growth; adaptive applies it once in-use memory is tight.)
  fixture f("gc_threshold:0.5,release_policy:eager", 100 * MiB);  // growth beyond 50 MiB
                                                                  // reserved returns cache
  void* a = f.alloc->allocate(12 * MiB, s(1));                    // 12 MiB segment
  void* b = f.alloc->allocate(14 * MiB, s(1));                    // 14 MiB segment
  void* c = f.alloc->allocate(16 * MiB, s(2));                    // 16 MiB segment: 42 MiB reserved
  f.alloc->deallocate(a);
  f.alloc->deallocate(b);  // 26 MiB cached on stream 1, nothing of it fits 20 MiB
  void* d = f.alloc->allocate(20 * MiB, s(1));  // 42 + 20 > 50: release 14 MiB (largest) only
  const memory_stats st = f.alloc->stats();
  EXPECT_EQ(st.num_segment_frees, 1u);
  EXPECT_EQ(st.reserved_bytes.all.current, 12 * MiB + 16 * MiB + 20 * MiB);
  EXPECT_EQ(st.reserved_bytes.all.peak, 42 * MiB + 6 * MiB) << "never above the threshold";
  EXPECT_EQ(st.num_alloc_retries, 0u);
  EXPECT_EQ(f.dev->counters().failed_segment_allocs, 0u);
  f.alloc->deallocate(c);
  f.alloc->deallocate(d);
  expect_stats_match_snapshot(*f.alloc);
  expect_device_matches(*f.alloc, *f.dev);
}

TEST(out_of_memory, GcThresholdOffKeepsTheCacheUntilTheDeviceRefuses) {
  fixture f("gc_threshold:0", 100 * MiB);
  void* a = f.alloc->allocate(40 * MiB, s(1));
  f.alloc->deallocate(a);
  void* b = f.alloc->allocate(50 * MiB, s(1));
  EXPECT_EQ(f.alloc->stats().reserved_bytes.all.current, 90 * MiB);
  EXPECT_EQ(f.alloc->stats().num_segment_frees, 0u);
  f.alloc->deallocate(b);
}

TEST(out_of_memory, SizeBeyondTheDeviceFailsAtOnce) {
  fixture f("", GiB);
  void* p = f.alloc->allocate(MiB);
  f.alloc->deallocate(p);
  EXPECT_THROW((void)f.alloc->allocate(2 * GiB), out_of_memory);
  const memory_stats st = f.alloc->stats();
  EXPECT_EQ(st.num_ooms, 1u);
  EXPECT_EQ(st.num_alloc_retries, 0u);
  EXPECT_EQ(st.segments.all.current, 1u) << "cache kept";
}

}  // namespace
}  // namespace cachalot::testing
