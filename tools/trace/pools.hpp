// Memory pools in replays: `--pool STREAM=NAME[,limit:SIZE][,guarantee:SIZE][,priority:N]
// [,graph][,sleepable[:discard]]` assigns the trace stream logged as STREAM (hex or decimal) to
// the pool NAME, so that a multi-tenant workload (one tenant per stream) replays with quotas and
// priorities. A sleepable pool (expandable_segments:1) is put to sleep by the allocator when a
// higher-priority pool would fail (offload, or discard); the trace's "sleep"/"wake" lines sleep
// and wake the pool of their stream, and an allocation from a sleeping pool wakes it first.
// Streams naming the same pool share it; its options are those of its first mention (a
// conflicting later mention is an error). Each pool's figures are reported beside the totals.
#pragma once

#include <cstddef>
#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

#include "cachalot/allocator.hpp"
#include "cachalot/pool.hpp"

namespace cachalot::tools {

class stream_set;
struct prepared_trace;

/// One pool of a replay and the logged streams routed to it.
struct pool_spec {
  pool_options options;                 ///< name, limit, guarantee, priority, type
  std::vector<std::uintptr_t> streams;  ///< logged stream handles
};

/// Adds one `--pool` value to `specs`. @throws cachalot::invalid_argument naming what is wrong
void add_pool_spec(std::vector<pool_spec>& specs, std::string_view text);

/// What one pool did in a replay.
struct pool_figures {
  std::string name;                ///< pool name
  pool_options options;            ///< as configured
  std::size_t ooms = 0;            ///< allocations of the pool that failed
  std::size_t allocations = 0;     ///< successful allocations
  std::size_t peak_requested = 0;  ///< bytes
  std::size_t peak_reserved = 0;   ///< bytes
  std::size_t segment_frees = 0;   ///< segments the pool gave back (pressure, trim)
  sleep_stats sleep;               ///< its sleeps and wakes (counts, modeled device time)
};

/// Creates the pools in `a` and routes their streams; returns their ids (in `specs` order).
/// @throws cachalot::invalid_argument for a stream the trace never uses
std::vector<pool_id> apply_pools(allocator& a, const std::vector<pool_spec>& specs,
                                 const prepared_trace& trace, const stream_set& streams);

/// The figures of the pools (and of the default pool first, when it served anything).
std::vector<pool_figures> collect_pools(const allocator& a, const std::vector<pool_spec>& specs,
                                        const std::vector<pool_id>& ids);

}  // namespace cachalot::tools
