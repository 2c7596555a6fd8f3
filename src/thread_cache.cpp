// The thread cache's cold parts (detail/thread_cache.hpp): a lane hit or cache that crosses a
// stats ceiling (room borrowed from a sibling or the stream, else redone under a ceiling_lock of
// the lane's stream state), a stream allocation that crosses one (room lent by its lanes),
// eviction, draining lanes back into their streams (a growth drains only its own state's, under
// that state's ceiling_lock, and only if a lane holds a block; empty_cache, trim and the
// out-of-memory path drain every lane), the stats view, and giving a stream state its lanes. The
// segment marks (a segment lanes hold whole counted wholly free) are in thread_cache_marks.cpp.
#include <algorithm>
#include <atomic>
#include <iterator>
#include <unordered_set>
#include <utility>
#include <vector>

#include "detail/engine.hpp"

namespace cachalot::detail {

std::uint32_t thread_cache::next_slot() noexcept {
  static std::atomic<std::uint32_t> next{0};
  return next.fetch_add(1, std::memory_order_relaxed);
}

block* engine::tc_take_forced(tc_lane& l, pool_kind pool, std::size_t rounded,
                              std::size_t requested) {
  ceiling_lock all(*this, l);  // locks `l` too, after its stream state
  std::size_t unused = 0, unused_whole = 0;
  block* b = l.take(pool, requested, true, &unused, &unused_whole,
                    [this, pool, rounded](std::size_t size) {
                      return size >= rounded && !should_split_size(pool, size, rounded);
                    });
  if (b != nullptr) b->released.store(false, std::memory_order_relaxed);
  return b;
}

bool engine::tc_borrow(stream_state& ss, tc_lane& me, pool_kind pool, std::size_t size,
                       std::size_t requested, std::uint64_t inactive, bool alloc) {
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
  const need alloc_needs[] = {{q_allocated, size},
                              {q_requested, requested},
                              {q_active, size},
                              {q_allocations, 1},
                              {q_inactive, inactive}};  // (a marked segment split again)
  const need free_needs[] = {{q_inactive, inactive}};
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

block* engine::tc_take_lent(stream_state& ss, pool_kind pool, std::size_t rounded,
                            std::size_t requested) {
  // The lanes free what the stream allocates (a training step frees on its thread what the
  // stream handed out long before), so their slack is where the stream's next room lies: half
  // of it (the rest for the lane's own next hits) moves to the stream under both locks (lanes
  // tried: the stream's lock comes first), as tc_borrow moves it the other way, instead of a
  // ceiling_lock trip and a ledger pull. A lane not listed for these quantities has no slack.
  constexpr quantity_mask lent = free_mask | bit_of(q_inactive);
  std::lock_guard<spinlock> lock(ss.lock);
  bool moved = false;
  for (tc_lane& l : ss.tcache->lanes) {
    if (!l.used.load(std::memory_order_acquire) || !l.lock.try_lock()) continue;
    if ((l.listed & lent) == 0) {  // at its ceilings there (detail/peak_ledger.hpp)
      l.lock.unlock();
      continue;
    }
    for (std::size_t q = 0; q < quantity_count; ++q) {
      if ((lent & bit_of(q)) == 0) continue;
      for (std::size_t p = 0; p < pool_count; ++p) {
        const std::int64_t slack = l.stats.slack(q, p);
        if (slack > 0)
          moved |= l.stats.give(q, p, (static_cast<std::uint64_t>(slack) + 1) / 2, ss.stats) != 0;
      }
    }
    l.lock.unlock();
  }
  ss.sync();  // (lists the room it took with the peak ledger)
  if (!moved) return nullptr;
  bool over_ceiling = false;
  return take_cached(ss, pool, rounded, requested, false, &over_ceiling);
}

bool engine::tc_evict(stream_state& ss, tc_lane& l) {
  // The stream frees the evicted block while `l` is still locked, so that no reader (which
  // locks both) ever sees it counted by neither. The stream's lock is only tried: it is taken
  // before a lane's. Ceiling room follows the counts: the inactive bytes the lane no longer
  // counts go to the stream for its free, the allocated bytes the stream no longer counts go
  // to the lane (a sum of ceilings never changes, and no holder is left above its own).
  if (!ss.lock.try_lock()) return false;
  std::uint32_t at = 0;
  block* b = l.evict_oldest(&at);
  if (b != nullptr) {
    const auto p = static_cast<std::size_t>(b->seg->pool);
    const std::uint64_t moved = l.stats.give(q_inactive, p, b->size, ss.stats);
    // Its segment's last live block (unmarked: evict_oldest keeps a marked segment's last)
    // leaves the segment wholly free: counted through, so that cumulative totals never go back.
    const std::size_t through = b->seg->live == 1 ? b->size : 0;
    const auto addr = b->addr;  // free_block may merge `b` away
    if (free_block(ss, b, false, &l)) {
      ss.stats.count_through(q_inactive, p, through);
      map_.erase(addr);  // before the stream can hand it out again
      for (const std::size_t q : {q_allocated, q_requested, q_active, q_allocations}) {
        ss.stats.give(q, p, l.stats.deficit(q, p, 0), l.stats);
      }
    } else {  // (the room moved makes this unreachable; kept exact all the same)
      ss.stats.give(q_inactive, p, moved, l.stats);
      l.restore(b, at);
      b = nullptr;
    }
  }
  ss.lock.unlock();
  if (b != nullptr) l.count_eviction();  // (a lane that turns over with no hit goes cold)
  return b != nullptr;
}

bool engine::tc_put_forced(tc_lane& l, block* b) {
  ceiling_lock all(*this, l);
  if (l.put(b, tc_capacity_, true) != tc_lane::put_result::done) return false;
  trace_free(b);
  return true;
}

bool engine::tc_drain(stream_state& ss) {
  // `ss` and each of its lanes that holds blocks (seized) locked under the stats mutex.
  std::vector<block*> out;
  std::vector<std::pair<const segment*, std::size_t>> last;  // a marked segment, its block size
  // Marks first (their counts taken back, the owners' segments disowned), then every block,
  // each marked segment's marked block last: the stream's free of it leaves the segment
  // whole again as the mark counted, so that cumulative totals never go back.
  for (tc_lane& l : ss.tcache->lanes) {
    if (!l.seized) continue;  // (an unused lane holds nothing)
    for (std::uint32_t i = 0; i < l.count; ++i) {
      if (segment* seg = l.segs[i]; seg->lane_whole.load(std::memory_order_relaxed)) {
        seg->whole_lane->stats.remove_whole(seg->pool, seg->whole_size, seg->size);
        seg->lane_whole.store(false, std::memory_order_relaxed);
        last.emplace_back(seg, seg->whole_size);
      }
    }
    while (l.owned_count != 0) l.disown(l.owned[0]);
    l.drain(out);
  }
  for (const auto& [seg, size] : last) {
    const auto it = std::find_if(out.begin(), out.end(), [seg = seg, size = size](block* b) {
      return b->seg == seg && b->size == size;
    });
    if (it != out.end()) std::rotate(it, it + 1, out.end());  // (it is in a lane: found)
  }
  for (block* b : out) {
    map_.erase(b->addr);
    // The last block of a segment that was not marked (one being mapped or unmapped) leaves
    // it wholly free: counted through, so that cumulative totals never go back.
    const segment* seg = b->seg;
    const auto p = static_cast<std::size_t>(seg->pool);
    const bool marked =
        std::any_of(last.begin(), last.end(), [seg](const auto& m) { return m.first == seg; });
    const std::size_t through = seg->live == 1 && !marked ? b->size : 0;
    free_block(ss, b, true);  // unchecked: the lock settles the ceilings after
    ss.stats.count_through(q_inactive, p, through);
  }
  return !out.empty();
}

void engine::tc_flush() {
  if (!tc_on_) return;
  all_streams_lock all(*this);
  for (stream_state* ss : all.streams()) {
    if (ss->tcache) tc_drain(*ss);
  }
}

block* engine::tc_flush_and_take(stream_state& ss, pool_kind pool, std::size_t rounded,
                                 std::size_t requested) {
  // Only this state's lanes: a growth needs no other stream's blocks (a release across streams,
  // under pressure, drains them all: tc_flush). Lanes that hold no block have none to give:
  // read without their locks (a lane filled meanwhile is as if filled after this growth), so
  // that a growth with empty lanes takes no ceiling_lock.
  const auto& lanes = ss.tcache->lanes;
  if (std::none_of(lanes.begin(), lanes.end(), [](const tc_lane& l) {
        return l.filled.load(std::memory_order_relaxed) != 0;
      })) {
    return nullptr;
  }
  ceiling_lock all(*this, ss);
  if (!tc_drain(ss)) return nullptr;
  bool unused = false;
  return take_cached(ss, pool, rounded, requested, true, &unused);
}

void engine::tc_view(const std::vector<const stream_state*>& list, memory_stats& s) const {
  // Under all_streams_lock. The counters already count a lane's block as a drain would (and a
  // segment lanes hold whole as wholly free: settle_marks), but it keeps its segment live and
  // stays out of the free index: report the free blocks a drain would leave (which snapshot()
  // shows too), without draining, so that reading the stats changes nothing.
  std::unordered_set<const segment*> held;  // segments with blocks in lanes
  for (const stream_state* ss : list) {
    if (!ss->tcache) continue;
    for (const tc_lane& l : ss->tcache->lanes) {
      for (std::uint32_t i = 0; i < l.count; ++i) held.insert(l.segs[i]);
    }
  }
  // (Inactive-split bytes are a drain's already: a segment lanes hold whole is marked.)
  const auto in_lane = [](const block* b) { return b->in_lane.load(std::memory_order_relaxed); };
  for (const segment* seg : held) {
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
    ss.tcache = std::make_unique<thread_cache>(ss, &pool.peaks, &ledger_);
  }
}

}  // namespace cachalot::detail
