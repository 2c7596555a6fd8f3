// libFuzzer target: the config space against the engine (see engine_config_fuzz.hpp).
#include <cstddef>
#include <cstdint>

#include "fuzz/engine_config_fuzz.hpp"

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
  if (size > 4096) return -1;  // long inputs add nothing but time
  cachalot::testing::engine_fuzz::run(data, size);
  return 0;
}
