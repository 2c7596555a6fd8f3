// Sleep and wake of tenant pools (cachalot/pool.hpp, src/detail/pool_sleep.hpp) on the
// simulated device with host backing: offloaded contents come back byte for byte at the same
// addresses, discard frees everything, exact stats (allocated blocks with nothing behind them,
// bytes asleep, offloaded, held) and snapshots, the typed errors (allocation and record_stream
// refused, frees allowed without a device call), refused pools, waiting for the pool's own
// streams only, wake under pressure and its out-of-memory error, the sleep the allocator decides
// for a higher-priority pool (and its callback), the modeled durations, release and teardown of
// sleeping pools, and concurrent use.
#include <gtest/gtest.h>

#include <algorithm>
#include <atomic>
#include <cstring>
#include <memory>
#include <string>
#include <thread>
#include <vector>

#include "cachalot/allocator.hpp"
#include "cachalot/simulated_device.hpp"
#include "support/invariants.hpp"

namespace cachalot::testing {
namespace {

stream_t s(int i) {
  return reinterpret_cast<stream_t>(static_cast<std::uintptr_t>(0x9000 + i * 16));
}

struct rig {
  explicit rig(std::size_t capacity = 256 * MiB, const std::string& conf = "expandable_segments:1",
               bool cost = true) {
    sim_options o;
    o.capacity = capacity;
    o.host_backing = true;
    o.vm_address_space = 4 * capacity;
    o.cost.enabled = cost;
    dev = std::make_shared<simulated_device>(o);
    alloc = std::make_unique<allocator>(config::parse(conf), dev);
  }
  pool_id tenant(const char* name, int priority = 0, bool sleepable = false,
                 sleep_mode mode = sleep_mode::offload, sleep_callback cb = {}) {
    pool_options o;
    o.name = name;
    o.priority = priority;
    o.sleepable = sleepable;
    o.sleep_mode = mode;
    o.on_sleep = std::move(cb);
    return alloc->create_pool(o);
  }
  memory_stats st(pool_id p) const { return alloc->stats(p); }
  std::size_t mapped() const { return dev->counters().mapped_bytes; }
  std::shared_ptr<simulated_device> dev;
  std::unique_ptr<allocator> alloc;
};

/// Fills `n` bytes at `p` with a pattern that depends on `seed` and the offset.
void fill(void* p, std::size_t n, unsigned seed) {
  auto* b = static_cast<unsigned char*>(p);
  for (std::size_t i = 0; i < n; ++i)
    b[i] = static_cast<unsigned char>((i * 131 + seed * 7) ^ i >> 9);
}
/// True if fill(p, n, seed) is what is there.
bool holds(const void* p, std::size_t n, unsigned seed) {
  const auto* b = static_cast<const unsigned char*>(p);
  for (std::size_t i = 0; i < n; ++i) {
    if (b[i] != static_cast<unsigned char>((i * 131 + seed * 7) ^ i >> 9)) return false;
  }
  return true;
}

struct live {
  void* p;
  std::size_t n;
  unsigned seed;
};

/// Blocks of many sizes in pool `pool` on stream `st`, every other one freed again, each kept
/// one filled with its pattern.
std::vector<live> populate(allocator& a, pool_id pool, stream_t st) {
  const std::size_t sizes[] = {512,     4 * KiB, 100 * KiB, 700 * KiB,      1 * MiB,
                               3 * MiB, 512,     5 * MiB,   2 * MiB + 4096, 33 * KiB};
  std::vector<live> kept;
  std::vector<void*> dropped;
  unsigned seed = 1;
  for (int round = 0; round < 2; ++round) {
    for (std::size_t n : sizes) {
      void* p = a.allocate(n, st, pool);
      if (seed % 2 == 0) {
        dropped.push_back(p);
      } else {
        fill(p, n, seed);
        kept.push_back(live{p, n, seed});
      }
      ++seed;
    }
  }
  for (void* p : dropped) a.deallocate(p);
  return kept;
}

/// Sleep and wake with offload, `conf` the allocator's config (chunk sizes differ).
void offload_round_trip(const std::string& conf) {
  rig r(256 * MiB, conf);
  const pool_id batch = r.tenant("batch");
  const pool_id other = r.tenant("other");
  std::vector<live> kept = populate(*r.alloc, batch, s(1));
  const memory_stats before = r.st(batch);
  ASSERT_GT(before.reserved_bytes.all.current, 0u);
  const std::size_t mapped_before = r.mapped();
  EXPECT_EQ(mapped_before, before.reserved_bytes.all.current);

  EXPECT_TRUE(r.alloc->sleep(batch, sleep_mode::offload));
  const memory_stats asleep = r.st(batch);
  EXPECT_EQ(asleep.reserved_bytes.all.current, 0u);  // every chunk went back
  EXPECT_EQ(r.mapped(), 0u);
  EXPECT_EQ(asleep.allocated_bytes.all.current, before.allocated_bytes.all.current);
  EXPECT_EQ(asleep.requested_bytes.all.current, before.requested_bytes.all.current);
  EXPECT_EQ(asleep.allocations.all.current, before.allocations.all.current);
  EXPECT_EQ(asleep.inactive_split_bytes.all.current, 0u);
  EXPECT_EQ(asleep.sleep.pools_asleep, 1u);
  EXPECT_EQ(asleep.sleep.num_sleeps, 1u);
  std::size_t live_bytes = 0;
  for (const live& l : kept) live_bytes += r.alloc->allocation_size(l.p);
  EXPECT_EQ(asleep.sleep.bytes_offloaded, live_bytes);
  EXPECT_EQ(asleep.sleep.bytes_copied_out, live_bytes);
  EXPECT_EQ(r.dev->counters().host_bytes, live_bytes);
  EXPECT_EQ(asleep.sleep.bytes_slept, mapped_before);
  EXPECT_GT(asleep.sleep.bytes_asleep, 0u);
  EXPECT_LE(asleep.sleep.bytes_asleep, mapped_before);
  EXPECT_EQ(asleep.sleep.bytes_held, 0u);
  EXPECT_EQ(r.st(other).sleep.pools_asleep, 0u);
  for (const live& l : kept) {
    EXPECT_TRUE(r.alloc->owns(l.p));  // pointers stay valid
    EXPECT_EQ(r.alloc->pool_of(l.p), batch);
    EXPECT_FALSE(r.dev->is_mapped(l.p, l.n));
  }
  const memory_snapshot snap = r.alloc->snapshot();
  ASSERT_EQ(snap.sleeping_pools.size(), 1u);
  EXPECT_EQ(snap.sleeping_pools[0].pool, batch);
  EXPECT_TRUE(snap.sleeping_pools[0].offloaded);
  for (const segment_info& seg : snap.segments) {
    EXPECT_EQ(seg.asleep, seg.memory_pool == batch);
  }
  expect_stats_match_snapshot(*r.alloc);
  expect_device_matches(*r.alloc, *r.dev);

  // Another tenant fills the device meanwhile, and gives the memory back.
  std::vector<void*> filler;
  for (int i = 0; i < 60; ++i) filler.push_back(r.alloc->allocate(4 * MiB, s(2), other));
  for (void* p : filler) std::memset(p, 0x5a, 4 * MiB);
  for (void* p : filler) r.alloc->deallocate(p);
  r.alloc->empty_cache();

  EXPECT_TRUE(r.alloc->wake(batch));
  for (const live& l : kept) {
    EXPECT_TRUE(r.dev->is_mapped(l.p, l.n));
    EXPECT_TRUE(holds(l.p, l.n, l.seed)) << "block of " << l.n << " B at " << l.p;
  }
  const memory_stats woken = r.st(batch);
  EXPECT_EQ(woken.sleep.pools_asleep, 0u);
  EXPECT_EQ(woken.sleep.num_wakes, 1u);
  EXPECT_EQ(woken.sleep.bytes_offloaded, 0u);
  EXPECT_EQ(woken.sleep.bytes_copied_in, live_bytes);
  EXPECT_EQ(woken.sleep.bytes_woken, asleep.sleep.bytes_asleep);
  EXPECT_EQ(woken.reserved_bytes.all.current, asleep.sleep.bytes_asleep);
  EXPECT_EQ(woken.allocated_bytes.all.current, before.allocated_bytes.all.current);
  EXPECT_EQ(r.dev->counters().host_bytes, 0u);
  EXPECT_EQ(r.dev->counters().live_host_allocs, 0u);
  expect_stats_match_snapshot(*r.alloc);
  expect_device_matches(*r.alloc, *r.dev);
  // Awake, the pool works as before, and its blocks can be freed and reused.
  void* fresh = r.alloc->allocate(3 * MiB, s(1), batch);
  fill(fresh, 3 * MiB, 99);
  for (const live& l : kept) EXPECT_TRUE(holds(l.p, l.n, l.seed));
  r.alloc->deallocate(fresh);
  for (const live& l : kept) r.alloc->deallocate(l.p);
  expect_stats_match_snapshot(*r.alloc);
  EXPECT_FALSE(r.alloc->wake(batch));  // awake already
}

TEST(pool_sleep, OffloadRoundTripKeepsEveryByteAtTheSameAddress) {
  offload_round_trip("expandable_segments:1");
}

TEST(pool_sleep, OffloadRoundTripWithLargeChunks) {
  // 20 MiB large-pool chunks: a large segment's chunk boundaries lie at its base plus
  // multiples of 20 MiB (no power of two), which the sleep's and the wake's chunk sets follow.
  offload_round_trip("expandable_segments:1,large_chunk:20MiB");
}

TEST(pool_sleep, DiscardGivesEverythingBackAndKeepsNothing) {
  rig r;
  const pool_id batch = r.tenant("cache");
  std::vector<live> kept = populate(*r.alloc, batch, s(1));
  const std::uint64_t copies = r.dev->counters().copies_to_host;
  EXPECT_TRUE(r.alloc->sleep(batch, sleep_mode::discard));
  EXPECT_EQ(r.mapped(), 0u);
  EXPECT_EQ(r.dev->counters().host_bytes, 0u);  // no host copy
  EXPECT_EQ(r.dev->counters().copies_to_host, copies);
  EXPECT_EQ(r.dev->counters().host_allocs, 0u);
  const memory_stats st = r.st(batch);
  EXPECT_EQ(st.sleep.bytes_offloaded, 0u);
  EXPECT_EQ(st.reserved_bytes.all.current, 0u);
  EXPECT_FALSE(r.alloc->snapshot().sleeping_pools.at(0).offloaded);
  expect_stats_match_snapshot(*r.alloc);
  EXPECT_TRUE(r.alloc->wake(batch));
  EXPECT_EQ(r.dev->counters().copies_to_device, 0u);
  for (const live& l : kept) {  // mapped again at the same address, contents unspecified
    ASSERT_TRUE(r.dev->is_mapped(l.p, l.n));
    fill(l.p, l.n, l.seed + 1000);
    EXPECT_TRUE(holds(l.p, l.n, l.seed + 1000));
  }
  for (const live& l : kept) r.alloc->deallocate(l.p);
  expect_stats_match_snapshot(*r.alloc);
  expect_device_matches(*r.alloc, *r.dev);
}

TEST(pool_sleep, AsleepRefusesAllocationAndRecordStreamButTakesFrees) {
  rig r;
  const pool_id batch = r.tenant("batch");
  r.alloc->begin_allocate_to_pool(batch, s(3));
  void* a = r.alloc->allocate(6 * MiB, s(3));  // its own chunks
  void* b = r.alloc->allocate(1 * MiB, s(3));  // shares a chunk with nothing else
  void* c = r.alloc->allocate(64 * KiB, s(3));
  fill(b, MiB, 3);
  ASSERT_TRUE(r.alloc->sleep(batch));
  const memory_stats asleep = r.st(batch);
  const sim_counters calls = r.dev->counters();
  const std::uint64_t maps = r.dev->calls(sim_op::map_chunk);
  EXPECT_THROW(r.alloc->allocate(KiB, s(3)), pool_asleep);         // routed
  EXPECT_THROW(r.alloc->allocate(KiB, s(4), batch), pool_asleep);  // explicit
  EXPECT_THROW(r.alloc->allocate(8 * MiB, s(3), batch), pool_asleep);
  EXPECT_THROW(r.alloc->record_stream(b, s(5)), pool_asleep);
  try {
    r.alloc->allocate(KiB, s(3));
    ADD_FAILURE() << "no error";
  } catch (const pool_asleep& e) {
    EXPECT_EQ(e.pool(), batch);
    EXPECT_EQ(e.code(), status::pool_asleep);
    EXPECT_NE(std::string(e.what()).find("'batch'"), std::string::npos) << e.what();
  }
  EXPECT_EQ(r.st(batch).num_allocs, asleep.num_allocs);
  EXPECT_EQ(r.st(batch).allocated_bytes.all.current, asleep.allocated_bytes.all.current);
  // A free is allowed and makes no device call, even one naming another stream.
  r.alloc->deallocate(a, s(7));
  r.alloc->deallocate(c);
  const sim_counters after = r.dev->counters();
  EXPECT_EQ(after.event_records, calls.event_records);
  EXPECT_EQ(after.event_syncs, calls.event_syncs);
  EXPECT_EQ(r.dev->calls(sim_op::map_chunk), maps);
  const memory_stats freed = r.st(batch);
  EXPECT_EQ(freed.allocations.all.current, 1u);
  EXPECT_EQ(freed.allocated_bytes.all.current, r.alloc->allocation_size(b));
  EXPECT_LT(freed.sleep.bytes_asleep, asleep.sleep.bytes_asleep);  // a's chunks need no map
  EXPECT_EQ(freed.sleep.bytes_asleep, 2 * MiB);
  EXPECT_THROW(r.alloc->deallocate(a), invalid_pointer);  // a double free is still one
  expect_stats_match_snapshot(*r.alloc);
  ASSERT_TRUE(r.alloc->wake(batch));
  EXPECT_EQ(r.st(batch).reserved_bytes.all.current, 2 * MiB);  // only b's chunk came back
  EXPECT_TRUE(holds(b, MiB, 3));
  r.alloc->record_stream(b, s(5));  // awake: allowed again
  void* d = r.alloc->allocate(KiB, s(3));
  r.alloc->deallocate(d);
  r.alloc->deallocate(b);
  r.alloc->end_allocate_to_pool(batch);
  expect_stats_match_snapshot(*r.alloc);
  expect_device_matches(*r.alloc, *r.dev);
}

TEST(pool_sleep, RefusesPoolsThatCannotSleepWithTheReason) {
  {
    rig r;
    EXPECT_THROW(r.alloc->sleep(default_pool), invalid_argument);
    pool_options g;
    g.name = "graphs";
    g.type = pool_type::graph;
    g.declares_capture = false;
    const pool_id graph = r.alloc->create_pool(g);
    try {
      r.alloc->sleep(graph);
      ADD_FAILURE() << "a graph pool slept";
    } catch (const invalid_argument& e) {
      EXPECT_NE(std::string(e.what()).find("graph pool"), std::string::npos) << e.what();
    }
    const pool_id t = r.tenant("t");
    r.alloc->release_pool(t);
    EXPECT_THROW(r.alloc->sleep(t), invalid_argument);
    EXPECT_THROW(r.alloc->sleep(99), invalid_argument);
    EXPECT_THROW(r.alloc->wake(99), invalid_argument);
    pool_options bad;
    bad.name = "g2";
    bad.type = pool_type::graph;
    bad.sleepable = true;
    EXPECT_THROW(r.alloc->create_pool(bad), invalid_argument);
  }
  {
    rig r(256 * MiB, "");  // fixed segments
    const pool_id t = r.tenant("fixed");
    void* p = r.alloc->allocate(MiB, s(1), t);
    try {
      r.alloc->sleep(t);
      ADD_FAILURE() << "a pool on fixed segments slept";
    } catch (const not_supported& e) {
      EXPECT_NE(std::string(e.what()).find("expandable_segments:1"), std::string::npos) << e.what();
    }
    EXPECT_FALSE(r.alloc->pools()[t].asleep);
    r.alloc->deallocate(p);
    pool_options o;
    o.name = "s";
    o.sleepable = true;
    EXPECT_THROW(r.alloc->create_pool(o), not_supported);
  }
}

TEST(pool_sleep, SleepTwiceAndWakeTwiceAreNoOps) {
  rig r;
  const pool_id t = r.tenant("t");
  void* p = r.alloc->allocate(MiB, s(1), t);
  EXPECT_FALSE(r.alloc->wake(t));
  EXPECT_TRUE(r.alloc->sleep(t));
  EXPECT_FALSE(r.alloc->sleep(t, sleep_mode::discard));
  EXPECT_TRUE(r.alloc->pools()[t].asleep);
  EXPECT_EQ(r.st(t).sleep.num_sleeps, 1u);
  EXPECT_TRUE(r.alloc->wake(t));
  EXPECT_FALSE(r.alloc->wake(t));
  EXPECT_EQ(r.st(t).sleep.num_wakes, 1u);
  r.alloc->deallocate(p);
}

TEST(pool_sleep, WaitsForItsOwnStreamsAndTheirEventsOnly) {
  rig r;
  const pool_id batch = r.tenant("batch");
  const pool_id crit = r.tenant("critical", 1);
  void* b1 = r.alloc->allocate(MiB, s(1), batch);
  void* b2 = r.alloc->allocate(MiB, s(2), batch);  // a second stream of the pool
  r.alloc->record_stream(b1, s(9));                // used on a stream of no pool
  void* b3 = r.alloc->allocate(MiB, s(1), batch);
  void* c1 = r.alloc->allocate(MiB, s(4), crit);
  r.dev->hold_stream(s(1));
  r.dev->hold_stream(s(2));
  r.dev->hold_stream(s(9));
  r.dev->hold_stream(s(4));  // the critical tenant's work must not be waited for
  r.dev->hold_stream(s(6));
  r.alloc->deallocate(b3, s(6));  // freed on another stream: pending until that stream is done
  EXPECT_EQ(r.st(batch).num_pending_blocks, 1u);
  const std::uint64_t device_syncs = r.dev->counters().device_syncs;
  ASSERT_TRUE(r.alloc->sleep(batch));
  EXPECT_FALSE(r.dev->is_held(s(1)));
  EXPECT_FALSE(r.dev->is_held(s(2)));
  EXPECT_FALSE(r.dev->is_held(s(9)));
  EXPECT_FALSE(r.dev->is_held(s(6)));
  EXPECT_TRUE(r.dev->is_held(s(4)));                        // never waited for
  EXPECT_EQ(r.dev->counters().device_syncs, device_syncs);  // no device-wide sync
  EXPECT_EQ(r.st(batch).num_pending_blocks, 0u);
  EXPECT_EQ(r.st(batch).allocations.all.current, 2u);
  r.dev->release_stream(s(4));
  ASSERT_TRUE(r.alloc->wake(batch));
  for (void* p : {b1, b2, c1}) r.alloc->deallocate(p);
  expect_stats_match_snapshot(*r.alloc);
}

TEST(pool_sleep, PendingBlocksCompleteBeforeTheSleep) {
  rig r;
  const pool_id batch = r.tenant("batch");
  void* a = r.alloc->allocate(3 * MiB, s(1), batch);
  void* b = r.alloc->allocate(3 * MiB, s(1), batch);
  r.dev->hold_stream(s(8));
  r.alloc->deallocate(a, s(8));  // pending: s(8) is still running
  EXPECT_EQ(r.st(batch).num_pending_blocks, 1u);
  ASSERT_TRUE(r.alloc->sleep(batch));
  EXPECT_FALSE(r.dev->is_held(s(8)));  // its event was waited for
  const memory_stats st = r.st(batch);
  EXPECT_EQ(st.num_pending_blocks, 0u);
  EXPECT_EQ(st.active_bytes.all.current, st.allocated_bytes.all.current);
  EXPECT_EQ(st.allocations.all.current, 1u);
  expect_stats_match_snapshot(*r.alloc);
  ASSERT_TRUE(r.alloc->wake(batch));
  r.alloc->deallocate(b);
  expect_stats_match_snapshot(*r.alloc);
}

TEST(pool_sleep, WakeReleasesOtherPoolsCacheUnderPressure) {
  rig r(64 * MiB);
  const pool_id batch = r.tenant("batch");
  const pool_id other = r.tenant("other", 5);  // even a higher priority's cache (no guarantee)
  std::vector<live> kept;
  for (unsigned i = 0; i < 4; ++i) {
    void* p = r.alloc->allocate(6 * MiB, s(1), batch);
    fill(p, 6 * MiB, i);
    kept.push_back(live{p, 6 * MiB, i});
  }
  ASSERT_TRUE(r.alloc->sleep(batch));
  std::vector<void*> filler;
  for (int i = 0; i < 15; ++i) filler.push_back(r.alloc->allocate(4 * MiB, s(2), other));
  for (void* p : filler) r.alloc->deallocate(p);  // cached by `other`, filling the device
  EXPECT_GE(r.st(other).reserved_bytes.all.current, 56 * MiB);
  ASSERT_TRUE(r.alloc->wake(batch));
  for (const live& l : kept) EXPECT_TRUE(holds(l.p, l.n, l.seed));
  EXPECT_LT(r.st(other).reserved_bytes.all.current, 56 * MiB);
  expect_stats_match_snapshot(*r.alloc);
  expect_device_matches(*r.alloc, *r.dev);
  for (const live& l : kept) r.alloc->deallocate(l.p);
}

TEST(pool_sleep, WakeThatCannotMapFailsNamingThePoolAndStaysAsleep) {
  rig r(64 * MiB);
  const pool_id batch = r.tenant("batch");
  const pool_id other = r.tenant("other");
  std::vector<live> kept;
  for (unsigned i = 0; i < 3; ++i) {
    void* p = r.alloc->allocate(8 * MiB, s(1), batch);
    fill(p, 8 * MiB, i + 40);
    kept.push_back(live{p, 8 * MiB, i + 40});
  }
  ASSERT_TRUE(r.alloc->sleep(batch));
  std::vector<void*> filler;
  for (int i = 0; i < 14; ++i) filler.push_back(r.alloc->allocate(4 * MiB, s(2), other));
  const memory_stats before = r.st(batch);
  try {
    r.alloc->wake(batch);
    ADD_FAILURE() << "woke without memory";
  } catch (const out_of_memory& e) {
    const std::string what = e.what();
    EXPECT_NE(what.find("cannot wake pool 'batch'"), std::string::npos) << what;
    EXPECT_EQ(e.info().pool, batch);
    EXPECT_EQ(e.info().requested_bytes, before.sleep.bytes_asleep);
  }
  EXPECT_TRUE(r.alloc->pools()[batch].asleep);
  const memory_stats after = r.st(batch);
  EXPECT_EQ(after.sleep.num_failed_wakes, 1u);
  EXPECT_EQ(after.reserved_bytes.all.current, 0u);
  EXPECT_EQ(after.sleep.bytes_offloaded, before.sleep.bytes_offloaded);
  EXPECT_EQ(r.st(other).allocations.all.current, 14u);  // nothing of `other` was touched
  expect_stats_match_snapshot(*r.alloc);
  expect_device_matches(*r.alloc, *r.dev);
  for (void* p : filler) r.alloc->deallocate(p);
  ASSERT_TRUE(r.alloc->wake(batch));
  for (const live& l : kept) EXPECT_TRUE(holds(l.p, l.n, l.seed));
  for (const live& l : kept) r.alloc->deallocate(l.p);
  expect_stats_match_snapshot(*r.alloc);
}

TEST(pool_sleep, SleepableLowerPoolSleepsForAHigherOneUnderPressure) {
  rig r(64 * MiB);
  std::vector<std::pair<sleep_notice, std::size_t>> told;
  const pool_id batch = r.tenant("batch", 0, true, sleep_mode::offload,
                                 [&](pool_id p, sleep_notice n, std::size_t bytes) {
                                   EXPECT_EQ(p, 1u);
                                   told.emplace_back(n, bytes);
                                   return true;
                                 });
  const pool_id crit = r.tenant("critical", 1);
  ASSERT_EQ(batch, 1u);
  std::vector<live> kept;
  for (unsigned i = 0; i < 6; ++i) {
    void* p = r.alloc->allocate(8 * MiB, s(1), batch);
    fill(p, 8 * MiB, i + 7);
    kept.push_back(live{p, 8 * MiB, i + 7});
  }
  // The critical tenant needs more than is left: the batch tenant falls asleep for it.
  std::vector<void*> mine;
  for (int i = 0; i < 10; ++i) mine.push_back(r.alloc->allocate(4 * MiB, s(2), crit));
  ASSERT_EQ(told.size(), 2u);
  EXPECT_EQ(told[0].first, sleep_notice::requested);
  EXPECT_EQ(told[1].first, sleep_notice::asleep);
  EXPECT_EQ(told[1].second, 48 * MiB);
  EXPECT_TRUE(r.alloc->pools()[batch].asleep);
  EXPECT_EQ(r.st(batch).sleep.num_pressure_sleeps, 1u);
  EXPECT_EQ(r.st(crit).num_ooms, 0u);
  EXPECT_EQ(r.alloc->stats().sleep.num_pressure_sleeps, 1u);
  expect_stats_match_snapshot(*r.alloc);
  // The pressure passes; the owner wakes its pool.
  for (void* p : mine) r.alloc->deallocate(p);
  ASSERT_TRUE(r.alloc->wake(batch));
  for (const live& l : kept) EXPECT_TRUE(holds(l.p, l.n, l.seed));
  for (const live& l : kept) r.alloc->deallocate(l.p);
  expect_stats_match_snapshot(*r.alloc);
  expect_device_matches(*r.alloc, *r.dev);
}

TEST(pool_sleep, CallbackThatRefusesKeepsThePoolAwake) {
  rig r(64 * MiB);
  std::vector<sleep_notice> told;
  const pool_id batch =
      r.tenant("batch", 0, true, sleep_mode::discard, [&](pool_id, sleep_notice n, std::size_t) {
        told.push_back(n);
        return false;
      });
  const pool_id crit = r.tenant("critical", 1);
  std::vector<void*> held;
  for (int i = 0; i < 7; ++i) held.push_back(r.alloc->allocate(8 * MiB, s(1), batch));
  EXPECT_THROW(r.alloc->allocate(16 * MiB, s(2), crit), out_of_memory);
  EXPECT_EQ(told, std::vector<sleep_notice>{sleep_notice::requested});
  EXPECT_FALSE(r.alloc->pools()[batch].asleep);
  // A pool of the same or a higher priority is never put to sleep for another.
  const pool_id peer = r.tenant("peer", 0);
  EXPECT_THROW(r.alloc->allocate(16 * MiB, s(3), peer), out_of_memory);
  EXPECT_EQ(told.size(), 1u);
  for (void* p : held) r.alloc->deallocate(p);
  expect_stats_match_snapshot(*r.alloc);
}

TEST(pool_sleep, DurationsAreTheModeledCostsOfItsCalls) {
  rig r(256 * MiB);
  const pool_id t = r.tenant("t");
  void* p = r.alloc->allocate(MiB, s(1), t);  // one 2 MiB chunk, 1 MiB live
  const device_cost_model m;
  const device_call_stats c0 = r.dev->call_stats();
  ASSERT_TRUE(r.alloc->sleep(t, sleep_mode::offload));
  const device_call_stats c1 = r.dev->call_stats();
  const std::uint64_t sync =
      m.cost_ns(device_call::event_record, 0) + m.cost_ns(device_call::event_sync, 0);
  // An event on the pool's stream, the pinned buffer, the copy and its wait, the unmap.
  const std::uint64_t expect_sleep =
      sync + m.cost_ns(device_call::host_alloc, MiB) + m.cost_ns(device_call::copy, MiB) + sync +
      m.cost_ns(device_call::chunk_unmap, 2 * MiB) +
      m.cost_ns(device_call::chunk_release, 2 * MiB) +
      (c1.calls_of(device_call::event_create) - c0.calls_of(device_call::event_create)) *
          m.cost_ns(device_call::event_create, 0);
  EXPECT_EQ(r.st(t).sleep.sleep_ns, expect_sleep);
  EXPECT_EQ(r.st(t).sleep.sleep_ns, c1.total_ns() - c0.total_ns());
  ASSERT_TRUE(r.alloc->wake(t));
  const device_call_stats c2 = r.dev->call_stats();
  const std::uint64_t expect_wake =
      m.cost_ns(device_call::chunk_create, 2 * MiB) + m.cost_ns(device_call::chunk_map, 2 * MiB) +
      m.cost_ns(device_call::chunk_access, 2 * MiB) + m.cost_ns(device_call::copy, MiB) + sync +
      m.cost_ns(device_call::host_free, MiB) + m.cost_ns(device_call::device_sync, 0);
  EXPECT_EQ(r.st(t).sleep.wake_ns, expect_wake);
  EXPECT_EQ(r.st(t).sleep.wake_ns, c2.total_ns() - c1.total_ns());
  EXPECT_EQ(c2.calls_of(device_call::copy) - c0.calls_of(device_call::copy), 2u);
  EXPECT_EQ(c2.implied_syncs - c1.implied_syncs, 1u);  // cuMemFreeHost's
  r.alloc->deallocate(p);
}

TEST(pool_sleep, ReleasingASleepingPoolNeedsItsBlocksFreed) {
  rig r;
  const pool_id t = r.tenant("t");
  void* p = r.alloc->allocate(3 * MiB, s(1), t);
  void* q = r.alloc->allocate(KiB, s(1), t);
  ASSERT_TRUE(r.alloc->sleep(t));
  try {
    r.alloc->release_pool(t);
    ADD_FAILURE() << "released with live blocks";
  } catch (const invalid_argument& e) {
    EXPECT_NE(std::string(e.what()).find("2 live block"), std::string::npos) << e.what();
  }
  EXPECT_TRUE(r.alloc->pools()[t].asleep);
  r.alloc->deallocate(p);
  r.alloc->deallocate(q);
  r.alloc->release_pool(t);  // its sleep ends with nothing to map; its ranges go
  EXPECT_FALSE(r.alloc->pools()[t].asleep);
  EXPECT_TRUE(r.alloc->pools()[t].released);
  r.alloc->empty_cache();
  EXPECT_EQ(r.dev->counters().live_ranges, 0u);
  EXPECT_EQ(r.dev->counters().live_chunks, 0u);
  EXPECT_EQ(r.dev->counters().host_bytes, 0u);
  expect_stats_match_snapshot(*r.alloc);
}

TEST(pool_sleep, TeardownOfASleepingPoolReturnsEverything) {
  rig r;
  const pool_id t = r.tenant("t");
  void* p = r.alloc->allocate(5 * MiB, s(1), t);
  (void)p;
  ASSERT_TRUE(r.alloc->sleep(t));
  EXPECT_GT(r.dev->counters().host_bytes, 0u);
  r.alloc.reset();
  const sim_counters c = r.dev->counters();
  EXPECT_EQ(c.live_chunks, 0u);
  EXPECT_EQ(c.live_ranges, 0u);
  EXPECT_EQ(c.live_host_allocs, 0u);
  EXPECT_EQ(c.host_bytes, 0u);
}

TEST(pool_sleep, CheckedModeFreesOfAsleepBlocksTouchNoMemory) {
  rig r(256 * MiB, "expandable_segments:1,debug:1");
  const pool_id t = r.tenant("t");
  void* p = r.alloc->allocate(MiB, s(1), t);
  void* q = r.alloc->allocate(MiB, s(1), t);
  fill(q, MiB, 5);
  ASSERT_TRUE(r.alloc->sleep(t));
  r.alloc->deallocate(p);  // poisoning it would write to unmapped memory
  EXPECT_THROW(r.alloc->deallocate(p), invalid_pointer);
  ASSERT_TRUE(r.alloc->wake(t));
  EXPECT_TRUE(holds(q, MiB, 5));
  r.alloc->deallocate(q);
  expect_stats_match_snapshot(*r.alloc);
}

TEST(pool_sleep, ConcurrentUseWhileAnotherThreadSleepsAndWakes) {
  rig r(512 * MiB, "expandable_segments:1", false);
  const pool_id a = r.tenant("awake");
  const pool_id b = r.tenant("sleepy");
  std::atomic<bool> stop{false};
  std::atomic<std::uint64_t> refused{0};
  std::atomic<std::uint64_t> ops{0};
  const auto worker = [&](pool_id pool, int stream, unsigned seed) {
    std::vector<void*> mine;
    unsigned x = seed;
    while (!stop.load()) {
      ops.fetch_add(1);
      x = x * 1103515245 + 12345;
      const std::size_t n = std::size_t{512} << (x >> 8) % 12;
      try {
        mine.push_back(r.alloc->allocate(n, s(stream), pool));
      } catch (const pool_asleep&) {
        refused.fetch_add(1);
      }
      if (mine.size() > 24 || (!mine.empty() && (x >> 4) % 3 == 0)) {
        const std::size_t i = (x >> 12) % mine.size();
        r.alloc->deallocate(mine[i], s((x >> 20) % 2 == 0 ? stream : stream + 1));
        mine.erase(mine.begin() + static_cast<std::ptrdiff_t>(i));
      }
    }
    for (void* p : mine) r.alloc->deallocate(p);
  };
  std::vector<std::thread> threads;
  threads.emplace_back(worker, a, 1, 1u);
  threads.emplace_back(worker, b, 3, 2u);
  threads.emplace_back(worker, b, 5, 3u);
  const auto let_them_run = [&] {  // a few hundred operations of the workers in between
    const std::uint64_t until = ops.load() + 300;
    for (int spins = 0; ops.load() < until && spins < 20000; ++spins) std::this_thread::yield();
  };
  for (int i = 0; i < 40; ++i) {
    let_them_run();
    r.alloc->sleep(b, i % 2 == 0 ? sleep_mode::offload : sleep_mode::discard);
    (void)r.alloc->stats();
    let_them_run();
    (void)r.alloc->snapshot();
    r.alloc->wake(b);
  }
  stop.store(true);
  for (std::thread& t : threads) t.join();
  r.alloc->process_events();
  EXPECT_GT(refused.load(), 0u);  // the workers did meet the pool asleep
  EXPECT_EQ(r.st(b).sleep.num_sleeps, 40u);
  EXPECT_EQ(r.st(b).sleep.num_wakes, 40u);
  EXPECT_EQ(r.st(b).allocations.all.current, 0u);
  expect_stats_match_snapshot(*r.alloc);
  expect_device_matches(*r.alloc, *r.dev);
}

}  // namespace
}  // namespace cachalot::testing
