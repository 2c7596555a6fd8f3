// The framework hooks (cachalot/hooks.h) through libcachalot.so, as PyTorch and CuPy call them.
// Two modes, chosen by the environment before the first hook call creates a default allocator:
//  - simulated (default): CACHALOT_CONF defaults to a simulated device, so this runs anywhere;
//  - GPU: CACHALOT_TEST_HOOKS_GPU=1 with CACHALOT_CONF=backend:cuda; streams are real and
//    memory is written through the CUDA runtime. Skips (visibly) where there is no GPU.
#include <gtest/gtest.h>

#include <atomic>
#include <cstdint>
#include <cstdlib>
#include <cstring>
#include <string>
#include <thread>
#include <vector>

#include "cachalot/cachalot.h"
#include "cachalot/hooks.h"

#ifdef CACHALOT_WITH_CUDA
#include <cuda_runtime_api.h>
#endif

namespace {

bool gpu_mode() {
  const char* v = std::getenv("CACHALOT_TEST_HOOKS_GPU");
  return v != nullptr && std::strcmp(v, "1") == 0;
}

// Before main(): the simulated default unless the environment chose already.
const bool g_env_ready = [] {
  if (!gpu_mode()) setenv("CACHALOT_CONF", "backend:simulated,capacity:8GiB", 0);
  return true;
}();

std::string gpu_skip_reason() {
#ifdef CACHALOT_WITH_CUDA
  int n = 0;
  const cudaError_t err = cudaGetDeviceCount(&n);
  if (err != cudaSuccess) {
    (void)cudaGetLastError();
    return std::string("no CUDA device: ") + cudaGetErrorName(err) + " (" +
           cudaGetErrorString(err) + ")";
  }
  return n == 0 ? "no CUDA device: none visible" : "";
#else
  return "no CUDA device: this build has no CUDA support";
#endif
}

class Hooks : public ::testing::Test {
 protected:
  void SetUp() override {
    ASSERT_TRUE(g_env_ready);
    if (gpu_mode()) {
      const std::string why = gpu_skip_reason();
      if (!why.empty()) GTEST_SKIP() << why;
    }
  }
  void TearDown() override {
#ifdef CACHALOT_WITH_CUDA
    for (void* s : streams_) (void)cudaStreamDestroy(static_cast<cudaStream_t>(s));
#endif
  }
  // A stream handle: a real stream on a GPU, a distinct fake handle on the simulated device.
  void* make_stream() {
#ifdef CACHALOT_WITH_CUDA
    if (gpu_mode()) {
      cudaStream_t s = nullptr;
      EXPECT_EQ(cudaStreamCreateWithFlags(&s, cudaStreamNonBlocking), cudaSuccess);
      streams_.push_back(s);
      return s;
    }
#endif
    static std::atomic<std::uintptr_t> next{0x1000};
    return reinterpret_cast<void*>(next.fetch_add(0x10));
  }
  static cachalot_stats stats(int device = 0) {
    cachalot_stats s{};
    s.size = sizeof s;
    EXPECT_EQ(cachalot_default_get_stats(device, &s), CACHALOT_SUCCESS) << cachalot_last_error();
    return s;
  }
  std::vector<void*> streams_;
};

TEST_F(Hooks, TorchMallocFreeRoundTrip) {
  const cachalot_stats before = stats();
  void* p = cachalot_torch_malloc(1000, 0, nullptr);
  ASSERT_NE(p, nullptr) << cachalot_last_error();
  const cachalot_stats during = stats();
  EXPECT_EQ(during.allocations.all.current, before.allocations.all.current + 1);
  EXPECT_GE(during.allocated_bytes.all.current, before.allocated_bytes.all.current + 1000);
  EXPECT_GE(during.requested_bytes.all.current, before.requested_bytes.all.current + 1000);
#ifdef CACHALOT_WITH_CUDA
  if (gpu_mode()) {  // the memory is real device memory
    ASSERT_EQ(cudaMemset(p, 0x5a, 1000), cudaSuccess);
    std::vector<unsigned char> host(1000);
    ASSERT_EQ(cudaMemcpy(host.data(), p, 1000, cudaMemcpyDeviceToHost), cudaSuccess);
    EXPECT_EQ(host[0], 0x5a);
    EXPECT_EQ(host[999], 0x5a);
  }
#endif
  cachalot_torch_free(p, 1000, 0, nullptr);
  EXPECT_EQ(stats().allocations.all.current, before.allocations.all.current);
}

TEST_F(Hooks, SizeZeroAndNullAreHarmless) {
  EXPECT_EQ(cachalot_torch_malloc(0, 0, nullptr), nullptr);
  cachalot_torch_free(nullptr, 0, 0, nullptr);
  cachalot_cupy_free(nullptr, nullptr, 0);
}

TEST_F(Hooks, ForeignPointerSetsLastErrorAndChangesNothing) {
  const cachalot_stats before = stats();
  int local = 0;
  cachalot_torch_free(&local, sizeof local, 0, nullptr);
  EXPECT_NE(std::strstr(cachalot_last_error(), "cachalot_torch_free"), nullptr)
      << cachalot_last_error();
  cachalot_torch_record_stream(&local, nullptr);
  EXPECT_NE(std::strstr(cachalot_last_error(), "cachalot_torch_record_stream"), nullptr);
  const cachalot_stats after = stats();
  EXPECT_EQ(after.allocations.all.current, before.allocations.all.current);
  EXPECT_EQ(after.num_frees, before.num_frees);
}

TEST_F(Hooks, FreeWithTheWrongDeviceFindsTheOwner) {
  if (gpu_mode()) GTEST_SKIP() << "needs a second device; covered on the simulated device";
  void* p = cachalot_torch_malloc(4096, 1, nullptr);
  ASSERT_NE(p, nullptr) << cachalot_last_error();
  EXPECT_EQ(stats(1).allocations.all.current, 1u);
  cachalot_torch_free(p, 4096, 0, nullptr);
  EXPECT_EQ(stats(1).allocations.all.current, 0u);
}

TEST_F(Hooks, RecordStreamAndFreeOnAnotherStream) {
  void* s1 = make_stream();
  void* s2 = make_stream();
  const cachalot_stats before = stats();
  void* p = cachalot_torch_malloc(1 << 20, 0, s1);
  ASSERT_NE(p, nullptr) << cachalot_last_error();
  cachalot_torch_record_stream(p, s2);
  cachalot_torch_free(p, 1 << 20, 0, s1);
  void* q = cachalot_torch_malloc(1 << 20, 0, s2);
  ASSERT_NE(q, nullptr);
  cachalot_torch_free(q, 1 << 20, 0, s1);  // freed on a stream other than its own: deferred
  EXPECT_EQ(stats().allocations.all.current, before.allocations.all.current);
}

TEST_F(Hooks, OutOfMemoryReturnsNullWithTheNumbers) {
  const cachalot_stats before = stats();
  void* p = cachalot_torch_malloc(std::size_t{1} << 50, 0, nullptr);  // 1 PiB
  EXPECT_EQ(p, nullptr);
  EXPECT_NE(std::strlen(cachalot_last_error()), 0u);
  const cachalot_stats after = stats();
  EXPECT_EQ(after.num_ooms, before.num_ooms + 1);
  EXPECT_EQ(after.allocated_bytes.all.current, before.allocated_bytes.all.current);
  void* ok = cachalot_torch_malloc(512, 0, nullptr);  // still usable
  EXPECT_NE(ok, nullptr);
  cachalot_torch_free(ok, 512, 0, nullptr);
}

TEST_F(Hooks, EmptyCacheReturnsCachedSegments) {
  void* p = cachalot_torch_malloc(3 << 20, 0, nullptr);
  ASSERT_NE(p, nullptr);
  cachalot_torch_free(p, 3 << 20, 0, nullptr);
  EXPECT_GT(stats().reserved_bytes.all.current, 0u);
  cachalot_torch_empty_cache();
  EXPECT_EQ(stats().reserved_bytes.all.current, 0u);
}

TEST_F(Hooks, CupyMallocFree) {
  const cachalot_stats before = stats();
  void* p = cachalot_cupy_malloc(nullptr, 12345, 0);
  ASSERT_NE(p, nullptr) << cachalot_last_error();
  EXPECT_EQ(stats().allocations.all.current, before.allocations.all.current + 1);
  cachalot_cupy_free(nullptr, p, 0);
  EXPECT_EQ(stats().allocations.all.current, before.allocations.all.current);
}

TEST_F(Hooks, InvalidDeviceFailsCleanly) {
  EXPECT_EQ(cachalot_torch_malloc(16, -1, nullptr), nullptr);
  EXPECT_NE(std::strlen(cachalot_last_error()), 0u);
  EXPECT_EQ(cachalot_cupy_malloc(nullptr, 16, 1 << 20), nullptr);
  cachalot_stats s{};
  s.size = sizeof s;
  EXPECT_EQ(cachalot_default_get_stats(-1, &s), CACHALOT_ERROR_INVALID_ARGUMENT);
  EXPECT_EQ(cachalot_default_get_stats(0, nullptr), CACHALOT_ERROR_INVALID_ARGUMENT);
}

TEST_F(Hooks, MemorySummaryFollowsTheCApiContract) {
  size_t needed = 0;
  ASSERT_EQ(cachalot_default_memory_summary(0, nullptr, 0, &needed), CACHALOT_SUCCESS);
  ASSERT_GT(needed, 1u);
  std::vector<char> full(needed);
  size_t again = 0;
  ASSERT_EQ(cachalot_default_memory_summary(0, full.data(), full.size(), &again), CACHALOT_SUCCESS);
  EXPECT_EQ(again, needed);
  EXPECT_EQ(std::strlen(full.data()), needed - 1);
  char small[8];
  ASSERT_EQ(cachalot_default_memory_summary(0, small, sizeof small, nullptr), CACHALOT_SUCCESS);
  EXPECT_EQ(std::strlen(small), sizeof small - 1);
  EXPECT_EQ(std::strncmp(small, full.data(), sizeof small - 1), 0);
  EXPECT_EQ(cachalot_default_memory_summary(0, nullptr, 4, nullptr),
            CACHALOT_ERROR_INVALID_ARGUMENT);
}

TEST_F(Hooks, ManyThreadsOnTheirOwnStreams) {
  constexpr int kThreads = 8;
  constexpr int kIters = 500;
  std::vector<void*> streams;
  for (int t = 0; t < kThreads; ++t) streams.push_back(make_stream());
  const cachalot_stats before = stats();
  std::atomic<int> failures{0};
  std::vector<std::thread> threads;
  for (int t = 0; t < kThreads; ++t) {
    threads.emplace_back([&, t] {
      std::vector<void*> live;
      for (int i = 0; i < kIters; ++i) {
        const size_t size = 512u * static_cast<size_t>(1 + (i * 7 + t) % 64);
        void* p = cachalot_torch_malloc(size, 0, streams[static_cast<size_t>(t)]);
        if (p == nullptr) {
          failures.fetch_add(1);
          continue;
        }
        live.push_back(p);
        if (live.size() > 16) {
          cachalot_torch_free(live.front(), 0, 0, streams[static_cast<size_t>(t)]);
          live.erase(live.begin());
        }
      }
      for (void* p : live) cachalot_torch_free(p, 0, 0, streams[static_cast<size_t>(t)]);
    });
  }
  for (auto& th : threads) th.join();
  EXPECT_EQ(failures.load(), 0);
  EXPECT_EQ(stats().allocations.all.current, before.allocations.all.current);
}

}  // namespace
