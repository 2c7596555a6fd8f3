// Expandable segments: release (the whole chunks of free blocks, anywhere in a segment,
// unmapped after the stream is synchronized; failed device calls undone exactly), empty
// segments returning their address ranges, and teardown. Growth and the structure operations
// are in expandable.cpp; the protocol in detail/expandable.hpp.
//
// Stats order, as for fixed segments: a release counts in the critical section that hides the
// memory (carves it into a busy span), before the device call; a failed call is undone with
// stream_stats::undo under every stream lock.
#include <algorithm>
#include <optional>

#include "detail/checks.hpp"
#include "detail/engine.hpp"
#include "detail/pool_sleep.hpp"

namespace cachalot::detail {

// --- release ---------------------------------------------------------------------------------

bool engine::vm_allowed(stream_t stream) {
  // The one place that asks whether unmapping is allowed for a stream's segments: not while
  // the stream, or any stream cachalot knows of, is captured into a CUDA graph.
  return !capture_underway() && !backend_->is_capturing(stream);
}

void engine::collect_spans(stream_state& ss, std::vector<release_candidate>& out,
                           std::size_t budget) const {
  // Under ss.lock. Only free blocks of at least one chunk can cover a whole chunk: from each
  // free index the largest, until their whole chunks reach `budget` bytes; then all of them
  // largest first (empty segments last).
  const std::size_t first = out.size();
  std::size_t found = 0;
  const auto add = [&](block* b) {
    if (found >= budget) return false;
    if (!b->seg->expandable()) return true;
    const std::uintptr_t lo = b->seg->chunk_up(b->addr);
    const std::uintptr_t hi = b->seg->chunk_down(b->addr + b->size);
    if (hi > lo) {
      out.push_back(release_candidate{&ss, b->seg, b, lo, hi - lo});
      found += hi - lo;
    }
    return true;
  };
  for (const free_index& index : ss.index) {
    found = 0;
    index.for_each_down(chunk_, add);
  }
  found = 0;
  ss.oversize.for_each_down(chunk_, add);
  std::stable_sort(
      out.begin() + static_cast<std::ptrdiff_t>(first), out.end(),
      [](const release_candidate& a, const release_candidate& b) { return a.bytes > b.bytes; });
  for (segment* seg = ss.segments; seg != nullptr; seg = seg->next) {
    if (seg->expandable() && seg->size == 0 && seg->busy == 0) {
      out.push_back(release_candidate{&ss, seg, nullptr, seg->base, 0});
    }
  }
}

std::size_t engine::pick_span(span_batches& spans, release_candidate c, std::size_t over) {
  // Only the chunks needed to get `over` bytes below, from the top of the free block.
  const std::size_t chunk = c.seg->chunk;
  const std::size_t take = std::min(c.bytes, chunks_for(over, chunk) * chunk);
  c.addr += c.bytes - take;
  c.bytes = take;
  auto it =
      std::find_if(spans.begin(), spans.end(), [&](const auto& s) { return s.first == c.ss; });
  if (it == spans.end()) it = spans.insert(spans.end(), {c.ss, {}});
  it->second.push_back(c);
  return take;
}

std::size_t engine::release_spans(stream_state& ss, const std::vector<release_candidate>& picks) {
  // Caller holds release_mutex_. No unmap while a capture may be under way: the fence keeps a
  // capture from being declared until the unmaps are done.
  capture_tracker::section fence(captures_);
  if (fence.underway()) return 0;
  // 1. Carve the spans and count the stats (decreases only).
  std::vector<unmap_span> spans;
  {
    std::lock_guard<spinlock> lock(ss.lock);
    for (const release_candidate& c : picks) {
      block* b = c.b;
      if (b == nullptr || b->seg != c.seg || b->state != block_state::free || b->addr > c.addr ||
          b->addr + b->size < c.addr + c.bytes) {
        continue;  // an empty segment, or the block changed since it was picked
      }
      segment* seg = c.seg;
      if (seg->lane_owner.load(std::memory_order_relaxed) != nullptr ||
          seg->lane_whole.load(std::memory_order_relaxed)) {
        continue;  // thread-cache lanes refilled it since the drain: its size stays (segment.hpp)
      }
      remove_free(ss, b);
      block* s = b;
      if (c.addr > b->addr) {
        s = cut_block(ss, b, c.addr - b->addr);
        insert_free(ss, b);
      }
      if (s->size > c.bytes) insert_free(ss, cut_block(ss, s, c.bytes));
      s->state = block_state::unmapped;
      s->busy = true;
      ++seg->busy;
      const bool live_zero = seg->live == 0;
      stats_delta d;
      d.d[q_reserved] = -static_cast<std::int64_t>(c.bytes);
      d.whole_free = live_zero ? -static_cast<std::int64_t>(c.bytes) : 0;
      ss.stats.apply(seg->pool, d.derive_inactive());
      ss.sync();
      seg->size -= c.bytes;
      spans.push_back(unmap_span{seg, s, live_zero});
    }
  }
  // 2. No queued work may still use the chunks: synchronize the stream, then unmap.
  std::exception_ptr error;
  std::vector<std::size_t> unmapped(spans.size(), 0);
  if (!spans.empty()) {
    try {
      sync_stream(ss.stream);
      for (std::size_t i = 0; i < spans.size(); ++i) {
        const block* s = spans[i].span;
        const std::size_t chunk = spans[i].seg->chunk;
        for (; unmapped[i] < s->size; unmapped[i] += chunk) {
          backend_->unmap_chunk(reinterpret_cast<void*>(s->addr + unmapped[i]), chunk);
        }
      }
    } catch (...) {
      error = std::current_exception();
    }
  }
  // 3. Unmapped spans become holes; what is still mapped becomes free again, stats undone.
  std::size_t released = 0, chunks = 0;
  bool restore = false;
  for (std::size_t i = 0; i < spans.size(); ++i) {
    released += unmapped[i];
    chunks += unmapped[i] / spans[i].seg->chunk;
    restore = restore || unmapped[i] != spans[i].span->size;
  }
  std::vector<segment*> empty;
  {
    std::optional<ceiling_lock> all;  // a restore raises the stats back
    std::unique_lock<spinlock> one(ss.lock, std::defer_lock);
    if (restore) {
      all.emplace(*this, ss);
    } else {
      one.lock();
    }
    for (std::size_t i = 0; i < spans.size(); ++i) restore_span(ss, spans[i], unmapped[i]);
    ss.stats.num_chunk_unmaps += chunks;
    empty = unlink_empty(ss);
    ss.sync();
  }
  release_room(*ss.pool, released);
  release_ranges(ss, empty);
  if (error) std::rethrow_exception(error);
  return released;
}

void engine::restore_span(stream_state& ss, const unmap_span& u, std::size_t unmapped) {
  // Under ss.lock; every stream lock where something stays mapped.
  segment* seg = u.seg;
  block* s = u.span;
  --seg->busy;
  if (unmapped == s->size) {
    add_hole(ss, s);
    return;
  }
  if (unmapped != 0) {
    block* rest = cut_block(ss, s, unmapped);
    add_hole(ss, s);
    s = rest;
  }
  const std::size_t bytes = s->size;
  stats_delta d;  // the part of the release's delta that did not happen
  d.d[q_reserved] = -static_cast<std::int64_t>(bytes);
  d.whole_free = u.live_zero ? -static_cast<std::int64_t>(bytes) : 0;
  ss.stats.undo(seg->pool, d.derive_inactive());
  if (const bool live_zero = seg->live == 0; live_zero != u.live_zero) {
    stats_delta c;  // the segment gained or lost its last live block meanwhile
    c.whole_free = live_zero ? static_cast<std::int64_t>(bytes) : -static_cast<std::int64_t>(bytes);
    ss.stats.apply(seg->pool, c.derive_inactive());
  }
  seg->size += bytes;
  s->busy = false;
  s->state = block_state::free;
  coalesce_free(ss, s);
}

std::vector<segment*> engine::unlink_empty(stream_state& ss) {
  // Under ss.lock: segments with nothing mapped and no span in flight leave the stats now;
  // their ranges are released after the lock (release_ranges).
  std::vector<segment*> empty;
  for (segment* seg = ss.segments; seg != nullptr;) {
    segment* next = seg->next;
    if (seg->expandable() && seg->size == 0 && seg->busy == 0) {
      ss.unlink(seg);
      stats_delta d;
      d.d[q_segments] = -1;
      ss.stats.apply(seg->pool, d);
      ++ss.stats.num_segment_frees;
      empty.push_back(seg);
    }
    seg = next;
  }
  return empty;
}

void engine::release_ranges(stream_state& ss, const std::vector<segment*>& empty) {
  std::exception_ptr error;
  for (segment* seg : empty) {
    try {
      backend_->release_address_range(reinterpret_cast<void*>(seg->base), seg->range_size);
    } catch (...) {
      ceiling_lock all(*this, ss);  // the segment count rises back
      stats_delta d;
      d.d[q_segments] = -1;
      ss.stats.undo(seg->pool, d);
      --ss.stats.num_segment_frees;
      ss.link(seg);
      if (!error) error = std::current_exception();
      continue;
    }
    {
      std::lock_guard<spinlock> lock(ss.lock);
      for (block* b = seg->first; b != nullptr;) {
        block* next = b->next;
        ss.nodes.release(b);
        b = next;
      }
    }
    delete seg;
  }
  if (error) std::rethrow_exception(error);
}

void engine::sync_stream(stream_t stream) {
  event_t e = acquire_event();
  try {
    backend_->record_event(e, stream);
    backend_->synchronize_event(e);
  } catch (...) {
    recycle_event(e);
    throw;
  }
  recycle_event(e);
  gstats_.num_syncs.fetch_add(1, std::memory_order_relaxed);
}

void engine::destroy_expandable(segment* seg) noexcept {
  // Teardown: unmap every mapped chunk, then release the range. Never throws.
  if (seg->asleep) return sleep_->destroy(seg);  // (only its held chunks are mapped)
  bool clean = true;
  for (const block* b = seg->first; b != nullptr;) {
    if (b->state == block_state::unmapped) {
      b = b->next;
      continue;
    }
    const std::uintptr_t lo = b->addr;
    while (b != nullptr && b->state != block_state::unmapped) b = b->next;
    const std::uintptr_t hi = b != nullptr ? b->addr : seg->end();
    for (std::uintptr_t a = lo; a < hi; a += seg->chunk) {
      try {
        backend_->unmap_chunk(reinterpret_cast<void*>(a), seg->chunk);
      } catch (...) {
        clean = false;
      }
    }
  }
  if (!clean) return;  // a range with chunks still mapped cannot be released
  try {
    backend_->release_address_range(reinterpret_cast<void*>(seg->base), seg->range_size);
  } catch (...) {
  }
}

std::string engine::mapped_note() const {
  // For the out-of-memory message: how much of the reserved memory is mapped chunks.
  std::size_t bytes = 0;
  all_streams_lock all(*this);
  for (const stream_state* ss : all.streams()) {
    for (const segment* seg = ss->segments; seg != nullptr; seg = seg->next) {
      if (seg->expandable()) bytes += seg->size;
    }
  }
  return fmt::format(" ({} of it mapped in expandable segments)", format_bytes(bytes));
}

}  // namespace cachalot::detail
