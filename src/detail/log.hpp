// The built-in logger: one line per message on stderr, prefixed "cachalot [level] ". The level
// comes from the CACHALOT_LOG environment variable (off|error|warn|info|debug, default warn),
// read once. Invariants: thread-safe (each message is one write(2) of a whole line, under a
// lock, so lines of concurrent threads never interleave); usable from static initializers and
// atexit handlers (no object with a destructor is involved); never throws.
#pragma once

#include <string>
#include <string_view>

namespace cachalot::detail {

/// Severity of a log message; a message is printed when its level is at most the threshold.
enum class log_level : int {
  off = 0,    ///< nothing (a threshold only)
  error = 1,  ///< the allocator cannot do what was asked (bad config, no driver, a NULL hook)
  warn = 2,   ///< the default threshold: out of memory (one line), surprising configurations
  info = 3,   ///< what a default allocator runs on at first use; the summary at out of memory
  debug = 4,  ///< hook-level details
};

/// The threshold in force (from CACHALOT_LOG, read on the first call).
log_level log_threshold() noexcept;

/// True when a message of `level` would be printed: test it before building a costly message.
inline bool log_enabled(log_level level) noexcept {
  return static_cast<int>(level) <= static_cast<int>(log_threshold());
}

/// Prints `message` at `level` (each line of a multi-line message gets the prefix).
void log(log_level level, const std::string& message) noexcept;

/// Prints `message` at `level` unless a message with the same `key` (empty: the message itself)
/// was printed by log_once already: for errors that every later call would repeat (a bad
/// CACHALOT_CONF, no driver) and that several layers report.
void log_once(log_level level, const std::string& message, std::string_view key = {}) noexcept;

/// Reports an out-of-memory error of the allocator of `device`: the error's message as one line
/// at warn level, then the allocator's memory `summary` at info level (pass it only when
/// log_enabled(log_level::info): making it costs a snapshot). For the layers that see the
/// error (the default allocators, the hooks; the engine may call it too).
void log_oom(int device, const std::string& what, const std::string& summary) noexcept;

/// Overrides the threshold (tests; CACHALOT_LOG is then no longer read).
void set_log_threshold(log_level level) noexcept;

}  // namespace cachalot::detail
