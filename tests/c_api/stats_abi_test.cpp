// The extensible stats struct (cachalot_stats.size) and the JSON snapshot through C: exact
// values for a known sequence, per pool; a caller built with an older, shorter struct gets its
// prefix filled and nothing past it touched; a caller built with a newer, longer struct keeps
// its unknown trailing fields and learns from `size` what was filled; a bad size writes
// nothing; the snapshot text follows the buffer contract and describes every block.
#include <gtest/gtest.h>

#include <cstddef>
#include <cstdint>
#include <cstring>
#include <string>
#include <vector>

#include "cachalot/cachalot.h"

namespace {

constexpr std::uint64_t sentinel = 0xC0FFEE0DDBA11ULL;
constexpr std::uint64_t MiB = 1u << 20;

class stats_abi : public ::testing::Test {
 protected:
  void SetUp() override {
    ASSERT_EQ(cachalot_create("backend:simulated,capacity:1GiB,max_split_size:256MiB", &a_),
              CACHALOT_SUCCESS)
        << cachalot_last_error();
    // Small pool: 1000 B (1024 rounded) allocated then freed; large pool: 3 MiB live.
    void* small = nullptr;
    ASSERT_EQ(cachalot_malloc(a_, &small, 1000, nullptr), CACHALOT_SUCCESS);
    ASSERT_EQ(cachalot_malloc(a_, &large_, 3 * MiB, nullptr), CACHALOT_SUCCESS);
    ASSERT_EQ(cachalot_free(a_, small, nullptr), CACHALOT_SUCCESS);
  }
  void TearDown() override { cachalot_destroy(a_); }
  cachalot_allocator* a_ = nullptr;
  void* large_ = nullptr;
};

void expect_stat(const cachalot_stat& s, std::uint64_t current, std::uint64_t peak,
                 std::uint64_t allocated, std::uint64_t freed, const char* what) {
  EXPECT_EQ(s.current, current) << what;
  EXPECT_EQ(s.peak, peak) << what;
  EXPECT_EQ(s.allocated, allocated) << what;
  EXPECT_EQ(s.freed, freed) << what;
}

TEST_F(stats_abi, EveryQuantityPerPoolIsExact) {
  cachalot_stats s;
  cachalot_stats_init(&s);
  ASSERT_EQ(cachalot_get_stats(a_, &s), CACHALOT_SUCCESS) << cachalot_last_error();
  EXPECT_EQ(s.size, sizeof(cachalot_stats));
  expect_stat(s.requested_bytes.small_pool, 0, 1000, 1000, 1000, "requested small");
  expect_stat(s.requested_bytes.large_pool, 3 * MiB, 3 * MiB, 3 * MiB, 0, "requested large");
  expect_stat(s.requested_bytes.all, 3 * MiB, 3 * MiB + 1000, 3 * MiB + 1000, 1000,
              "requested all");
  expect_stat(s.allocated_bytes.small_pool, 0, 1024, 1024, 1024, "allocated small");
  expect_stat(s.allocated_bytes.all, 3 * MiB, 3 * MiB + 1024, 3 * MiB + 1024, 1024,
              "allocated all");
  expect_stat(s.reserved_bytes.small_pool, 2 * MiB, 2 * MiB, 2 * MiB, 0, "reserved small");
  expect_stat(s.reserved_bytes.large_pool, 20 * MiB, 20 * MiB, 20 * MiB, 0, "reserved large");
  expect_stat(s.active_bytes.all, 3 * MiB, 3 * MiB + 1024, 3 * MiB + 1024, 1024, "active all");
  EXPECT_EQ(s.inactive_split_bytes.large_pool.current, 17 * MiB);  // the split 20 MiB segment
  EXPECT_EQ(s.inactive_split_bytes.small_pool.current, 0u);        // wholly free again
  expect_stat(s.allocations.all, 1, 2, 2, 1, "allocations");
  expect_stat(s.segments.all, 2, 2, 2, 0, "segments");
  EXPECT_EQ(s.num_allocs, 2u);
  EXPECT_EQ(s.num_frees, 1u);
  EXPECT_EQ(s.num_segment_allocs, 2u);
  EXPECT_EQ(s.num_segment_frees, 0u);
  EXPECT_EQ(s.num_ooms, 0u);
  EXPECT_EQ(s.num_streams, 1u);
  EXPECT_EQ(s.largest_free_block, 17 * MiB);
  EXPECT_EQ(s.max_split_size, 256 * MiB);
}

TEST_F(stats_abi, DeviceCallsAndModeledTimeAreExact) {
  cachalot_stats s;
  cachalot_stats_init(&s);
  ASSERT_EQ(cachalot_get_stats(a_, &s), CACHALOT_SUCCESS) << cachalot_last_error();
  // Two cuMemAlloc calls (2 MiB and 20 MiB) at the default 50us+1ms/GiB, nothing else.
  const std::uint64_t alloc_ns = 2 * 50000 + 1953 + 19531;
  EXPECT_EQ(s.device_timing, std::uint64_t{CACHALOT_DEVICE_TIMING_MODELED});
  EXPECT_EQ(s.call_segment_alloc.calls, 2u);
  EXPECT_EQ(s.call_segment_alloc.ns, alloc_ns);
  EXPECT_EQ(s.device_ns, alloc_ns);
  EXPECT_EQ(s.device_calls, 2u);
  EXPECT_EQ(s.device_syncs, 0u);
  EXPECT_EQ(s.call_segment_free.calls, 0u);
  EXPECT_EQ(s.call_copy.calls, 0u);
  // empty_cache frees both: two cuMemFree, each with the device sync it implies (5us).
  ASSERT_EQ(cachalot_free(a_, large_, nullptr), CACHALOT_SUCCESS);
  ASSERT_EQ(cachalot_empty_cache(a_), CACHALOT_SUCCESS);
  ASSERT_EQ(cachalot_get_stats(a_, &s), CACHALOT_SUCCESS);
  const std::uint64_t free_ns = 2 * 30000 + 976 + 9765;  // 30us+0.5ms/GiB
  EXPECT_EQ(s.call_segment_free.calls, 2u);
  EXPECT_EQ(s.call_segment_free.ns, free_ns);
  EXPECT_EQ(s.device_implied_syncs, 2u);
  EXPECT_EQ(s.device_implied_sync_ns, 10000u);
  EXPECT_EQ(s.device_syncs, 2u);
  EXPECT_EQ(s.device_ns, alloc_ns + free_ns + 10000);
  large_ = nullptr;

  cachalot_allocator* off = nullptr;
  ASSERT_EQ(cachalot_create("backend:simulated,capacity:1GiB,cost_model:off", &off),
            CACHALOT_SUCCESS);
  void* p = nullptr;
  ASSERT_EQ(cachalot_malloc(off, &p, 1000, nullptr), CACHALOT_SUCCESS);
  cachalot_stats o;
  cachalot_stats_init(&o);
  ASSERT_EQ(cachalot_get_stats(off, &o), CACHALOT_SUCCESS);
  EXPECT_EQ(o.device_timing, std::uint64_t{CACHALOT_DEVICE_TIMING_NONE});
  EXPECT_EQ(o.call_segment_alloc.calls, 1u);
  EXPECT_EQ(o.device_ns, 0u);
  cachalot_destroy(off);
}

TEST_F(stats_abi, BadCostKeysAreRefusedNamingTheKey) {
  cachalot_allocator* b = nullptr;
  EXPECT_EQ(cachalot_create("backend:simulated,cost_segment_alloc:25", &b),
            CACHALOT_ERROR_INVALID_ARGUMENT);
  EXPECT_EQ(b, nullptr);
  EXPECT_NE(std::string(cachalot_last_error()).find("'cost_segment_alloc'"), std::string::npos)
      << cachalot_last_error();
}

TEST_F(stats_abi, MaxSplitSizeNoneIsAllOnes) {
  cachalot_allocator* b = nullptr;
  ASSERT_EQ(cachalot_create("backend:simulated,capacity:1GiB,max_split_size:none", &b),
            CACHALOT_SUCCESS);
  cachalot_stats s;
  cachalot_stats_init(&s);
  ASSERT_EQ(cachalot_get_stats(b, &s), CACHALOT_SUCCESS);
  EXPECT_EQ(s.max_split_size, UINT64_MAX);
  cachalot_destroy(b);
}

TEST_F(stats_abi, StructBeforeTheDeviceFieldsGetsNoneOfThem) {
  // A caller built when the struct ended at num_chunk_unmaps (before issue 21's fields).
  constexpr std::size_t old_size = offsetof(cachalot_stats, device_timing);
  std::vector<std::uint64_t> words(sizeof(cachalot_stats) / 8, sentinel);
  words[0] = old_size;
  auto* s = reinterpret_cast<cachalot_stats*>(words.data());
  ASSERT_EQ(cachalot_get_stats(a_, s), CACHALOT_SUCCESS) << cachalot_last_error();
  EXPECT_EQ(s->size, old_size);
  EXPECT_EQ(s->num_segment_allocs, 2u);
  for (std::size_t i = old_size / 8; i < words.size(); ++i) EXPECT_EQ(words[i], sentinel) << i;
}

TEST_F(stats_abi, OlderShorterStructGetsItsPrefixOnly) {
  // What a caller compiled when the struct ended after allocated_bytes passes: its size, then
  // its own memory continues (here: sentinels that must survive).
  constexpr std::size_t old_size = offsetof(cachalot_stats, reserved_bytes);
  std::vector<std::uint64_t> words(sizeof(cachalot_stats) / 8 + 4, sentinel);
  words[0] = old_size;
  auto* s = reinterpret_cast<cachalot_stats*>(words.data());
  ASSERT_EQ(cachalot_get_stats(a_, s), CACHALOT_SUCCESS) << cachalot_last_error();
  EXPECT_EQ(s->size, old_size);
  EXPECT_EQ(s->requested_bytes.large_pool.current, 3 * MiB);
  EXPECT_EQ(s->allocated_bytes.all.peak, 3 * MiB + 1024);
  for (std::size_t i = old_size / 8; i < words.size(); ++i) {
    EXPECT_EQ(words[i], sentinel) << "word " << i << " past the caller's struct was written";
  }
}

TEST_F(stats_abi, NewerLongerStructKeepsItsUnknownFields) {
  struct newer {
    cachalot_stats known;
    std::uint64_t future[3];
  } n;
  std::memset(&n, 0, sizeof n);
  n.known.size = sizeof n;
  n.future[0] = n.future[1] = n.future[2] = sentinel;
  ASSERT_EQ(cachalot_get_stats(a_, &n.known), CACHALOT_SUCCESS) << cachalot_last_error();
  EXPECT_EQ(n.known.size, sizeof(cachalot_stats)) << "size tells which fields were filled";
  EXPECT_EQ(n.known.max_split_size, 256 * MiB);
  EXPECT_EQ(n.future[0], sentinel);
  EXPECT_EQ(n.future[1], sentinel);
  EXPECT_EQ(n.future[2], sentinel);
}

TEST_F(stats_abi, BadSizeWritesNothing) {
  for (const std::uint64_t bad : {std::uint64_t{0}, std::uint64_t{4}, std::uint64_t{12}}) {
    std::vector<std::uint64_t> words(sizeof(cachalot_stats) / 8, sentinel);
    words[0] = bad;
    auto* s = reinterpret_cast<cachalot_stats*>(words.data());
    EXPECT_EQ(cachalot_get_stats(a_, s), CACHALOT_ERROR_INVALID_ARGUMENT) << bad;
    EXPECT_NE(std::string(cachalot_last_error()).find("sizeof(cachalot_stats)"), std::string::npos)
        << cachalot_last_error();
    EXPECT_EQ(words[0], bad);
    for (std::size_t i = 1; i < words.size(); ++i) EXPECT_EQ(words[i], sentinel) << i;
  }
  EXPECT_EQ(cachalot_get_stats(a_, nullptr), CACHALOT_ERROR_INVALID_ARGUMENT);
}

std::string snapshot(cachalot_allocator* a) {
  std::size_t needed = 0;
  EXPECT_EQ(cachalot_memory_snapshot(a, nullptr, 0, &needed), CACHALOT_SUCCESS);
  std::string text(needed, '\0');
  std::size_t again = 0;
  EXPECT_EQ(cachalot_memory_snapshot(a, text.data(), text.size(), &again), CACHALOT_SUCCESS);
  EXPECT_EQ(again, needed);
  text.resize(needed - 1);
  return text;
}

std::size_t count(const std::string& text, const std::string& what) {
  std::size_t n = 0;
  for (std::size_t at = text.find(what); at != std::string::npos; at = text.find(what, at + 1)) {
    ++n;
  }
  return n;
}

TEST_F(stats_abi, SnapshotTextDescribesEveryBlock) {
  void* pending = nullptr;
  void* s1 = reinterpret_cast<void*>(0x100);
  void* s2 = reinterpret_cast<void*>(0x200);
  ASSERT_EQ(cachalot_malloc(a_, &pending, 4096, s1), CACHALOT_SUCCESS);
  ASSERT_EQ(cachalot_record_stream(a_, pending, s2), CACHALOT_SUCCESS);
  ASSERT_EQ(cachalot_free(a_, pending, s1), CACHALOT_SUCCESS);  // awaits stream 2's event
  const std::string text = snapshot(a_);
  EXPECT_EQ(text.rfind(R"({"device":0,"backend":"simulated","segments":[)", 0), 0u) << text;
  EXPECT_EQ(count(text, R"("pool":"small")"), 2u) << text;  // default stream and stream 0x100
  EXPECT_EQ(count(text, R"("pool":"large")"), 1u) << text;
  EXPECT_EQ(count(text, R"("size":20971520)"), 1u) << text;
  EXPECT_EQ(count(text, R"("stream":256)"), 1u) << text;
  EXPECT_EQ(count(text, R"("size":3145728,"requested":3145728,"state":"allocated")"), 1u) << text;
  EXPECT_EQ(count(text, R"("size":4096,"requested":4096,"state":"pending")"), 1u) << text;
  EXPECT_EQ(count(text, R"("state":"allocated")"), 1u) << text;
  EXPECT_EQ(text.back(), '}');
  EXPECT_EQ(count(text, R"(],"device_calls":{"timing":"modeled","total_ns":)"), 1u) << text;
  EXPECT_EQ(count(text, R"("segment_alloc":{"calls":3,"ns":173437})"), 1u) << text;
  EXPECT_EQ(count(text, R"("event_record":{"calls":1,)"), 1u) << text;  // the deferred free
  char tiny[16];
  std::size_t needed = 0;
  EXPECT_EQ(cachalot_memory_snapshot(a_, tiny, sizeof tiny, &needed), CACHALOT_SUCCESS);
  EXPECT_EQ(std::strlen(tiny), sizeof tiny - 1);
  EXPECT_EQ(needed, text.size() + 1);
  EXPECT_EQ(cachalot_memory_snapshot(nullptr, tiny, sizeof tiny, nullptr),
            CACHALOT_ERROR_INVALID_ARGUMENT);
}

}  // namespace
