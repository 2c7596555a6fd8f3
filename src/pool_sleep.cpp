// Sleep of tenant pools and the sleeper's bookkeeping (detail/pool_sleep.hpp has the protocol;
// the wake is in pool_wake.cpp): the allocation guard, the phases, the steps of a sleep, the
// sleep the allocator decides under pressure, frees while asleep, stats, snapshot, release and
// teardown of sleeping pools.
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

thread_local std::vector<const pool_record*> t_inside;  ///< pools in whose slow path we are
thread_local bool t_in_callback = false;                ///< a sleep callback runs here

/// The mapped chunk runs of an awake expandable segment: its blocks that are not holes.
std::vector<address_span> mapped_runs(const segment& seg) {
  std::vector<address_span> out;
  for (const block* b = seg.first; b != nullptr; b = b->next) {
    if (b->state == block_state::unmapped) continue;
    if (!out.empty() && out.back().hi == b->addr) {
      out.back().hi += b->size;
    } else {
      out.push_back(address_span{b->addr, b->addr + b->size});
    }
  }
  return out;
}

std::size_t span_bytes(const std::vector<address_span>& spans) noexcept {
  std::size_t n = 0;
  for (const address_span& s : spans) n += s.hi - s.lo;
  return n;
}

/// Sets a thread-local flag for a scope.
class flag_scope {
 public:
  explicit flag_scope(bool& f) noexcept : f_(f), old_(f) { f_ = true; }
  ~flag_scope() { f_ = old_; }
  flag_scope(const flag_scope&) = delete;
  flag_scope& operator=(const flag_scope&) = delete;

 private:
  bool& f_;
  bool old_;
};

}  // namespace

// --- the allocation guard ----------------------------------------------------------------------

slow_pass::slow_pass(pool_record& pool, std::size_t bytes, stream_t stream) : pool_(pool) {
  // Dekker with sleeper::enter: either this thread sees the pool asleep, or the sleep sees
  // this thread counted and waits for it (both sequentially consistent).
  pool.in_slow.fetch_add(1, std::memory_order_seq_cst);
  if (pool.asleep.load(std::memory_order_seq_cst)) [[unlikely]] {
    pool.in_slow.fetch_sub(1, std::memory_order_seq_cst);
    throw pool_asleep(pool.id,
                      format("cannot allocate {} from pool '{}' (id {}) on stream {}: the pool "
                             "is asleep (or going to sleep, or waking); wake it first",
                             format_bytes(bytes), pool.options.name, pool.id, fmt::ptr(stream)),
                      __FILE__, __LINE__);
  }
  t_inside.push_back(&pool);
}

slow_pass::~slow_pass() {
  t_inside.pop_back();
  pool_.in_slow.fetch_sub(1, std::memory_order_seq_cst);
}

bool slow_pass::inside(const pool_record& pool) noexcept {
  return std::find(t_inside.begin(), t_inside.end(), &pool) != t_inside.end();
}

void slow_pass::refuse_record(const pool_record& pool, std::uintptr_t addr, stream_t stream) {
  throw pool_asleep(pool.id,
                    format("record_stream: {:#x} is a block of pool '{}' (id {}), which is "
                           "asleep (or going to sleep, or waking): no work may be queued on it "
                           "(stream {}) until the pool is awake",
                           addr, pool.options.name, pool.id, fmt::ptr(stream)),
                    __FILE__, __LINE__);
}

// --- phases ------------------------------------------------------------------------------------

sleeper::section::section(engine& e) : fence(e.captures_) {
  CACHALOT_EXPECTS(!fence.underway(), not_supported,
                   "a memory pool cannot sleep or wake while a CUDA graph capture may be under "
                   "way (its synchronizations, copies, unmaps and maps would break the capture); "
                   "try again after the capture");
}

sleeper::~sleeper() {
  for (const auto& r : records_) {
    if (r && r->host != nullptr) stale_.emplace_back(r->host, r->host_bytes);
  }
  for (const auto& [host, bytes] : stale_) {
    try {
      e_.backend_->free_host(host, bytes);
    } catch (...) {  // the driver is going away: it reclaims the memory
    }
  }
}

pool_record& sleeper::pool_of_id(pool_id id) const {
  std::shared_lock<std::shared_mutex> lock(e_.registry_mutex_);
  return e_.pool_by_id(id);  // (records are never deleted)
}

pool_sleep_record& sleeper::record(pool_id id) {
  if (records_.size() <= id) records_.resize(id + 1);
  if (!records_[id]) records_[id] = std::make_unique<pool_sleep_record>();
  return *records_[id];
}

bool sleeper::begin(pool_record& p, phase from, phase to, bool wait) {
  std::unique_lock<std::mutex> lock(mutex_);
  pool_sleep_record& r = record(p.id);
  const phase other = from == phase::awake ? phase::asleep : phase::awake;
  for (;;) {
    if (r.now == from) {
      r.now = to;
      if (from == phase::awake) p.asleep.store(true, std::memory_order_seq_cst);  // refused
      return true;
    }
    if (r.now == other || !wait) return false;
    changed_.wait(lock);
  }
}

void sleeper::finish(pool_record& p, phase to) {
  {
    std::lock_guard<std::mutex> lock(mutex_);
    record(p.id).now = to;
    if (to == phase::awake) p.asleep.store(false, std::memory_order_seq_cst);
  }
  changed_.notify_all();
}

void sleeper::check_options(const pool_options& o) const {
  CACHALOT_EXPECTS(o.type == pool_type::tenant, invalid_argument,
                   "create_pool: pool '{}' cannot be sleepable: it is a graph pool (CUDA graphs "
                   "replay into its segments, which stay until it is released); make the "
                   "model's pool a tenant pool",
                   o.name);
  CACHALOT_EXPECTS(e_.expandable_, not_supported,
                   "create_pool: pool '{}' cannot be sleepable: this allocator uses fixed "
                   "segments, which cannot be given back while their blocks live; set config "
                   "key expandable_segments:1",
                   o.name);
  CACHALOT_EXPECTS(o.sleep_mode != sleep_mode::offload || e_.backend_->supports_host_copies(),
                   not_supported,
                   "create_pool: pool '{}' cannot be sleepable with sleep_mode::offload: the {} "
                   "backend has no pinned host memory and copies; use sleep_mode::discard",
                   o.name, e_.backend_->name());
}

void sleeper::check_sleepable(const pool_record& p, sleep_mode mode) const {
  CACHALOT_EXPECTS(p.id != default_pool, invalid_argument,
                   "sleep: the default pool cannot sleep; create a tenant pool for the model "
                   "(create_pool) and route its allocations there");
  CACHALOT_EXPECTS(!p.released.load(std::memory_order_acquire), invalid_argument,
                   "sleep: pool {} ('{}') was released", p.id, p.options.name);
  CACHALOT_EXPECTS(p.options.type == pool_type::tenant, invalid_argument,
                   "sleep: pool {} ('{}') is a graph pool: CUDA graphs replay into its segments, "
                   "which stay mapped until it is released; route the model's allocations to a "
                   "tenant pool to sleep it",
                   p.id, p.options.name);
  CACHALOT_EXPECTS(e_.expandable_, not_supported,
                   "sleep: pool {} ('{}') is on fixed segments: a fixed segment is one device "
                   "allocation, which cannot be given back while its blocks live and cannot be "
                   "remapped at the same address; set config key expandable_segments:1",
                   p.id, p.options.name);
  CACHALOT_EXPECTS(mode != sleep_mode::offload || e_.backend_->supports_host_copies(),
                   not_supported,
                   "sleep: pool {} ('{}'): the {} backend has no pinned host memory and copies "
                   "for sleep_mode::offload; use sleep_mode::discard",
                   p.id, p.options.name, e_.backend_->name());
  CACHALOT_EXPECTS(!slow_pass::inside(p), invalid_argument,
                   "sleep: pool {} ('{}') cannot be put to sleep from inside one of its own "
                   "allocations (an out-of-memory, reclaim or sleep callback)",
                   p.id, p.options.name);
}

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
                                reinterpret_cast<const void*>(run.addr), run.bytes,
                                run.ss->stream);
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
  const std::size_t chunk = e_.chunk_;
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

// --- under pressure ----------------------------------------------------------------------------

bool sleeper::in_callback() noexcept {
  return t_in_callback;
}

bool sleeper::sleep_for_pressure(pool_record& q, std::size_t bytes) noexcept {
  if (t_in_callback || slow_pass::inside(q)) return false;
  try {
    {
      std::lock_guard<std::mutex> lock(mutex_);
      pool_sleep_record& r = record(q.id);
      if (r.now != phase::awake || r.asking) return false;
      r.asking = true;
    }
    bool agreed = true;
    if (q.options.on_sleep) {
      const flag_scope in(t_in_callback);
      try {
        agreed = q.options.on_sleep(q.id, sleep_notice::requested, bytes);
      } catch (...) {
        agreed = false;
      }
    }
    std::size_t released = 0;
    bool slept = false;
    if (agreed) {
      try {
        slept = sleep_pool(q, q.options.sleep_mode, true, &released);
      } catch (...) {  // counted as a failed sleep; the pool may be asleep (a failed unmap)
        slept = q.asleep.load(std::memory_order_acquire);
      }
    }
    {
      std::lock_guard<std::mutex> lock(mutex_);
      record(q.id).asking = false;
    }
    if (agreed && q.options.on_sleep) {
      const flag_scope in(t_in_callback);
      try {
        (void)q.options.on_sleep(q.id, slept ? sleep_notice::asleep : sleep_notice::cancelled,
                                 released);
      } catch (...) {
      }
    }
    return slept && released != 0;
  } catch (...) {  // bad_alloc
    return false;
  }
}

// --- frees, stats, snapshots, release and teardown ------------------------------------------------

void engine::free_asleep(block* b, stream_t last_used) {
  bool dropped = false;
  {
    all_streams_lock all(*this, b->owner);
    dropped = sleep_->drop(b, last_used);
  }
  if (!dropped) free_claimed(b, last_used);  // it woke meanwhile: the ordinary free
}

bool sleeper::drop(block* b, stream_t last_used) {
  segment* seg = b->seg;
  stream_state& ss = *b->owner;
  if (!seg->asleep) return false;
  e_.trace_free(b);
  stats_delta d;  // no inactive-split or idle bytes: nothing is mapped behind the block
  d.d[q_requested] = -static_cast<std::int64_t>(b->requested);
  d.d[q_allocated] = -static_cast<std::int64_t>(b->size);
  d.d[q_active] = -static_cast<std::int64_t>(b->size);
  d.d[q_allocations] = -1;
  ss.stats.apply(seg->pool, d);
  ++ss.stats.num_frees;
  if (last_used != ss.stream) {  // the sleep waits for that stream before it unmaps
    std::lock_guard<std::mutex> lock(mutex_);
    pool_sleep_record& r = record(ss.pool->id);
    if (r.now == phase::entering) r.late_streams.push_back(last_used);
  }
  b->used_on.clear();
  b->has_uses.store(false, std::memory_order_relaxed);
  b->freeing = false;
  b->requested = 0;
  --seg->live;
  add_hole(ss, b);
  return true;
}

void sleeper::add_stats(const pool_record* only, memory_stats& s) const {
  std::lock_guard<std::mutex> lock(mutex_);
  for (std::size_t id = 0; id < records_.size(); ++id) {
    const pool_sleep_record* r = records_[id].get();
    if (r == nullptr || (only != nullptr && only->id != id)) continue;
    sleep_stats& o = s.sleep;
    const sleep_stats& f = r->figures;
    o.num_sleeps += f.num_sleeps;
    o.num_pressure_sleeps += f.num_pressure_sleeps;
    o.num_wakes += f.num_wakes;
    o.num_failed_sleeps += f.num_failed_sleeps;
    o.num_failed_wakes += f.num_failed_wakes;
    o.sleep_ns += f.sleep_ns;
    o.wake_ns += f.wake_ns;
    o.bytes_slept += f.bytes_slept;
    o.bytes_woken += f.bytes_woken;
    o.bytes_copied_out += f.bytes_copied_out;
    o.bytes_copied_in += f.bytes_copied_in;
    if (r->now == phase::awake) continue;
    ++o.pools_asleep;
    o.bytes_offloaded += r->host_bytes;
    for (const asleep_segment& a : r->segments) {
      o.bytes_asleep += bytes_asleep(a);
      o.bytes_held += span_bytes(a.held);
    }
  }
}

void sleeper::add_snapshot(memory_snapshot& snap) const {
  std::lock_guard<std::mutex> lock(mutex_);
  for (std::size_t id = 0; id < records_.size(); ++id) {
    const pool_sleep_record* r = records_[id].get();
    if (r == nullptr || r->now == phase::awake) continue;
    sleeping_pool_info i;
    i.pool = id;
    i.offloaded = r->host != nullptr;
    i.bytes_offloaded = r->host_bytes;
    for (const asleep_segment& a : r->segments) {
      i.bytes_asleep += bytes_asleep(a);
      i.bytes_held += span_bytes(a.held);
    }
    snap.sleeping_pools.push_back(i);
  }
}

std::size_t sleeper::bytes_asleep(const asleep_segment& a) const {
  // Under a.ss's lock: the chunks that hold allocated blocks, minus those still held.
  const std::size_t chunk = e_.chunk_;
  std::size_t n = 0;
  std::uintptr_t covered = 0;  // chunks below this were counted
  for (const block* b = a.seg->first; b != nullptr; b = b->next) {
    if (b->state != block_state::allocated) continue;
    std::uintptr_t lo = b->addr / chunk * chunk;
    const std::uintptr_t hi = (b->addr + b->size + chunk - 1) / chunk * chunk;
    lo = std::max(lo, covered);
    for (std::uintptr_t at = lo; at < hi; at += chunk) {
      const bool held = std::any_of(a.held.begin(), a.held.end(), [at](const address_span& s) {
        return at >= s.lo && at < s.hi;
      });
      if (!held) n += chunk;
    }
    covered = std::max(covered, hi);
  }
  return n;
}

void sleeper::before_release(pool_record& p) {
  if (!begin(p, phase::asleep, phase::waking, false)) {
    std::lock_guard<std::mutex> lock(mutex_);
    const phase now = record(p.id).now;
    CACHALOT_EXPECTS(now == phase::awake, invalid_argument,
                     "release_pool: pool {} ('{}') is {}; wait for it", p.id, p.options.name,
                     now == phase::entering ? "going to sleep" : "waking");
    return;
  }
  std::size_t live = 0;
  {
    engine::all_streams_lock all(e_);
    for (const stream_state* ss : all.streams()) {
      if (ss->pool != &p) continue;
      for (const segment* seg = ss->segments; seg != nullptr; seg = seg->next) live += seg->live;
    }
  }
  if (live != 0) {
    finish(p, phase::asleep);
    CACHALOT_FAIL(invalid_argument,
                  "release_pool: pool {} ('{}') is asleep with {} live block(s): free them (that "
                  "makes no device call) or wake it before releasing it",
                  p.id, p.options.name, live);
  }
  thaw(p, {});  // nothing to map: its segments are empty, and go with the pool
  (void)release_host(p.id);  // (a buffer the device keeps is freed at the teardown)
  finish(p, phase::awake);
}

void sleeper::destroy(segment* seg) noexcept {
  std::vector<address_span> held;
  {
    std::lock_guard<std::mutex> lock(mutex_);
    for (const auto& r : records_) {
      if (!r) continue;
      for (const asleep_segment& a : r->segments) {
        if (a.seg == seg) held = a.held;
      }
    }
  }
  bool clean = true;
  for (const address_span& s : held) {
    for (std::uintptr_t at = s.lo; at < s.hi; at += e_.chunk_) {
      try {
        e_.backend_->unmap_chunk(reinterpret_cast<void*>(at), e_.chunk_);
      } catch (...) {
        clean = false;
      }
    }
  }
  if (!clean) return;  // a range with chunks still mapped cannot be released
  try {
    e_.backend_->release_address_range(reinterpret_cast<void*>(seg->base), seg->range_size);
  } catch (...) {
  }
}

}  // namespace cachalot::detail
