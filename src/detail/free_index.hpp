// The free index of one stream and pool: a two-level segregated fit (TLSF-style) over free
// blocks. Sizes map to (first level = floor(log2(size)), second level = the next 5 bits), each
// bucket an intrusive doubly-linked list, with bitmaps of the non-empty buckets. Lookup is
// O(1): scan at most `exact_scan` blocks of the request's own bucket for the best fit, else
// take the head of the first non-empty larger bucket, every block of which fits (good fit: the
// waste is below 1/32 of the block). Cost does not grow with the number of free blocks.
#pragma once

#include <bit>
#include <cstddef>
#include <cstdint>

#include "detail/block.hpp"

namespace cachalot::detail {

/// Segregated-fit index of free blocks. Not thread-safe (guarded by its stream's lock).
class free_index {
 public:
  static constexpr unsigned sl_bits = 5;
  static constexpr unsigned sl_count = 1u << sl_bits;
  static constexpr unsigned fl_count = 64;
  static constexpr unsigned exact_scan = 8;

  /// Adds a free block.
  void insert(block* b) noexcept {
    const auto [fl, sl] = mapping(b->size);
    block*& head = heads_[fl][sl];
    b->free_prev = nullptr;
    b->free_next = head;
    if (head != nullptr) head->free_prev = b;
    head = b;
    fl_bitmap_ |= std::uint64_t{1} << fl;
    sl_bitmap_[fl] |= std::uint32_t{1} << sl;
    ++count_;
    bytes_ += b->size;
  }

  /// Removes a block that is in the index.
  void remove(block* b) noexcept {
    const auto [fl, sl] = mapping(b->size);
    if (b->free_prev != nullptr) {
      b->free_prev->free_next = b->free_next;
    } else {
      heads_[fl][sl] = b->free_next;
      if (b->free_next == nullptr) clear_bit(fl, sl);
    }
    if (b->free_next != nullptr) b->free_next->free_prev = b->free_prev;
    b->free_prev = b->free_next = nullptr;
    --count_;
    bytes_ -= b->size;
  }

  /// A free block of at least `size` bytes, or nullptr. Does not remove it.
  block* find(std::size_t size) const noexcept {
    const auto [fl, sl] = mapping(size);
    if (block* b = best_in_bucket(heads_[fl][sl], size)) return b;
    std::uint32_t sl_map = sl + 1 < sl_count ? sl_bitmap_[fl] & (~std::uint32_t{0} << (sl + 1)) : 0;
    unsigned f = fl;
    if (sl_map == 0) {
      const std::uint64_t fl_map =
          fl + 1 < fl_count ? fl_bitmap_ & (~std::uint64_t{0} << (fl + 1)) : 0;
      if (fl_map == 0) return nullptr;
      f = static_cast<unsigned>(std::countr_zero(fl_map));
      sl_map = sl_bitmap_[f];
    }
    return heads_[f][std::countr_zero(sl_map)];
  }

  /// The largest free block (scans only the highest non-empty bucket).
  block* largest() const noexcept {
    if (fl_bitmap_ == 0) return nullptr;
    const unsigned f = 63u - static_cast<unsigned>(std::countl_zero(fl_bitmap_));
    const unsigned s = 31u - static_cast<unsigned>(std::countl_zero(sl_bitmap_[f]));
    block* best = nullptr;
    for (block* b = heads_[f][s]; b != nullptr; b = b->free_next) {
      if (best == nullptr || b->size > best->size) best = b;
    }
    return best;
  }

  /// Calls `fn(block*)` for every free block of at least `size` bytes, and for some smaller
  /// ones (those sharing a bucket with larger ones): cold paths, which filter. `fn` must not
  /// change the index.
  template <class Fn>
  void for_each_from(std::size_t size, Fn&& fn) const {
    const unsigned first = mapping(size).fl;
    for (std::uint64_t fl_map = fl_bitmap_ & (~std::uint64_t{0} << first); fl_map != 0;
         fl_map &= fl_map - 1) {
      const unsigned f = static_cast<unsigned>(std::countr_zero(fl_map));
      for (std::uint32_t sl_map = sl_bitmap_[f]; sl_map != 0; sl_map &= sl_map - 1) {
        for (block* b = heads_[f][std::countr_zero(sl_map)]; b != nullptr; b = b->free_next) {
          fn(b);
        }
      }
    }
  }

  /// Calls `fn(block*)` for free blocks from the highest bucket down to that of `size` (the
  /// blocks of one bucket in list order) until it returns false: largest first, to a bucket's
  /// precision (cold paths; `fn` must not change the index).
  template <class Fn>
  void for_each_down(std::size_t size, Fn&& fn) const {
    const unsigned first = mapping(size).fl;
    for (std::uint64_t fl_map = fl_bitmap_ & (~std::uint64_t{0} << first); fl_map != 0;) {
      const unsigned f = 63u - static_cast<unsigned>(std::countl_zero(fl_map));
      fl_map &= ~(std::uint64_t{1} << f);
      for (std::uint32_t sl_map = sl_bitmap_[f]; sl_map != 0;) {
        const unsigned s = 31u - static_cast<unsigned>(std::countl_zero(sl_map));
        sl_map &= ~(std::uint32_t{1} << s);
        for (block* b = heads_[f][s]; b != nullptr; b = b->free_next) {
          if (!fn(b)) return;
        }
      }
    }
  }

  /// Number of free blocks.
  std::size_t count() const noexcept { return count_; }
  /// Bytes in free blocks.
  std::size_t bytes() const noexcept { return bytes_; }

  struct bucket {
    unsigned fl;
    unsigned sl;
  };
  /// The bucket of a size: blocks in bucket (fl, sl) have sizes in
  /// [(32 + sl) << (fl - 5), (33 + sl) << (fl - 5)) for fl >= 5.
  static bucket mapping(std::size_t size) noexcept {
    if (size < sl_count) return {0, static_cast<unsigned>(size)};
    const unsigned fl = 63u - static_cast<unsigned>(std::countl_zero(std::uint64_t{size}));
    const unsigned sl = static_cast<unsigned>((size >> (fl - sl_bits)) & (sl_count - 1));
    return {fl, sl};
  }

 private:
  static block* best_in_bucket(block* b, std::size_t size) noexcept {
    block* best = nullptr;
    for (unsigned n = 0; b != nullptr && n < exact_scan; b = b->free_next, ++n) {
      if (b->size < size) continue;
      if (b->size == size) return b;
      if (best == nullptr || b->size < best->size) best = b;
    }
    return best;
  }
  void clear_bit(unsigned fl, unsigned sl) noexcept {
    sl_bitmap_[fl] &= ~(std::uint32_t{1} << sl);
    if (sl_bitmap_[fl] == 0) fl_bitmap_ &= ~(std::uint64_t{1} << fl);
  }

  std::uint64_t fl_bitmap_ = 0;
  std::uint32_t sl_bitmap_[fl_count] = {};
  block* heads_[fl_count][sl_count] = {};
  std::size_t count_ = 0;
  std::size_t bytes_ = 0;
};

}  // namespace cachalot::detail
