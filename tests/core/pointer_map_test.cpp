// Unit tests of the sharded pointer map: insert/find/erase, deletion that keeps probe chains
// intact, growth, and concurrent use from several threads.
#include "detail/pointer_map.hpp"

#include <gtest/gtest.h>

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

}  // namespace
}  // namespace cachalot::detail
