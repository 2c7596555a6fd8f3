// Pass-through mode (caching:0): every allocation is its own device segment of the rounded
// size, returned to the device when freed (or, when it was used on other streams, when their
// events complete), so that tools such as compute-sanitizer see every out-of-bounds access.
// Counts are exact on the simulated device.
#include <gtest/gtest.h>

#include <memory>
#include <unordered_map>
#include <vector>

#include "cachalot/cachalot.hpp"
#include "reliability/invariants.hpp"

namespace cachalot {
namespace {

stream_t stream_n(std::uintptr_t n) {
  return reinterpret_cast<stream_t>(n);
}

struct passthrough : ::testing::Test {
  std::shared_ptr<simulated_device> sim;
  std::unique_ptr<allocator> a;
  std::unordered_map<void*, std::size_t> live;

  void make(std::size_t capacity, bool host_backing = false, bool debug = false) {
    sim_options o;
    o.capacity = capacity;
    o.host_backing = host_backing;
    sim = std::make_shared<simulated_device>(o);
    config cfg = config::parse("caching:0");
    cfg.debug = debug;
    a = std::make_unique<allocator>(cfg, sim);
  }
  void SetUp() override { make(1 * GiB); }
  void* alloc(std::size_t n, stream_t s = nullptr) {
    void* p = a->allocate(n, s);
    live.emplace(p, n);
    return p;
  }
  void release(void* p) {
    a->deallocate(p);
    live.erase(p);
  }
  void expect_consistent() { EXPECT_EQ(testing::check_invariants(*a, sim.get(), live), ""); }
};

TEST_F(passthrough, EveryAllocationIsItsOwnSegmentOfTheRoundedSize) {
  const std::size_t sizes[] = {1, 512, 513, 4000, 1 * MiB, 1 * MiB + 1, 13 * MiB};
  std::vector<void*> ptrs;
  std::size_t reserved = 0;
  for (std::size_t n : sizes) {
    ptrs.push_back(alloc(n));
    reserved += (n + 511) / 512 * 512;
  }
  const memory_stats s = a->stats();
  EXPECT_EQ(sim->counters().segment_allocs, std::size(sizes));
  EXPECT_EQ(sim->counters().live_segments, std::size(sizes));
  EXPECT_EQ(s.num_segment_allocs, std::size(sizes));
  EXPECT_EQ(s.reserved_bytes.all.current, reserved);
  EXPECT_EQ(s.allocated_bytes.all.current, reserved);
  EXPECT_EQ(s.inactive_split_bytes.all.current, 0u);
  EXPECT_EQ(s.num_free_blocks, 0u);
  EXPECT_EQ(sim->counters().used_bytes, reserved);
  expect_consistent();
  for (std::size_t i = 0; i < ptrs.size(); ++i) {
    release(ptrs[i]);
    EXPECT_EQ(sim->counters().live_segments, std::size(sizes) - i - 1);
    expect_consistent();
  }
  EXPECT_EQ(a->stats().reserved_bytes.all.current, 0u);
  EXPECT_EQ(sim->counters().segment_frees, std::size(sizes));
}

TEST_F(passthrough, NothingIsReusedSoAFreedAddressIsUnmapped) {
  make(64 * MiB, true);
  void* p = alloc(4096);
  EXPECT_TRUE(sim->is_live(p, 4096));
  EXPECT_FALSE(sim->is_live(static_cast<char*>(p) + 4096, 1));  // nothing past the end
  release(p);
  EXPECT_FALSE(sim->is_live(p, 1));  // an access now faults, on a GPU and here
  void* q = alloc(4096);
  EXPECT_EQ(sim->counters().segment_allocs, 2u);
  release(q);
  EXPECT_EQ(a->stats().num_segment_frees, 2u);
}

TEST_F(passthrough, RecordStreamDefersTheReturnToTheDevice) {
  void* p = alloc(1 * MiB, stream_n(1));
  sim->hold_stream(stream_n(2));
  a->record_stream(p, stream_n(2));
  release(p);
  memory_stats s = a->stats();
  EXPECT_EQ(sim->counters().live_segments, 1u);
  EXPECT_EQ(s.num_pending_blocks, 1u);
  EXPECT_EQ(s.active_bytes.all.current, 1 * MiB);
  EXPECT_EQ(s.allocated_bytes.all.current, 0u);
  expect_consistent();
  a->process_events();
  EXPECT_EQ(sim->counters().live_segments, 1u);  // stream 2 still busy
  sim->release_stream(stream_n(2));
  a->process_events();
  s = a->stats();
  EXPECT_EQ(sim->counters().live_segments, 0u);
  EXPECT_EQ(s.reserved_bytes.all.current, 0u);
  EXPECT_EQ(s.num_pending_blocks, 0u);
  EXPECT_EQ(s.num_deferred_frees, 1u);
  expect_consistent();
}

TEST_F(passthrough, AFreeOnAnotherStreamWaitsForThatStream) {
  void* p = alloc(3000, stream_n(1));
  sim->hold_stream(stream_n(5));
  a->deallocate(p, stream_n(5));
  live.erase(p);
  EXPECT_EQ(sim->counters().live_segments, 1u);
  a->empty_cache();  // waits for the event: the segment goes back
  EXPECT_EQ(sim->counters().live_segments, 0u);
  EXPECT_EQ(a->stats().reserved_bytes.all.current, 0u);
  expect_consistent();
}

TEST_F(passthrough, OutOfMemoryIsExactAndRecoverable) {
  make(8 * MiB);
  void* p = alloc(6 * MiB);
  EXPECT_THROW(a->allocate(4 * MiB), out_of_memory);
  EXPECT_EQ(a->stats().num_ooms, 1u);
  expect_consistent();
  release(p);
  void* q = alloc(8 * MiB);
  release(q);
  EXPECT_EQ(sim->counters().live_segments, 0u);
}

TEST_F(passthrough, ASegmentTheDeviceRefusesIsKeptAndReleasedLater) {
  void* p = alloc(4096);
  sim->fail_nth(sim_op::free_segment, 1);
  release(p);  // the free succeeds for the caller; the segment stays, cached
  EXPECT_EQ(sim->counters().live_segments, 1u);
  EXPECT_EQ(a->stats().reserved_bytes.all.current, 4096u);
  EXPECT_EQ(a->stats().num_free_blocks, 1u);
  expect_consistent();
  a->empty_cache();
  EXPECT_EQ(sim->counters().live_segments, 0u);
  EXPECT_EQ(a->stats().reserved_bytes.all.current, 0u);
}

TEST_F(passthrough, CheckedModeStillCatchesInvalidFrees) {
  make(64 * MiB, true, true);
  void* p = alloc(4096);
  EXPECT_THROW(a->deallocate(static_cast<char*>(p) + 512), invalid_pointer);
  EXPECT_THROW(a->deallocate(p, 4095, nullptr), invalid_pointer);
  release(p);
  EXPECT_THROW(a->deallocate(p), invalid_pointer);
  EXPECT_EQ(sim->counters().live_segments, 0u);
  expect_consistent();
}

}  // namespace
}  // namespace cachalot
