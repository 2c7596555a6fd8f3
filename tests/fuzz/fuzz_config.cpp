// libFuzzer target: the config parser. Any text must either parse or be rejected with
// cachalot::invalid_argument, never crash or throw anything else; a config that parses must
// survive the round trip parse(to_string()) unchanged. parse_size gets the same treatment.
#include <cstddef>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <string>
#include <string_view>

#include "cachalot/config.hpp"
#include "cachalot/errors.hpp"

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
  const std::string_view text(reinterpret_cast<const char*>(data), size);
  try {
    const cachalot::config c = cachalot::config::parse(text);
    const std::string once = c.to_string();
    const std::string twice = cachalot::config::parse(once).to_string();
    if (once != twice) {
      std::fprintf(stderr, "fuzz_config: round trip changed\n  %s\ninto\n  %s\n", once.c_str(),
                   twice.c_str());
      std::abort();
    }
  } catch (const cachalot::invalid_argument&) {
  }
  try {
    const std::size_t n = cachalot::parse_size(text);
    if (cachalot::format_bytes(n).empty()) std::abort();
  } catch (const cachalot::invalid_argument&) {
  }
  return 0;
}
