// Expandable segments: the records the engine passes between the steps of a growth or a
// release, and the structure operations on an expandable segment's blocks (src/expandable.cpp;
// the engine's steps that call the device are there too).
//
// A growth plans under the stream lock: it picks the hole whose mapping needs the fewest
// chunks (extending a free neighbour where there is one) and marks that span busy; maps the
// chunks with no lock held; then, under a ceiling_lock of the state, turns the span into a free
// block, merges it with its free neighbours, counts the stats and claims the request. A release
// carves the whole chunks of free blocks into busy spans and counts the stats under the stream
// lock, synchronizes the stream, unmaps the chunks, and turns the spans into holes (or, where a
// device call failed, back into free blocks, with the stats undone exactly). Busy spans are
// unmapped blocks outside the hole index: no other thread ever sees them as memory.
#pragma once

#include <cstddef>
#include <cstdint>
#include <utility>
#include <vector>

#include "detail/segment.hpp"
#include "detail/stream_state.hpp"

namespace cachalot::detail {

/// A span a growth is mapping: a busy unmapped block of `seg`.
struct growth_span {
  segment* seg = nullptr;  ///< nullptr: no hole fits
  block* span = nullptr;   ///< the busy block
  bool fresh = false;      ///< `seg` is new and not linked yet
};

/// Memory a release pass may give back: a fixed segment with no live block (`b` null), the
/// whole chunks [addr, addr + bytes) of free block `b` of an expandable segment, or an empty
/// expandable segment (`b` null, `bytes` 0).
struct release_candidate {
  stream_state* ss = nullptr;
  segment* seg = nullptr;
  block* b = nullptr;
  std::uintptr_t addr = 0;
  std::size_t bytes = 0;
};

/// A span a release pass is unmapping.
struct unmap_span {
  segment* seg = nullptr;
  block* span = nullptr;   ///< the busy block
  bool live_zero = false;  ///< the segment held no live block when the stats were counted
};

/// `bytes` rounded up to a multiple of `unit`, in units.
inline std::size_t chunks_for(std::size_t bytes, std::size_t unit) noexcept {
  return (bytes + unit - 1) / unit;
}

/// Expandable spans a release pass will unmap, per stream (one synchronization each).
using span_batches = std::vector<std::pair<stream_state*, std::vector<release_candidate>>>;

/// Splits `b` at `offset` (0 < offset < size); returns the upper part, in the same state.
/// (Inline, in detail/engine_blocks.hpp: the hot path splits and coalesces with them too.)
inline block* cut_block(stream_state& ss, block* b, std::size_t offset);
/// Merges b->next into `b` (the lower node survives, so a segment's first block never changes).
inline void absorb_next(stream_state& ss, block* b);
/// Makes `h` (unmapped) an indexed hole, merged with the holes next to it; returns the hole.
block* add_hole(stream_state& ss, block* h);
/// Cuts [addr, addr + bytes) out of hole `h` and marks it busy.
block* carve_hole(stream_state& ss, block* h, std::uintptr_t addr, std::size_t bytes);
/// The placement of `rounded` bytes in `ss`'s expandable segments of `band` that maps the
/// fewest chunks, carved and busy; `g.seg` null when no hole can hold it. With `neighbours`,
/// a free block next to a hole counts towards the request (it is extended).
growth_span plan_growth(stream_state& ss, std::size_t band, std::size_t rounded, std::size_t chunk,
                        std::size_t max_split, bool neighbours);

}  // namespace cachalot::detail
