// Tests of faulty_backend's virtual-memory operations: a planned fault fails exactly the chosen
// call, as the contract says (reserve_address_range and map_chunk run out, or throw in error
// mode; unmap_chunk and release_address_range throw), without reaching the wrapped device, and
// every other call is forwarded.
#include <gtest/gtest.h>

#include <memory>

#include "cachalot/errors.hpp"
#include "cachalot/fault_injection.hpp"
#include "cachalot/simulated_device.hpp"

namespace cachalot {
namespace {

constexpr std::size_t G = 2 * MiB;

TEST(fault_injection, FailsVirtualMemoryCallsWithoutReachingTheDevice) {
  sim_options o;
  o.capacity = 64 * MiB;
  auto sim = std::make_shared<simulated_device>(o);
  faulty_backend f(sim);
  EXPECT_TRUE(f.supports_virtual_memory());
  EXPECT_EQ(f.vm_granularity(), G);

  f.fail_nth(fault_op::reserve_address_range, 1);
  EXPECT_EQ(f.reserve_address_range(8 * MiB), nullptr);
  EXPECT_EQ(sim->calls(sim_op::reserve_address_range), 0u) << "never reached the device";
  void* r = f.reserve_address_range(8 * MiB);
  ASSERT_NE(r, nullptr);

  f.fail_nth(fault_op::map_chunk, 1);
  EXPECT_FALSE(f.map_chunk(r, G));
  EXPECT_EQ(sim->counters().live_chunks, 0u);
  ASSERT_TRUE(f.map_chunk(r, G));

  f.fail_nth(fault_op::unmap_chunk, 1);
  EXPECT_THROW(f.unmap_chunk(r, G), backend_error);
  EXPECT_TRUE(sim->is_mapped(r, G)) << "the chunk stays mapped";
  f.unmap_chunk(r, G);

  f.fail_nth(fault_op::release_address_range, 1);
  EXPECT_THROW(f.release_address_range(r, 8 * MiB), backend_error);
  EXPECT_EQ(sim->counters().live_ranges, 1u) << "the range stays reserved";

  f.set_mode(fault_op::map_chunk, fault_mode::error);
  f.set_mode(fault_op::reserve_address_range, fault_mode::error);
  f.fail_always(fault_op::map_chunk, true);
  f.fail_always(fault_op::reserve_address_range, true);
  EXPECT_THROW((void)f.map_chunk(r, G), backend_error);
  EXPECT_THROW((void)f.reserve_address_range(G), backend_error);
  f.clear();
  ASSERT_TRUE(f.map_chunk(r, G));
  f.unmap_chunk(r, G);
  f.release_address_range(r, 8 * MiB);

  EXPECT_EQ(f.injected(), 6u);
  EXPECT_EQ(f.calls(fault_op::reserve_address_range), 3u);
  EXPECT_EQ(f.calls(fault_op::map_chunk), 4u);
  EXPECT_EQ(f.calls(fault_op::unmap_chunk), 3u);
  EXPECT_EQ(f.calls(fault_op::release_address_range), 2u);
  const sim_counters c = sim->counters();
  EXPECT_EQ(c.chunk_maps, 2u);
  EXPECT_EQ(c.chunk_unmaps, 2u);
  EXPECT_EQ(c.range_reserves, 1u);
  EXPECT_EQ(c.range_releases, 1u);
  EXPECT_EQ(c.injected_faults, 0u) << "the device itself failed nothing";
  EXPECT_STREQ(fault_op_name(fault_op::unmap_chunk), "unmap_chunk");
  EXPECT_STREQ(fault_op_name(fault_op::reserve_address_range), "reserve_address_range");
}

TEST(fault_injection, OnlyOperationsThatCanRunOutTakeAMode) {
  faulty_backend f(std::make_shared<simulated_device>());
  EXPECT_NO_THROW(f.set_mode(fault_op::allocate_segment, fault_mode::error));
  EXPECT_THROW(f.set_mode(fault_op::unmap_chunk, fault_mode::out_of_memory), invalid_argument);
  EXPECT_THROW(f.set_mode(fault_op::free_segment, fault_mode::error), invalid_argument);
  f.fail_nth(fault_op::allocate_segment, 1);
  EXPECT_THROW((void)f.allocate_segment(4096, nullptr), backend_error);
  f.set_allocate_mode(fault_mode::out_of_memory);
  f.fail_nth(fault_op::allocate_segment, 1);
  EXPECT_EQ(f.allocate_segment(4096, nullptr), nullptr);
}

TEST(fault_injection, ForwardsVirtualMemoryCallsToABackendWithout) {
  sim_options o;
  o.virtual_memory = false;
  faulty_backend f(std::make_shared<simulated_device>(o));
  EXPECT_FALSE(f.supports_virtual_memory());
  EXPECT_THROW((void)f.reserve_address_range(G), not_supported);
}

}  // namespace
}  // namespace cachalot
