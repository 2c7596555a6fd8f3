// The built-in logger (see detail/log.hpp). State: the threshold (an atomic, -1 until
// CACHALOT_LOG is read) and, for log_once, the hashes of the messages printed so far (a leaked
// set, reachable from a static pointer, so that logging at exit stays safe).
#include "detail/log.hpp"

#include <unistd.h>

#include <atomic>
#include <cerrno>
#include <cstdlib>
#include <cstring>
#include <functional>
#include <mutex>
#include <string_view>
#include <unordered_set>

namespace cachalot::detail {
namespace {

constexpr int unknown = -1;
constexpr log_level default_level = log_level::warn;

std::atomic<int> g_threshold{unknown};
constinit std::mutex g_write_mutex;  // trivially destructible in libstdc++: safe at exit
constinit std::mutex g_once_mutex;
std::unordered_set<std::size_t>* g_printed = nullptr;  // leaked on purpose
constexpr std::size_t max_remembered = 4096;

const char* name_of(log_level level) noexcept {
  switch (level) {
    case log_level::error:
      return "error";
    case log_level::warn:
      return "warn";
    case log_level::info:
      return "info";
    case log_level::debug:
      return "debug";
    case log_level::off:
      break;
  }
  return "off";
}

bool parse_level(std::string_view text, log_level& out) noexcept {
  constexpr log_level all[] = {log_level::off, log_level::error, log_level::warn, log_level::info,
                               log_level::debug};
  for (log_level l : all) {
    if (text == name_of(l)) {
      out = l;
      return true;
    }
  }
  if (text == "warning") {
    out = log_level::warn;
    return true;
  }
  return false;
}

void write_all(const std::string& text) noexcept {
  const char* p = text.data();
  std::size_t left = text.size();
  while (left > 0) {
    const ssize_t n = ::write(STDERR_FILENO, p, left);
    if (n < 0 && errno == EINTR) continue;
    if (n <= 0) return;  // stderr closed or full: nothing else to do
    p += n;
    left -= static_cast<std::size_t>(n);
  }
}

// Prefixes every line of `message` (a trailing newline ends the last line) and writes the
// whole text with one lock held.
void emit(log_level level, std::string_view message) noexcept {
  try {
    const std::string prefix = std::string("cachalot [") + name_of(level) + "] ";
    std::string text;
    text.reserve(message.size() + prefix.size() + 1);
    while (!message.empty()) {
      const std::size_t end = message.find('\n');
      text += prefix;
      text += message.substr(0, end);
      text += '\n';
      message = end == std::string_view::npos ? std::string_view() : message.substr(end + 1);
    }
    std::lock_guard<std::mutex> lock(g_write_mutex);
    write_all(text);
  } catch (...) {  // no memory for the text: drop the message
  }
}

log_level read_environment() noexcept {
  const char* env = std::getenv("CACHALOT_LOG");
  if (env == nullptr || *env == '\0') return default_level;
  log_level l = default_level;
  if (parse_level(env, l)) return l;
  emit(log_level::warn, std::string("CACHALOT_LOG='") + env +
                            "' is not one of off, error, warn, info, debug; using warn");
  return default_level;
}

}  // namespace

log_level log_threshold() noexcept {
  int t = g_threshold.load(std::memory_order_acquire);
  if (t == unknown) [[unlikely]] {
    int expected = unknown;
    const int read = static_cast<int>(read_environment());
    if (!g_threshold.compare_exchange_strong(expected, read, std::memory_order_acq_rel)) {
      return static_cast<log_level>(expected);
    }
    t = read;
  }
  return static_cast<log_level>(t);
}

void set_log_threshold(log_level level) noexcept {
  g_threshold.store(static_cast<int>(level), std::memory_order_release);
}

void log(log_level level, const std::string& message) noexcept {
  if (level == log_level::off || !log_enabled(level)) return;
  emit(level, message);
}

void log_once(log_level level, const std::string& message, std::string_view key) noexcept {
  if (level == log_level::off || !log_enabled(level)) return;
  try {
    std::lock_guard<std::mutex> lock(g_once_mutex);
    if (g_printed == nullptr) g_printed = new std::unordered_set<std::size_t>();
    if (g_printed->size() < max_remembered &&
        !g_printed->insert(std::hash<std::string_view>{}(key.empty() ? message : key)).second) {
      return;
    }
  } catch (...) {  // no memory to remember it: print it anyway
  }
  emit(level, message);
}

void log_oom(int device, const std::string& what, const std::string& summary) noexcept {
  if (!log_enabled(log_level::warn)) return;
  try {
    std::string text = what;
    if (text.find("device " + std::to_string(device)) == std::string::npos) {
      text = "device " + std::to_string(device) + ": " + text;
    }
    const bool with_summary = !summary.empty() && log_enabled(log_level::info);
    if (!with_summary) text += " (CACHALOT_LOG=info adds the memory summary)";
    for (char& c : text) {
      if (c == '\n') c = ' ';  // one line
    }
    emit(log_level::warn, text);
    if (with_summary) emit(log_level::info, summary);
  } catch (...) {
  }
}

}  // namespace cachalot::detail
