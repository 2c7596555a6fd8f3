// The C contract under misuse: a NULL or destroyed allocator, double and interior frees, and
// checked mode through a config string each give their documented status and a message, and
// leave the allocator working. A destroyed handle is a tombstone, so a stale call is an error,
// never a use of freed memory (ASan builds prove the second half).
#include <gtest/gtest.h>

#include <string>

#include "cachalot/cachalot.h"

namespace {

std::string last() {
  return cachalot_last_error();
}

cachalot_allocator* make(const char* conf) {
  cachalot_allocator* a = nullptr;
  EXPECT_EQ(cachalot_create(conf, &a), CACHALOT_SUCCESS) << last();
  return a;
}

TEST(c_api_misuse, EveryCallOnADestroyedHandleIsAnError) {
  cachalot_allocator* a = make("backend:simulated,capacity:1GiB");
  void* p = nullptr;
  ASSERT_EQ(cachalot_malloc(a, &p, 4096, nullptr), CACHALOT_SUCCESS);
  cachalot_destroy(a);
  EXPECT_EQ(cachalot_free(a, p, nullptr), CACHALOT_ERROR_INVALID_ARGUMENT);
  EXPECT_EQ(last(), "cachalot_free: allocator was destroyed (or is not an allocator)");
  void* q = &q;
  EXPECT_EQ(cachalot_malloc(a, &q, 16, nullptr), CACHALOT_ERROR_INVALID_ARGUMENT);
  EXPECT_EQ(q, nullptr);
  EXPECT_EQ(cachalot_record_stream(a, p, nullptr), CACHALOT_ERROR_INVALID_ARGUMENT);
  EXPECT_EQ(cachalot_empty_cache(a), CACHALOT_ERROR_INVALID_ARGUMENT);
  EXPECT_EQ(cachalot_trim(a, 0), CACHALOT_ERROR_INVALID_ARGUMENT);
  cachalot_stats s{};
  s.size = sizeof s;
  EXPECT_EQ(cachalot_get_stats(a, &s), CACHALOT_ERROR_INVALID_ARGUMENT);
  EXPECT_EQ(cachalot_reset_peak_stats(a), CACHALOT_ERROR_INVALID_ARGUMENT);
  char buf[8];
  EXPECT_EQ(cachalot_memory_summary(a, buf, sizeof buf, nullptr), CACHALOT_ERROR_INVALID_ARGUMENT);
  EXPECT_EQ(last(), "cachalot_memory_summary: allocator was destroyed (or is not an allocator)");
  cachalot_destroy(a);  // destroying twice is a no-op
}

TEST(c_api_misuse, NullAllocatorIsAnInvalidArgument) {
  void* p = nullptr;
  EXPECT_EQ(cachalot_malloc(nullptr, &p, 16, nullptr), CACHALOT_ERROR_INVALID_ARGUMENT);
  EXPECT_EQ(last(), "cachalot_malloc: allocator is NULL");
  EXPECT_EQ(cachalot_free(nullptr, &p, nullptr), CACHALOT_ERROR_INVALID_ARGUMENT);
  EXPECT_EQ(last(), "cachalot_free: allocator is NULL");
  cachalot_destroy(nullptr);
}

TEST(c_api_misuse, InvalidFreesAreReportedAndTheAllocatorKeepsWorking) {
  for (const char* conf : {"backend:simulated,capacity:1GiB",
                           "backend:simulated,capacity:1GiB,debug:1,host_backing:1"}) {
    cachalot_allocator* a = make(conf);
    void* p = nullptr;
    ASSERT_EQ(cachalot_malloc(a, &p, 4096, nullptr), CACHALOT_SUCCESS);
    EXPECT_EQ(cachalot_free(a, static_cast<char*>(p) + 8, nullptr), CACHALOT_ERROR_INVALID_POINTER);
    EXPECT_NE(last().find("is an interior pointer, 8 B into"), std::string::npos) << last();
    ASSERT_EQ(cachalot_free(a, p, nullptr), CACHALOT_SUCCESS);
    EXPECT_EQ(cachalot_free(a, p, nullptr), CACHALOT_ERROR_INVALID_POINTER);
    EXPECT_NE(last().find("is not a live allocation"), std::string::npos) << last();
    EXPECT_EQ(cachalot_record_stream(a, p, nullptr), CACHALOT_ERROR_INVALID_POINTER);
    cachalot_stats s{};
    s.size = sizeof s;
    ASSERT_EQ(cachalot_get_stats(a, &s), CACHALOT_SUCCESS);
    EXPECT_EQ(s.num_frees, 1u);
    EXPECT_EQ(s.allocated_bytes.all.current, 0u);
    void* q = nullptr;
    EXPECT_EQ(cachalot_malloc(a, &q, 4096, nullptr), CACHALOT_SUCCESS);
    EXPECT_EQ(q, p);
    EXPECT_EQ(cachalot_free(a, q, nullptr), CACHALOT_SUCCESS);
    cachalot_destroy(a);
  }
}

TEST(c_api_misuse, CheckedModeShowsInTheSummary) {
  cachalot_allocator* a = make("backend:simulated,capacity:1GiB,debug:1");
  std::size_t needed = 0;
  ASSERT_EQ(cachalot_memory_summary(a, nullptr, 0, &needed), CACHALOT_SUCCESS);
  std::string text(needed, '\0');
  ASSERT_EQ(cachalot_memory_summary(a, text.data(), text.size(), nullptr), CACHALOT_SUCCESS);
  EXPECT_NE(text.find("Checked mode: on; use-after-free writes detected: 0"), std::string::npos);
  cachalot_destroy(a);
}

}  // namespace
