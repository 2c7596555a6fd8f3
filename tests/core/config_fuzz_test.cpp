// The engine-config fuzz body (tests/fuzz/engine_config_fuzz.hpp) on seeded random inputs, so
// that the normal suite and the sanitizer builds cover the config space too (the libFuzzer
// target explores it further). Invalid configs are skipped by design; the test requires that
// most inputs give a valid config, so that it cannot pass by testing nothing.
#include <gtest/gtest.h>

#include <cstdint>
#include <random>
#include <vector>

#include "fuzz/engine_config_fuzz.hpp"

namespace cachalot::testing {
namespace {

TEST(ConfigFuzz, ValidConfigsRunCleanOnTheEngine) {
  std::mt19937 rng(20261130);
  int valid = 0;
  constexpr int inputs = 1000;
  for (int i = 0; i < inputs; ++i) {
    std::vector<std::uint8_t> data(64 + rng() % 1200);
    for (std::uint8_t& b : data) b = static_cast<std::uint8_t>(rng());
    if (engine_fuzz::run(data.data(), data.size())) ++valid;
  }
  EXPECT_GT(valid, inputs / 3) << "most generated configs should be valid";
}

}  // namespace
}  // namespace cachalot::testing
