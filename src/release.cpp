// Releasing cached memory: the release pass behind empty_cache, trim, a growth near the limit
// (the release policy's advice), the out-of-memory sequence (pool_reclaim.cpp), max_cached and
// released pools; and returning one segment to the device.
//
// A pass visits pools in the order it is given; in each it returns the largest idle fixed
// segment of the pool's idle index (detail/idle_index.hpp) while the pass's target or wanted
// bytes are not reached, then, with expandable segments, the largest free spans of the states
// listed for release (the requesting stream's first). Nothing walks the segments of a state or
// every state: a pass costs amortized O(1) per segment it returns (and O(1) per state with
// expandable segments it visits). Thread-cache lanes are not drained here: callers that need
// their blocks back (empty_cache, trim, the out-of-memory path) drain them first.
#include <algorithm>

#include "detail/checks.hpp"
#include "detail/engine.hpp"

namespace cachalot::detail {

void engine::note_idle(stream_state& ss, segment* seg) {
  // Under ss.lock; the pool's idle lock is a leaf.
  pool_record& p = *ss.pool;
  std::lock_guard<spinlock> lock(p.idle_lock);
  p.idle.insert(seg);
}

void engine::unindex(stream_state& ss, segment* seg) {
  // Under ss.lock.
  if (!seg->indexed) return;
  pool_record& p = *ss.pool;
  std::lock_guard<spinlock> lock(p.idle_lock);
  p.idle.remove(seg);
}

void engine::list_for_release(stream_state& ss) {
  // Under ss.lock (idle_mutex_ is a leaf). Never allocates: the list has room for every state
  // (state_of reserves it) and holds a state at most once.
  std::lock_guard<std::mutex> lock(idle_mutex_);
  release_states_.push_back(&ss);
  ss.release_listed = true;
}

bool engine::release_segment(stream_state& ss, segment* seg) {
  // Caller holds release_mutex_, so `seg` cannot be deleted under us. The stats drop in the
  // critical section that unlinks the segment, before the device takes it back: stats and
  // snapshot always agree, and no stats() ever counts memory the device may already have
  // handed to another segment. (Room under the memory limit is returned only afterwards.)
  // A graph pool keeps its segments until released; no segment is freed while a capture may
  // be under way (cudaFree synchronizes, which a capture forbids): it stays cached until then.
  if (ss.pool->pinned()) return false;
  capture_tracker::section fence(captures_);
  if (fence.underway()) return false;
  stats_delta d;  // decreases only (inactive-split bytes are unchanged)
  d.d[q_reserved] = -static_cast<std::int64_t>(seg->size);
  d.d[q_segments] = -1;
  d.whole_free = -static_cast<std::int64_t>(seg->size);
  d.derive_inactive();
  block* b = nullptr;
  {
    std::lock_guard<spinlock> lock(ss.lock);
    b = seg->first;
    if (b->state != block_state::free || !b->whole()) return false;
    remove_free(ss, b);
    unindex(ss, seg);
    ss.unlink(seg);
    ss.stats.apply(seg->pool, d);
    ss.sync();
    ++ss.stats.num_segment_frees;
  }
  bool to_reserve = false;
  try {
    return_segment(*ss.pool, seg->base, seg->size, &to_reserve);  // to the reserve or device
  } catch (...) {
    ceiling_lock all(*this, ss);  // reserved rises back: the peaks may need raising
    ss.stats.undo(seg->pool, d);
    --ss.stats.num_segment_frees;
    ss.link(seg);
    insert_free(ss, b);
    note_idle(ss, seg);
    throw;
  }
  {
    std::lock_guard<spinlock> lock(ss.lock);
    ss.nodes.release(b);
  }
  if (!to_reserve) release_room(*ss.pool, seg->size);  // (the reserve's: return_segment)
  delete seg;
  return true;
}

void engine::release_or_keep(stream_state& ss, segment* seg) noexcept {
  // Pass-through mode: a segment the device refuses to take back stays cached (and counted as
  // reserved) until empty_cache or the out-of-memory path releases it.
  try {
    release_segment(ss, seg);
  } catch (...) {
  }
}

std::size_t engine::release_pass(const std::vector<pool_record*>& from, stream_state* first,
                                 release_bounds& bounds) {
  // Caller holds release_mutex_ (entries leave release_states_ only here).
  std::vector<stream_state*> listed;
  {
    std::lock_guard<std::mutex> lock(idle_mutex_);
    listed = release_states_;
  }
  std::size_t released = 0;
  std::size_t picked = 0;  // bytes of spans picked, unmapped at the end (one sync per stream)
  span_batches batches;
  std::vector<release_candidate> spans;
  const auto expected = [&] { return gstats_.committed() - picked; };
  const auto done = [&] {
    return (bounds.target != 0 && expected() <= bounds.target) ||
           (bounds.want != 0 && released + picked >= bounds.want);
  };
  // What may go from `ss` while its pool keeps its guarantee, of `bytes` wanted.
  const auto room = [&](const stream_state& ss, std::size_t bytes) {
    if (!bounds.above_guarantee) return bytes;
    const pool_record& q = *ss.pool;
    const std::size_t held = q.committed.load(std::memory_order_relaxed);
    return held > q.options.guarantee ? std::min(bytes, held - q.options.guarantee) : 0;
  };
  std::vector<stream_state*> drained;  // listed states found with no expandable segment
  // Idle fixed segments of pool `q`, largest first.
  const auto idle = [&](pool_record& q) {
    while (!done()) {
      segment* seg = nullptr;
      {
        std::lock_guard<spinlock> lock(q.idle_lock);
        seg = q.idle.top();
      }
      if (seg == nullptr) return;
      stream_state& ss = *seg->owner;  // (segments are deleted only under release_mutex_)
      std::size_t bytes = 0;
      {
        std::lock_guard<spinlock> lock(ss.lock);
        if (!seg->indexed) continue;  // taken out meanwhile
        if (seg->live != 0) {         // in use again since it entered
          unindex(ss, seg);
          continue;
        }
        bytes = seg->size;
      }
      if (room(ss, bytes) != bytes) return;
      if (!release_segment(ss, seg)) {
        if (capture_underway()) return;  // nothing goes back while a capture may be under way
        continue;                        // reused meanwhile: an entry in use now
      }
      released += bytes;
      ++bounds.syncs;  // (a segment free synchronizes the device)
      if (bounds.history) policy_->on_released(bytes);
    }
  };
  const auto visit = [&](stream_state& ss) {
    if (done() || ss.pool->pinned() || !vm_allowed(ss.stream)) return;
    std::size_t over = SIZE_MAX;  // spans: only the chunks still needed
    if (bounds.want != 0) over = bounds.want - released - picked;
    if (bounds.target != 0) over = std::min(over, expected() - bounds.target);
    over = room(ss, over);
    spans.clear();
    {
      std::lock_guard<spinlock> lock(ss.lock);
      if (ss.ranges == 0) {
        drained.push_back(&ss);
        return;
      }
      collect_spans(ss, spans, over);
    }
    for (const release_candidate& c : spans) {
      if (c.bytes == 0) {
        pick_span(batches, c, 0);  // an empty segment: its range goes back in any case
      } else if (over != 0) {
        const std::size_t took = pick_span(batches, c, std::min(over, c.bytes));
        picked += took;
        over -= std::min(over, took);
      }
    }
  };
  for (pool_record* q : from) {
    idle(*q);
    if (!expandable_) continue;
    if (first != nullptr && first->pool == q && !done()) visit(*first);
    for (stream_state* ss : listed) {
      if (done()) break;
      if (ss != first && ss->pool == q) visit(*ss);
    }
    if (done()) break;
  }
  for (auto& [ss, picks] : batches) {
    const std::size_t n = release_spans(*ss, picks);
    released += n;
    if (n != 0) ++bounds.syncs;  // (the stream was synchronized before its unmaps)
    if (bounds.history && n != 0) policy_->on_released(n);
  }
  // States with no expandable segment left leave the list (a new one lists them again).
  for (stream_state* ss : drained) {
    std::lock_guard<spinlock> lock(ss->lock);
    if (ss->ranges != 0) continue;
    std::lock_guard<std::mutex> idle_lock(idle_mutex_);
    const auto it = std::find(release_states_.begin(), release_states_.end(), ss);
    if (it != release_states_.end()) {
      *it = release_states_.back();
      release_states_.pop_back();
    }
    ss->release_listed = false;
  }
  return released;
}

std::size_t engine::release_free_segments(const std::vector<pool_record*>& from,
                                          bool above_guarantee, std::size_t target,
                                          std::size_t want, stream_state* first) {
  if (from.empty()) return 0;
  std::lock_guard<std::mutex> release_lock(release_mutex_);
  release_bounds b;
  b.target = target;
  b.want = want;
  b.above_guarantee = above_guarantee;
  const std::size_t released = release_pass(from, first, b);
  if (released != 0) gstats_.num_flushes.fetch_add(1, std::memory_order_relaxed);
  return released;
}

std::size_t engine::release_cached(std::size_t target_reserved, bool largest_first) {
  // Every pool that may give (graph pools keep theirs). Lanes give their blocks back, so that
  // their segments can be wholly free: first for empty_cache; for a target, only if what is
  // idle without them does not reach it (a drain locks every stream).
  std::lock_guard<std::mutex> release_lock(release_mutex_);
  if (!largest_first) tc_flush();
  std::vector<pool_record*> from;
  {
    std::shared_lock<std::shared_mutex> lock(registry_mutex_);
    for (const auto& q : pools_) {
      if (!q->retired && !q->pinned()) from.push_back(q.get());
    }
  }
  release_bounds b;
  b.target = target_reserved;
  std::size_t released = release_pass(from, nullptr, b);
  if (largest_first && tc_on_ && gstats_.committed() > target_reserved) {
    tc_flush();
    released += release_pass(from, nullptr, b);
  }
  // A pass towards a target (trim) that found nothing to release is no flush.
  if (released != 0 || !largest_first) {
    gstats_.num_flushes.fetch_add(1, std::memory_order_relaxed);
  }
  return released;
}

void engine::empty_cache() {
  poll_pending(true);
  release_cached(0, false);
  if (draining_.load(std::memory_order_acquire) != 0) drain_released();
}

std::size_t engine::trim(std::size_t target_reserved_bytes) {
  process_events();
  const std::size_t drained = draining_.load(std::memory_order_acquire) != 0 ? drain_released() : 0;
  if (gstats_.committed() <= target_reserved_bytes) return drained;
  return drained + release_cached(target_reserved_bytes, true);
}

}  // namespace cachalot::detail
