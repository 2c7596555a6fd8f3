// The engine's optional knobs, each off by default and costing the default paths at most one
// predictable branch:
//  - roundup_power2_divisions: PyTorch's rounding of request sizes (round_up calls
//    round_divisions only when some division is above 1);
//  - reserve: one device allocation at start (a reserve_arena) that growth carves segments from
//    and released segments go back to; the reserve itself is returned only at destruction;
//  - max_cached: after a free that leaves idle (wholly free) segments, the idle bytes of every
//    stream are summed and whole segments released, the freeing stream's first, largest first
//    in each stream, down to the cap (frees take the claimed path while it is set);
//  - the out-of-memory callback: when even a released cache cannot serve an allocation, the
//    user's function is called (no lock held) and may free memory and ask for a retry, at most
//    max_retries times; allocations it makes itself never call it again, and retries it asked
//    for fail quietly (no OOM counted, no failure traced) until the last one.
#include <algorithm>

#include "cachalot/config.hpp"
#include "detail/callback_scope.hpp"
#include "detail/checks.hpp"
#include "detail/engine.hpp"

namespace cachalot::detail {

// --- roundup_power2_divisions ----------------------------------------------------------------

std::size_t engine::round_divisions(std::size_t bytes) const noexcept {
  return round_request(bytes, granularity_, cfg_.divisions_for(bytes));
}

// --- reserve ---------------------------------------------------------------------------------

void engine::start_reserve() {
  if (cfg_.reserve == 0) return;
  CACHALOT_EXPECTS(gstats_.reserve_room(cfg_.reserve, memory_limit_), invalid_argument,
                   "config key 'reserve': {} exceeds the memory limit ({})",
                   format_bytes(cfg_.reserve), format_bytes(memory_limit_));
  void* base = nullptr;
  try {
    base = backend_->allocate_segment(cfg_.reserve, nullptr);
  } catch (...) {
    gstats_.release_room(cfg_.reserve);
    throw;
  }
  if (base == nullptr) {
    gstats_.release_room(cfg_.reserve);
    oom_info info;
    info.requested_bytes = cfg_.reserve;
    info.device_total = device_total_;
    info.memory_limit = memory_limit_;
    throw out_of_memory(
        info,
        detail::format("cachalot: out of memory: the device cannot supply the "
                       "reserve of "
                       "{} (config key 'reserve') on device {} when the allocator starts",
                       format_bytes(cfg_.reserve), backend_->device()),
        __FILE__, __LINE__);
  }
  const std::size_t alignment = std::max(granularity_, backend_->segment_alignment());
  arena_ = std::make_unique<reserve_arena>(reinterpret_cast<std::uintptr_t>(base), cfg_.reserve,
                                           alignment);
}

void* engine::carve_reserve(pool_record& pool, std::size_t bytes) {
  // The reserve's room was taken from the memory limit at start; a carve counts against its
  // pool's own limit and, like a device allocation (reserve_room), must leave every other
  // pool's guarantee its room: what the pools hold (the reserve's carved part and the device's
  // own segments) plus this carve plus the guaranteed bytes not yet reserved stays within the
  // budget. The reserve's free part and the pools' bytes change together under budget_mutex_
  // (return_segment), so the sum is exact.
  std::lock_guard<std::mutex> lock(budget_mutex_);
  const std::size_t mine = pool.committed.load(std::memory_order_relaxed);
  if (pool.options.limit != 0 && mine + bytes > pool.options.limit) return nullptr;
  if (const std::size_t held = unreserved_guarantees(guaranteed_, pool); held != 0) {
    const std::size_t total = memory_limit_ != 0 ? memory_limit_ : device_total_;
    const std::size_t in_pools = gstats_.committed() - arena_->free_bytes();
    if (in_pools + bytes + held > total) return nullptr;
  }
  void* p = arena_->carve(bytes);
  if (p != nullptr) pool.committed.fetch_add(bytes, std::memory_order_relaxed);
  return p;
}

void engine::return_segment(pool_record& pool, std::uintptr_t base, std::size_t size,
                            bool* to_reserve) {
  *to_reserve = arena_ && arena_->contains(base);
  if (!*to_reserve) return backend_->free_segment(reinterpret_cast<void*>(base), size);
  std::lock_guard<std::mutex> lock(budget_mutex_);  // with the pool's bytes (carve_reserve)
  arena_->give_back(base, size);
  pool.committed.fetch_sub(size, std::memory_order_relaxed);  // its room stays reserved
}

// --- max_cached ------------------------------------------------------------------------------

void engine::cap_idle(stream_state& ss) noexcept {
  try {
    {
      // Only a stream that now holds idle bytes can have taken the total over the cap: every
      // path that makes a segment idle ends here.
      std::lock_guard<spinlock> lock(ss.lock);
      if (ss.stats.whole_free(0) + ss.stats.whole_free(1) == 0) return;
    }
    std::size_t idle = 0;
    {
      all_streams_lock all(*this);
      for (const stream_state* s : all.streams()) {
        idle += s->stats.whole_free(0) + s->stats.whole_free(1);
      }
    }
    if (idle > max_cached_) release_idle(ss, idle - max_cached_);
  } catch (...) {
    // A segment the device would not take back stays cached (and counted): the free itself
    // succeeded and must not report a failure.
  }
}

std::size_t engine::release_idle(stream_state& ss, std::size_t bytes) {
  // Idle segments of every pool that may give, the freeing stream's first, largest first.
  std::vector<pool_record*> from;
  {
    std::shared_lock<std::shared_mutex> lock(registry_mutex_);
    for (const auto& q : pools_) {
      if (!q->retired && !q->pinned()) from.push_back(q.get());
    }
  }
  std::lock_guard<std::mutex> release_lock(release_mutex_);
  release_bounds b;
  b.want = bytes;
  return release_pass(from, &ss, b);
}

// --- out-of-memory callback ------------------------------------------------------------------

void engine::set_oom_callback(std::function<bool(std::size_t, stream_t)> callback,
                              unsigned max_retries) {
  std::lock_guard<std::mutex> lock(oom_mutex_);
  oom_callback_ = std::move(callback);
  oom_retries_ = max_retries;
  has_oom_callback_.store(static_cast<bool>(oom_callback_), std::memory_order_release);
}

bool engine::quiet_oom() const noexcept {
  return callback_scope::retrying(this);
}

block* engine::retry_after_oom_callback(stream_state& ss, pool_kind pool, std::size_t rounded,
                                        std::size_t requested) {
  // The callback's own allocation, or a retry's (reclaim callbacks included): no recursion.
  if (callback_scope::inside(this, callback_scope::oom_callback) ||
      callback_scope::inside(this, callback_scope::retry)) {
    return nullptr;
  }
  std::function<bool(std::size_t, stream_t)> callback;
  unsigned retries = 0;
  {
    std::lock_guard<std::mutex> lock(oom_mutex_);
    callback = oom_callback_;
    retries = oom_retries_;
  }
  for (unsigned attempt = 0; callback && attempt < retries; ++attempt) {
    bool again = false;
    {
      callback_scope scope(this, callback_scope::oom_callback);
      again = callback(requested, ss.stream);  // may throw: out of allocate, nothing changed
    }
    if (!again) return nullptr;
    gstats_.num_retries.fetch_add(1, std::memory_order_relaxed);
    try {
      callback_scope scope(this, callback_scope::retry);
      return allocate_slow(ss, pool, rounded, requested, false);
    } catch (const oom_retry&) {
    }
  }
  return nullptr;
}

}  // namespace cachalot::detail
