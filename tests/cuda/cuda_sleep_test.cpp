// Tenant pools that sleep and wake on a GPU (CUDA backend, expandable segments): the round trip
// scripts/gpu-check.sh runs (step "CUDA backend and allocator"). A kernel writes a tenant pool's
// buffers, a CUDA graph that reads one and writes the other is captured, the pool sleeps with
// its contents offloaded to pinned host memory and gives its device memory back, another tenant
// fills the device (so the physical memory behind the sleeping pool's addresses is reused), a
// wake under that pressure fails with out_of_memory and leaves the pool asleep, the other
// tenant frees, the wake maps new memory at the same addresses and copies the contents back, a
// kernel finds them intact, and the graph replays on them. Skips with the reason without a
// device, without test kernels (no nvcc) or without virtual memory management.
#include <cuda_runtime_api.h>
#include <gtest/gtest.h>

#include <cstddef>
#include <vector>

#include "cachalot/cachalot.hpp"
#include "cuda_gpu_test.hpp"
#include "kernels.hpp"

namespace {

using cachalot::GiB;
using cachalot::MiB;
using cachalot::testing::count_mismatches;
using cachalot::testing::fill_pattern;

TEST(CudaSleep, OffloadRoundTripKeepsContentsAndGraphsWhileAnotherTenantFillsTheDevice) {
  REQUIRE_KERNELS();
  cachalot::config cfg = cuda_config();
  cfg.expandable_segments = true;
  cachalot::allocator a(cfg);
  if (!a.backend().supports_virtual_memory()) {
    GTEST_SKIP() << "no virtual memory management on device 0 (expandable segments)";
  }
  cachalot::pool_options o;
  o.name = "batch";
  o.priority = -1;
  const cachalot::pool_id batch = a.create_pool(o);
  o.name = "critical";
  o.priority = 1;
  const cachalot::pool_id critical = a.create_pool(o);

  stream_holder s;
  const std::size_t bytes = 96 * MiB;
  const std::size_t words = bytes / 4;
  void* in = a.allocate(bytes, s.get(), batch);
  void* out = a.allocate(bytes, s.get(), batch);
  fill_pattern(in, words, 21, s.get());

  // The graph, captured before the sleep: checks `in`, writes `out`.
  mismatch_counter graph_bad;
  cudaGraph_t graph = nullptr;
  cudaGraphExec_t exec = nullptr;
  CUDA_OK(cudaStreamBeginCapture(s.s, cudaStreamCaptureModeGlobal));
  count_mismatches(in, words, 21, graph_bad.d, s.get());
  fill_pattern(out, words, 33, s.get());
  CUDA_OK(cudaStreamEndCapture(s.s, &graph));
  CUDA_OK(cudaGraphInstantiate(&exec, graph, 0));
  CUDA_OK(cudaStreamSynchronize(s.s));

  std::size_t free_before = 0;
  std::size_t total = 0;
  CUDA_OK(cudaMemGetInfo(&free_before, &total));
  ASSERT_TRUE(a.sleep(batch, cachalot::sleep_mode::offload));
  EXPECT_EQ(a.stats(batch).reserved_bytes.all.current, 0u);
  EXPECT_GE(a.stats(batch).sleep.bytes_offloaded, 2 * bytes);
  std::size_t free_asleep = 0;
  CUDA_OK(cudaMemGetInfo(&free_asleep, &total));
  EXPECT_GE(free_asleep, free_before + 2 * bytes) << "the sleep gave the device memory back";

  // The other tenant takes the whole device, in 1 GiB, then 64 MiB, then 2 MiB blocks, until
  // out of memory: less than the sleeping pool's bytes stays free.
  std::vector<void*> taken;
  for (const std::size_t block : {GiB, 64 * MiB, 2 * MiB}) {
    for (int i = 0; i < 4096; ++i) {
      try {
        taken.push_back(a.allocate(block, s.get(), critical));
      } catch (const cachalot::out_of_memory&) {
        break;
      }
    }
  }
  ASSERT_FALSE(taken.empty());
  EXPECT_GE(a.stats(critical).allocated_bytes.all.current + 2 * bytes, free_asleep)
      << "the device was not filled";
  EXPECT_THROW((void)a.wake(batch), cachalot::out_of_memory);
  EXPECT_TRUE(a.pools()[batch].asleep) << "a failed wake leaves the pool asleep";
  for (void* p : taken) a.deallocate(p, s.get());
  CUDA_OK(cudaStreamSynchronize(s.s));

  ASSERT_TRUE(a.wake(batch)) << "the wake takes the other tenant's cached memory back";
  mismatch_counter bad;
  count_mismatches(in, words, 21, bad.d, s.get());
  EXPECT_EQ(bad.read(), 0u) << "offloaded contents came back at the same addresses";
  CUDA_OK(cudaGraphLaunch(exec, s.s));
  CUDA_OK(cudaStreamSynchronize(s.s));
  EXPECT_EQ(graph_bad.read(), 0u) << "the graph captured before the sleep read the contents";
  mismatch_counter out_bad;
  count_mismatches(out, words, 33, out_bad.d, s.get());
  EXPECT_EQ(out_bad.read(), 0u) << "the graph wrote the woken pool's memory";
  EXPECT_EQ(a.stats(batch).sleep.num_wakes, 1u);
  EXPECT_EQ(cudaGetLastError(), cudaSuccess);

  CUDA_OK(cudaGraphExecDestroy(exec));
  CUDA_OK(cudaGraphDestroy(graph));
  a.deallocate(in, s.get());
  a.deallocate(out, s.get());
  CUDA_OK(cudaStreamSynchronize(s.s));
  a.empty_cache();
}

}  // namespace
