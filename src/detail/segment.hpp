// Segments and their two kinds. A segment belongs to one stream state and one pool for its
// whole life and is tiled, in address order and without gaps, by blocks (detail/block.hpp).
//  - fixed: one device allocation (allocate_segment); `size` bytes, all of them reserved.
//  - expandable: one address range of `range_size` bytes (reserve_address_range) whose physical
//    chunks of `chunk` bytes (the backend's vm_granularity for the small pool, config
//    large_chunk for the large one) are mapped on demand (src/expandable.cpp). Its blocks
//    tile the whole range: mapped blocks (free, allocated, pending) and unmapped ones (holes).
//    `size` counts the mapped bytes, which are what it reserves.
// Invariants (under the owner's lock): `live` is the number of allocated and pending blocks, so
// that "the segment holds no live block" (its free bytes are then not inactive-split, and a
// fixed segment can be released) is known in O(1) on the hot path, and a fixed segment whose
// count drops to 0 enters its owner's idle index; every boundary between
// mapped and unmapped memory is a chunk boundary; `holes` indexes exactly the unmapped blocks
// that are not busy, never two adjacent; a busy block is a span being mapped or unmapped, which
// no other operation touches, and `busy` counts them (a segment with busy spans is never
// deleted). An asleep segment (detail/pool_sleep.hpp) holds only allocated blocks and holes,
// which then need not end on chunk boundaries; it counts one busy span for its whole sleep.
// Thread caches (detail/thread_cache.hpp): a segment whose live blocks all lie in lanes is
// reported wholly free, as a drain would leave it. `lane_whole` says that its stats count it so
// (a "mark"), with the lane and block size the count was made on (`whole_lane`, `whole_size`).
// `lane_owner` is the lane that holds the marks of this segment: while it is set, every change
// of `live` is made holding that lane's lock too (so the lane reads `live` under its own lock
// and counts the segment's whole/split transitions itself), the owner's lock guards the mark,
// and `live` stays above 0; it is set and cleared only holding both this stream's lock and the
// owner's. A mark without an owner is consumed once, by an exchange.
#pragma once

#include <atomic>
#include <cstddef>
#include <cstdint>
#include <map>

#include "detail/block.hpp"

namespace cachalot::detail {

struct tc_lane;

/// How a segment gets its memory.
enum class segment_kind : std::uint8_t {
  fixed,       ///< one device allocation
  expandable,  ///< an address range with chunks mapped on demand
};

/// One segment, owned by a stream state. Aligned to a cache line: `live` is written on every
/// allocation and free of its blocks, by threads of its own stream only.
struct alignas(64) segment {
  // Read and written on the hot path.
  std::size_t live = 0;                       ///< allocated and pending blocks
  std::size_t size = 0;                       ///< reserved bytes (fixed: all; expandable: mapped)
  pool_kind pool = pool_kind::small;          ///< pool the segment serves
  segment_kind kind = segment_kind::fixed;    ///< fixed or expandable
  std::uint8_t band = 1;                      ///< free index of its free blocks (engine::band_of)
  bool indexed = false;                       ///< in its owner's idle index (idle_index.hpp)
  std::atomic<bool> lane_whole{false};        ///< counted wholly free while lanes hold its blocks
  std::atomic<tc_lane*> lane_owner{nullptr};  ///< the lane that counts its marks, if any
  bool asleep = false;  ///< its pool sleeps: no memory behind its blocks (detail/pool_sleep.hpp)
  // Of the mark (under the owner's lock, or with the state's locks held under the stats mutex).
  tc_lane* whole_lane = nullptr;  ///< the lane whose counters hold the mark
  std::size_t whole_size = 0;     ///< the size of the block the mark was counted on
  // Cold.
  std::uintptr_t base = 0;        ///< base address
  stream_state* owner = nullptr;  ///< owning stream state
  block* first = nullptr;         ///< lowest block
  segment* prev = nullptr;        ///< owner's segment list
  segment* next = nullptr;        ///< owner's segment list
  segment* idle_prev = nullptr;   ///< owner's idle index
  segment* idle_next = nullptr;   ///< owner's idle index
  // Expandable segments only.
  std::size_t range_size = 0;              ///< bytes of address space (fixed: == size)
  std::size_t chunk = 0;                   ///< bytes per mapped chunk (engine::chunk_of)
  std::size_t busy = 0;                    ///< spans being mapped or unmapped
  std::map<std::uintptr_t, block*> holes;  ///< unmapped blocks that are not busy, by address

  bool expandable() const noexcept { return kind == segment_kind::expandable; }
  /// Expandable: the first chunk boundary at or above `addr` (chunks tile the range from
  /// `base`; a large-pool chunk of 20 MiB is no power of two).
  std::uintptr_t chunk_up(std::uintptr_t addr) const noexcept {
    return base + (addr - base + chunk - 1) / chunk * chunk;
  }
  /// Expandable: the last chunk boundary at or below `addr`.
  std::uintptr_t chunk_down(std::uintptr_t addr) const noexcept {
    return base + (addr - base) / chunk * chunk;
  }
  /// One past the last byte of the blocks.
  std::uintptr_t end() const noexcept { return base + range_size; }
};

}  // namespace cachalot::detail
