// Expandable segments (config expandable_segments:1): the structure operations on their blocks
// and holes, and growth by mapping chunks (release and teardown: expandable_release.cpp). The
// protocol and the locking are described in detail/expandable.hpp; the segment record in
// detail/segment.hpp.
//
// Stats: reserved bytes are mapped bytes; a segment counts once, whatever its chunks, from the
// growth that links it (its first mapping) to the release pass that finds it with nothing
// mapped and returns its address range; a new range that got nothing mapped counts as made and
// freed in one critical section, before it is returned. Its free bytes are inactive-split while it
// holds a live block. Order of device calls and stats, as for fixed segments: a growth maps first
// and counts in the critical section that makes the memory visible; a release counts in the
// critical section that hides the memory, before the device call, and a failed call is undone
// with stream_stats::undo under every stream lock.
#include <algorithm>
#include <optional>

#include "detail/checks.hpp"
#include "detail/engine.hpp"

namespace cachalot::detail {
namespace {

bool is_hole(const block* b) noexcept {
  return b != nullptr && b->state == block_state::unmapped && !b->busy;
}

/// Free bytes a neighbour of a hole adds to a block mapped next to it (0: none).
std::size_t free_bytes(const block* b, std::size_t rounded, std::size_t hole,
                       std::size_t max_split) noexcept {
  if (b == nullptr || b->state != block_state::free) return 0;
  // A block grown to max_split_size would be oversize: never split, refused to smaller requests.
  if (rounded < max_split && b->size + hole >= max_split) return 0;
  return b->size;
}

struct placement {
  block* hole = nullptr;
  std::uintptr_t addr = 0;
  std::size_t chunks = 0;
};

/// Considers mapping `chunks` chunks at `addr`: fewer chunks win, then the lower address.
void consider(placement& best, block* hole, std::uintptr_t addr, std::size_t chunks,
              std::size_t hole_chunks) {
  if (chunks == 0 || chunks > hole_chunks) return;
  if (best.hole == nullptr || chunks < best.chunks || (chunks == best.chunks && addr < best.addr)) {
    best = placement{hole, addr, chunks};
  }
}

}  // namespace

// --- structure operations (under the owner's lock) -------------------------------------------

block* add_hole(stream_state& ss, block* h) {
  segment& seg = *h->seg;
  h->state = block_state::unmapped;
  h->busy = false;
  if (is_hole(h->next)) {
    seg.holes.erase(h->next->addr);
    absorb_next(ss, h);
  }
  if (is_hole(h->prev)) {
    block* p = h->prev;
    seg.holes.erase(p->addr);
    absorb_next(ss, p);
    h = p;
  }
  seg.holes.emplace(h->addr, h);
  return h;
}

block* carve_hole(stream_state& ss, block* h, std::uintptr_t addr, std::size_t bytes) {
  segment& seg = *h->seg;
  seg.holes.erase(h->addr);
  block* s = h;
  if (addr > h->addr) {
    s = cut_block(ss, h, addr - h->addr);
    seg.holes.emplace(h->addr, h);
  }
  if (s->size > bytes) {
    block* t = cut_block(ss, s, bytes);
    seg.holes.emplace(t->addr, t);
  }
  s->busy = true;
  ++seg.busy;
  return s;
}

growth_span plan_growth(stream_state& ss, std::size_t band, std::size_t rounded, std::size_t chunk,
                        std::size_t max_split, bool neighbours) {
  placement best;
  for (segment* seg = ss.segments; seg != nullptr; seg = seg->next) {
    if (!seg->expandable() || seg->band != band) continue;
    for (const auto& [addr, h] : seg->holes) {
      const std::size_t hole_chunks = h->size / chunk;
      const std::size_t lf = neighbours ? free_bytes(h->prev, rounded, h->size, max_split) : 0;
      const std::size_t nf = neighbours ? free_bytes(h->next, rounded, h->size, max_split) : 0;
      // Extend the free block below (or start a block at the hole's start).
      consider(best, h, addr, chunks_for(rounded > lf ? rounded - lf : 1, chunk), hole_chunks);
      // Extend the free block above downwards.
      const std::size_t kb = chunks_for(rounded > nf ? rounded - nf : 1, chunk);
      if (kb <= hole_chunks) consider(best, h, addr + h->size - kb * chunk, kb, hole_chunks);
      // Fill the hole, joining both neighbours.
      if (lf + h->size + nf >= rounded) consider(best, h, addr, hole_chunks, hole_chunks);
      if (best.chunks == 1) break;  // nothing maps fewer
    }
    if (best.chunks == 1) break;
  }
  if (best.hole == nullptr) return {};
  return growth_span{best.hole->seg, carve_hole(ss, best.hole, best.addr, best.chunks * chunk),
                     false};
}

// --- growth ----------------------------------------------------------------------------------

std::size_t engine::growth_bytes(pool_kind pool, std::size_t rounded,
                                 std::size_t seg_size) const noexcept {
  const std::size_t chunk = chunk_of(pool);
  return expandable_ ? chunks_for(rounded, chunk) * chunk : seg_size;
}

block* engine::grow_memory(stream_state& ss, pool_kind pool, std::size_t rounded,
                           std::size_t requested, std::size_t seg_size, refusal* why) {
  if (expandable_) {
    bool no_space = false;
    block* b = grow_expandable(ss, pool, rounded, requested, &no_space, why);
    if (!no_space) return b;
    // No address range could be reserved (address space exhausted): a fixed segment serves.
  }
  if (void* base = grow(seg_size, ss.stream, *ss.pool, false, why)) {
    return add_segment(ss, pool, base, seg_size, rounded, requested);
  }
  return nullptr;
}

block* engine::grow_expandable(stream_state& ss, pool_kind pool, std::size_t rounded,
                               std::size_t requested, bool* no_space, refusal* why) {
  // No virtual-memory call while a CUDA graph capture may be under way anywhere (a failed map
  // is undone by an unmap, which a capture forbids): a fixed segment serves meanwhile.
  if (capture_underway()) {
    *no_space = true;
    return nullptr;
  }
  const std::size_t wanted = band_of(pool, rounded);
  const std::size_t chunk = chunk_of(pool);
  for (int attempt = 0;; ++attempt) {
    growth_span g;
    std::size_t band = 0;
    {
      std::lock_guard<spinlock> lock(ss.lock);
      band = growth_band(ss, wanted);
      g = plan_growth(ss, band, rounded, chunk, max_split_size_, attempt < 2);
    }
    if (g.seg == nullptr) {
      g = new_expandable(ss, pool, band, chunks_for(rounded, chunk) * chunk);
      if (g.seg == nullptr) {
        *no_space = true;
        return nullptr;
      }
    }
    const std::size_t want = g.span->size;
    std::size_t mapped = 0;
    std::uint64_t maps = 0, unmaps = 0;
    std::exception_ptr error;
    refusal r = device_has(want, chunk) ? reserve_room(*ss.pool, want) : refusal::device;
    if (r == refusal::none) {
      mapped = map_span(g.span, maps, unmaps, error);
      release_room(*ss.pool, want - mapped);
      if (mapped != want) r = refusal::device;
    }
    if (mapped != 0 && poison_) poison(g.span->addr, mapped);  // still invisible to others
    block* b = nullptr;
    {
      ceiling_lock all(*this, ss);
      block* m = attach(ss, g, mapped, maps, unmaps);
      if (mapped == want) {
        bool unused = false;
        b = m->size >= rounded ? claim(ss, m, pool, rounded, requested, true, &unused)
                               : take_cached(ss, pool, rounded, requested, true, &unused);
      }
    }
    if (g.fresh && mapped == 0) drop_fresh(ss, g.seg);
    if (error) std::rethrow_exception(error);
    if (mapped != want) {  // out of memory (a limit or the device)
      *why = r;
      return nullptr;
    }
    policy_->on_growth(want);
    if (b != nullptr) return b;
    // Another thread of this stream took the free neighbour this growth extended: plan again
    // (from the third attempt on, without counting on neighbours).
  }
}

growth_span engine::new_expandable(stream_state& ss, pool_kind pool, std::size_t band,
                                   std::size_t bytes) {
  // The range spans the device (or the memory limit); where the address space is short, half
  // as much, down to what the request needs.
  const std::size_t chunk = chunk_of(pool);
  std::size_t size = std::max(chunks_for(range_bytes_, chunk) * chunk, bytes);
  void* base = nullptr;
  for (;;) {
    base = backend_->reserve_address_range(size);
    if (base != nullptr || size == bytes) break;
    size = std::max(bytes, chunks_for(size / 2, chunk) * chunk);
  }
  if (base == nullptr) return {};
  auto seg = std::make_unique<segment>();
  seg->kind = segment_kind::expandable;
  seg->base = reinterpret_cast<std::uintptr_t>(base);
  seg->range_size = size;
  seg->chunk = chunk;
  seg->pool = pool;
  seg->band = static_cast<std::uint8_t>(band);
  seg->owner = &ss;
  std::lock_guard<spinlock> lock(ss.lock);
  block* whole = ss.nodes.acquire(&ss);
  whole->addr = seg->base;
  whole->size = size;
  whole->seg = seg.get();
  whole->state = block_state::unmapped;
  seg->first = whole;
  seg->holes.emplace(whole->addr, whole);
  block* span = carve_hole(ss, whole, seg->base, bytes);
  return growth_span{seg.release(), span, true};
}

std::size_t engine::map_span(const block* span, std::uint64_t& maps, std::uint64_t& unmaps,
                             std::exception_ptr& error) {
  // One map_chunk per chunk, so that any chunk can be unmapped on its own later. On failure
  // the chunks mapped so far are unmapped again; what cannot be (a failed unmap) stays mapped
  // and is kept as a free block.
  const std::uintptr_t addr = span->addr;
  const std::size_t chunk = span->seg->chunk;
  std::size_t done = 0;
  try {
    while (done < span->size && backend_->map_chunk(reinterpret_cast<void*>(addr + done), chunk)) {
      done += chunk;
      ++maps;
    }
  } catch (...) {
    error = std::current_exception();
  }
  if (done == span->size) return done;
  try {
    for (; done != 0; done -= chunk) {
      backend_->unmap_chunk(reinterpret_cast<void*>(addr + done - chunk), chunk);
      ++unmaps;
    }
  } catch (...) {
    if (!error) error = std::current_exception();
  }
  return done;
}

block* engine::attach(stream_state& ss, const growth_span& g, std::size_t mapped,
                      std::uint64_t maps, std::uint64_t unmaps) {
  // Under a ceiling_lock: reserved bytes (and a new segment) may raise the peaks.
  segment* seg = g.seg;
  block* s = g.span;
  ss.stats.num_chunk_maps += maps;
  ss.stats.num_chunk_unmaps += unmaps;
  --seg->busy;
  stats_delta d;
  if (g.fresh) {  // its range was reserved: a segment made
    ++ss.stats.num_segment_allocs;
    d.d[q_segments] = 1;
    if (mapped != 0) {
      ss.link(seg);
      if (!ss.release_listed) list_for_release(ss);  // its spans are for release passes
    } else {  // nothing mapped: it goes back at once (drop_fresh), its free counted with it
      stats_delta gone;
      gone.d[q_segments] = -1;
      ss.stats.apply(seg->pool, gone);
      ++ss.stats.num_segment_frees;
    }
  }
  if (mapped < s->size) add_hole(ss, mapped == 0 ? s : cut_block(ss, s, mapped));
  if (mapped != 0) {
    s->busy = false;
    s->state = block_state::free;
    d.d[q_reserved] = static_cast<std::int64_t>(mapped);
    // (A segment thread-cache lanes hold whole is wholly free too: segment.hpp.)
    const bool whole = seg->live == 0 || seg->lane_whole.load(std::memory_order_relaxed);
    d.whole_free = whole ? static_cast<std::int64_t>(mapped) : 0;
    seg->size += mapped;
  }
  ss.stats.apply(seg->pool, d.derive_inactive());
  return mapped == 0 ? nullptr : coalesce_free(ss, s);
}

void engine::drop_fresh(stream_state& ss, segment* seg) {
  // A new segment that got no chunk mapped was never linked, and attach counted it made and
  // freed in one critical section: its range goes back now. If the device refuses, the free is
  // undone and the segment linked empty, for a later release pass to return.
  try {
    backend_->release_address_range(reinterpret_cast<void*>(seg->base), seg->range_size);
  } catch (...) {
    ceiling_lock all(*this, ss);
    ss.link(seg);
    if (!ss.release_listed) list_for_release(ss);
    stats_delta d;
    d.d[q_segments] = -1;
    ss.stats.undo(seg->pool, d);
    --ss.stats.num_segment_frees;
    throw;
  }
  std::lock_guard<spinlock> lock(ss.lock);
  for (block* b = seg->first; b != nullptr;) {
    block* next = b->next;
    ss.nodes.release(b);
    b = next;
  }
  delete seg;
}

bool engine::device_has(std::size_t bytes, std::size_t chunk) {
  // Mapping chunk by chunk into a device that cannot hold them all would map and unmap them
  // again for nothing: ask first when more than one chunk is needed.
  if (bytes <= chunk) return true;
  try {
    return backend_->memory_info().free >= bytes;
  } catch (...) {
    return true;  // the mapping itself will tell
  }
}

}  // namespace cachalot::detail
