// The thread cache's cold parts (detail/thread_cache.hpp): a lane hit or cache that crosses a
// stats ceiling (redone with every stream locked), draining the lanes back into their streams
// (stats, snapshots, growth, empty_cache, trim, the out-of-memory path), and giving a stream
// state its lanes.
#include <algorithm>
#include <atomic>
#include <iterator>
#include <unordered_map>

#include "detail/engine.hpp"

namespace cachalot::detail {

std::uint32_t thread_cache::next_slot() noexcept {
  static std::atomic<std::uint32_t> next{0};
  return next.fetch_add(1, std::memory_order_relaxed);
}

block* engine::tc_take_forced(tc_lane& l, pool_kind pool, std::size_t rounded,
                              std::size_t requested) {
  ceiling_lock all(*this, l);
  std::size_t unused = 0;
  block* b = l.take(pool, requested, true, &unused, [this, pool, rounded](std::size_t size) {
    return size >= rounded && !should_split_size(pool, size, rounded);
  });
  if (b != nullptr) b->released.store(false, std::memory_order_relaxed);
  return b;
}

bool engine::tc_borrow(stream_state& ss, tc_lane& me, pool_kind pool, std::size_t size,
                       std::size_t requested, bool alloc) {
  // Lanes of one stream rise and fall out of step (one thread's lane fills while another's
  // empties), so their ceilings cannot all cover their own maxima under an exact peak. Instead
  // of a rebalance with every lock held, `me` (locked) takes the room it lacks (and as much
  // again, for the next change) from another lane of its stream, or from the stream, that has
  // it: tried, never waited for, so lock order does not matter. False: none had enough.
  const auto p = static_cast<std::size_t>(pool);
  struct need {
    std::size_t q;
    std::uint64_t add;
  };
  const need alloc_needs[] = {
      {q_allocated, size}, {q_requested, requested}, {q_active, size}, {q_allocations, 1}};
  const need free_needs[] = {{q_inactive, size}};
  const need* needs = alloc ? alloc_needs : free_needs;
  const std::size_t n = alloc ? std::size(alloc_needs) : std::size(free_needs);
  const auto short_of = [&] {
    for (std::size_t i = 0; i < n; ++i) {
      if (me.stats.deficit(needs[i].q, p, needs[i].add) != 0) return true;
    }
    return false;
  };
  const auto ask = [&](stream_stats& donor) {
    for (std::size_t i = 0; i < n; ++i) {
      const std::uint64_t d = me.stats.deficit(needs[i].q, p, needs[i].add);
      if (d != 0) donor.give(needs[i].q, p, d + needs[i].add, me.stats);
    }
    return !short_of();
  };
  for (tc_lane& other : ss.tcache->lanes) {
    if (&other == &me || !other.lock.try_lock()) continue;
    const bool done = ask(other.stats);
    other.lock.unlock();
    if (done) return true;
  }
  if (!ss.lock.try_lock()) return false;
  const bool done = ask(ss.stats);
  ss.lock.unlock();
  return done;
}

void engine::tc_release(block* b) {
  // A block evicted from a lane (its free is counted by nobody now): freed on its own stream.
  map_.erase(b->addr);
  free_listed(b, b->owner->stream, true);
}

bool engine::tc_put_forced(tc_lane& l, block* b) {
  ceiling_lock all(*this, l);
  if (l.put(b, tc_capacity_, true) != tc_lane::put_result::done) return false;
  trace_free(b);
  return true;
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
  // This stream's lanes only: their blocks go back to the stream (its lock and theirs held).
  ceiling_lock all(*this, ss);
  bool any = false;
  for (tc_lane& l : ss.tcache->lanes) {
    if (l.filled.load(std::memory_order_acquire) == 0) continue;  // (a stale 0 only skips it)
    all.add(l);
    any |= l.drain([this, &ss](block* b) {
      map_.erase(b->addr);
      free_block(ss, b, true);  // unchecked: settled when `all` is released
    });
  }
  if (!any) return nullptr;
  bool unused = false;
  return take_cached(ss, pool, rounded, requested, true, &unused);
}

void engine::tc_view(const std::vector<const stream_state*>& list, memory_stats& s) const {
  // Under all_streams_lock. The counters already count a lane's block as free, but it keeps
  // its segment live and stays out of the free index: report what a drain would leave (which
  // snapshot() shows too), without draining, so that reading the stats changes nothing.
  std::unordered_map<const segment*, std::size_t> held;  // segment -> its blocks in lanes
  for (const stream_state* ss : list) {
    if (!ss->tcache) continue;
    for (const tc_lane& l : ss->tcache->lanes) {
      for (std::uint32_t i = 0; i < l.count; ++i) ++held[l.slots[i]->seg];
    }
  }
  const auto in_lane = [](const block* b) { return b->in_lane.load(std::memory_order_relaxed); };
  for (const auto& [seg, n] : held) {
    if (seg->live == n) {  // wholly free once drained: its bytes are not inactive-split
      const auto p = static_cast<std::size_t>(seg->pool);
      for (pool_stats* g : {&s.inactive_split_bytes}) {
        for (stat* st : {p == 0 ? &g->small : &g->large, &g->all}) {
          st->current -= seg->size;
          st->freed += seg->size;
        }
      }
    }
    // Free blocks: each run of free and lane blocks becomes one (runs never cross a hole).
    std::uint64_t runs = 0, free_blocks = 0, run = 0;
    for (const block* b = seg->first; b != nullptr; b = b->next) {
      const bool f = b->state == block_state::free;
      if (f || in_lane(b)) {
        free_blocks += f ? 1 : 0;
        if (run == 0) ++runs;
        run += b->size;
        s.largest_free_block = std::max<std::uint64_t>(s.largest_free_block, run);
      } else {
        run = 0;
      }
    }
    s.num_free_blocks = s.num_free_blocks + runs - free_blocks;
  }
}

void engine::tc_attach(stream_state& ss, pool_record& pool) {
  if (tc_on_ && pool.id == default_pool && !ss.tcache) {
    ss.tcache = std::make_unique<thread_cache>(&pool.peaks, &ledger_);
  }
}

}  // namespace cachalot::detail
