// Blocks. A block is a span of a segment (detail/segment.hpp); a segment is tiled, in address
// order and without gaps, by blocks linked through prev/next. A block is free (in its stream's
// free index), allocated (in the pointer map), pending (freed, awaiting events on other
// streams), or, in an expandable segment only, unmapped (a hole: no memory behind it, never in
// the free index). Invariants: adjacent free blocks are coalesced (an unmapped block is never
// coalesced with a mapped one); a block and its segment belong to one stream state for their
// whole life.
#pragma once

#include <atomic>
#include <cstddef>
#include <cstdint>
#include <memory>
#include <vector>

#include "cachalot/stats.hpp"
#include "cachalot/types.hpp"

namespace cachalot::detail {

struct stream_state;
struct segment;

/// A std::atomic<bool> that copies by value, so that block nodes stay copyable (tests and
/// containers copy them; the engine never copies a node in use).
class copyable_flag {
 public:
  copyable_flag() = default;
  copyable_flag(const copyable_flag& o) noexcept : v_(o.load(std::memory_order_relaxed)) {}
  copyable_flag& operator=(const copyable_flag& o) noexcept {
    store(o.load(std::memory_order_relaxed), std::memory_order_relaxed);
    return *this;
  }
  bool load(std::memory_order m = std::memory_order_seq_cst) const noexcept { return v_.load(m); }
  void store(bool x, std::memory_order m = std::memory_order_seq_cst) noexcept { v_.store(x, m); }
  bool exchange(bool x, std::memory_order m = std::memory_order_seq_cst) noexcept {
    return v_.exchange(x, m);
  }

 private:
  std::atomic<bool> v_{false};
};

/// One block of a segment. Cache-line aligned: threads that share a stream write their own
/// blocks' nodes on the hot path (`released`, `requested`), which must not share lines.
struct alignas(128) block {
  std::uintptr_t addr = 0;        ///< first byte
  std::size_t size = 0;           ///< bytes (a multiple of the granularity)
  std::size_t requested = 0;      ///< bytes the caller asked for (allocated or pending)
  block* prev = nullptr;          ///< address-order neighbour in the segment
  block* next = nullptr;          ///< address-order neighbour in the segment
  block* free_prev = nullptr;     ///< free-index bucket list (also the node pool's free list)
  block* free_next = nullptr;     ///< free-index bucket list
  segment* seg = nullptr;         ///< segment the block tiles
  stream_state* owner = nullptr;  ///< stream state owning the node; never changes
  block_state state = block_state::free;  ///< free, allocated or pending
  bool oversize = false;                  ///< held in the oversize set rather than the free index
  /// Unmapped block of an expandable segment that a growth is mapping or a release is
  /// unmapping: not in the segment's hole index, invisible to every other operation.
  bool busy = false;
  /// Allocated, but a free has claimed it (taken it out of the pointer map) and is still
  /// deciding between freeing it now and deferring it: record_stream and checked frees treat it
  /// as freed. Guarded by the owner's lock.
  bool freeing = false;
  std::vector<stream_t> used_on;  ///< other streams recorded through record_stream
  /// With a thread cache (detail/thread_cache.hpp): set by the free that wins this block (the
  /// one arbitration point between frees racing on one pointer), cleared when it is handed out.
  /// A block in the pointer map with `released` set lies in a thread-cache lane.
  copyable_flag released;
  /// With a thread cache: !used_on.empty(), readable without the stream lock (a free decides
  /// from it whether the block may enter a lane; record_stream sets it before checking
  /// `released`, the free sets `released` before reading it, so one of them sees the other).
  copyable_flag has_uses;
  /// With a thread cache: a lane may take this block when it is freed (default pool, at most
  /// thread_cache_max_size). Set when the block is handed out from its stream.
  copyable_flag cacheable;
  /// In a thread-cache lane now (written under the lane's lock; read by stats and snapshots,
  /// which hold every lane lock, and by error messages).
  copyable_flag in_lane;

  /// True if this block covers its whole (fixed) segment.
  bool whole() const noexcept { return prev == nullptr && next == nullptr; }
};

/// Recycles block nodes of one stream state so that splitting never calls malloc on the hot
/// path. Nodes are freed only when the pool is destroyed, so a block pointer read from the
/// pointer map always points at a node of its owner.
class block_pool {
 public:
  block_pool() = default;
  block_pool(const block_pool&) = delete;
  block_pool& operator=(const block_pool&) = delete;

  /// A fresh node owned by `owner` (always the same for one pool).
  block* acquire(stream_state* owner) {
    if (head_ == nullptr) [[unlikely]]
      grow(owner);
    block* b = head_;
    head_ = b->free_next;
    b->addr = 0;
    b->size = 0;
    b->requested = 0;
    b->prev = b->next = b->free_prev = b->free_next = nullptr;
    b->seg = nullptr;
    b->state = block_state::free;
    b->oversize = false;
    b->busy = false;
    b->freeing = false;
    b->released.store(false, std::memory_order_relaxed);
    b->has_uses.store(false, std::memory_order_relaxed);
    b->cacheable.store(false, std::memory_order_relaxed);
    b->in_lane.store(false, std::memory_order_relaxed);
    return b;  // used_on was cleared by release()
  }
  /// Returns a node to the pool. Its segment is cleared, so that a cold path holding a stale
  /// pointer to it (a release pass) sees that it no longer belongs to any segment.
  void release(block* b) noexcept {
    b->used_on.clear();
    b->seg = nullptr;
    b->free_next = head_;
    head_ = b;
  }

 private:
  static constexpr std::size_t chunk_size = 128;
  // Nodes get their owner once, here: threads read `owner` of a node found in the pointer map
  // before they take its stream's lock, so it must never be written again.
  void grow(stream_state* owner) {
    chunks_.push_back(std::make_unique<block[]>(chunk_size));
    block* chunk = chunks_.back().get();
    for (std::size_t i = 0; i < chunk_size; ++i) {
      chunk[i].owner = owner;
      chunk[i].free_next = head_;
      head_ = &chunk[i];
    }
  }
  std::vector<std::unique_ptr<block[]>> chunks_;
  block* head_ = nullptr;
};

}  // namespace cachalot::detail
