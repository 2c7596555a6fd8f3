// Error raising for the internals. Every throw goes through CACHALOT_FAIL, which formats the
// message out of line (cold) and records the file and line that raised it, so that hot paths
// keep only a compare and a call. Messages use the library's own formatter (detail/format.hpp,
// fmt's syntax), checked at compile time.
#pragma once

#include <string>

#include "cachalot/errors.hpp"
#include "detail/format.hpp"

namespace cachalot::detail {

/// Throws `E` with a message and source location. Never inlined: keeps callers small.
template <class E>
[[noreturn, gnu::cold, gnu::noinline]] void throw_error(const char* file, int line,
                                                        const std::string& message) {
  throw E(message, file, line);
}

}  // namespace cachalot::detail

/// Throws exception type `exc` (invalid_argument, invalid_pointer, backend_error,
/// not_supported) with a formatted message (detail/format.hpp), recording where it came from.
#define CACHALOT_FAIL(exc, ...) \
  ::cachalot::detail::throw_error<exc>(__FILE__, __LINE__, ::cachalot::detail::format(__VA_ARGS__))

/// Checks `cond`; throws as CACHALOT_FAIL when it does not hold.
#define CACHALOT_EXPECTS(cond, exc, ...) \
  do {                                   \
    if (!(cond)) [[unlikely]] {          \
      CACHALOT_FAIL(exc, __VA_ARGS__);   \
    }                                    \
  } while (0)
