// Tests of the simulated device: capacity accounting, address reservation, host backing,
// stream holds and event completion, fault injection and counters.
#include "cachalot/simulated_device.hpp"

#include <gtest/gtest.h>

#include <cstring>

#include "cachalot/errors.hpp"

namespace cachalot {
namespace {

stream_t s(int i) {
  return reinterpret_cast<stream_t>(static_cast<std::uintptr_t>(i * 64));
}

TEST(simulated_device, AccountsCapacityExactly) {
  simulated_device d(sim_options{64 * MiB, false, 512, 0});
  void* a = d.allocate_segment(40 * MiB, nullptr);
  ASSERT_NE(a, nullptr);
  EXPECT_EQ(d.memory_info().free, 24 * MiB);
  EXPECT_EQ(d.allocate_segment(30 * MiB, nullptr), nullptr);
  void* b = d.allocate_segment(24 * MiB, nullptr);
  ASSERT_NE(b, nullptr);
  EXPECT_EQ(d.memory_info().free, 0u);
  d.free_segment(a, 40 * MiB);
  d.free_segment(b, 24 * MiB);
  EXPECT_EQ(d.memory_info().free, 64 * MiB);
  const sim_counters c = d.counters();
  EXPECT_EQ(c.segment_allocs, 2u);
  EXPECT_EQ(c.segment_frees, 2u);
  EXPECT_EQ(c.failed_segment_allocs, 1u);
  EXPECT_EQ(c.live_segments, 0u);
}

TEST(simulated_device, BigCapacityNeedsNoHostMemory) {
  simulated_device d(sim_options{std::size_t{512} << 30, false, 512, 0});
  void* a = d.allocate_segment(std::size_t{400} << 30, nullptr);
  ASSERT_NE(a, nullptr);
  EXPECT_TRUE(d.is_live(a, std::size_t{400} << 30));
  d.free_segment(a, std::size_t{400} << 30);
}

TEST(simulated_device, HostBackingMakesLiveSegmentsWritable) {
  simulated_device d(sim_options{16 * MiB, true, 512, 0});
  auto* p = static_cast<unsigned char*>(d.allocate_segment(3 * MiB, nullptr));
  ASSERT_NE(p, nullptr);
  std::memset(p, 0xab, 3 * MiB);
  EXPECT_EQ(p[3 * MiB - 1], 0xab);
  EXPECT_TRUE(d.is_live(p + 100, 1000));
  EXPECT_FALSE(d.is_live(p + 3 * MiB - 10, 100));
  d.free_segment(p, 3 * MiB);
  EXPECT_FALSE(d.is_live(p, 1));
}

TEST(simulated_device, RejectsBadFrees) {
  simulated_device d(sim_options{16 * MiB, false, 512, 0});
  void* a = d.allocate_segment(MiB, nullptr);
  EXPECT_THROW(d.free_segment(a, 2 * MiB), backend_error);
  EXPECT_THROW(d.free_segment(static_cast<char*>(a) + 512, MiB), backend_error);
  d.free_segment(a, MiB);
  EXPECT_THROW(d.free_segment(a, MiB), backend_error);
}

TEST(simulated_device, EventsCompleteAtOnceUnlessTheStreamIsHeld) {
  simulated_device d;
  event_t e = d.create_event();
  EXPECT_TRUE(d.query_event(e)) << "never recorded";
  d.record_event(e, s(1));
  EXPECT_TRUE(d.query_event(e));
  d.hold_stream(s(1));
  EXPECT_TRUE(d.is_held(s(1)));
  d.record_event(e, s(1));
  EXPECT_FALSE(d.query_event(e));
  event_t other = d.create_event();
  d.record_event(other, s(2));
  EXPECT_TRUE(d.query_event(other)) << "holds are per stream";
  d.release_stream(s(1));
  EXPECT_TRUE(d.query_event(e));
  d.hold_stream(s(1));
  d.record_event(e, s(1));
  d.synchronize_event(e);  // waiting for the work finishes it
  EXPECT_TRUE(d.query_event(e));
  EXPECT_FALSE(d.is_held(s(1)));
  d.destroy_event(e);
  d.destroy_event(other);
  EXPECT_THROW(d.destroy_event(e), backend_error);
  EXPECT_EQ(d.counters().live_events, 0u);
}

TEST(simulated_device, InjectsTheNthFailure) {
  simulated_device d(sim_options{64 * MiB, false, 512, 0});
  d.fail_nth(sim_op::allocate_segment, 2);
  void* a = d.allocate_segment(MiB, nullptr);
  EXPECT_NE(a, nullptr);
  EXPECT_EQ(d.allocate_segment(MiB, nullptr), nullptr);
  void* b = d.allocate_segment(MiB, nullptr);
  EXPECT_NE(b, nullptr);
  d.fail_nth(sim_op::free_segment, 1);
  EXPECT_THROW(d.free_segment(a, MiB), backend_error);
  d.free_segment(a, MiB);  // still live after the failed free
  d.free_segment(b, MiB);
  d.fail_always(sim_op::create_event, true);
  EXPECT_THROW((void)d.create_event(), backend_error);
  EXPECT_THROW((void)d.create_event(), backend_error);
  d.fail_always(sim_op::create_event, false);
  event_t e = d.create_event();
  d.fail_nth(sim_op::query_event, 1);
  EXPECT_THROW((void)d.query_event(e), backend_error);
  EXPECT_TRUE(d.query_event(e));
  d.destroy_event(e);
  EXPECT_EQ(d.counters().injected_faults, 5u);
  EXPECT_EQ(d.calls(sim_op::allocate_segment), 3u);
}

TEST(simulated_device, RejectsBadOptions) {
  EXPECT_THROW(simulated_device(sim_options{0, false, 512, 0}), invalid_argument);
  EXPECT_THROW(simulated_device(sim_options{MiB, false, 300, 0}), invalid_argument);
}

}  // namespace
}  // namespace cachalot
