// Stand-ins for the test kernels where nvcc is missing: kernels_available() is false and the
// tests that need kernels skip before calling anything else.
#include <stdexcept>

#include "kernels.hpp"

namespace cachalot::testing {

namespace {
[[noreturn]] void no_kernels() {
  throw std::logic_error("test kernels are not built (no nvcc at configure time)");
}
}  // namespace

bool kernels_available() noexcept {
  return false;
}
void fill_pattern(void*, std::size_t, std::uint32_t, void*) {
  no_kernels();
}
void count_mismatches(const void*, std::size_t, std::uint32_t, unsigned long long*, void*) {
  no_kernels();
}
void spin(double, void*) {
  no_kernels();
}
void wait_for_flag(const volatile int*, double, void*) {
  no_kernels();
}

}  // namespace cachalot::testing
