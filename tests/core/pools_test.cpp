// Tenant pools and the pool API: routes, explicit pool allocations, limits (never exceeded,
// an error naming the pool, other pools untouched), guarantees (never taken by another pool),
// the reclaim order under pressure (lower priorities' caches, then their callbacks, then
// failure; a higher priority's cache only above its guarantee), exact per-pool stats and peaks
// under concurrency, the summary's pool section, and misuse.
#include <fmt/format.h>
#include <gtest/gtest.h>

#include <algorithm>
#include <atomic>
#include <memory>
#include <random>
#include <string>
#include <thread>
#include <vector>

#include "cachalot/allocator.hpp"
#include "cachalot/simulated_device.hpp"
#include "support/concurrent_checker.hpp"
#include "support/invariants.hpp"

namespace cachalot::testing {
namespace {

stream_t s(int i) {
  return reinterpret_cast<stream_t>(static_cast<std::uintptr_t>(0x7000 + i * 16));
}

struct rig {
  explicit rig(const std::string& conf, std::size_t capacity = GiB) {
    sim_options o;
    o.capacity = capacity;
    dev = std::make_shared<simulated_device>(o);
    alloc = std::make_unique<allocator>(config::parse(conf), dev);
  }
  pool_id tenant(const char* name, int priority, std::size_t limit = 0, std::size_t guarantee = 0,
                 reclaim_callback reclaim = {}) {
    pool_options o;
    o.name = name;
    o.priority = priority;
    o.limit = limit;
    o.guarantee = guarantee;
    o.reclaim = std::move(reclaim);
    return alloc->create_pool(o);
  }
  memory_stats st(pool_id p) const { return alloc->stats(p); }
  std::shared_ptr<simulated_device> dev;
  std::unique_ptr<allocator> alloc;
};

TEST(pools, RoutesTakeStreamsToPoolsMostRecentFirst) {
  rig r("");
  const pool_id a = r.tenant("a", 0);
  const pool_id b = r.tenant("b", 0);
  r.alloc->begin_allocate_to_pool(a, s(1));
  void* p1 = r.alloc->allocate(KiB, s(1));
  void* p2 = r.alloc->allocate(KiB, s(2));
  EXPECT_EQ(r.alloc->pool_of(p1), a);
  EXPECT_EQ(r.alloc->pool_of(p2), default_pool);
  r.alloc->begin_allocate_to_pool(b, [](stream_t st) { return st == s(1) || st == s(2); });
  void* p3 = r.alloc->allocate(KiB, s(1));
  EXPECT_EQ(r.alloc->pool_of(p3), b);
  r.alloc->end_allocate_to_pool(b);
  void* p4 = r.alloc->allocate(KiB, s(1));
  EXPECT_EQ(r.alloc->pool_of(p4), a);
  void* p5 = r.alloc->allocate(KiB, s(1), b);  // explicit, whatever the routes say
  EXPECT_EQ(r.alloc->pool_of(p5), b);
  r.alloc->end_allocate_to_pool(a);
  void* p6 = r.alloc->allocate(KiB, s(1));
  EXPECT_EQ(r.alloc->pool_of(p6), default_pool);
  // Pools never share blocks: a block freed in one is not reused by another.
  r.alloc->deallocate(p1);
  void* p7 = r.alloc->allocate(KiB, s(1));
  EXPECT_NE(p7, p1);
  for (void* p : {p2, p3, p4, p5, p6, p7}) r.alloc->deallocate(p);
  EXPECT_EQ(r.st(a).num_allocs, 2u);
  EXPECT_EQ(r.st(b).num_allocs, 2u);
  EXPECT_EQ(r.st(default_pool).num_allocs, 3u);
  EXPECT_EQ(r.st(a).num_streams, 1u);
  expect_stats_match_snapshot(*r.alloc);
}

TEST(pools, ALimitIsNeverExceededAndItsErrorNamesThePool) {
  rig r("gc_threshold:0");
  void* other = r.alloc->allocate(10 * MiB, s(2));  // the default pool's cache
  r.alloc->deallocate(other);
  const pool_id batch = r.tenant("batch", 0, 64 * MiB);
  r.alloc->begin_allocate_to_pool(batch, s(1));
  void* a = r.alloc->allocate(30 * MiB, s(1));
  void* b = r.alloc->allocate(32 * MiB, s(1));  // 62 MiB reserved
  void* c = r.alloc->allocate(MiB, s(1));       // a 2 MiB small segment: exactly the limit
  const memory_stats before = r.alloc->stats(default_pool);
  try {
    (void)r.alloc->allocate(4 * MiB, s(1));  // a 20 MiB segment would not fit
    ADD_FAILURE() << "the pool grew over its limit";
  } catch (const out_of_memory& e) {
    EXPECT_EQ(e.info().pool, batch);
    EXPECT_EQ(e.info().pool_limit, 64 * MiB);
    EXPECT_EQ(e.info().pool_reserved, 64 * MiB);
    const std::string msg = e.what();
    EXPECT_NE(msg.find("pool 'batch'"), std::string::npos) << msg;
    EXPECT_NE(msg.find("limit 64.00 MiB"), std::string::npos) << msg;
  }
  const memory_stats after = r.alloc->stats(default_pool);
  EXPECT_EQ(after.segments.all.current, before.segments.all.current) << "another pool was touched";
  EXPECT_EQ(after.num_segment_frees, 0u);
  const memory_stats bs = r.st(batch);
  EXPECT_EQ(bs.reserved_bytes.all.peak, 64 * MiB);
  EXPECT_EQ(bs.num_ooms, 1u);
  EXPECT_EQ(after.num_ooms, 0u);
  EXPECT_EQ(r.alloc->stats().num_ooms, 1u);
  for (void* p : {a, b, c}) r.alloc->deallocate(p);
  r.alloc->end_allocate_to_pool(batch);
  expect_stats_match_snapshot(*r.alloc);
}

TEST(pools, AGuaranteeIsNeverTakenByAnotherPool) {
  rig r("memory_limit:256MiB,gc_threshold:0");
  const pool_id critical = r.tenant("critical", 1, 0, 128 * MiB);
  std::vector<void*> batch;
  try {
    for (;;) batch.push_back(r.alloc->allocate(20 * MiB, s(2)));  // the default pool
  } catch (const out_of_memory& e) {
    EXPECT_NE(std::string(e.what()).find("guarantees"), std::string::npos) << e.what();
  }
  EXPECT_EQ(batch.size(), 6u);  // 120 MiB: a seventh segment would enter the 128 MiB
  std::vector<void*> mine;
  for (int i = 0; i < 6; ++i) mine.push_back(r.alloc->allocate(20 * MiB, s(1), critical));
  mine.push_back(r.alloc->allocate(MiB, s(1), critical));  // 122 MiB; the memory limit is full
  EXPECT_EQ(r.st(critical).reserved_bytes.all.current, 6 * 20 * MiB + 2 * MiB);
  for (void* p : batch) r.alloc->deallocate(p);
  for (void* p : mine) r.alloc->deallocate(p);
  EXPECT_THROW(r.tenant("too much", 0, 0, 129 * MiB), invalid_argument);
  expect_stats_match_snapshot(*r.alloc);
}

TEST(pools, PressureTakesLowerCachesThenCallsBackThenFails) {
  rig r("memory_limit:200MiB,gc_threshold:0");
  std::vector<void*> low_live;
  int calls = 0;
  allocator* a = r.alloc.get();
  const pool_id low = r.tenant("low", -1, 0, 0, [&](pool_id p, std::size_t bytes) -> std::size_t {
    ++calls;
    EXPECT_EQ(bytes, 40 * MiB);
    EXPECT_NE(p, default_pool);
    if (low_live.empty()) return 0;
    a->deallocate(low_live.back());  // e.g. drop KV-cache pages
    low_live.pop_back();
    return 40 * MiB;
  });
  const pool_id high = r.tenant("high", 1);
  void* cached = r.alloc->allocate(40 * MiB, s(1), low);
  low_live.push_back(r.alloc->allocate(40 * MiB, s(1), low));
  low_live.push_back(r.alloc->allocate(40 * MiB, s(1), low));
  r.alloc->deallocate(cached);                             // low: 120 reserved, 40 cached
  r.alloc->deallocate(r.alloc->allocate(40 * MiB, s(2)));  // default: 40 cached
  std::vector<void*> hp;
  hp.push_back(r.alloc->allocate(40 * MiB, s(3), high));  // 200 MiB: the limit
  hp.push_back(r.alloc->allocate(40 * MiB, s(3), high));  // low's cache goes first
  EXPECT_EQ(r.st(low).num_segment_frees, 1u);
  EXPECT_EQ(r.st(default_pool).segments.all.current, 1u);
  EXPECT_EQ(calls, 0);
  hp.push_back(r.alloc->allocate(40 * MiB, s(3), high));  // then the default pool's (prio 0)
  EXPECT_EQ(r.st(default_pool).segments.all.current, 0u);
  EXPECT_EQ(calls, 0);
  hp.push_back(r.alloc->allocate(40 * MiB, s(3), high));  // then low's callback
  EXPECT_EQ(calls, 1);
  hp.push_back(r.alloc->allocate(40 * MiB, s(3), high));
  EXPECT_EQ(calls, 2);
  EXPECT_THROW((void)r.alloc->allocate(40 * MiB, s(3), high), out_of_memory);  // nothing left
  EXPECT_EQ(calls, 3);
  const memory_stats ls = r.st(low);
  EXPECT_EQ(ls.reserved_bytes.all.current, 0u);
  EXPECT_EQ(ls.reserved_bytes.all.peak, 120 * MiB);
  EXPECT_EQ(ls.num_segment_frees, 3u);
  EXPECT_EQ(ls.num_ooms, 0u);
  const memory_stats hs = r.st(high);
  EXPECT_EQ(hs.reserved_bytes.all.current, 200 * MiB);
  EXPECT_EQ(hs.num_allocs, 5u);
  EXPECT_EQ(hs.num_ooms, 1u);
  EXPECT_EQ(hs.num_alloc_retries, 5u);
  EXPECT_EQ(r.st(default_pool).num_segment_frees, 1u);
  EXPECT_EQ(r.alloc->stats().num_ooms, 1u);
  EXPECT_EQ(r.alloc->stats().reserved_bytes.all.peak, 200 * MiB);
  for (void* p : hp) r.alloc->deallocate(p);
  expect_stats_match_snapshot(*r.alloc);
  expect_device_matches(*r.alloc, *r.dev);
}

TEST(pools, AnAllocationInsideAReclaimCallbackCallsNoCallback) {
  rig r("memory_limit:80MiB,gc_threshold:0");
  allocator* a = r.alloc.get();
  int calls = 0;
  pool_id mid = default_pool;
  const pool_id low = r.tenant("low", -1, 0, 0, [&](pool_id, std::size_t) -> std::size_t {
    ++calls;  // allocating in `mid` meets pressure too, which would call this again
    EXPECT_THROW((void)a->allocate(40 * MiB, s(9), mid), out_of_memory);
    return 0;
  });
  mid = r.tenant("mid", 0);
  const pool_id high = r.tenant("high", 1);
  void* p = r.alloc->allocate(40 * MiB, s(1), low);
  void* q = r.alloc->allocate(40 * MiB, s(1), low);
  EXPECT_THROW((void)r.alloc->allocate(40 * MiB, s(2), high), out_of_memory);
  EXPECT_EQ(calls, 1);
  r.alloc->deallocate(p);
  r.alloc->deallocate(q);
  expect_stats_match_snapshot(*r.alloc);
}

TEST(pools, ALowerPriorityTakesAHigherCacheOnlyAboveItsGuarantee) {
  rig r("memory_limit:200MiB,gc_threshold:0");
  const pool_id high = r.tenant("high", 1, 0, 80 * MiB);
  std::vector<void*> hp;
  for (int i = 0; i < 3; ++i) hp.push_back(r.alloc->allocate(40 * MiB, s(1), high));
  for (void* p : hp) r.alloc->deallocate(p);  // 120 MiB cached, 80 of it guaranteed
  std::vector<void*> low;
  low.push_back(r.alloc->allocate(40 * MiB, s(2)));
  low.push_back(r.alloc->allocate(40 * MiB, s(2)));  // 200 MiB reserved
  low.push_back(r.alloc->allocate(40 * MiB, s(2)));  // takes 40 MiB of high's cache
  EXPECT_EQ(r.st(high).reserved_bytes.all.current, 80 * MiB);
  EXPECT_THROW((void)r.alloc->allocate(40 * MiB, s(2)), out_of_memory);  // never the guarantee
  EXPECT_EQ(r.st(high).reserved_bytes.all.current, 80 * MiB);
  hp.clear();
  hp.push_back(r.alloc->allocate(40 * MiB, s(1), high));  // high still has its 80 MiB
  hp.push_back(r.alloc->allocate(40 * MiB, s(1), high));
  EXPECT_EQ(r.st(high).num_segment_allocs, 3u);
  for (void* p : hp) r.alloc->deallocate(p);
  for (void* p : low) r.alloc->deallocate(p);
  expect_stats_match_snapshot(*r.alloc);
}

TEST(pools, LimitsAndGuaranteesHoldUnderConcurrency) {
  rig r("memory_limit:512MiB,gc_threshold:0", 2 * GiB);
  const pool_id guaranteed = r.tenant("guaranteed", 1, 0, 192 * MiB);
  const pool_id limited = r.tenant("limited", 0, 160 * MiB);
  std::atomic<bool> stop{false};
  std::atomic<int> guaranteed_ooms{0};
  std::vector<std::thread> hammers;
  for (int t = 0; t < 3; ++t) {  // the default and the limited pool push against the limit
    hammers.emplace_back([&, t] {
      std::mt19937_64 rng(static_cast<std::uint64_t>(t));
      std::vector<void*> live;
      const pool_id target = t == 0 ? limited : default_pool;
      while (!stop.load()) {
        try {
          live.push_back(r.alloc->allocate((1 + rng() % 24) * MiB, s(10 + t), target));
        } catch (const out_of_memory&) {
        }
        if (live.size() > 8 || (!live.empty() && rng() % 3 == 0)) {
          const std::size_t k = rng() % live.size();
          r.alloc->deallocate(live[k]);
          live.erase(live.begin() + static_cast<std::ptrdiff_t>(k));
        }
        if (rng() % 16 == 0) r.alloc->trim(0);
      }
      for (void* p : live) r.alloc->deallocate(p);
    });
  }
  std::vector<void*> mine;
  for (int round = 0; round < 20; ++round) {  // the guaranteed pool takes all of it, repeatedly
    for (int i = 0; i < 12; ++i) {
      try {
        mine.push_back(r.alloc->allocate(16 * MiB, s(1), guaranteed));
      } catch (const out_of_memory&) {
        ++guaranteed_ooms;
      }
    }
    for (void* p : mine) r.alloc->deallocate(p);
    mine.clear();
    r.alloc->trim(0);
  }
  stop = true;
  for (std::thread& t : hammers) t.join();
  EXPECT_EQ(guaranteed_ooms.load(), 0);
  EXPECT_LE(r.st(limited).reserved_bytes.all.peak, 160 * MiB);
  EXPECT_LE(r.alloc->stats().reserved_bytes.all.peak, 512 * MiB);
  expect_stats_match_snapshot(*r.alloc);
  expect_device_matches(*r.alloc, *r.dev);
}

TEST(pools, PerPoolPeaksAreExactUnderConcurrency) {
  rig r("", 8 * GiB);
  constexpr int threads = 4;
  std::vector<pool_id> ids;
  for (int t = 0; t < threads; ++t) {
    // fmt, not "t" + std::to_string(t): GCC 12 at -O3 reports that concatenation as an
    // overlapping memcpy (-Werror=restrict, GCC bug 105651), which broke the Release build.
    ids.push_back(r.tenant(fmt::format("t{}", t).c_str(), 0));
    r.alloc->begin_allocate_to_pool(ids.back(), s(20 + t));
  }
  std::vector<std::thread> workers;
  for (int t = 0; t < threads; ++t) {
    workers.emplace_back([&, t] {
      // Thread t alone uses pool t: its live bytes peak at exactly (t + 2) * 8 blocks.
      const std::size_t size = static_cast<std::size_t>(64 + 32 * t) * KiB;
      for (int round = 0; round < 200; ++round) {
        std::vector<void*> live;
        const int n = (round % 7 == 3) ? (t + 2) * 8 : 1 + round % ((t + 2) * 8);
        for (int i = 0; i < n; ++i) live.push_back(r.alloc->allocate(size, s(20 + t)));
        for (void* p : live) r.alloc->deallocate(p);
      }
    });
  }
  for (std::thread& w : workers) w.join();
  for (int t = 0; t < threads; ++t) {
    const std::size_t size = static_cast<std::size_t>(64 + 32 * t) * KiB;
    const memory_stats st = r.st(ids[static_cast<std::size_t>(t)]);
    EXPECT_EQ(st.allocated_bytes.all.peak, static_cast<std::uint64_t>((t + 2) * 8) * size) << t;
    EXPECT_EQ(st.allocations.all.peak, static_cast<std::uint64_t>((t + 2) * 8)) << t;
    EXPECT_EQ(st.allocated_bytes.all.current, 0u);
  }
  expect_stats_match_snapshot(*r.alloc);
}

TEST(pools, ReleasedTenantPoolsReturnTheirMemoryAndKeepTheirStats) {
  rig r("");
  const pool_id t = r.tenant("t", 0);
  void* live = r.alloc->allocate(12 * MiB, s(1), t);
  r.alloc->deallocate(r.alloc->allocate(30 * MiB, s(1), t));
  r.alloc->release_pool(t);  // the free 30 MiB segment goes now, the live one later
  EXPECT_EQ(r.st(t).reserved_bytes.all.current, 12 * MiB);
  EXPECT_EQ(r.dev->counters().live_segments, 1u);
  r.alloc->deallocate(live);
  r.alloc->deallocate(r.alloc->allocate(1 * GiB - 64 * MiB, s(2)));  // a miss drains it
  EXPECT_EQ(r.st(t).reserved_bytes.all.current, 0u);
  EXPECT_EQ(r.st(t).num_allocs, 2u);
  EXPECT_EQ(r.alloc->pools()[t].references, 0u);
  expect_stats_match_snapshot(*r.alloc);
}

TEST(pools, CumulativeCountersNeverGoBackWhenAPoolRetires) {
  // A retired pool's stream states leave it: every cumulative counter they held must stay in
  // the pool's stats and the allocator's (issue 18: chunk maps fell from 4 to 0).
  for (const char* conf : {"expandable_segments:1", "max_split_size:24MiB"}) {
    SCOPED_TRACE(conf);
    rig r(conf);
    const pool_id t = r.tenant("t", 0);
    void* big = r.alloc->allocate(40 * MiB, s(1), t);  // oversize with max_split_size
    void* small = r.alloc->allocate(KiB, s(1), t);
    r.dev->hold_stream(s(2));
    r.alloc->record_stream(small, s(2));
    r.alloc->deallocate(small);  // deferred: waits for s(2)
    r.dev->release_stream(s(2));
    r.alloc->process_events();
    r.alloc->deallocate(big);
    const memory_stats before = r.alloc->stats();
    const memory_stats pool_before = r.st(t);
    EXPECT_GT(pool_before.num_deferred_frees, 0u);
    EXPECT_GT(pool_before.num_chunk_maps + pool_before.num_oversize_allocs, 0u);
    r.alloc->release_pool(t);  // nothing live: its memory goes back and it retires at once
    const memory_stats after = r.alloc->stats();
    const memory_stats pool_after = r.st(t);
    EXPECT_EQ(pool_after.num_streams, 0u) << "the pool did not retire";
    EXPECT_EQ(pool_after.segments.all.current, 0u);
    EXPECT_EQ(detail_cc::check_pair(before, after, false, true), "");
    EXPECT_EQ(detail_cc::check_pair(pool_before, pool_after, false, false), "");
    EXPECT_EQ(pool_after.num_chunk_maps, pool_before.num_chunk_maps);
    EXPECT_EQ(pool_after.num_chunk_unmaps,
              pool_before.num_chunk_unmaps + after.num_chunk_unmaps - before.num_chunk_unmaps);
    // The stream's state serves another pool from zero; the retired pool keeps its counts.
    const pool_id u = r.tenant("u", 0);
    r.alloc->deallocate(r.alloc->allocate(KiB, s(1), u));
    EXPECT_EQ(r.st(u).num_allocs, 1u);
    EXPECT_EQ(r.st(t).num_allocs, pool_before.num_allocs);
    EXPECT_EQ(detail_cc::check_pair(pool_after, r.st(t), false, false), "");
    expect_stats_match_snapshot(*r.alloc);
    expect_device_matches(*r.alloc, *r.dev);
  }
}

TEST(pools, NumStreamsCountsStreamsNotPoolStates) {
  rig r("");
  const pool_id t = r.tenant("t", 0);
  void* a = r.alloc->allocate(KiB, s(1));
  void* b = r.alloc->allocate(KiB, s(1), t);  // the same stream in a second pool
  void* c = r.alloc->allocate(KiB, s(2), t);
  EXPECT_EQ(r.alloc->stats().num_streams, 2u);
  EXPECT_EQ(r.st(t).num_streams, 2u);
  EXPECT_EQ(r.st(default_pool).num_streams, 1u);
  for (void* p : {a, b, c}) r.alloc->deallocate(p);
  r.alloc->release_pool(t);  // retires: its states leave it, the streams stay seen
  EXPECT_EQ(r.st(t).num_streams, 0u);
  EXPECT_EQ(r.alloc->stats().num_streams, 2u);
  expect_stats_match_snapshot(*r.alloc);
}

TEST(pools, AGuaranteeHoldsWhenSegmentsAreCarvedFromTheReserve) {
  // Growth carves the reserve first: a carve must leave other pools' guarantees as much room
  // as a device allocation does (issue 18: the guaranteed pool was refused its first 20 MiB).
  rig r("memory_limit:64MiB,reserve:64MiB,gc_threshold:0");
  const pool_id guaranteed = r.tenant("guaranteed", 0, 0, 32 * MiB);
  const pool_id other = r.tenant("other", 1);  // a higher priority changes nothing
  void* o1 = r.alloc->allocate(20 * MiB, s(1), other);
  EXPECT_THROW((void)r.alloc->allocate(20 * MiB, s(1), other), out_of_memory);  // 40 + 32 > 64
  EXPECT_THROW((void)r.alloc->allocate(20 * MiB, s(3)), out_of_memory);         // the default pool
  void* g1 = r.alloc->allocate(20 * MiB, s(2), guaranteed);
  void* g2 = r.alloc->allocate(20 * MiB, s(2), guaranteed);  // beyond its guarantee: room is left
  EXPECT_EQ(r.st(guaranteed).reserved_bytes.all.current, 40 * MiB);
  EXPECT_EQ(r.st(other).reserved_bytes.all.peak, 20 * MiB);
  EXPECT_EQ(r.dev->counters().segment_allocs, 1u) << "everything carved from the reserve";
  for (void* p : {o1, g1, g2}) r.alloc->deallocate(p);
  expect_stats_match_snapshot(*r.alloc);
}

TEST(pools, AReclaimCallbackInsideAnOomRetrySeesOnlyCachalotErrors) {
  // The retry the out-of-memory callback asks for calls the reclaim callbacks again; an
  // allocation they make that fails must fail with out_of_memory, never with the engine's
  // private retry signal (issue 18: std::terminate in a noexcept callback).
  rig r("memory_limit:80MiB,gc_threshold:0");
  allocator* a = r.alloc.get();
  int calls = 0, ooms = 0, others = 0;
  pool_id low = default_pool;
  low = r.tenant("low", -1, 0, 0, [&](pool_id, std::size_t) -> std::size_t {
    ++calls;
    try {
      (void)a->allocate(40 * MiB, s(9), low);
      ADD_FAILURE() << "allocated over the limit";
    } catch (const out_of_memory&) {
      ++ooms;
    } catch (...) {
      ++others;
    }
    return 0;
  });
  const pool_id high = r.tenant("high", 1);
  void* p = r.alloc->allocate(40 * MiB, s(1), low);
  void* q = r.alloc->allocate(40 * MiB, s(1), low);
  int retries_asked = 0;
  a->set_oom_callback([&](std::size_t, stream_t st) { return st == s(2) && ++retries_asked == 1; },
                      1);
  EXPECT_THROW((void)r.alloc->allocate(40 * MiB, s(2), high), out_of_memory);
  EXPECT_EQ(retries_asked, 1);
  EXPECT_EQ(calls, 2);  // the first pass and the retry
  EXPECT_EQ(ooms, 2);
  EXPECT_EQ(others, 0);
  r.alloc->deallocate(p);
  r.alloc->deallocate(q);
  expect_stats_match_snapshot(*r.alloc);
}

/// A reclaim callback's work: frees the last of `live` (40 MiB blocks); the bytes freed.
std::size_t free_last(allocator& a, std::vector<void*>& live) {
  if (live.empty()) return 0;
  a.deallocate(live.back());
  live.pop_back();
  return 40 * MiB;
}

TEST(pools, AReclaimCallbackOfOneAllocatorLetsAnotherRunItsOwn) {
  // An allocator's reclaim callback that moves work to another allocator under pressure: the
  // second allocator's own reclaim callbacks still run (only the first one's are suspended).
  rig ra("memory_limit:80MiB,gc_threshold:0");
  rig rb("memory_limit:80MiB,gc_threshold:0");
  std::vector<void*> b_live;
  int b_calls = 0;
  const pool_id b_low = rb.tenant("low", -1, 0, 0, [&](pool_id, std::size_t) -> std::size_t {
    ++b_calls;
    return free_last(*rb.alloc, b_live);
  });
  const pool_id b_high = rb.tenant("high", 1);
  for (int i = 0; i < 2; ++i) b_live.push_back(rb.alloc->allocate(40 * MiB, s(1), b_low));
  std::vector<void*> a_live;
  void* moved = nullptr;
  int a_calls = 0;
  const pool_id a_low = ra.tenant("low", -1, 0, 0, [&](pool_id, std::size_t) -> std::size_t {
    ++a_calls;
    try {
      moved = rb.alloc->allocate(40 * MiB, s(3), b_high);  // b is full: b must reclaim
    } catch (const out_of_memory&) {
    }
    return free_last(*ra.alloc, a_live);
  });
  const pool_id a_high = ra.tenant("high", 1);
  for (int i = 0; i < 2; ++i) a_live.push_back(ra.alloc->allocate(40 * MiB, s(1), a_low));
  void* p = ra.alloc->allocate(40 * MiB, s(4), a_high);
  EXPECT_EQ(a_calls, 1);
  EXPECT_EQ(b_calls, 1);
  EXPECT_NE(moved, nullptr);
  ra.alloc->deallocate(p);
  for (void* x : a_live) ra.alloc->deallocate(x);
  for (void* x : b_live) rb.alloc->deallocate(x);
  if (moved != nullptr) rb.alloc->deallocate(moved);
  expect_stats_match_snapshot(*ra.alloc);
  expect_stats_match_snapshot(*rb.alloc);
}

TEST(pools, TheSummaryHasAPoolSection) {
  rig r("");
  const pool_id t = r.tenant("inference", 2, 4 * GiB, GiB / 2);
  void* p = r.alloc->allocate(5 * MiB, s(1), t);
  const std::string text = r.alloc->memory_summary();
  for (const char* part : {"Memory pools", "inference", "tenant", "4.00 GiB", "512.00 MiB",
                           "default", "20.00 MiB", "5.00 MiB"}) {
    EXPECT_NE(text.find(part), std::string::npos) << part << "\n" << text;
  }
  r.alloc->deallocate(p);
}

TEST(pools, MisuseIsRejectedAndChangesNothing) {
  rig r("memory_limit:1GiB");
  const pool_id t = r.tenant("t", 0);
  const memory_stats before = r.alloc->stats();
  EXPECT_THROW((void)r.alloc->stats(99), invalid_argument);
  EXPECT_THROW((void)r.alloc->allocate(KiB, s(1), 99), invalid_argument);
  EXPECT_THROW(r.alloc->begin_allocate_to_pool(99, s(1)), invalid_argument);
  EXPECT_THROW(r.alloc->begin_allocate_to_pool(t, stream_filter{}), invalid_argument);
  EXPECT_THROW(r.alloc->end_allocate_to_pool(t), invalid_argument);  // no route
  EXPECT_THROW(r.alloc->retain_pool(99), invalid_argument);
  EXPECT_THROW(r.alloc->release_pool(default_pool), invalid_argument);
  EXPECT_THROW(r.tenant("bad", 0, MiB, 2 * MiB), invalid_argument);  // guarantee over limit
  EXPECT_THROW(r.tenant("bad", 0, 0, 2 * GiB), invalid_argument);    // over the allocator's
  int x = 0;
  EXPECT_THROW((void)r.alloc->pool_of(&x), invalid_pointer);
  r.alloc->release_pool(t);
  EXPECT_THROW(r.alloc->release_pool(t), invalid_argument);
  EXPECT_THROW(r.alloc->retain_pool(t), invalid_argument);
  const memory_stats after = r.alloc->stats();
  EXPECT_EQ(after.num_allocs, before.num_allocs);
  EXPECT_EQ(after.reserved_bytes.all.current, before.reserved_bytes.all.current);
  EXPECT_EQ(r.alloc->pools().size(), 2u);
}

}  // namespace
}  // namespace cachalot::testing
