// The whole C contract: creation from config strings, size 0, NULL frees, invalid pointers,
// impossible sizes, bad configs, NULL and destroyed handles, stats, summary, status strings
// and the per-thread last error.
#include "cachalot/cachalot.h"

#include <gtest/gtest.h>

#include <stdexcept>
#include <string>
#include <thread>
#include <vector>

#include "cachalot/version.h"

namespace {

class c_api : public ::testing::Test {
 protected:
  void SetUp() override {
    ASSERT_EQ(cachalot_create("backend:simulated,capacity:1GiB", &a_), CACHALOT_SUCCESS)
        << cachalot_last_error();
  }
  void TearDown() override { cachalot_destroy(a_); }
  cachalot_stats stats() {
    cachalot_stats s{};
    s.size = sizeof s;
    EXPECT_EQ(cachalot_get_stats(a_, &s), CACHALOT_SUCCESS);
    return s;
  }
  cachalot_allocator* a_ = nullptr;
};

TEST_F(c_api, MallocFreeAndStats) {
  void* p = nullptr;
  ASSERT_EQ(cachalot_malloc(a_, &p, 1000, nullptr), CACHALOT_SUCCESS);
  ASSERT_NE(p, nullptr);
  cachalot_stats s = stats();
  EXPECT_EQ(s.requested_bytes.all.current, 1000u);
  EXPECT_EQ(s.allocated_bytes.all.current, 1024u);
  EXPECT_EQ(s.reserved_bytes.all.current, 2u << 20);
  EXPECT_EQ(s.num_allocs, 1u);
  EXPECT_EQ(s.num_segment_allocs, 1u);
  EXPECT_EQ(s.allocations.all.current, 1u);
  EXPECT_EQ(s.largest_free_block, (2u << 20) - 1024);
  EXPECT_EQ(cachalot_free(a_, p, nullptr), CACHALOT_SUCCESS);
  s = stats();
  EXPECT_EQ(s.allocated_bytes.all.current, 0u);
  EXPECT_EQ(s.allocated_bytes.all.peak, 1024u);
  EXPECT_EQ(s.requested_bytes.all.peak, 1000u);
  EXPECT_EQ(s.reserved_bytes.all.peak, 2u << 20);
  EXPECT_EQ(s.num_frees, 1u);
  EXPECT_EQ(cachalot_reset_peak_stats(a_), CACHALOT_SUCCESS);
  EXPECT_EQ(stats().allocated_bytes.all.peak, 0u);
  EXPECT_EQ(cachalot_empty_cache(a_), CACHALOT_SUCCESS);
  s = stats();
  EXPECT_EQ(s.reserved_bytes.all.current, 0u);
  EXPECT_EQ(s.num_segment_frees, 1u);
  EXPECT_EQ(s.num_cache_flushes, 1u);
}

TEST_F(c_api, SizeZeroAndNullFree) {
  void* p = reinterpret_cast<void*>(0x1);
  EXPECT_EQ(cachalot_malloc(a_, &p, 0, nullptr), CACHALOT_SUCCESS);
  EXPECT_EQ(p, nullptr);
  EXPECT_EQ(cachalot_free(a_, nullptr, nullptr), CACHALOT_SUCCESS);
  EXPECT_EQ(stats().num_allocs, 0u);
}

TEST_F(c_api, InvalidPointersChangeNothing) {
  void* p = nullptr;
  ASSERT_EQ(cachalot_malloc(a_, &p, 4096, nullptr), CACHALOT_SUCCESS);
  const cachalot_stats before = stats();
  int local = 0;
  EXPECT_EQ(cachalot_free(a_, &local, nullptr), CACHALOT_ERROR_INVALID_POINTER);
  EXPECT_NE(std::string(cachalot_last_error()).find("not a live allocation of this allocator"),
            std::string::npos)
      << cachalot_last_error();
  EXPECT_EQ(cachalot_free(a_, static_cast<char*>(p) + 1024, nullptr),
            CACHALOT_ERROR_INVALID_POINTER);
  EXPECT_NE(std::string(cachalot_last_error()).find("interior"), std::string::npos);
  EXPECT_EQ(cachalot_record_stream(a_, &local, nullptr), CACHALOT_ERROR_INVALID_POINTER);
  const cachalot_stats after = stats();
  EXPECT_EQ(after.allocated_bytes.all.current, before.allocated_bytes.all.current);
  EXPECT_EQ(after.num_frees, before.num_frees);
  EXPECT_EQ(cachalot_free(a_, p, nullptr), CACHALOT_SUCCESS);
  EXPECT_EQ(cachalot_free(a_, p, nullptr), CACHALOT_ERROR_INVALID_POINTER);  // double free
  EXPECT_NE(std::string(cachalot_last_error()).find("already freed"), std::string::npos)
      << cachalot_last_error();
  EXPECT_EQ(stats().num_frees, 1u);
}

TEST_F(c_api, ImpossibleSizeIsOutOfMemoryAndKeepsWorking) {
  void* keep = nullptr;
  ASSERT_EQ(cachalot_malloc(a_, &keep, 100, nullptr), CACHALOT_SUCCESS);
  const cachalot_stats before = stats();
  void* p = reinterpret_cast<void*>(0x1);
  EXPECT_EQ(cachalot_malloc(a_, &p, SIZE_MAX, nullptr), CACHALOT_ERROR_OUT_OF_MEMORY);
  EXPECT_EQ(p, nullptr);
  EXPECT_NE(std::string(cachalot_last_error()).find("out of memory"), std::string::npos);
  EXPECT_EQ(cachalot_malloc(a_, &p, std::size_t{2} << 30, nullptr), CACHALOT_ERROR_OUT_OF_MEMORY);
  const cachalot_stats after = stats();
  EXPECT_EQ(after.requested_bytes.all.current, before.requested_bytes.all.current);
  EXPECT_EQ(after.allocated_bytes.all.current, before.allocated_bytes.all.current);
  EXPECT_EQ(after.reserved_bytes.all.current, before.reserved_bytes.all.current);
  EXPECT_EQ(after.num_ooms, 2u);
  EXPECT_EQ(cachalot_malloc(a_, &p, 100, nullptr), CACHALOT_SUCCESS);
  EXPECT_EQ(cachalot_free(a_, p, nullptr), CACHALOT_SUCCESS);
  EXPECT_EQ(cachalot_free(a_, keep, nullptr), CACHALOT_SUCCESS);
}

TEST_F(c_api, RecordStreamAndFreeOnAnotherStream) {
  void* p = nullptr;
  void* s1 = reinterpret_cast<void*>(0x100);
  void* s2 = reinterpret_cast<void*>(0x200);
  ASSERT_EQ(cachalot_malloc(a_, &p, 4096, s1), CACHALOT_SUCCESS);
  EXPECT_EQ(cachalot_record_stream(a_, p, s2), CACHALOT_SUCCESS);
  EXPECT_EQ(cachalot_free(a_, p, s1), CACHALOT_SUCCESS);
  const cachalot_stats s = stats();
  EXPECT_EQ(s.allocated_bytes.all.current, 0u);
  EXPECT_EQ(s.active_bytes.all.current, 4096u) << "awaiting stream 2's event";
}

TEST_F(c_api, TrimAndSummary) {
  void* p = nullptr;
  ASSERT_EQ(cachalot_malloc(a_, &p, 12u << 20, nullptr), CACHALOT_SUCCESS);
  ASSERT_EQ(cachalot_free(a_, p, nullptr), CACHALOT_SUCCESS);
  EXPECT_EQ(cachalot_trim(a_, 0), CACHALOT_SUCCESS);
  EXPECT_EQ(stats().reserved_bytes.all.current, 0u);
  std::size_t needed = 0;
  EXPECT_EQ(cachalot_memory_summary(a_, nullptr, 0, &needed), CACHALOT_SUCCESS);
  EXPECT_GT(needed, 100u);
  std::vector<char> buf(needed);
  EXPECT_EQ(cachalot_memory_summary(a_, buf.data(), buf.size(), nullptr), CACHALOT_SUCCESS);
  EXPECT_EQ(std::string(buf.data()).size() + 1, needed);
  EXPECT_NE(std::string(buf.data()).find("Reserved memory"), std::string::npos);
  char tiny[8];
  EXPECT_EQ(cachalot_memory_summary(a_, tiny, sizeof tiny, nullptr), CACHALOT_SUCCESS);
  EXPECT_EQ(std::string(tiny).size(), 7u);
}

TEST(c_api_contract, SizedFreeIsCheckedInCheckedMode) {
  cachalot_allocator* a = nullptr;
  ASSERT_EQ(cachalot_create("backend:simulated,capacity:1GiB,debug:1", &a), CACHALOT_SUCCESS);
  void* p = nullptr;
  ASSERT_EQ(cachalot_malloc(a, &p, 1000, nullptr), CACHALOT_SUCCESS);
  EXPECT_EQ(cachalot_free_sized(a, p, 999, nullptr), CACHALOT_ERROR_INVALID_POINTER);
  EXPECT_NE(std::string(cachalot_last_error()).find("1000"), std::string::npos)
      << cachalot_last_error();
  cachalot_stats s{};
  s.size = sizeof s;
  ASSERT_EQ(cachalot_get_stats(a, &s), CACHALOT_SUCCESS);
  EXPECT_EQ(s.allocations.all.current, 1u);
  EXPECT_EQ(s.num_use_after_free_writes, 0u);
  EXPECT_EQ(cachalot_free_sized(a, p, 1000, nullptr), CACHALOT_SUCCESS);
  cachalot_destroy(a);
}

TEST(c_api_contract, BadConfigNamesTheKey) {
  cachalot_allocator* a = reinterpret_cast<cachalot_allocator*>(0x1);
  EXPECT_EQ(cachalot_create("capacity:lots", &a), CACHALOT_ERROR_INVALID_ARGUMENT);
  EXPECT_EQ(a, nullptr);
  EXPECT_NE(std::string(cachalot_last_error()).find("capacity"), std::string::npos);
  EXPECT_EQ(cachalot_create("frobnicate:1", &a), CACHALOT_ERROR_INVALID_ARGUMENT);
  EXPECT_NE(std::string(cachalot_last_error()).find("frobnicate"), std::string::npos);
  EXPECT_EQ(cachalot_create("backend:simulated", nullptr), CACHALOT_ERROR_INVALID_ARGUMENT);
}

TEST(c_api_contract, NullAndDefaultConfigs) {
  cachalot_allocator* a = nullptr;
  ASSERT_EQ(cachalot_create(nullptr, &a), CACHALOT_SUCCESS) << cachalot_last_error();
  cachalot_destroy(a);
  ASSERT_EQ(cachalot_create("", &a), CACHALOT_SUCCESS);
  cachalot_destroy(a);
  cachalot_destroy(nullptr);
}

TEST(c_api_contract, NullAllocatorIsAnInvalidArgument) {
  void* p = nullptr;
  cachalot_stats s{};
  s.size = sizeof s;
  EXPECT_EQ(cachalot_malloc(nullptr, &p, 10, nullptr), CACHALOT_ERROR_INVALID_ARGUMENT);
  EXPECT_NE(std::string(cachalot_last_error()).find("NULL"), std::string::npos);
  EXPECT_EQ(cachalot_free(nullptr, p, nullptr), CACHALOT_ERROR_INVALID_ARGUMENT);
  EXPECT_EQ(cachalot_record_stream(nullptr, p, nullptr), CACHALOT_ERROR_INVALID_ARGUMENT);
  EXPECT_EQ(cachalot_empty_cache(nullptr), CACHALOT_ERROR_INVALID_ARGUMENT);
  EXPECT_EQ(cachalot_trim(nullptr, 0), CACHALOT_ERROR_INVALID_ARGUMENT);
  EXPECT_EQ(cachalot_get_stats(nullptr, &s), CACHALOT_ERROR_INVALID_ARGUMENT);
  EXPECT_EQ(cachalot_reset_peak_stats(nullptr), CACHALOT_ERROR_INVALID_ARGUMENT);
  EXPECT_EQ(cachalot_memory_summary(nullptr, nullptr, 0, nullptr), CACHALOT_ERROR_INVALID_ARGUMENT);
}

TEST(c_api_contract, DestroyedHandleIsAnErrorNotACrash) {
  cachalot_allocator* a = nullptr;
  ASSERT_EQ(cachalot_create("backend:simulated,capacity:1GiB", &a), CACHALOT_SUCCESS);
  void* p = nullptr;
  ASSERT_EQ(cachalot_malloc(a, &p, 100, nullptr), CACHALOT_SUCCESS);
  cachalot_destroy(a);  // live allocation returned with the allocator
  EXPECT_EQ(cachalot_free(a, p, nullptr), CACHALOT_ERROR_INVALID_ARGUMENT);
  EXPECT_NE(std::string(cachalot_last_error()).find("destroyed"), std::string::npos);
  cachalot_destroy(a);  // a second destroy is a no-op
}

TEST(c_api_contract, StatusStringsAndPerThreadErrors) {
  EXPECT_STREQ(cachalot_status_string(CACHALOT_SUCCESS), "CACHALOT_SUCCESS");
  EXPECT_STREQ(cachalot_status_string(CACHALOT_ERROR_OUT_OF_MEMORY),
               "CACHALOT_ERROR_OUT_OF_MEMORY");
  EXPECT_STREQ(cachalot_status_string(CACHALOT_ERROR_NOT_SUPPORTED),
               "CACHALOT_ERROR_NOT_SUPPORTED");
  EXPECT_EQ(cachalot_create("bogus:1", nullptr), CACHALOT_ERROR_INVALID_ARGUMENT);
  const std::string mine = cachalot_last_error();
  std::thread([] { EXPECT_STREQ(cachalot_last_error(), ""); }).join();
  EXPECT_EQ(std::string(cachalot_last_error()), mine);
}

}  // namespace

namespace {

struct oom_state {
  cachalot_allocator* a;
  void* to_free;
  int calls;
};

extern "C" int free_and_retry(size_t bytes, void* stream, void* user_data) {
  auto* s = static_cast<oom_state*>(user_data);
  ++s->calls;
  if (bytes != (40u << 20) || stream != nullptr || s->to_free == nullptr) return 0;
  const int ok = cachalot_free(s->a, s->to_free, nullptr) == CACHALOT_SUCCESS;
  s->to_free = nullptr;
  return ok;
}

extern "C" int always_throws(size_t, void*, void*) {
  throw std::runtime_error("a C++ callback registered through the C API threw");
}

TEST(c_api_oom_callback, FreesAndRetriesThenRemoves) {
  cachalot_allocator* a = nullptr;
  ASSERT_EQ(cachalot_create("backend:simulated,capacity:64MiB", &a), CACHALOT_SUCCESS);
  oom_state s{a, nullptr, 0};
  ASSERT_EQ(cachalot_malloc(a, &s.to_free, 40u << 20, nullptr), CACHALOT_SUCCESS);
  ASSERT_EQ(cachalot_set_oom_callback(a, free_and_retry, &s, 2), CACHALOT_SUCCESS);
  void* p = nullptr;
  EXPECT_EQ(cachalot_malloc(a, &p, 40u << 20, nullptr), CACHALOT_SUCCESS) << cachalot_last_error();
  EXPECT_EQ(s.calls, 1);
  void* q = nullptr;
  EXPECT_EQ(cachalot_malloc(a, &q, 40u << 20, nullptr), CACHALOT_ERROR_OUT_OF_MEMORY);
  EXPECT_EQ(s.calls, 2) << "the callback said no: one call";
  ASSERT_EQ(cachalot_set_oom_callback(a, nullptr, nullptr, 0), CACHALOT_SUCCESS);
  EXPECT_EQ(cachalot_malloc(a, &q, 40u << 20, nullptr), CACHALOT_ERROR_OUT_OF_MEMORY);
  EXPECT_EQ(s.calls, 2);
  EXPECT_EQ(cachalot_free(a, p, nullptr), CACHALOT_SUCCESS);
  EXPECT_EQ(cachalot_set_oom_callback(nullptr, free_and_retry, &s, 1),
            CACHALOT_ERROR_INVALID_ARGUMENT);
  cachalot_destroy(a);
}

TEST(c_api_oom_callback, AnExceptionFromTheCallbackBecomesAStatus) {
  cachalot_allocator* a = nullptr;
  ASSERT_EQ(cachalot_create("backend:simulated,capacity:64MiB", &a), CACHALOT_SUCCESS);
  void* held = nullptr;
  ASSERT_EQ(cachalot_malloc(a, &held, 40u << 20, nullptr), CACHALOT_SUCCESS);
  ASSERT_EQ(cachalot_set_oom_callback(a, always_throws, nullptr, 4), CACHALOT_SUCCESS);
  void* p = reinterpret_cast<void*>(0x1);
  EXPECT_EQ(cachalot_malloc(a, &p, 40u << 20, nullptr), CACHALOT_ERROR_BACKEND);
  EXPECT_EQ(p, nullptr);
  EXPECT_NE(std::string(cachalot_last_error()).find("callback registered through the C API threw"),
            std::string::npos);
  cachalot_stats s{};
  s.size = sizeof s;
  ASSERT_EQ(cachalot_get_stats(a, &s), CACHALOT_SUCCESS);
  EXPECT_EQ(s.allocated_bytes.all.current, 40u << 20);
  EXPECT_EQ(cachalot_free(a, held, nullptr), CACHALOT_SUCCESS);
  cachalot_destroy(a);
}

TEST(c_api_version, MatchesTheHeader) {
  EXPECT_STREQ(cachalot_version(), CACHALOT_VERSION_STRING);
}

}  // namespace
