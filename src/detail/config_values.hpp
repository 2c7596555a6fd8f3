// The value syntax of config strings: sizes with units, durations, fractions, percentages,
// booleans, counts and PyTorch's roundup_power2_divisions, each parsed strictly. Every error is an
// invalid_argument that names the key and the value ("config key 'capacity': ..."). Also the
// edit distance behind "did you mean".
#pragma once

#include <array>
#include <cstddef>
#include <cstdint>
#include <string>
#include <string_view>

#include "cachalot/config.hpp"

namespace cachalot::detail {

/// Whether a size value needs a unit.
enum class unit_rule : std::uint8_t {
  optional,  ///< a bare number is a byte count
  required,  ///< a bare number other than 0 is rejected (with a suggestion)
};

/// Removes leading and trailing white space.
std::string_view trim(std::string_view s) noexcept;

/// True if `a` and `b` are equal ignoring ASCII case.
bool iequals(std::string_view a, std::string_view b) noexcept;

/// A size: digits, an optional fraction, an optional unit. Decimal units are powers of 1000; a
/// fraction is rounded down to a whole byte. @throws invalid_argument
std::size_t parse_size_value(std::string_view text, std::string_view key, unit_rule rule);

/// A duration in nanoseconds: digits, an optional fraction and a unit (ns, us, ms, s; any case);
/// a bare 0 is accepted, any other bare number is refused. The result is rounded to the nearest
/// nanosecond and must be at most `max_ns`. `value` (the whole config value) names errors.
/// @throws invalid_argument naming the key and the value
std::uint64_t parse_duration_ns(std::string_view text, std::string_view key,
                                std::string_view value, std::uint64_t max_ns);

/// A plain unsigned integer (no unit, no fraction). @throws invalid_argument
std::uint64_t parse_count(std::string_view text, std::string_view key);

/// A fraction in (0, 1]. @throws invalid_argument
double parse_fraction(std::string_view text, std::string_view key);

/// A percentage "NN%" or "NN.N%" in (0, 100], returned as a fraction. @throws invalid_argument
double parse_percent(std::string_view text, std::string_view key);

/// 0/1, true/false, on/off, yes/no (any case). @throws invalid_argument
bool parse_bool(std::string_view text, std::string_view key);

/// roundup_power2_divisions: "N" or "[B:d,...,>:d]" (see config.hpp). @throws invalid_argument
std::array<std::uint32_t, config::roundup_intervals> parse_divisions(std::string_view text,
                                                                     std::string_view key);

/// The string form of a divisions table that parse_divisions reads back unchanged ("" when
/// every interval is 0).
std::string format_divisions(const std::array<std::uint32_t, config::roundup_intervals>& d);

/// Levenshtein distance between two short strings.
std::size_t edit_distance(std::string_view a, std::string_view b);

}  // namespace cachalot::detail
