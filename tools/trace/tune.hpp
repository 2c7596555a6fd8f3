// The config tuner behind `cachalot-replay --tune`: searches the keys that decide how much
// memory a job reserves (expandable_segments, max_split_size, gc_threshold,
// roundup_power2_divisions, and the segment sizes with the small/large split) by replaying the
// given traces, each at its own capacity, with every other key of the base config kept.
//
// Objective (lexicographic; a lower tuple is better):
//   1. out-of-memory errors, summed over the traces (a config that refuses nothing wins);
//   2. cost = sum over traces t of (peak reserved rounded up to `quantum`) + weight x device
//      calls + time_weight[t] x modeled device milliseconds (device calls: segment allocations
//      and frees, chunk maps and unmaps; weight in bytes per call, 0 by default; time_weight in
//      bytes per modeled millisecond of device time, every call kind and the implied
//      synchronizations of the cost model included; cachalot-replay --tune sets it per trace to
//      the trace's peak requested bytes over its span in ms unless --tune-time-weight says
//      otherwise: spending 1% of the trace's own span in device calls weighs as much as reserving
//      1% more than its peak. With both weights 0 memory alone decides and peaks within one
//      quantum tie. The sum saturates at 2^64 - 1, so a huge weight ranks by device calls and
//      never wraps around);
//   3. device calls;
//   4. the candidate's index (the default first): a fixed order, so that ties break the same way.
// Search: coordinate descent from the base config. Each round replays every config that differs
// from the current best in one key (one value of one dimension), in parallel threads; the best
// of the round becomes the current one; rounds stop when a round finds nothing better (or after
// max_rounds). Configs the validation refuses (e.g. max_split_size not above large_segment) are
// skipped, configs already replayed are not replayed again.
// Early stop: a replay is stopped as soon as its score so far (refusals, then peak reserved,
// device calls and device time so far, which only grow) is strictly worse than the best
// complete score found;
// such a config can never win, so the result does not depend on thread timing: the
// recommendation and every figure printed are the same whatever the number of threads, only
// the count of stopped replays and the time vary.
#pragma once

#include <cstddef>
#include <cstdint>
#include <functional>
#include <string>
#include <vector>

#include "cachalot/config.hpp"
#include "trace/replay.hpp"

namespace cachalot::tools {

/// The tuned keys of one candidate (applied over each trace's base config).
struct tune_setting {
  bool expandable = false;
  std::size_t max_split_size = 32 * MiB;  ///< SIZE_MAX: none
  double gc_threshold = 0.9;              ///< 0: off
  bool eager = false;                     ///< release_policy:eager (else adaptive)
  std::uint32_t divisions = 0;            ///< roundup_power2_divisions, every interval
  std::size_t segments = 0;               ///< index into tune_segment_families()
  band_mode bands = band_mode::lazy;      ///< size_bands
  std::size_t large_chunk = 0;            ///< large_chunk (expandable only; 0: one granule)

  bool operator==(const tune_setting&) const = default;
};

/// A choice of segment sizes and of the small/large split.
struct tune_segment_family {
  const char* name;
  std::size_t small_size;
  std::size_t small_segment;
  std::size_t mid_size;
  std::size_t large_segment;
};

/// The families searched; the first is the library's default.
const std::vector<tune_segment_family>& tune_segment_families();

/// The setting of a config (its tuned keys; divisions from the first interval, family 0 when
/// the sizes match no family).
tune_setting setting_of(const config& cfg);
/// `base` with the tuned keys of `s`.
config apply_setting(const config& base, const tune_setting& s);
/// The tuned keys of `s` that differ from the library's defaults, as key:value,... ("" when
/// none).
std::string setting_string(const tune_setting& s);

/// How to search.
struct tune_options {
  std::size_t threads = 2;  ///< replays run in parallel
  std::size_t weight = 0;   ///< bytes of peak reserved one device call is worth
  /// Bytes of peak reserved one modeled millisecond of device time is worth, one per trace
  /// (auto_time_weight() is cachalot-replay's default); empty: 0 for every trace.
  std::vector<double> time_weight;
  std::size_t quantum = 2 * MiB;                     ///< peaks are compared in steps of this
  std::size_t max_rounds = 4;                        ///< coordinate-descent rounds at most
  bool prune = true;                                 ///< stop hopeless replays early
  std::function<void(const std::string&)> progress;  ///< status lines (any thread, serialized)
};

/// The score of one candidate over all traces.
struct tune_score {
  std::size_t ooms = 0;
  std::uint64_t cost = 0;
  std::uint64_t calls = 0;
};

/// One replayed candidate.
struct tune_candidate {
  tune_setting setting;
  bool stopped = false;             ///< pruned (its figures are partial)
  tune_score score;                 ///< complete only when !stopped
  std::vector<replay_result> runs;  ///< per trace (empty when stopped)
  std::string error;  ///< why its replay could not run (it is then stopped), else empty
};

/// What the search found.
struct tune_result {
  tune_candidate base;       ///< the base config (always replayed in full)
  tune_candidate best;       ///< the recommendation (== base when nothing is better)
  std::size_t replayed = 0;  ///< configs replayed (stopped ones included)
  std::size_t stopped = 0;   ///< of which stopped early (depends on timing)
  std::size_t rounds = 0;    ///< coordinate-descent rounds run
  double seconds = 0;        ///< wall time of the search
};

/// The device calls of a replay (segment allocs and frees, chunk maps and unmaps).
std::uint64_t device_calls(const replay_result& r);

/// The default time weight of a trace: its peak requested bytes per millisecond of its own
/// span, so that 1% of the span spent in device calls costs as much as 1% of the peak reserved
/// more; 0 for a trace without a span (every line at the same time).
double auto_time_weight(const trace_summary& s);

/// The cost of one trace's replay in the objective (see the file comment): quantized peak
/// reserved + weight x device calls + time_weight x modeled device ms (rounded to a byte).
std::uint64_t trace_cost(std::size_t peak_reserved, std::uint64_t calls, std::uint64_t device_ns,
                         std::size_t quantum, std::size_t weight, double time_weight);

/// Searches (see the file comment). `bases[i]` is the config of trace `traces[i]`.
/// @throws cachalot::error when the base config cannot replay
tune_result tune(const std::vector<const prepared_trace*>& traces, const std::vector<config>& bases,
                 const tune_options& options);

}  // namespace cachalot::tools
