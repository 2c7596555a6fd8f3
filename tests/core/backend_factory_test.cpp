// Backend selection (src/backend_factory.cpp): backend:auto on a machine without a CUDA device
// runs on the simulated device and says so once per process on stderr at warn level (also at
// debug), never at error/off, and never for an explicit backend:simulated.
#include <gtest/gtest.h>

#include <string>

#include "cachalot/allocator.hpp"
#include "cachalot/config.hpp"
#include "support/isolated.hpp"

namespace {

using cachalot::allocator;
using cachalot::config;
using cachalot::detail::log_level;
using cachalot::test::child;
using cachalot::test::count;
using cachalot::test::isolated;

constexpr const char* kWarning = "backend:auto found no CUDA device";

// The README's own snippet, twice: two allocators with the default backend (auto).
std::string two_auto_allocators(child& c) {
  for (int i = 0; i < 2; ++i) {
    allocator a(config::parse("memory_limit:90%"));
    void* p = a.allocate(1 << 20);
    a.deallocate(p);
  }
  return c.stderr_text();
}

TEST(backend_factory, AutoOnTheSimulatedDeviceIsSaidOncePerProcess) {
  if (cachalot::cuda_device_count() > 0) GTEST_SKIP() << "a CUDA device serves backend:auto";
  for (const log_level level : {log_level::warn, log_level::debug}) {
    isolated(nullptr, level, [](child& c) {
      const std::string err = two_auto_allocators(c);
      CHILD_EXPECT(count(err, kWarning) == 1, err);
      CHILD_EXPECT(count(err, "cachalot [warn] backend:auto found no CUDA device 0 (") == 1, err);
      CHILD_EXPECT(count(err, "SIMULATED device") == 1, err);
      CHILD_EXPECT(count(err, "never hand it to kernels") == 1, err);
      // The reason names why there is no device (this build, the driver, or cuInit).
      CHILD_EXPECT(err.find(cachalot::cuda_unavailable_reason()) != std::string::npos, err);
      CHILD_EXPECT(count(err, "\n") == 1, "one line: " + err);
    });
  }
}

TEST(backend_factory, QuietBelowWarnAndForAnExplicitSimulatedDevice) {
  if (cachalot::cuda_device_count() > 0) GTEST_SKIP() << "a CUDA device serves backend:auto";
  for (const log_level level : {log_level::error, log_level::off}) {
    isolated(nullptr, level, [](child& c) {
      const std::string err = two_auto_allocators(c);
      CHILD_EXPECT(err.empty(), err);
    });
  }
  isolated(nullptr, log_level::debug, [](child& c) {
    allocator a(config::parse("backend:simulated,capacity:1GiB"));
    a.deallocate(a.allocate(1 << 20));
    CHILD_EXPECT(c.stderr_text().find(kWarning) == std::string::npos, c.stderr_text());
  });
}

TEST(backend_factory, AutoTakesCudaWhereADeviceExists) {
  if (cachalot::cuda_device_count() == 0) GTEST_SKIP() << "no CUDA device here";
  isolated(nullptr, log_level::warn, [](child& c) {
    allocator a(config::parse("memory_limit:90%"));
    CHILD_EXPECT(std::string(a.backend().name()) == "cuda", a.backend().name());
    CHILD_EXPECT(c.stderr_text().find(kWarning) == std::string::npos, c.stderr_text());
  });
}

}  // namespace
