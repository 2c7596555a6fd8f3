// The thread cache's cold parts (detail/thread_cache.hpp): a lane hit or cache that crosses a
// stats ceiling (redone with every stream locked), draining the lanes back into their streams
// (stats, snapshots, growth, empty_cache, trim, the out-of-memory path), and giving a stream
// state its lanes.
#include <atomic>

#include "detail/engine.hpp"

namespace cachalot::detail {

std::uint32_t thread_cache::next_slot() noexcept {
  static std::atomic<std::uint32_t> next{0};
  return next.fetch_add(1, std::memory_order_relaxed);
}

block* engine::tc_take_forced(tc_lane& l, pool_kind pool, std::size_t rounded,
                              std::size_t requested) {
  all_streams_lock all(*this, &l);  // locks `l` too, as a lane of its stream state
  bool unused = false;
  block* b = l.take(pool, requested, true, &unused, [this, pool, rounded](std::size_t size) {
    return size >= rounded && !should_split_size(pool, size, rounded);
  });
  if (b != nullptr) b->released.store(false, std::memory_order_relaxed);
  return b;
}

bool engine::tc_put_forced(tc_lane& l, block* b) {
  all_streams_lock all(*this, &l);
  return l.put(b, tc_capacity_, true) == tc_lane::put_result::done;
}

bool engine::tc_flush_locked(const all_streams_lock& all, const stream_state* only) {
  bool any = false;
  for (stream_state* ss : all.streams()) {
    if (!ss->tcache || (only != nullptr && ss != only)) continue;
    for (tc_lane& l : ss->tcache->lanes) {
      any |= l.drain([this, ss](block* b) {
        map_.erase(b->addr);
        free_block(*ss, b, true);  // every stream is locked: ceilings are set again after
      });
    }
  }
  return any;
}

void engine::tc_flush() {
  if (!tc_on_) return;
  all_streams_lock all(*this);
  tc_flush_locked(all, nullptr);
}

block* engine::tc_flush_and_take(stream_state& ss, pool_kind pool, std::size_t rounded,
                                 std::size_t requested) {
  all_streams_lock all(*this, &ss);
  if (!tc_flush_locked(all, &ss)) return nullptr;
  bool unused = false;
  return take_cached(ss, pool, rounded, requested, true, &unused);
}

void engine::tc_attach(stream_state& ss, pool_record& pool) {
  if (tc_on_ && pool.id == default_pool && !ss.tcache) {
    ss.tcache = std::make_unique<thread_cache>(&pool.peaks);
  }
}

}  // namespace cachalot::detail
