// The error taxonomy. Every error cachalot raises is a cachalot::error carrying a status code
// (the same codes the C shim returns) and the source location that raised it. Out-of-memory
// errors also carry the numbers a user needs to understand them.
#pragma once

#include <cstddef>
#include <cstdint>
#include <stdexcept>
#include <string>

namespace cachalot {

/// Status codes shared by the C++ exceptions and the C shim (`cachalot_status`).
enum class status : int {
  success = 0,
  out_of_memory = 1,
  invalid_argument = 2,
  invalid_pointer = 3,
  backend = 4,
  not_supported = 5,
  pool_asleep = 6,
};

/// Short, static name of a status ("out of memory", ...).
const char* status_name(status s) noexcept;

/// Base class of every exception cachalot throws.
class error : public std::runtime_error {
 public:
  /// @param code  the status the C shim reports for this error
  /// @param what  the complete message
  /// @param file  source file that raised it (recorded by the check macros)
  /// @param line  source line that raised it
  error(status code, const std::string& what, const char* file = "", int line = 0)
      : std::runtime_error(what), code_(code), file_(file), line_(line) {}

  /// The status code of this error.
  status code() const noexcept { return code_; }
  /// Source file that raised the error.
  const char* file() const noexcept { return file_; }
  /// Source line that raised the error.
  int line() const noexcept { return line_; }

 private:
  status code_;
  const char* file_;
  int line_;
};

/// The numbers reported with an out-of-memory error.
struct oom_info {
  std::size_t requested_bytes = 0;     ///< what the caller asked for
  std::size_t device_total = 0;        ///< device capacity
  std::size_t device_free = 0;         ///< free device memory when the error was raised
  std::size_t reserved_bytes = 0;      ///< bytes held in segments by this allocator
  std::size_t allocated_bytes = 0;     ///< bytes handed out to callers
  std::size_t largest_free_block = 0;  ///< the largest cached free block
  std::size_t memory_limit = 0;        ///< the configured limit (0: none)
  std::uint64_t pool = 0;              ///< the memory pool of the request (0: the default pool)
  std::size_t pool_limit = 0;          ///< that pool's limit (0: none)
  std::size_t pool_reserved = 0;       ///< bytes that pool holds in segments
};

/// The device (or the configured memory limit) cannot satisfy an allocation, even after the
/// cache was released and the allocation retried.
class out_of_memory : public error {
 public:
  /// @param info  the numbers at the time of failure
  out_of_memory(const oom_info& info, const std::string& what, const char* file = "", int line = 0)
      : error(status::out_of_memory, what, file, line), info_(info) {}
  /// The numbers at the time of failure.
  const oom_info& info() const noexcept { return info_; }

 private:
  oom_info info_;
};

/// A malformed argument: a bad config string, an impossible parameter, a null handle.
class invalid_argument : public error {
 public:
  explicit invalid_argument(const std::string& what, const char* file = "", int line = 0)
      : error(status::invalid_argument, what, file, line) {}
};

/// A pointer that this allocator does not own as a live allocation: foreign, interior, or
/// already freed. The allocator's state is unchanged when this is thrown.
class invalid_pointer : public error {
 public:
  explicit invalid_pointer(const std::string& what, const char* file = "", int line = 0)
      : error(status::invalid_pointer, what, file, line) {}
};

/// A device call failed for a reason other than lack of memory.
class backend_error : public error {
 public:
  explicit backend_error(const std::string& what, const char* file = "", int line = 0)
      : error(status::backend, what, file, line) {}
};

/// The memory pool is asleep (allocator::sleep), or going to sleep or waking: allocating from it
/// or recording a stream on its blocks is refused, and nothing changed.
class pool_asleep : public error {
 public:
  /// @param pool  the pool's id
  pool_asleep(std::uint64_t pool, const std::string& what, const char* file = "", int line = 0)
      : error(status::pool_asleep, what, file, line), pool_(pool) {}
  /// The pool that is asleep.
  std::uint64_t pool() const noexcept { return pool_; }

 private:
  std::uint64_t pool_;
};

/// The operation is not available on this backend or in this build.
class not_supported : public error {
 public:
  explicit not_supported(const std::string& what, const char* file = "", int line = 0)
      : error(status::not_supported, what, file, line) {}
};

}  // namespace cachalot
