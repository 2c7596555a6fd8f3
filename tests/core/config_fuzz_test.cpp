// The engine-config fuzz body (tests/fuzz/engine_config_fuzz.hpp) on seeded random inputs, so
// that the normal suite and the sanitizer builds cover the config space too (the libFuzzer
// target explores it further). Invalid configs are skipped by design; the test requires that
// most inputs give a valid config, so that it cannot pass by testing nothing.
#include <gtest/gtest.h>

#include <cstdint>
#include <map>
#include <random>
#include <vector>

#include "fuzz/engine_config_fuzz.hpp"

namespace cachalot::testing {
namespace {

TEST(ConfigFuzz, ValidConfigsRunCleanOnTheEngine) {
  std::mt19937 rng(20261130);
  constexpr int inputs = 1000;
  std::map<unsigned, int> reached;  // feature -> inputs that ran with it
  for (int i = 0; i < inputs; ++i) {
    std::vector<std::uint8_t> data(64 + rng() % 1200);
    for (std::uint8_t& b : data) b = static_cast<std::uint8_t>(rng());
    const unsigned features = engine_fuzz::run(data.data(), data.size());
    for (unsigned f = 1; f <= engine_fuzz::concurrently; f <<= 1) {
      if ((features & f) != 0) ++reached[f];
    }
  }
  EXPECT_GT(reached[engine_fuzz::ran], inputs / 3) << "most generated configs should be valid";
  for (unsigned f :
       {engine_fuzz::used_reserve, engine_fuzz::used_max_cached, engine_fuzz::used_divisions,
        engine_fuzz::passthrough, engine_fuzz::concurrently}) {
    EXPECT_GE(reached[f], 20) << "feature " << f << " reached by too few inputs";
  }
}

}  // namespace
}  // namespace cachalot::testing
