// Test kernels (see kernels.hpp). Launch errors are thrown as std::runtime_error naming the
// kernel, so that a test fails loudly instead of checking garbage.
#include <cuda_runtime.h>

#include <stdexcept>
#include <string>

#include "kernels.hpp"

namespace cachalot::testing {

namespace {

__device__ unsigned long long global_time_ns() {
  unsigned long long t;
  asm volatile("mov.u64 %0, %%globaltimer;" : "=l"(t));
  return t;
}

__global__ void fill_kernel(std::uint32_t* p, std::size_t words, std::uint32_t seed) {
  for (std::size_t i = blockIdx.x * static_cast<std::size_t>(blockDim.x) + threadIdx.x; i < words;
       i += static_cast<std::size_t>(gridDim.x) * blockDim.x) {
    p[i] = pattern_word(seed, i);
  }
}

__global__ void check_kernel(const std::uint32_t* p, std::size_t words, std::uint32_t seed,
                             unsigned long long* counter) {
  unsigned long long bad = 0;
  for (std::size_t i = blockIdx.x * static_cast<std::size_t>(blockDim.x) + threadIdx.x; i < words;
       i += static_cast<std::size_t>(gridDim.x) * blockDim.x) {
    if (p[i] != pattern_word(seed, i)) ++bad;
  }
  if (bad != 0) atomicAdd(counter, bad);
}

__global__ void spin_kernel(unsigned long long duration_ns) {
  const unsigned long long start = global_time_ns();
  while (global_time_ns() - start < duration_ns) __nanosleep(1000);
}

__global__ void wait_flag_kernel(const volatile int* flag, unsigned long long timeout_ns) {
  const unsigned long long start = global_time_ns();
  while (*flag == 0 && global_time_ns() - start < timeout_ns) __nanosleep(1000);
}

void check_launch(const char* kernel) {
  const cudaError_t err = cudaGetLastError();
  if (err != cudaSuccess) {
    throw std::runtime_error(std::string("launch of ") + kernel + " failed: " +
                             cudaGetErrorName(err) + " (" + cudaGetErrorString(err) + ")");
  }
}

unsigned grid_for(std::size_t words) {
  const std::size_t blocks = (words + 255) / 256;
  return static_cast<unsigned>(blocks == 0 ? 1 : (blocks > 1024 ? 1024 : blocks));
}

}  // namespace

bool kernels_available() noexcept {
  return true;
}

void fill_pattern(void* ptr, std::size_t words, std::uint32_t seed, void* stream) {
  fill_kernel<<<grid_for(words), 256, 0, static_cast<cudaStream_t>(stream)>>>(
      static_cast<std::uint32_t*>(ptr), words, seed);
  check_launch("fill_kernel");
}

void count_mismatches(const void* ptr, std::size_t words, std::uint32_t seed,
                      unsigned long long* device_counter, void* stream) {
  check_kernel<<<grid_for(words), 256, 0, static_cast<cudaStream_t>(stream)>>>(
      static_cast<const std::uint32_t*>(ptr), words, seed, device_counter);
  check_launch("check_kernel");
}

void spin(double milliseconds, void* stream) {
  spin_kernel<<<1, 1, 0, static_cast<cudaStream_t>(stream)>>>(
      static_cast<unsigned long long>(milliseconds * 1e6));
  check_launch("spin_kernel");
}

void wait_for_flag(const volatile int* flag, double timeout_ms, void* stream) {
  wait_flag_kernel<<<1, 1, 0, static_cast<cudaStream_t>(stream)>>>(
      flag, static_cast<unsigned long long>(timeout_ms * 1e6));
  check_launch("wait_flag_kernel");
}

}  // namespace cachalot::testing
