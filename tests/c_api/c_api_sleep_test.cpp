// The C shim's sleep and wake of memory pools: cachalot_pool_sleep / _wake / _is_asleep with
// offload (bytes back at the same addresses on the host-backed simulated device) and discard,
// CACHALOT_ERROR_POOL_ASLEEP with a message for allocations while asleep, refusals (default
// pool, graph pool, fixed segments, unknown mode) as statuses with the reason, the sleep fields
// of cachalot_stats, the snapshot's "sleeping_pools", and a sleepable pool put to sleep under
// pressure with its C callback asked and told. No exception crosses the shim.
#include <gtest/gtest.h>

#include <cstddef>
#include <cstring>
#include <string>
#include <vector>

#include "cachalot/cachalot.h"

namespace {

void* st(int i) {
  return reinterpret_cast<void*>(static_cast<std::uintptr_t>(0x5000 + i * 16));
}

cachalot_pool_options options(const char* name, int priority) {
  cachalot_pool_options o{};
  o.size = sizeof o;
  o.name = name;
  o.type = CACHALOT_POOL_TENANT;
  o.priority = priority;
  return o;
}

class c_api_sleep : public ::testing::Test {
 protected:
  void SetUp() override {
    ASSERT_EQ(cachalot_create("backend:simulated,capacity:64MiB,host_backing:1,"
                              "expandable_segments:1",
                              &a_),
              CACHALOT_SUCCESS)
        << cachalot_last_error();
  }
  void TearDown() override { cachalot_destroy(a_); }
  cachalot_stats stats(cachalot_pool_id p) {
    cachalot_stats s{};
    s.size = sizeof s;
    EXPECT_EQ(cachalot_pool_get_stats(a_, p, &s), CACHALOT_SUCCESS) << cachalot_last_error();
    return s;
  }
  cachalot_pool_id pool(cachalot_pool_options o) {
    cachalot_pool_id id = 0;
    EXPECT_EQ(cachalot_pool_create(a_, &o, &id), CACHALOT_SUCCESS) << cachalot_last_error();
    return id;
  }
  std::string snapshot() {
    std::size_t needed = 0;
    EXPECT_EQ(cachalot_memory_snapshot(a_, nullptr, 0, &needed), CACHALOT_SUCCESS);
    std::string text(needed, '\0');
    EXPECT_EQ(cachalot_memory_snapshot(a_, text.data(), text.size(), &needed), CACHALOT_SUCCESS);
    text.resize(needed - 1);
    return text;
  }
  cachalot_allocator* a_ = nullptr;
};

TEST_F(c_api_sleep, OffloadRoundTripAndTheErrorsWhileAsleep) {
  const cachalot_pool_id batch = pool(options("batch", 0));
  void* p = nullptr;
  ASSERT_EQ(cachalot_pool_malloc(a_, batch, &p, 3u << 20, st(1)), CACHALOT_SUCCESS);
  std::vector<unsigned char> pattern(3u << 20);
  for (std::size_t i = 0; i < pattern.size(); ++i) pattern[i] = static_cast<unsigned char>(i * 7);
  std::memcpy(p, pattern.data(), pattern.size());

  int slept = -1;
  ASSERT_EQ(cachalot_pool_sleep(a_, batch, CACHALOT_SLEEP_OFFLOAD, &slept), CACHALOT_SUCCESS)
      << cachalot_last_error();
  EXPECT_EQ(slept, 1);
  int asleep = -1;
  ASSERT_EQ(cachalot_pool_is_asleep(a_, batch, &asleep), CACHALOT_SUCCESS);
  EXPECT_EQ(asleep, 1);
  const cachalot_stats s = stats(batch);
  EXPECT_EQ(s.reserved_bytes.all.current, 0u);
  EXPECT_EQ(s.allocated_bytes.all.current, 3u << 20);
  EXPECT_EQ(s.sleep_pools_asleep, 1u);
  EXPECT_EQ(s.sleep_bytes_asleep, 4u << 20);  // two 2 MiB chunks hold the block
  EXPECT_EQ(s.sleep_bytes_offloaded, 3u << 20);
  EXPECT_EQ(s.sleep_num_sleeps, 1u);
  EXPECT_EQ(s.sleep_bytes_copied_out, 3u << 20);
  EXPECT_GT(s.sleep_ns, 0u);  // modeled: the copy at the cost model's bandwidth, unmaps, syncs
  const std::string snap = snapshot();
  EXPECT_NE(snap.find("\"sleeping_pools\":[{\"pool\":" + std::to_string(batch) +
                      ",\"mode\":\"offload\",\"bytes_asleep\":4194304,"
                      "\"bytes_offloaded\":3145728,\"bytes_held\":0}]"),
            std::string::npos)
      << snap;
  EXPECT_NE(snap.find("\"asleep\":true"), std::string::npos);

  void* q = nullptr;
  EXPECT_EQ(cachalot_pool_malloc(a_, batch, &q, 1000, st(1)), CACHALOT_ERROR_POOL_ASLEEP);
  EXPECT_EQ(q, nullptr);
  EXPECT_NE(std::string(cachalot_last_error()).find("'batch'"), std::string::npos)
      << cachalot_last_error();
  EXPECT_EQ(cachalot_record_stream(a_, p, st(2)), CACHALOT_ERROR_POOL_ASLEEP);
  EXPECT_STREQ(cachalot_status_string(CACHALOT_ERROR_POOL_ASLEEP), "CACHALOT_ERROR_POOL_ASLEEP");
  ASSERT_EQ(cachalot_pool_sleep(a_, batch, CACHALOT_SLEEP_DISCARD, &slept), CACHALOT_SUCCESS);
  EXPECT_EQ(slept, 0);  // asleep already

  int woke = -1;
  ASSERT_EQ(cachalot_pool_wake(a_, batch, &woke), CACHALOT_SUCCESS) << cachalot_last_error();
  EXPECT_EQ(woke, 1);
  EXPECT_EQ(std::memcmp(p, pattern.data(), pattern.size()), 0);
  ASSERT_EQ(cachalot_pool_wake(a_, batch, &woke), CACHALOT_SUCCESS);
  EXPECT_EQ(woke, 0);
  const cachalot_stats w = stats(batch);
  EXPECT_EQ(w.sleep_pools_asleep, 0u);
  EXPECT_EQ(w.sleep_num_wakes, 1u);
  EXPECT_EQ(w.sleep_bytes_copied_in, 3u << 20);
  EXPECT_EQ(w.reserved_bytes.all.current, 4u << 20);
  EXPECT_EQ(cachalot_free(a_, p, st(1)), CACHALOT_SUCCESS);
}

TEST_F(c_api_sleep, DiscardAndFreesWhileAsleep) {
  const cachalot_pool_id batch = pool(options("cache", 0));
  void* p = nullptr;
  ASSERT_EQ(cachalot_pool_malloc(a_, batch, &p, 1u << 20, st(1)), CACHALOT_SUCCESS);
  ASSERT_EQ(cachalot_pool_sleep(a_, batch, CACHALOT_SLEEP_DISCARD, nullptr), CACHALOT_SUCCESS);
  EXPECT_EQ(stats(batch).sleep_bytes_offloaded, 0u);
  EXPECT_EQ(cachalot_free(a_, p, st(1)), CACHALOT_SUCCESS);  // allowed, no device call
  EXPECT_EQ(stats(batch).allocated_bytes.all.current, 0u);
  EXPECT_EQ(stats(batch).sleep_bytes_asleep, 0u);
  ASSERT_EQ(cachalot_pool_wake(a_, batch, nullptr), CACHALOT_SUCCESS);
  EXPECT_EQ(stats(batch).reserved_bytes.all.current, 0u);  // nothing to map
}

TEST_F(c_api_sleep, RefusalsAreStatusesWithTheReason) {
  EXPECT_EQ(cachalot_pool_sleep(a_, CACHALOT_DEFAULT_POOL, CACHALOT_SLEEP_OFFLOAD, nullptr),
            CACHALOT_ERROR_INVALID_ARGUMENT);
  EXPECT_NE(std::string(cachalot_last_error()).find("default pool"), std::string::npos)
      << cachalot_last_error();
  cachalot_pool_options g = options("graphs", 0);
  g.type = CACHALOT_POOL_GRAPH;
  const cachalot_pool_id graph = pool(g);
  EXPECT_EQ(cachalot_pool_sleep(a_, graph, CACHALOT_SLEEP_OFFLOAD, nullptr),
            CACHALOT_ERROR_INVALID_ARGUMENT);
  EXPECT_NE(std::string(cachalot_last_error()).find("graph pool"), std::string::npos)
      << cachalot_last_error();
  const cachalot_pool_id t = pool(options("t", 0));
  cachalot_sleep_mode bad;
  const int seven = 7;
  std::memcpy(&bad, &seven, sizeof bad);
  EXPECT_EQ(cachalot_pool_sleep(a_, t, bad, nullptr), CACHALOT_ERROR_INVALID_ARGUMENT);
  EXPECT_NE(std::string(cachalot_last_error()).find("unknown sleep mode 7"), std::string::npos);
  EXPECT_EQ(cachalot_pool_wake(a_, 999, nullptr), CACHALOT_ERROR_INVALID_ARGUMENT);
  EXPECT_EQ(cachalot_pool_is_asleep(a_, t, nullptr), CACHALOT_ERROR_INVALID_ARGUMENT);
  EXPECT_EQ(cachalot_pool_sleep(nullptr, t, CACHALOT_SLEEP_OFFLOAD, nullptr),
            CACHALOT_ERROR_INVALID_ARGUMENT);

  cachalot_allocator* fixed = nullptr;
  ASSERT_EQ(cachalot_create("backend:simulated,capacity:64MiB", &fixed), CACHALOT_SUCCESS);
  cachalot_pool_options o = options("fixed", 0);
  cachalot_pool_id f = 0;
  ASSERT_EQ(cachalot_pool_create(fixed, &o, &f), CACHALOT_SUCCESS);
  EXPECT_EQ(cachalot_pool_sleep(fixed, f, CACHALOT_SLEEP_DISCARD, nullptr),
            CACHALOT_ERROR_NOT_SUPPORTED);
  EXPECT_NE(std::string(cachalot_last_error()).find("expandable_segments"), std::string::npos)
      << cachalot_last_error();
  o.sleepable = 1;  // a sleepable pool needs expandable segments too
  EXPECT_NE(cachalot_pool_create(fixed, &o, &f), CACHALOT_SUCCESS);
  cachalot_destroy(fixed);
}

struct notices {
  std::vector<int> seen;
  int answer = 1;
};

int on_sleep(void* context, cachalot_pool_id, int notice, size_t) {
  auto* n = static_cast<notices*>(context);
  n->seen.push_back(notice);
  return n->answer;
}

TEST_F(c_api_sleep, SleepablePoolSleepsForAHigherPriorityPoolAndTellsItsOwner) {
  notices told;
  cachalot_pool_options b = options("batch", 0);
  b.sleepable = 1;
  b.sleep_mode = CACHALOT_SLEEP_OFFLOAD;
  b.on_sleep = on_sleep;
  b.sleep_context = &told;
  const cachalot_pool_id batch = pool(b);
  const cachalot_pool_id critical = pool(options("critical", 10));
  void* weights = nullptr;
  ASSERT_EQ(cachalot_pool_malloc(a_, batch, &weights, 40u << 20, st(1)), CACHALOT_SUCCESS);
  std::memset(weights, 0x5a, 40u << 20);
  void* spike = nullptr;  // does not fit next to the batch pool's 40 MiB on a 64 MiB device
  ASSERT_EQ(cachalot_pool_malloc(a_, critical, &spike, 30u << 20, st(2)), CACHALOT_SUCCESS)
      << cachalot_last_error();
  EXPECT_EQ(told.seen, (std::vector<int>{CACHALOT_SLEEP_REQUESTED, CACHALOT_SLEEP_ASLEEP}));
  const cachalot_stats s = stats(batch);
  EXPECT_EQ(s.sleep_pools_asleep, 1u);
  EXPECT_EQ(s.sleep_num_pressure_sleeps, 1u);
  EXPECT_EQ(cachalot_free(a_, spike, st(2)), CACHALOT_SUCCESS);
  ASSERT_EQ(cachalot_empty_cache(a_), CACHALOT_SUCCESS);
  ASSERT_EQ(cachalot_pool_wake(a_, batch, nullptr), CACHALOT_SUCCESS) << cachalot_last_error();
  const auto* w = static_cast<const unsigned char*>(weights);
  bool same = true;
  for (std::size_t i = 0; i < (40u << 20); i += 4099) same = same && w[i] == 0x5a;
  EXPECT_TRUE(same);
  EXPECT_EQ(cachalot_free(a_, weights, st(1)), CACHALOT_SUCCESS);
}

}  // namespace
