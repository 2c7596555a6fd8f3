// A memory pool of the engine (cachalot/pool.hpp): its identity and options, its references
// and routes, the bytes it holds, and its stats (peaks, counters, and the totals of stream
// states it no longer has).
//
// Invariants: every stream state belongs to exactly one live pool record; a pool's segments
// and blocks stay in its stream states until they are returned to the device, so a block never
// changes pool. A released pool takes no new allocation; once released and holding no segment
// it is retired: its stream states leave it (parked for reuse by the same stream in another
// pool) after their cumulative counters were folded into `retired_totals`. Records are never
// deleted (ids are never reused), so a pool's stats stay readable.
#pragma once

#include <atomic>
#include <cstddef>
#include <cstdint>
#include <string>
#include <vector>

#include "cachalot/pool.hpp"
#include "detail/idle_index.hpp"
#include "detail/spinlock.hpp"
#include "detail/stats_tracker.hpp"

namespace cachalot::detail {

/// One memory pool.
struct pool_record {
  pool_record(pool_id i, const pool_options& o) : id(i), options(o) {}
  pool_record(const pool_record&) = delete;
  pool_record& operator=(const pool_record&) = delete;

  const pool_id id;
  const pool_options options;  ///< as created (name filled in)

  // Lifetime: written under the engine's registry lock (exclusive).
  std::uint32_t references = 1;       ///< create/retain minus release
  std::size_t routes = 0;             ///< active routes into the pool
  std::atomic<bool> released{false};  ///< references reached 0: no new allocation
  bool retired = false;               ///< released and emptied: no stream state left

  /// Bytes in the pool's segments plus segments being allocated (written under the engine's
  /// budget mutex, read anywhere).
  std::atomic<std::size_t> committed{0};

  /// Fixed segments of the pool that became idle, by size (detail/idle_index.hpp): idle_lock.
  spinlock idle_lock;
  idle_index idle;

  // Stats: the engine's stats mutex, except the atomics.
  pool_peaks peaks;             ///< the pool's peaks
  stream_stats retired_totals;  ///< counters of stream states that left the pool
  mutable std::atomic<std::uint64_t> num_ooms{0};
  std::atomic<std::uint64_t> num_retries{0};
  std::atomic<std::uint64_t> num_use_after_free{0};

  /// Asleep, going to sleep or waking (detail/pool_sleep.hpp): allocations are refused.
  std::atomic<bool> asleep{false};
  /// Threads in the allocation slow path of this pool (a sleep waits until none is).
  std::atomic<std::uint32_t> in_slow{0};

  /// A graph pool that is not released: its segments must stay (graphs replay into them).
  bool pinned() const noexcept {
    return options.type == pool_type::graph && !released.load(std::memory_order_acquire);
  }
  /// Routes into this pool announce a possible graph capture.
  bool declares_capture() const noexcept {
    return options.type == pool_type::graph && options.declares_capture;
  }
  int priority() const noexcept { return options.priority; }
};

/// Guaranteed bytes that the pools of `guaranteed` other than `except` have not reserved yet
/// (under the engine's budget mutex): what no growth of `except` may take.
inline std::size_t unreserved_guarantees(const std::vector<pool_record*>& guaranteed,
                                         const pool_record& except) noexcept {
  std::size_t held = 0;
  for (const pool_record* q : guaranteed) {
    const std::size_t c = q->committed.load(std::memory_order_relaxed);
    if (q != &except && q->options.guarantee > c) held += q->options.guarantee - c;
  }
  return held;
}

/// A begin_allocate_to_pool route: a stream, or a filter of streams, into a pool.
struct pool_route {
  pool_record* pool = nullptr;
  stream_t stream = nullptr;  ///< the stream, when `filter` is empty
  stream_filter filter;       ///< streams the route takes (empty: just `stream`)

  bool takes(stream_t s) const { return filter ? filter(s) : s == stream; }
};

}  // namespace cachalot::detail
