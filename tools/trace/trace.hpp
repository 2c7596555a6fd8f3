// An allocation trace in RMM's logging_resource_adaptor CSV format, and its parser:
//   Thread,Time,Action,Pointer,Size,Stream
//   140071234,12:03:04.123456,allocate,0x7f0000000000,1024,0x0
// Time is HH:MM:SS.fraction, Action is allocate, free or "allocate failure", Pointer is printf
// %p ("(nil)" for null), Size is decimal bytes (at most max_trace_size), Stream is hex. A UTF-8
// byte-order mark before the header is skipped. Lines starting with '#' are comments; the ones
// `python -m cachalot.convert` writes ("# pytorch.peak_reserved: BYTES", "#
// pytorch.peak_reserved_kind: exact|lower-bound") carry PyTorch's own reserved peak from the
// snapshot the trace came from, so that the replay prints it. Any malformed line is a trace_error
// naming the file and the line, never undefined behaviour; a file that cannot be read is one naming
// the operating system's reason.
#pragma once

#include <cstddef>
#include <cstdint>
#include <istream>
#include <stdexcept>
#include <string>
#include <string_view>
#include <vector>

namespace cachalot::tools {

/// What one trace line records.
enum class trace_action : std::uint8_t {
  allocate,          ///< a successful allocation
  free,              ///< a free
  allocate_failure,  ///< an allocation that failed in the recorded run
};

/// One line of a trace.
struct trace_event {
  std::uint64_t thread = 0;                      ///< thread id as logged
  std::uint64_t time_us = 0;                     ///< time of day in microseconds
  trace_action action = trace_action::allocate;  ///< what happened
  std::uintptr_t pointer = 0;                    ///< address as logged (0 for a failure)
  std::size_t size = 0;                          ///< bytes
  std::uintptr_t stream = 0;                     ///< stream handle as logged
  std::size_t line = 0;                          ///< 1-based line number in the file
};

/// What a trace converted from a PyTorch snapshot says about PyTorch's own run.
struct pytorch_figures {
  bool present = false;           ///< the trace carries a "# pytorch.peak_reserved" line
  std::size_t peak_reserved = 0;  ///< PyTorch's peak reserved bytes over the trace
  bool exact = false;             ///< exact (snapshot segments known), else a lower bound
};

/// A parsed trace: the events in log order.
struct trace {
  std::string name;                 ///< file name (or another label) used in messages
  std::vector<trace_event> events;  ///< events in log order
  pytorch_figures pytorch;          ///< from "# pytorch.*" comment lines, if any
};

/// A malformed trace: the message names the file and the line ("FILE:LINE: what").
class trace_error : public std::runtime_error {
 public:
  trace_error(const std::string& file, std::size_t line, const std::string& what);
  /// The file (or label) of the trace.
  const std::string& file() const noexcept { return file_; }
  /// The 1-based line (0 when the file itself could not be read).
  std::size_t line() const noexcept { return line_; }

 private:
  std::string file_;
  std::size_t line_;
};

/// The exact header line of the format.
inline constexpr std::string_view trace_header = "Thread,Time,Action,Pointer,Size,Stream";

/// The largest size a trace line may carry: 1 PiB, beyond any device (and far from overflow
/// when sizes are summed).
inline constexpr std::size_t max_trace_size = std::size_t{1} << 50;

/// Parses a trace from a stream; `name` labels errors. @throws trace_error
trace parse_trace(std::istream& in, const std::string& name);
/// Parses a trace from text (tests). @throws trace_error
trace parse_trace_text(std::string_view text, const std::string& name);
/// Reads and parses a trace file; "-" reads standard input (named "stdin" in messages).
/// @throws trace_error (also when the file cannot be opened: the message gives the reason)
trace load_trace(const std::string& path);

/// Figures computed from the trace alone, without replaying it.
struct trace_summary {
  std::size_t ops = 0;                    ///< allocate and free lines (failures excluded)
  std::size_t allocations = 0;            ///< allocate lines
  std::size_t frees = 0;                  ///< free lines
  std::size_t recorded_failures = 0;      ///< "allocate failure" lines
  std::size_t unknown_frees = 0;          ///< frees of a pointer that is not live
  std::size_t duplicate_allocations = 0;  ///< allocations of a pointer that is already live
  std::size_t threads = 0;                ///< distinct threads
  std::size_t streams = 0;                ///< distinct streams
  std::size_t peak_requested_bytes = 0;   ///< highest sum of live sizes
  std::size_t largest_allocation = 0;     ///< biggest single allocation
  /// The trace's own span: last timestamp minus first, in microseconds (0 when every line has
  /// the same time). Times of day that go back by more than 12 hours are taken as crossing
  /// midnight; smaller steps back (lines of several threads logged slightly out of order) only
  /// never extend the span.
  std::uint64_t span_us = 0;
  pytorch_figures pytorch;  ///< PyTorch's figures, when the trace carries them
};

/// Walks the trace and computes its summary.
/// @throws trace_error when the live allocations add up to more than max_trace_size
trace_summary summarize(const trace& t);

}  // namespace cachalot::tools
