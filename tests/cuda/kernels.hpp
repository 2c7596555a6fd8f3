// Device kernels for the GPU tests, behind plain host functions so that the tests themselves
// are ordinary C++ (kernels.cu, built only where nvcc exists; kernels_stub.cpp otherwise, where
// kernels_available() is false and the GPU tests that need kernels skip).
// Pattern invariant: fill_pattern(p, n, seed) writes word i = pattern_word(seed, i), and
// count_mismatches counts the words of a range that differ from that.
#pragma once

#include <cstddef>
#include <cstdint>

#ifdef __CUDACC__
#define CACHALOT_TEST_HD __host__ __device__
#else
#define CACHALOT_TEST_HD
#endif

namespace cachalot::testing {

/// True when the kernels were compiled in (nvcc was available).
bool kernels_available() noexcept;

/// The expected 32-bit word `i` of a block filled with `seed`.
CACHALOT_TEST_HD constexpr std::uint32_t pattern_word(std::uint32_t seed, std::size_t i) noexcept {
  return seed * 2654435761u ^ static_cast<std::uint32_t>(i * 40503u + 1u);
}

/// Writes pattern_word(seed, i) to the `words` 32-bit words at `ptr`, on `stream`.
void fill_pattern(void* ptr, std::size_t words, std::uint32_t seed, void* stream);

/// Adds to `*device_counter` (device memory) the number of words at `ptr` that differ from
/// the pattern of `seed`, on `stream`.
void count_mismatches(const void* ptr, std::size_t words, std::uint32_t seed,
                      unsigned long long* device_counter, void* stream);

/// Launches a kernel that busy-waits `milliseconds` of GPU time on `stream`.
void spin(double milliseconds, void* stream);

/// Launches a kernel that waits on `stream` until `*flag` (host memory mapped into the device,
/// e.g. from cudaHostAlloc(cudaHostAllocMapped)) becomes non-zero, or `timeout_ms` passed.
void wait_for_flag(const volatile int* flag, double timeout_ms, void* stream);

}  // namespace cachalot::testing
