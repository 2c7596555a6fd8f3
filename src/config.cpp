// The config string: "key:value,key:value". Parsing is strict: every error names the key or
// the value at fault, and parse(to_string()) round-trips.
#include "cachalot/config.hpp"

#include <fmt/format.h>

#include <cctype>
#include <cstdlib>
#include <limits>
#include <set>
#include <string>

#include "cachalot/errors.hpp"
#include "detail/checks.hpp"

namespace cachalot {
namespace {

std::string_view trim(std::string_view s) {
  while (!s.empty() && std::isspace(static_cast<unsigned char>(s.front()))) s.remove_prefix(1);
  while (!s.empty() && std::isspace(static_cast<unsigned char>(s.back()))) s.remove_suffix(1);
  return s;
}

bool iequals(std::string_view a, std::string_view b) {
  if (a.size() != b.size()) return false;
  for (std::size_t i = 0; i < a.size(); ++i) {
    if (std::tolower(static_cast<unsigned char>(a[i])) !=
        std::tolower(static_cast<unsigned char>(b[i]))) {
      return false;
    }
  }
  return true;
}

std::uint64_t parse_uint(std::string_view digits, std::string_view key, std::string_view whole) {
  CACHALOT_EXPECTS(!digits.empty(), invalid_argument, "config key '{}': '{}' is not a number", key,
                   whole);
  std::uint64_t v = 0;
  for (char c : digits) {
    CACHALOT_EXPECTS(c >= '0' && c <= '9', invalid_argument,
                     "config key '{}': '{}' is not a number", key, whole);
    const auto d = static_cast<std::uint64_t>(c - '0');
    CACHALOT_EXPECTS(v <= (std::numeric_limits<std::uint64_t>::max() - d) / 10, invalid_argument,
                     "config key '{}': '{}' overflows", key, whole);
    v = v * 10 + d;
  }
  return v;
}

std::size_t size_of(std::string_view text, std::string_view key) {
  const std::string_view t = trim(text);
  std::size_t i = 0;
  while (i < t.size() && t[i] >= '0' && t[i] <= '9') ++i;
  const std::uint64_t n = parse_uint(t.substr(0, i), key, t);
  const std::string_view unit = trim(t.substr(i));
  unsigned shift = 0;
  if (unit.empty() || iequals(unit, "B")) {
    shift = 0;
  } else if (iequals(unit, "KiB")) {
    shift = 10;
  } else if (iequals(unit, "MiB")) {
    shift = 20;
  } else if (iequals(unit, "GiB")) {
    shift = 30;
  } else if (iequals(unit, "TiB")) {
    shift = 40;
  } else {
    CACHALOT_FAIL(invalid_argument,
                  "config key '{}': unknown unit '{}' in '{}' (use B, KiB, MiB, GiB or TiB)", key,
                  unit, t);
  }
  CACHALOT_EXPECTS(n <= (std::numeric_limits<std::size_t>::max() >> shift), invalid_argument,
                   "config key '{}': '{}' overflows", key, t);
  return static_cast<std::size_t>(n << shift);
}

bool bool_of(std::string_view v, std::string_view key) {
  if (v == "1" || iequals(v, "true") || iequals(v, "on") || iequals(v, "yes")) return true;
  if (v == "0" || iequals(v, "false") || iequals(v, "off") || iequals(v, "no")) return false;
  CACHALOT_FAIL(invalid_argument, "config key '{}': '{}' is not a boolean (use 0/1/true/false)",
                key, v);
}

double fraction_of(std::string_view v, std::string_view key) {
  const std::string s(v);
  char* end = nullptr;
  const double f = std::strtod(s.c_str(), &end);
  CACHALOT_EXPECTS(!s.empty() && end == s.c_str() + s.size() && f > 0.0 && f <= 1.0,
                   invalid_argument, "config key '{}': '{}' is not a fraction in (0, 1]", key, v);
  return f;
}

void apply(config& c, std::string_view key, std::string_view v) {
  if (key == "backend") {
    if (v == "auto") {
      c.backend = backend_kind::automatic;
    } else if (v == "cuda") {
      c.backend = backend_kind::cuda;
    } else if (v == "simulated") {
      c.backend = backend_kind::simulated;
    } else {
      CACHALOT_FAIL(invalid_argument, "config key 'backend': '{}' is not auto, cuda or simulated",
                    v);
    }
  } else if (key == "device") {
    const std::uint64_t d = parse_uint(v, key, v);
    CACHALOT_EXPECTS(d <= 1024, invalid_argument, "config key 'device': '{}' is out of range", v);
    c.device = static_cast<int>(d);
  } else if (key == "capacity") {
    c.capacity = size_of(v, key);
  } else if (key == "host_backing") {
    c.host_backing = bool_of(v, key);
  } else if (key == "granularity") {
    c.granularity = size_of(v, key);
  } else if (key == "small_size") {
    c.small_size = size_of(v, key);
  } else if (key == "small_segment") {
    c.small_segment_size = size_of(v, key);
  } else if (key == "large_segment") {
    c.large_segment_size = size_of(v, key);
  } else if (key == "mid_size") {
    c.mid_size_limit = size_of(v, key);
  } else if (key == "segment_rounding") {
    c.segment_rounding = size_of(v, key);
  } else if (key == "small_split_min") {
    c.small_split_remainder = size_of(v, key);
  } else if (key == "large_split_min") {
    c.large_split_remainder = size_of(v, key);
  } else if (key == "max_split_size") {
    c.max_split_size = iequals(v, "none") ? SIZE_MAX : size_of(v, key);
  } else if (key == "memory_limit") {
    if (!v.empty() && v.back() == '%') {
      const std::uint64_t pct = parse_uint(trim(v.substr(0, v.size() - 1)), key, v);
      CACHALOT_EXPECTS(pct >= 1 && pct <= 100, invalid_argument,
                       "config key 'memory_limit': '{}' is not a percentage in [1, 100]", v);
      c.memory_fraction = static_cast<double>(pct) / 100.0;
      c.memory_limit = 0;
    } else {
      c.memory_limit = iequals(v, "none") ? 0 : size_of(v, key);
      c.memory_fraction = 0.0;
    }
  } else if (key == "memory_fraction") {
    c.memory_fraction = fraction_of(v, key);
    c.memory_limit = 0;
  } else if (key == "gc_threshold") {
    c.gc_threshold = iequals(v, "0") || iequals(v, "off") ? 0.0 : fraction_of(v, key);
  } else if (key == "trace_file") {
    c.trace_file = std::string(v);
  } else if (key == "debug") {
    c.debug = bool_of(v, key);
  } else if (key == "caching") {
    c.caching = bool_of(v, key);
  } else if (key == "expandable_segments") {
    c.expandable_segments = bool_of(v, key);
  } else {
    CACHALOT_FAIL(
        invalid_argument,
        "config: unknown key '{}' (known: backend, device, capacity, host_backing, "
        "granularity, small_size, small_segment, large_segment, mid_size, "
        "segment_rounding, small_split_min, large_split_min, max_split_size, "
        "memory_limit, memory_fraction, gc_threshold, expandable_segments, trace_file, debug, "
        "caching)",
        key);
  }
}

bool is_pow2(std::size_t v) {
  return v != 0 && (v & (v - 1)) == 0;
}

}  // namespace

std::size_t parse_size(std::string_view text) {
  return size_of(text, "size");
}

std::string format_bytes(std::size_t bytes) {
  if (bytes < KiB) return fmt::format("{} B", bytes);
  static constexpr const char* units[] = {"KiB", "MiB", "GiB", "TiB", "PiB", "EiB"};
  double v = static_cast<double>(bytes) / 1024.0;
  std::size_t u = 0;
  while (v >= 1024.0 && u + 1 < std::size(units)) {
    v /= 1024.0;
    ++u;
  }
  return fmt::format("{:.2f} {}", v, units[u]);
}

config config::parse(std::string_view text) {
  config c;
  std::set<std::string, std::less<>> seen;
  text = trim(text);
  while (!text.empty()) {
    const std::size_t comma = text.find(',');
    const std::string_view item = trim(text.substr(0, comma));
    text = comma == std::string_view::npos ? std::string_view{} : text.substr(comma + 1);
    CACHALOT_EXPECTS(!item.empty(), invalid_argument, "config: empty entry (stray comma?)");
    const std::size_t colon = item.find(':');
    CACHALOT_EXPECTS(colon != std::string_view::npos, invalid_argument,
                     "config: entry '{}' has no value (expected key:value)", item);
    const std::string_view key = trim(item.substr(0, colon));
    const std::string_view value = trim(item.substr(colon + 1));
    CACHALOT_EXPECTS(!key.empty(), invalid_argument, "config: entry '{}' has no key", item);
    CACHALOT_EXPECTS(!value.empty(), invalid_argument, "config key '{}': missing value", key);
    CACHALOT_EXPECTS(seen.insert(std::string(key)).second, invalid_argument,
                     "config key '{}' is given twice", key);
    apply(c, key, value);
  }
  c.validate();
  return c;
}

config config::from_environment() {
  const char* env = std::getenv("CACHALOT_CONF");
  try {
    return parse(env == nullptr ? "" : env);
  } catch (const invalid_argument& e) {
    throw invalid_argument(std::string("CACHALOT_CONF: ") + e.what(), e.file(), e.line());
  }
}

void config::validate() const {
  CACHALOT_EXPECTS(is_pow2(granularity) && granularity <= small_segment_size, invalid_argument,
                   "config key 'granularity': {} must be a power of two no larger than "
                   "small_segment",
                   granularity);
  auto multiple = [&](std::size_t v, const char* key) {
    CACHALOT_EXPECTS(v != 0 && v % granularity == 0, invalid_argument,
                     "config key '{}': {} must be a non-zero multiple of the granularity ({})", key,
                     v, granularity);
  };
  multiple(small_size, "small_size");
  multiple(small_segment_size, "small_segment");
  multiple(large_segment_size, "large_segment");
  multiple(segment_rounding, "segment_rounding");
  CACHALOT_EXPECTS(small_size <= small_segment_size, invalid_argument,
                   "config key 'small_size': {} exceeds small_segment ({})", small_size,
                   small_segment_size);
  CACHALOT_EXPECTS(mid_size_limit > small_size && mid_size_limit <= large_segment_size,
                   invalid_argument,
                   "config key 'mid_size': {} must be above small_size ({}) and at most "
                   "large_segment ({})",
                   mid_size_limit, small_size, large_segment_size);
  CACHALOT_EXPECTS(max_split_size == SIZE_MAX || max_split_size > large_segment_size,
                   invalid_argument,
                   "config key 'max_split_size': {} must exceed large_segment ({}) or be 'none'",
                   max_split_size, large_segment_size);
  CACHALOT_EXPECTS(capacity != 0, invalid_argument, "config key 'capacity': must not be 0");
  CACHALOT_EXPECTS(gc_threshold >= 0.0 && gc_threshold <= 1.0, invalid_argument,
                   "config key 'gc_threshold': {} is not in [0, 1]", gc_threshold);
  CACHALOT_EXPECTS(memory_fraction >= 0.0 && memory_fraction <= 1.0, invalid_argument,
                   "config key 'memory_fraction': {} is not in [0, 1]", memory_fraction);
}

std::string config::to_string() const {
  const char* b = backend == backend_kind::automatic ? "auto"
                  : backend == backend_kind::cuda    ? "cuda"
                                                     : "simulated";
  std::string s = fmt::format(
      "backend:{},device:{},capacity:{}B,host_backing:{},granularity:{}B,small_size:{}B,"
      "small_segment:{}B,large_segment:{}B,mid_size:{}B,segment_rounding:{}B,"
      "small_split_min:{}B,large_split_min:{}B,max_split_size:{},debug:{},caching:{}",
      b, device, capacity, host_backing ? 1 : 0, granularity, small_size, small_segment_size,
      large_segment_size, mid_size_limit, segment_rounding, small_split_remainder,
      large_split_remainder,
      max_split_size == SIZE_MAX ? std::string("none") : fmt::format("{}B", max_split_size),
      debug ? 1 : 0, caching ? 1 : 0);
  s += fmt::format(",gc_threshold:{},expandable_segments:{}", gc_threshold,
                   expandable_segments ? 1 : 0);
  if (memory_fraction > 0.0) {
    s += fmt::format(",memory_fraction:{}", memory_fraction);
  } else if (memory_limit != 0) {
    s += fmt::format(",memory_limit:{}B", memory_limit);
  }
  if (!trace_file.empty()) s += ",trace_file:" + trace_file;
  return s;
}

}  // namespace cachalot
