// Parsing of RMM-format CSV traces (see trace.hpp) and their replay-free summary.
#include "trace/trace.hpp"

#include <sys/stat.h>

#include <algorithm>
#include <array>
#include <cerrno>
#include <charconv>
#include <cstring>
#include <fstream>
#include <iostream>
#include <sstream>
#include <unordered_map>
#include <unordered_set>

namespace cachalot::tools {
namespace {

constexpr std::size_t field_count = 6;
using fields = std::array<std::string_view, field_count>;

std::string_view trim(std::string_view s) {
  while (!s.empty() && (s.front() == ' ' || s.front() == '\t')) s.remove_prefix(1);
  while (!s.empty() && (s.back() == ' ' || s.back() == '\t' || s.back() == '\r')) {
    s.remove_suffix(1);
  }
  return s;
}

/// Splits a line into exactly six trimmed fields; false when the count differs.
bool split_fields(std::string_view line, fields& out, std::size_t& count) {
  count = 0;
  while (true) {
    const std::size_t comma = line.find(',');
    if (count == field_count) return (count = field_count + 1), false;
    out[count++] = trim(line.substr(0, comma));
    if (comma == std::string_view::npos) break;
    line.remove_prefix(comma + 1);
  }
  return count == field_count;
}

template <typename T>
bool parse_number(std::string_view s, T& value, int base = 10) {
  if (s.empty()) return false;
  const auto [end, ec] = std::from_chars(s.data(), s.data() + s.size(), value, base);
  return ec == std::errc{} && end == s.data() + s.size();
}

/// Parses a hex number with or without a 0x prefix; "(nil)" and "0" are zero.
bool parse_hex(std::string_view s, std::uintptr_t& value) {
  if (s == "(nil)" || s == "nullptr" || s == "NULL") return (value = 0), true;
  if (s.size() > 2 && s[0] == '0' && (s[1] == 'x' || s[1] == 'X')) s.remove_prefix(2);
  return parse_number(s, value, 16);
}

/// Parses HH:MM:SS[.fraction] into microseconds (the fraction has 1 to 9 digits).
bool parse_time(std::string_view s, std::uint64_t& us) {
  const std::size_t c1 = s.find(':');
  const std::size_t c2 = c1 == std::string_view::npos ? c1 : s.find(':', c1 + 1);
  if (c2 == std::string_view::npos) return false;
  const std::size_t dot = s.find('.', c2 + 1);
  const std::string_view frac = dot == std::string_view::npos ? "" : s.substr(dot + 1);
  if (dot != std::string_view::npos && (frac.empty() || frac.size() > 9)) return false;
  std::uint64_t h = 0, m = 0, sec = 0, fraction = 0;
  if (!parse_number(s.substr(0, c1), h) || !parse_number(s.substr(c1 + 1, c2 - c1 - 1), m) ||
      !parse_number(s.substr(c2 + 1, dot - c2 - 1), sec) ||
      (!frac.empty() && !parse_number(frac, fraction)) || m > 59 || sec > 60) {
    return false;
  }
  for (std::size_t digits = frac.size(); digits < 6; ++digits) fraction *= 10;
  for (std::size_t digits = frac.size(); digits > 6; --digits) fraction /= 10;
  us = ((h * 60 + m) * 60 + sec) * 1000000 + fraction;
  return true;
}

bool parse_action(std::string_view s, trace_action& action) {
  if (s == "allocate") return (action = trace_action::allocate), true;
  if (s == "free") return (action = trace_action::free), true;
  if (s == "allocate failure") return (action = trace_action::allocate_failure), true;
  return false;
}

/// Parses one data line. @throws trace_error
trace_event parse_line(std::string_view line, const std::string& name, std::size_t number) {
  fields f{};
  std::size_t count = 0;
  if (!split_fields(line, f, count)) {
    throw trace_error(name, number,
                      "expected 6 comma-separated fields, found " +
                          (count > field_count ? std::string("more") : std::to_string(count)));
  }
  auto fail = [&](const char* what, std::string_view value) {
    throw trace_error(name, number, std::string(what) + " '" + std::string(value) + "'");
  };
  trace_event e;
  e.line = number;
  if (!parse_number(f[0], e.thread)) fail("bad thread id", f[0]);
  if (!parse_time(f[1], e.time_us)) fail("bad time (want HH:MM:SS.microseconds)", f[1]);
  if (!parse_action(f[2], e.action))
    fail("bad action (want allocate, free or allocate failure)", f[2]);
  if (!parse_hex(f[3], e.pointer)) fail("bad pointer", f[3]);
  if (!parse_number(f[4], e.size)) fail("bad size", f[4]);
  if (e.size > max_trace_size) fail("size beyond any device (more than 1 PiB)", f[4]);
  if (!parse_hex(f[5], e.stream)) fail("bad stream", f[5]);
  if (e.action == trace_action::allocate && e.pointer == 0 && e.size != 0) {
    fail("allocation of a null pointer", f[3]);
  }
  return e;
}

/// Reads a "# pytorch.KEY: VALUE" comment into `t`; other comments are ignored.
void parse_comment(std::string_view text, trace& t, std::size_t number) {
  text.remove_prefix(1);
  text = trim(text);
  const std::size_t colon = text.find(':');
  if (colon == std::string_view::npos) return;
  const std::string_view key = trim(text.substr(0, colon));
  const std::string_view value = trim(text.substr(colon + 1));
  if (key == "pytorch.peak_reserved") {
    if (!parse_number(value, t.pytorch.peak_reserved) || t.pytorch.peak_reserved > max_trace_size) {
      throw trace_error(t.name, number, "bad pytorch.peak_reserved '" + std::string(value) + "'");
    }
    t.pytorch.present = true;
  } else if (key == "pytorch.peak_reserved_kind") {
    t.pytorch.exact = value == "exact";
  }
}

}  // namespace

trace_error::trace_error(const std::string& file, std::size_t line, const std::string& what)
    : std::runtime_error(file + ":" + std::to_string(line) + ": " + what),
      file_(file),
      line_(line) {}

trace parse_trace(std::istream& in, const std::string& name) {
  trace t;
  t.name = name;
  std::string line;
  std::size_t number = 0;
  bool header_seen = false;
  while (std::getline(in, line)) {
    ++number;
    std::string_view text = trim(line);
    if (number == 1 && text.substr(0, 3) == "\xEF\xBB\xBF") text.remove_prefix(3);  // UTF-8 BOM
    if (number == 1 && (text.substr(0, 2) == "\xFF\xFE" || text.substr(0, 2) == "\xFE\xFF")) {
      throw trace_error(name, number, "UTF-16 text (byte-order mark): save the trace as UTF-8");
    }
    if (text.empty()) continue;
    if (text.front() == '#') {
      parse_comment(text, t, number);
      continue;
    }
    if (!header_seen) {
      if (text != trace_header) {
        throw trace_error(name, number, "bad header, expected '" + std::string(trace_header) + "'");
      }
      header_seen = true;
      continue;
    }
    t.events.push_back(parse_line(text, name, number));
  }
  if (in.bad()) throw trace_error(name, number, "read error");
  if (!header_seen) throw trace_error(name, number == 0 ? 1 : number, "empty trace, no header");
  return t;
}

trace parse_trace_text(std::string_view text, const std::string& name) {
  std::istringstream in{std::string(text)};
  return parse_trace(in, name);
}

trace load_trace(const std::string& path) {
  if (path == "-") return parse_trace(std::cin, "stdin");
  struct stat st {};
  if (::stat(path.c_str(), &st) != 0) {
    throw trace_error(path, 0, std::string("cannot open: ") + std::strerror(errno));
  }
  if (S_ISDIR(st.st_mode))
    throw trace_error(path, 0, std::string("cannot read: ") + std::strerror(EISDIR));
  std::ifstream in(path);
  if (!in) throw trace_error(path, 0, std::string("cannot open: ") + std::strerror(errno));
  return parse_trace(in, path);
}

trace_summary summarize(const trace& t) {
  trace_summary s;
  std::unordered_map<std::uintptr_t, std::size_t> live;
  std::unordered_set<std::uint64_t> threads;
  std::unordered_set<std::uintptr_t> streams;
  std::size_t requested = 0;
  constexpr std::uint64_t day_us = std::uint64_t{24} * 3600 * 1000000;
  std::uint64_t days = 0, last = 0, first = 0, latest = 0;  // unwrapped times
  bool any = false;
  for (const trace_event& e : t.events) {
    std::uint64_t at = e.time_us + days;
    if (any && at + day_us / 2 < last) days += day_us, at += day_us;  // past midnight
    if (!any) first = at, latest = at, any = true;
    first = std::min(first, at);
    latest = std::max(latest, at);
    last = at;
    threads.insert(e.thread);
    streams.insert(e.stream);
    if (e.action == trace_action::allocate_failure) {
      ++s.recorded_failures;
      continue;
    }
    ++s.ops;
    if (e.action == trace_action::allocate) {
      ++s.allocations;
      if (e.pointer == 0) continue;
      if (!live.emplace(e.pointer, e.size).second) {
        ++s.duplicate_allocations;
        continue;
      }
      requested += e.size;  // at most 1 PiB each, checked below: no overflow
      if (requested > max_trace_size) {
        throw trace_error(t.name, e.line, "live allocations add up to more than 1 PiB");
      }
      s.peak_requested_bytes = std::max(s.peak_requested_bytes, requested);
      s.largest_allocation = std::max(s.largest_allocation, e.size);
      continue;
    }
    ++s.frees;
    if (e.pointer == 0) continue;
    const auto it = live.find(e.pointer);
    if (it == live.end()) {
      ++s.unknown_frees;
      continue;
    }
    requested -= it->second;
    live.erase(it);
  }
  s.threads = threads.size();
  s.streams = streams.size();
  s.span_us = latest - first;
  s.pytorch = t.pytorch;
  return s;
}

}  // namespace cachalot::tools
