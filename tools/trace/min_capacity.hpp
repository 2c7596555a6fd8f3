// The smallest device on which a trace replays with no out-of-memory error: a search over the
// simulated device's capacity, with every other key of the config kept. Capacities are
// multiples of a granule (2 MiB, the segment rounding); the search doubles from the trace's peak
// until a replay succeeds, then bisects until the capacity known to fail and the one known to
// succeed are at most `precision` apart (0.5 % of the peak, at least one granule). It assumes,
// as any bisection does, that more capacity never causes a refusal; the capacity it returns has
// replayed without one. Each probe is a replay_at() on the calling thread.
#pragma once

#include <cstddef>

#include "cachalot/config.hpp"
#include "trace/replay.hpp"

namespace cachalot::tools {

/// How to search.
struct min_capacity_options {
  double precision = 0.005;                    ///< of the trace's peak requested bytes
  std::size_t granule = std::size_t{2} << 20;  ///< capacities are multiples of this
  double max_factor = 64;                      ///< give up above this multiple of the peak
  /// A capacity expected to replay cleanly (e.g. the peak reserved of a complete replay), tried
  /// first instead of doubling from the peak; 0: none.
  std::size_t hint = 0;
};

/// What the search found.
struct min_capacity_result {
  bool found = false;              ///< a capacity up to max_factor x the peak replays cleanly
  std::size_t bytes = 0;           ///< that capacity (0 when not found)
  double factor = 0;               ///< bytes / the trace's peak requested bytes
  std::size_t precision = 0;       ///< bytes - precision failed (or is below the peak)
  std::size_t replays = 0;         ///< replays run
  std::size_t searched_up_to = 0;  ///< the largest capacity tried
};

/// Searches the smallest capacity without refusals (see the file comment).
/// @throws cachalot::error when a replay cannot be set up
min_capacity_result find_min_capacity(const prepared_trace& p, const config& base,
                                      const min_capacity_options& options = {});

}  // namespace cachalot::tools
