// Blocks and segments. A segment is one device allocation; it is tiled, in address order and
// without gaps, by blocks linked through prev/next. A block is free (in its stream's free
// index), allocated (in the pointer map), or pending (freed, awaiting events on other
// streams). Invariants: adjacent blocks of a segment are never both free (they are coalesced);
// a segment and all its blocks belong to one stream state for their whole life.
#pragma once

#include <cstddef>
#include <cstdint>
#include <memory>
#include <vector>

#include "cachalot/stats.hpp"
#include "cachalot/types.hpp"

namespace cachalot::detail {

struct stream_state;
struct segment;

/// One block of a segment.
struct block {
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
  /// Allocated, but a free has claimed it (taken it out of the pointer map) and is still
  /// deciding between freeing it now and deferring it: record_stream and checked frees treat it
  /// as freed. Guarded by the owner's lock.
  bool freeing = false;
  std::vector<stream_t> used_on;  ///< other streams recorded through record_stream

  /// True if this free block covers its whole segment.
  bool whole() const noexcept { return prev == nullptr && next == nullptr; }
};

/// One device allocation, owned by a stream state.
struct segment {
  std::uintptr_t base = 0;            ///< base address
  std::size_t size = 0;               ///< bytes
  pool_kind pool = pool_kind::small;  ///< pool the segment serves
  stream_state* owner = nullptr;      ///< owning stream state
  block* first = nullptr;             ///< lowest block
  segment* prev = nullptr;            ///< owner's segment list
  segment* next = nullptr;            ///< owner's segment list
};

/// Recycles block nodes of one stream state so that splitting never calls malloc on the hot
/// path. Nodes are freed only when the pool is destroyed, so a block pointer read from the
/// pointer map always points at a node of its owner.
class block_pool {
 public:
  block_pool() = default;
  block_pool(const block_pool&) = delete;
  block_pool& operator=(const block_pool&) = delete;

  /// A fresh node owned by `owner`.
  block* acquire(stream_state* owner) {
    if (head_ == nullptr) [[unlikely]]
      grow();
    block* b = head_;
    head_ = b->free_next;
    b->addr = 0;
    b->size = 0;
    b->requested = 0;
    b->prev = b->next = b->free_prev = b->free_next = nullptr;
    b->seg = nullptr;
    // A pool serves one stream state, so a node's owner never changes: written only on the
    // node's first use, before any other thread can reach it (record_stream, allocation_size
    // and pool_of read it without the owner's lock).
    if (b->owner == nullptr) b->owner = owner;
    b->state = block_state::free;
    b->oversize = false;
    b->freeing = false;
    return b;  // used_on was cleared by release()
  }
  /// Returns a node to the pool.
  void release(block* b) noexcept {
    b->used_on.clear();
    b->free_next = head_;
    head_ = b;
  }

 private:
  static constexpr std::size_t chunk_size = 128;
  void grow() {
    chunks_.push_back(std::make_unique<block[]>(chunk_size));
    block* chunk = chunks_.back().get();
    for (std::size_t i = 0; i < chunk_size; ++i) {
      chunk[i].free_next = head_;
      head_ = &chunk[i];
    }
  }
  std::vector<std::unique_ptr<block[]>> chunks_;
  block* head_ = nullptr;
};

}  // namespace cachalot::detail
