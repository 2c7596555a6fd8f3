// The engine's cold paths: growth, oversize blocks, the out-of-memory sequence, cache release
// (empty_cache, trim), pass-through mode, and error formatting. None of this runs on a cache
// hit. Deferred frees and their events are in deferred_free.cpp.
#include <algorithm>
#include <exception>

#include "cachalot/config.hpp"
#include "detail/callback_scope.hpp"
#include "detail/checks.hpp"
#include "detail/engine.hpp"
#include "detail/pool_sleep.hpp"

namespace cachalot::detail {

// --- growth and out of memory ----------------------------------------------------------------

std::size_t engine::segment_size_for(pool_kind pool, std::size_t rounded) const noexcept {
  if (!caching_) return rounded;
  if (pool == pool_kind::small) return cfg_.small_segment_size;
  if (rounded < cfg_.mid_size_limit) return cfg_.large_segment_size;
  const std::size_t r = cfg_.segment_rounding;
  return (rounded + r - 1) / r * r;
}

void* engine::grow(std::size_t bytes, stream_t stream, pool_record& pool, bool in_capture,
                   refusal* why) {
  if (arena_) {
    if (void* p = carve_reserve(pool, bytes)) return p;  // no device call (engine_knobs.cpp)
  }
  if (const refusal r = reserve_room(pool, bytes); r != refusal::none) {
    *why = r;
    return nullptr;
  }
  void* base = nullptr;
  try {
    // cudaMalloc is "potentially unsafe" during a capture: legal in relaxed mode, which is what
    // a graph pool growing during its capture (PyTorch's way) and eager work on a stream that
    // is not captured while a capture may be under way (on this thread or another) both use.
    // The segment is not part of any graph either way.
    capture_tracker::section fence(captures_);
    if (in_capture || fence.underway()) {
      capture_mode_scope mode(*backend_, capture_mode::relaxed);
      base = backend_->allocate_segment(bytes, stream);
    } else {
      base = backend_->allocate_segment(bytes, stream);
    }
  } catch (...) {
    release_room(pool, bytes);
    throw;
  }
  if (base == nullptr) {
    release_room(pool, bytes);
    *why = refusal::device;
  } else {
    policy_->on_growth(bytes);  // (hysteresis: a size just released, made again)
  }
  return base;
}

block* engine::add_segment(stream_state& ss, pool_kind pool, void* base, std::size_t size,
                           std::size_t rounded, std::size_t requested) {
  if (poison_) poison(reinterpret_cast<std::uintptr_t>(base), size);
  auto seg = std::make_unique<segment>();
  seg->base = reinterpret_cast<std::uintptr_t>(base);
  seg->size = size;
  seg->range_size = size;
  seg->pool = pool;
  seg->owner = &ss;
  ceiling_lock all(*this, ss);  // reserved bytes and the segment count may reach new peaks
  seg->band = static_cast<std::uint8_t>(growth_band(ss, band_of(pool, rounded)));
  block* whole = ss.nodes.acquire(&ss);
  whole->addr = seg->base;
  whole->size = size;
  whole->seg = seg.get();
  seg->first = whole;
  ss.link(seg.release());
  stats_delta d;
  d.d[q_reserved] = static_cast<std::int64_t>(size);
  d.d[q_segments] = 1;
  d.whole_free = static_cast<std::int64_t>(size);
  ss.stats.apply(pool, d.derive_inactive());
  ++ss.stats.num_segment_allocs;
  insert_free(ss, whole);
  bool unused = false;
  return claim(ss, whole, pool, rounded, requested, true, &unused);
}

block* engine::take_all_locked(stream_state& ss, pool_kind pool, std::size_t rounded,
                               std::size_t requested) {
  ceiling_lock all(*this, ss);
  bool unused = false;
  return take_cached(ss, pool, rounded, requested, true, &unused);
}

block* engine::allocate_slow(stream_state& ss, pool_kind pool, std::size_t rounded,
                             std::size_t requested, bool over_ceiling) {
  const stream_t stream = ss.stream;
  pool_record& mp = *ss.pool;
  const slow_pass pass(mp, requested, stream);  // refused while the pool sleeps (pool_sleep.hpp)
  // 0. A block fits but its stats crossed this stream's ceiling: redo under a ceiling_lock.
  if (over_ceiling) {
    if (ss.tcache) {
      if (block* b = tc_take_lent(ss, pool, rounded, requested)) return b;
    }
    if (block* b = take_all_locked(ss, pool, rounded, requested)) return b;
  }
  // A request no segment can ever hold fails before anything changes (no event is polled).
  const std::size_t seg_size = segment_size_for(pool, rounded);
  const std::size_t need = growth_bytes(pool, rounded, seg_size);  // a segment, or chunks
  if (need > device_total_ || (memory_limit_ != 0 && need > memory_limit_)) {
    fail_oom(requested, stream, "the request can never fit on this device or under the limit");
  }
  if (mp.options.limit != 0 && need > mp.options.limit) {
    fail_oom(requested, stream, "the request can never fit under the pool's limit", &mp);
  }
  if (draining_.load(std::memory_order_acquire) != 0) drain_released();
  // During a capture of this stream: grow its graph pool (docs/cuda.md), nothing else.
  if (backend_->is_capturing(stream))
    return grow_in_capture(ss, pool, rounded, requested, seg_size);
  // 1. Blocks whose events have completed may fit.
  if (pending_count_.load(std::memory_order_acquire) != 0) {
    poll_pending(false);  // in pass-through mode this also returns their segments
    if (caching_) {
      if (block* b = take_all_locked(ss, pool, rounded, requested)) return b;
    }
  }
  // 1b. Blocks in this stream's thread-cache lanes may fit (thread_cache.cpp).
  if (ss.tcache) {
    if (block* b = tc_flush_and_take(ss, pool, rounded, requested)) return b;
  }
  // 2. A new segment (or chunks). Near the limit, cached memory nothing fits in is returned
  // first (released and lower-priority pools first, largest first, only as much as needed), so
  // that reserved memory stays close to what is in use.
  if (const release_advice a = policy_->before_growth(gstats_.committed(), need);
      a.release && !(arena_ && !expandable_ && arena_->fits(seg_size))) {  // the reserve may
    gc_release(ss, a.target);                                              // still supply it
  }
  refusal why = refusal::none;
  if (block* b = grow_memory(ss, pool, rounded, requested, seg_size, &why)) return b;
  // 3. Complete pending events, release cached memory in priority order (pool_reclaim.cpp),
  // retry.
  const char* reason = nullptr;
  if (block* b = grow_under_pressure(ss, pool, rounded, requested, seg_size, why, &reason)) {
    return b;
  }
  // 4. The user's out-of-memory callback may free memory and ask for a retry (engine_knobs.cpp).
  if (has_oom_callback_.load(std::memory_order_acquire)) [[unlikely]] {
    if (block* b = retry_after_oom_callback(ss, pool, rounded, requested)) return b;
  }
  fail_oom(requested, stream, reason, &mp);
}

void engine::fail_impossible(std::size_t bytes, stream_t stream) {
  fail_oom(bytes, stream, "the size is beyond any device");
}

void engine::fail_oom(std::size_t bytes, stream_t stream, const char* why,
                      const pool_record* pool) {
  if (quiet_oom()) throw oom_retry{};  // a retry the callback asked for: its caller decides
  gstats_.num_ooms.fetch_add(1, std::memory_order_relaxed);
  if (pool != nullptr) pool->num_ooms.fetch_add(1, std::memory_order_relaxed);
  if (tracer_) tracer_->on_allocate_failure(bytes, stream);
  const memory_stats s = stats();
  oom_info info;
  info.requested_bytes = bytes;
  info.reserved_bytes = s.reserved_bytes.all.current;
  info.allocated_bytes = s.allocated_bytes.all.current;
  info.largest_free_block = s.largest_free_block;
  info.memory_limit = memory_limit_;
  info.device_total = device_total_;
  try {
    if (!capture_underway()) {  // cudaMemGetInfo is no call to make during a capture
      const device_memory_info mi = backend_->memory_info();
      info.device_total = mi.total;
      info.device_free = mi.free;
    }
  } catch (...) {
  }
  std::string limit =
      memory_limit_ != 0 ? fmt::format(", memory limit {}", format_bytes(memory_limit_)) : "";
  const std::string mapped = expandable_ ? mapped_note() : std::string();
  const char* hint =
      expandable_ ? "Hint: with expandable segments, reserved but unallocated memory that "
                    "empty_cache() cannot return lies in chunks shared with live blocks; free "
                    "live memory or raise the memory limit."
                  : "Hint: if reserved but unallocated memory is large, fragmentation is the "
                    "cause: set expandable_segments:1 or max_split_size, free cached memory with "
                    "empty_cache(), or raise the memory limit.";
  std::string in_pool;
  if (pool != nullptr && pool->id != default_pool) {
    info.pool = pool->id;
    info.pool_limit = pool->options.limit;
    info.pool_reserved = pool->committed.load(std::memory_order_relaxed);
    in_pool =
        fmt::format(" in pool '{}' (id {}, limit {}, {} reserved)", pool->options.name, pool->id,
                    pool->options.limit == 0 ? "none" : format_bytes(pool->options.limit),
                    format_bytes(info.pool_reserved));
  }
  std::string msg = fmt::format(
      "cachalot: out of memory: tried to allocate {}{} on device {} (stream {}): {}. Device "
      "capacity {}, {} free{}; this allocator has {} reserved{}, {} allocated, {} reserved but "
      "unallocated, largest free block {}. {}",
      format_bytes(bytes), in_pool, backend_->device(), fmt::ptr(stream), why,
      format_bytes(info.device_total), format_bytes(info.device_free), limit,
      format_bytes(info.reserved_bytes), mapped, format_bytes(info.allocated_bytes),
      format_bytes(info.reserved_bytes - info.allocated_bytes),
      format_bytes(info.largest_free_block), hint);
  throw out_of_memory(info, msg, __FILE__, __LINE__);
}

// --- oversize blocks -------------------------------------------------------------------------

block* engine::find_oversize(stream_state& ss, std::size_t rounded) {
  // Under the oversize rule, a block far bigger than the request would be wasted: accept at
  // most one large segment more. Without it, any block that fits is split (claim).
  block* b = ss.oversize.find(rounded);
  if (b == nullptr || b->size < policy_->split_limit()) return b;
  return b->size < rounded + cfg_.large_segment_size ? b : nullptr;
}

void engine::insert_oversize(stream_state& ss, block* b) {
  ss.oversize.insert(b);
  b->oversize = true;
}

void engine::remove_oversize(stream_state& ss, block* b) {
  ss.oversize.remove(b);
  b->oversize = false;
}

// --- pass-through mode -----------------------------------------------------------------------

void engine::deallocate_passthrough(void* ptr, stream_t stream, bool on_stream) {
  // release_mutex_ keeps the segment alive until it is returned to the device.
  std::unique_lock<std::mutex> release_lock(release_mutex_);
  block* b = map_.erase(reinterpret_cast<std::uintptr_t>(ptr));
  if (b == nullptr) {
    release_lock.unlock();
    fail_invalid_free(ptr);
  }
  stream_state& ss = *b->owner;
  segment* seg = b->seg;
  {
    std::lock_guard<spinlock> lock(ss.lock);
    b->freeing = true;
  }
  if (free_claimed(b, on_stream ? stream : ss.stream)) release_or_keep(ss, seg);
}

void engine::fail_invalid_free(void* ptr) const {
  CACHALOT_FAIL(invalid_pointer, "deallocate: {}", describe(reinterpret_cast<std::uintptr_t>(ptr)));
}

}  // namespace cachalot::detail
