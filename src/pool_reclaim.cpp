// Memory pools under pressure (see pool.cpp for the rest): the budget (pool limits and
// guarantees against the allocator's limit), growth during a capture, the reclaim order, and
// retiring released pools.
//
// Reclaim order for a request of pool P (priority p) that got no segment: cached segments of
// released pools and of pools below p (lowest first, largest segment first), then those of
// priority p (P's own first); then the reclaim callbacks of pools below p, lowest first, each
// followed by the release of what it freed; then the cached segments of pools above p, only
// as far as they stay at or above their guarantee; last, sleepable pools below p fall asleep,
// lowest first (detail/pool_sleep.hpp). Each release of a segment's worth (and each sleep) is
// followed by a retry; a wake under pressure goes the same way (relieve). A graph pool's
// segments are never released before the pool is; a request over P's own limit releases only
// P's cache; nothing is released while a capture may be under way.
#include <algorithm>

#include "cachalot/config.hpp"
#include "detail/callback_scope.hpp"
#include "detail/checks.hpp"
#include "detail/engine.hpp"
#include "detail/pool_sleep.hpp"

namespace cachalot::detail {

namespace {
// Stages of the reclaim order, as predicates on (candidate, requester).
bool below(const pool_record& q, const pool_record& r) {
  return q.released.load(std::memory_order_acquire) || q.priority() < r.priority();
}
bool level(const pool_record& q, const pool_record& r) {
  return !q.released.load(std::memory_order_acquire) && q.priority() == r.priority();
}
bool above(const pool_record& q, const pool_record& r) {
  return !q.released.load(std::memory_order_acquire) && q.priority() > r.priority();
}
bool reclaimer_below(const pool_record& q, const pool_record& r) {
  return !q.released.load(std::memory_order_acquire) && q.priority() < r.priority() &&
         static_cast<bool>(q.options.reclaim);
}
bool sleeper_below(const pool_record& q, const pool_record& r) {
  return !q.released.load(std::memory_order_acquire) && q.priority() < r.priority() &&
         q.options.sleepable && !q.asleep.load(std::memory_order_acquire);
}
bool released_only(const pool_record& q, const pool_record&) {
  return q.released.load(std::memory_order_acquire);
}
}  // namespace

// --- budget ----------------------------------------------------------------------------------

engine::refusal engine::reserve_room(pool_record& pool, std::size_t bytes) {
  std::lock_guard<std::mutex> lock(budget_mutex_);
  const std::size_t mine = pool.committed.load(std::memory_order_relaxed);
  if (pool.options.limit != 0 && mine + bytes > pool.options.limit) return refusal::pool_limit;
  const std::size_t total =
      memory_limit_ != 0 ? memory_limit_ : (guaranteed_.empty() ? 0 : device_total_);
  if (total != 0 &&
      gstats_.committed() + bytes + unreserved_guarantees(guaranteed_, pool) > total) {
    return refusal::budget;
  }
  // More than the device holds in all, with what this allocator already has on it: the call
  // would be refused for certain, so it is not made (the out-of-memory sequence follows).
  if (gstats_.committed() + bytes > device_total_) return refusal::device;
  pool.committed.fetch_add(bytes, std::memory_order_relaxed);
  gstats_.reserve_room(bytes, 0);  // no limit: always succeeds
  return refusal::none;
}

void engine::release_room(pool_record& pool, std::size_t bytes) noexcept {
  pool.committed.fetch_sub(bytes, std::memory_order_relaxed);
  gstats_.release_room(bytes);
}

// --- growth during a capture and under pressure ----------------------------------------------

block* engine::grow_in_capture(stream_state& ss, pool_kind pool, std::size_t rounded,
                               std::size_t requested, std::size_t seg_size) {
  const stream_t stream = ss.stream;
  captures_.observe(backend_, stream);
  pool_record& p = *ss.pool;
  if (p.options.type != pool_type::graph) {
    if (tracer_) tracer_->on_allocate_failure(requested, stream);
    CACHALOT_FAIL(not_supported,
                  "cannot allocate {} on stream {}: it is being captured into a CUDA graph, its "
                  "allocations go to pool '{}', which is not a graph pool, and the cache holds no "
                  "free block that fits; route the capturing stream to a graph pool "
                  "(begin_allocate_to_pool) so that the capture can grow it, or allocate before "
                  "capture (warm-up)",
                  format_bytes(requested), fmt::ptr(stream), p.options.name);
  }
  // A segment allocated during the capture stays in the graph pool until the pool is released,
  // so replays never find it freed. Nothing can be released while the capture lasts.
  refusal why = refusal::none;
  if (void* base = grow(seg_size, stream, p, true, &why)) {
    return add_segment(ss, pool, base, seg_size, rounded, requested);
  }
  fail_oom(requested, stream,
           why == refusal::pool_limit
               ? "the pool's limit is reached, and nothing can be released during a CUDA graph "
                 "capture"
               : "the device cannot supply a new segment, and no cached memory can be released "
                 "during a CUDA graph capture",
           &p);
}

block* engine::grow_under_pressure(stream_state& ss, pool_kind pool, std::size_t rounded,
                                   std::size_t requested, std::size_t seg_size, refusal why,
                                   const char** reason) {
  pool_record& p = *ss.pool;
  gstats_.num_retries.fetch_add(1, std::memory_order_relaxed);
  p.num_retries.fetch_add(1, std::memory_order_relaxed);
  block* got = nullptr;
  const auto attempt = [&]() -> bool {
    got = take_all_locked(ss, pool, rounded, requested);
    if (got == nullptr) got = grow_memory(ss, pool, rounded, requested, seg_size, &why);
    return got != nullptr;
  };
  poll_pending(true);  // (does nothing while a capture may be under way)
  tc_flush();          // blocks in thread-cache lanes keep their segments live
  if ((got = take_all_locked(ss, pool, rounded, requested)) != nullptr) return got;
  return relieve(p, seg_size, why, attempt, reason, &ss) ? got : nullptr;
}

bool engine::relieve(pool_record& p, std::size_t want, const refusal& why,
                     const std::function<bool()>& attempt, const char** reason,
                     stream_state* first) {
  bool tried = false;  // an attempt since the last release
  const auto retry = [&]() -> bool {
    tried = true;
    return attempt();
  };
  // Releases cached segments of `q`, largest first, `want` bytes at a time, retrying.
  const auto drain = [&](pool_record* q, bool above_guarantee) -> bool {
    while (release_free_segments({q}, above_guarantee, 0, want, first) != 0) {
      if (retry()) return true;
    }
    return false;
  };
  if (why == refusal::pool_limit) {  // only the pool's own cache can help: others stay as they are
    if (drain(&p, false)) return true;
    if (!tried && retry()) return true;
    *reason = "the pool's limit is reached";
    return false;
  }
  if (!capture_underway()) {
    for (pool_record* q : pools_where(below, p)) {  // released pools, then lowest priority
      if (drain(q, false)) return true;
    }
    std::vector<pool_record*> peers = pools_where(level, p);  // the requester's own cache first
    std::stable_partition(peers.begin(), peers.end(),
                          [&p](const pool_record* q) { return q == &p; });
    for (pool_record* q : peers) {
      if (drain(q, false)) return true;
    }
    // A callback that allocates here under pressure calls no callback (callback_scope.hpp),
    // nor does an allocation inside a sleep callback (pool_sleep.hpp).
    const bool nested =
        callback_scope::inside(this, callback_scope::reclaim) || sleeper::in_callback();
    for (pool_record* q : nested ? std::vector<pool_record*>{} : pools_where(reclaimer_below, p)) {
      try {
        callback_scope scope(this, callback_scope::reclaim);
        (void)q->options.reclaim(q->id, want);
      } catch (...) {  // a failing callback freed what it freed
      }
      poll_pending(true);
      if (drain(q, false)) return true;
    }
    for (pool_record* q : pools_where(above, p)) {
      if (drain(q, true)) return true;
    }
    // Last, sleepable pools below p fall asleep, lowest first (detail/pool_sleep.hpp).
    for (pool_record* q : nested ? std::vector<pool_record*>{} : pools_where(sleeper_below, p)) {
      if (sleep_->sleep_for_pressure(*q, want) && retry()) return true;
    }
  }
  if (!tried && retry()) return true;  // nothing released here; another thread may have
  *reason = why == refusal::budget ? "the memory limit (and the other pools' guarantees) leave "
                                     "no room for a new segment"
            : capture_underway()
                ? "the device cannot supply a new segment, and no cached memory can be released "
                  "while a CUDA graph capture may be under way"
                : "the device cannot supply a new segment";
  return false;
}

std::vector<pool_record*> engine::pools_where(bool (*pick)(const pool_record&, const pool_record&),
                                              const pool_record& requester) const {
  std::vector<pool_record*> out;
  {
    std::shared_lock<std::shared_mutex> lock(registry_mutex_);
    for (const auto& q : pools_) {
      if (!q->retired && !q->pinned() && pick(*q, requester)) out.push_back(q.get());
    }
  }
  std::stable_sort(out.begin(), out.end(), [](const pool_record* a, const pool_record* b) {
    const bool ra = a->released.load(std::memory_order_relaxed);
    const bool rb = b->released.load(std::memory_order_relaxed);
    return ra != rb ? ra : a->priority() < b->priority();
  });
  return out;
}

void engine::gc_release(stream_state& requester, std::size_t target) {
  // Near the limit (the release policy's advice): cached memory of released and lower-priority
  // pools, then of the requester's priority (its own stream first), only as much as needed.
  std::vector<pool_record*> from = pools_where(below, *requester.pool);
  for (pool_record* q : pools_where(level, *requester.pool)) from.push_back(q);
  if (from.empty()) return;
  std::lock_guard<std::mutex> release_lock(release_mutex_);
  if (!policy_->settings().adaptive) tc_flush();  // eager: as before the policy
  release_bounds b;
  b.target = target;
  b.history = true;
  const std::size_t released = release_pass(from, &requester, b);
  if (released != 0) gstats_.num_flushes.fetch_add(1, std::memory_order_relaxed);
  gstats_.num_gc_syncs.fetch_add(b.syncs, std::memory_order_relaxed);
  policy_->on_release_pass();
}

// --- released pools --------------------------------------------------------------------------

std::size_t engine::drain_released() {
  const pool_record* any = nullptr;  // (ignored by released_only)
  {
    std::shared_lock<std::shared_mutex> lock(registry_mutex_);  // create_pool may grow pools_
    any = pools_[0].get();
  }
  const std::vector<pool_record*> dead = pools_where(released_only, *any);
  if (dead.empty()) return 0;
  const std::size_t released = release_free_segments(dead, false, 0, 0, nullptr);
  for (pool_record* p : dead) retire_if_empty(*p);
  return released;
}

void engine::retire_if_empty(pool_record& pool) {
  std::lock_guard<std::mutex> stats_lock(stats_mutex_);
  std::unique_lock<std::shared_mutex> lock(registry_mutex_);
  if (pool.retired) return;
  std::vector<stream_state*> mine;
  for (const auto& [key, ss] : registry_) {
    if (key.pool != &pool) continue;
    std::lock_guard<spinlock> state_lock(ss->lock);
    if (ss->segments != nullptr) return;  // blocks still live or cached there
    mine.push_back(ss.get());
  }
  // Empty: its states leave it, their cumulative counters kept by the pool record.
  for (stream_state* ss : mine) {
    {
      std::lock_guard<spinlock> state_lock(ss->lock);
      pool.retired_totals.absorb(ss->stats);
      ledger_.forget(*ss);
      ss->stats = stream_stats{};
    }
    auto node = registry_.extract(state_key{&pool, ss->stream});
    parked_.push_back(std::move(node.mapped()));
    state_list_.erase(std::find(state_list_.begin(), state_list_.end(), ss));
  }
  pool.retired = true;
  draining_.fetch_sub(1, std::memory_order_acq_rel);
  new_route_key();
}

}  // namespace cachalot::detail
