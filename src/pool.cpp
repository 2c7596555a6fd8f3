// Memory pools of the engine (cachalot/pool.hpp, detail/pool.hpp): creation and lifetime,
// routes from streams to pools, stream states per pool and queries (the summary's pool
// section is in summary.cpp). The budget, growth during a capture, the reclaim order under pressure
// and the retiring of released pools are in pool_reclaim.cpp.
#include <algorithm>

#include "cachalot/config.hpp"
#include "detail/checks.hpp"
#include "detail/engine.hpp"
#include "detail/pool_sleep.hpp"

namespace cachalot::detail {

// --- lifetime and routes ---------------------------------------------------------------------

pool_record& engine::pool_by_id(pool_id pool) const {
  CACHALOT_EXPECTS(pool < pools_.size(), invalid_argument, "no pool with id {} in this allocator",
                   pool);
  return *pools_[pool];
}

void engine::new_route_key() noexcept {
  route_key_.store(unique_key(), std::memory_order_relaxed);
}

void engine::remember(stream_cache& c, std::uint64_t key, stream_t stream, stream_state* state,
                      pool_id pool) noexcept {
  c.entries[c.next] = stream_cache::entry{key, stream, state, pool};
  c.next = (c.next + 1) % static_cast<unsigned>(c.entries.size());
}

pool_id engine::create_pool(const pool_options& options) {
  CACHALOT_EXPECTS(options.limit == 0 || options.guarantee <= options.limit, invalid_argument,
                   "create_pool: the guarantee {} exceeds the pool's limit {}",
                   format_bytes(options.guarantee), format_bytes(options.limit));
  if (options.sleepable) sleep_->check_options(options);
  const std::size_t budget = memory_limit_ != 0 ? memory_limit_ : device_total_;
  std::lock_guard<std::mutex> stats_lock(stats_mutex_);  // pools_ changes under both locks
  std::unique_lock<std::shared_mutex> lock(registry_mutex_);
  std::lock_guard<std::mutex> budget_lock(budget_mutex_);
  std::size_t guaranteed = options.guarantee;
  for (const pool_record* q : guaranteed_) guaranteed += q->options.guarantee;
  CACHALOT_EXPECTS(guaranteed <= budget, invalid_argument,
                   "create_pool: guarantees would total {}, more than the {} this allocator may "
                   "reserve",
                   format_bytes(guaranteed), format_bytes(budget));
  const pool_id id = pools_.size();
  pool_options named = options;
  if (named.name.empty()) named.name = fmt::format("pool {}", id);
  pools_.push_back(std::make_unique<pool_record>(id, named));
  if (options.guarantee != 0) guaranteed_.push_back(pools_.back().get());
  return id;
}

void engine::retain_pool(pool_id pool) {
  std::unique_lock<std::shared_mutex> lock(registry_mutex_);
  pool_record& p = pool_by_id(pool);
  CACHALOT_EXPECTS(!p.released.load(std::memory_order_relaxed), invalid_argument,
                   "retain_pool: pool {} ('{}') was released", pool, p.options.name);
  ++p.references;
}

void engine::release_pool(pool_id pool) {
  std::size_t declared = 0;  // routes that announced a capture
  {
    std::shared_lock<std::shared_mutex> lock(registry_mutex_);
    CACHALOT_EXPECTS(pool != default_pool, invalid_argument,
                     "release_pool: the default pool cannot be released");
    pool_record& p = pool_by_id(pool);
    const bool last = p.references == 1;
    lock.unlock();                        // (records are never deleted)
    if (last) sleep_->before_release(p);  // a sleeping pool: see pool_sleep.hpp
  }
  {
    std::unique_lock<std::shared_mutex> lock(registry_mutex_);
    CACHALOT_EXPECTS(pool != default_pool, invalid_argument,
                     "release_pool: the default pool cannot be released");
    pool_record& p = pool_by_id(pool);
    CACHALOT_EXPECTS(!p.released.load(std::memory_order_relaxed), invalid_argument,
                     "release_pool: pool {} ('{}') was released already", pool, p.options.name);
    if (--p.references != 0) return;
    if (p.asleep.load(std::memory_order_acquire)) {  // it fell asleep meanwhile
      ++p.references;
      CACHALOT_FAIL(invalid_argument, "release_pool: pool {} ('{}') is asleep: wake it first", pool,
                    p.options.name);
    }
    for (auto it = routes_.begin(); it != routes_.end();) {
      if (it->pool != &p) {
        ++it;
        continue;
      }
      if (p.declares_capture()) ++declared;
      if (it->filter) --filter_routes_;
      it = routes_.erase(it);
    }
    p.routes = 0;
    {
      std::lock_guard<std::mutex> budget_lock(budget_mutex_);  // its guarantee ends
      guaranteed_.erase(std::remove(guaranteed_.begin(), guaranteed_.end(), &p), guaranteed_.end());
    }
    p.released.store(true, std::memory_order_release);
    draining_.fetch_add(1, std::memory_order_acq_rel);
    new_route_key();
  }
  for (std::size_t i = 0; i < declared; ++i) captures_.undeclare();
  drain_released();
}

void engine::begin_allocate_to_pool(pool_id pool, stream_t stream, stream_filter filter) {
  bool declares = false;
  {
    std::shared_lock<std::shared_mutex> lock(registry_mutex_);
    const pool_record& p = pool_by_id(pool);
    CACHALOT_EXPECTS(!p.released.load(std::memory_order_relaxed), invalid_argument,
                     "begin_allocate_to_pool: pool {} ('{}') was released", pool, p.options.name);
    declares = p.declares_capture();
  }
  // With no engine lock held: waits until no capture-unsafe call is in flight anywhere.
  if (declares) captures_.declare();
  try {
    std::unique_lock<std::shared_mutex> lock(registry_mutex_);
    pool_record& p = pool_by_id(pool);
    CACHALOT_EXPECTS(!p.released.load(std::memory_order_relaxed), invalid_argument,
                     "begin_allocate_to_pool: pool {} ('{}') was released", pool, p.options.name);
    if (filter) ++filter_routes_;
    routes_.push_back(pool_route{&p, stream, std::move(filter)});
    ++p.routes;
    new_route_key();
  } catch (...) {
    if (declares) captures_.undeclare();
    throw;
  }
}

void engine::end_allocate_to_pool(pool_id pool) {
  bool declares = false;
  {
    std::unique_lock<std::shared_mutex> lock(registry_mutex_);
    pool_record& p = pool_by_id(pool);
    auto it = std::find_if(routes_.rbegin(), routes_.rend(),
                           [&p](const pool_route& r) { return r.pool == &p; });
    CACHALOT_EXPECTS(it != routes_.rend(), invalid_argument,
                     "end_allocate_to_pool: pool {} ('{}') has no active route", pool,
                     p.options.name);
    if (it->filter) --filter_routes_;
    routes_.erase(std::next(it).base());
    --p.routes;
    declares = p.declares_capture();
    new_route_key();
  }
  if (declares) captures_.undeclare();
}

void engine::end_all_routes() noexcept {
  std::unique_lock<std::shared_mutex> lock(registry_mutex_);
  for (const pool_route& r : routes_) {
    if (r.pool->declares_capture()) captures_.undeclare();
  }
  routes_.clear();
  filter_routes_ = 0;
}

// --- stream states ---------------------------------------------------------------------------

stream_state& engine::state_of(pool_record& pool, stream_t stream) {
  auto& slot = registry_[state_key{&pool, stream}];
  if (!slot) {
    // A state of this stream left by a retired pool is reused: it is empty, its counters 0.
    const auto parked = std::find_if(parked_.begin(), parked_.end(),
                                     [stream](const auto& ss) { return ss->stream == stream; });
    if (parked != parked_.end()) {
      slot = std::move(*parked);
      parked_.erase(parked);
      std::lock_guard<spinlock> state_lock(slot->lock);
      slot->pool = &pool;
      slot->peaks = &pool.peaks;
    } else {
      const std::size_t states = state_list_.size() + parked_.size() + 1;
      ledger_.reserve(states * (1 + thread_cache::lane_count));
      {
        std::lock_guard<std::mutex> idle_lock(idle_mutex_);
        release_states_.reserve(states);
      }
      const bool seen = std::any_of(registry_.begin(), registry_.end(), [stream](const auto& e) {
        return e.first.stream == stream && e.second != nullptr;  // (not the new, empty slot)
      });
      if (!seen) streams_seen_.fetch_add(1, std::memory_order_relaxed);  // num_streams
      slot = std::make_unique<stream_state>(stream, &pool, &pool.peaks, &ledger_);
    }
    tc_attach(*slot, pool);  // (a parked state comes from a retired pool: it has no lanes)
    state_list_.push_back(slot.get());
  }
  return *slot;
}

stream_state& engine::state_in_slow(pool_id pool, stream_t stream) {
  std::unique_lock<std::shared_mutex> lock(registry_mutex_);
  pool_record& p = pool_by_id(pool);
  CACHALOT_EXPECTS(!p.released.load(std::memory_order_relaxed), invalid_argument,
                   "allocate: pool {} ('{}') was released", pool, p.options.name);
  stream_state& ss = state_of(p, stream);
  const std::uint64_t key = route_key_.load(std::memory_order_relaxed);
  lock.unlock();
  remember(t_pool_stream_cache, key, stream, &ss, pool);
  return ss;
}

// --- queries ---------------------------------------------------------------------------------

pool_id engine::pool_of(const void* ptr) const {
  const auto addr = reinterpret_cast<std::uintptr_t>(ptr);
  block* b = ptr == nullptr ? nullptr : map_.find(addr);
  if (b != nullptr) {
    std::lock_guard<spinlock> lock(b->owner->lock);
    if (b->addr == addr && b->state == block_state::allocated && !b->freeing &&
        !b->released.load(std::memory_order_relaxed)) {
      return b->owner->pool->id;
    }
  }
  CACHALOT_FAIL(invalid_pointer, "pool_of: {}", describe(addr));
}

memory_stats engine::stats(pool_id pool) const {
  const pool_record* p = nullptr;
  {
    std::shared_lock<std::shared_mutex> lock(registry_mutex_);
    p = &pool_by_id(pool);
  }
  return stats_of(p);  // records are never deleted
}

std::vector<pool_info> engine::pools() const {
  std::shared_lock<std::shared_mutex> lock(registry_mutex_);
  std::vector<pool_info> out;
  for (const auto& p : pools_) {
    pool_info i;
    i.id = p->id;
    i.name = p->options.name;
    i.type = p->options.type;
    i.priority = p->options.priority;
    i.limit = p->options.limit;
    i.guarantee = p->options.guarantee;
    i.references = p->released.load(std::memory_order_relaxed) ? 0 : p->references;
    i.released = p->released.load(std::memory_order_relaxed);
    i.routes = p->routes;
    i.reserved_bytes = p->committed.load(std::memory_order_relaxed);
    i.sleepable = p->options.sleepable;
    i.asleep = p->asleep.load(std::memory_order_relaxed);
    out.push_back(std::move(i));
  }
  return out;
}

}  // namespace cachalot::detail
