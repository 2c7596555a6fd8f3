// The config string: "key:value,key:value". Parsing is strict: every error names the key or
// the value at fault (an unknown key gets a "did you mean"), every relation between the size
// keys that the engine relies on is validated, and parse(to_string()) gives back an equal config.
// Value syntax (sizes, fractions, divisions) is in config_values.cpp.
#include "cachalot/config.hpp"

#include <algorithm>
#include <cstdlib>
#include <string>
#include <vector>

#include "cachalot/errors.hpp"
#include "detail/checks.hpp"
#include "detail/config_values.hpp"

namespace cachalot {
namespace {

using detail::iequals;
using detail::trim;
using detail::unit_rule;

const char* band_name(band_mode m) noexcept {
  return m == band_mode::lazy ? "lazy" : m == band_mode::eager ? "eager" : "off";
}

/// Every key, in to_string's order, then PyTorch's spellings.
constexpr const char* known_keys[] = {"backend",
                                      "device",
                                      "capacity",
                                      "host_backing",
                                      "granularity",
                                      "small_size",
                                      "small_segment",
                                      "large_segment",
                                      "mid_size",
                                      "segment_rounding",
                                      "small_split_min",
                                      "large_split_min",
                                      "max_split_size",
                                      "memory_limit",
                                      "memory_fraction",
                                      "gc_threshold",
                                      "release_policy",
                                      "size_bands",
                                      "pressure_threshold",
                                      "roundup_power2_divisions",
                                      "expandable_segments",
                                      "large_chunk",
                                      "reserve",
                                      "max_cached",
                                      "thread_cache",
                                      "thread_cache_max_size",
                                      "debug",
                                      "caching",
                                      "trace_file",
                                      "max_split_size_mb",
                                      "garbage_collection_threshold"};

/// PyTorch keys that cachalot does not have, with the reason.
struct foreign_key {
  const char* key;
  const char* why;
};
constexpr foreign_key pytorch_only[] = {
    {"max_non_split_rounding_mb",
     "an oversize block is given to a request that wastes less than one large_segment"},
    {"release_lock_on_cudamalloc", "cachalot never holds a lock while it calls the device"},
    {"pinned_use_cuda_host_register", "cachalot does not manage pinned host memory"},
    {"pinned_use_host_register", "cachalot does not manage pinned host memory"},
    {"pinned_num_register_threads", "cachalot does not manage pinned host memory"},
    {"pinned_use_background_threads", "cachalot does not manage pinned host memory"},
    {"pinned_reserve_segment_size_mb", "cachalot does not manage pinned host memory"},
    {"graph_capture_record_stream_reuse", "cachalot has no graph-private pools"},
};

/// The setting a key sets (aliases and the two forms of the limit share one).
std::string_view setting_of(std::string_view key) {
  if (key == "max_split_size_mb") return "max_split_size";
  if (key == "garbage_collection_threshold") return "gc_threshold";
  if (key == "memory_fraction") return "memory_limit";
  return key;
}

[[noreturn]] void unknown_key(std::string_view key) {
  for (const foreign_key& f : pytorch_only) {
    CACHALOT_EXPECTS(key != f.key, invalid_argument,
                     "config: '{}' is a PyTorch setting with no cachalot equivalent: {}", key,
                     f.why);
  }
  std::string_view best;
  std::size_t best_distance = SIZE_MAX;
  const std::size_t near = std::max<std::size_t>(2, key.size() / 3);  // "did you mean" distance
  const auto consider = [&](std::string_view k) {
    const std::size_t gap = k.size() > key.size() ? k.size() - key.size() : key.size() - k.size();
    if (gap > near) return;  // at least that many edits apart
    const std::size_t d = detail::edit_distance(key, k);
    if (d < best_distance) best = k, best_distance = d;
  };
  for (const std::string_view k : known_keys) consider(k);
  for (const std::string_view k : device_cost_keys()) consider(k);
  if (best_distance <= near) {
    CACHALOT_FAIL(invalid_argument, "config: unknown key '{}'; did you mean '{}'?", key, best);
  }
  std::string all;
  for (const char* k : known_keys) all += (all.empty() ? "" : ", ") + std::string(k);
  for (const char* k : device_cost_keys()) {
    all += ", ";
    all += k;
  }
  CACHALOT_FAIL(invalid_argument, "config: unknown key '{}' (known: {})", key, all);
}

void set_backend(config& c, std::string_view v) {
  if (v == "auto") {
    c.backend = backend_kind::automatic;
  } else if (v == "cuda") {
    c.backend = backend_kind::cuda;
  } else if (v == "simulated") {
    c.backend = backend_kind::simulated;
  } else if (v == "native" || v == "cudaMallocAsync") {
    CACHALOT_FAIL(invalid_argument,
                  "config key 'backend': '{}' is a PyTorch allocator backend; cachalot's backend "
                  "is auto, cuda or simulated",
                  v);
  } else {
    CACHALOT_FAIL(invalid_argument, "config key 'backend': '{}' is not auto, cuda or simulated", v);
  }
}

void set_memory_limit(config& c, std::string_view v) {
  if (!v.empty() && v.back() == '%') {
    c.memory_fraction = detail::parse_percent(v, "memory_limit");
    c.memory_limit = 0;
  } else {
    c.memory_limit =
        iequals(v, "none") ? 0 : detail::parse_size_value(v, "memory_limit", unit_rule::required);
    c.memory_fraction = 0.0;
  }
}

std::size_t optional_size(std::string_view v, std::string_view key) {
  return iequals(v, "none") ? SIZE_MAX : detail::parse_size_value(v, key, unit_rule::required);
}

void set_max_split_size_mb(config& c, std::string_view v) {
  const std::uint64_t mib = detail::parse_count(v, "max_split_size_mb");
  CACHALOT_EXPECTS(mib <= SIZE_MAX / MiB, invalid_argument,
                   "config key 'max_split_size_mb': '{}' overflows", v);
  c.max_split_size = static_cast<std::size_t>(mib) * MiB;
}

double threshold_of(std::string_view v, std::string_view key) {
  const bool zero = v.find_first_not_of("0.") == std::string_view::npos &&
                    v.find('0') != std::string_view::npos && v.find('.') == v.rfind('.');
  return iequals(v, "off") || zero ? 0.0 : detail::parse_fraction(v, key);  // 0, 0.0: off
}

/// Sets the field `key` names. @throws invalid_argument
void apply(config& c, std::string_view key, std::string_view v) {
  auto layout = [&](std::size_t& field) {
    field = detail::parse_size_value(v, key, unit_rule::optional);
  };
  if (key == "backend") {
    set_backend(c, v);
  } else if (key == "device") {
    const std::uint64_t d = detail::parse_count(v, key);
    CACHALOT_EXPECTS(d <= 1024, invalid_argument, "config key 'device': '{}' is out of range", v);
    c.device = static_cast<int>(d);
  } else if (key == "capacity") {
    c.capacity = detail::parse_size_value(v, key, unit_rule::required);
  } else if (key == "host_backing") {
    c.host_backing = detail::parse_bool(v, key);
  } else if (key == "granularity") {
    layout(c.granularity);
  } else if (key == "small_size") {
    layout(c.small_size);
  } else if (key == "small_segment") {
    layout(c.small_segment_size);
  } else if (key == "large_segment") {
    layout(c.large_segment_size);
  } else if (key == "mid_size") {
    layout(c.mid_size_limit);
  } else if (key == "segment_rounding") {
    layout(c.segment_rounding);
  } else if (key == "small_split_min") {
    layout(c.small_split_remainder);
  } else if (key == "large_split_min") {
    layout(c.large_split_remainder);
  } else if (key == "max_split_size") {
    c.max_split_size = optional_size(v, key);
  } else if (key == "max_split_size_mb") {
    set_max_split_size_mb(c, v);
  } else if (key == "memory_limit") {
    set_memory_limit(c, v);
  } else if (key == "memory_fraction") {
    c.memory_fraction = detail::parse_fraction(v, key);
    c.memory_limit = 0;
  } else if (key == "gc_threshold" || key == "garbage_collection_threshold") {
    c.gc_threshold = threshold_of(v, key);
  } else if (key == "release_policy") {
    if (iequals(v, "adaptive")) {
      c.release_policy = release_mode::adaptive;
    } else if (iequals(v, "eager")) {
      c.release_policy = release_mode::eager;
    } else {
      CACHALOT_FAIL(invalid_argument,
                    "config key 'release_policy': '{}' is not one of adaptive, eager", v);
    }
  } else if (key == "size_bands") {
    if (iequals(v, "lazy")) {
      c.size_bands = band_mode::lazy;
    } else if (iequals(v, "eager")) {
      c.size_bands = band_mode::eager;
    } else if (iequals(v, "off")) {
      c.size_bands = band_mode::off;
    } else {
      CACHALOT_FAIL(invalid_argument,
                    "config key 'size_bands': '{}' is not one of lazy, eager, off", v);
    }
  } else if (key == "pressure_threshold") {
    c.pressure_threshold = detail::parse_fraction(v, key);
  } else if (key == "roundup_power2_divisions") {
    c.roundup_power2_divisions = detail::parse_divisions(v, key);
  } else if (key == "expandable_segments") {
    c.expandable_segments = detail::parse_bool(v, key);
  } else if (key == "large_chunk") {
    c.large_chunk =
        iequals(v, "granule") ? 0 : detail::parse_size_value(v, key, unit_rule::required);
    CACHALOT_EXPECTS(c.large_chunk != 0 || iequals(v, "granule"), invalid_argument,
                     "config key 'large_chunk': must not be 0 (say 'granule' for one granule)");
  } else if (key == "reserve") {
    c.reserve = detail::parse_size_value(v, key, unit_rule::required);
  } else if (key == "max_cached") {
    c.max_cached = optional_size(v, key);
  } else if (key == "thread_cache") {
    const std::uint64_t n = detail::parse_count(v, key);
    CACHALOT_EXPECTS(n <= 64, invalid_argument,
                     "config key 'thread_cache': '{}' is out of range (0 to 64 blocks)", v);
    c.thread_cache = static_cast<std::uint32_t>(n);
  } else if (key == "thread_cache_max_size") {
    c.thread_cache_max_size = detail::parse_size_value(v, key, unit_rule::required);
  } else if (key == "trace_file") {
    c.trace_file = std::string(v);
  } else if (key == "debug") {
    c.debug = detail::parse_bool(v, key);
  } else if (key == "caching") {
    c.caching = detail::parse_bool(v, key);
  } else if (apply_cost_key(c.cost, key, v)) {  // cost_model, cost_* (device_cost.cpp)
  } else {
    unknown_key(key);
  }
}

/// Splits "k:v,k:v" into items; a value that starts with '[' runs to its ']' (commas inside).
std::vector<std::string_view> split_items(std::string_view text) {
  std::vector<std::string_view> items;
  while (!text.empty()) {
    std::size_t end = text.find(',');
    const std::size_t colon = text.find(':');
    if (colon != std::string_view::npos && (end == std::string_view::npos || colon < end)) {
      const std::string_view value = trim(text.substr(colon + 1));
      if (!value.empty() && value.front() == '[') {
        const std::size_t close = text.find(']', colon);
        if (close != std::string_view::npos) end = text.find(',', close);
      }
    }
    items.push_back(trim(text.substr(0, end)));
    if (end == std::string_view::npos) break;
    text.remove_prefix(end + 1);
    CACHALOT_EXPECTS(!trim(text).empty(), invalid_argument, "config: empty entry (stray comma?)");
  }
  return items;
}

bool is_pow2(std::size_t v) {
  return v != 0 && (v & (v - 1)) == 0;
}

unsigned log2_floor(std::size_t v) {
  return 63u - static_cast<unsigned>(__builtin_clzll(v));
}

}  // namespace

std::size_t parse_size(std::string_view text) {
  return detail::parse_size_value(text, "size", unit_rule::optional);
}

std::string format_bytes(std::size_t bytes) {
  if (bytes < KiB) return detail::format("{} B", bytes);
  static constexpr const char* units[] = {"KiB", "MiB", "GiB", "TiB", "PiB", "EiB"};
  double v = static_cast<double>(bytes) / 1024.0;
  std::size_t u = 0;
  while (v >= 1024.0 && u + 1 < std::size(units)) {
    v /= 1024.0;
    ++u;
  }
  return detail::format("{:.2f} {}", v, units[u]);
}

std::size_t round_request(std::size_t bytes, std::size_t granularity,
                          std::uint32_t divisions) noexcept {
  if (divisions < 2 || bytes > SIZE_MAX / 2 || (bytes + divisions - 1) / divisions <= granularity) {
    return (bytes + granularity - 1) & ~(granularity - 1);
  }
  if (is_pow2(bytes)) return bytes;
  const std::size_t floor = std::size_t{1} << log2_floor(bytes);
  const std::size_t step = floor >> log2_floor(divisions);
  return (bytes + step - 1) & ~(step - 1);
}

std::uint32_t config::divisions_for(std::size_t bytes) const noexcept {
  if (bytes == 0) return roundup_power2_divisions[0];
  const unsigned log = log2_floor(bytes);
  const std::size_t index = log > 20 ? std::min<std::size_t>(log - 20, roundup_intervals - 1) : 0;
  return roundup_power2_divisions[index];
}

config config::parse(std::string_view text) {
  config c;
  std::vector<std::pair<std::string_view, std::string_view>> seen;  // setting, key
  for (const std::string_view item : split_items(trim(text))) {
    CACHALOT_EXPECTS(!item.empty(), invalid_argument, "config: empty entry (stray comma?)");
    const std::size_t colon = item.find(':');
    CACHALOT_EXPECTS(colon != std::string_view::npos, invalid_argument,
                     "config: entry '{}' has no value (expected key:value)", item);
    const std::string_view key = trim(item.substr(0, colon));
    const std::string_view value = trim(item.substr(colon + 1));
    CACHALOT_EXPECTS(!key.empty(), invalid_argument, "config: entry '{}' has no key", item);
    CACHALOT_EXPECTS(!value.empty(), invalid_argument, "config key '{}': missing value", key);
    const std::string_view setting = setting_of(key);
    for (const auto& [s, k] : seen) {
      if (s != setting) continue;
      CACHALOT_EXPECTS(k != key, invalid_argument, "config key '{}' is given twice", key);
      CACHALOT_FAIL(invalid_argument,
                    "config keys '{}' and '{}' set the same setting; give only one{}", k, key,
                    setting == "memory_limit" ? " (memory_limit:90% is memory_fraction:0.9)" : "");
    }
    apply(c, key, value);
    seen.emplace_back(setting, key);
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

std::string config::trace_path(int dev) const {
  std::string out;
  for (std::size_t i = 0; i < trace_file.size(); ++i) {
    if (trace_file[i] == '%' && i + 1 < trace_file.size() && trace_file[i + 1] == 'd') {
      out += std::to_string(dev);
      ++i;
    } else if (trace_file[i] == '%' && i + 1 < trace_file.size() && trace_file[i + 1] == '%') {
      out += '%';
      ++i;
    } else {
      out += trace_file[i];
    }
  }
  return out;
}

std::string config::to_string() const {
  const char* b = backend == backend_kind::automatic ? "auto"
                  : backend == backend_kind::cuda    ? "cuda"
                                                     : "simulated";
  const auto size_or_none = [](std::size_t v) {
    return v == SIZE_MAX ? std::string("none") : detail::format("{}B", v);
  };
  std::string s = detail::format(
      "backend:{},device:{},capacity:{}B,host_backing:{},granularity:{}B,small_size:{}B,"
      "small_segment:{}B,large_segment:{}B,mid_size:{}B,segment_rounding:{}B,"
      "small_split_min:{}B,large_split_min:{}B,max_split_size:{}",
      b, device, capacity, host_backing ? 1 : 0, granularity, small_size, small_segment_size,
      large_segment_size, mid_size_limit, segment_rounding, small_split_remainder,
      large_split_remainder, size_or_none(max_split_size));
  if (memory_fraction > 0.0) {
    s += detail::format(",memory_fraction:{}", memory_fraction);
  } else {
    s += memory_limit == 0 ? std::string(",memory_limit:none")
                           : detail::format(",memory_limit:{}B", memory_limit);
  }
  const std::string divisions = detail::format_divisions(roundup_power2_divisions);
  s += detail::format(
      ",gc_threshold:{},release_policy:{},size_bands:{},pressure_threshold:{},"
      "roundup_power2_divisions:{},expandable_segments:{},large_chunk:{},reserve:{}B,max_cached:{},"
      "thread_cache:{},thread_cache_max_size:{}B,debug:{},caching:{}",
      gc_threshold, release_policy == release_mode::eager ? "eager" : "adaptive",
      band_name(size_bands), pressure_threshold, divisions.empty() ? std::string("0") : divisions,
      expandable_segments ? 1 : 0,
      large_chunk == 0 ? std::string("granule") : detail::format("{}B", large_chunk), reserve,
      size_or_none(max_cached), thread_cache, thread_cache_max_size, debug ? 1 : 0,
      caching ? 1 : 0);
  s += ',';
  s += cost.to_string();  // (appended apart: GCC 12's -Wrestrict misreads "," + string at -O3)
  if (!trace_file.empty()) s += ",trace_file:" + trace_file;
  return s;
}

bool operator==(const config& a, const config& b) noexcept {
  return a.backend == b.backend && a.device == b.device && a.capacity == b.capacity &&
         a.host_backing == b.host_backing && a.granularity == b.granularity &&
         a.small_size == b.small_size && a.small_segment_size == b.small_segment_size &&
         a.large_segment_size == b.large_segment_size && a.mid_size_limit == b.mid_size_limit &&
         a.segment_rounding == b.segment_rounding &&
         a.small_split_remainder == b.small_split_remainder &&
         a.large_split_remainder == b.large_split_remainder &&
         a.max_split_size == b.max_split_size && a.memory_limit == b.memory_limit &&
         a.memory_fraction == b.memory_fraction && a.gc_threshold == b.gc_threshold &&
         a.release_policy == b.release_policy && a.size_bands == b.size_bands &&
         a.pressure_threshold == b.pressure_threshold &&
         a.roundup_power2_divisions == b.roundup_power2_divisions &&
         a.expandable_segments == b.expandable_segments && a.large_chunk == b.large_chunk &&
         a.reserve == b.reserve && a.max_cached == b.max_cached &&
         a.thread_cache == b.thread_cache && a.thread_cache_max_size == b.thread_cache_max_size &&
         a.trace_file == b.trace_file && a.debug == b.debug && a.caching == b.caching &&
         a.cost == b.cost;
}

bool operator!=(const config& a, const config& b) noexcept {
  return !(a == b);
}

}  // namespace cachalot
