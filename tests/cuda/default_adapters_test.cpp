// Default allocators (cachalot/default.hpp) and the C++ adapters (thrust_allocator, and
// cuda_memory_resource where CCCL is available) on the simulated device, so that they run on
// every machine. The process environment selects the simulated device before first use.
#include <gtest/gtest.h>

#include <cstdint>
#include <cstdlib>
#include <set>
#include <thread>
#include <vector>

#include "cachalot/cachalot.hpp"
#include "cachalot/default.hpp"
#include "cachalot/thrust_allocator.hpp"

#if defined(CACHALOT_TEST_HAVE_CCCL)
#include <cuda_runtime_api.h>

#include "cachalot/cuda_mr.hpp"
#endif

namespace {

const bool g_env_ready = [] {
  setenv("CACHALOT_CONF", "backend:simulated,capacity:4GiB", 0);
  return true;
}();

cachalot::config simulated_config() {
  cachalot::config cfg;
  cfg.backend = cachalot::backend_kind::simulated;
  cfg.capacity = cachalot::GiB;
  return cfg;
}

TEST(DefaultAllocator, OnePerDeviceCreatedOnceAcrossThreads) {
  ASSERT_TRUE(g_env_ready);
  EXPECT_EQ(cachalot::default_allocator_if_created(7), nullptr);
  std::vector<cachalot::allocator*> seen(8, nullptr);
  std::vector<std::thread> threads;
  for (std::size_t t = 0; t < seen.size(); ++t) {
    threads.emplace_back([&seen, t] { seen[t] = &cachalot::default_allocator(7); });
  }
  for (auto& th : threads) th.join();
  for (cachalot::allocator* a : seen) EXPECT_EQ(a, seen.front());
  EXPECT_EQ(cachalot::default_allocator_if_created(7), seen.front());
  EXPECT_EQ(seen.front()->get_config().device, 7);
  EXPECT_NE(&cachalot::default_allocator(6), seen.front());
}

TEST(DefaultAllocator, RejectsOutOfRangeDevices) {
  EXPECT_THROW(cachalot::default_allocator(-1), cachalot::invalid_argument);
  EXPECT_THROW(cachalot::default_allocator(cachalot::max_default_devices),
               cachalot::invalid_argument);
  EXPECT_EQ(cachalot::default_allocator_if_created(-1), nullptr);
}

TEST(DefaultAllocator, FindsTheOwnerOfAPointer) {
  cachalot::allocator& a = cachalot::default_allocator(2);
  void* p = a.allocate(1000);
  EXPECT_EQ(cachalot::default_allocator_owning(p), &a);
  a.deallocate(p);
  EXPECT_EQ(cachalot::default_allocator_owning(p), nullptr);
  EXPECT_EQ(cachalot::default_allocator_owning(nullptr), nullptr);
}

TEST(DefaultAllocator, EmptyDefaultCachesReleasesEveryDevice) {
  cachalot::allocator& a = cachalot::default_allocator(3);
  a.deallocate(a.allocate(5 * cachalot::MiB));
  EXPECT_GT(a.stats().reserved_bytes.all.current, 0u);
  cachalot::empty_default_caches();
  EXPECT_EQ(a.stats().reserved_bytes.all.current, 0u);
}

TEST(ThrustAllocator, AllocatesAndFreesOnItsStream) {
  cachalot::allocator a(simulated_config());
  void* stream = reinterpret_cast<void*>(std::uintptr_t{0x40});
  cachalot::thrust_allocator t(a, stream);
  static_assert(std::is_same_v<cachalot::thrust_allocator::value_type, char>);
  char* p = t.allocate(1 << 16);
  ASSERT_NE(p, nullptr);
  EXPECT_TRUE(a.owns(p));
  const auto snap = a.snapshot();
  ASSERT_EQ(snap.segments.size(), 1u);
  EXPECT_EQ(snap.segments.front().stream, stream);
  t.deallocate(p, 1 << 16);
  EXPECT_FALSE(a.owns(p));
  EXPECT_EQ(t, cachalot::thrust_allocator(a, stream));
  EXPECT_NE(t, cachalot::thrust_allocator(a, nullptr));
  EXPECT_EQ(&t.underlying(), &a);
}

#if defined(CACHALOT_TEST_HAVE_CCCL)
TEST(CudaMemoryResource, BothCcclInterfacesWork) {
  cachalot::allocator a(simulated_config());
  cachalot::cuda_memory_resource mr(a);
  const ::cuda::stream_ref stream(reinterpret_cast<cudaStream_t>(std::uintptr_t{0x80}));

  void* p = mr.allocate(4096, 256);
  EXPECT_EQ(reinterpret_cast<std::uintptr_t>(p) % 256, 0u);
  mr.deallocate(p, 4096, 256);
  void* q = mr.allocate_async(4096, 256, stream);
  EXPECT_TRUE(a.owns(q));
  mr.deallocate_async(q, 4096, 256, stream);
  void* r = mr.allocate_sync(100, 512);
  mr.deallocate_sync(r, 100, 512);
  void* s = mr.allocate(stream, 100, 256);
  mr.deallocate(stream, s, 100, 256);
  EXPECT_EQ(a.stats().allocations.all.current, 0u);

  EXPECT_THROW(mr.allocate(64, 3), cachalot::invalid_argument);
  EXPECT_EQ(mr, cachalot::cuda_memory_resource(a, stream.get()));
  cachalot::allocator other(simulated_config());
  EXPECT_NE(mr, cachalot::cuda_memory_resource(other));
}
#endif

}  // namespace
