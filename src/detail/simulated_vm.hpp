// Virtual memory of the simulated device: the bookkeeping behind reserve_address_range,
// map_chunk, unmap_chunk and release_address_range (the device adds locking, capacity,
// counters and fault injection). Address ranges are carved from one PROT_NONE, MAP_NORESERVE
// reservation of `space` bytes made at the first reserve, halved down to `min_space` while the
// host refuses it (TSan's application memory is about 1 TiB); failing that, without host
// backing, from synthetic addresses with nothing behind them.
// Invariants: ranges are granularity-aligned, disjoint and separated by at least one unused
// granule; chunks are granularity-aligned, disjoint, each inside one range; with host backing
// exactly the mapped chunks are readable and writable, everything else in the reservation is
// PROT_NONE with its pages discarded. Every check_* throws backend_error naming the misuse and
// changes nothing. Not thread-safe: the device's mutex guards it.
#pragma once

#include <cstddef>
#include <cstdint>
#include <map>

#include "cachalot/simulated_device.hpp"
#include "detail/address_ranges.hpp"

namespace cachalot::detail {

/// Where and how the virtual memory of one simulated device lives.
struct sim_vm_layout {
  std::size_t granularity = 0;     ///< chunk and range granularity (a power of two)
  std::size_t space = 0;           ///< address space for all ranges (a multiple of granularity)
  std::size_t min_space = 0;       ///< if the host refuses `space`, halve it down to this
  bool host_backing = false;       ///< mapped chunks are real, readable and writable host pages
  std::uintptr_t avoid_begin = 0;  ///< synthetic addresses must avoid [avoid_begin, avoid_end)
  std::uintptr_t avoid_end = 0;    ///< (the device's segment reservation)
};

/// The layout a simulated device's options ask for (avoid_begin and avoid_end left 0): the
/// granularity, and vm_address_space resolved (0: 64 x the capacity, which may shrink to 4 x).
/// @throws invalid_argument for a bad vm_granularity or vm_address_space
sim_vm_layout vm_layout_of(const sim_options& options, std::size_t page_size);

/// Ranges and chunks of a simulated device. See the file comment.
class simulated_vm {
 public:
  explicit simulated_vm(const sim_vm_layout& layout) : layout_(layout) {}
  ~simulated_vm();
  simulated_vm(const simulated_vm&) = delete;
  simulated_vm& operator=(const simulated_vm&) = delete;

  /// Throws unless `bytes` is a nonzero multiple of the granularity.
  void check_reserve(std::size_t bytes) const;
  /// Reserves a range of `bytes`; 0 when the address space is exhausted.
  /// @throws backend_error if the host refuses the reservation while host backing is on
  std::uintptr_t reserve(std::size_t bytes);
  /// Throws unless [base, base + bytes) is exactly one reserved range with nothing mapped.
  void check_release(std::uintptr_t base, std::size_t bytes) const;
  /// Releases a range that passed check_release.
  void release(std::uintptr_t base, std::size_t bytes);
  /// Throws unless [addr, addr + bytes) is aligned, inside one range and overlaps no chunk.
  void check_map(std::uintptr_t addr, std::size_t bytes) const;
  /// Maps a chunk that passed check_map. @throws backend_error if the host refuses (nothing
  /// is then mapped)
  void map(std::uintptr_t addr, std::size_t bytes);
  /// Throws unless [addr, addr + bytes) is exactly one mapped chunk.
  void check_unmap(std::uintptr_t addr, std::size_t bytes) const;
  /// Unmaps a chunk that passed check_unmap. @throws backend_error if the host refuses (the
  /// chunk then stays mapped)
  void unmap(std::uintptr_t addr, std::size_t bytes);

  /// True if every byte of [addr, addr + max(bytes, 1)) lies in mapped chunks.
  bool is_mapped(std::uintptr_t addr, std::size_t bytes) const;
  /// Address space for all ranges: layout.space, or less once reserved if the host refused it.
  std::size_t space() const noexcept { return layout_.space; }
  /// True once the address space is reserved (at the first reserve).
  bool has_space() const noexcept { return base_ != 0; }
  /// True if the addresses are synthetic (nothing behind them).
  bool synthetic() const noexcept { return has_space() && mapping_ == nullptr; }

 private:
  void make_space();
  /// The range holding `addr`, or ranges_.end().
  std::map<std::uintptr_t, std::size_t>::const_iterator range_of(std::uintptr_t addr) const;
  /// The chunk holding `addr`, or chunks_.end().
  std::map<std::uintptr_t, std::size_t>::const_iterator chunk_of(std::uintptr_t addr) const;

  sim_vm_layout layout_;
  void* mapping_ = nullptr;  // the host reservation (null when synthetic or not made yet)
  std::size_t mapping_size_ = 0;
  std::uintptr_t base_ = 0;  // first usable (granularity-aligned) address; 0 before make_space
  address_ranges free_;
  std::map<std::uintptr_t, std::size_t> ranges_;  // reserved: base -> bytes
  std::map<std::uintptr_t, std::size_t> chunks_;  // mapped: address -> bytes
};

}  // namespace cachalot::detail
