// The TensorRT adapter against the real NvInfer.h (built only where TensorRT is installed), on
// the simulated device: size 0 gives nullptr, a bad alignment nullptr, a foreign free false,
// and allocations round-trip; no call throws.
#include <gtest/gtest.h>

#include <cstdint>

#include "cachalot/cachalot.hpp"
#include "cachalot/tensorrt_allocator.hpp"

namespace {

TEST(TensorRtAllocator, FollowsTheTensorRtContract) {
  cachalot::config cfg;
  cfg.backend = cachalot::backend_kind::simulated;
  cfg.capacity = cachalot::GiB;
  cachalot::allocator a(cfg);
  cachalot::tensorrt_allocator trt(a);
  nvinfer1::IGpuAsyncAllocator& iface = trt;
  auto* stream = reinterpret_cast<cudaStream_t>(std::uintptr_t{0x20});
  EXPECT_EQ(iface.allocateAsync(0, 256, 0, stream), nullptr);
  EXPECT_EQ(iface.allocateAsync(64, 3, 0, stream), nullptr);
  void* p = iface.allocateAsync(1 << 20, 256, 0, stream);
  ASSERT_NE(p, nullptr);
  EXPECT_EQ(reinterpret_cast<std::uintptr_t>(p) % 256, 0u);
  EXPECT_TRUE(iface.deallocateAsync(p, stream));
  int local = 0;
  EXPECT_FALSE(iface.deallocateAsync(&local, stream));
  EXPECT_EQ(iface.allocateAsync(std::uint64_t{1} << 50, 256, 0, stream), nullptr);
}

}  // namespace
