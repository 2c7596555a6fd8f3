// Trace recording: every allocate and free of an allocator written to a CSV in the format of
// RMM's logging_resource_adaptor, so that a recorded run replays with cachalot-replay and RMM
// users' existing logs replay too:
//   Thread,Time,Action,Pointer,Size,Stream
//   140071234,12:03:04.123456,allocate,0x7f0000000000,1024,0x0
// Thread is the OS thread id (gettid); Time is wall-clock HH:MM:SS.microseconds; Action is
// allocate, free or "allocate failure"; Pointer is printf %p; Size in bytes; Stream in hex.
// Each allocator writes its own file (config::trace_path: `%d` in trace_file is the device). Lines
// are written under a mutex, in the order the operations took effect. When tracing is off the
// engine holds no writer and pays one predictable branch.
#pragma once

#include <cstddef>
#include <cstdint>
#include <cstdio>
#include <memory>
#include <mutex>
#include <string>
#include <utility>

#include "cachalot/types.hpp"

namespace cachalot::detail {

/// Appends allocator events to a CSV file. Thread-safe.
class trace_writer {
 public:
  /// Opens (truncates) `path` and writes the header.
  /// @throws invalid_argument if the file cannot be opened, or another trace_writer of this
  /// process has it open
  explicit trace_writer(const std::string& path);
  ~trace_writer();
  trace_writer(const trace_writer&) = delete;
  trace_writer& operator=(const trace_writer&) = delete;

  /// Records a successful allocation.
  void on_allocate(const void* ptr, std::size_t size, stream_t stream) noexcept;
  /// Records a free (size: the size the caller allocated).
  void on_free(const void* ptr, std::size_t size, stream_t stream) noexcept;
  /// Records an allocation that failed for lack of memory.
  void on_allocate_failure(std::size_t size, stream_t stream) noexcept;
  /// Flushes buffered lines to the file.
  void flush() noexcept;

 private:
  void close() noexcept;
  void write(const char* action, const void* ptr, std::size_t size, stream_t stream) noexcept;

  std::mutex mutex_;
  std::FILE* file_ = nullptr;
  std::pair<std::uint64_t, std::uint64_t> key_{};  ///< (st_dev, st_ino) of the open file
  bool registered_ = false;                        ///< key_ is in the process-wide set
};

}  // namespace cachalot::detail
