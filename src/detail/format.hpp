// Text formatting for the library's messages and tables, so that libcachalot needs no
// formatting library (fmt stays a dependency of the tests and tools only).
//
// The syntax is the subset of the {fmt} / std::format syntax the library uses:
//   {}                       the next argument, in its natural form
//   {:[[fill]align][#][0][width][.precision][type]}
//       align  < left, > right, ^ centre (numbers default right, text left)
//       #      0x / 0X / 0b / 0 prefix for x / X / b / o
//       0      pad numbers with zeros after the sign and prefix
//       width  a number, or {} to take it from the next (integer) argument
//       type   d x X b o (integers), f e g (floating point), s (text), c (char), p (pointer)
//   {{ and }} for literal braces.
// Arguments: integers (char types print as numbers except plain char), bool, floating point
// (shortest text that reads back to the same value, unless a precision or type is given),
// C strings, std::string, std::string_view, and pointers wrapped in ptr(). The format string is
// checked at compile time: a malformed field or a count of fields that differs from the count
// of arguments does not compile.
#pragma once

#include <cstddef>
#include <cstdint>
#include <string>
#include <string_view>
#include <type_traits>

namespace cachalot::detail {

/// A pointer to be printed as 0x followed by lowercase hex digits (fmt::ptr's form).
struct pointer_arg {
  const void* value;
};

/// Wraps a pointer for format() (a bare pointer is not accepted, as in fmt).
template <class T>
constexpr pointer_arg ptr(T* p) noexcept {
  return pointer_arg{static_cast<const void*>(p)};
}

namespace format_impl {

enum class kind : std::uint8_t { none, sint, uint, floating, text, character, boolean, pointer };

/// One type-erased argument.
struct arg {
  kind k = kind::none;
  long long i = 0;
  unsigned long long u = 0;
  long double f = 0;
  std::string_view s;
  const void* p = nullptr;
};

/// Parses the format string and counts the arguments it consumes; -1 when it is malformed.
constexpr int count_arguments(std::string_view f) noexcept {
  int count = 0;
  for (std::size_t i = 0; i < f.size(); ++i) {
    const char c = f[i];
    if (c == '}') {
      if (i + 1 >= f.size() || f[i + 1] != '}') return -1;
      ++i;
      continue;
    }
    if (c != '{') continue;
    if (i + 1 < f.size() && f[i + 1] == '{') {
      ++i;
      continue;
    }
    ++i;
    ++count;
    if (i < f.size() && f[i] == '}') continue;
    if (i >= f.size() || f[i] != ':') return -1;
    ++i;
    // fill and align
    auto is_align = [](char a) { return a == '<' || a == '>' || a == '^'; };
    if (i + 1 < f.size() && is_align(f[i + 1]) && f[i] != '{' && f[i] != '}') {
      i += 2;
    } else if (i < f.size() && is_align(f[i])) {
      ++i;
    }
    if (i < f.size() && f[i] == '#') ++i;
    if (i < f.size() && f[i] == '0') ++i;
    if (i + 1 < f.size() && f[i] == '{' && f[i + 1] == '}') {
      ++count;
      i += 2;
    } else {
      while (i < f.size() && f[i] >= '0' && f[i] <= '9') ++i;
    }
    if (i < f.size() && f[i] == '.') {
      ++i;
      if (i + 1 < f.size() && f[i] == '{' && f[i + 1] == '}') {
        ++count;
        i += 2;
      } else {
        const std::size_t start = i;
        while (i < f.size() && f[i] >= '0' && f[i] <= '9') ++i;
        if (i == start) return -1;
      }
    }
    if (i < f.size() && std::string_view("dxXbofFeEgGscp").find(f[i]) != std::string_view::npos) {
      ++i;
    }
    if (i >= f.size() || f[i] != '}') return -1;
  }
  return count;
}

/// Called only when a format string is malformed: not constexpr, so that a constant evaluation
/// reaching it fails to compile.
void malformed_format_string();

/// Formats with type-erased arguments. Never fails on a string accepted by count_arguments.
std::string vformat(std::string_view f, const arg* args, std::size_t count);

template <class T>
arg make(const T& v) {
  using U = std::remove_cv_t<T>;
  arg a;
  if constexpr (std::is_same_v<U, bool>) {
    a.k = kind::boolean;
    a.u = v ? 1 : 0;
  } else if constexpr (std::is_same_v<U, char>) {
    a.k = kind::character;
    a.i = v;
  } else if constexpr (std::is_integral_v<U> && std::is_signed_v<U>) {
    a.k = kind::sint;
    a.i = static_cast<long long>(v);
  } else if constexpr (std::is_integral_v<U>) {
    a.k = kind::uint;
    a.u = static_cast<unsigned long long>(v);
  } else if constexpr (std::is_floating_point_v<U>) {
    a.k = kind::floating;
    a.f = static_cast<long double>(v);
  } else if constexpr (std::is_same_v<U, pointer_arg>) {
    a.k = kind::pointer;
    a.p = v.value;
  } else if constexpr (std::is_same_v<U, const char*> || std::is_same_v<U, char*>) {
    a.k = kind::text;
    a.s = v == nullptr ? std::string_view("(null)") : std::string_view(v);
  } else if constexpr (std::is_convertible_v<const U&, std::string_view>) {
    a.k = kind::text;
    a.s = std::string_view(v);
  } else {
    static_assert(std::is_convertible_v<const U&, std::string_view>,
                  "format: unsupported argument type (wrap pointers in ptr())");
  }
  return a;
}

}  // namespace format_impl

/// A format string checked at compile time against the number of arguments.
template <class... Args>
class format_string {
 public:
  template <class S, class = std::enable_if_t<std::is_convertible_v<const S&, std::string_view>>>
  consteval format_string(const S& s) : text_(s) {  // NOLINT(google-explicit-constructor)
    if (format_impl::count_arguments(text_) != static_cast<int>(sizeof...(Args))) {
      format_impl::malformed_format_string();
    }
  }
  /// The format string.
  constexpr std::string_view get() const noexcept { return text_; }

 private:
  std::string_view text_;
};

/// Formats `args` into a new string (see the file comment for the syntax).
template <class... Args>
std::string format(format_string<std::type_identity_t<Args>...> f, const Args&... args) {
  const format_impl::arg list[sizeof...(Args) + 1] = {format_impl::make(args)...,
                                                      format_impl::arg{}};
  return format_impl::vformat(f.get(), list, sizeof...(Args));
}

/// The names format and ptr under `fmt::` too, so that internal code written against fmt's
/// API (fmt::format, fmt::ptr) compiles unchanged against this formatter.
namespace fmt {
using detail::format;
using detail::ptr;
}  // namespace fmt

}  // namespace cachalot::detail
