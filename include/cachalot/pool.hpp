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
//
// Sleep and wake (allocator::sleep, allocator::wake): a tenant pool on expandable segments can
// give all its device memory back while its blocks stay allocated. Sleep waits for the work
// queued on the pool's memory (events on its streams, never a device-wide synchronization),
// copies the bytes of its live blocks to pinned host memory (sleep_mode::offload; discard
// keeps nothing), unmaps every chunk and keeps the address ranges, so every pointer into the
// pool stays valid, CUDA graphs captured on them included. Wake maps new memory at the same
// addresses and copies the offloaded bytes back. While a pool sleeps, allocating from it or
// recording a stream on its blocks is a pool_asleep error; freeing its blocks is allowed (no
// device call: the memory is simply not mapped again). A pool created `sleepable` is also put
// to sleep by the allocator when a higher-priority pool would otherwise run out of memory,
// after every cache and reclaim callback; its owner wakes it.
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

/// What sleep keeps of a pool's live blocks.
enum class sleep_mode : std::uint8_t {
  /// Copied to pinned host memory and copied back by wake: the contents survive.
  offload = 0,
  /// Not kept: after wake the blocks hold unspecified bytes (caches, activations).
  discard = 1,
};

/// What a sleep callback is told (pool_options::on_sleep).
enum class sleep_notice : std::uint8_t {
  /// The allocator is about to put the pool to sleep because a higher-priority pool would run
  /// out of memory (`bytes`: what that request needs). Stop queuing work that uses the pool's
  /// memory, then return true; false keeps the pool awake.
  requested = 0,
  /// The pool is asleep now (`bytes`: device memory it gave back); its owner wakes it once the
  /// pressure has passed. The return value is ignored.
  asleep = 1,
  /// The sleep that `requested` announced did not happen (the pool stays awake): resume. The
  /// return value is ignored.
  cancelled = 2,
};

/// Tells the owner of a sleepable pool that the allocator wants to put it to sleep, and that
/// it did. Called from the thread whose allocation is under pressure, with no allocator lock
/// held; it must not allocate from, sleep or wake `pool` itself (an allocation it makes that
/// meets pressure puts no pool to sleep and calls no reclaim callback).
using sleep_callback = std::function<bool(pool_id pool, sleep_notice notice, std::size_t bytes)>;

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
  /// Tenant pools on expandable segments only: under memory pressure from a higher-priority
  /// pool, after the cached memory of every pool and the reclaim callbacks, the allocator puts
  /// this pool to sleep (in `sleep_mode`), asking `on_sleep` first; its owner wakes it.
  bool sleepable = false;
  /// The mode of the sleeps the allocator decides (sleepable pools).
  cachalot::sleep_mode sleep_mode = cachalot::sleep_mode::offload;
  /// Optional, sleepable pools: asked before the allocator puts the pool to sleep, told after.
  sleep_callback on_sleep;
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
  bool sleepable = false;              ///< created sleepable
  /// Asleep, or going to sleep or waking: allocations from the pool are refused.
  bool asleep = false;
};

}  // namespace cachalot
