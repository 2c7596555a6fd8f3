// The thread cache (detail/thread_cache.hpp): blocks freed into a thread's lane are free in the
// stats and come back to that thread; several threads on one stream keep every invariant;
// threads that exit leave nothing unaccounted; empty_cache, trim and the out-of-memory path
// take back what lanes hold, from any thread; an allocator destroyed while a thread still has
// blocks in its lanes is no hazard; no reader sees a block a lane evicts counted as allocated;
// a lane drained while cold comes back; a lane whose frees are never taken back goes cold; the
// config keys switch it off and size it.
#include <gtest/gtest.h>

#include <atomic>
#include <barrier>
#include <memory>
#include <mutex>
#include <random>
#include <thread>
#include <vector>

#include "cachalot/allocator.hpp"
#include "cachalot/simulated_device.hpp"
#include "detail/thread_cache.hpp"
#include "support/invariants.hpp"

namespace cachalot::testing {
namespace {

stream_t s(int i) {
  return reinterpret_cast<stream_t>(static_cast<std::uintptr_t>(i * 64));
}

std::shared_ptr<simulated_device> device(std::size_t capacity = GiB) {
  sim_options o;
  o.capacity = capacity;
  o.host_backing = false;
  return std::make_shared<simulated_device>(o);
}

TEST(thread_cache, AFreedBlockComesBackToItsThreadAndIsFreeInTheStats) {
  auto dev = device();
  allocator a(config{}, dev);
  void* p = a.allocate(3000, s(1));
  a.deallocate(p);
  EXPECT_EQ(a.allocate(3000, s(1)), p);  // from the lane: no stream lock, same block
  a.deallocate(p);
  void* q = a.allocate(3000, s(1));
  EXPECT_EQ(q, p);
  const memory_stats st = a.stats();  // (drains nothing: q is live)
  EXPECT_EQ(st.allocated_bytes.all.current, 3072u);
  EXPECT_EQ(st.requested_bytes.all.current, 3000u);
  EXPECT_EQ(st.num_allocs, 3u);
  EXPECT_EQ(st.num_frees, 2u);
  // Exact peaks: a lane's block reused is never counted twice.
  EXPECT_EQ(st.allocated_bytes.all.peak, 3072u);
  EXPECT_EQ(st.allocations.all.peak, 1u);
  EXPECT_EQ(st.allocated_bytes.all.allocated, 3u * 3072);
  EXPECT_EQ(st.allocated_bytes.all.freed, 2u * 3072);
  a.deallocate(q);
  const memory_stats end = a.stats();
  EXPECT_EQ(end.allocated_bytes.all.current, 0u);
  EXPECT_EQ(end.inactive_split_bytes.all.current, 0u);  // drained: the segment is whole again
  EXPECT_EQ(end.num_free_blocks, 1u);
  expect_stats_match_snapshot(a);
  expect_device_matches(a, *dev);
}

TEST(thread_cache, ADoubleFreeOfACachedBlockIsRejected) {
  allocator a(config{}, device());
  void* p = a.allocate(KiB, s(1));
  a.deallocate(p);  // into the lane
  EXPECT_THROW(a.deallocate(p), invalid_pointer);
  EXPECT_THROW(a.record_stream(p, s(2)), invalid_pointer);
  EXPECT_THROW((void)a.allocation_size(p), invalid_pointer);
  EXPECT_FALSE(a.owns(p));
  EXPECT_EQ(a.stats().num_frees, 1u);
  expect_stats_match_snapshot(a);
}

TEST(thread_cache, OtherStreamsAndRecordedStreamsNeverEnterALane) {
  auto dev = device();
  allocator a(config{}, dev);
  void* p = a.allocate(KiB, s(1));
  a.record_stream(p, s(2));
  dev->hold_stream(s(2));
  a.deallocate(p);  // waits for stream 2: pending, never in a lane
  EXPECT_EQ(a.stats().num_pending_blocks, 1u);
  EXPECT_NE(a.allocate(KiB, s(1)), p);
  void* q = a.allocate(KiB, s(1));
  a.deallocate(q, s(3));  // last used on stream 3: waits for its event, not in a lane
  dev->release_stream(s(2));
  a.process_events();
  expect_stats_match_snapshot(a, true);
}

TEST(thread_cache, SwitchedOffAFreeGoesStraightBackToTheStream) {
  allocator a(config::parse("backend:simulated,capacity:1GiB,thread_cache:0"));
  EXPECT_EQ(a.get_config().thread_cache, 0u);
  void* p = a.allocate(KiB, s(1));
  void* q = a.allocate(KiB, s(1));
  a.deallocate(p);
  a.deallocate(q);
  // Without lanes p and q coalesce at once; the next 2 KiB request takes their space.
  EXPECT_EQ(a.allocate(2 * KiB, s(1)), p);
  expect_stats_match_snapshot(a);
}

TEST(thread_cache, BlocksAboveTheMaximumSizeSkipTheLanes) {
  allocator a(config::parse("backend:simulated,capacity:1GiB,thread_cache_max_size:4KiB"));
  void* big = a.allocate(8 * KiB, s(1));
  void* after = a.allocate(8 * KiB, s(1));
  a.deallocate(big);  // 8 KiB > 4 KiB: freed into the stream, splittable again
  void* half = a.allocate(4 * KiB, s(1));
  EXPECT_EQ(half, big);
  a.deallocate(half);
  a.deallocate(after);
  expect_stats_match_snapshot(a);
}

TEST(thread_cache, ThreadsThatExitLeaveExactStats) {
  auto dev = device();
  allocator a(config{}, dev);
  std::vector<std::thread> threads;
  for (int t = 0; t < 6; ++t) {
    threads.emplace_back([&a, t] {
      std::vector<void*> mine;
      for (int i = 0; i < 40; ++i) mine.push_back(a.allocate(512 * (1 + (i + t) % 9), s(1)));
      for (void* p : mine) a.deallocate(p);  // the first 16 or so stay in this thread's lane
    });
  }
  for (auto& t : threads) t.join();
  const memory_stats st = a.stats();
  EXPECT_EQ(st.allocated_bytes.all.current, 0u);
  EXPECT_EQ(st.allocations.all.current, 0u);
  EXPECT_EQ(st.num_allocs, 240u);
  EXPECT_EQ(st.num_frees, 240u);
  expect_stats_match_snapshot(a);
  a.empty_cache();
  EXPECT_EQ(a.stats().reserved_bytes.all.current, 0u);
  expect_device_matches(a, *dev);
}

TEST(thread_cache, EmptyCacheAndTrimFromAnotherThreadTakeBackWhatLanesHold) {
  // Four threads on one stream allocate, then (no growth after this point, which would drain
  // the stream's lanes) free all but one block each into their lanes and stay alive while the
  // main thread empties the cache: reserved memory drops to the segments of live blocks.
  auto dev = device();
  allocator a(config{}, dev);
  constexpr int threads = 4;
  std::barrier sync(threads + 1);
  std::vector<void*> live(threads);
  std::vector<std::thread> pool;
  for (int t = 0; t < threads; ++t) {
    pool.emplace_back([&, t] {
      std::vector<void*> mine;
      for (int i = 0; i < 12; ++i) mine.push_back(a.allocate(256 * KiB, s(1)));
      live[static_cast<std::size_t>(t)] = a.allocate(600 * KiB, s(1));
      sync.arrive_and_wait();                // everything allocated
      for (void* p : mine) a.deallocate(p);  // all 12 into this thread's lane
      sync.arrive_and_wait();                // lanes full, thread alive
      sync.arrive_and_wait();                // the main thread has released the cache
      void* again = a.allocate(256 * KiB, s(1));
      a.deallocate(again);
      a.deallocate(live[static_cast<std::size_t>(t)]);
    });
  }
  sync.arrive_and_wait();
  const std::size_t before = a.stats().reserved_bytes.all.current;
  sync.arrive_and_wait();
  a.empty_cache();  // (no stats() before it: stats() drains the lanes itself)
  const memory_snapshot snap = a.snapshot();
  for (const segment_info& seg : snap.segments) {
    EXPECT_TRUE(holds_live_block(seg)) << "a segment without a live block survived empty_cache";
  }
  const memory_stats st = a.stats();
  EXPECT_LT(st.reserved_bytes.all.current, before);
  EXPECT_EQ(st.allocated_bytes.all.current, threads * 600 * KiB);
  expect_stats_match_snapshot(a);
  expect_device_matches(a, *dev);
  sync.arrive_and_wait();
  for (auto& t : pool) t.join();
  a.trim(0);  // the threads' last frees went into their lanes: trim takes them back too
  EXPECT_EQ(a.stats().reserved_bytes.all.current, 0u);
  expect_device_matches(a, *dev);
}

TEST(thread_cache, TheOutOfMemoryPathReclaimsOtherThreadsLanes) {
  // A thread on stream 1 leaves 16 MiB of blocks in its lane (their segments stay live) and
  // stays alive; the main thread then needs 20 MiB on stream 2 of a 32 MiB device: only what
  // the lane holds can make room. With gc_threshold 0 the out-of-memory retry must find it;
  // by default the garbage collection before growth does.
  for (const double gc : {0.0, config{}.gc_threshold}) {
    auto dev = device(32 * MiB);
    config c;
    c.gc_threshold = gc;
    allocator a(c, dev);
    std::barrier sync(2);
    std::thread t([&] {
      std::vector<void*> mine;
      for (int i = 0; i < 16; ++i) mine.push_back(a.allocate(MiB, s(1)));
      for (void* p : mine) a.deallocate(p);
      sync.arrive_and_wait();
      sync.arrive_and_wait();
    });
    sync.arrive_and_wait();
    void* big = a.allocate(20 * MiB, s(2));
    EXPECT_NE(big, nullptr);
    const memory_stats st = a.stats();
    if (gc == 0.0) {
      EXPECT_GE(st.num_alloc_retries, 1u);
    }
    EXPECT_EQ(st.num_ooms, 0u);
    EXPECT_LE(st.reserved_bytes.all.current, 32 * MiB);
    a.deallocate(big);
    sync.arrive_and_wait();
    t.join();
    expect_stats_match_snapshot(a);
    expect_device_matches(a, *dev);
  }
}

TEST(thread_cache, AnAllocatorDestroyedBeforeTheThreadExitsIsNoHazard) {
  // The lanes belong to the allocator's stream states, not to the thread: a thread that still
  // "has" blocks in a destroyed allocator's lanes holds no reference to them.
  std::barrier sync(2);
  auto a = std::make_unique<allocator>(config::parse("backend:simulated,capacity:1GiB"));
  std::thread t([&] {
    void* p = a->allocate(KiB, s(1));
    a->deallocate(p);  // into this thread's lane
    sync.arrive_and_wait();
    sync.arrive_and_wait();  // the allocator is gone now
    allocator b(config::parse("backend:simulated,capacity:1GiB"));
    void* q = b.allocate(KiB, s(1));
    b.deallocate(q);
    EXPECT_EQ(b.stats().allocated_bytes.all.current, 0u);
  });
  sync.arrive_and_wait();
  a.reset();
  sync.arrive_and_wait();
  t.join();
}

TEST(thread_cache, SeveralThreadsOnOneStreamKeepEveryInvariant) {
  // Four threads on one stream (and a fifth reading stats, emptying and trimming the cache
  // meanwhile); every 400 operations all of them stop and the invariants are checked.
  sim_options o;
  o.capacity = 512 * MiB;
  o.host_backing = true;
  auto dev = std::make_shared<simulated_device>(o);
  allocator a(config{}, dev);
  constexpr int threads = 4;
  constexpr int rounds = 6;
  std::barrier sync(threads + 1);
  std::atomic<bool> done{false};
  std::mutex gate;  // held by the disturber around each call, by the main thread to check
  std::thread disturber([&] {
    std::mt19937_64 rng(99);
    while (!done.load(std::memory_order_acquire)) {
      std::lock_guard<std::mutex> hold(gate);
      switch (rng() % 3) {
        case 0:
          (void)a.stats();
          break;
        case 1:
          a.empty_cache();
          break;
        default:
          a.trim(rng() % (64 * MiB));
      }
      std::this_thread::yield();
    }
  });
  std::vector<std::thread> pool;
  for (int t = 0; t < threads; ++t) {
    pool.emplace_back([&, t] {
      std::mt19937_64 rng(static_cast<std::uint64_t>(t) + 1);
      std::vector<std::pair<unsigned char*, std::size_t>> mine;
      for (int r = 0; r < rounds; ++r) {
        for (int i = 0; i < 400; ++i) {
          if (mine.empty() || (rng() % 2 == 0 && mine.size() < 64)) {
            const std::size_t n = rng() % 8 == 0 ? 1 + rng() % (3 * MiB) : 1 + rng() % 70000;
            auto* p = static_cast<unsigned char*>(a.allocate(n, s(1)));
            p[0] = p[n - 1] = static_cast<unsigned char>(n);
            mine.emplace_back(p, n);
          } else {
            const std::size_t k = rng() % mine.size();
            auto [p, n] = mine[k];
            EXPECT_EQ(p[0], static_cast<unsigned char>(n));
            EXPECT_EQ(p[n - 1], static_cast<unsigned char>(n));
            a.deallocate(p, n, s(1));
            mine[k] = mine.back();
            mine.pop_back();
          }
        }
        sync.arrive_and_wait();  // stop: the main thread checks
        sync.arrive_and_wait();
      }
      for (auto [p, n] : mine) a.deallocate(p);
    });
  }
  for (int r = 0; r < rounds; ++r) {
    sync.arrive_and_wait();
    done.store(r + 1 == rounds, std::memory_order_release);
    {
      std::lock_guard<std::mutex> hold(gate);
      expect_stats_match_snapshot(a);
    }
    sync.arrive_and_wait();
  }
  for (auto& t : pool) t.join();
  disturber.join();
  const memory_stats st = a.stats();
  EXPECT_EQ(st.allocated_bytes.all.current, 0u);
  EXPECT_EQ(st.num_allocs, st.num_frees);
  expect_stats_match_snapshot(a);
  a.empty_cache();
  EXPECT_EQ(a.stats().reserved_bytes.all.current, 0u);
  expect_device_matches(a, *dev);
}

TEST(thread_cache, NoReaderSeesABlockALaneEvictsAsAllocated) {
  // A lane of one block: the free of q evicts p (freed long before) for its stream to free.
  // A reader at the eviction (the test hook runs where a racing stats() or snapshot() would,
  // once the lane is unlocked) sees q's free done or not yet, but never p allocated again.
  allocator a(config::parse("backend:simulated,capacity:1GiB,thread_cache:1"));
  void* p = a.allocate(4 * KiB, s(1));
  void* q = a.allocate(8 * KiB, s(1));
  a.deallocate(p);  // into the lane
  struct reader {
    allocator* a;
    std::vector<std::uint64_t> allocated;  // by stats(), then by snapshot()
  } seen{&a, {}};
  detail::tc_evict_hook_arg.store(&seen);
  detail::tc_evict_hook.store([](void* arg) {
    auto* r = static_cast<reader*>(arg);
    r->allocated.push_back(r->a->stats().allocated_bytes.all.current);
    r->allocated.push_back(sum_snapshot(r->a->snapshot()).allocated[2]);
  });
  a.deallocate(q);  // the lane is full: p is evicted
  detail::tc_evict_hook.store(nullptr);
  ASSERT_EQ(seen.allocated.size(), 2u) << "no eviction";
  for (const std::uint64_t bytes : seen.allocated) {
    EXPECT_TRUE(bytes == 0 || bytes == 8 * KiB)
        << bytes << " B allocated: the evicted 4 KiB block was counted as allocated again";
  }
  EXPECT_EQ(a.stats().allocated_bytes.all.current, 0u);
  expect_stats_match_snapshot(a);
}

TEST(thread_cache, ALaneDrainedWhileColdComesBack) {
  // The calling thread's lane on stream 1 goes cold (32 lookups in a row miss its one 512 B
  // block; no growth, which would drain it), and empty_cache drains it during its cold
  // period. The cold period still ends: after it the lane keeps freed blocks apart again
  // (without the lane they coalesce in the stream).
  allocator a(config{}, device());
  void* tiny = a.allocate(512, s(1));
  std::vector<void*> held;
  held.push_back(a.allocate(KiB, s(1)));  // (the segment stays live through empty_cache)
  a.deallocate(tiny);                     // into the lane
  for (int i = 0; i < 32; ++i) held.push_back(a.allocate(KiB, s(1)));  // 32 misses: cold
  a.empty_cache();  // drains the lane: empty now, and cold for 64 allocations
  for (int i = 0; i < 100; ++i) held.push_back(a.allocate(KiB, s(1)));  // (the cold period)
  void* x = a.allocate(KiB, s(1));
  void* y = a.allocate(KiB, s(1));
  void* z = a.allocate(KiB, s(1));
  ASSERT_EQ(static_cast<char*>(y), static_cast<char*>(x) + KiB);
  ASSERT_EQ(static_cast<char*>(z), static_cast<char*>(y) + KiB);
  a.deallocate(y);  // into the lane, both, kept apart; in the stream they join the free rest
  a.deallocate(z);
  void* w = a.allocate(2 * KiB, s(1));  // no lane block fits: from the free rest, after z
  EXPECT_EQ(static_cast<char*>(w), static_cast<char*>(z) + KiB)
      << "the lane refused the frees: it stayed cold after the drain";
  for (void* p : {x, w}) a.deallocate(p);
  for (void* p : held) a.deallocate(p);
  expect_stats_match_snapshot(a);
}

TEST(thread_cache, ALaneThatTurnsOverWithNoBlockTakenBackGoesCold) {
  // Frees that are never reused on this thread (a training step's backward pass) fill the
  // lane and then each evict its oldest block: after a lane's worth of evictions with no hit
  // the lane goes cold, and the next frees go straight to the stream, where they coalesce.
  allocator a(config{}, device());
  std::vector<char*> x;
  for (int i = 0; i < 40; ++i) x.push_back(static_cast<char*>(a.allocate(KiB, s(1))));
  for (int i = 1; i < 40; ++i) ASSERT_EQ(x[i], x[i - 1] + KiB);
  for (int i = 0; i < 32; ++i) a.deallocate(x[i]);  // 16 into the lane, then 16 evictions
  a.deallocate(x[32]);  // cold: to the stream, and so does x[33], next to it
  a.deallocate(x[33]);
  void* w = a.allocate(2 * KiB, s(1));  // the stream's exact fit: the two joined
  EXPECT_EQ(w, x[32]) << "the lane kept taking frees that it never gave back";
  a.deallocate(w);
  for (int i = 34; i < 40; ++i) a.deallocate(x[i]);
  expect_stats_match_snapshot(a);
  EXPECT_EQ(a.stats().allocated_bytes.all.current, 0u);
}

TEST(thread_cache, ConfigKeys) {
  const config c = config::parse("thread_cache:4,thread_cache_max_size:64KiB");
  EXPECT_EQ(c.thread_cache, 4u);
  EXPECT_EQ(c.thread_cache_max_size, 64 * KiB);
  EXPECT_EQ(config::parse(c.to_string()), c);
  EXPECT_EQ(config{}.thread_cache, 16u);
  EXPECT_EQ(config{}.thread_cache_max_size, MiB);
  EXPECT_THROW(config::parse("thread_cache:65"), invalid_argument);
  EXPECT_THROW(config::parse("thread_cache_max_size:4096"), invalid_argument);  // needs a unit
  try {
    (void)config::parse("thread_cach:4");
    ADD_FAILURE() << "a misspelt key was accepted";
  } catch (const invalid_argument& e) {
    EXPECT_NE(std::string(e.what()).find("thread_cache"), std::string::npos) << e.what();
  }
}

}  // namespace
}  // namespace cachalot::testing
