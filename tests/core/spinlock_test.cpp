// The engine's lock (detail/spinlock.hpp): mutual exclusion and progress with many more
// threads than cores (waiters park), a parked waiter woken by the unlock itself (the park has
// no timeout, so a lost wake-up would hang these tests), try_lock that never takes a held
// lock nor hides a waiter; and the lanes' lock, which never parks.
#include "detail/spinlock.hpp"

#include <gtest/gtest.h>

#include <atomic>
#include <chrono>
#include <mutex>
#include <thread>
#include <vector>

namespace cachalot::detail {
namespace {

TEST(spinlock, ManyThreadsKeepMutualExclusionAndAllFinish) {
  // 8 threads on (here) 2 cores; every 64th section yields inside the lock, so that waiters
  // spin out and park, and each unlock must wake them.
  spinlock lock;
  std::uint64_t counter = 0;  // guarded by `lock` (TSan checks it)
  std::atomic<int> inside{0};
  constexpr int threads = 8, rounds = 20000;
  std::vector<std::thread> pool;
  for (int t = 0; t < threads; ++t) {
    pool.emplace_back([&] {
      for (int i = 0; i < rounds; ++i) {
        std::lock_guard<spinlock> hold(lock);
        EXPECT_EQ(inside.fetch_add(1, std::memory_order_relaxed), 0);
        ++counter;
        if (i % 64 == 0) std::this_thread::yield();
        inside.fetch_sub(1, std::memory_order_relaxed);
      }
    });
  }
  for (auto& t : pool) t.join();
  EXPECT_EQ(counter, std::uint64_t{threads} * rounds);
}

TEST(spinlock, AnUnlockWakesAParkedWaiter) {
  // The main thread holds the lock long enough for the waiter to spin out and park; its
  // unlock alone must wake it (nothing else ever would).
  for (int round = 0; round < 20; ++round) {
    spinlock lock;
    lock.lock();
    std::atomic<bool> got{false};
    std::thread waiter([&] {
      lock.lock();
      got.store(true);
      lock.unlock();
    });
    std::this_thread::sleep_for(std::chrono::milliseconds(2));  // (long past its spinning)
    EXPECT_FALSE(got.load());
    lock.unlock();
    waiter.join();
    EXPECT_TRUE(got.load());
    EXPECT_TRUE(lock.try_lock()) << "the lock was left held";
    lock.unlock();
  }
}

TEST(spinlock, TryLockNeverTakesAHeldLockNorHidesAWaiter) {
  spinlock lock;
  EXPECT_TRUE(lock.try_lock());
  EXPECT_FALSE(lock.try_lock());
  std::atomic<bool> got{false};
  std::thread waiter([&] {
    lock.lock();  // parks, marking the lock as waited for
    got.store(true);
    lock.unlock();
  });
  std::this_thread::sleep_for(std::chrono::milliseconds(2));
  EXPECT_FALSE(lock.try_lock());  // held (and marked): a try fails and leaves the mark
  lock.unlock();                  // wakes the waiter
  waiter.join();
  EXPECT_TRUE(got.load());
}

TEST(lane_lock, WaitersSpinAndYieldUntilTheHolderUnlocks) {
  // A lane's lock never parks: blocking lockers (drains, stats reads) yield until the holder
  // (a hit, a few instructions) unlocks; hits only try it.
  lane_lock lock;
  std::uint64_t counter = 0;  // guarded by `lock`
  std::atomic<std::uint64_t> tried{0};
  constexpr int threads = 6, rounds = 20000;
  std::vector<std::thread> pool;
  for (int t = 0; t < threads; ++t) {
    pool.emplace_back([&, t] {
      for (int i = 0; i < rounds; ++i) {
        if (t % 2 == 0) {
          std::lock_guard<lane_lock> hold(lock);
          ++counter;
        } else if (lock.try_lock()) {
          ++counter;
          tried.fetch_add(1, std::memory_order_relaxed);
          lock.unlock();
        }
      }
    });
  }
  for (auto& t : pool) t.join();
  EXPECT_EQ(counter, std::uint64_t{threads / 2} * rounds + tried.load());
  EXPECT_TRUE(lock.try_lock());
  EXPECT_FALSE(lock.try_lock());
  lock.unlock();
}

}  // namespace
}  // namespace cachalot::detail
