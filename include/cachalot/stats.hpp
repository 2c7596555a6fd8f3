// Statistics and snapshots. A memory_stats is an exact, consistent picture taken under the
// allocator's locks: allocated <= reserved (+ sleep.bytes_asleep while
// pools sleep), active = allocated + blocks awaiting events, and
// the byte totals equal the sums over the snapshot's blocks. Segments are fixed (one device
// allocation) or expandable (an address range whose chunks are mapped on demand): reserved
// bytes are the bytes of fixed segments plus the mapped bytes of expandable ones. The names
// are cachalot's; where torch.cuda.memory_stats() names the same quantity otherwise, an
// accessor gives PyTorch's name (small_pool(), large_pool(), allocation(), segment(),
// num_device_alloc(), num_device_free()), as the Python package's dict does: aliases, not
// copies, so the layout and the values stay those of the fields.
#pragma once

#include <cstddef>
#include <cstdint>
#include <vector>

#include "cachalot/device_cost.hpp"
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

  /// `small` under PyTorch's name (the ".small_pool." keys of torch.cuda.memory_stats()).
  stat& small_pool() noexcept { return small; }
  /// `small` under PyTorch's name.
  const stat& small_pool() const noexcept { return small; }
  /// `large` under PyTorch's name (the ".large_pool." keys).
  stat& large_pool() noexcept { return large; }
  /// `large` under PyTorch's name.
  const stat& large_pool() const noexcept { return large; }
};

/// The sleep and wake of memory pools (allocator::sleep, allocator::wake; cachalot/pool.hpp).
/// For the allocator, the sums over its pools; for one pool (allocator::stats(pool)), its own.
/// Times are device time, modeled or measured as `memory_stats::device` says: the calls the
/// sleeps and wakes made themselves (synchronizations, copies at the cost model's host-device
/// bandwidth, pinned host allocations, unmaps and maps), not other threads' calls meanwhile.
struct sleep_stats {
  std::uint64_t pools_asleep = 0;  ///< pools asleep now (one pool's stats: 0 or 1)
  /// Device bytes a wake would map now: the chunks that hold live blocks of sleeping pools
  /// (blocks freed while asleep no longer count).
  std::uint64_t bytes_asleep = 0;
  /// Bytes of sleeping pools' live blocks kept in pinned host memory now (sleep_mode::offload).
  std::uint64_t bytes_offloaded = 0;
  /// Device bytes sleeping pools still hold: chunks whose unmap failed (counted in
  /// reserved_bytes too; a wake uses them, and they go back at teardown). Normally 0.
  std::uint64_t bytes_held = 0;
  std::uint64_t num_sleeps = 0;           ///< sleeps that completed (the pool fell asleep)
  std::uint64_t num_pressure_sleeps = 0;  ///< of them, sleeps the allocator decided (pressure)
  std::uint64_t num_wakes = 0;            ///< wakes that completed
  std::uint64_t num_failed_sleeps = 0;    ///< sleeps that failed (the pool stayed awake)
  std::uint64_t num_failed_wakes = 0;     ///< wakes that failed (the pool stayed asleep)
  std::uint64_t sleep_ns = 0;             ///< device time of every sleep, failed ones included
  std::uint64_t wake_ns = 0;              ///< device time of every wake, failed ones included
  std::uint64_t bytes_slept = 0;          ///< cumulative: device bytes unmapped by sleeps
  std::uint64_t bytes_woken = 0;          ///< cumulative: device bytes mapped by wakes
  std::uint64_t bytes_copied_out = 0;     ///< cumulative: bytes copied to the host by sleeps
  std::uint64_t bytes_copied_in = 0;      ///< cumulative: bytes copied back by wakes
};

/// Everything an allocator counts.
struct memory_stats {
  pool_stats requested_bytes;  ///< bytes callers asked for, in live allocations
  pool_stats allocated_bytes;  ///< bytes handed out (rounded sizes)
  /// bytes held from the device: fixed segments plus mapped chunks of expandable segments
  pool_stats reserved_bytes;
  pool_stats active_bytes;  ///< allocated plus freed blocks awaiting stream events
  /// free bytes (mapped) inside segments that hold a live (allocated or pending) block
  pool_stats inactive_split_bytes;
  pool_stats allocations;  ///< live allocation count (current/peak/allocated/freed)
  /// segment count: fixed segments plus expandable segments (one per address range, whatever
  /// its number of mapped chunks)
  pool_stats segments;

  std::uint64_t num_allocs = 0;  ///< successful allocations
  std::uint64_t num_frees = 0;   ///< successful frees
  /// segments made: device segment allocations plus address ranges reserved for expandable
  /// segments
  std::uint64_t num_segment_allocs = 0;
  /// segments given back: device segment frees plus address ranges released
  std::uint64_t num_segment_frees = 0;
  std::uint64_t num_chunk_maps = 0;       ///< physical chunks mapped into expandable segments
  std::uint64_t num_chunk_unmaps = 0;     ///< physical chunks unmapped from expandable segments
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
  /// The device calls of the allocator's backend so far, by kind, with their time: modeled on
  /// the simulated device (config cost_model, cost_*), measured wall time on CUDA
  /// (cachalot/device_cost.hpp). They count every call made to that backend (an allocator
  /// sharing its backend with others sees theirs too), are never reset by reset_peak_stats, and
  /// are read just after the byte stats (not under the allocator's locks).
  device_call_stats device;
  /// Device synchronizations made by releases before a growth (gc_threshold and the
  /// expandable release mark, which the release policy applies once memory is tight): each
  /// segment they freed implies one, each stream synchronized before an unmap is one. None of
  /// an out-of-memory retry, empty_cache or trim is counted here.
  std::uint64_t num_gc_syncs = 0;
  /// The sleep and wake of memory pools. While a pool sleeps its blocks stay allocated with no
  /// memory mapped behind them, so allocated_bytes may exceed reserved_bytes by up to
  /// sleep.bytes_asleep.
  sleep_stats sleep;

  /// `allocations` under PyTorch's name (the "allocation." keys of torch.cuda.memory_stats()).
  pool_stats& allocation() noexcept { return allocations; }
  /// `allocations` under PyTorch's name.
  const pool_stats& allocation() const noexcept { return allocations; }
  /// `segments` under PyTorch's name (the "segment." keys).
  pool_stats& segment() noexcept { return segments; }
  /// `segments` under PyTorch's name.
  const pool_stats& segment() const noexcept { return segments; }
  /// `num_segment_allocs` under PyTorch's name (key "num_device_alloc"). With expandable
  /// segments the two differ: PyTorch counts each cudaMalloc and each map of chunks
  /// (CUDACachingAllocator.cpp: alloc_block, map_block), cachalot the segments made (address
  /// ranges included) and the chunk maps apart (num_chunk_maps).
  std::uint64_t& num_device_alloc() noexcept { return num_segment_allocs; }
  /// `num_segment_allocs` under PyTorch's name.
  std::uint64_t num_device_alloc() const noexcept { return num_segment_allocs; }
  /// `num_segment_frees` under PyTorch's name (key "num_device_free").
  std::uint64_t& num_device_free() noexcept { return num_segment_frees; }
  /// `num_segment_frees` under PyTorch's name.
  std::uint64_t num_device_free() const noexcept { return num_segment_frees; }
};

/// State of a block in a snapshot.
enum class block_state : std::uint8_t {
  free,       ///< cached, reusable
  allocated,  ///< handed out to a caller
  pending,    ///< freed by the caller, awaiting events on other streams
  unmapped,   ///< a hole of an expandable segment: address space with no memory mapped
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
  std::uintptr_t address = 0;  ///< base address
  /// reserved bytes: the segment's size, or the mapped bytes of an expandable segment
  std::size_t size = 0;
  stream_t stream = nullptr;          ///< stream the segment belongs to
  pool_kind pool = pool_kind::small;  ///< pool
  /// blocks in address order, covering [address, address + range_size); in an expandable
  /// segment, unmapped blocks are its holes (never two adjacent ones), and every boundary
  /// between mapped and unmapped memory is a chunk boundary
  std::vector<block_info> blocks;
  bool expandable = false;     ///< an expandable segment (address range, chunks mapped on demand)
  std::size_t range_size = 0;  ///< bytes of address space: `size` for a fixed segment
  pool_id memory_pool = default_pool;  ///< the memory pool (cachalot/pool.hpp) that owns it
  /// Its pool is asleep: its allocated blocks have no memory mapped behind them (`size` is the
  /// bytes still held, normally 0) and everything else is unmapped.
  bool asleep = false;
};

/// A memory pool asleep at the time of a snapshot.
struct sleeping_pool_info {
  pool_id pool = default_pool;   ///< the pool
  bool offloaded = false;        ///< asleep with its live bytes on the host (sleep_mode::offload)
  std::size_t bytes_asleep = 0;  ///< device bytes a wake would map (sleep_stats::bytes_asleep)
  std::size_t bytes_offloaded = 0;  ///< bytes kept in pinned host memory
  std::size_t bytes_held = 0;       ///< device bytes still mapped (failed unmaps)
};

/// Every segment and block of an allocator at one instant.
struct memory_snapshot {
  std::vector<segment_info> segments;              ///< segments sorted by address
  std::vector<sleeping_pool_info> sleeping_pools;  ///< pools asleep, by id
};

}  // namespace cachalot
