// The idle index of one memory pool: its fixed segments that became wholly free (no live
// block), by size, so that a release finds the largest in O(1) instead of walking every
// segment of every stream. Buckets as in free_index (detail/free_index.hpp), each an intrusive
// list through the segments' idle links, with bitmaps of the non-empty buckets. Guarded by the
// pool's idle lock (a leaf, taken under a stream lock).
//
// Lazy on the hot path: a segment enters when its live count drops to 0 (if not in already)
// and stays while it is in use again, so that a segment that goes back and forth between idle
// and used (one large block allocated and freed over and over) costs one flag test per free
// and never touches the index. A release takes the largest entry, checks it under its owner's
// lock, and drops it if it is in use (each entry at most once: amortized O(1)). Invariant:
// every fixed segment with no live block is in its pool's index (`indexed` set, written under
// the owner's lock and the index lock); entries may be in use.
#pragma once

#include <bit>
#include <cstddef>
#include <cstdint>

#include "detail/free_index.hpp"
#include "detail/segment.hpp"

namespace cachalot::detail {

/// Fixed segments that were idle, by size. Not thread-safe (its pool's idle lock).
class idle_index {
 public:
  /// Adds `s` (not indexed).
  void insert(segment* s) noexcept {
    const auto [fl, sl] = free_index::mapping(s->size);
    segment*& head = heads_[fl][sl];
    s->idle_prev = nullptr;
    s->idle_next = head;
    if (head != nullptr) head->idle_prev = s;
    head = s;
    fl_bitmap_ |= std::uint64_t{1} << fl;
    sl_bitmap_[fl] |= std::uint32_t{1} << sl;
    s->indexed = true;
    ++count_;
  }

  /// Removes `s` (indexed).
  void remove(segment* s) noexcept {
    const auto [fl, sl] = free_index::mapping(s->size);
    if (s->idle_prev != nullptr) {
      s->idle_prev->idle_next = s->idle_next;
    } else {
      heads_[fl][sl] = s->idle_next;
      if (s->idle_next == nullptr) {
        sl_bitmap_[fl] &= ~(std::uint32_t{1} << sl);
        if (sl_bitmap_[fl] == 0) fl_bitmap_ &= ~(std::uint64_t{1} << fl);
      }
    }
    if (s->idle_next != nullptr) s->idle_next->idle_prev = s->idle_prev;
    s->idle_prev = s->idle_next = nullptr;
    s->indexed = false;
    --count_;
  }

  /// The largest entry (the largest of at most 8 entries of the highest bucket), idle or not;
  /// nullptr if the index is empty.
  segment* top() const noexcept {
    if (fl_bitmap_ == 0) return nullptr;
    const unsigned f = 63u - static_cast<unsigned>(std::countl_zero(fl_bitmap_));
    const unsigned s = 31u - static_cast<unsigned>(std::countl_zero(sl_bitmap_[f]));
    segment* best = nullptr;
    unsigned n = 0;
    for (segment* g = heads_[f][s]; g != nullptr && n < 8; g = g->idle_next, ++n) {
      if (best == nullptr || g->size > best->size) best = g;
    }
    return best;
  }

  /// Entries (idle or not).
  std::size_t count() const noexcept { return count_; }
  bool empty() const noexcept { return count_ == 0; }

 private:
  std::uint64_t fl_bitmap_ = 0;
  std::uint32_t sl_bitmap_[free_index::fl_count] = {};
  segment* heads_[free_index::fl_count][free_index::sl_count] = {};
  std::size_t count_ = 0;
};

}  // namespace cachalot::detail
