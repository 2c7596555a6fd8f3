// config::validate: every field's range and every relation between the size keys that the
// engine relies on. Each check states the engine behaviour it protects:
//  - granularity is a power of two (round_up masks with granularity - 1) and at most the small
//    segment; the segment sizes are non-zero multiples of it (blocks tile segments exactly);
//  - small_size <= small_segment: a small request fits its segment;
//  - small_size < mid_size <= large_segment: a mid-size request fits its 20 MiB-style segment;
//  - max_split_size above both segment sizes: a block of a small or mid-size segment is never
//    "oversize" (oversize blocks live in a set that small requests never search; a small
//    segment at or above max_split_size put small-pool blocks there, and small-pool stats
//    wrapped around: issue 9);
// Sizes in the messages are written as config strings write them ("20MiB", not 20971520).
//  - small_split_min >= 1: a split never leaves an empty block;
//  - with caching, a memory limit holds one small and one large segment (else every request of
//    that pool fails), and the reserve fits under the limit (and on a simulated device);
//  - memory_limit and memory_fraction are one setting: at most one is set;
//  - trace_file's % placeholders are %d or %%.
#include <cmath>

#include "cachalot/config.hpp"
#include "cachalot/errors.hpp"
#include "detail/checks.hpp"

namespace cachalot {
namespace {

bool is_pow2(std::size_t v) {
  return v != 0 && (v & (v - 1)) == 0;
}

/// A size the way a config string writes it: in the largest binary unit that divides it
/// ("20MiB", "1536KiB"), else in bytes ("1000B"); what the user typed, not a raw count.
std::string size_text(std::size_t v) {
  static constexpr const char* units[] = {"KiB", "MiB", "GiB", "TiB"};
  const char* unit = "B";
  for (std::size_t u = 0; u < std::size(units) && v != 0 && v % 1024 == 0; ++u) {
    v /= 1024;
    unit = units[u];
  }
  return detail::format("{}{}", v, unit);
}

/// max_split_size above both segment sizes, said in the keys and units the user writes
/// (PyTorch's spelling too: max_split_size_mb counts MiB) and naming the segment it must exceed.
void validate_max_split_size(const config& c) {
  if (c.max_split_size == SIZE_MAX) return;
  const bool small = c.small_segment_size >= c.large_segment_size;
  const std::size_t floor = small ? c.small_segment_size : c.large_segment_size;
  if (c.max_split_size > floor) return;
  const std::string as_mb = c.max_split_size % MiB == 0
                                ? detail::format(" (max_split_size_mb:{})", c.max_split_size / MiB)
                                : std::string();
  const std::size_t least = (floor / MiB + 1) * MiB;
  const std::string whose =
      small ? detail::format("requests up to {} (key small_segment)", size_text(c.small_size))
            : detail::format("requests above {} and below {} (key large_segment)",
                             size_text(c.small_size), size_text(c.mid_size_limit));
  CACHALOT_FAIL(invalid_argument,
                "config key 'max_split_size': {}{} is too small: blocks of at least that size are "
                "never split, so it must be above {}, the segment size of {}; write e.g. "
                "max_split_size:{} (max_split_size_mb:{}), or 'none'",
                size_text(c.max_split_size), as_mb, size_text(floor), whose, size_text(least),
                least / MiB);
}

void validate_sizes(const config& c) {
  CACHALOT_EXPECTS(is_pow2(c.granularity) && c.granularity <= c.small_segment_size,
                   invalid_argument,
                   "config key 'granularity': {} must be a power of two no larger than "
                   "small_segment ({})",
                   size_text(c.granularity), size_text(c.small_segment_size));
  auto multiple = [&](std::size_t v, const char* key) {
    CACHALOT_EXPECTS(v != 0 && v % c.granularity == 0, invalid_argument,
                     "config key '{}': {} must be a non-zero multiple of the granularity ({})", key,
                     size_text(v), size_text(c.granularity));
  };
  multiple(c.small_size, "small_size");
  multiple(c.small_segment_size, "small_segment");
  multiple(c.large_segment_size, "large_segment");
  multiple(c.segment_rounding, "segment_rounding");
  CACHALOT_EXPECTS(c.small_size <= c.small_segment_size, invalid_argument,
                   "config key 'small_size': {} exceeds small_segment ({})",
                   size_text(c.small_size), size_text(c.small_segment_size));
  CACHALOT_EXPECTS(
      c.mid_size_limit > c.small_size && c.mid_size_limit <= c.large_segment_size, invalid_argument,
      "config key 'mid_size': {} must be above small_size ({}) and at most "
      "large_segment ({})",
      size_text(c.mid_size_limit), size_text(c.small_size), size_text(c.large_segment_size));
  validate_max_split_size(c);
  CACHALOT_EXPECTS(c.small_split_remainder != 0, invalid_argument,
                   "config key 'small_split_min': must not be 0 (a split would leave an empty "
                   "block)");
  for (const std::uint32_t d : c.roundup_power2_divisions) {
    CACHALOT_EXPECTS(d == 0 || (is_pow2(d) && d <= (std::uint32_t{1} << 31)), invalid_argument,
                     "config key 'roundup_power2_divisions': {} is not 0 or a power of two", d);
  }
}

void validate_limits(const config& c) {
  CACHALOT_EXPECTS(c.device >= 0 && c.device <= 1024, invalid_argument,
                   "config key 'device': {} is out of range", c.device);
  CACHALOT_EXPECTS(c.capacity != 0, invalid_argument, "config key 'capacity': must not be 0");
  CACHALOT_EXPECTS(c.gc_threshold >= 0.0 && c.gc_threshold <= 1.0, invalid_argument,
                   "config key 'gc_threshold': {} is not in [0, 1]", c.gc_threshold);
  CACHALOT_EXPECTS(c.pressure_threshold > 0.0 && c.pressure_threshold <= 1.0, invalid_argument,
                   "config key 'pressure_threshold': {} is not in (0, 1]", c.pressure_threshold);
  CACHALOT_EXPECTS(
      c.release_policy == release_mode::adaptive || c.release_policy == release_mode::eager,
      invalid_argument, "config key 'release_policy': invalid value {}",
      static_cast<int>(c.release_policy));
  CACHALOT_EXPECTS(c.size_bands == band_mode::lazy || c.size_bands == band_mode::eager ||
                       c.size_bands == band_mode::off,
                   invalid_argument, "config key 'size_bands': invalid value {}",
                   static_cast<int>(c.size_bands));
  CACHALOT_EXPECTS(c.memory_fraction >= 0.0 && c.memory_fraction <= 1.0, invalid_argument,
                   "config key 'memory_fraction': {} is not in (0, 1]", c.memory_fraction);
  CACHALOT_EXPECTS(c.memory_fraction == 0.0 || c.memory_limit == 0, invalid_argument,
                   "config keys 'memory_limit' ({} B) and 'memory_fraction' ({}) are both set: "
                   "they are one setting",
                   c.memory_limit, c.memory_fraction);
  if (c.memory_limit != 0 && c.caching) {
    const std::size_t segment = std::max(c.small_segment_size, c.large_segment_size);
    CACHALOT_EXPECTS(c.memory_limit >= segment, invalid_argument,
                     "config key 'memory_limit': {} is below one segment ({}): every request of "
                     "that pool would fail (write e.g. 90% or 8GiB)",
                     format_bytes(c.memory_limit), format_bytes(segment));
  }
  if (c.reserve != 0) {
    CACHALOT_EXPECTS(c.caching, invalid_argument,
                     "config key 'reserve': pass-through mode (caching:0) gives every allocation "
                     "its own device allocation; a reserve would defeat it");
    CACHALOT_EXPECTS(c.reserve % c.granularity == 0, invalid_argument,
                     "config key 'reserve': {} is not a multiple of the granularity ({})",
                     c.reserve, c.granularity);
    CACHALOT_EXPECTS(c.memory_limit == 0 || c.reserve <= c.memory_limit, invalid_argument,
                     "config key 'reserve': {} exceeds memory_limit ({})", format_bytes(c.reserve),
                     format_bytes(c.memory_limit));
    CACHALOT_EXPECTS(c.backend != backend_kind::simulated || c.reserve <= c.capacity,
                     invalid_argument, "config key 'reserve': {} exceeds capacity ({})",
                     format_bytes(c.reserve), format_bytes(c.capacity));
    CACHALOT_EXPECTS(!c.expandable_segments, invalid_argument,
                     "config keys 'reserve' and 'expandable_segments' cannot be combined: the "
                     "reserve is carved into fixed segments, expandable segments map chunks on "
                     "demand; choose one");
  }
  CACHALOT_EXPECTS(c.thread_cache <= 64, invalid_argument,
                   "config key 'thread_cache': {} is out of range (0 to 64 blocks)",
                   c.thread_cache);
  CACHALOT_EXPECTS(c.max_cached == SIZE_MAX || !c.expandable_segments || !c.caching,
                   invalid_argument,
                   "config keys 'max_cached' and 'expandable_segments' cannot be combined: the "
                   "cap returns whole idle fixed segments; with expandable segments use trim() or "
                   "gc_threshold to bound cached memory");
}

void validate_trace_file(const config& c) {
  const std::string& t = c.trace_file;
  for (std::size_t i = 0; i < t.size(); ++i) {
    if (t[i] != '%') continue;
    CACHALOT_EXPECTS(i + 1 < t.size() && (t[i + 1] == 'd' || t[i + 1] == '%'), invalid_argument,
                     "config key 'trace_file': '{}': a % must be followed by d (the device "
                     "ordinal) or % (a percent sign)",
                     t);
    ++i;
  }
}

}  // namespace

void config::validate() const {
  validate_sizes(*this);
  validate_limits(*this);
  validate_trace_file(*this);
}

}  // namespace cachalot
