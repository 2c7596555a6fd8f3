// The engine's inline block operations, under a stream lock: take a cached block, claim and
// split it, free it and coalesce it with its neighbours, keep the free indexes (and the
// oversize set) in step. Invariants: a free block is in exactly one free structure of its
// segment's band; adjacent free blocks never stay apart; a segment's `live` counts its
// allocated and pending blocks; a fixed segment whose count drops to 0 is in its pool's idle
// index (detail/idle_index.hpp). Included by detail/engine.hpp after the engine class.
#pragma once

#include "detail/engine.hpp"

namespace cachalot::detail {

inline block* cut_block(stream_state& ss, block* b, std::size_t offset) {
  block* r = ss.nodes.acquire(&ss);
  r->addr = b->addr + offset;
  r->size = b->size - offset;
  r->seg = b->seg;
  r->state = b->state;
  r->busy = b->busy;
  r->prev = b;
  r->next = b->next;
  if (b->next != nullptr) b->next->prev = r;
  b->next = r;
  b->size = offset;
  return r;
}

inline void absorb_next(stream_state& ss, block* b) {
  block* n = b->next;
  b->size += n->size;
  b->next = n->next;
  if (n->next != nullptr) n->next->prev = b;
  ss.nodes.release(n);
}

inline block* engine::take_cached(stream_state& ss, pool_kind pool, std::size_t rounded,
                                  std::size_t requested, bool forced, bool* over_ceiling) {
  if (!caching_) [[unlikely]]
    return nullptr;
  const bool oversize = rounded >= max_split_size_;
  const std::size_t band = band_of(pool, rounded);
  block* b = oversize ? find_oversize(ss, rounded) : ss.index[band].find(rounded);
  if (b == nullptr) [[unlikely]] {
    b = take_elsewhere(ss, band, rounded, oversize);
    if (b == nullptr) return nullptr;
  }
  return claim(ss, b, pool, rounded, requested, forced, over_ceiling);
}

inline block* engine::take_elsewhere(stream_state& ss, std::size_t band, std::size_t rounded,
                                     bool oversize) {
  if (oversize) return nullptr;
  // size_bands:lazy: a lower band with no segment of its own is served by the upper band's
  // (growth_band).
  if (band % 2 == 0) {
    if (!lazy_bands_ || ss.band_segments[band] != 0) return nullptr;
    ++band;
    if (block* b = ss.index[band].find(rounded)) return b;
  }
  // Without the oversize rule (a relaxed release policy) an oversize block of the band may
  // be split for a smaller request: the index of blocks above max_split_size is the rest of
  // the top band's index.
  if (band != stream_state::band_count - 1 || ss.oversize.count() == 0) return nullptr;
  block* b = ss.oversize.find(rounded);
  return b == nullptr || b->size >= policy_->split_limit() ? nullptr : b;
}

inline block* engine::claim(stream_state& ss, block* b, pool_kind pool, std::size_t rounded,
                            std::size_t requested, bool forced, bool* over_ceiling) {
  const bool split_it = should_split(b, rounded);
  const std::size_t size = split_it ? rounded : b->size;
  segment* seg = b->seg;
  if (seg->lane_owner.load(std::memory_order_acquire) != nullptr ||
      seg->lane_whole.load(std::memory_order_relaxed)) [[unlikely]]
    return claim_marked(ss, b, pool, split_it ? rounded : 0, requested, forced, over_ceiling);
  const std::size_t whole = seg->live == 0 ? seg->size : 0;
  if (!ss.stats.try_alloc(pool, size, requested, whole, !forced)) [[unlikely]] {
    *over_ceiling = true;
    return nullptr;
  }
  return hand_out(ss, b, split_it ? rounded : 0, requested);
}

inline block* engine::hand_out(stream_state& ss, block* b, std::size_t split_at,
                               std::size_t requested) {
  ss.sync();  // (lists the state with the peak ledger where its stats gained room)
  ++b->seg->live;
  remove_free(ss, b);
  if (split_at != 0) split(ss, b, split_at);
  b->state = block_state::allocated;
  b->requested = requested;
  b->released.store(false, std::memory_order_relaxed);
  b->has_uses.store(false, std::memory_order_relaxed);
  b->cacheable.store(ss.tcache != nullptr && b->size <= tc_max_, std::memory_order_relaxed);
  ++ss.stats.num_allocs;
  if (b->size >= max_split_size_) [[unlikely]]
    ++ss.stats.num_oversize;
  return b;
}

inline std::size_t engine::whole_after_free(const block* b) noexcept {
  return b->seg->live == 1 ? b->seg->size : 0;
}

inline bool engine::free_block(stream_state& ss, block* b, bool forced, const tc_lane* held) {
  if (b->seg->lane_owner.load(std::memory_order_acquire) != nullptr) [[unlikely]]
    return free_owned(ss, b, forced, held);
  const pool_kind pool = b->seg->pool;
  const std::size_t whole = whole_after_free(b);
  if (!ss.stats.try_free(pool, b->size, b->requested, whole, !forced)) [[unlikely]] {
    return false;
  }
  ss.sync();
  ++ss.stats.num_frees;
  release_block(ss, b);
  return true;
}

inline bool engine::should_split(const block* b, std::size_t rounded) const noexcept {
  return should_split_size(b->seg->pool, b->size, rounded);
}

inline bool engine::should_split_size(pool_kind pool, std::size_t size,
                                      std::size_t rounded) const noexcept {
  const std::size_t remaining = size - rounded;
  if (pool == pool_kind::small) return remaining >= small_split_remainder_;
  return (size < max_split_size_ || size < policy_->split_limit()) &&
         remaining > large_split_remainder_;
}

inline void engine::split(stream_state& ss, block* b, std::size_t rounded) {
  insert_free(ss, cut_block(ss, b, rounded));
}

inline void engine::insert_free(stream_state& ss, block* b) {
  b->state = block_state::free;
  if (b->size >= max_split_size_) [[unlikely]] {
    insert_oversize(ss, b);
  } else {
    ss.index[b->seg->band].insert(b);
  }
}

inline void engine::remove_free(stream_state& ss, block* b) {
  if (b->oversize) [[unlikely]] {
    remove_oversize(ss, b);
  } else {
    ss.index[b->seg->band].remove(b);
  }
}

inline block* engine::coalesce_free(stream_state& ss, block* b) {
  if (block* n = b->next; n != nullptr && n->state == block_state::free) {
    remove_free(ss, n);
    absorb_next(ss, b);
  }
  if (block* p = b->prev; p != nullptr && p->state == block_state::free) {
    remove_free(ss, p);
    absorb_next(ss, p);
    b = p;
  }
  insert_free(ss, b);
  return b;
}

inline void engine::release_block(stream_state& ss, block* b) {
  b->requested = 0;
  segment* seg = b->seg;
  if (--seg->live == 0 && !seg->indexed && !seg->expandable()) [[unlikely]]
    note_idle(ss, seg);
  coalesce_free(ss, b);
}

}  // namespace cachalot::detail
