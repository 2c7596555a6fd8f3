// Everything the allocator keeps for one stream in one memory pool: its segments, its free
// blocks (a free index per band, plus one of oversize blocks, which are never split) and its
// block nodes, all behind one spinlock. Streams never share blocks, so threads working on
// different streams never contend here. A stream has one state per memory pool it allocates
// from; a state belongs to one pool at a time (it changes pool only when its pool was retired
// with no segment left, detail/pool.hpp) and lives until the allocator is destroyed.
#pragma once

#include <cstddef>
#include <cstdint>
#include <memory>

#include "detail/free_index.hpp"
#include "detail/segment.hpp"
#include "detail/spinlock.hpp"
#include "detail/stats_tracker.hpp"
#include "detail/thread_cache.hpp"

namespace cachalot::detail {

/// Per-stream allocator state. Every member is guarded by `lock`.
struct pool_record;

struct stream_state : stats_holder {
  /// Free indexes: two bands per pool (engine::band_of), so that small requests and larger ones
  /// can be kept in different segments.
  static constexpr std::size_t band_count = 2 * pool_count;

  stream_state(stream_t s, pool_record* p, pool_peaks* pp, peak_ledger* l)
      : stats_holder(pp, &lock, l), pool(p), stream(s) {}
  stream_state(const stream_state&) = delete;
  stream_state& operator=(const stream_state&) = delete;

  /// The memory pool and (stats_holder::peaks) its peaks (changed only with the registry
  /// locked exclusively and the state empty; read under the registry lock, the stream lock or
  /// the stats mutex). `stats` (stats_holder): counters and stats ceilings of this stream.
  pool_record* pool;
  spinlock lock;                 ///< guards everything below
  const stream_t stream;         ///< the stream
  free_index index[band_count];  ///< free blocks below max_split_size, per band
  free_index oversize;           ///< free blocks >= max_split_size (never split)
  segment* segments = nullptr;   ///< intrusive list of this stream's segments
  /// In the engine's list of states a release visits for spans (it has expandable segments).
  bool release_listed = false;
  std::size_t ranges = 0;  ///< expandable segments linked
  /// Segments linked per band (engine::band_of). With `size_bands:lazy` a lower band with none
  /// is served by its pool's upper band (engine::take_elsewhere, engine::growth_band).
  std::uint32_t band_segments[band_count] = {};
  block_pool nodes;  ///< recycled block nodes
  /// Thread cache (detail/thread_cache.hpp): default-pool states only, when configured. Set
  /// before the state is published (registry_mutex_ exclusive); its lanes have their own locks.
  std::unique_ptr<thread_cache> tcache;

  /// Segments linked of pool kind `p` (both bands).
  std::uint32_t kind_segments(std::size_t p) const noexcept {
    return band_segments[2 * p] + band_segments[2 * p + 1];
  }
  /// Links a new segment into the list.
  void link(segment* s) noexcept {
    if (s->expandable()) ++ranges;
    ++band_segments[s->band];
    s->prev = nullptr;
    s->next = segments;
    if (segments != nullptr) segments->prev = s;
    segments = s;
  }
  /// Unlinks a segment from the list.
  void unlink(segment* s) noexcept {
    if (s->expandable()) --ranges;
    --band_segments[s->band];
    if (s->prev != nullptr) {
      s->prev->next = s->next;
    } else {
      segments = s->next;
    }
    if (s->next != nullptr) s->next->prev = s->prev;
    s->prev = s->next = nullptr;
  }
};

}  // namespace cachalot::detail
