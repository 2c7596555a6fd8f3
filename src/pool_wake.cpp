// Wake of sleeping tenant pools (detail/pool_sleep.hpp has the protocol): the chunks to map,
// the mapping with the engine's reclaim order under pressure, the copies back from the host,
// and thaw, which turns asleep segments into awake ones (also when a sleep is undone).
#include <algorithm>
#include <exception>
#include <optional>

#include "cachalot/errors.hpp"
#include "detail/checks.hpp"
#include "detail/device_clock.hpp"
#include "detail/engine.hpp"
#include "detail/pool_sleep.hpp"

namespace cachalot::detail {
namespace {

/// The union of two sorted lists of disjoint spans, sorted, adjacent spans joined.
std::vector<address_span> merged(std::vector<address_span> a, const std::vector<address_span>& b) {
  a.insert(a.end(), b.begin(), b.end());
  std::sort(a.begin(), a.end(),
            [](const address_span& x, const address_span& y) { return x.lo < y.lo; });
  std::vector<address_span> out;
  for (const address_span& s : a) {
    if (!out.empty() && out.back().hi >= s.lo) {
      out.back().hi = std::max(out.back().hi, s.hi);
    } else {
      out.push_back(s);
    }
  }
  return out;
}

bool covers(const std::vector<address_span>& spans, std::uintptr_t at) noexcept {
  return std::any_of(spans.begin(), spans.end(),
                     [at](const address_span& s) { return at >= s.lo && at < s.hi; });
}

}  // namespace

bool sleeper::wake(pool_id pool) {
  pool_record& p = pool_of_id(pool);
  if (!begin(p, phase::asleep, phase::waking, true)) return false;
  const std::uint64_t t0 = device_clock::thread_ns();
  std::size_t mapped = 0;
  std::exception_ptr error;
  try {
    wake_pool(p, &mapped);
  } catch (...) {
    error = std::current_exception();
  }
  {
    std::lock_guard<std::mutex> lock(mutex_);
    sleep_stats& f = record(p.id).figures;
    f.wake_ns += device_clock::thread_ns() - t0;
    f.bytes_woken += mapped;
    ++(error ? f.num_failed_wakes : f.num_wakes);
  }
  finish(p, error ? phase::asleep : phase::awake);
  if (error) std::rethrow_exception(error);
  return true;
}

void sleeper::wake_pool(pool_record& p, std::size_t* mapped_bytes) {
  std::size_t total = 0;
  const mapped_spans want = plan_wake(p, &total);
  mapped_spans mapped(want.size());
  if (total != 0) map_asleep(p, want, mapped, total);  // unmaps what it mapped when it fails
  try {
    restore(p);
  } catch (...) {
    unmap_spans(p, mapped);
    throw;
  }
  thaw(p, mapped);  // from here on the pool is awake
  *mapped_bytes = total;
  (void)release_host(p.id);  // a buffer the device keeps is freed at the teardown
}

sleeper::mapped_spans sleeper::plan_wake(pool_record& p, std::size_t* total) {
  // The chunks that hold allocated blocks and are not held, per asleep segment. Blocks freed
  // after this only become holes: thaw turns those inside mapped chunks into free blocks.
  engine::all_streams_lock all(e_);
  std::lock_guard<std::mutex> lock(mutex_);
  const pool_sleep_record& r = record(p.id);
  mapped_spans want(r.segments.size());
  for (std::size_t i = 0; i < r.segments.size(); ++i) {
    const asleep_segment& a = r.segments[i];
    const std::size_t chunk = a.seg->chunk;
    std::uintptr_t covered = 0;
    for (const block* b = a.seg->first; b != nullptr; b = b->next) {
      if (b->state != block_state::allocated) continue;
      const std::uintptr_t lo = std::max(a.seg->chunk_down(b->addr), covered);
      const std::uintptr_t hi = a.seg->chunk_up(b->addr + b->size);
      for (std::uintptr_t at = lo; at < hi; at += chunk) {
        if (!covers(a.held, at)) append_span(want[i], at, chunk);
      }
      covered = std::max(covered, hi);
    }
    *total += span_bytes(want[i]);
  }
  return want;
}

void sleeper::map_asleep(pool_record& p, const mapped_spans& want, mapped_spans& mapped,
                         std::size_t total) {
  // As a growth: budget room first, the device asked before mapping several chunks, one
  // map_chunk per chunk; a refusal relieves pressure in the reclaim order (engine::relieve,
  // which may put lower-priority sleepable pools to sleep) and tries the rest again.
  struct piece {
    std::size_t segment;  ///< index into want
    std::uintptr_t at;    ///< chunk address
    std::size_t bytes;    ///< its segment's chunk
  };
  std::vector<piece> todo;
  std::size_t left = 0;  // bytes of todo[next...]
  for (std::size_t i = 0; i < want.size(); ++i) {
    const std::size_t chunk = chunk_of_asleep(p, i);
    for (const address_span& s : want[i]) {
      for (std::uintptr_t at = s.lo; at < s.hi; at += chunk) todo.push_back(piece{i, at, chunk});
    }
  }
  for (const piece& c : todo) left += c.bytes;
  std::size_t next = 0;
  engine::refusal why = engine::refusal::none;
  bool capture = false;
  const auto attempt = [&]() -> bool {
    if (left == 0) return true;
    try {
      const section fence(e_);
      if (!e_.device_has(left, e_.chunk_)) {
        why = engine::refusal::device;
        return false;
      }
      if (const engine::refusal r = e_.reserve_room(p, left); r != engine::refusal::none) {
        why = r;
        return false;
      }
      std::size_t room = left;
      try {
        for (; next < todo.size(); ++next) {
          const piece& c = todo[next];
          if (!e_.backend_->map_chunk(reinterpret_cast<void*>(c.at), c.bytes)) break;
          append_span(mapped[c.segment], c.at, c.bytes);
          room -= c.bytes;
          left -= c.bytes;
        }
      } catch (...) {
        e_.release_room(p, room);
        throw;
      }
      e_.release_room(p, room);
      why = engine::refusal::device;
      return room == 0;
    } catch (const not_supported&) {  // a capture may be under way: nothing to map now
      capture = true;
      why = engine::refusal::device;
      return false;
    }
  };
  const char* reason = "the device cannot supply the memory";
  bool ok = false;
  try {
    ok = attempt();
    if (!ok && !capture) {
      e_.poll_pending(true);  // (does nothing while a capture may be under way)
      ok = e_.relieve(p, left, why, attempt, &reason);
    }
  } catch (...) {
    unmap_spans(p, mapped);
    throw;
  }
  if (ok) return;
  std::size_t done = 0;
  for (std::size_t k = 0; k < next; ++k) done += todo[k].bytes;
  unmap_spans(p, mapped);
  CACHALOT_EXPECTS(!capture, not_supported,
                   "wake: pool {} ('{}'): a CUDA graph capture may be under way, and mapping "
                   "memory would break it; wake it after the capture (it stays asleep)",
                   p.id, p.options.name);
  oom_info info;
  info.requested_bytes = total;
  info.device_total = e_.device_total_;
  info.memory_limit = e_.memory_limit_;
  info.pool = p.id;
  info.pool_limit = p.options.limit;
  info.pool_reserved = p.committed.load(std::memory_order_relaxed);
  info.reserved_bytes = e_.gstats_.committed();
  try {
    const device_memory_info mi = e_.backend_->memory_info();
    info.device_total = mi.total;
    info.device_free = mi.free;
  } catch (...) {
  }
  throw out_of_memory(
      info,
      format("cachalot: out of memory: cannot wake pool '{}' (id {}, limit {}): its live blocks "
             "need {} of device memory mapped at their addresses on device {}, and {} ({} of "
             "it was mapped, then unmapped again). Device capacity {}, {} free; this allocator "
             "has {} reserved{}. The pool stays asleep, its offloaded bytes kept: free memory "
             "elsewhere (or some of its own blocks, which makes no device call) and wake it "
             "again.",
             p.options.name, p.id,
             p.options.limit == 0 ? std::string("none") : format_bytes(p.options.limit),
             format_bytes(total), e_.backend_->device(), reason, format_bytes(done),
             format_bytes(info.device_total), format_bytes(info.device_free),
             format_bytes(info.reserved_bytes),
             e_.memory_limit_ != 0 ? format(", memory limit {}", format_bytes(e_.memory_limit_))
                                   : std::string()),
      __FILE__, __LINE__);
}

std::size_t sleeper::chunk_of_asleep(pool_record& p, std::size_t i) noexcept {
  try {
    std::lock_guard<std::mutex> lock(mutex_);
    return record(p.id).segments[i].seg->chunk;
  } catch (...) {  // (std::mutex::lock: a system error) one granule, the smallest chunk
    return e_.chunk_;
  }
}

void sleeper::unmap_spans(pool_record& p, const mapped_spans& mapped) noexcept {
  // A failed wake gives back what it mapped. A chunk that cannot be unmapped (or not while a
  // capture may be under way) stays held by its asleep segment, counted as reserved.
  std::optional<capture_tracker::section> fence;
  bool allowed = true;
  try {
    fence.emplace(e_.captures_);
    allowed = !fence->underway();
  } catch (...) {
    allowed = false;
  }
  for (std::size_t i = 0; i < mapped.size(); ++i) {
    std::vector<address_span> stuck;
    std::size_t unmapped = 0;
    const std::size_t chunk = chunk_of_asleep(p, i);
    for (const address_span& s : mapped[i]) {
      for (std::uintptr_t at = s.lo; at < s.hi; at += chunk) {
        try {
          if (!allowed) throw not_supported("capture");
          e_.backend_->unmap_chunk(reinterpret_cast<void*>(at), chunk);
          unmapped += chunk;
        } catch (...) {
          append_span(stuck, at, chunk);
        }
      }
    }
    const std::size_t maps = span_bytes(mapped[i]) / chunk;
    if (maps == 0) continue;
    try {
      engine::all_streams_lock all(e_);
      std::lock_guard<std::mutex> lock(mutex_);
      asleep_segment& a = record(p.id).segments[i];
      a.ss->stats.num_chunk_maps += maps;
      a.ss->stats.num_chunk_unmaps += unmapped / chunk;
      if (!stuck.empty()) {
        stats_delta d;
        d.d[q_reserved] = static_cast<std::int64_t>(span_bytes(stuck));
        a.ss->stats.apply(a.seg->pool, d);
        a.seg->size += span_bytes(stuck);
        a.held = merged(a.held, stuck);
      }
    } catch (...) {  // bad_alloc: the counts are lost, the memory is not
    }
    e_.release_room(p, unmapped);  // (a stuck chunk keeps its room)
  }
}

void sleeper::restore(pool_record& p) {
  // The offloaded bytes of the blocks still allocated go back to their addresses, each copy on
  // its segment's stream, then a wait for each stream copied on.
  struct piece {
    std::uintptr_t addr;
    std::size_t bytes;
    std::size_t offset;
    stream_t stream;
  };
  std::vector<piece> pieces;
  const char* host = nullptr;
  {
    engine::all_streams_lock all(e_);
    std::lock_guard<std::mutex> lock(mutex_);
    const pool_sleep_record& r = record(p.id);
    host = static_cast<const char*>(r.host);
    if (host == nullptr) return;
    for (const offloaded_run& run : r.runs) {
      const std::uintptr_t end = run.addr + run.bytes;
      for (const block* b = run.seg->first; b != nullptr; b = b->next) {
        if (b->state != block_state::allocated || b->addr + b->size <= run.addr) continue;
        if (b->addr >= end) break;
        const std::uintptr_t lo = std::max(b->addr, run.addr);
        const std::uintptr_t hi = std::min(b->addr + b->size, end);
        pieces.push_back(piece{lo, hi - lo, run.offset + (lo - run.addr), run.ss->stream});
      }
    }
  }
  if (pieces.empty()) return;
  const section fence(e_);
  std::vector<stream_t> used;
  std::size_t bytes = 0;
  for (const piece& c : pieces) {
    e_.backend_->copy_to_device(reinterpret_cast<void*>(c.addr), host + c.offset, c.bytes,
                                c.stream);
    bytes += c.bytes;
    if (std::find(used.begin(), used.end(), c.stream) == used.end()) used.push_back(c.stream);
  }
  for (stream_t s : used) e_.sync_stream(s);
  std::lock_guard<std::mutex> lock(mutex_);
  record(p.id).figures.bytes_copied_in += bytes;
}

void sleeper::thaw(pool_record& p, const mapped_spans& mapped) {
  engine::all_streams_lock all(e_);
  std::lock_guard<std::mutex> lock(mutex_);
  pool_sleep_record& r = record(p.id);
  for (std::size_t i = 0; i < r.segments.size(); ++i) {
    const asleep_segment& a = r.segments[i];
    const std::vector<address_span> none;
    const std::vector<address_span>& mine = i < mapped.size() ? mapped[i] : none;
    awaken(a, merged(a.held, mine), span_bytes(mine));
    a.ss->stats.num_chunk_maps += span_bytes(mine) / a.seg->chunk;
  }
  r.segments.clear();
}

void sleeper::awaken(const asleep_segment& a, const std::vector<address_span>& runs,
                     std::size_t newly) {
  // The holes inside the mapped runs become free blocks (merged, indexed); those outside stay
  // holes, now ending on chunk boundaries again; the segment is awake.
  segment* seg = a.seg;
  stream_state& ss = *a.ss;
  std::size_t free = 0;
  for (const address_span& run : runs) {
    for (;;) {
      block* h = nullptr;  // the first hole overlapping the run
      auto it = seg->holes.upper_bound(run.lo);
      if (it != seg->holes.begin()) {
        block* before = std::prev(it)->second;
        if (before->addr + before->size > run.lo) h = before;
      }
      if (h == nullptr && it != seg->holes.end() && it->first < run.hi) h = it->second;
      if (h == nullptr) break;
      const std::uintptr_t lo = std::max(h->addr, run.lo);
      const std::uintptr_t hi = std::min(h->addr + h->size, run.hi);
      block* s = carve_hole(ss, h, lo, hi - lo);
      s->busy = false;
      --seg->busy;
      s->state = block_state::free;
      free += s->size;
      e_.coalesce_free(ss, s);
    }
  }
  stats_delta d;
  d.d[q_reserved] = static_cast<std::int64_t>(newly);
  if (seg->live != 0) {
    d.d[q_inactive] = static_cast<std::int64_t>(free);
  } else {
    d.whole_free = static_cast<std::int64_t>(free);
  }
  ss.stats.apply(seg->pool, d);
  seg->size += newly;
  seg->asleep = false;
  --seg->busy;
}

}  // namespace cachalot::detail
