// Parsing of config values (see detail/config_values.hpp). Numbers are read digit by digit with
// overflow checks; nothing here depends on the locale.
#include "detail/config_values.hpp"

#include <algorithm>
#include <cctype>
#include <cstdlib>
#include <limits>
#include <vector>

#include "cachalot/errors.hpp"
#include "detail/checks.hpp"

namespace cachalot::detail {
namespace {

constexpr std::uint64_t u64_max = std::numeric_limits<std::uint64_t>::max();

/// A decimal number "I" or "I.F": integer part, fraction digits as an integer, their count.
struct decimal {
  std::uint64_t whole = 0;
  std::uint64_t fraction = 0;
  unsigned fraction_digits = 0;
};

bool is_digit(char c) noexcept {
  return c >= '0' && c <= '9';
}

/// Reads a decimal number at the front of `text` (advancing it); the key names errors.
decimal read_decimal(std::string_view& text, std::string_view key, std::string_view whole_value) {
  CACHALOT_EXPECTS(text.empty() || text.front() != '-', invalid_argument,
                   "config key '{}': '{}' must not be negative", key, whole_value);
  decimal d;
  std::size_t i = 0;
  while (i < text.size() && is_digit(text[i])) {
    const auto digit = static_cast<std::uint64_t>(text[i] - '0');
    CACHALOT_EXPECTS(d.whole <= (u64_max - digit) / 10, invalid_argument,
                     "config key '{}': '{}' overflows", key, whole_value);
    d.whole = d.whole * 10 + digit;
    ++i;
  }
  const bool have_whole = i > 0;
  if (i < text.size() && text[i] == '.') {
    ++i;
    while (i < text.size() && is_digit(text[i])) {
      CACHALOT_EXPECTS(d.fraction_digits < 9, invalid_argument,
                       "config key '{}': '{}' has more than 9 decimals", key, whole_value);
      d.fraction = d.fraction * 10 + static_cast<std::uint64_t>(text[i] - '0');
      ++d.fraction_digits;
      ++i;
    }
    CACHALOT_EXPECTS(d.fraction_digits > 0 || have_whole, invalid_argument,
                     "config key '{}': '{}' is not a number", key, whole_value);
  }
  CACHALOT_EXPECTS(have_whole || d.fraction_digits > 0, invalid_argument,
                   "config key '{}': '{}' is not a number", key, whole_value);
  text.remove_prefix(i);
  return d;
}

std::uint64_t pow10(unsigned n) noexcept {
  std::uint64_t p = 1;
  while (n-- > 0) p *= 10;
  return p;
}

struct unit_def {
  const char* name;
  std::uint64_t factor;
};

constexpr unit_def units[] = {
    {"B", 1},
    {"KiB", std::uint64_t{1} << 10},
    {"MiB", std::uint64_t{1} << 20},
    {"GiB", std::uint64_t{1} << 30},
    {"TiB", std::uint64_t{1} << 40},
    {"KB", 1000},
    {"MB", std::uint64_t{1000} * 1000},
    {"GB", std::uint64_t{1000} * 1000 * 1000},
    {"TB", std::uint64_t{1000} * 1000 * 1000 * 1000},
};

constexpr const char* unit_list = "B, KiB, MiB, GiB, TiB, or KB, MB, GB, TB for powers of 1000";

}  // namespace

std::string_view trim(std::string_view s) noexcept {
  while (!s.empty() && std::isspace(static_cast<unsigned char>(s.front()))) s.remove_prefix(1);
  while (!s.empty() && std::isspace(static_cast<unsigned char>(s.back()))) s.remove_suffix(1);
  return s;
}

bool iequals(std::string_view a, std::string_view b) noexcept {
  if (a.size() != b.size()) return false;
  for (std::size_t i = 0; i < a.size(); ++i) {
    if (std::tolower(static_cast<unsigned char>(a[i])) !=
        std::tolower(static_cast<unsigned char>(b[i]))) {
      return false;
    }
  }
  return true;
}

std::size_t parse_size_value(std::string_view text, std::string_view key, unit_rule rule) {
  const std::string_view value = trim(text);
  std::string_view rest = value;
  const decimal d = read_decimal(rest, key, value);
  const std::string_view unit = trim(rest);
  std::uint64_t factor = 0;
  if (unit.empty()) {
    const bool zero = d.whole == 0 && d.fraction == 0;
    if (rule == unit_rule::required && !zero) {
      if (key == "memory_limit") {
        CACHALOT_FAIL(invalid_argument,
                      "config key 'memory_limit': '{}' has no unit and would mean {} bytes; write "
                      "{}% for a share of the device or {}GiB (units: {})",
                      value, value, value, value, unit_list);
      }
      CACHALOT_FAIL(invalid_argument,
                    "config key '{}': '{}' has no unit and would mean {} bytes; write e.g. {}GiB "
                    "or {}MiB, or {}B for bytes (units: {})",
                    key, value, value, value, value, value, unit_list);
    }
    factor = 1;
  } else {
    for (const unit_def& u : units) {
      if (iequals(unit, u.name)) factor = u.factor;
    }
    CACHALOT_EXPECTS(factor != 0, invalid_argument,
                     "config key '{}': unknown unit '{}' in '{}' (use {})", key, unit, value,
                     unit_list);
  }
  CACHALOT_EXPECTS(d.fraction_digits == 0 || factor > 1, invalid_argument,
                   "config key '{}': '{}' is not a whole number of bytes", key, value);
  // bytes = whole x factor + floor(fraction x factor / 10^digits), without overflow: with
  // factor = q x 10^digits + r, the second term is q x fraction + floor(r x fraction / 10^digits).
  const std::uint64_t p = pow10(d.fraction_digits);
  const std::uint64_t part = factor / p * d.fraction + factor % p * d.fraction / p;
  std::uint64_t bytes = 0;
  CACHALOT_EXPECTS(!__builtin_mul_overflow(d.whole, factor, &bytes) &&
                       !__builtin_add_overflow(bytes, part, &bytes) &&
                       bytes <= std::numeric_limits<std::size_t>::max(),
                   invalid_argument, "config key '{}': '{}' overflows", key, value);
  return static_cast<std::size_t>(bytes);
}

std::uint64_t parse_duration_ns(std::string_view text, std::string_view key, std::string_view value,
                                std::uint64_t max_ns) {
  static constexpr unit_def time_units[] = {
      {"ns", 1}, {"us", 1000}, {"ms", 1000 * 1000}, {"s", 1000 * 1000 * 1000}};
  const std::string_view t = trim(text);
  std::string_view rest = t;
  const decimal d = read_decimal(rest, key, value);
  const std::string_view unit = trim(rest);
  if (unit.empty()) {
    CACHALOT_EXPECTS(d.whole == 0 && d.fraction == 0, invalid_argument,
                     "config key '{}': '{}' in '{}' has no unit; write e.g. {}us (units: ns, us, "
                     "ms, s)",
                     key, t, value, t);
    return 0;
  }
  std::uint64_t factor = 0;
  for (const unit_def& u : time_units) {
    if (iequals(unit, u.name)) factor = u.factor;
  }
  CACHALOT_EXPECTS(factor != 0, invalid_argument,
                   "config key '{}': unknown unit '{}' in '{}' (use ns, us, ms or s)", key, unit,
                   value);
  const std::uint64_t p = pow10(d.fraction_digits);
  const std::uint64_t part = (d.fraction * factor + p / 2) / p;  // to the nearest ns (< 1e18)
  std::uint64_t ns = 0;
  CACHALOT_EXPECTS(!__builtin_mul_overflow(d.whole, factor, &ns) &&
                       !__builtin_add_overflow(ns, part, &ns) && ns <= max_ns,
                   invalid_argument, "config key '{}': '{}' in '{}' is above the limit of {} s",
                   key, t, value, max_ns / 1000000000);
  return ns;
}

std::uint64_t parse_count(std::string_view text, std::string_view key) {
  const std::string_view value = trim(text);
  std::string_view rest = value;
  const decimal d = read_decimal(rest, key, value);
  CACHALOT_EXPECTS(rest.empty() && d.fraction_digits == 0, invalid_argument,
                   "config key '{}': '{}' is not a whole number", key, value);
  return d.whole;
}

double parse_fraction(std::string_view text, std::string_view key) {
  const std::string_view value = trim(text);
  std::string_view rest = value;
  const decimal d = read_decimal(rest, key, value);
  const double f = static_cast<double>(d.whole) +
                   static_cast<double>(d.fraction) / static_cast<double>(pow10(d.fraction_digits));
  CACHALOT_EXPECTS(rest.empty() && f > 0.0 && f <= 1.0, invalid_argument,
                   "config key '{}': '{}' is not a fraction in (0, 1]", key, value);
  // Read again with strtod so that the value is the double nearest to the text, as to_string's
  // shortest form expects when it is parsed back.
  return std::strtod(std::string(value).c_str(), nullptr);
}

double parse_percent(std::string_view text, std::string_view key) {
  std::string_view value = trim(text);
  CACHALOT_EXPECTS(!value.empty() && value.back() == '%', invalid_argument,
                   "config key '{}': '{}' is not a percentage", key, value);
  std::string_view number = trim(value.substr(0, value.size() - 1));
  std::string_view rest = number;
  const decimal d = read_decimal(rest, key, value);
  const double pct =
      static_cast<double>(d.whole) +
      static_cast<double>(d.fraction) / static_cast<double>(pow10(d.fraction_digits));
  CACHALOT_EXPECTS(rest.empty() && pct > 0.0 && pct <= 100.0, invalid_argument,
                   "config key '{}': '{}' is not a percentage in (0, 100]", key, value);
  return pct / 100.0;
}

bool parse_bool(std::string_view text, std::string_view key) {
  const std::string_view v = trim(text);
  if (v == "1" || iequals(v, "true") || iequals(v, "on") || iequals(v, "yes")) return true;
  if (v == "0" || iequals(v, "false") || iequals(v, "off") || iequals(v, "no")) return false;
  CACHALOT_FAIL(invalid_argument, "config key '{}': '{}' is not a boolean (use 0/1/true/false)",
                key, v);
}

namespace {

bool is_pow2(std::uint64_t v) noexcept {
  return v != 0 && (v & (v - 1)) == 0;
}

unsigned log2_floor(std::uint64_t v) noexcept {
  return 63u - static_cast<unsigned>(__builtin_clzll(v));
}

std::uint32_t division_value(std::string_view text, std::string_view key, bool zero_ok) {
  const std::uint64_t v = parse_count(text, key);
  CACHALOT_EXPECTS((zero_ok && v == 0) || (is_pow2(v) && v <= (std::uint64_t{1} << 31)),
                   invalid_argument,
                   "config key '{}': {} divisions: must be a power of two up to 2^31{}", key,
                   trim(text), zero_ok ? " or 0" : "");
  return static_cast<std::uint32_t>(v);
}

}  // namespace

std::array<std::uint32_t, config::roundup_intervals> parse_divisions(std::string_view text,
                                                                     std::string_view key) {
  std::array<std::uint32_t, config::roundup_intervals> out{};
  const std::string_view value = trim(text);
  if (value.empty() || value.front() != '[') {
    out.fill(division_value(value, key, true));
    return out;
  }
  CACHALOT_EXPECTS(value.back() == ']', invalid_argument,
                   "config key '{}': '{}' lacks its closing ']'", key, value);
  std::vector<std::string_view> entries;
  for (std::string_view list = value.substr(1, value.size() - 2);;) {
    const std::size_t comma = list.find(',');
    entries.push_back(trim(list.substr(0, comma)));
    if (comma == std::string_view::npos) break;
    list.remove_prefix(comma + 1);
  }
  bool closed = false;  // a ">" entry was seen
  std::size_t last = 0;
  for (std::size_t k = 0; k < entries.size(); ++k) {
    const std::string_view entry = entries[k];
    const std::size_t colon = entry.find(':');
    CACHALOT_EXPECTS(colon != std::string_view::npos, invalid_argument,
                     "config key '{}': entry '{}' of '{}' is not BOUNDARY:DIVISIONS", key, entry,
                     value);
    CACHALOT_EXPECTS(!closed, invalid_argument,
                     "config key '{}': '>' must be the last entry of '{}'", key, value);
    const std::string_view bound = trim(entry.substr(0, colon));
    const std::uint32_t d = division_value(entry.substr(colon + 1), key, true);
    if (bound == ">") {
      for (std::size_t i = k == 0 ? 1 : last + 1; i < out.size(); ++i) out[i] = d;
      closed = true;
      continue;
    }
    const std::uint64_t mib = parse_count(bound, key);
    CACHALOT_EXPECTS(is_pow2(mib), invalid_argument,
                     "config key '{}': boundary {} MiB in '{}' is not a power of two", key, bound,
                     value);
    const std::size_t index = std::min<std::size_t>(log2_floor(mib), config::roundup_intervals - 1);
    CACHALOT_EXPECTS(k == 0 || index > last, invalid_argument,
                     "config key '{}': boundaries in '{}' must increase", key, value);
    if (k == 0) std::fill(out.begin(), out.begin() + static_cast<std::ptrdiff_t>(index), d);
    out[index] = d;
    last = index;
  }
  return out;
}

std::string format_divisions(const std::array<std::uint32_t, config::roundup_intervals>& d) {
  if (std::all_of(d.begin(), d.end(), [](std::uint32_t v) { return v == 0; })) return "";
  if (std::all_of(d.begin(), d.end(), [&](std::uint32_t v) { return v == d[0]; })) {
    return detail::format("{}", d[0]);
  }
  // The leading run as one entry (it fills every interval below), then each interval, the
  // trailing run after the last entry as ">".
  std::size_t lead = 0;
  while (lead + 1 < d.size() && d[lead + 1] == d[0]) ++lead;
  std::size_t tail = d.size() - 1;
  while (tail > lead + 1 && d[tail - 1] == d.back()) --tail;
  std::string s = detail::format("[{}:{}", std::uint64_t{1} << lead, d[0]);
  for (std::size_t i = lead + 1; i < tail; ++i)
    s += detail::format(",{}:{}", std::uint64_t{1} << i, d[i]);
  if (tail > lead) s += detail::format(",>:{}", d.back());
  return s.append("]");
}

std::size_t edit_distance(std::string_view a, std::string_view b) {
  std::vector<std::size_t> row(b.size() + 1);
  for (std::size_t j = 0; j <= b.size(); ++j) row[j] = j;
  for (std::size_t i = 1; i <= a.size(); ++i) {
    std::size_t diagonal = row[0];
    row[0] = i;
    for (std::size_t j = 1; j <= b.size(); ++j) {
      const std::size_t above = row[j];
      const auto lower = [](char c) { return c >= 'A' && c <= 'Z' ? c - 'A' + 'a' : c; };
      const bool same = lower(a[i - 1]) == lower(b[j - 1]);
      row[j] = std::min({row[j] + 1, row[j - 1] + 1, diagonal + (same ? 0 : 1)});
      diagonal = above;
    }
  }
  return row[b.size()];
}

}  // namespace cachalot::detail
