// Output of cachalot-replay: the per-trace text table (cachalot beside the pass-through
// baseline; columns as wide as their widest cell, at least two spaces apart) and the one-line
// JSON object per trace. A replay with refused allocations is marked in both: JSON
// "complete": false with "fragmentation": null (its peaks cover only what was served), the
// table says INCOMPLETE and shows no fragmentation.
#pragma once

#include <cstddef>
#include <optional>
#include <string>

#include "cachalot/device_cost.hpp"
#include "trace/min_capacity.hpp"
#include "trace/replay.hpp"

namespace cachalot::tools {

/// Everything reported for one trace.
struct trace_report {
  std::string trace;                                ///< trace path
  trace_summary summary;                            ///< figures from the trace alone
  std::size_t repeat = 1;                           ///< replays per allocator
  std::string config;                               ///< the config replayed (to_string)
  std::string cost_model;                           ///< its cost model, every key (cost_items)
  replay_result result;                             ///< cachalot (ns_per_op: median of the repeats)
  std::optional<replay_result> baseline;            ///< pass-through (caching:0), when run
  std::string plot_file;                            ///< SVG written, if any
  std::string timeline_file;                        ///< timeline CSV written, if any
  std::optional<min_capacity_result> min_capacity;  ///< when searched (--min-capacity)
};

/// The duplicate allocations of a trace in words, the first few named with their lines
/// ("2 allocations of pointers already live (...): 0x1000 at line 5 (live since line 2), ...").
std::string duplicates_text(const trace_summary& s);

/// A JSON string literal of `s` (quotes and escapes included).
std::string json_string(const std::string& s);
/// A JSON number with four decimals ("null" when not finite).
std::string json_number(double v);
/// Every key of a device cost model, defaults included ("cost_model:on,cost_segment_alloc:50us+
/// 1ms/GiB,..."), so that figures priced by two tools can be checked to share one model.
std::string cost_items(const device_cost_model& model);
/// The figures of one replay as JSON members, without braces.
std::string json_figures(const replay_result& r);
/// A min-capacity result as a JSON object.
std::string json_min_capacity(const min_capacity_result& m);

/// A human-readable table.
std::string format_text(const trace_report& r);
/// One JSON object on one line (no trailing newline).
std::string format_json(const trace_report& r);

}  // namespace cachalot::tools
