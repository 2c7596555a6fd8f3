// Deferred frees: a free that is not the plain case (another stream used the block, tracing, a
// stats ceiling crossed) claims its block and finishes here, at once or after events recorded
// on the other streams complete; and the pending queue those events are polled from.
//
// Invariants: a claimed block (`freeing`) is out of the pointer map and refuses record_stream,
// so no stream added by a racing record_stream is ever dropped; the trace's free line is
// written before the block can be handed out again; a pending block is reusable only after
// every one of its events completed, and one unfinished event never holds back the others;
// events are pooled (events_mutex_), never created on the steady-state path.
#include <algorithm>
#include <exception>

#include "detail/checks.hpp"
#include "detail/engine.hpp"

namespace cachalot::detail {

event_t engine::acquire_event() {
  {
    std::lock_guard<std::mutex> lock(events_mutex_);
    if (!free_events_.empty()) {
      event_t e = free_events_.back();
      free_events_.pop_back();
      return e;
    }
  }
  return backend_->create_event();
}

void engine::recycle_event(event_t e) noexcept {
  std::lock_guard<std::mutex> lock(events_mutex_);
  free_events_.push_back(e);
}

// A claimed block (out of the pointer map, `freeing` set under its stream lock, so that no
// record_stream can add a stream any more) is freed now or deferred. True if freed now.
bool engine::free_claimed(block* b, stream_t last_used) {
  stream_state& ss = *b->owner;
  std::vector<stream_t> used_on;
  {
    std::lock_guard<spinlock> lock(ss.lock);
    used_on.swap(b->used_on);
  }
  std::vector<stream_t> streams = used_on;
  if (last_used != ss.stream &&
      std::find(streams.begin(), streams.end(), last_used) == streams.end()) {
    streams.push_back(last_used);
  }
  if (streams.empty()) {
    trace_free(b);  // before the block can be handed out again: the trace is in ownership order
    release_claimed(b);
    if (cap_idle_) cap_idle(ss);
    return true;
  }
  defer_free(b, std::move(used_on), streams);
  return false;
}

// Frees a claimed block that waits for no event.
void engine::release_claimed(block* b) {
  stream_state& ss = *b->owner;
  {
    std::lock_guard<spinlock> lock(ss.lock);
    b->freeing = false;
    if (free_block(ss, b, false)) return;
    b->freeing = true;
  }
  ceiling_lock all(*this, ss);  // the stats crossed a ceiling: redo unchecked, then settle
  b->freeing = false;
  free_block(ss, b, true);
}

// Records one event on each of `streams` and makes the claimed block pending until all have
// completed. On failure the block is live again, with its streams, and nothing changed.
void engine::defer_free(block* b, std::vector<stream_t> used_on,
                        const std::vector<stream_t>& streams) {
  stream_state& ss = *b->owner;
  std::vector<event_t> events;
  std::vector<stream_t> unrecorded;
  try {
    // While a capture may be under way, an event recorded on a capturing stream would join the
    // capture (and could never be queried): record them once every capture ended.
    capture_tracker::section fence(captures_);
    bool later = fence.underway();
    for (std::size_t i = 0; i < streams.size() && !later; ++i) {
      if (backend_->is_capturing(streams[i])) {
        captures_.observe(backend_, streams[i]);
        later = true;
      }
    }
    if (later) {
      unrecorded = streams;
    } else {
      for (stream_t s : streams) {
        events.push_back(acquire_event());
        backend_->record_event(events.back(), s);
      }
    }
  } catch (...) {
    for (event_t e : events) recycle_event(e);
    {
      std::lock_guard<spinlock> lock(ss.lock);
      b->used_on = std::move(used_on);
      b->has_uses.store(!b->used_on.empty());
      b->freeing = false;
    }
    map_.insert(b->addr, b);   // the block stays allocated: nothing changed
    b->released.store(false);  // (after the insert: a free before it finds no block)
    throw;
  }
  trace_free(b);  // before the block is queued: once queued, a poller may hand it out
  {
    std::lock_guard<spinlock> lock(ss.lock);
    b->state = block_state::pending;
    b->freeing = false;
    stats_delta d;  // decreases only: never crosses a ceiling
    d.d[q_requested] = -static_cast<std::int64_t>(b->requested);
    d.d[q_allocated] = -static_cast<std::int64_t>(b->size);
    d.d[q_allocations] = -1;
    ss.stats.apply(b->seg->pool, d.derive_inactive());
    ss.sync();
    ++ss.stats.num_frees;
    ++ss.stats.num_deferred;
    ++ss.stats.num_pending;
  }
  std::lock_guard<std::mutex> lock(pending_mutex_);
  pending_.push_back(pending_free{b, std::move(events), std::move(unrecorded)});
  pending_count_.fetch_add(1, std::memory_order_release);
}

void engine::trace_free(const block* b) noexcept {
  if (tracer_) tracer_->on_free(reinterpret_cast<void*>(b->addr), b->requested, b->owner->stream);
}

void engine::poll_pending(bool wait) {
  std::vector<block*> ready;
  std::exception_ptr error;
  bool synced = false;
  {
    capture_tracker::section fence(captures_);
    if (fence.underway()) return;  // no event call while a capture may be under way
    std::lock_guard<std::mutex> lock(pending_mutex_);
    try {
      for (pending_free& p : pending_) {  // frees made during a capture: record their events now
        while (!p.unrecorded.empty()) {
          event_t e = acquire_event();
          try {
            backend_->record_event(e, p.unrecorded.back());
          } catch (...) {
            recycle_event(e);
            throw;
          }
          p.events.push_back(e);
          p.unrecorded.pop_back();
        }
      }
      for (std::size_t i = 0; i < pending_.size();) {
        std::vector<event_t>& events = pending_[i].events;
        for (std::size_t j = 0; j < events.size();) {
          bool done;
          if (wait) {
            backend_->synchronize_event(events[j]);
            synced = true;
            done = true;
          } else {
            done = backend_->query_event(events[j]);
          }
          if (done) {
            recycle_event(events[j]);
            events[j] = events.back();
            events.pop_back();
          } else {
            ++j;
          }
        }
        if (events.empty()) {
          ready.push_back(pending_[i].b);
          pending_[i] = std::move(pending_.back());
          pending_.pop_back();
          pending_count_.fetch_sub(1, std::memory_order_release);
        } else {
          ++i;
        }
      }
    } catch (...) {
      error = std::current_exception();
    }
    finishing_ += ready.size();
  }
  if (synced) gstats_.num_syncs.fetch_add(1, std::memory_order_relaxed);
  for (block* b : ready) finish_pending(b);  // never throws
  {
    // Blocks another poller took off the queue are not reusable until it has finished them: a
    // waiting poll (the out-of-memory retry, empty_cache) waits for that, so that it never
    // misses memory that is about to become free.
    std::unique_lock<std::mutex> lock(pending_mutex_);
    finishing_ -= ready.size();
    if (finishing_ == 0) {
      finished_.notify_all();
    } else if (wait) {
      finished_.wait(lock, [this] { return finishing_ == 0; });
    }
  }
  if (error) std::rethrow_exception(error);
}

void engine::finish_pending(block* b) noexcept {
  stream_state& ss = *b->owner;
  if (!caching_) {
    std::lock_guard<std::mutex> release_lock(release_mutex_);
    segment* seg = b->seg;
    complete_pending(ss, b);
    release_or_keep(ss, seg);
    return;
  }
  if (poison_) poison(b->addr, b->size);  // free from now on; nobody else reaches it yet
  complete_pending(ss, b);
  if (cap_idle_) cap_idle(ss);
}

void engine::complete_pending(stream_state& ss, block* b) {
  ceiling_lock all(*this, ss);  // inactive-split bytes may rise
  stats_delta d;
  d.d[q_active] = -static_cast<std::int64_t>(b->size);
  d.whole_free = static_cast<std::int64_t>(whole_after_free(b));
  ss.stats.apply(b->seg->pool, d.derive_inactive());
  --ss.stats.num_pending;
  segment* seg = b->seg;
  release_block(ss, b);
  if (tc_lane* l = seg->lane_owner.load(std::memory_order_relaxed)) l->after_free(seg);
}

}  // namespace cachalot::detail
