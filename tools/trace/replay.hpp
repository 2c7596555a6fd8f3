// Replay of a parsed trace on a cachalot allocator. The trace is first prepared: every free is
// resolved to the allocation it frees, so the timed loop only indexes arrays. The replay then
// issues the operations in log order, on the trace's streams, either from one OS thread per
// trace thread (handing over in log order) or from the calling thread alone. Allocations that
// fail are counted and the replay goes on (the result is then not complete: its peaks cover
// only what was served); frees of pointers the trace never allocated are counted at preparation
// and skipped; allocations of 0 bytes (null, not a failure) are counted apart.
//
// replay() is the reusable core: every call builds its own device and allocator from the
// config, shares nothing with other calls, and may run on any thread alongside others (a tuner
// replays many configs at once); replay_at() is the one-thread form at a given capacity.
#pragma once

#include <cstddef>
#include <cstdint>
#include <functional>
#include <limits>
#include <string>
#include <string_view>
#include <vector>

#include "cachalot/config.hpp"
#include "cachalot/device_cost.hpp"
#include "trace/pools.hpp"
#include "trace/trace.hpp"

namespace cachalot::tools {

/// One operation of a prepared trace.
struct replay_op {
  bool is_allocate = true;  ///< allocate, else free (or a pool event)
  /// A memory pool's sleep or wake (trace_action::sleep_offload, sleep_discard, wake) of the
  /// pool of `stream`; none: an allocate or free.
  enum class pool_event : std::uint8_t { none, sleep_offload, sleep_discard, wake };
  pool_event pool = pool_event::none;
  bool hand_over = false;    ///< the next op runs on another thread
  std::uint32_t thread = 0;  ///< dense thread index
  std::uint32_t stream = 0;  ///< dense stream index
  std::uint32_t slot = 0;    ///< allocation slot (the allocate that a free frees)
  std::size_t size = 0;      ///< bytes (of the allocation, for frees too)
};

/// A trace ready to replay.
struct prepared_trace {
  std::string name;                     ///< trace name
  trace_summary summary;                ///< figures from the trace alone
  std::vector<replay_op> ops;           ///< operations in log order
  std::vector<std::uintptr_t> streams;  ///< logged handle of each dense stream index
  std::size_t threads = 0;              ///< distinct threads
  std::size_t slots = 0;                ///< allocation slots
};

/// Resolves frees to allocations and numbers threads and streams.
prepared_trace prepare(const trace& t);

/// How to replay.
struct replay_options {
  bool use_threads = true;  ///< one OS thread per trace thread (else all on the caller)
  bool sample = false;      ///< record the timeline (slower; for plots)
  /// Called now and then with the fraction done (from a replaying thread).
  std::function<void(double)> progress;
  /// Memory pools to create and route trace streams to (pools.hpp).
  std::vector<pool_spec> pools;
  /// Early stop (the tuner's pruning): called every few thousand operations with the allocator's
  /// stats and the refusals so far; true stops the replay there (replay_result::stopped). Only on
  /// the calling thread (use_threads false).
  std::function<bool(const memory_stats&, std::size_t ooms)> stop;
};

/// Memory in use after some operation.
struct timeline_point {
  std::size_t op = 0;         ///< operations done
  std::size_t requested = 0;  ///< requested bytes live
  std::size_t allocated = 0;  ///< allocated bytes live
  std::size_t reserved = 0;   ///< reserved bytes
};

/// What a replay measured.
struct replay_result {
  std::string backend;                    ///< backend name
  std::size_t capacity = 0;               ///< device capacity in bytes
  std::size_t memory_limit = 0;           ///< the allocator's resolved memory limit (0: none)
  std::size_t ops = 0;                    ///< operations issued
  std::size_t threads = 0;                ///< OS threads used
  std::size_t peak_requested = 0;         ///< bytes
  std::size_t peak_allocated = 0;         ///< bytes
  std::size_t peak_reserved = 0;          ///< bytes
  double fragmentation = 0.0;             ///< peak reserved / peak requested (0 when nothing)
  std::size_t ooms = 0;                   ///< allocations refused for lack of memory
  std::size_t errors = 0;                 ///< other allocator errors (none expected)
  std::size_t skipped_frees = 0;          ///< frees of allocations that were refused
  std::size_t zero_size_allocations = 0;  ///< allocations of 0 bytes (null, not refused)
  std::uint64_t segment_allocs = 0;       ///< device segment allocations
  std::uint64_t segment_frees = 0;        ///< device segment frees
  std::uint64_t chunk_maps = 0;           ///< chunks mapped (expandable segments)
  std::uint64_t chunk_unmaps = 0;         ///< chunks unmapped (expandable segments)
  std::uint64_t device_syncs = 0;         ///< events or streams the allocator synchronized
  /// Synchronizations of releases before a growth, outside any out-of-memory retry
  /// (memory_stats::num_gc_syncs).
  std::uint64_t gc_syncs = 0;
  /// Every call the replay made to its device, by kind, with its time: modeled on the simulated
  /// device (config cost_model, cost_*), measured on CUDA (cachalot/device_cost.hpp).
  device_call_stats device;
  std::uint64_t trace_span_us = 0;  ///< the trace's own span (trace_summary::span_us)
  double wall_ns = 0.0;             ///< wall time of the operations
  /// Time spent issuing operations, summed over threads; excludes the waits of threads for
  /// their turn (equal to wall_ns on one thread).
  double busy_ns = 0.0;
  double ns_per_op = 0.0;  ///< busy_ns / ops
  /// The fastest and slowest repeat's busy_ns / ops (cachalot-replay --repeat; equal to
  /// ns_per_op for one replay): the spread around the median.
  double ns_per_op_min = 0.0;
  double ns_per_op_max = 0.0;
  std::vector<timeline_point> timeline;  ///< filled when sampling
  std::vector<pool_figures> pools;       ///< per pool, when replay_options::pools is set
  bool stopped = false;  ///< replay_options::stop ended the replay early (figures are partial)

  /// True if every allocation was served: only then do the peaks and the fragmentation
  /// describe the whole trace.
  bool complete() const noexcept { return ooms == 0 && errors == 0; }
  /// The device time in milliseconds.
  double device_ms() const noexcept { return static_cast<double>(device.total_ns()) / 1e6; }
  /// The device time per 1,000 operations, in milliseconds (0 without operations).
  double device_ms_per_1k_ops() const noexcept {
    return ops == 0 ? 0.0 : device_ms() * 1000.0 / static_cast<double>(ops);
  }
  /// The device time as a share of the trace's own span (NaN when the trace has no span).
  double device_span_share() const noexcept {
    return trace_span_us == 0 ? std::numeric_limits<double>::quiet_NaN()
                              : static_cast<double>(device.total_ns()) /
                                    (1000.0 * static_cast<double>(trace_span_us));
  }
};

/// Replays a prepared trace on a new allocator made from `cfg`. Thread-safe (see above).
/// @throws cachalot::error if the allocator cannot be created
replay_result replay(const prepared_trace& p, const config& cfg, const replay_options& options);

/// Replays on the calling thread, without sampling, on the simulated device with `capacity`
/// bytes (`base` otherwise; its trace_file is dropped). Thread-safe.
/// @throws cachalot::error if the allocator cannot be created (e.g. a capacity the config's
/// relations refuse). With `stop_at_oom`, the replay stops at the first refusal found (checked
/// every few thousand operations; the result is then incomplete and partial).
replay_result replay_at(const prepared_trace& p, const config& base, std::size_t capacity,
                        bool stop_at_oom = false);

/// The largest simulated capacity a replay may ask for: 64 TiB (address space is reserved for
/// the whole capacity).
inline constexpr std::size_t max_replay_capacity = std::size_t{1} << 46;

/// The config of a replay: `user` (key:value string) on the simulated device unless it names a
/// backend; capacity from `user` if given, else `capacity_factor` x the trace's peak requested
/// bytes rounded up to 2 MiB. @throws cachalot::invalid_argument for a bad string, a factor
/// that is not finite and positive, or a capacity above max_replay_capacity
config replay_config(std::string_view user, const trace_summary& s, double capacity_factor);

/// The pass-through baseline of a config (caching off, same backend and capacity).
config baseline_config(const config& cfg);

}  // namespace cachalot::tools
