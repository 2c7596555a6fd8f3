// The sleep of a tenant pool (detail/pool_sleep.hpp has the protocol and its invariants; the
// wake is in pool_wake.cpp, the bookkeeping of pools while they sleep in pool_asleep.cpp): enter,
// settle the pending blocks, freeze under every stream lock, wait for the pool's streams (events,
// never a device-wide synchronization), offload, unmap. Before the first unmap a failure thaws
// the pool with no device call (awake, contents intact); from it on the pool is asleep.
#include "detail/pool_sleep.hpp"

#include <algorithm>
#include <chrono>
#include <exception>
#include <optional>
#include <thread>

#include "cachalot/errors.hpp"
#include "detail/checks.hpp"
#include "detail/device_clock.hpp"
#include "detail/engine.hpp"

namespace cachalot::detail {
namespace {

/// The mapped chunk runs of an awake expandable segment: its blocks that are not holes.
std::vector<address_span> mapped_runs(const segment& seg) {
  std::vector<address_span> out;
  for (const block* b = seg.first; b != nullptr; b = b->next) {
    if (b->state != block_state::unmapped) append_span(out, b->addr, b->size);
  }
  return out;
}

}  // namespace

// --- sleep -------------------------------------------------------------------------------------

bool sleeper::sleep(pool_id pool, sleep_mode mode) {
  std::size_t released = 0;
  return sleep_pool(pool_of_id(pool), mode, false, &released);
}

bool sleeper::sleep_pool(pool_record& p, sleep_mode mode, bool pressure, std::size_t* released) {
  check_sleepable(p, mode);
  if (!begin(p, phase::awake, phase::entering, !pressure)) return false;
  const std::uint64_t t0 = device_clock::thread_ns();
  bool asleep = false;  // a failure after the first unmap leaves the pool asleep
  std::exception_ptr error;
  try {
    enter(p, mode, released, &asleep);
    asleep = true;
  } catch (...) {
    error = std::current_exception();
  }
  {
    std::lock_guard<std::mutex> lock(mutex_);
    sleep_stats& f = record(p.id).figures;
    f.sleep_ns += device_clock::thread_ns() - t0;
    f.bytes_slept += *released;
    if (asleep) {
      ++f.num_sleeps;
      if (pressure) ++f.num_pressure_sleeps;
    } else {
      ++f.num_failed_sleeps;
    }
  }
  finish(p, asleep ? phase::asleep : phase::awake);
  if (error) std::rethrow_exception(error);
  return true;
}

void sleeper::enter(pool_record& p, sleep_mode mode, std::size_t* released, bool* asleep) {
  // 1. No allocation of the pool is in its slow path (so no growth is in flight).
  for (unsigned spins = 0; p.in_slow.load(std::memory_order_seq_cst) != 0; ++spins) {
    if (spins < 64) {
      std::this_thread::yield();
    } else {
      std::this_thread::sleep_for(std::chrono::microseconds(50));
    }
  }
  // 2-3. Pending blocks complete; freeze (retried while blocks are being freed meanwhile).
  std::vector<stream_t> streams;
  for (unsigned round = 0;; ++round) {
    settle_pending(p);
    if (freeze(p, mode, streams)) break;
    CACHALOT_EXPECTS(round < 10000, backend_error,
                     "sleep: pool {} ('{}'): its blocks keep being freed on other streams while "
                     "it goes to sleep",
                     p.id, p.options.name);
    std::this_thread::yield();
  }
  std::optional<section> fence;  // one stretch of device calls, through the unmaps
  try {
    // 4. The work queued on the pool's memory ends; 5. offload.
    fence.emplace(e_);
    for (stream_t s : streams) e_.sync_stream(s);
    if (mode == sleep_mode::offload) offload(p);
    std::vector<stream_t> late;
    {
      std::lock_guard<std::mutex> lock(mutex_);
      late.swap(record(p.id).late_streams);
    }
    for (stream_t s : late) {
      if (std::find(streams.begin(), streams.end(), s) == streams.end()) e_.sync_stream(s);
    }
  } catch (...) {
    fence.reset();
    thaw(p, {});  // nothing was unmapped: awake again with no device call
    throw;
  }
  // 6. Unmap. From here on the pool is asleep, whatever fails.
  *asleep = true;
  *released = unmap_held(p);
}

void sleeper::settle_pending(pool_record& p) {
  // The events of the pool's pending blocks complete (a wait on each, no device-wide
  // synchronization); the next poll then makes the blocks free, so that freeze finds none.
  {
    const section fence(e_);
    std::vector<stream_t> unrecorded;  // frees made while a capture was possible
    bool synced = false;
    {
      std::lock_guard<std::mutex> lock(e_.pending_mutex_);
      for (const engine::pending_free& f : e_.pending_) {
        if (f.b->owner->pool != &p) continue;
        for (event_t ev : f.events) {
          e_.backend_->synchronize_event(ev);
          synced = true;
        }
        unrecorded.insert(unrecorded.end(), f.unrecorded.begin(), f.unrecorded.end());
      }
    }
    if (synced) e_.gstats_.num_syncs.fetch_add(1, std::memory_order_relaxed);
    for (stream_t s : unrecorded) e_.sync_stream(s);
  }
  if (e_.pending_count_.load(std::memory_order_acquire) != 0) e_.poll_pending(false);
}

bool sleeper::freeze(pool_record& p, sleep_mode mode, std::vector<stream_t>& streams) {
  std::lock_guard<std::mutex> release_lock(e_.release_mutex_);  // no release pass in flight
  engine::all_streams_lock all(e_);
  std::vector<stream_state*> mine;
  for (stream_state* ss : all.streams()) {
    if (ss->pool != &p) continue;
    mine.push_back(ss);
    for (const segment* seg = ss->segments; seg != nullptr; seg = seg->next) {
      CACHALOT_EXPECTS(seg->expandable(), not_supported,
                       "sleep: pool {} ('{}') holds a fixed segment of {} (grown while a CUDA "
                       "graph capture may have been under way, or when address space ran out), "
                       "which cannot be given back while its blocks live",
                       p.id, p.options.name, format_bytes(seg->size));
      if (seg->busy != 0) return false;
      for (const block* b = seg->first; b != nullptr; b = b->next) {
        if (b->state == block_state::pending || (b->state == block_state::allocated && b->freeing))
          return false;  // a free is deciding, or waits for events: settle it first
      }
    }
  }
  std::lock_guard<std::mutex> lock(mutex_);
  pool_sleep_record& r = record(p.id);
  r.mode = mode;
  r.segments.clear();
  r.runs.clear();
  r.late_streams.clear();
  std::size_t offset = 0;
  for (stream_state* ss : mine) {
    streams.push_back(ss->stream);
    for (segment* seg = ss->segments; seg != nullptr; seg = seg->next) {
      asleep_segment a{ss, seg, mapped_runs(*seg)};
      std::size_t free = 0;
      for (block* b = seg->first; b != nullptr;) {
        if (b->state == block_state::free) {
          free += b->size;
          e_.remove_free(*ss, b);
          b = add_hole(*ss, b)->next;  // merged with the holes next to it
          continue;
        }
        if (b->state == block_state::allocated) {
          for (stream_t s : b->used_on) {
            if (std::find(streams.begin(), streams.end(), s) == streams.end()) streams.push_back(s);
          }
          const bool joins = !r.runs.empty() && r.runs.back().seg == seg &&
                             r.runs.back().addr + r.runs.back().bytes == b->addr;
          if (mode == sleep_mode::offload && joins) {
            r.runs.back().bytes += b->size;
          } else if (mode == sleep_mode::offload) {
            r.runs.push_back(offloaded_run{ss, seg, b->addr, b->size, 0});
          }
        }
        b = b->next;
      }
      stats_delta d;  // free bytes leave inactive-split (or idle) bytes; reserved stays (held)
      if (seg->live != 0) {
        d.d[q_inactive] = -static_cast<std::int64_t>(free);
      } else {
        d.whole_free = -static_cast<std::int64_t>(free);
      }
      ss->stats.apply(seg->pool, d);
      seg->asleep = true;
      ++seg->busy;  // never released nor grown while asleep
      r.segments.push_back(std::move(a));
    }
  }
  for (offloaded_run& run : r.runs) {
    run.offset = offset;
    offset += run.bytes;
  }
  return true;
}

void sleeper::offload(pool_record& p) {
  // One pinned buffer for every run of allocated blocks, a copy of each on its stream, then a
  // wait for every stream copied on.
  std::vector<offloaded_run> runs;
  {
    std::lock_guard<std::mutex> lock(mutex_);
    runs = record(p.id).runs;
  }
  if (runs.empty()) return;
  const std::size_t total = runs.back().offset + runs.back().bytes;
  void* host = e_.backend_->allocate_host(total);
  if (host == nullptr) {
    oom_info info;
    info.requested_bytes = total;
    info.pool = p.id;
    info.pool_limit = p.options.limit;
    info.pool_reserved = p.committed.load(std::memory_order_relaxed);
    throw out_of_memory(
        info,
        format("cachalot: out of memory: pool '{}' (id {}) cannot sleep with offload: the host "
               "cannot pin {} for a copy of its live blocks; free host memory, or sleep it with "
               "sleep_mode::discard if its contents need not survive",
               p.options.name, p.id, format_bytes(total)),
        __FILE__, __LINE__);
  }
  {
    std::lock_guard<std::mutex> lock(mutex_);
    pool_sleep_record& r = record(p.id);
    r.host = host;
    r.host_bytes = total;
  }
  try {
    std::vector<stream_t> used;
    for (const offloaded_run& run : runs) {
      e_.backend_->copy_to_host(static_cast<char*>(host) + run.offset,
                                reinterpret_cast<const void*>(run.addr), run.bytes, run.ss->stream);
      if (std::find(used.begin(), used.end(), run.ss->stream) == used.end()) {
        used.push_back(run.ss->stream);
      }
    }
    for (stream_t s : used) e_.sync_stream(s);
  } catch (...) {
    (void)release_host(p.id);
    throw;
  }
  std::lock_guard<std::mutex> lock(mutex_);
  record(p.id).figures.bytes_copied_out += total;
}

std::size_t sleeper::unmap_held(pool_record& p) {
  // Inside the sleep's capture fence. Every held chunk goes, segment by segment: the reserved
  // bytes drop in the critical section before the unmaps; what cannot be unmapped stays held
  // and is counted back (undo).
  std::size_t released = 0;
  std::exception_ptr error;
  std::size_t count = 0;
  {
    std::lock_guard<std::mutex> lock(mutex_);
    count = record(p.id).segments.size();
  }
  for (std::size_t i = 0; i < count; ++i) {
    asleep_segment a;
    {
      std::lock_guard<std::mutex> lock(mutex_);
      a = record(p.id).segments[i];
    }
    const std::size_t bytes = span_bytes(a.held);
    if (bytes == 0) continue;
    const std::size_t chunk = a.seg->chunk;
    stats_delta d;
    d.d[q_reserved] = -static_cast<std::int64_t>(bytes);
    {
      engine::all_streams_lock all(e_);
      a.ss->stats.apply(a.seg->pool, d);
      a.seg->size -= bytes;
    }
    std::vector<address_span> stuck;
    std::size_t unmapped = 0;
    for (const address_span& s : a.held) {
      for (std::uintptr_t at = s.lo; at < s.hi; at += chunk) {
        try {
          e_.backend_->unmap_chunk(reinterpret_cast<void*>(at), chunk);
          unmapped += chunk;
          continue;
        } catch (...) {
          if (!error) error = std::current_exception();
        }
        if (!stuck.empty() && stuck.back().hi == at) {
          stuck.back().hi += chunk;
        } else {
          stuck.push_back(address_span{at, at + chunk});
        }
      }
    }
    {
      engine::all_streams_lock all(e_);
      a.ss->stats.num_chunk_unmaps += unmapped / chunk;
      if (!stuck.empty()) {
        stats_delta back;  // the part of the drop that did not happen
        back.d[q_reserved] = -static_cast<std::int64_t>(span_bytes(stuck));
        a.ss->stats.undo(a.seg->pool, back);
        a.seg->size += span_bytes(stuck);
      }
      std::lock_guard<std::mutex> lock(mutex_);
      record(p.id).segments[i].held = std::move(stuck);
    }
    e_.release_room(p, unmapped);
    released += unmapped;
  }
  if (error) {
    std::size_t held = 0;
    {
      std::lock_guard<std::mutex> lock(mutex_);
      for (const asleep_segment& a : record(p.id).segments) held += span_bytes(a.held);
    }
    std::string cause;
    try {
      std::rethrow_exception(error);
    } catch (const std::exception& e) {
      cause = e.what();
    }
    CACHALOT_FAIL(backend_error,
                  "sleep: pool {} ('{}') is asleep, but {} of its device memory could not be "
                  "unmapped and stays held (a wake uses it): {}",
                  p.id, p.options.name, format_bytes(held), cause);
  }
  return released;
}

bool sleeper::release_host(pool_id id) noexcept {
  void* host = nullptr;
  std::size_t bytes = 0;
  {
    std::lock_guard<std::mutex> lock(mutex_);
    pool_sleep_record& r = record(id);
    std::swap(host, r.host);
    std::swap(bytes, r.host_bytes);
    r.runs.clear();
  }
  if (host == nullptr) return true;
  try {
    e_.backend_->free_host(host, bytes);
    return true;
  } catch (...) {
  }
  try {
    std::lock_guard<std::mutex> lock(mutex_);
    stale_.emplace_back(host, bytes);
  } catch (...) {  // bad_alloc: the memory leaks until the process ends
  }
  return false;
}

}  // namespace cachalot::detail
