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

int only_this_stream(void* context, void* stream) {
  return stream == *static_cast<void**>(context);
}

// PyTorch's graph-pool hooks (capture_begin / capture_end / reset of torch.cuda.CUDAGraph). On
// the simulated device: routing, reuse inside the pool, isolation from eager work, sharing and
// release. On a GPU this is also the capture check: a cold capture grows the pool during a
// global-mode capture, eager work on another thread meanwhile keeps the capture valid, the
// graph replays with the right results, and eager work never received a pool block.
TEST_F(Hooks, TorchGraphPoolHooks) {
  void* s = make_stream();
  void* other = make_stream();
  const uint64_t id0 = 4242;  // PyTorch's MempoolId_t
  const cachalot_stats before = stats();
  ASSERT_EQ(cachalot_torch_begin_allocate_to_pool(0, id0, 0, only_this_stream, &s),
            CACHALOT_SUCCESS)
      << cachalot_last_error();
  [[maybe_unused]] const bool gpu = gpu_mode();
#ifdef CACHALOT_WITH_CUDA
  if (gpu) {
    ASSERT_EQ(cudaStreamBeginCapture(static_cast<cudaStream_t>(s), cudaStreamCaptureModeGlobal),
              cudaSuccess);
  }
#endif
  constexpr size_t out_size = 3 << 20;
  void* out = cachalot_torch_malloc(out_size, 0, s);  // cold: the pool grows (in the capture)
  ASSERT_NE(out, nullptr) << cachalot_last_error();
  void* tmp = cachalot_torch_malloc(1 << 20, 0, s);
  ASSERT_NE(tmp, nullptr) << cachalot_last_error();
#ifdef CACHALOT_WITH_CUDA
  if (gpu) {
    ASSERT_EQ(cudaMemsetAsync(tmp, 0x11, 1 << 20, static_cast<cudaStream_t>(s)), cudaSuccess);
    ASSERT_EQ(cudaMemsetAsync(out, 0x5a, out_size, static_cast<cudaStream_t>(s)), cudaSuccess);
  }
#endif
  cachalot_torch_free(tmp, 1 << 20, 0, s);  // freed in the capture: reused by the capture
  void* tmp2 = cachalot_torch_malloc(1 << 20, 0, s);
  EXPECT_EQ(tmp2, tmp);
  // Eager work meanwhile, on another stream and thread: never a pool block, never a broken
  // capture (its growth runs in relaxed mode; no event query, no free).
  std::vector<void*> eager;
  std::thread([&] {
    for (size_t n : {size_t{1} << 20, size_t{3} << 20, size_t{40} << 20}) {
      eager.push_back(cachalot_torch_malloc(n, 0, other));
    }
    cachalot_torch_empty_cache();
  }).join();
  for (void* e : eager) {
    ASSERT_NE(e, nullptr) << cachalot_last_error();
    EXPECT_NE(e, tmp);
    EXPECT_NE(e, out);
  }
#ifdef CACHALOT_WITH_CUDA
  cudaGraph_t graph = nullptr;
  if (gpu) {
    ASSERT_EQ(cudaStreamEndCapture(static_cast<cudaStream_t>(s), &graph), cudaSuccess)
        << "the capture was invalidated";
  }
#endif
  ASSERT_EQ(cachalot_torch_end_allocate_to_pool(0, id0, 0), CACHALOT_SUCCESS);
  cachalot_torch_free(tmp2, 1 << 20, 0, s);
#ifdef CACHALOT_WITH_CUDA
  if (gpu) {  // replay, then check what the graph wrote
    cudaGraphExec_t exec = nullptr;
    ASSERT_EQ(cudaGraphInstantiate(&exec, graph, 0), cudaSuccess);
    ASSERT_EQ(cudaMemset(out, 0, out_size), cudaSuccess);
    ASSERT_EQ(cudaGraphLaunch(exec, static_cast<cudaStream_t>(s)), cudaSuccess);
    ASSERT_EQ(cudaStreamSynchronize(static_cast<cudaStream_t>(s)), cudaSuccess);
    std::vector<unsigned char> host(out_size);
    ASSERT_EQ(cudaMemcpy(host.data(), out, out_size, cudaMemcpyDeviceToHost), cudaSuccess);
    EXPECT_EQ(host.front(), 0x5a);
    EXPECT_EQ(host.back(), 0x5a);
    (void)cudaGraphExecDestroy(exec);
    (void)cudaGraphDestroy(graph);
  }
#endif
  // After the capture, eager work on the capturing stream does not get the pool's free block.
  void* after = cachalot_torch_malloc(1 << 20, 0, s);
  ASSERT_NE(after, nullptr);
  EXPECT_NE(after, tmp);
  cachalot_torch_free(after, 1 << 20, 0, s);
  // A second graph shares the pool, then both are destroyed.
  ASSERT_EQ(cachalot_torch_begin_allocate_to_pool(0, id0, 0, nullptr, nullptr), CACHALOT_SUCCESS);
  void* again = cachalot_torch_malloc(1 << 20, 0, other);  // NULL filter: every stream
  EXPECT_NE(again, nullptr);
  cachalot_torch_free(again, 1 << 20, 0, other);
  ASSERT_EQ(cachalot_torch_end_allocate_to_pool(0, id0, 0), CACHALOT_SUCCESS);
  const cachalot_stats held = stats();
  ASSERT_EQ(cachalot_torch_release_pool(0, id0, 0), CACHALOT_SUCCESS);
  ASSERT_EQ(cachalot_torch_release_pool(0, id0, 0), CACHALOT_SUCCESS);  // the last reference
  EXPECT_EQ(cachalot_torch_release_pool(0, id0, 0), CACHALOT_ERROR_INVALID_ARGUMENT);
  EXPECT_EQ(cachalot_torch_end_allocate_to_pool(0, id0, 0), CACHALOT_ERROR_INVALID_ARGUMENT);
  EXPECT_LT(stats().reserved_bytes.all.current, held.reserved_bytes.all.current) << "the pool's free segments stayed";
  cachalot_torch_free(out, out_size, 0, s);  // the graph's output, kept by the user until now
  for (size_t i = 0; i < eager.size(); ++i) cachalot_torch_free(eager[i], 0, 0, other);
  cachalot_torch_empty_cache();
  EXPECT_EQ(stats().allocations.all.current, before.allocations.all.current);
}

}  // namespace
