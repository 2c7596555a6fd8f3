// `cachalot-replay --tune`: runs the tuner (tune.hpp) on the given traces, then measures the
// base config and the recommendation side by side (smallest capacity without an out-of-memory
// error, device calls, synchronizations and modeled device time, ns per op) and prints the
// recommended CACHALOT_CONF line with the comparison, as text or as one JSON object. Everything
// printed is deterministic except the search's time, its count of early-stopped replays (the first
// line) and the ns-per-op figures.
#pragma once

#include <cstddef>
#include <ostream>
#include <string>
#include <vector>

#include "cachalot/config.hpp"
#include "trace/replay.hpp"
#include "trace/tune.hpp"

namespace cachalot::tools {

/// What the command line asked of --tune.
struct tune_request {
  std::string user_config;  ///< --config as given (its non-tuned keys go into the line)
  std::size_t weight = 0;   ///< --tune-weight, bytes per device call
  /// --tune-time-weight: bytes of peak reserved per modeled millisecond of device time; with
  /// time_weight_auto (the default) each trace's auto_time_weight() instead
  double time_weight = 0;
  bool time_weight_auto = true;  ///< --tune-time-weight auto (the default)
  std::size_t threads = 2;       ///< --jobs
  std::size_t repeat = 3;        ///< --repeat: timed replays of each of the two configs
  bool use_threads = true;       ///< timed replays on one OS thread per trace thread
  bool json = false;             ///< one JSON object instead of text
  bool progress = false;         ///< status on standard error (a terminal)
};

/// The CACHALOT_CONF value: `user_config`'s items except the simulated device's (backend,
/// capacity, host_backing) and the tuned keys, then the tuned keys of `best` that differ from
/// the library defaults.
std::string recommended_conf(const std::string& user_config, const tune_setting& best);

/// True when every base config lies in the searched space (its tuned keys are values the tuner
/// can express: uniform roundup_power2_divisions, one of the segment families).
bool tunable(const config& base);

/// Tunes, measures and prints. `bases[i]` is the replay config of `traces[i]`. Returns the exit
/// status (0). @throws cachalot::error when a replay cannot be set up
int run_tune(const std::vector<const prepared_trace*>& traces, const std::vector<config>& bases,
             const tune_request& request, std::ostream& out, std::ostream& err);

}  // namespace cachalot::tools
