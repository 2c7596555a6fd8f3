// Checked mode (config `debug:1`) and the shared out-of-line free path.
//
// Every free in checked mode is validated before anything changes: the pointer must be the
// start of a live allocation (else double free, interior or foreign pointer, reported with
// what is known of the address), and a sized free must name the size that was requested. A
// rejected free throws invalid_pointer and leaves the block allocated.
//
// On host-accessible memory (the simulated device with host backing) checked mode also poisons
// free memory: invariant, every byte of every free block holds `poison_byte` (fresh segments
// are filled when added, blocks when they become free). A block handed out again is scanned; a
// byte that differs was written while free. That is counted (num_use_after_free_writes), stored
// as the thread's last error, and printed to stderr; the allocation itself still succeeds.
#include <cstdio>
#include <cstring>

#include "detail/c_error.hpp"
#include "detail/checks.hpp"
#include "detail/engine.hpp"

namespace cachalot::detail {
namespace {
constexpr unsigned char poison_byte = 0xDB;

/// Offset of the first byte in [p, p + n) that is not the poison byte, or n.
std::size_t first_unpoisoned(const unsigned char* p, std::size_t n) noexcept {
  constexpr std::uint64_t word = 0x0101010101010101ULL * poison_byte;
  std::size_t i = 0;
  for (; i + 8 <= n; i += 8) {
    std::uint64_t w;
    std::memcpy(&w, p + i, sizeof w);
    if (w != word) break;
  }
  for (; i < n; ++i) {
    if (p[i] != poison_byte) return i;
  }
  return n;
}
}  // namespace

void engine::deallocate_slow(void* ptr, stream_t stream, bool on_stream, const std::size_t* size) {
  if (debug_) {
    const std::size_t freed_now = check_free(ptr, stream, on_stream, size);
    if (poison_ && freed_now != 0) poison(reinterpret_cast<std::uintptr_t>(ptr), freed_now);
  }
  if (!caching_) return deallocate_passthrough(ptr, stream, on_stream);
  free_cached(ptr, stream, on_stream);
}

std::size_t engine::check_free(void* ptr, stream_t stream, bool on_stream,
                               const std::size_t* size) {
  const auto addr = reinterpret_cast<std::uintptr_t>(ptr);
  block* b = map_.find(addr);
  if (b == nullptr) fail_invalid_free(ptr);
  stream_state& ss = *b->owner;
  std::lock_guard<spinlock> lock(ss.lock);
  if (b->addr != addr || b->state != block_state::allocated || b->freeing) {
    CACHALOT_FAIL(invalid_pointer, "deallocate: {:#x} was freed concurrently by another thread",
                  addr);
  }
  if (size != nullptr && *size != b->requested) {
    CACHALOT_FAIL(invalid_pointer,
                  "deallocate: size mismatch: {:#x} is a live allocation of {} B (block of {} B "
                  "on stream {}) but the free names {} B; nothing was freed",
                  addr, b->requested, b->size, fmt::ptr(ss.stream), *size);
  }
  const bool deferred = (on_stream && stream != ss.stream) || !b->used_on.empty();
  // A block of a pool that sleeps (or is about to) may have no memory behind it: not poisoned.
  return deferred || ss.pool->asleep.load(std::memory_order_acquire) ? 0 : b->size;
}

void engine::after_allocate(block* b, std::size_t bytes, stream_t stream) {
  if (poison_) check_poison(b, stream);
  if (tracer_) tracer_->on_allocate(reinterpret_cast<void*>(b->addr), bytes, stream);
}

void engine::poison(std::uintptr_t addr, std::size_t size) const noexcept {
  std::memset(reinterpret_cast<void*>(addr), poison_byte, size);
}

void engine::check_poison(const block* b, stream_t stream) {
  const auto* p = reinterpret_cast<const unsigned char*>(b->addr);
  const std::size_t offset = first_unpoisoned(p, b->size);
  if (offset == b->size) return;
  std::size_t last = b->size;
  while (last > offset && p[last - 1] == poison_byte) --last;
  gstats_.num_use_after_free.fetch_add(1, std::memory_order_relaxed);
  b->owner->pool->num_use_after_free.fetch_add(1, std::memory_order_relaxed);
  const std::string msg = fmt::format(
      "cachalot: checked mode: use-after-free write: the block at {:#x} ({} B, stream {}) was "
      "written while free, bytes {}..{} (first changed byte {:#04x}); it is handed out anyway",
      b->addr, b->size, fmt::ptr(stream), offset, last - 1, p[offset]);
  set_last_error(msg);
  std::fprintf(stderr, "%s\n", msg.c_str());
}

}  // namespace cachalot::detail
