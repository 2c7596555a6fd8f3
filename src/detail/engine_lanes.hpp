// The engine's inline thread-cache paths (detail/thread_cache.hpp): a hit in the calling
// thread's lane, and a free into it. Cold parts (a ceiling crossed, draining, the stats view)
// are in thread_cache.cpp. Included by detail/engine.hpp after the engine class.
#pragma once

#include "detail/engine.hpp"

namespace cachalot::detail {

/// A block of lane `l` (of `ss`) for `rounded` bytes, or nullptr.
inline block* engine::tc_take(stream_state& ss, tc_lane& l, pool_kind pool, std::size_t rounded,
                              std::size_t requested) {
  const auto fits = [this, pool, rounded](std::size_t size) {
    return size >= rounded && !should_split_size(pool, size, rounded);
  };
  std::size_t over_ceiling = 0;  // the size of a block whose stats crossed a ceiling
  std::size_t over_whole = 0;    // and the wholly free segment bytes it would have taken
  // (The cold period counts down before the empty check: a lane drained while cold comes back.)
  if (l.skip_cold() || l.filled.load(std::memory_order_relaxed) == 0 || !l.lock.try_lock())
      [[unlikely]]
    return nullptr;  // another thread of this lane's slot is in it: the stream serves
  block* b = l.take(pool, requested, false, &over_ceiling, &over_whole, fits);
  if (over_ceiling != 0 &&
      tc_borrow(ss, l, pool, over_ceiling, requested,
                over_whole > over_ceiling ? over_whole - over_ceiling : 0, true)) [[unlikely]]
    b = l.take(pool, requested, false, &over_ceiling, &over_whole, fits);
  if (b != nullptr) [[likely]]
    b->released.store(false, std::memory_order_relaxed);
  l.sync();  // (lists its slack with the peak ledger, as a stream does: rarely anything)
  l.lock.unlock();
  if (b != nullptr || over_ceiling == 0) return b;
  return tc_take_forced(l, pool, rounded, requested);
}

/// Caches `b` (won by this free) in the calling thread's lane if it may; false: free it the
/// ordinary way.
inline bool engine::tc_put(block* b, stream_t stream, bool on_stream) {
  stream_state& ss = *b->owner;  // (b->cacheable: ss has lanes, b fits one)
  if ((on_stream && stream != ss.stream) || b->has_uses.load()) return false;
  tc_lane& l = ss.tcache->mine();
  if (l.cold.load(std::memory_order_relaxed) != 0 || !l.lock.try_lock()) [[unlikely]]
    return false;
  tc_lane::put_result r = l.put(b, tc_capacity_, false);
  // Full: the lane's oldest block makes room, freed on its stream before the lane is unlocked
  // (tracing too: the trace has that block's free from its put, and tc_evict traces nothing,
  // so a recorded run caches what an unrecorded one does and its replay matches).
  bool evicted = false;
  if (r == tc_lane::put_result::full && tc_evict(ss, l)) [[unlikely]] {
    evicted = true;
    r = l.put(b, tc_capacity_, false);
  }
  if (r == tc_lane::put_result::over_ceiling &&
      tc_borrow(ss, l, b->seg->pool, b->size, b->requested, b->size, false)) [[unlikely]]
    r = l.put(b, tc_capacity_, false);
  if (tracer_ && r == tc_lane::put_result::done) [[unlikely]]
    trace_free(b);  // before the lane can hand it out: the trace is in ownership order
  l.sync();         // (its slack and marks_bit, once between two pulls)
  l.lock.unlock();
  if (evicted) [[unlikely]] {
    if (auto* hook = tc_evict_hook.load(std::memory_order_acquire)) hook(tc_evict_hook_arg.load());
  }
  if (r == tc_lane::put_result::done) [[likely]]
    return true;
  return r == tc_lane::put_result::over_ceiling && tc_put_forced(l, b);
}

}  // namespace cachalot::detail
