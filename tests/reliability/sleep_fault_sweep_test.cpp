// Faults in the sleep and wake of a tenant pool: for every backend operation and every N, the
// Nth call of that operation made by a sleep(offload), by a sleep(discard) and by a wake fails
// (a faulty_backend around the host-backed simulated device). Each call either succeeds or
// throws a cachalot::error, and then the pool is either fully awake or fully asleep:
//  - a failed sleep leaves it awake with every live byte intact and allocations served, except
//    a failed unmap, after which it is asleep holding that chunk (sleep.bytes_held);
//  - a failed wake leaves it asleep with its offloaded bytes kept, and a later wake restores them;
// the stats match the snapshot exactly after every call (support/invariants.hpp), the sleep
// counters count exactly the sleeps and wakes that completed and failed, and at the end, once
// everything is freed and the allocator destroyed, the device holds no chunk, range or pinned
// host buffer.
#include <gtest/gtest.h>

#include <cstring>
#include <memory>
#include <string>
#include <vector>

#include "cachalot/allocator.hpp"
#include "cachalot/fault_injection.hpp"
#include "cachalot/simulated_device.hpp"
#include "support/invariants.hpp"

namespace cachalot::testing {
namespace {

stream_t s(int i) {
  return reinterpret_cast<stream_t>(static_cast<std::uintptr_t>(0x7000 + i * 16));
}

struct buffer {
  void* p;
  std::size_t n;
  unsigned char seed;
};

bool intact(const buffer& b) {
  const auto* c = static_cast<const unsigned char*>(b.p);
  for (std::size_t i = 0; i < b.n; ++i) {
    if (c[i] != static_cast<unsigned char>(b.seed + i * 13)) return false;
  }
  return true;
}

/// One allocator over faulty_backend(simulated_device with host backing), a tenant pool with
/// live blocks on two streams (one recorded on a third stream, one freed across streams) and
/// a neighbour pool that stays awake.
struct rig {
  rig() {
    sim_options o;
    o.capacity = 64 * MiB;
    o.host_backing = true;
    o.vm_address_space = 256 * MiB;
    sim = std::make_shared<simulated_device>(o);
    faulty = std::make_shared<faulty_backend>(sim);
    alloc = std::make_unique<allocator>(config::parse("expandable_segments:1"), faulty);
    pool_options b;
    b.name = "batch";
    batch = alloc->create_pool(b);
    pool_options n;
    n.name = "neighbour";
    neighbour = alloc->create_pool(n);
    const std::size_t sizes[] = {700 * KiB, 3 * MiB, 512, 2 * MiB + 4096, 64 * KiB};
    unsigned char seed = 1;
    for (std::size_t k = 0; k < std::size(sizes); ++k) {
      void* p = alloc->allocate(sizes[k], s(1 + static_cast<int>(k % 2)), batch);
      auto* c = static_cast<unsigned char*>(p);
      for (std::size_t i = 0; i < sizes[k]; ++i) c[i] = static_cast<unsigned char>(seed + i * 13);
      kept.push_back(buffer{p, sizes[k], seed});
      seed = static_cast<unsigned char>(seed + 40);
    }
    alloc->record_stream(kept[1].p, s(3));
    void* gone = alloc->allocate(1 * MiB, s(1), batch);
    alloc->deallocate(gone, s(2));  // freed on another stream: pending until its event
    other = alloc->allocate(5 * MiB, s(4), neighbour);
  }
  bool asleep() const { return alloc->pools()[batch].asleep; }
  bool all_intact() const {
    for (const buffer& b : kept) {
      if (!intact(b)) return false;
    }
    return true;
  }
  /// The pool is fully awake: bytes intact (unless a discard lost them), a new allocation
  /// served, nothing held.
  void expect_awake(const std::string& what, bool bytes_kept = true) {
    EXPECT_FALSE(asleep()) << what;
    if (bytes_kept) {
      EXPECT_TRUE(all_intact()) << what;
    }
    const memory_stats st = alloc->stats(batch);
    EXPECT_EQ(st.sleep.pools_asleep, 0u) << what;
    EXPECT_EQ(st.sleep.bytes_offloaded, 0u) << what;
    EXPECT_EQ(st.sleep.bytes_held, 0u) << what;
    void* p = alloc->allocate(4096, s(1), batch);
    alloc->deallocate(p);
  }
  /// The pool is fully asleep: allocations refused, live bytes counted asleep.
  void expect_asleep(const std::string& what) {
    EXPECT_TRUE(asleep()) << what;
    const memory_stats st = alloc->stats(batch);
    EXPECT_EQ(st.sleep.pools_asleep, 1u) << what;
    EXPECT_GT(st.sleep.bytes_asleep + st.sleep.bytes_held, 0u) << what;
    EXPECT_THROW(alloc->allocate(4096, s(1), batch), pool_asleep) << what;
  }
  void finish(const std::string& what) {
    faulty->clear();
    if (asleep()) {
      EXPECT_TRUE(alloc->wake(batch)) << what;
    }
    for (const buffer& b : kept) alloc->deallocate(b.p);
    alloc->deallocate(other);
    alloc->empty_cache();
    expect_stats_match_snapshot(*alloc);
    alloc.reset();
    const sim_counters c = sim->counters();
    EXPECT_EQ(c.mapped_bytes, 0u) << what;
    EXPECT_EQ(c.live_ranges, 0u) << what;
    EXPECT_EQ(c.live_segments, 0u) << what;
    EXPECT_EQ(c.live_host_allocs, 0u) << what;
  }
  std::shared_ptr<simulated_device> sim;
  std::shared_ptr<faulty_backend> faulty;
  std::unique_ptr<allocator> alloc;
  pool_id batch = default_pool;
  pool_id neighbour = default_pool;
  std::vector<buffer> kept;
  void* other = nullptr;
};

constexpr fault_op every_op[] = {fault_op::allocate_segment,
                                 fault_op::free_segment,
                                 fault_op::create_event,
                                 fault_op::record_event,
                                 fault_op::query_event,
                                 fault_op::synchronize,
                                 fault_op::memory_info,
                                 fault_op::reserve_address_range,
                                 fault_op::release_address_range,
                                 fault_op::map_chunk,
                                 fault_op::unmap_chunk,
                                 fault_op::allocate_host,
                                 fault_op::free_host,
                                 fault_op::copy};
static_assert(std::size(every_op) == fault_op_count);

constexpr std::uint64_t max_n = 40;  // more calls than any one sleep or wake of the rig makes

/// The Nth call of `op` in a sleep fails, for every N until a sleep makes fewer calls.
/// Returns the calls of `op` that one sleep makes (the faults injected).
std::uint64_t sweep_sleep(fault_op op, sleep_mode mode) {
  for (std::uint64_t n = 1; n <= max_n; ++n) {
    const std::string what = std::string(fault_op_name(op)) + " #" + std::to_string(n) +
                             (mode == sleep_mode::offload ? " (offload)" : " (discard)");
    rig r;
    r.faulty->fail_nth(op, n);
    const std::uint64_t before = r.faulty->injected();
    bool threw = false;
    try {
      EXPECT_TRUE(r.alloc->sleep(r.batch, mode)) << what;
    } catch (const error&) {
      threw = true;
    }
    const bool tripped = r.faulty->injected() != before;
    r.faulty->clear();
    expect_stats_match_snapshot(*r.alloc);
    const memory_stats st = r.alloc->stats(r.batch);
    if (!threw) {
      r.expect_asleep(what);
      EXPECT_EQ(st.sleep.num_sleeps, 1u) << what;
      EXPECT_EQ(st.sleep.num_failed_sleeps, 0u) << what;
    } else if (r.asleep()) {  // only a failed unmap leaves it asleep: it holds that chunk
      EXPECT_EQ(op, fault_op::unmap_chunk) << what;
      r.expect_asleep(what);
      EXPECT_GT(st.sleep.bytes_held, 0u) << what;
      EXPECT_EQ(st.reserved_bytes.all.current, st.sleep.bytes_held) << what;
    } else {
      r.expect_awake(what);
      EXPECT_EQ(st.sleep.num_sleeps, 0u) << what;
      EXPECT_EQ(st.sleep.num_failed_sleeps, 1u) << what;
    }
    if (r.asleep()) {  // the wake restores what an offload kept
      EXPECT_TRUE(r.alloc->wake(r.batch)) << what;
      r.expect_awake(what, mode == sleep_mode::offload);
    }
    r.finish(what);
    if (!tripped) return n - 1;  // this sleep made fewer than n calls of op: all were covered
  }
  ADD_FAILURE() << fault_op_name(op) << ": a sleep made more than " << max_n << " calls";
  return max_n;
}

/// The Nth call of `op` in a wake fails, for every N until a wake makes fewer calls.
/// Returns the calls of `op` that one wake makes.
std::uint64_t sweep_wake(fault_op op) {
  for (std::uint64_t n = 1; n <= max_n; ++n) {
    const std::string what = std::string("wake, ") + fault_op_name(op) + " #" + std::to_string(n);
    rig r;
    EXPECT_TRUE(r.alloc->sleep(r.batch, sleep_mode::offload)) << what;
    const memory_stats asleep = r.alloc->stats(r.batch);
    r.faulty->fail_nth(op, n);
    const std::uint64_t before = r.faulty->injected();
    bool threw = false;
    try {
      EXPECT_TRUE(r.alloc->wake(r.batch)) << what;
    } catch (const error&) {
      threw = true;
    }
    const bool tripped = r.faulty->injected() != before;
    r.faulty->clear();
    expect_stats_match_snapshot(*r.alloc);
    const memory_stats st = r.alloc->stats(r.batch);
    if (threw) {
      r.expect_asleep(what);
      EXPECT_EQ(st.sleep.bytes_offloaded, asleep.sleep.bytes_offloaded) << what;
      EXPECT_EQ(st.sleep.num_wakes, 0u) << what;
      EXPECT_EQ(st.sleep.num_failed_wakes, 1u) << what;
      EXPECT_TRUE(r.alloc->wake(r.batch)) << what;
    } else {
      EXPECT_EQ(st.sleep.num_wakes, 1u) << what;
    }
    EXPECT_TRUE(r.all_intact()) << what;
    r.expect_awake(what);
    r.finish(what);
    if (!tripped) return n - 1;
  }
  ADD_FAILURE() << fault_op_name(op) << ": a wake made more than " << max_n << " calls";
  return max_n;
}

/// The calls a sweep covered, by operation.
std::uint64_t calls_of(const std::vector<std::uint64_t>& calls, fault_op op) {
  return calls[static_cast<std::size_t>(op)];
}

// Each sweep also checks that it covered the calls a sleep or wake must make (so that it
// cannot pass by injecting nothing): synchronizations, pinned host memory, copies, unmaps, maps.
TEST(sleep_fault_sweep, EveryFailedCallOfAnOffloadSleepLeavesThePoolAwakeOrAsleep) {
  std::vector<std::uint64_t> calls;
  for (fault_op op : every_op) calls.push_back(sweep_sleep(op, sleep_mode::offload));
  EXPECT_GE(calls_of(calls, fault_op::synchronize), 3u);  // the pending block, two streams
  EXPECT_EQ(calls_of(calls, fault_op::allocate_host), 1u);
  EXPECT_GE(calls_of(calls, fault_op::copy), 2u);
  EXPECT_GE(calls_of(calls, fault_op::unmap_chunk), 4u);
  EXPECT_EQ(calls_of(calls, fault_op::map_chunk), 0u);
}

TEST(sleep_fault_sweep, EveryFailedCallOfADiscardSleepLeavesThePoolAwakeOrAsleep) {
  std::vector<std::uint64_t> calls;
  for (fault_op op : every_op) calls.push_back(sweep_sleep(op, sleep_mode::discard));
  EXPECT_GE(calls_of(calls, fault_op::synchronize), 3u);
  EXPECT_EQ(calls_of(calls, fault_op::allocate_host), 0u);
  EXPECT_EQ(calls_of(calls, fault_op::copy), 0u);
  EXPECT_GE(calls_of(calls, fault_op::unmap_chunk), 4u);
}

TEST(sleep_fault_sweep, EveryFailedCallOfAWakeLeavesThePoolAsleepWithItsBytes) {
  std::vector<std::uint64_t> calls;
  for (fault_op op : every_op) calls.push_back(sweep_wake(op));
  EXPECT_GE(calls_of(calls, fault_op::map_chunk), 4u);
  EXPECT_GE(calls_of(calls, fault_op::copy), 2u);
  EXPECT_GE(calls_of(calls, fault_op::synchronize), 1u);
  EXPECT_EQ(calls_of(calls, fault_op::free_host), 1u);
  EXPECT_EQ(calls_of(calls, fault_op::unmap_chunk), 0u);
}

TEST(sleep_fault_sweep, MapsThatThrowInsteadOfRunningOutLeaveThePoolAsleep) {
  for (std::uint64_t n = 1; n <= 3; ++n) {
    rig r;
    ASSERT_TRUE(r.alloc->sleep(r.batch, sleep_mode::offload));
    r.faulty->set_mode(fault_op::map_chunk, fault_mode::error);
    r.faulty->fail_nth(fault_op::map_chunk, n);
    EXPECT_THROW(r.alloc->wake(r.batch), backend_error);
    r.faulty->clear();
    expect_stats_match_snapshot(*r.alloc);
    r.expect_asleep("map throws");
    ASSERT_TRUE(r.alloc->wake(r.batch));
    EXPECT_TRUE(r.all_intact());
    r.finish("map throws");
  }
}

}  // namespace
}  // namespace cachalot::testing
