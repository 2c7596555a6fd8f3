// Unit tests of the sharded pointer map: insert/find/erase, deletion that keeps probe chains
// intact, growth (outside the write section), and concurrent use from several threads, also
// lookups racing growth in their own shard.
#include "detail/pointer_map.hpp"

#include <gtest/gtest.h>

#include <atomic>
#include <random>
#include <thread>
#include <unordered_map>
#include <vector>

namespace cachalot::detail {
namespace {

TEST(pointer_map, InsertFindErase) {
  pointer_map m;
  block a, b;
  m.insert(0x1000, &a);
  m.insert(0x2000, &b);
  EXPECT_EQ(m.find(0x1000), &a);
  EXPECT_EQ(m.find(0x2000), &b);
  EXPECT_EQ(m.find(0x3000), nullptr);
  EXPECT_EQ(m.erase(0x1000), &a);
  EXPECT_EQ(m.erase(0x1000), nullptr);
  EXPECT_EQ(m.find(0x1000), nullptr);
  EXPECT_EQ(m.size(), 1u);
}

TEST(pointer_map, RandomOperationsMatchAReferenceMap) {
  pointer_map m;
  std::unordered_map<std::uintptr_t, block*> ref;
  std::vector<block> nodes(1);
  std::mt19937_64 rng(3);
  for (int i = 0; i < 200000; ++i) {
    const std::uintptr_t key = 0x10000 + 256 * (rng() % 20000);
    if (rng() % 2 == 0) {
      if (ref.count(key) == 0) {
        m.insert(key, &nodes[0] + 0);
        ref[key] = &nodes[0];
      }
    } else {
      EXPECT_EQ(m.erase(key), ref.count(key) ? ref[key] : nullptr);
      ref.erase(key);
    }
    if (i % 1000 == 0) {
      for (const auto& [k, v] : ref) ASSERT_EQ(m.find(k), v);
    }
  }
  EXPECT_EQ(m.size(), ref.size());
}

TEST(pointer_map, ConcurrentThreadsOnDisjointKeys) {
  pointer_map m;
  block node;
  std::vector<std::thread> threads;
  for (int t = 0; t < 8; ++t) {
    threads.emplace_back([&, t] {
      for (int round = 0; round < 20; ++round) {
        for (std::uintptr_t i = 0; i < 1000; ++i) m.insert(((t + 1) << 24) + i * 512, &node);
        for (std::uintptr_t i = 0; i < 1000; ++i) {
          ASSERT_EQ(m.erase(((t + 1) << 24) + i * 512), &node);
        }
      }
    });
  }
  for (auto& th : threads) th.join();
  EXPECT_EQ(m.size(), 0u);
}

TEST(pointer_map, GrowthAllocatesItsTableOutsideTheWriteSection) {
  // Lookups never wait for an allocation: when growth has its bigger table allocated, the
  // shard's sequence is still even (lookups of that shard go on).
  static std::vector<bool> writing;
  writing.clear();
  pointer_map m;
  block node;
  pointer_map::grow_hook.store(
      [](const pointer_map& map, std::uintptr_t addr) { writing.push_back(map.writing(addr)); });
  const std::uintptr_t region = std::uintptr_t{7} << 21;  // one 2 MiB region: one shard
  for (std::uintptr_t i = 0; i < 200; ++i) m.insert(region + i * 256, &node);
  pointer_map::grow_hook.store(nullptr);
  ASSERT_GE(writing.size(), 2u) << "the shard did not grow";
  for (const bool w : writing) EXPECT_FALSE(w) << "the table was allocated inside a write section";
  for (std::uintptr_t i = 0; i < 200; ++i) ASSERT_EQ(m.find(region + i * 256), &node);
}

TEST(pointer_map, LookupsRacingGrowthAndErasureStayExact) {
  // One shard: a writer inserts and erases (growing the table again and again) while readers
  // look up keys that stay present throughout, and keys that are never present.
  pointer_map m;
  block stay, churn;
  const std::uintptr_t region = std::uintptr_t{9} << 21;
  for (std::uintptr_t i = 0; i < 16; ++i) m.insert(region + i * 256, &stay);
  std::atomic<bool> done{false};
  std::vector<std::thread> readers;
  for (int r = 0; r < 2; ++r) {
    readers.emplace_back([&] {
      while (!done.load(std::memory_order_acquire)) {
        for (std::uintptr_t i = 0; i < 16; ++i) ASSERT_EQ(m.find(region + i * 256), &stay);
        ASSERT_EQ(m.find(region + 8191 * 256), nullptr);
      }
    });
  }
  for (int round = 0; round < 20; ++round) {
    for (std::uintptr_t i = 16; i < 4000; ++i) m.insert(region + i * 256, &churn);
    for (std::uintptr_t i = 16; i < 4000; ++i) ASSERT_EQ(m.erase(region + i * 256), &churn);
  }
  done.store(true, std::memory_order_release);
  for (auto& t : readers) t.join();
  EXPECT_EQ(m.size(), 16u);
}

}  // namespace
}  // namespace cachalot::detail
