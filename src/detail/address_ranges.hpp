// Free address ranges of a reservation, handed out first-fit and coalesced on return: how the
// simulated device places segments and virtual-memory ranges. Invariants: the map holds
// disjoint, non-adjacent ranges (adjacent ones are merged at once), in address order; when
// every length taken and given is a multiple of some alignment A and the initial range starts
// A-aligned, every address handed out is A-aligned. Not thread-safe (the owner locks).
#pragma once

#include <cstddef>
#include <cstdint>
#include <iterator>
#include <map>

namespace cachalot::detail {

/// First-fit allocator of address ranges. See the file comment.
class address_ranges {
 public:
  /// Adds [addr, addr + len) to the free ranges (merging with its neighbours).
  void give(std::uintptr_t addr, std::size_t len) {
    auto next = free_.lower_bound(addr);
    if (next != free_.end() && addr + len == next->first) {
      len += next->second;
      next = free_.erase(next);
    }
    if (next != free_.begin()) {
      auto prev = std::prev(next);
      if (prev->first + prev->second == addr) {
        prev->second += len;
        return;
      }
    }
    free_.emplace(addr, len);
  }

  /// Takes the lowest free range of at least `len` bytes; 0 when none is left.
  std::uintptr_t take(std::size_t len) {
    for (auto it = free_.begin(); it != free_.end(); ++it) {
      if (it->second < len) continue;
      const std::uintptr_t addr = it->first;
      const std::size_t rest = it->second - len;
      free_.erase(it);
      if (rest != 0) free_.emplace(addr + len, rest);
      return addr;
    }
    return 0;
  }

 private:
  std::map<std::uintptr_t, std::size_t> free_;  // address -> length
};

}  // namespace cachalot::detail
