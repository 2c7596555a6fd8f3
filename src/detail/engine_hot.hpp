// The engine's cache-hit paths, inline: allocate = the calling thread's lane of the stream's
// thread cache, else one stream lock and a free-index lookup (engine_blocks.hpp), then a
// pointer-map insert; free = a lock-free map lookup and the lane, else a map erase and one
// stream lock. Invariants: neither calls the backend nor takes a second stream lock; anything
// but the plain case (a miss, another stream, tracing, a stats ceiling) leaves for the cold
// paths of engine_slow.cpp and deferred_free.cpp. Included by detail/engine.hpp after the class.
#pragma once

#include "detail/engine.hpp"

namespace cachalot::detail {

inline void* engine::allocate_on(stream_state& ss, std::size_t bytes, stream_t stream) {
  const std::size_t rounded = round_up(bytes);
  const pool_kind pool = rounded <= small_size_ ? pool_kind::small : pool_kind::large;
  if (thread_cache* tc = ss.tcache.get(); tc != nullptr && rounded <= tc_max_) {
    if (block* b = tc_take(ss, tc->mine(), pool, rounded, bytes)) [[likely]] {
      if (alloc_hooks_) [[unlikely]]
        after_allocate(b, bytes, stream);       // (tracing: the block is this thread's already)
      return reinterpret_cast<void*>(b->addr);  // it stayed in the map
    }
  }
  block* b = nullptr;
  bool over_ceiling = false;
  {
    std::lock_guard<spinlock> lock(ss.lock);
    b = take_cached(ss, pool, rounded, bytes, false, &over_ceiling);
  }
  if (b == nullptr) [[unlikely]]
    b = allocate_slow(ss, pool, rounded, bytes, over_ceiling);
  map_.insert(b->addr, b);
  void* ptr = reinterpret_cast<void*>(b->addr);
  if (alloc_hooks_) [[unlikely]]
    after_allocate(b, bytes, stream);
  return ptr;
}

inline void engine::free_cached(void* ptr, stream_t stream, bool on_stream) {
  const auto addr = reinterpret_cast<std::uintptr_t>(ptr);
  if (tc_on_) {
    // A block a lane may take: its `released` flag decides between racing frees (it stays in
    // the map while in a lane). Any other block: the map erase decides, as without lanes.
    block* b = map_.find(addr);
    if (b != nullptr && b->cacheable.load(std::memory_order_relaxed)) [[likely]] {
      if (b->released.exchange(true)) [[unlikely]]
        fail_invalid_free(ptr);
      if (tc_put(b, stream, on_stream)) [[likely]]
        return;
      map_.erase(addr);
      return free_listed(b, stream, on_stream);
    }
  }
  block* b = map_.erase(addr);
  if (b == nullptr) [[unlikely]]
    fail_invalid_free(ptr);
  free_listed(b, stream, on_stream);
}

inline void engine::free_listed(block* b, stream_t stream, bool on_stream) {
  stream_state& ss = *b->owner;
  bool asleep = false;
  {
    std::lock_guard<spinlock> lock(ss.lock);
    asleep = b->seg->asleep;
    const bool plain =
        !free_hooks_ && (!on_stream || stream == ss.stream) && b->used_on.empty() && !asleep;
    if (plain && free_block(ss, b, false)) [[likely]]
      return;
    b->freeing = true;
  }
  if (asleep) [[unlikely]]
    return free_asleep(b, on_stream ? stream : ss.stream);
  free_claimed(b, on_stream ? stream : ss.stream);
}

}  // namespace cachalot::detail
