// The CUDA backend (driver API) and the allocator on a real GPU. Tests that need a device skip
// with the driver's reason where there is none (GTEST_SKIP "no CUDA device: ..."); the checks
// of a build without a device (backend_error with the cause named, automatic fallback to the
// simulated device) run everywhere. Tests that launch kernels also need nvcc at build time.
// The test itself uses the CUDA runtime for streams, kernels and checks (a runtime stream is a
// driver stream); the backend under test uses only the driver.
#include <cuda_runtime_api.h>
#include <gtest/gtest.h>

#include <atomic>
#include <chrono>
#include <cstdint>
#include <random>
#include <string>
#include <thread>
#include <vector>

#include "cachalot/cachalot.hpp"
#include "cachalot/cuda_backend.hpp"
#include "cuda_gpu_test.hpp"
#include "cuda_test_device.hpp"
#include "detail/cuda_driver.hpp"
#include "kernels.hpp"

namespace {

using cachalot::MiB;
using cachalot::testing::count_mismatches;
using cachalot::testing::fill_pattern;
using cachalot::testing::kernels_available;

// --- Everywhere -------------------------------------------------------------------------

TEST(CudaBuild, BackendIsBuiltIn) {
  EXPECT_TRUE(cachalot::cuda_backend_built());
}

TEST(CudaBuild, DeviceCountMatchesTheRuntimeWhereTheRuntimeWorks) {
  int n = 0;
  const cudaError_t err = cudaGetDeviceCount(&n);
  (void)cudaGetLastError();
  // Where this test's runtime is newer than the driver (cudaErrorInsufficientDriver) the
  // driver-API backend may still see devices: it needs only the driver.
  if (err == cudaSuccess) {
    EXPECT_EQ(cachalot::cuda_device_count(), n);
  }
  if (cachalot::cuda_device_count() == 0) {
    EXPECT_FALSE(cachalot::cuda_unavailable_reason().empty());
  } else {
    EXPECT_EQ(cachalot::cuda_unavailable_reason(), "");
    EXPECT_GE(cachalot::cuda_driver_version(), 11030);
  }
}

TEST(CudaBuild, MissingDeviceIsABackendErrorNamingTheCall) {
  EXPECT_THROW(cachalot::make_cuda_backend(-1), cachalot::backend_error);
  const int n = cachalot::cuda_device_count();
  try {
    cachalot::make_cuda_backend(n);  // one past the last device (device 0 where none)
    FAIL() << "make_cuda_backend(" << n << ") should throw";
  } catch (const cachalot::backend_error& e) {
    const std::string what = e.what();
    if (n == 0) {  // no driver or no device: the error says which
      EXPECT_TRUE(what.find("no CUDA driver") != std::string::npos ||
                  what.find("does not exist") != std::string::npos)
          << what;
      EXPECT_NE(what.find(cachalot::cuda_unavailable_reason()), std::string::npos) << what;
    } else {
      EXPECT_NE(what.find("does not exist"), std::string::npos) << what;
    }
    EXPECT_NE(std::string(e.file()).find("cuda_"), std::string::npos) << e.file();
    EXPECT_GT(e.line(), 0);
  }
}

TEST(CudaBuild, ExplicitCudaWithoutDeviceThrowsAndAutoFallsBack) {
  if (cachalot::cuda_device_count() != 0) GTEST_SKIP() << "a CUDA device is present";
  EXPECT_THROW(cachalot::allocator{cuda_config()}, cachalot::error);
  cachalot::config cfg;
  cfg.backend = cachalot::backend_kind::automatic;
  cfg.capacity = cachalot::GiB;
  cachalot::allocator a(cfg);
  EXPECT_EQ(a.backend().name(), "simulated");
}

// --- The backend on a GPU ---------------------------------------------------------------

TEST(CudaBackend, SegmentsEventsAndMemoryInfo) {
  REQUIRE_GPU();
  auto b = cachalot::make_cuda_backend(0);
  EXPECT_EQ(b->name(), "cuda");
  EXPECT_EQ(b->device(), 0);
  EXPECT_EQ(b->segment_alignment(), 256u);
  const auto info = b->memory_info();
  EXPECT_GT(info.total, 0u);
  EXPECT_LE(info.free, info.total);

  void* seg = b->allocate_segment(2 * MiB, nullptr);
  ASSERT_NE(seg, nullptr);
  EXPECT_EQ(reinterpret_cast<std::uintptr_t>(seg) % 256, 0u);
  stream_holder s;
  cachalot::event_t ev = b->create_event();
  b->record_event(ev, s.get());
  b->synchronize_event(ev);
  EXPECT_TRUE(b->query_event(ev));
  b->destroy_event(ev);
  b->synchronize_device();
  b->free_segment(seg, 2 * MiB);
  EXPECT_EQ(cudaGetLastError(), cudaSuccess);
}

TEST(CudaBackend, QueryOfUnfinishedWorkIsFalseAndLeavesNoError) {
  REQUIRE_KERNELS();
  auto b = cachalot::make_cuda_backend(0);
  stream_holder s;
  cachalot::testing::spin(50.0, s.get());
  cachalot::event_t ev = b->create_event();
  b->record_event(ev, s.get());
  EXPECT_FALSE(b->query_event(ev));
  EXPECT_EQ(cudaGetLastError(), cudaSuccess);
  b->synchronize_event(ev);
  EXPECT_TRUE(b->query_event(ev));
  b->destroy_event(ev);
}

TEST(CudaBackend, OutOfMemoryReturnsNullWithoutStickyError) {
  REQUIRE_GPU();
  auto b = cachalot::make_cuda_backend(0);
  const auto info = b->memory_info();
  EXPECT_EQ(b->allocate_segment(info.total * 2, nullptr), nullptr);
  EXPECT_EQ(cudaGetLastError(), cudaSuccess);
  void* seg = b->allocate_segment(MiB, nullptr);  // the device still works
  ASSERT_NE(seg, nullptr);
  b->free_segment(seg, MiB);
}

TEST(CudaBackend, ErrorsNameTheCallAndTheCudaError) {
  REQUIRE_GPU();
  auto b = cachalot::make_cuda_backend(0);
  int not_device_memory = 0;
  try {
    b->free_segment(&not_device_memory, sizeof not_device_memory);
    FAIL() << "cuMemFree of a host address should fail";
  } catch (const cachalot::backend_error& e) {
    const std::string what = e.what();
    EXPECT_NE(what.find("cuMemFree"), std::string::npos) << what;
    EXPECT_NE(what.find("CUDA_ERROR_"), std::string::npos) << what;
  }
  EXPECT_EQ(cudaGetLastError(), cudaSuccess);
}

TEST(CudaBackend, RestoresTheCallersCurrentDevice) {
  REQUIRE_GPU();
  const int n = cachalot::cuda_device_count();
  CUDA_OK(cudaSetDevice(n - 1));
  auto b = cachalot::make_cuda_backend(0);
  void* seg = b->allocate_segment(MiB, nullptr);
  ASSERT_NE(seg, nullptr);
  b->free_segment(seg, MiB);
  (void)b->memory_info();
  int current = -1;
  CUDA_OK(cudaGetDevice(&current));
  EXPECT_EQ(current, n - 1);
  CUDA_OK(cudaSetDevice(0));
}

// The context rule on a real driver: a thread that never chose a device has no current
// context after using the backend (issue 9 item 8: the runtime backend created one on GPU 0).
TEST(CudaBackend, AThreadWithoutAContextStillHasNone) {
  REQUIRE_GPU();
  namespace cu = cachalot::detail::cu;
  std::thread([] {
    const cu::driver_api& d = cu::driver();
    cu::CUcontext ctx = nullptr;
    ASSERT_EQ(d.CtxGetCurrent(&ctx), cu::kSuccess);
    ASSERT_EQ(ctx, nullptr) << "a new thread started with a context";
    auto b = cachalot::make_cuda_backend(0);
    void* seg = b->allocate_segment(MiB, nullptr);
    ASSERT_NE(seg, nullptr);
    cachalot::event_t ev = b->create_event();
    b->record_event(ev, nullptr);
    b->synchronize_event(ev);
    b->destroy_event(ev);
    (void)b->memory_info();
    (void)b->is_capturing(nullptr);
    b->free_segment(seg, MiB);
    ASSERT_EQ(d.CtxGetCurrent(&ctx), cu::kSuccess);
    EXPECT_EQ(ctx, nullptr) << "the backend left a context current";
  }).join();
}

// The virtual memory calls on a real device: chunks of 2 and 20 MiB mapped into a reserved
// range are written and read back by kernels, then unmapped and the range released.
TEST(CudaBackend, MappedChunksAreUsableByKernels) {
  REQUIRE_KERNELS();
  auto b = cachalot::make_cuda_backend(0);
  if (!b->supports_virtual_memory()) GTEST_SKIP() << "no virtual memory management on device 0";
  const std::size_t g = b->vm_granularity();
  EXPECT_GT(g, 0u);
  const std::size_t small = ((2 * MiB + g - 1) / g) * g;
  const std::size_t large = ((20 * MiB + g - 1) / g) * g;
  const std::size_t range_bytes = 4 * (small + large);
  char* range = static_cast<char*>(b->reserve_address_range(range_bytes));
  ASSERT_NE(range, nullptr);
  ASSERT_TRUE(b->map_chunk(range, small));
  ASSERT_TRUE(b->map_chunk(range + small, large));
  stream_holder s;
  fill_pattern(range, (small + large) / 4, 11, s.get());  // one kernel across both chunks
  mismatch_counter bad;
  count_mismatches(range, (small + large) / 4, 11, bad.d, s.get());
  EXPECT_EQ(bad.read(), 0u);
  CUDA_OK(cudaStreamSynchronize(s.s));
  EXPECT_THROW(b->unmap_chunk(range + small, small), cachalot::invalid_argument);
  b->unmap_chunk(range + small, large);
  b->unmap_chunk(range, small);
  b->release_address_range(range, range_bytes);
  EXPECT_EQ(cudaGetLastError(), cudaSuccess);
}

// Another thread captures in global mode; in this_thread mode this thread may still allocate
// (cuMemAlloc is "potentially unsafe", prohibited by default), and the capture stays valid.
TEST(CudaBackend, CaptureModeScopeAllowsAllocatingDuringAnotherThreadsGlobalCapture) {
  REQUIRE_KERNELS();
  auto b = cachalot::make_cuda_backend(0);
  stream_holder s;
  std::atomic<int> phase{0};
  cudaError_t end = cudaErrorUnknown;
  std::thread capturer([&] {
    (void)cudaSetDevice(0);
    if (cudaStreamBeginCapture(s.s, cudaStreamCaptureModeGlobal) != cudaSuccess) return;
    cachalot::testing::spin(1.0, s.get());
    phase = 1;
    while (phase.load() != 2) std::this_thread::yield();
    cudaGraph_t graph = nullptr;
    end = cudaStreamEndCapture(s.s, &graph);
    if (graph != nullptr) (void)cudaGraphDestroy(graph);
  });
  while (phase.load() != 1) std::this_thread::yield();
  void* p = nullptr;
  {
    const cachalot::capture_mode_scope scope(*b, cachalot::capture_mode::this_thread);
    EXPECT_NO_THROW(p = b->allocate_segment(MiB, nullptr));
  }
  phase = 2;
  capturer.join();
  EXPECT_EQ(end, cudaSuccess) << cudaGetErrorName(end) << ": the capture was invalidated";
  (void)cudaGetLastError();
  if (p != nullptr) b->free_segment(p, MiB);
}

TEST(CudaBackend, ReportsGraphCapture) {
  REQUIRE_GPU();
  auto b = cachalot::make_cuda_backend(0);
  stream_holder s;
  EXPECT_FALSE(b->is_capturing(s.get()));
  CUDA_OK(cudaStreamBeginCapture(s.s, cudaStreamCaptureModeThreadLocal));
  EXPECT_TRUE(b->is_capturing(s.get()));
  cudaGraph_t graph = nullptr;
  CUDA_OK(cudaStreamEndCapture(s.s, &graph));
  EXPECT_FALSE(b->is_capturing(s.get()));
  if (graph != nullptr) {
    CUDA_OK(cudaGraphDestroy(graph));
  }
}

// --- The allocator on a GPU -------------------------------------------------------------

TEST(CudaAllocator, LiveBlocksNeverOverlap) {
  REQUIRE_KERNELS();
  cachalot::allocator a(cuda_config(2 * cachalot::GiB));
  stream_holder s;
  std::mt19937 rng(42);
  std::uniform_int_distribution<std::size_t> words(1, MiB);  // up to 4 MiB per block
  struct live {
    void* p;
    std::size_t words;
    std::uint32_t seed;
  };
  std::vector<live> blocks;
  std::uint32_t seed = 1;
  for (int round = 0; round < 4; ++round) {
    while (blocks.size() < 150) {
      const std::size_t w = words(rng);
      void* p = a.allocate(w * 4, s.get());
      fill_pattern(p, w, seed, s.get());
      blocks.push_back({p, w, seed++});
    }
    mismatch_counter bad;
    for (const live& b : blocks) count_mismatches(b.p, b.words, b.seed, bad.d, s.get());
    ASSERT_EQ(bad.read(), 0u) << "a live block was overwritten (round " << round << ")";
    for (std::size_t i = 0; i < blocks.size(); i += 2) a.deallocate(blocks[i].p, s.get());
    std::vector<live> kept;
    for (std::size_t i = 1; i < blocks.size(); i += 2) kept.push_back(blocks[i]);
    blocks.swap(kept);
  }
  for (const live& b : blocks) a.deallocate(b.p, s.get());
  CUDA_OK(cudaStreamSynchronize(s.s));
  EXPECT_EQ(a.stats().allocations.all.current, 0u);
}

TEST(CudaAllocator, BlockRecordedOnABusyStreamIsNotReusedUntilItsWorkEnds) {
  REQUIRE_KERNELS();
  cachalot::allocator a(cuda_config(cachalot::GiB));
  stream_holder s1;
  stream_holder s2;
  void* p = a.allocate(MiB, s1.get());
  a.record_stream(p, s2.get());
  cachalot::testing::spin(50.0, s2.get());
  a.deallocate(p, s1.get());
  ASSERT_EQ(cudaStreamQuery(s2.s), cudaErrorNotReady) << "spin kernel ended too early";
  (void)cudaGetLastError();
  void* q = a.allocate(MiB, s1.get());
  const cudaError_t still_running = cudaStreamQuery(s2.s);
  (void)cudaGetLastError();
  if (still_running == cudaErrorNotReady) {
    EXPECT_NE(q, p) << "block reused while the recorded stream still runs";
  }
  CUDA_OK(cudaStreamSynchronize(s2.s));
  a.process_events();
  a.deallocate(q, s1.get());
  void* r = a.allocate(MiB, s1.get());  // after the work ended the block is reusable again
  EXPECT_NE(r, nullptr);
  a.deallocate(r, s1.get());
}

TEST(CudaAllocator, FreeOnABusyOtherStreamDefersReuse) {
  REQUIRE_KERNELS();
  cachalot::allocator a(cuda_config(cachalot::GiB));
  stream_holder s1;
  stream_holder s2;
  void* p = a.allocate(4 * MiB, s1.get());
  cachalot::testing::spin(50.0, s2.get());
  a.deallocate(p, s2.get());
  void* q = a.allocate(4 * MiB, s1.get());
  const cudaError_t still_running = cudaStreamQuery(s2.s);
  (void)cudaGetLastError();
  if (still_running == cudaErrorNotReady) {
    EXPECT_NE(q, p);
  }
  CUDA_OK(cudaStreamSynchronize(s2.s));
  a.deallocate(q, s1.get());
}

TEST(CudaAllocator, ManyThreadsManyStreams) {
  REQUIRE_KERNELS();
  cachalot::allocator a(cuda_config(4 * cachalot::GiB));
  constexpr int kThreads = 8;
  constexpr int kIters = 400;
  std::atomic<unsigned long long> total_bad{0};
  std::atomic<int> errors{0};
  std::vector<std::thread> threads;
  for (int t = 0; t < kThreads; ++t) {
    threads.emplace_back([&, t] {
      try {
        if (cudaSetDevice(0) != cudaSuccess) throw std::runtime_error("cudaSetDevice");
        stream_holder s;
        mismatch_counter bad;
        std::mt19937 rng(static_cast<unsigned>(t));
        std::uniform_int_distribution<std::size_t> words(1, 256 * 1024);
        struct live {
          void* p;
          std::size_t words;
          std::uint32_t seed;
        };
        std::vector<live> blocks;
        for (int i = 0; i < kIters; ++i) {
          const std::size_t w = words(rng);
          const auto seed = static_cast<std::uint32_t>(t * 100000 + i);
          void* p = a.allocate(w * 4, s.get());
          fill_pattern(p, w, seed, s.get());
          blocks.push_back({p, w, seed});
          if (blocks.size() > 24) {
            const std::size_t k = rng() % blocks.size();
            count_mismatches(blocks[k].p, blocks[k].words, blocks[k].seed, bad.d, s.get());
            a.deallocate(blocks[k].p, s.get());
            blocks.erase(blocks.begin() + static_cast<std::ptrdiff_t>(k));
          }
        }
        for (const live& b : blocks) {
          count_mismatches(b.p, b.words, b.seed, bad.d, s.get());
          a.deallocate(b.p, s.get());
        }
        total_bad += bad.read();
      } catch (const std::exception& e) {
        ADD_FAILURE() << "thread " << t << ": " << e.what();
        errors.fetch_add(1);
      }
    });
  }
  for (auto& th : threads) th.join();
  EXPECT_EQ(errors.load(), 0);
  EXPECT_EQ(total_bad.load(), 0u) << "some block was written by two owners";
  EXPECT_EQ(a.stats().allocations.all.current, 0u);
}

TEST(CudaAllocator, OutOfMemoryAtTheMemoryLimit) {
  REQUIRE_GPU();
  const std::size_t limit = 256 * MiB;
  cachalot::allocator a(cuda_config(limit));
  std::vector<void*> blocks;
  bool hit = false;
  for (int i = 0; i < 64 && !hit; ++i) {
    try {
      blocks.push_back(a.allocate(32 * MiB));
    } catch (const cachalot::out_of_memory& e) {
      hit = true;
      EXPECT_EQ(e.info().memory_limit, limit);
      EXPECT_EQ(e.info().requested_bytes, 32 * MiB);
      EXPECT_LE(e.info().reserved_bytes, limit);
    }
  }
  ASSERT_TRUE(hit) << "no out_of_memory below a 256 MiB limit";
  EXPECT_LE(blocks.size() * 32 * MiB, limit);
  EXPECT_GE(a.stats().num_ooms, 1u);
  EXPECT_LE(a.stats().reserved_bytes.all.current, limit);
  EXPECT_EQ(cudaGetLastError(), cudaSuccess);
  for (void* p : blocks) a.deallocate(p);
  void* again = a.allocate(32 * MiB);  // usable again once memory was returned
  EXPECT_NE(again, nullptr);
  a.deallocate(again);
}

TEST(CudaAllocator, GraphCaptureNeverBreaksTheCapture) {
  REQUIRE_KERNELS();
  cachalot::allocator a(cuda_config(cachalot::GiB));
  stream_holder s;
  a.deallocate(a.allocate(MiB, s.get()), s.get());  // warm: one cached block on s
  CUDA_OK(cudaStreamSynchronize(s.s));

  CUDA_OK(cudaStreamBeginCapture(s.s, cudaStreamCaptureModeGlobal));
  void* cached = nullptr;
  EXPECT_NO_THROW(cached = a.allocate(MiB, s.get())) << "a cache hit must work under capture";
  if (cached != nullptr) {
    fill_pattern(cached, MiB / 4, 7, s.get());
    a.deallocate(cached, s.get());
  }
  // A miss needs a new segment: the allocator refuses (not_supported) instead of calling
  // cudaMalloc into the capture, which would invalidate it.
  EXPECT_THROW((void)a.allocate(64 * MiB, s.get()), cachalot::not_supported);
  cudaGraph_t graph = nullptr;
  const cudaError_t end = cudaStreamEndCapture(s.s, &graph);
  EXPECT_EQ(end, cudaSuccess) << cudaGetErrorName(end) << ": the capture was invalidated";
  (void)cudaGetLastError();
  if (end == cudaSuccess && graph != nullptr) {
    cudaGraphExec_t exec = nullptr;
    CUDA_OK(cudaGraphInstantiate(&exec, graph, 0));
    CUDA_OK(cudaGraphLaunch(exec, s.s));
    CUDA_OK(cudaStreamSynchronize(s.s));
    CUDA_OK(cudaGraphExecDestroy(exec));
    CUDA_OK(cudaGraphDestroy(graph));
  }
  a.empty_cache();
}

TEST(CudaAllocator, DefaultConfigUsesTheGpu) {
  REQUIRE_GPU();
  cachalot::config cfg;  // backend auto
  cachalot::allocator a(cfg);
  EXPECT_EQ(a.backend().name(), "cuda");
  void* p = a.allocate(1000);
  cudaPointerAttributes attr{};
  CUDA_OK(cudaPointerGetAttributes(&attr, p));
  EXPECT_EQ(attr.type, cudaMemoryTypeDevice);
  a.deallocate(p);
}

// --- Several GPUs -----------------------------------------------------------------------

TEST(CudaMultiGpu, EachAllocatorServesItsDeviceFromAnyCurrentDevice) {
  REQUIRE_GPU();
  const int n = cachalot::cuda_device_count();
  if (n < 2) GTEST_SKIP() << "needs 2 CUDA devices, found " << n;
  CUDA_OK(cudaSetDevice(0));
  std::vector<std::unique_ptr<cachalot::allocator>> allocs;
  for (int d = 0; d < n; ++d) {
    allocs.push_back(std::make_unique<cachalot::allocator>(cuda_config(cachalot::GiB, d)));
  }
  for (int d = 0; d < n; ++d) {
    void* p = allocs[static_cast<std::size_t>(d)]->allocate(3 * MiB);
    cudaPointerAttributes attr{};
    CUDA_OK(cudaPointerGetAttributes(&attr, p));
    EXPECT_EQ(attr.device, d);
    int current = -1;
    CUDA_OK(cudaGetDevice(&current));
    EXPECT_EQ(current, 0) << "the allocator of device " << d << " changed the current device";
    allocs[static_cast<std::size_t>(d)]->deallocate(p);
    allocs[static_cast<std::size_t>(d)]->empty_cache();
  }
}

// The conformance hook: a cuda_test_device holds and releases streams like the simulated one.
TEST(CudaTestDevice, HoldAndReleaseAStream) {
  std::string why;
  auto dev = cachalot::testing::cuda_test_device::create(0, &why);
  if (dev == nullptr) GTEST_SKIP() << why;
  if (!dev->can_hold()) GTEST_SKIP() << "test kernels not built (no nvcc)";
  auto b = dev->backend();
  cachalot::stream_t s = dev->new_stream();
  dev->hold_stream(s);
  cachalot::event_t ev = b->create_event();
  b->record_event(ev, s);
  std::this_thread::sleep_for(std::chrono::milliseconds(20));
  EXPECT_FALSE(b->query_event(ev));
  dev->release_stream(s);
  EXPECT_TRUE(b->query_event(ev));
  b->destroy_event(ev);
}

}  // namespace
