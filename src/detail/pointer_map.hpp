// The map from the address of every live allocation to its block, which lets a free find its
// block from the pointer alone (ONNX Runtime's and CuPy's frees carry neither size nor stream).
// 64 shards, each an open-addressing table (linear probing, backward-shift deletion, load at
// most 1/2). Writers (insert, erase) take the shard's lock; lookups take no lock: each shard
// is a sequence lock (a writer makes its counter odd while it changes the table; a lookup that
// saw it odd or changed reads again, spinning briefly, then yielding to the writer), and a
// table that growth replaced stays allocated until the map is destroyed, so a lookup never
// reads freed memory. Growth builds and publishes the bigger table before the write section
// (the old one is unchanged meanwhile, so lookups go on): the counter is odd only for a few
// stores, never around an allocation. A lookup writes no shared cache line: threads that share
// a stream (and so a shard) find blocks in parallel.
// The shard is chosen by the 2 MiB region of the address: segments belong to one stream, so
// threads working on their own streams mostly write their own shards.
#pragma once

#include <array>
#include <atomic>
#include <cstddef>
#include <cstdint>
#include <memory>
#include <mutex>
#include <vector>

#include "detail/block.hpp"
#include "detail/spinlock.hpp"

namespace cachalot::detail {

/// Sharded address -> block map. Thread-safe; find() takes no lock. Address 0 is never stored.
class pointer_map {
 public:
  pointer_map() {
    for (auto& s : shards_) s.publish(std::make_unique<table>(initial_capacity));
  }

  /// Adds `addr` (not present) -> `b`.
  void insert(std::uintptr_t addr, block* b) {
    shard& s = shard_of(addr);
    std::lock_guard<spinlock> lock(s.lock);
    if ((s.count + 1) * 2 > s.current->capacity) [[unlikely]]
      grow(s, addr);  // (outside the write section: see the file comment)
    s.begin_write();
    place(*s.current, addr, b);
    ++s.count;
    s.end_write();
  }

  /// The block at `addr`, or nullptr. Lock-free: it retries while a writer changes the shard.
  block* find(std::uintptr_t addr) const noexcept {
    const std::uint64_t h = hash(addr);
    const shard& s = shard_of(addr);
    for (unsigned tries = 0;; ++tries) {
      const std::uint32_t before = s.seq.load(std::memory_order_acquire);
      if ((before & 1) == 0) [[likely]] {
        const table* t = s.table_now.load(std::memory_order_acquire);
        block* found = probe(*t, addr, h);  // (acquire loads: the re-read below stays after)
        if (s.seq.load(std::memory_order_relaxed) == before) [[likely]]
          return found;
      }
      back_off(tries);
    }
  }

  /// True while a writer changes the shard of `addr` (its sequence is odd). For tests.
  bool writing(std::uintptr_t addr) const noexcept {
    return (shard_of(addr).seq.load(std::memory_order_relaxed) & 1) != 0;
  }

  /// Test hook (null outside tests): called by a growth of the shard of `addr`, with the shard
  /// locked, once its bigger table is allocated.
  static inline std::atomic<void (*)(const pointer_map&, std::uintptr_t)> grow_hook{nullptr};

  /// Removes `addr` and returns its block, or nullptr if absent.
  block* erase(std::uintptr_t addr) noexcept {
    const std::uint64_t h = hash(addr);
    shard& s = shard_of(addr);
    std::lock_guard<spinlock> lock(s.lock);
    table& t = *s.current;
    const std::size_t mask = t.capacity - 1;
    std::size_t i = h & mask;
    for (;; i = (i + 1) & mask) {
      const std::uintptr_t k = t.slots[i].key.load(std::memory_order_relaxed);
      if (k == addr) break;
      if (k == 0) return nullptr;
    }
    block* found = t.slots[i].value.load(std::memory_order_relaxed);
    s.begin_write();
    backward_shift(t, i);
    --s.count;
    s.end_write();
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

  // Slots are atomics (read with relaxed loads by lookups that race with a writer; the
  // sequence counter tells the lookup to throw such a read away).
  struct entry {
    std::atomic<std::uintptr_t> key{0};
    std::atomic<block*> value{nullptr};
  };
  struct table {
    explicit table(std::size_t n) : capacity(n), slots(std::make_unique<entry[]>(n)) {}
    const std::size_t capacity;  // a power of two
    std::unique_ptr<entry[]> slots;
  };
  struct alignas(64) shard {
    mutable spinlock lock;              // writers
    std::atomic<std::uint32_t> seq{0};  // odd while a writer changes the table
    std::atomic<table*> table_now{nullptr};
    table* current = nullptr;  // == table_now, for writers (under lock)
    std::size_t count = 0;
    std::vector<std::unique_ptr<table>> tables;  // every table ever used: lookups may read old ones

    void publish(std::unique_ptr<table> t) {
      current = t.get();
      table_now.store(current, std::memory_order_release);
      tables.push_back(std::move(t));
    }
    // No fences (TSan has none): slots are stored with release, so a lookup that sees a new
    // slot value also sees the odd counter stored before it.
    void begin_write() noexcept {
      seq.store(seq.load(std::memory_order_relaxed) + 1, std::memory_order_relaxed);
    }
    void end_write() noexcept {
      seq.store(seq.load(std::memory_order_relaxed) + 1, std::memory_order_release);
    }
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

  // At most `capacity` probes: a lookup racing a writer may see a table with no empty slot on
  // its way (its result is then discarded by the sequence check).
  static block* probe(const table& t, std::uintptr_t addr, std::uint64_t h) noexcept {
    const std::size_t mask = t.capacity - 1;
    std::size_t i = h & mask;
    for (std::size_t n = 0; n <= mask; ++n, i = (i + 1) & mask) {
      const std::uintptr_t k = t.slots[i].key.load(std::memory_order_acquire);
      if (k == addr) return t.slots[i].value.load(std::memory_order_acquire);
      if (k == 0) return nullptr;
    }
    return nullptr;
  }

  static void set(entry& e, std::uintptr_t key, block* value) noexcept {
    e.key.store(key, std::memory_order_release);
    e.value.store(value, std::memory_order_release);
  }

  static void place(table& t, std::uintptr_t addr, block* b) noexcept {
    const std::size_t mask = t.capacity - 1;
    std::size_t i = hash(addr) & mask;
    while (t.slots[i].key.load(std::memory_order_relaxed) != 0) i = (i + 1) & mask;
    set(t.slots[i], addr, b);
  }

  // A lookup that found the shard being written: a writer holds it for a few stores, unless
  // it was preempted; then spinning only delays it, so the lookup yields (wait_step).
  [[gnu::noinline]] static void back_off(unsigned tries) noexcept { wait_step(tries); }

  [[gnu::noinline]] void grow(shard& s, std::uintptr_t addr) {
    auto bigger = std::make_unique<table>(s.current->capacity * 2);
    if (auto* hook = grow_hook.load(std::memory_order_relaxed)) hook(*this, addr);
    const table& old = *s.current;
    for (std::size_t i = 0; i < old.capacity; ++i) {
      const std::uintptr_t k = old.slots[i].key.load(std::memory_order_relaxed);
      if (k != 0) place(*bigger, k, old.slots[i].value.load(std::memory_order_relaxed));
    }
    s.publish(std::move(bigger));
  }

  static void backward_shift(table& t, std::size_t hole) noexcept {
    const std::size_t mask = t.capacity - 1;
    for (std::size_t j = (hole + 1) & mask;; j = (j + 1) & mask) {
      const std::uintptr_t k = t.slots[j].key.load(std::memory_order_relaxed);
      if (k == 0) break;
      const std::size_t home = hash(k) & mask;
      // Move entry j into the hole if its home is not in the cyclic range (hole, j].
      const bool stays = hole <= j ? (hole < home && home <= j) : (hole < home || home <= j);
      if (!stays) {
        set(t.slots[hole], k, t.slots[j].value.load(std::memory_order_relaxed));
        hole = j;
      }
    }
    set(t.slots[hole], 0, nullptr);
  }

  std::array<shard, std::size_t{1} << shard_bits> shards_;
};

}  // namespace cachalot::detail
