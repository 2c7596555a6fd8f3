// Virtual memory of the simulated device (see src/detail/simulated_vm.hpp): the address-space
// reservation, the range and chunk maps, the misuse checks and, with host backing, the page
// protection of chunks (read-write while mapped; PROT_NONE and discarded once unmapped, so a
// newly mapped chunk reads as zeros and an access to an unmapped one faults).
#include "detail/simulated_vm.hpp"

#include <sys/mman.h>

#include <cerrno>
#include <cstring>

#include "cachalot/errors.hpp"
#include "detail/checks.hpp"

namespace cachalot::detail {

namespace {
// Synthetic addresses (no host backing, host refused the reservation): well above the
// synthetic segment base of the device, never dereferenced.
constexpr std::uintptr_t synthetic_vm_base = std::uintptr_t{0x200000000000};
// Largest address space for virtual memory: keeps synthetic addresses far from overflowing.
constexpr std::size_t max_vm_space = std::size_t{1} << 56;
constexpr std::size_t default_vm_factor = 64;  // x the capacity, by default
constexpr std::size_t min_vm_factor = 4;       // what the default may shrink to

std::uintptr_t align_up(std::uintptr_t v, std::size_t a) {
  return (v + a - 1) / a * a;
}

/// factor x capacity rounded up to g, saturated at max_vm_space.
std::size_t times_capacity(std::size_t factor, std::size_t capacity, std::size_t g) {
  if (capacity > max_vm_space / factor) return max_vm_space;
  return align_up(factor * capacity, g);
}
}  // namespace

sim_vm_layout vm_layout_of(const sim_options& options, std::size_t page_size) {
  const std::size_t g = options.vm_granularity;
  CACHALOT_EXPECTS(g != 0 && (g & (g - 1)) == 0 && g <= max_vm_space, invalid_argument,
                   "simulated device: vm_granularity {} is not a power of two up to 2^56", g);
  CACHALOT_EXPECTS(!options.host_backing || g % page_size == 0, invalid_argument,
                   "simulated device: vm_granularity {} is not a multiple of the page size ({}), "
                   "which host backing needs",
                   g, page_size);
  CACHALOT_EXPECTS(options.vm_address_space <= max_vm_space, invalid_argument,
                   "simulated device: vm_address_space {} is above the limit of {}",
                   options.vm_address_space, max_vm_space);
  sim_vm_layout l;
  l.granularity = g;
  l.host_backing = options.host_backing;
  if (options.vm_address_space != 0) {  // asked for: exactly that, never shrunk
    l.space = l.min_space = align_up(options.vm_address_space, g);
  } else {
    l.space = times_capacity(default_vm_factor, options.capacity, g);
    l.min_space = times_capacity(min_vm_factor, options.capacity, g);
  }
  return l;
}

simulated_vm::~simulated_vm() {
  if (mapping_ != nullptr) munmap(mapping_, mapping_size_);
}

void simulated_vm::make_space() {
  const std::size_t g = layout_.granularity;
  void* m = MAP_FAILED;
  for (;;) {
    mapping_size_ = layout_.space + g;  // room to align the base
    m = mmap(nullptr, mapping_size_, PROT_NONE, MAP_PRIVATE | MAP_ANONYMOUS | MAP_NORESERVE, -1, 0);
    const std::size_t half = layout_.space / 2 / g * g;
    if (m != MAP_FAILED || half < layout_.min_space || half == 0) break;
    layout_.space = half;
  }
  if (m != MAP_FAILED) {
    mapping_ = m;
    base_ = align_up(reinterpret_cast<std::uintptr_t>(m), g);
  } else {
    CACHALOT_EXPECTS(!layout_.host_backing, backend_error,
                     "simulated device: cannot reserve {} B of address space for host-backed "
                     "virtual memory ({}); lower sim_options::vm_address_space",
                     layout_.space, std::strerror(errno));
    mapping_size_ = 0;
    base_ = align_up(synthetic_vm_base, g);
    if (base_ < layout_.avoid_end && layout_.avoid_begin < base_ + layout_.space) {
      base_ = align_up(layout_.avoid_end, g);
    }
  }
  free_.give(base_, layout_.space);
}

void simulated_vm::check_reserve(std::size_t bytes) const {
  CACHALOT_EXPECTS(bytes != 0 && bytes % layout_.granularity == 0, backend_error,
                   "simulated device: reserve_address_range({} B): the size is not a nonzero "
                   "multiple of the granularity ({} B)",
                   bytes, layout_.granularity);
}

std::uintptr_t simulated_vm::reserve(std::size_t bytes) {
  if (!has_space()) make_space();
  // One unused granule after each range: running off its end never lands in the next one.
  const std::size_t guarded = bytes + layout_.granularity;
  if (guarded < bytes) return 0;
  const std::uintptr_t base = free_.take(guarded);
  if (base != 0) ranges_.emplace(base, bytes);
  return base;
}

auto simulated_vm::range_of(std::uintptr_t addr) const
    -> std::map<std::uintptr_t, std::size_t>::const_iterator {
  auto it = ranges_.upper_bound(addr);
  if (it == ranges_.begin()) return ranges_.end();
  --it;
  return addr - it->first < it->second ? it : ranges_.end();
}

auto simulated_vm::chunk_of(std::uintptr_t addr) const
    -> std::map<std::uintptr_t, std::size_t>::const_iterator {
  auto it = chunks_.upper_bound(addr);
  if (it == chunks_.begin()) return chunks_.end();
  --it;
  return addr - it->first < it->second ? it : chunks_.end();
}

void simulated_vm::check_release(std::uintptr_t base, std::size_t bytes) const {
  const auto r = range_of(base);
  CACHALOT_EXPECTS(r != ranges_.end(), backend_error,
                   "simulated device: release_address_range({:#x}, {} B): no reserved range "
                   "holds {:#x}",
                   base, bytes, base);
  CACHALOT_EXPECTS(r->first == base, backend_error,
                   "simulated device: release_address_range({:#x}, {} B): {:#x} is inside the "
                   "range reserved at {:#x}, not its base",
                   base, bytes, base, r->first);
  CACHALOT_EXPECTS(r->second == bytes, backend_error,
                   "simulated device: release_address_range({:#x}, {} B): the range has {} B", base,
                   bytes, r->second);
  auto c = chunks_.lower_bound(base);
  if (c == chunks_.end() || c->first >= base + bytes) return;
  std::size_t count = 0, mapped = 0;
  for (auto it = c; it != chunks_.end() && it->first < base + bytes; ++it)
    ++count, mapped += it->second;
  CACHALOT_FAIL(backend_error,
                "simulated device: release_address_range({:#x}, {} B): {} chunks ({} B) are still "
                "mapped in it, the first at {:#x}",
                base, bytes, count, mapped, c->first);
}

void simulated_vm::release(std::uintptr_t base, std::size_t bytes) {
  ranges_.erase(base);
  free_.give(base, bytes + layout_.granularity);
}

void simulated_vm::check_map(std::uintptr_t addr, std::size_t bytes) const {
  const std::size_t g = layout_.granularity;
  CACHALOT_EXPECTS(addr % g == 0 && bytes != 0 && bytes % g == 0, backend_error,
                   "simulated device: map_chunk({:#x}, {} B): address and size must be "
                   "multiples of the granularity ({} B), the size nonzero",
                   addr, bytes, g);
  const auto r = range_of(addr);
  CACHALOT_EXPECTS(r != ranges_.end(), backend_error,
                   "simulated device: map_chunk({:#x}, {} B): no reserved range holds {:#x}", addr,
                   bytes, addr);
  CACHALOT_EXPECTS(bytes <= r->first + r->second - addr, backend_error,
                   "simulated device: map_chunk({:#x}, {} B): runs past the end of the range "
                   "reserved at {:#x} ({} B)",
                   addr, bytes, r->first, r->second);
  auto next = chunks_.lower_bound(addr);
  auto prev = chunk_of(addr);
  const auto clash = prev != chunks_.end()                                 ? prev
                     : next != chunks_.end() && next->first < addr + bytes ? next
                                                                           : chunks_.end();
  CACHALOT_EXPECTS(clash == chunks_.end(), backend_error,
                   "simulated device: map_chunk({:#x}, {} B): overlaps the chunk mapped at "
                   "{:#x} ({} B)",
                   addr, bytes, clash->first, clash->second);
}

void simulated_vm::map(std::uintptr_t addr, std::size_t bytes) {
  if (layout_.host_backing && mapping_ != nullptr &&
      mprotect(reinterpret_cast<void*>(addr), bytes, PROT_READ | PROT_WRITE) != 0) {
    CACHALOT_FAIL(backend_error, "simulated device: map_chunk({:#x}, {} B): mprotect failed: {}",
                  addr, bytes, std::strerror(errno));
  }
  chunks_.emplace(addr, bytes);
}

void simulated_vm::check_unmap(std::uintptr_t addr, std::size_t bytes) const {
  const auto c = chunk_of(addr);
  CACHALOT_EXPECTS(c != chunks_.end(), backend_error,
                   "simulated device: unmap_chunk({:#x}, {} B): no chunk is mapped at {:#x}", addr,
                   bytes, addr);
  CACHALOT_EXPECTS(c->first == addr, backend_error,
                   "simulated device: unmap_chunk({:#x}, {} B): {:#x} is inside the chunk mapped "
                   "at {:#x} ({} B); a chunk is unmapped whole, as it was mapped",
                   addr, bytes, addr, c->first, c->second);
  CACHALOT_EXPECTS(c->second == bytes, backend_error,
                   "simulated device: unmap_chunk({:#x}, {} B): the chunk mapped there has {} B; "
                   "a chunk is unmapped whole, as it was mapped",
                   addr, bytes, c->second);
}

void simulated_vm::unmap(std::uintptr_t addr, std::size_t bytes) {
  if (layout_.host_backing && mapping_ != nullptr) {
    void* p = reinterpret_cast<void*>(addr);
    if (mprotect(p, bytes, PROT_NONE) != 0) {
      CACHALOT_FAIL(backend_error,
                    "simulated device: unmap_chunk({:#x}, {} B): mprotect failed: {}", addr, bytes,
                    std::strerror(errno));
    }
    madvise(p, bytes, MADV_DONTNEED);  // the physical pages go back: next map reads zeros
  }
  chunks_.erase(addr);
}

bool simulated_vm::is_mapped(std::uintptr_t addr, std::size_t bytes) const {
  const std::uintptr_t end = addr + (bytes == 0 ? 1 : bytes);
  auto it = chunk_of(addr);
  for (std::uintptr_t at = addr; it != chunks_.end() && it->first <= at; ++it) {
    at = it->first + it->second;
    if (at >= end) return true;
  }
  return false;
}

}  // namespace cachalot::detail
