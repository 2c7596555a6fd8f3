// The reserve (config key `reserve`, RMM's initial pool size): one device allocation taken when
// the allocator starts, from which segments of every stream and pool are carved without a
// device call. Invariants: carved ranges never overlap and lie inside the reserve; free ranges
// are coalesced (no two adjacent); carved + free bytes == the reserve's size. Carving is
// best fit over the free ranges (smallest that fits, lowest address among equals), at offsets
// that are multiples of the alignment. Thread-safe (one mutex, a leaf lock); used only on the
// engine's cold paths (growth, segment release).
#pragma once

#include <cstddef>
#include <cstdint>
#include <map>
#include <mutex>
#include <set>
#include <utility>

namespace cachalot::detail {

/// Address ranges carved out of one reserved device allocation.
class reserve_arena {
 public:
  /// Manages [base, base + size); carved ranges are rounded up to `alignment` (a power of two).
  reserve_arena(std::uintptr_t base, std::size_t size, std::size_t alignment);

  /// A range of `bytes` (rounded up to the alignment), or nullptr if no free range fits.
  void* carve(std::size_t bytes);
  /// True if a carve of `bytes` would succeed now.
  bool fits(std::size_t bytes) const;
  /// Gives back a range carve() returned, with the same `bytes`. False if `addr` is not in the
  /// reserve (a segment of the device's own), true when the range is back.
  bool give_back(std::uintptr_t addr, std::size_t bytes);
  /// True if `addr` lies inside the reserve.
  bool contains(std::uintptr_t addr) const noexcept {
    return addr >= base_ && addr < base_ + size_;
  }

  std::uintptr_t base() const noexcept { return base_; }  ///< start of the reserve
  std::size_t size() const noexcept { return size_; }     ///< bytes of the reserve
  std::size_t free_bytes() const;                         ///< bytes not carved

 private:
  std::size_t rounded(std::size_t bytes) const noexcept {
    return (bytes + alignment_ - 1) & ~(alignment_ - 1);
  }

  const std::uintptr_t base_;
  const std::size_t size_;
  const std::size_t alignment_;
  mutable std::mutex mutex_;
  std::map<std::uintptr_t, std::size_t> by_address_;          ///< free ranges: start -> bytes
  std::set<std::pair<std::size_t, std::uintptr_t>> by_size_;  ///< the same, (bytes, start)
  std::size_t free_ = 0;
};

}  // namespace cachalot::detail
