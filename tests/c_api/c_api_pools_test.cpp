// The C shim's memory pools: creation with options (size field, defaults), routes by stream
// and by filter, explicit pool allocations, pool_of, per-pool stats, the reclaim callback under
// pressure, release, and misuse (NULL arguments, unknown pools) as statuses with messages.
#include <gtest/gtest.h>

#include <cstddef>
#include <cstring>
#include <string>
#include <vector>

#include "cachalot/cachalot.h"

namespace {

void* st(int i) {
  return reinterpret_cast<void*>(static_cast<std::uintptr_t>(0x3000 + i * 16));
}

cachalot_pool_options options(const char* name, cachalot_pool_type type, int priority) {
  cachalot_pool_options o{};
  o.size = sizeof o;
  o.name = name;
  o.type = type;
  o.priority = priority;
  return o;
}

class c_api_pools : public ::testing::Test {
 protected:
  void SetUp() override {
    ASSERT_EQ(
        cachalot_create("backend:simulated,capacity:1GiB,gc_threshold:0,memory_limit:200MiB", &a_),
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
  cachalot_allocator* a_ = nullptr;
};

TEST_F(c_api_pools, RoutesExplicitAllocationsAndStats) {
  cachalot_pool_id t = 0;
  cachalot_pool_options o = options("tenant", CACHALOT_POOL_TENANT, 1);
  o.limit = 64u << 20;
  ASSERT_EQ(cachalot_pool_create(a_, &o, &t), CACHALOT_SUCCESS) << cachalot_last_error();
  EXPECT_NE(t, CACHALOT_DEFAULT_POOL);
  ASSERT_EQ(cachalot_pool_begin_allocate(a_, t, st(1)), CACHALOT_SUCCESS);
  void* p = nullptr;
  ASSERT_EQ(cachalot_malloc(a_, &p, 1000, st(1)), CACHALOT_SUCCESS);
  cachalot_pool_id owner = 99;
  ASSERT_EQ(cachalot_pool_of(a_, p, &owner), CACHALOT_SUCCESS);
  EXPECT_EQ(owner, t);
  EXPECT_EQ(stats(t).allocated_bytes.all.current, 1024u);
  EXPECT_EQ(stats(CACHALOT_DEFAULT_POOL).allocated_bytes.all.current, 0u);
  ASSERT_EQ(cachalot_pool_end_allocate(a_, t), CACHALOT_SUCCESS);
  void* q = nullptr;
  ASSERT_EQ(cachalot_pool_malloc(a_, t, &q, 2000, st(2)), CACHALOT_SUCCESS);
  ASSERT_EQ(cachalot_pool_of(a_, q, &owner), CACHALOT_SUCCESS);
  EXPECT_EQ(owner, t);
  EXPECT_EQ(cachalot_pool_malloc(a_, t, &q, 100u << 20, st(2)), CACHALOT_ERROR_OUT_OF_MEMORY);
  EXPECT_NE(std::string(cachalot_last_error()).find("pool 'tenant'"), std::string::npos)
      << cachalot_last_error();
  EXPECT_EQ(q, nullptr);
  EXPECT_EQ(stats(t).num_ooms, 1u);
  ASSERT_EQ(cachalot_free(a_, p, nullptr), CACHALOT_SUCCESS);
  ASSERT_EQ(cachalot_pool_release(a_, t), CACHALOT_SUCCESS);
  EXPECT_EQ(cachalot_pool_malloc(a_, t, &q, 10, st(2)), CACHALOT_ERROR_INVALID_ARGUMENT);
  std::vector<char> summary(16384);
  ASSERT_EQ(cachalot_memory_summary(a_, summary.data(), summary.size(), nullptr), CACHALOT_SUCCESS);
  EXPECT_NE(std::string(summary.data()).find("tenant*"), std::string::npos) << summary.data();
}

int only_stream_one(void* context, void* stream) {
  ++*static_cast<int*>(context);
  return stream == st(1);
}

TEST_F(c_api_pools, AFilterRouteAndAGraphPool) {
  cachalot_pool_id g = 0;
  const cachalot_pool_options o = options("graph", CACHALOT_POOL_GRAPH, 0);
  ASSERT_EQ(cachalot_pool_create(a_, &o, &g), CACHALOT_SUCCESS);
  int calls = 0;
  ASSERT_EQ(cachalot_pool_begin_allocate_filtered(a_, g, only_stream_one, &calls),
            CACHALOT_SUCCESS);
  void* p = nullptr;
  void* q = nullptr;
  ASSERT_EQ(cachalot_malloc(a_, &p, 1000, st(1)), CACHALOT_SUCCESS);
  ASSERT_EQ(cachalot_malloc(a_, &q, 1000, st(2)), CACHALOT_SUCCESS);
  EXPECT_GE(calls, 2);
  cachalot_pool_id owner = 0;
  ASSERT_EQ(cachalot_pool_of(a_, p, &owner), CACHALOT_SUCCESS);
  EXPECT_EQ(owner, g);
  ASSERT_EQ(cachalot_pool_of(a_, q, &owner), CACHALOT_SUCCESS);
  EXPECT_EQ(owner, CACHALOT_DEFAULT_POOL);
  ASSERT_EQ(cachalot_pool_end_allocate(a_, g), CACHALOT_SUCCESS);
  ASSERT_EQ(cachalot_free(a_, p, nullptr), CACHALOT_SUCCESS);
  ASSERT_EQ(cachalot_empty_cache(a_), CACHALOT_SUCCESS);
  EXPECT_EQ(stats(g).reserved_bytes.all.current, 2u << 20) << "a graph pool keeps its segments";
  ASSERT_EQ(cachalot_pool_retain(a_, g), CACHALOT_SUCCESS);
  ASSERT_EQ(cachalot_pool_release(a_, g), CACHALOT_SUCCESS);
  EXPECT_EQ(stats(g).reserved_bytes.all.current, 2u << 20);
  ASSERT_EQ(cachalot_pool_release(a_, g), CACHALOT_SUCCESS);
  EXPECT_EQ(stats(g).reserved_bytes.all.current, 0u);
  ASSERT_EQ(cachalot_free(a_, q, nullptr), CACHALOT_SUCCESS);
}

struct reclaim_state {
  cachalot_allocator* a;
  std::vector<void*> live;
  int calls = 0;
  cachalot_pool_id asked = 0;
};

size_t drop_one(void* context, cachalot_pool_id pool, size_t bytes) {
  auto* r = static_cast<reclaim_state*>(context);
  ++r->calls;
  r->asked = pool;
  if (r->live.empty() || bytes == 0) return 0;
  cachalot_free(r->a, r->live.back(), nullptr);
  r->live.pop_back();
  return 40u << 20;
}

TEST_F(c_api_pools, TheReclaimCallbackFreesALowerPriorityPool) {
  reclaim_state rs{a_, {}, 0, 0};
  cachalot_pool_options lo = options("batch", CACHALOT_POOL_TENANT, -1);
  lo.reclaim = drop_one;
  lo.reclaim_context = &rs;
  cachalot_pool_id low = 0;
  cachalot_pool_id high = 0;
  ASSERT_EQ(cachalot_pool_create(a_, &lo, &low), CACHALOT_SUCCESS);
  const cachalot_pool_options ho = options("critical", CACHALOT_POOL_TENANT, 1);
  ASSERT_EQ(cachalot_pool_create(a_, &ho, &high), CACHALOT_SUCCESS);
  for (int i = 0; i < 5; ++i) {  // 200 MiB: the limit
    void* p = nullptr;
    ASSERT_EQ(cachalot_pool_malloc(a_, low, &p, 40u << 20, st(1)), CACHALOT_SUCCESS);
    rs.live.push_back(p);
  }
  void* h = nullptr;
  ASSERT_EQ(cachalot_pool_malloc(a_, high, &h, 40u << 20, st(2)), CACHALOT_SUCCESS)
      << cachalot_last_error();
  EXPECT_EQ(rs.calls, 1);
  EXPECT_EQ(rs.asked, low);
  EXPECT_EQ(stats(low).reserved_bytes.all.current, 160u << 20);
  EXPECT_EQ(stats(high).reserved_bytes.all.current, 40u << 20);
  ASSERT_EQ(cachalot_free(a_, h, nullptr), CACHALOT_SUCCESS);
  for (void* p : rs.live) ASSERT_EQ(cachalot_free(a_, p, nullptr), CACHALOT_SUCCESS);
}

struct retry_state {
  cachalot_allocator* a = nullptr;
  cachalot_pool_id low = 0;
  int calls = 0;
  std::vector<cachalot_status> statuses;
  std::vector<std::string> messages;
  int retries = 0;
};

size_t allocate_in_low(void* context, cachalot_pool_id, size_t) {
  auto* r = static_cast<retry_state*>(context);
  ++r->calls;
  void* p = nullptr;
  r->statuses.push_back(cachalot_pool_malloc(r->a, r->low, &p, 40u << 20, st(9)));
  r->messages.emplace_back(cachalot_last_error());
  if (p != nullptr) cachalot_free(r->a, p, nullptr);
  return 0;
}

int retry_once(size_t, void* stream, void* user) {
  auto* r = static_cast<retry_state*>(user);
  return stream == st(2) && ++r->retries == 1 ? 1 : 0;
}

TEST_F(c_api_pools, AReclaimCallbackInsideAnOomRetryGetsOutOfMemory) {
  // The retry the out-of-memory callback asks for calls the reclaim callback again; its failed
  // allocation is CACHALOT_ERROR_OUT_OF_MEMORY with a message, as in the first pass (issue 18:
  // "CACHALOT_ERROR_BACKEND (unknown error)" from the engine's private retry signal).
  retry_state rs;
  rs.a = a_;
  cachalot_pool_options lo = options("batch", CACHALOT_POOL_TENANT, -1);
  lo.reclaim = allocate_in_low;
  lo.reclaim_context = &rs;
  ASSERT_EQ(cachalot_pool_create(a_, &lo, &rs.low), CACHALOT_SUCCESS);
  cachalot_pool_id high = 0;
  const cachalot_pool_options ho = options("critical", CACHALOT_POOL_TENANT, 1);
  ASSERT_EQ(cachalot_pool_create(a_, &ho, &high), CACHALOT_SUCCESS);
  std::vector<void*> live;
  for (int i = 0; i < 5; ++i) {  // 200 MiB: the limit
    void* p = nullptr;
    ASSERT_EQ(cachalot_pool_malloc(a_, rs.low, &p, 40u << 20, st(1)), CACHALOT_SUCCESS);
    live.push_back(p);
  }
  ASSERT_EQ(cachalot_set_oom_callback(a_, retry_once, &rs, 1), CACHALOT_SUCCESS);
  void* h = nullptr;
  EXPECT_EQ(cachalot_pool_malloc(a_, high, &h, 40u << 20, st(2)), CACHALOT_ERROR_OUT_OF_MEMORY);
  EXPECT_EQ(h, nullptr);
  EXPECT_EQ(rs.retries, 1);
  ASSERT_EQ(rs.calls, 2);
  for (std::size_t i = 0; i < rs.statuses.size(); ++i) {
    EXPECT_EQ(rs.statuses[i], CACHALOT_ERROR_OUT_OF_MEMORY) << rs.messages[i];
    EXPECT_NE(rs.messages[i].find("out of memory"), std::string::npos) << rs.messages[i];
  }
  for (void* p : live) ASSERT_EQ(cachalot_free(a_, p, nullptr), CACHALOT_SUCCESS);
}

TEST_F(c_api_pools, MisuseGivesAStatusAndAMessage) {
  cachalot_pool_id id = 0;
  cachalot_pool_options o = options("x", CACHALOT_POOL_TENANT, 0);
  EXPECT_EQ(cachalot_pool_create(a_, nullptr, &id), CACHALOT_ERROR_INVALID_ARGUMENT);
  EXPECT_EQ(cachalot_pool_create(a_, &o, nullptr), CACHALOT_ERROR_INVALID_ARGUMENT);
  o.size = 0;
  EXPECT_EQ(cachalot_pool_create(a_, &o, &id), CACHALOT_ERROR_INVALID_ARGUMENT);
  o.size = sizeof o;
  const int bad_type = 7;  // what a C caller can store
  std::memcpy(&o.type, &bad_type, sizeof o.type);
  EXPECT_EQ(cachalot_pool_create(a_, &o, &id), CACHALOT_ERROR_INVALID_ARGUMENT);
  o.type = CACHALOT_POOL_TENANT;
  o.guarantee = 1u << 30;  // over the 200 MiB limit
  EXPECT_EQ(cachalot_pool_create(a_, &o, &id), CACHALOT_ERROR_INVALID_ARGUMENT);
  EXPECT_NE(std::string(cachalot_last_error()).find("guarantees"), std::string::npos);
  // A short `size` (an older caller): fields past it take their defaults.
  o.size = offsetof(cachalot_pool_options, type);
  ASSERT_EQ(cachalot_pool_create(a_, &o, &id), CACHALOT_SUCCESS) << cachalot_last_error();
  EXPECT_EQ(cachalot_pool_release(a_, CACHALOT_DEFAULT_POOL), CACHALOT_ERROR_INVALID_ARGUMENT);
  EXPECT_EQ(cachalot_pool_retain(a_, 1234), CACHALOT_ERROR_INVALID_ARGUMENT);
  EXPECT_EQ(cachalot_pool_end_allocate(a_, id), CACHALOT_ERROR_INVALID_ARGUMENT);
  EXPECT_EQ(cachalot_pool_begin_allocate_filtered(a_, id, nullptr, nullptr),
            CACHALOT_ERROR_INVALID_ARGUMENT);
  void* p = nullptr;
  EXPECT_EQ(cachalot_pool_malloc(a_, id, nullptr, 10, nullptr), CACHALOT_ERROR_INVALID_ARGUMENT);
  EXPECT_EQ(cachalot_pool_of(a_, &id, &id), CACHALOT_ERROR_INVALID_POINTER);
  EXPECT_EQ(cachalot_pool_of(a_, p, nullptr), CACHALOT_ERROR_INVALID_ARGUMENT);
  EXPECT_EQ(cachalot_pool_get_stats(a_, 1234, nullptr), CACHALOT_ERROR_INVALID_ARGUMENT);
  cachalot_stats s{};
  s.size = sizeof s;
  EXPECT_EQ(cachalot_pool_get_stats(a_, 1234, &s), CACHALOT_ERROR_INVALID_ARGUMENT);
  EXPECT_EQ(cachalot_pool_get_stats(nullptr, 0, &s), CACHALOT_ERROR_INVALID_ARGUMENT);
}

}  // namespace
