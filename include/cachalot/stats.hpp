// Statistics and snapshots. A memory_stats is an exact, consistent picture taken under the
// allocator's locks: allocated <= reserved, active = allocated + blocks awaiting events, and
// the byte totals equal the sums over the snapshot's blocks.
#pragma once

#include <cstddef>
#include <cstdint>
#include <vector>

#include "cachalot/types.hpp"

namespace cachalot {

/// One quantity tracked over time.
struct stat {
  std::uint64_t current = 0;    ///< value now
  std::uint64_t peak = 0;       ///< highest value since creation or the last reset_peak_stats
  std::uint64_t allocated = 0;  ///< cumulative increases
  std::uint64_t freed = 0;      ///< cumulative decreases
};

/// A stat for all pools together and for each pool.
struct pool_stats {
  stat all;    ///< both pools
  stat small;  ///< the small pool
  stat large;  ///< the large pool
  /// The stat of one pool.
  const stat& of(pool_kind p) const noexcept { return p == pool_kind::small ? small : large; }
};

/// Everything an allocator counts.
struct memory_stats {
  pool_stats requested_bytes;       ///< bytes callers asked for, in live allocations
  pool_stats allocated_bytes;       ///< bytes handed out (rounded sizes)
  pool_stats reserved_bytes;        ///< bytes held in device segments
  pool_stats active_bytes;          ///< allocated plus freed blocks awaiting stream events
  pool_stats inactive_split_bytes;  ///< free bytes inside segments that are split
  pool_stats allocations;           ///< live allocation count (current/peak/allocated/freed)
  pool_stats segments;              ///< segment count

  std::uint64_t num_allocs = 0;           ///< successful allocations
  std::uint64_t num_frees = 0;            ///< successful frees
  std::uint64_t num_segment_allocs = 0;   ///< device segment allocations
  std::uint64_t num_segment_frees = 0;    ///< device segment frees
  std::uint64_t num_ooms = 0;             ///< allocations that failed for lack of memory
  std::uint64_t num_alloc_retries = 0;    ///< allocations retried after releasing the cache
  std::uint64_t num_cache_flushes = 0;    ///< releases of cached segments (empty_cache, OOM, trim)
  std::uint64_t num_device_syncs = 0;     ///< events or device synchronized by the allocator
  std::uint64_t num_oversize_allocs = 0;  ///< allocations of at least max_split_size
  std::uint64_t num_deferred_frees = 0;   ///< frees that waited for events on other streams
  std::uint64_t num_pending_blocks = 0;   ///< blocks awaiting events now
  std::uint64_t num_streams = 0;          ///< streams the allocator has seen
  std::uint64_t num_free_blocks = 0;      ///< cached free blocks now
  std::uint64_t largest_free_block = 0;   ///< the largest cached free block, in bytes
  /// Checked mode on host-accessible memory: blocks found written to while free (their poison
  /// pattern overwritten) when handed out again.
  std::uint64_t num_use_after_free_writes = 0;
};

/// State of a block in a snapshot.
enum class block_state : std::uint8_t {
  free,       ///< cached, reusable
  allocated,  ///< handed out to a caller
  pending,    ///< freed by the caller, awaiting events on other streams
};

/// One block of a snapshot.
struct block_info {
  std::uintptr_t address = 0;             ///< first byte
  std::size_t size = 0;                   ///< block size (rounded)
  std::size_t requested = 0;              ///< size the caller asked for (0 for free blocks)
  block_state state = block_state::free;  ///< state
};

/// One segment of a snapshot, with its blocks in address order.
struct segment_info {
  std::uintptr_t address = 0;          ///< base address
  std::size_t size = 0;                ///< segment size
  stream_t stream = nullptr;           ///< stream the segment belongs to
  pool_kind pool = pool_kind::small;   ///< size class (small or large pool)
  std::vector<block_info> blocks;      ///< blocks in address order, covering the segment
  pool_id memory_pool = default_pool;  ///< the memory pool (cachalot/pool.hpp) that owns it
};

/// Every segment and block of an allocator at one instant.
struct memory_snapshot {
  std::vector<segment_info> segments;  ///< segments sorted by address
};

}  // namespace cachalot
