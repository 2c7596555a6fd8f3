// Memory pools: sets of segments inside one allocator, each with its own free lists, limits
// and stats. Every allocation comes from exactly one pool and a block never moves between
// pools; a pool's memory goes back to the allocator only when the pool is released.
//
// Two uses share the concept:
//  - Graph pools (PyTorch's private pools): while allocation into a graph pool is active for a
//    stream (begin_allocate_to_pool), that stream's allocations come from the pool, a block
//    freed during a capture returns to the pool and is reused only by work routed to it, and
//    the pool keeps its segments (graph replays write into them) until it is released.
//  - Tenant pools: several models on one device, each with an optional limit, an optional
//    guaranteed reservation and a priority; under memory pressure the lowest priority gives
//    way first (its cached memory, then its reclaim callback), never a higher priority's
//    guarantee.
// The default pool (id default_pool) is what an allocator without pools has: priority 0, no
// limit, no guarantee.
#pragma once

#include <cstddef>
#include <cstdint>
#include <functional>
#include <string>

#include "cachalot/types.hpp"

namespace cachalot {

/// What a pool is for.
enum class pool_type : std::uint8_t {
  /// Cached memory is returned to the device by empty_cache(), trim() and memory pressure, like
  /// the default pool's.
  tenant = 0,
  /// Segments are kept (never returned to the device) until the pool is released: CUDA graphs
  /// captured into the pool replay with its addresses.
  graph = 1,
};

/// Decides whether an allocation on `stream` goes to the pool (a route's filter). Called on
/// every allocation while the route is active, from the allocating thread, under a shared
/// lock of the allocator: it must not call the allocator's pool methods.
using stream_filter = std::function<bool(stream_t stream)>;

/// Asked, under memory pressure, to free live memory of `pool`, which has a lower priority than
/// the request: `bytes` is what the request needs. Returns the bytes it freed (advisory).
/// Called from the thread whose allocation is under pressure, possibly from several threads at
/// once, with no allocator lock held: it may free (and allocate) through the allocator; an
/// allocation it makes that meets pressure itself calls no reclaim callback of this allocator
/// (another allocator's run as usual), and fails, if it must, with out_of_memory.
using reclaim_callback = std::function<std::size_t(pool_id pool, std::size_t bytes)>;

/// How a pool is created (allocator::create_pool).
struct pool_options {
  std::string name;                    ///< name in messages and summaries ("" gives "pool <id>")
  pool_type type = pool_type::tenant;  ///< tenant or graph pool
  /// Most bytes the pool may reserve (0: no limit beyond the allocator's). The pool never
  /// reserves more; a request over it fails with out_of_memory naming the pool and its limit,
  /// and other pools are left untouched.
  std::size_t limit = 0;
  /// Bytes reserved for this pool: no other pool may grow into them, whatever its priority.
  /// Accounted against the allocator's memory limit (or the device capacity without one).
  std::size_t guarantee = 0;
  /// Higher is more important. Memory pressure reclaims from the lowest priority first.
  int priority = 0;
  /// Optional: frees live memory of this pool when a higher-priority pool is under pressure.
  reclaim_callback reclaim;
  /// Graph pools only: while a route into the pool is active, a CUDA graph capture may be under
  /// way, so the allocator makes no call a global-mode capture forbids, on any stream (event
  /// queries and segment frees wait until the route ends). False for a private pool that is
  /// never captured (PyTorch's MemPool outside graphs).
  bool declares_capture = true;
};

/// A pool as allocator::pools() reports it.
struct pool_info {
  pool_id id = default_pool;           ///< id
  std::string name;                    ///< name
  pool_type type = pool_type::tenant;  ///< tenant or graph pool
  int priority = 0;                    ///< priority
  std::size_t limit = 0;               ///< limit (0: none)
  std::size_t guarantee = 0;           ///< guaranteed reservation
  std::uint32_t references = 0;        ///< create/retain minus release calls
  bool released = false;               ///< references reached 0
  std::size_t routes = 0;              ///< active begin_allocate_to_pool routes
  std::size_t reserved_bytes = 0;      ///< bytes in the pool's segments now
};

}  // namespace cachalot
