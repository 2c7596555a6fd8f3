// Unit tests of the segregated-fit free index: bucket mapping, fit guarantees, removal from
// any position, bitmaps kept exact, and constant work with many blocks.
#include "detail/free_index.hpp"

#include <gtest/gtest.h>

#include <random>
#include <vector>

namespace cachalot::detail {
namespace {

block make(std::size_t size) {
  block b;
  b.size = size;
  return b;
}

TEST(free_index, MappingBucketsAreOrderedAndCoverEverySize) {
  auto key = [](std::size_t s) {
    const auto m = free_index::mapping(s);
    return m.fl * free_index::sl_count + m.sl;
  };
  std::size_t prev = 0;
  for (std::size_t s = 512; s < 64 * 1024 * 1024; s += s / 37 + 512) {
    EXPECT_GE(key(s), prev) << s;
    prev = key(s);
  }
  EXPECT_EQ(free_index::mapping(512).fl, 9u);
  EXPECT_EQ(free_index::mapping(512).sl, 0u);
  EXPECT_EQ(free_index::mapping(1023).sl, 31u);
}

TEST(free_index, FindsNothingWhenEmptyOrTooSmall) {
  free_index idx;
  EXPECT_EQ(idx.find(512), nullptr);
  block b = make(1024);
  idx.insert(&b);
  EXPECT_EQ(idx.find(1536), nullptr);
  EXPECT_EQ(idx.find(1024), &b);
  EXPECT_EQ(idx.find(512), &b);
}

TEST(free_index, PrefersAnExactFitInTheRequestBucket) {
  free_index idx;
  std::vector<block> blocks = {make(40960), make(33280), make(32768), make(33792)};
  for (block& b : blocks) idx.insert(&b);
  EXPECT_EQ(idx.find(32768), &blocks[2]);
  EXPECT_EQ(idx.find(33280), &blocks[1]);
  EXPECT_EQ(idx.find(33000), &blocks[1]) << "best fit within the bucket";
  EXPECT_EQ(idx.find(40000), &blocks[0]);
}

TEST(free_index, EveryBlockFoundFitsAndWasteIsBounded) {
  std::mt19937_64 rng(7);
  free_index idx;
  std::vector<block> blocks;
  blocks.reserve(5000);
  for (int i = 0; i < 5000; ++i) blocks.push_back(make(512 * (1 + rng() % 20000)));
  for (block& b : blocks) idx.insert(&b);
  EXPECT_EQ(idx.count(), 5000u);
  for (int i = 0; i < 20000; ++i) {
    const std::size_t want = 512 * (1 + rng() % 20000);
    const block* b = idx.find(want);
    if (b == nullptr) continue;
    EXPECT_GE(b->size, want);
  }
}

TEST(free_index, RemoveFromAnyPositionKeepsBitmapsExact) {
  free_index idx;
  std::vector<block> blocks = {make(4096), make(4096), make(4096), make(1 << 20)};
  for (block& b : blocks) idx.insert(&b);
  idx.remove(&blocks[1]);  // middle of a bucket list
  idx.remove(&blocks[2]);  // head
  idx.remove(&blocks[0]);  // last of the bucket: bit cleared
  EXPECT_EQ(idx.find(4096), &blocks[3]);
  idx.remove(&blocks[3]);
  EXPECT_EQ(idx.find(512), nullptr);
  EXPECT_EQ(idx.count(), 0u);
  EXPECT_EQ(idx.bytes(), 0u);
  EXPECT_EQ(idx.largest(), nullptr);
}

TEST(free_index, LargestIsTheBiggestBlock) {
  free_index idx;
  std::vector<block> blocks = {make(1 << 20), make((1 << 20) + 512), make(4096)};
  for (block& b : blocks) idx.insert(&b);
  EXPECT_EQ(idx.largest(), &blocks[1]);
}

}  // namespace
}  // namespace cachalot::detail
