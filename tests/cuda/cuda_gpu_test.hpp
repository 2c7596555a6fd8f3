// What the GPU GoogleTests share (cuda_backend_test.cpp, cuda_sleep_test.cpp): skipping with
// the reason where there is no usable device (REQUIRE_GPU) or no test kernels (REQUIRE_KERNELS),
// the config of a CUDA allocator, an RAII stream and a device counter of mismatched words.
#pragma once

#include <cuda_runtime_api.h>
#include <gtest/gtest.h>

#include <cstddef>
#include <string>

#include "cachalot/cachalot.hpp"
#include "cachalot/cuda_backend.hpp"
#include "cuda_test_device.hpp"
#include "kernels.hpp"

namespace {

// A device both cachalot (the driver) and this test's CUDA runtime can use.
#define REQUIRE_GPU()                                                                        \
  do {                                                                                       \
    if (cachalot::cuda_device_count() == 0)                                                  \
      GTEST_SKIP() << "no CUDA device: " << cachalot::cuda_unavailable_reason();             \
    const std::string runtime_why = cachalot::testing::cuda_test_device::no_device_reason(); \
    if (!runtime_why.empty()) GTEST_SKIP() << runtime_why << " (the test's CUDA runtime)";   \
  } while (false)

#define REQUIRE_KERNELS()                                 \
  do {                                                    \
    REQUIRE_GPU();                                        \
    if (!cachalot::testing::kernels_available())          \
      GTEST_SKIP() << "test kernels not built (no nvcc)"; \
  } while (false)

#define CUDA_OK(call) ASSERT_EQ((call), cudaSuccess) << #call

cachalot::config cuda_config(std::size_t limit = 0, int device = 0) {
  cachalot::config cfg;
  cfg.backend = cachalot::backend_kind::cuda;
  cfg.device = device;
  cfg.memory_limit = limit;
  return cfg;
}

// RAII stream for the tests.
struct stream_holder {
  cudaStream_t s = nullptr;
  stream_holder() { EXPECT_EQ(cudaStreamCreateWithFlags(&s, cudaStreamNonBlocking), cudaSuccess); }
  ~stream_holder() { (void)cudaStreamDestroy(s); }
  stream_holder(const stream_holder&) = delete;
  stream_holder& operator=(const stream_holder&) = delete;
  void* get() const { return static_cast<void*>(s); }
};

// A device counter of mismatched words, read back on demand.
struct mismatch_counter {
  unsigned long long* d = nullptr;
  mismatch_counter() {
    void* raw = nullptr;
    EXPECT_EQ(cudaMalloc(&raw, sizeof *d), cudaSuccess);
    d = static_cast<unsigned long long*>(raw);
    EXPECT_EQ(cudaMemset(d, 0, sizeof *d), cudaSuccess);
  }
  ~mismatch_counter() { (void)cudaFree(d); }
  mismatch_counter(const mismatch_counter&) = delete;
  mismatch_counter& operator=(const mismatch_counter&) = delete;
  unsigned long long read() const {
    unsigned long long h = 0;
    EXPECT_EQ(cudaDeviceSynchronize(), cudaSuccess);
    EXPECT_EQ(cudaMemcpy(&h, d, sizeof h, cudaMemcpyDeviceToHost), cudaSuccess);
    return h;
  }
};

}  // namespace
