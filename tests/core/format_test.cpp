// The library's own formatter (src/detail/format.hpp) against fmt, the reference for its
// syntax: the same text for every form the library uses, and more.
#include "detail/format.hpp"

#include <fmt/format.h>
#include <gtest/gtest.h>

#include <cstdint>
#include <limits>
#include <string>

namespace cachalot::detail {
namespace {

#define SAME(...) EXPECT_EQ(::cachalot::detail::format(__VA_ARGS__), ::fmt::format(__VA_ARGS__))

TEST(Format, IntegersAsFmt) {
  SAME("{}", 0);
  SAME("{} {} {}", -1, 42u, std::numeric_limits<std::int64_t>::min());
  SAME("{}", std::numeric_limits<std::uint64_t>::max());
  SAME("{:#x}", 0xdeadbeefULL);
  SAME("{:x} {:X} {:#X}", 255, 255, 255);
  SAME("{:#04x}", static_cast<unsigned char>(0xa));
  SAME("{:#04x}", static_cast<unsigned char>(0xdb));
  SAME("{:>12}|{:<8}|{:^7}", 123, 45, 6);
  SAME("{:08}", -42);
  SAME("{:#010x}", 255);
  SAME("{:b} {:#b} {:o}", 5, 5, 8);
  SAME("{:*>6}", 7);
  SAME("{}", static_cast<unsigned char>(200));
  SAME("{}", static_cast<signed char>(-5));
}

TEST(Format, FloatingPointAsFmt) {
  for (double v : {0.0, 0.9, 0.25, 1.0, 100.0, 1e15, 1e16, 123456.789, 1e-4, 1e-5, 0.1 + 0.2,
                   1.0 / 3, -2.5, 5e-324, 1.7976931348623157e308, 0.75, 3.0e-3}) {
    SAME("{}", v);
    SAME("{:.2f}", v);
    SAME("{:.1f}", v);
  }
  SAME("{:.3e}", 1234567.0);
  SAME("{:.3}", 2.0 / 3);
  SAME("{:>10.2f}|", 3.14159);
  SAME("{}", 0.5f);
}

TEST(Format, TextBoolCharPointers) {
  const std::string s = "text";
  SAME("[{}] [{:<8}] [{:>8}] [{:^8}]", s, s, std::string_view("view"), "lit");
  SAME("{:.2}", s);
  SAME("{} {}", true, false);
  SAME("{}{}", 'a', 'b');
  int x = 0;
  EXPECT_EQ(format("{}", ptr(&x)), ::fmt::format("{}", ::fmt::ptr(&x)));
  EXPECT_EQ(format("{}", ptr(static_cast<void*>(nullptr))), "0x0");
  EXPECT_EQ(format("{:>10}|", ptr(reinterpret_cast<void*>(0x10))), "      0x10|");
  SAME("{{}} {{{}}}", 1);
  SAME("| {:<{}}|", s, 10);
  SAME("{:>{}}", 5, 4);
  EXPECT_EQ(format("{}", static_cast<const char*>(nullptr)), "(null)");
}

TEST(Format, FormatStringsAreCheckedAtCompileTime) {
  using format_impl::count_arguments;
  static_assert(count_arguments("{} and {}") == 2);
  static_assert(count_arguments("{:<{}}") == 2);
  static_assert(count_arguments("{{}}") == 0);
  static_assert(count_arguments("{:#04x}") == 1);
  static_assert(count_arguments("{") == -1);
  static_assert(count_arguments("}") == -1);
  static_assert(count_arguments("{:q}") == -1);
  static_assert(count_arguments("{0}") == -1);  // no explicit argument ids
  static_assert(count_arguments("{:.}") == -1);
  // format("{} {}", 1) would not compile: the count differs from the arguments.
}

}  // namespace
}  // namespace cachalot::detail
