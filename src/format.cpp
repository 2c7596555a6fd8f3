// The run-time half of detail/format.hpp: parses each replacement field of a format string
// that count_arguments accepted at compile time, and renders its argument.
#include "detail/format.hpp"

#include <cstdio>
#include <cstdlib>
#include <string>

namespace cachalot::detail::format_impl {
namespace {

struct spec {
  char fill = ' ';
  char align = 0;  // 0: the type's default
  bool alt = false;
  bool zero = false;
  std::size_t width = 0;
  int precision = -1;
  char type = 0;
};

std::size_t number_at(std::string_view f, std::size_t& i) {
  std::size_t v = 0;
  while (i < f.size() && f[i] >= '0' && f[i] <= '9')
    v = v * 10 + static_cast<std::size_t>(f[i++] - '0');
  return v;
}

std::size_t integer_of(const arg& a) {
  if (a.k == kind::sint) return a.i < 0 ? 0 : static_cast<std::size_t>(a.i);
  if (a.k == kind::uint) return static_cast<std::size_t>(a.u);
  return 0;
}

/// Parses the spec between ':' and '}' starting at `i`; consumes nested {} arguments.
spec parse_spec(std::string_view f, std::size_t& i, const arg* args, std::size_t& next) {
  spec s;
  auto is_align = [](char a) { return a == '<' || a == '>' || a == '^'; };
  if (i + 1 < f.size() && is_align(f[i + 1]) && f[i] != '{' && f[i] != '}') {
    s.fill = f[i];
    s.align = f[i + 1];
    i += 2;
  } else if (i < f.size() && is_align(f[i])) {
    s.align = f[i++];
  }
  if (i < f.size() && f[i] == '#') s.alt = true, ++i;
  if (i < f.size() && f[i] == '0') s.zero = true, ++i;
  if (i + 1 < f.size() && f[i] == '{' && f[i + 1] == '}') {
    s.width = integer_of(args[next++]);
    i += 2;
  } else {
    s.width = number_at(f, i);
  }
  if (i < f.size() && f[i] == '.') {
    ++i;
    if (i + 1 < f.size() && f[i] == '{' && f[i + 1] == '}') {
      s.precision = static_cast<int>(integer_of(args[next++]));
      i += 2;
    } else {
      s.precision = static_cast<int>(number_at(f, i));
    }
  }
  if (i < f.size() && f[i] != '}') s.type = f[i++];
  return s;
}

/// Pads `body` (with `prefix`, a sign or radix prefix, kept in front of zero padding).
void pad(std::string& out, const spec& s, std::string_view prefix, std::string_view body,
         char default_align) {
  const std::size_t len = prefix.size() + body.size();
  if (s.width <= len) {
    out += prefix;
    out += body;
    return;
  }
  const std::size_t gap = s.width - len;
  if (s.zero && s.align == 0 && default_align == '>') {
    out += prefix;
    out.append(gap, '0');
    out += body;
    return;
  }
  const char align = s.align != 0 ? s.align : default_align;
  const std::size_t before = align == '>' ? gap : align == '^' ? gap / 2 : 0;
  out.append(before, s.fill);
  out += prefix;
  out += body;
  out.append(gap - before, s.fill);
}

std::string digits(unsigned long long v, unsigned base, bool upper) {
  const char* set = upper ? "0123456789ABCDEF" : "0123456789abcdef";
  char buf[72];
  std::size_t n = 0;
  do {
    buf[n++] = set[v % base];
    v /= base;
  } while (v != 0);
  std::string s;
  while (n > 0) s += buf[--n];
  return s;
}

void integer(std::string& out, const spec& s, bool negative, unsigned long long magnitude) {
  unsigned base = 10;
  std::string_view radix;
  switch (s.type) {
    case 'x':
      base = 16, radix = "0x";
      break;
    case 'X':
      base = 16, radix = "0X";
      break;
    case 'b':
      base = 2, radix = "0b";
      break;
    case 'o':
      base = 8, radix = "0";
      break;
    default:
      break;
  }
  std::string prefix = negative ? "-" : "";
  if (s.alt) prefix += radix;
  pad(out, s, prefix, digits(magnitude, base, s.type == 'X'), '>');
}

/// The shortest decimal text that reads back as `v`, laid out as fmt does: fixed notation for
/// decimal exponents in [-4, 16), else d.ddde+XX.
std::string shortest(double v) {
  char buf[64];
  int precision = 0;
  for (; precision < 17; ++precision) {
    std::snprintf(buf, sizeof buf, "%.*e", precision, v);
    if (std::strtod(buf, nullptr) == v) break;
  }
  std::string e(buf);
  const std::size_t epos = e.find('e');
  const int exponent = std::atoi(e.c_str() + epos + 1);
  std::string mantissa;  // the significant digits, without the point
  for (std::size_t k = 0; k < epos; ++k) {
    if (e[k] >= '0' && e[k] <= '9') mantissa += e[k];
  }
  // Built by appending only (GCC 12 at -O3 warns wrongly on some string concatenations).
  std::string r;
  if (e[0] == '-') r += '-';
  if (exponent < -4 || exponent >= 16) {
    r += mantissa[0];
    if (mantissa.size() > 1) r.append(".").append(mantissa, 1, std::string::npos);
    std::snprintf(buf, sizeof buf, "e%c%02d", exponent < 0 ? '-' : '+',
                  exponent < 0 ? -exponent : exponent);
    return r.append(buf);
  }
  if (exponent < 0) {
    r.append("0.").append(static_cast<std::size_t>(-exponent - 1), '0');
    return r.append(mantissa);
  }
  const auto int_digits = static_cast<std::size_t>(exponent) + 1;
  if (mantissa.size() <= int_digits) {
    return r.append(mantissa).append(int_digits - mantissa.size(), '0');
  }
  r.append(mantissa, 0, int_digits).append(".");
  return r.append(mantissa, int_digits, std::string::npos);
}

void floating(std::string& out, const spec& s, long double value) {
  const double v = static_cast<double>(value);
  std::string body;
  if (v != v) {
    body = "nan";
  } else if (v == 1.0 / 0.0 || v == -1.0 / 0.0) {
    body = v < 0 ? "-inf" : "inf";
  } else if (s.type == 0 && s.precision < 0) {
    body = shortest(v);
  } else {
    const char type = s.type == 0 ? 'g' : s.type;
    const char fmt[] = {'%', '.', '*', type, '\0'};
    char buf[512];
    std::snprintf(buf, sizeof buf, fmt, s.precision < 0 ? 6 : s.precision, v);
    body = buf;
  }
  std::string_view prefix;
  std::string_view rest = body;
  if (!rest.empty() && rest.front() == '-') prefix = "-", rest.remove_prefix(1);
  pad(out, s, prefix, rest, '>');
}

void render(std::string& out, const spec& s, const arg& a) {
  switch (a.k) {
    case kind::sint: {
      const bool negative = a.i < 0;
      const unsigned long long magnitude = negative ? 0ULL - static_cast<unsigned long long>(a.i)
                                                    : static_cast<unsigned long long>(a.i);
      return integer(out, s, negative, magnitude);
    }
    case kind::uint:
      return integer(out, s, false, a.u);
    case kind::floating:
      return floating(out, s, a.f);
    case kind::boolean:
      return pad(out, s, "", a.u != 0 ? "true" : "false", '<');
    case kind::character: {
      const char c = static_cast<char>(a.i);
      return pad(out, s, "", std::string_view(&c, 1), '<');
    }
    case kind::pointer:
      return pad(out, s, "0x", digits(reinterpret_cast<std::uintptr_t>(a.p), 16, false), '>');
    case kind::text: {
      std::string_view t = a.s;
      if (s.precision >= 0 && t.size() > static_cast<std::size_t>(s.precision)) {
        t = t.substr(0, static_cast<std::size_t>(s.precision));
      }
      return pad(out, s, "", t, '<');
    }
    case kind::none:
      return;
  }
}

}  // namespace

void malformed_format_string() {}

std::string vformat(std::string_view f, const arg* args, std::size_t count) {
  std::string out;
  out.reserve(f.size() + 16 * count);
  std::size_t next = 0;
  for (std::size_t i = 0; i < f.size(); ++i) {
    const char c = f[i];
    if ((c == '{' || c == '}') && i + 1 < f.size() && f[i + 1] == c) {
      out += c;
      ++i;
      continue;
    }
    if (c != '{') {
      out += c;
      continue;
    }
    ++i;                               // past '{'
    const std::size_t value = next++;  // the field's own argument comes before nested ones
    spec s;
    if (i < f.size() && f[i] == ':') {
      ++i;
      s = parse_spec(f, i, args, next);
    }
    // i is at the closing '}'
    if (value < count) render(out, s, args[value]);
  }
  return out;
}

}  // namespace cachalot::detail::format_impl
