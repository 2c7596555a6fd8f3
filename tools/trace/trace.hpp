// An allocation trace in RMM's logging_resource_adaptor CSV format, and its parser:
//   Thread,Time,Action,Pointer,Size,Stream
//   140071234,12:03:04.123456,allocate,0x7f0000000000,1024,0x0
// Time is HH:MM:SS.fraction, Action is allocate, free or "allocate failure" (or a memory pool's
// "sleep offload", "sleep discard" or "wake", for replays with --pool), Pointer is printf
// %p ("(nil)" for null), Size is decimal bytes (at most max_trace_size), Stream is hex. A UTF-8
// byte-order mark before the header is skipped. Lines starting with '#' are comments; the ones
// `python -m cachalot.convert` writes carry PyTorch's own figures from the snapshot the trace
// came from ("# pytorch.KEY: VALUE", see pytorch_figures.hpp) and the code that made each
// allocation: with the header "Thread,Time,Action,Pointer,Size,Stream,Site", a seventh field
// gives a site id (empty: none) that a "# site ID: FILE:LINE FUNCTION" comment defines. Any
// malformed line is a trace_error naming the file and the line, never undefined behaviour; a file
// that cannot be read is one naming the operating system's reason.
#pragma once

#include <cstddef>
#include <cstdint>
#include <istream>
#include <stdexcept>
#include <string>
#include <string_view>
#include <vector>

#include "trace/pytorch_figures.hpp"

namespace cachalot::tools {

/// What one trace line records.
enum class trace_action : std::uint8_t {
  allocate,          ///< a successful allocation
  free,              ///< a free
  allocate_failure,  ///< an allocation that failed in the recorded run
  /// "sleep offload", "sleep discard", "wake": the memory pool of the line's stream (replay
  /// --pool) sleeps or wakes (cachalot/pool.hpp); Pointer is (nil) and Size 0.
  sleep_offload,
  sleep_discard,
  wake,
};

/// True for the pool sleep and wake actions.
inline bool is_pool_event(trace_action a) noexcept {
  return a == trace_action::sleep_offload || a == trace_action::sleep_discard ||
         a == trace_action::wake;
}

/// One line of a trace.
struct trace_event {
  std::uint64_t thread = 0;                      ///< thread id as logged
  std::uint64_t time_us = 0;                     ///< time of day in microseconds
  trace_action action = trace_action::allocate;  ///< what happened
  std::uintptr_t pointer = 0;                    ///< address as logged (0 for a failure)
  std::size_t size = 0;                          ///< bytes
  std::uintptr_t stream = 0;                     ///< stream handle as logged
  std::size_t line = 0;                          ///< 1-based line number in the file
  std::uint32_t site = 0;  ///< the code that allocated (index into trace::sites; 0: none)
};

/// A parsed trace: the events in log order.
struct trace {
  std::string name;                 ///< file name (or another label) used in messages
  std::vector<trace_event> events;  ///< events in log order
  pytorch_figures pytorch;          ///< from "# pytorch.*" comment lines, if any
  std::vector<std::string> sites;   ///< site texts by id ([0] is ""), from "# site" lines
};

/// A malformed trace: the message names the file and the line ("FILE:LINE: what"), or only the
/// file when it cannot be read at all ("FILE: cannot open: reason").
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
/// The header of a trace with the optional site column.
inline constexpr std::string_view trace_header_with_site =
    "Thread,Time,Action,Pointer,Size,Stream,Site";
/// The most sites a trace may define (ids 1 .. max_trace_sites).
inline constexpr std::uint32_t max_trace_sites = 1u << 20;

/// The largest size a trace line may carry: 1 PiB, beyond any device (and far from overflow
/// when sizes are summed).
inline constexpr std::size_t max_trace_size = std::size_t{1} << 50;

/// Parses a trace from a stream; `name` labels errors. @throws trace_error
trace parse_trace(std::istream& in, const std::string& name);
/// Parses a trace from text (tests). @throws trace_error
trace parse_trace_text(std::string_view text, const std::string& name);
/// Reads and parses a trace file; "-" reads standard input (named "stdin" in messages), a file
/// named *.gz is decompressed by `gzip -dc`.
/// @throws trace_error (also when the file cannot be opened: the message gives the reason)
trace load_trace(const std::string& path);

/// The bytes one allocation site holds.
struct site_bytes {
  std::string site;             ///< "FILE:LINE FUNCTION"
  std::size_t bytes = 0;        ///< requested bytes live
  std::size_t allocations = 0;  ///< allocations live
};

/// An allocation of a pointer that was live already (the first few are named in reports).
struct duplicate_allocation {
  std::uintptr_t pointer = 0;  ///< the pointer
  std::size_t line = 0;        ///< the line of the second allocation
  std::size_t live_since = 0;  ///< the line of the allocation still live
};

/// How many duplicate allocations a summary names.
inline constexpr std::size_t named_duplicates = 3;

/// Figures computed from the trace alone, without replaying it.
struct trace_summary {
  std::size_t ops = 0;                           ///< allocate and free lines (failures excluded)
  std::size_t allocations = 0;                   ///< allocate lines
  std::size_t frees = 0;                         ///< free lines
  std::size_t recorded_failures = 0;             ///< "allocate failure" lines
  std::size_t pool_events = 0;                   ///< "sleep ..." and "wake" lines
  std::size_t unknown_frees = 0;                 ///< frees of a pointer that is not live
  std::size_t duplicate_allocations = 0;         ///< allocations of a pointer that is already live
  std::vector<duplicate_allocation> duplicates;  ///< the first named_duplicates of them
  std::size_t threads = 0;                       ///< distinct threads
  std::size_t streams = 0;                       ///< distinct streams
  std::size_t peak_requested_bytes = 0;          ///< highest sum of live sizes
  std::size_t largest_allocation = 0;            ///< biggest single allocation
  std::size_t live_at_end_bytes = 0;             ///< requested bytes still live after the last line
  /// With sites: the sites holding the most bytes when the live bytes peaked (at most
  /// max_peak_holders, most bytes first; allocations without a site count as "(no site)").
  std::vector<site_bytes> peak_holders;
  /// The trace's own span: last timestamp minus first, in microseconds (0 when every line has
  /// the same time). Times of day that go back by more than 12 hours are taken as crossing
  /// midnight; smaller steps back (lines of several threads logged slightly out of order) only
  /// never extend the span.
  std::uint64_t span_us = 0;
  pytorch_figures pytorch;  ///< PyTorch's figures, when the trace carries them
};

/// The most sites summarize() lists in trace_summary::peak_holders.
inline constexpr std::size_t max_peak_holders = 5;

/// Walks the trace and computes its summary.
/// @throws trace_error when the live allocations add up to more than max_trace_size
trace_summary summarize(const trace& t);

}  // namespace cachalot::tools
