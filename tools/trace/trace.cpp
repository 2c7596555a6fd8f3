// Parsing of RMM-format CSV traces (see trace.hpp) and their replay-free summary. A trace file
// named *.gz is read through `gzip -dc` (a child process, no shell): the library needs no zlib,
// and the tool none either.
#include "trace/trace.hpp"

#include <fcntl.h>
#include <signal.h>
#include <spawn.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <array>
#include <cerrno>
#include <charconv>
#include <cstring>
#include <fstream>
#include <iostream>
#include <sstream>
#include <streambuf>
#include <unordered_map>
#include <unordered_set>

extern char** environ;  // NOLINT: posix_spawnp's environment

namespace cachalot::tools {
namespace {

constexpr std::size_t field_count = 6;
constexpr std::size_t max_field_count = field_count + 1;  // with the site column
using fields = std::array<std::string_view, max_field_count>;

std::string_view trim(std::string_view s) {
  while (!s.empty() && (s.front() == ' ' || s.front() == '\t')) s.remove_prefix(1);
  while (!s.empty() && (s.back() == ' ' || s.back() == '\t' || s.back() == '\r')) {
    s.remove_suffix(1);
  }
  return s;
}

/// Splits a line into exactly `want` trimmed fields; false when the count differs (`count`
/// is then the count found, or want + 1 for more).
bool split_fields(std::string_view line, fields& out, std::size_t want, std::size_t& count) {
  count = 0;
  while (true) {
    const std::size_t comma = line.find(',');
    if (count == want) return (count = want + 1), false;
    out[count++] = trim(line.substr(0, comma));
    if (comma == std::string_view::npos) break;
    line.remove_prefix(comma + 1);
  }
  return count == want;
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
  if (s == "sleep offload") return (action = trace_action::sleep_offload), true;
  if (s == "sleep discard") return (action = trace_action::sleep_discard), true;
  if (s == "wake") return (action = trace_action::wake), true;
  return false;
}

/// Parses one data line (with a seventh field, the site, when `with_site`). @throws trace_error
trace_event parse_line(std::string_view line, const std::string& name, std::size_t number,
                       bool with_site) {
  fields f{};
  std::size_t count = 0;
  const std::size_t want = with_site ? max_field_count : field_count;
  if (!split_fields(line, f, want, count)) {
    throw trace_error(name, number,
                      "expected " + std::to_string(want) + " comma-separated fields, found " +
                          (count > want ? std::string("more") : std::to_string(count)));
  }
  auto fail = [&](const char* what, std::string_view value) {
    throw trace_error(name, number, std::string(what) + " '" + std::string(value) + "'");
  };
  trace_event e;
  e.line = number;
  if (!parse_number(f[0], e.thread)) fail("bad thread id", f[0]);
  if (!parse_time(f[1], e.time_us)) fail("bad time (want HH:MM:SS.microseconds)", f[1]);
  if (!parse_action(f[2], e.action))
    fail(
        "bad action (want allocate, free, allocate failure, sleep offload, sleep discard or "
        "wake)",
        f[2]);
  if (!parse_hex(f[3], e.pointer)) fail("bad pointer", f[3]);
  if (!parse_number(f[4], e.size)) fail("bad size", f[4]);
  if (e.size > max_trace_size) fail("size beyond any device (more than 1 PiB)", f[4]);
  if (!parse_hex(f[5], e.stream)) fail("bad stream", f[5]);
  if (e.action == trace_action::allocate && e.pointer == 0 && e.size != 0) {
    fail("allocation of a null pointer", f[3]);
  }
  if (is_pool_event(e.action) && (e.pointer != 0 || e.size != 0)) {
    fail("a pool's sleep or wake has pointer (nil) and size 0, not", line);
  }
  if (with_site && !f[6].empty() &&
      (!parse_number(f[6], e.site) || e.site == 0 || e.site > max_trace_sites)) {
    fail("bad site (want an id from 1 to 1048576, or nothing)", f[6]);
  }
  return e;
}

/// Reads "# site ID: TEXT" into t.sites. @throws trace_error
void parse_site(std::string_view id_text, std::string_view value, trace& t, std::size_t number) {
  std::uint32_t id = 0;
  if (!parse_number(id_text, id) || id == 0 || id > max_trace_sites) {
    throw trace_error(t.name, number, "bad site id '" + std::string(id_text) + "'");
  }
  if (t.sites.size() <= id) t.sites.resize(id + 1);
  if (!t.sites[id].empty()) {
    throw trace_error(t.name, number, "site " + std::string(id_text) + " defined twice");
  }
  t.sites[id] = value.empty() ? std::string("?") : std::string(value);
}

/// Reads a "# pytorch.KEY: VALUE" or "# site ID: TEXT" comment into `t`; other comments are
/// ignored.
void parse_comment(std::string_view text, trace& t, std::size_t number) {
  text.remove_prefix(1);
  text = trim(text);
  const std::size_t colon = text.find(':');
  if (colon == std::string_view::npos) return;
  const std::string_view key = trim(text.substr(0, colon));
  const std::string_view value = trim(text.substr(colon + 1));
  if (key.substr(0, 5) == "site ") {  // "# site 12: ..." (a site id: digits); else a remark
    const std::string_view id = trim(key.substr(5));
    if (!id.empty() && id.find_first_not_of("0123456789") == std::string_view::npos) {
      parse_site(id, value, t, number);
    }
    return;
  }
  if (key.substr(0, 8) != "pytorch.") return;
  try {
    read_pytorch_key(t.pytorch, key, value);
  } catch (const std::invalid_argument& e) {
    throw trace_error(t.name, number, e.what());
  }
  if (t.pytorch.peak_reserved > max_trace_size || t.pytorch.reserved_at_start > max_trace_size) {
    throw trace_error(t.name, number, "bytes beyond any device in '" + std::string(key) + "'");
  }
}

/// Every site an event names must be defined. @throws trace_error
void check_sites(const trace& t) {
  for (const trace_event& e : t.events) {
    if (e.site != 0 && (e.site >= t.sites.size() || t.sites[e.site].empty())) {
      throw trace_error(t.name, e.line,
                        "site " + std::to_string(e.site) + " has no '# site " +
                            std::to_string(e.site) + ": ...' line");
    }
  }
}

/// An input buffer over a file descriptor (the read end of a pipe).
class fd_buffer : public std::streambuf {
 public:
  explicit fd_buffer(int fd) : fd_(fd) {}

 protected:
  int_type underflow() override {
    ssize_t n = 0;
    do {
      n = ::read(fd_, buf_, sizeof buf_);
    } while (n < 0 && errno == EINTR);
    if (n <= 0) return traits_type::eof();
    setg(buf_, buf_, buf_ + n);
    return traits_type::to_int_type(*gptr());
  }

 private:
  int fd_;
  char buf_[1 << 16];
};

bool ends_with(const std::string& s, std::string_view tail) {
  return s.size() > tail.size() && s.compare(s.size() - tail.size(), tail.size(), tail) == 0;
}

/// `gzip -dc -- path` with its standard output and error on pipes; reaps it when done.
class gzip_child {
 public:
  explicit gzip_child(const std::string& path) : path_(path) {
    int out[2] = {-1, -1}, err[2] = {-1, -1};
    if (::pipe2(out, O_CLOEXEC) != 0 || ::pipe2(err, O_CLOEXEC) != 0) {
      fail("cannot decompress: no pipe for gzip: " + std::string(std::strerror(errno)));
    }
    posix_spawn_file_actions_t actions;
    posix_spawn_file_actions_init(&actions);
    posix_spawn_file_actions_adddup2(&actions, out[1], STDOUT_FILENO);
    posix_spawn_file_actions_adddup2(&actions, err[1], STDERR_FILENO);
    std::string a0 = "gzip", a1 = "-dc", a2 = "--", a3 = path;
    char* argv[] = {a0.data(), a1.data(), a2.data(), a3.data(), nullptr};
    const int rc = posix_spawnp(&pid_, "gzip", &actions, nullptr, argv, environ);
    posix_spawn_file_actions_destroy(&actions);
    ::close(out[1]);
    ::close(err[1]);
    out_ = out[0];
    err_ = err[0];
    if (rc != 0) {
      pid_ = -1;
      fail("cannot decompress: gzip cannot be run (" + std::string(std::strerror(rc)) +
           "); install gzip, or decompress the trace first");
    }
  }
  gzip_child(const gzip_child&) = delete;
  gzip_child& operator=(const gzip_child&) = delete;
  ~gzip_child() { finish(); }

  int output() const noexcept { return out_; }

  /// Waits for gzip; true when it decompressed the whole file (exit status 0, or 2: a warning
  /// such as trailing garbage, after the whole output). Closing the output first ends a gzip
  /// we stopped reading (SIGPIPE).
  bool finish() noexcept {
    if (out_ >= 0) ::close(out_), out_ = -1;
    if (err_ >= 0) {
      char buf[512];
      ssize_t n = 0;
      while ((n = ::read(err_, buf, sizeof buf)) > 0 || (n < 0 && errno == EINTR)) {
        if (n > 0 && message_.size() < 4096) message_.append(buf, static_cast<std::size_t>(n));
      }
      ::close(err_), err_ = -1;
    }
    if (pid_ > 0) {
      while (::waitpid(pid_, &status_, 0) < 0 && errno == EINTR) {
      }
      pid_ = -1;
    }
    return WIFEXITED(status_) && (WEXITSTATUS(status_) == 0 || WEXITSTATUS(status_) == 2);
  }

  /// True when gzip itself reported an error (not when it was stopped by a closed pipe).
  bool failed_itself() const noexcept {
    return WIFEXITED(status_) ? WEXITSTATUS(status_) == 1 : WTERMSIG(status_) != SIGPIPE;
  }

  /// Why gzip failed: its own message (first line), or its exit status.
  [[noreturn]] void fail_decompressing() const {
    const std::size_t from = std::min(message_.find_first_not_of("\r\n "), message_.size());
    std::string why = message_.substr(from, message_.find('\n', from) - from);
    if (why.empty()) {
      why = WIFSIGNALED(status_)
                ? "gzip ended by signal " + std::to_string(WTERMSIG(status_))
                : "gzip exited with status " + std::to_string(WEXITSTATUS(status_));
    }
    fail("cannot decompress (gzip -dc): " + why);
  }

 private:
  [[noreturn]] void fail(const std::string& what) const { throw trace_error(path_, 0, what); }

  std::string path_;
  pid_t pid_ = -1;
  int out_ = -1, err_ = -1;
  int status_ = 0;
  std::string message_;
};

trace load_gzip_trace(const std::string& path) {
  gzip_child gzip(path);
  fd_buffer buffer(gzip.output());
  std::istream in(&buffer);
  trace t;
  try {
    t = parse_trace(in, path);
  } catch (const trace_error&) {
    // A damaged file reads as a malformed trace: say what gzip said instead.
    if (!gzip.finish() && gzip.failed_itself()) gzip.fail_decompressing();
    throw;
  }
  if (!gzip.finish()) gzip.fail_decompressing();
  return t;
}

}  // namespace

trace_error::trace_error(const std::string& file, std::size_t line, const std::string& what)
    : std::runtime_error(line == 0 ? file + ": " + what
                                   : file + ":" + std::to_string(line) + ": " + what),
      file_(file),
      line_(line) {}

trace parse_trace(std::istream& in, const std::string& name) {
  trace t;
  t.name = name;
  std::string line;
  std::size_t number = 0;
  bool header_seen = false;
  bool with_site = false;
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
      with_site = text == trace_header_with_site;
      if (text != trace_header && !with_site) {
        throw trace_error(
            name, number,
            "bad header, expected '" + std::string(trace_header) + "' (or with ',Site')");
      }
      header_seen = true;
      continue;
    }
    t.events.push_back(parse_line(text, name, number, with_site));
  }
  if (in.bad()) throw trace_error(name, number, "read error");
  if (!header_seen) throw trace_error(name, number == 0 ? 1 : number, "empty trace, no header");
  check_sites(t);
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
  if (ends_with(path, ".gz")) return load_gzip_trace(path);
  std::ifstream in(path);
  if (!in) throw trace_error(path, 0, std::string("cannot open: ") + std::strerror(errno));
  return parse_trace(in, path);
}

namespace {

/// The sites holding the most bytes after event `peak_at` (see trace_summary::peak_holders).
std::vector<site_bytes> holders_at(const trace& t, std::size_t peak_at) {
  std::vector<site_bytes> by_site(t.sites.size());
  std::unordered_map<std::uintptr_t, const trace_event*> live;
  for (std::size_t i = 0; i <= peak_at && i < t.events.size(); ++i) {
    const trace_event& e = t.events[i];
    if (e.action == trace_action::allocate_failure || e.pointer == 0) continue;  // (pool events)
    if (e.action == trace_action::allocate) {
      if (!live.emplace(e.pointer, &e).second) continue;
      by_site[e.site].bytes += e.size;
      ++by_site[e.site].allocations;
      continue;
    }
    const auto it = live.find(e.pointer);
    if (it == live.end()) continue;
    by_site[it->second->site].bytes -= it->second->size;
    --by_site[it->second->site].allocations;
    live.erase(it);
  }
  std::vector<site_bytes> out;
  for (std::size_t id = 0; id < by_site.size(); ++id) {
    if (by_site[id].bytes == 0) continue;
    by_site[id].site = id == 0 ? std::string("(no site)") : t.sites[id];
    out.push_back(std::move(by_site[id]));
  }
  std::stable_sort(out.begin(), out.end(),
                   [](const site_bytes& a, const site_bytes& b) { return a.bytes > b.bytes; });
  if (out.size() > max_peak_holders) out.resize(max_peak_holders);
  return out;
}

}  // namespace

trace_summary summarize(const trace& t) {
  trace_summary s;
  std::size_t peak_at = 0;
  struct live_allocation {
    std::size_t size;
    std::size_t line;
  };
  std::unordered_map<std::uintptr_t, live_allocation> live;
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
    if (is_pool_event(e.action)) {
      ++s.pool_events;
      continue;
    }
    ++s.ops;
    if (e.action == trace_action::allocate) {
      ++s.allocations;
      if (e.pointer == 0) continue;
      const auto [it, fresh] = live.emplace(e.pointer, live_allocation{e.size, e.line});
      if (!fresh) {
        if (++s.duplicate_allocations <= named_duplicates) {
          s.duplicates.push_back({e.pointer, e.line, it->second.line});
        }
        continue;
      }
      requested += e.size;  // at most 1 PiB each, checked below: no overflow
      if (requested > max_trace_size) {
        throw trace_error(t.name, e.line, "live allocations add up to more than 1 PiB");
      }
      if (requested > s.peak_requested_bytes) {
        s.peak_requested_bytes = requested;
        peak_at = static_cast<std::size_t>(&e - t.events.data());
      }
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
    requested -= it->second.size;
    live.erase(it);
  }
  s.threads = threads.size();
  s.streams = streams.size();
  s.live_at_end_bytes = requested;
  if (t.sites.size() > 1) s.peak_holders = holders_at(t, peak_at);
  s.span_us = latest - first;
  s.pytorch = t.pytorch;
  return s;
}

}  // namespace cachalot::tools
