// The map from the address of every live allocation to its block, which lets a free find its
// block from the pointer alone (ONNX Runtime's and CuPy's frees carry neither size nor stream).
// 64 shards, each an open-addressing table (linear probing, backward-shift deletion, load at
// most 1/2) behind its own spinlock. The shard is chosen by the 2 MiB region of the address:
// segments belong to one stream, so threads working on their own streams mostly touch their
// own shards and their cache lines stay with them.
#pragma once

#include <array>
#include <cstddef>
#include <cstdint>
#include <mutex>
#include <vector>

#include "detail/block.hpp"
#include "detail/spinlock.hpp"

namespace cachalot::detail {

/// Sharded address -> block map. Thread-safe. Address 0 is never stored.
class pointer_map {
 public:
  pointer_map() {
    for (auto& s : shards_) s.slots.resize(initial_capacity);
  }

  /// Adds `addr` (not present) -> `b`.
  void insert(std::uintptr_t addr, block* b) {
    const std::uint64_t h = hash(addr);
    shard& s = shard_of(addr);
    std::lock_guard<spinlock> lock(s.lock);
    if ((s.count + 1) * 2 > s.slots.size()) [[unlikely]]
      grow(s);
    place(s, addr, b, h);
    ++s.count;
  }

  /// The block at `addr`, or nullptr.
  block* find(std::uintptr_t addr) const noexcept {
    const std::uint64_t h = hash(addr);
    const shard& s = shard_of(addr);
    std::lock_guard<spinlock> lock(s.lock);
    const std::size_t mask = s.slots.size() - 1;
    for (std::size_t i = h & mask;; i = (i + 1) & mask) {
      const entry& e = s.slots[i];
      if (e.key == addr) return e.value;
      if (e.key == 0) return nullptr;
    }
  }

  /// Removes `addr` and returns its block, or nullptr if absent.
  block* erase(std::uintptr_t addr) noexcept {
    const std::uint64_t h = hash(addr);
    shard& s = shard_of(addr);
    std::lock_guard<spinlock> lock(s.lock);
    const std::size_t mask = s.slots.size() - 1;
    std::size_t i = h & mask;
    for (;; i = (i + 1) & mask) {
      if (s.slots[i].key == addr) break;
      if (s.slots[i].key == 0) return nullptr;
    }
    block* found = s.slots[i].value;
    backward_shift(s, i);
    --s.count;
    return found;
  }

  /// Number of entries (exact when no other thread is changing the map).
  std::size_t size() const noexcept {
    std::size_t n = 0;
    for (const auto& s : shards_) {
      std::lock_guard<spinlock> lock(s.lock);
      n += s.count;
    }
    return n;
  }

 private:
  static constexpr unsigned shard_bits = 6;
  static constexpr std::size_t initial_capacity = 64;

  struct entry {
    std::uintptr_t key = 0;
    block* value = nullptr;
  };
  struct alignas(64) shard {
    mutable spinlock lock;
    std::vector<entry> slots;
    std::size_t count = 0;
  };

  static std::size_t shard_index(std::uintptr_t addr) noexcept {
    return mix(static_cast<std::uint64_t>(addr) >> 21) >> (64 - shard_bits);
  }
  shard& shard_of(std::uintptr_t addr) noexcept { return shards_[shard_index(addr)]; }
  const shard& shard_of(std::uintptr_t addr) const noexcept { return shards_[shard_index(addr)]; }
  static std::uint64_t mix(std::uint64_t x) noexcept {
    x ^= x >> 31;
    x *= 0x9e3779b97f4a7c15ULL;
    return x ^ (x >> 29);
  }

  static std::uint64_t hash(std::uintptr_t addr) noexcept {
    std::uint64_t x = static_cast<std::uint64_t>(addr) >> 8;  // >= 256 B aligned
    x ^= x >> 29;
    x *= 0xbf58476d1ce4e5b9ULL;
    x ^= x >> 32;
    return x;
  }

  static void place(shard& s, std::uintptr_t addr, block* b, std::uint64_t h) noexcept {
    const std::size_t mask = s.slots.size() - 1;
    std::size_t i = h & mask;
    while (s.slots[i].key != 0) i = (i + 1) & mask;
    s.slots[i] = entry{addr, b};
  }

  [[gnu::noinline]] static void grow(shard& s) {
    std::vector<entry> old(s.slots.size() * 2);
    old.swap(s.slots);
    for (const entry& e : old) {
      if (e.key != 0) place(s, e.key, e.value, hash(e.key));
    }
  }

  static void backward_shift(shard& s, std::size_t hole) noexcept {
    const std::size_t mask = s.slots.size() - 1;
    for (std::size_t j = (hole + 1) & mask; s.slots[j].key != 0; j = (j + 1) & mask) {
      const std::size_t home = hash(s.slots[j].key) & mask;
      // Move entry j into the hole if its home is not in the cyclic range (hole, j].
      const bool stays = hole <= j ? (hole < home && home <= j) : (hole < home || home <= j);
      if (!stays) {
        s.slots[hole] = s.slots[j];
        hole = j;
      }
    }
    s.slots[hole] = entry{};
  }

  std::array<shard, std::size_t{1} << shard_bits> shards_;
};

}  // namespace cachalot::detail
