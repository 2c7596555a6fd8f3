// Tenant pools while they sleep (detail/pool_sleep.hpp): the allocation guard that keeps
// allocations out of a pool that sleeps, the phases of a pool's sleep (one thread at a time
// changes it, others wait), the sleep the allocator decides under pressure (asking the owner's
// callback first, telling it after), frees into an asleep pool (holes, no device call), the
// pools' sleep stats and snapshot entries, and the release and teardown of sleeping pools.
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

// --- frees, stats, snapshots, release and teardown
// ------------------------------------------------

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
  const std::size_t chunk = a.seg->chunk;
  std::size_t n = 0;
  std::uintptr_t covered = 0;  // chunks below this were counted
  for (const block* b = a.seg->first; b != nullptr; b = b->next) {
    if (b->state != block_state::allocated) continue;
    std::uintptr_t lo = a.seg->chunk_down(b->addr);
    const std::uintptr_t hi = a.seg->chunk_up(b->addr + b->size);
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
  thaw(p, {});               // nothing to map: its segments are empty, and go with the pool
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
    for (std::uintptr_t at = s.lo; at < s.hi; at += seg->chunk) {
      try {
        e_.backend_->unmap_chunk(reinterpret_cast<void*>(at), seg->chunk);
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
