// The engine's construction, teardown, stream registry and queries (stats, snapshot, pointer
// queries). The allocation hot path is inline in detail/engine.hpp; the cold paths are in
// engine_slow.cpp; memory pools and routing in pool.cpp.
#include "detail/engine.hpp"

#include <algorithm>
#include <limits>

#include "detail/checks.hpp"
#include "detail/pool_sleep.hpp"

namespace cachalot::detail {

namespace {
std::atomic<std::uint64_t> next_engine_id{1};

std::size_t resolve_limit_of(const config& cfg, std::size_t total) {
  if (cfg.memory_fraction > 0.0) {
    return std::max<std::size_t>(
        1, static_cast<std::size_t>(static_cast<long double>(total) * cfg.memory_fraction));
  }
  return cfg.memory_limit;
}
}  // namespace

std::uint64_t unique_key() noexcept {
  return next_engine_id.fetch_add(1, std::memory_order_relaxed);
}

engine::engine(const config& cfg, std::shared_ptr<device_backend> backend)
    : cfg_(cfg), backend_(std::move(backend)), id_(unique_key()), route_key_(id_) {
  sleep_ = std::make_unique<sleeper>(*this);
  pool_options defaults;
  defaults.name = "default";
  pools_.push_back(std::make_unique<pool_record>(default_pool, defaults));
  cfg_.validate();
  CACHALOT_EXPECTS(backend_ != nullptr, invalid_argument, "allocator: backend is null");
  device_total_ = backend_->memory_info().total;
  granularity_ = cfg_.granularity;
  small_size_ = cfg_.small_size;
  max_split_size_ = cfg_.max_split_size;
  small_split_remainder_ = cfg_.small_split_remainder;
  large_split_remainder_ = cfg_.large_split_remainder;
  memory_limit_ = resolve_limit_of(cfg_, device_total_);
  // get_config() keeps the resolved limit in bytes, so that its to_string() parses back to it;
  // the resolved limit must still hold a segment (and the reserve).
  cfg_.memory_limit = memory_limit_;
  cfg_.memory_fraction = 0.0;
  cfg_.validate();
  caching_ = cfg_.caching;
  const std::size_t slack = std::max(cfg_.segment_rounding, cfg_.large_segment_size);
  max_request_ = std::numeric_limits<std::size_t>::max() - 2 * slack;
  if (!cfg_.trace_file.empty()) {
    tracer_ = std::make_unique<trace_writer>(cfg_.trace_path(backend_->device()));
  }
  debug_ = cfg_.debug;
  poison_ = debug_ && caching_ && backend_->host_accessible();
  slow_free_ = !caching_ || debug_;
  alloc_hooks_ = tracer_ != nullptr || poison_;
  if (caching_ && cfg_.size_bands != band_mode::off) {
    // Size bands: small-pool requests below 1/32 of a small segment, and large-pool requests
    // below segment_rounding (2 MiB), get segments of their own (lazily: growth_band), so that
    // small long-lived blocks cannot pin the segments of larger ones (docs/design.md).
    band_split_[0] = cfg_.small_segment_size / 32;
    band_split_[1] = cfg_.segment_rounding;
  }
  expandable_ = cfg_.expandable_segments && caching_;
  if (expandable_) {
    CACHALOT_EXPECTS(backend_->supports_virtual_memory(), not_supported,
                     "config key 'expandable_segments': the {} backend of device {} has no "
                     "virtual memory support; remove the key to use fixed segments",
                     backend_->name(), backend_->device());
    chunk_ = backend_->vm_granularity();
    large_chunk_ = cfg_.large_chunk == 0 ? chunk_ : cfg_.large_chunk;
    CACHALOT_EXPECTS(large_chunk_ % chunk_ == 0, invalid_argument,
                     "config key 'large_chunk': {} B is not a multiple of the {} backend's "
                     "virtual-memory granularity ({} B) on device {}",
                     large_chunk_, backend_->name(), chunk_, backend_->device());
    const std::size_t span = memory_limit_ != 0 ? memory_limit_ : device_total_;
    range_bytes_ = (span + chunk_ - 1) / chunk_ * chunk_;
    // A remainder left unsplit would stay mapped inside the allocation; split off, it is free
    // memory that the next growth extends. Oversize blocks are not needed either: the whole
    // chunks of any free block can be unmapped, so every block may be split (docs/design.md).
    large_split_remainder_ = 0;
    max_split_size_ = SIZE_MAX;
    // The bands follow the chunk: below 1/32 of a chunk (small pool), below a chunk (large).
    if (band_split_[0] != 0) {
      band_split_[0] = chunk_ / 32;
      band_split_[1] = chunk_;
    }
  }
  // Lazy bands: as configured, but opened at once where a band's own range costs only address
  // space and granules (expandable segments with one-granule chunks).
  lazy_bands_ = band_split_[0] != 0 && cfg_.size_bands == band_mode::lazy &&
                !(expandable_ && large_chunk_ == chunk_);
  rounding_ =
      std::any_of(cfg_.roundup_power2_divisions.begin(), cfg_.roundup_power2_divisions.end(),
                  [](std::uint32_t d) { return d > 1; });
  max_cached_ = cfg_.max_cached;
  cap_idle_ = caching_ && max_cached_ != SIZE_MAX;
  free_hooks_ = tracer_ != nullptr || cap_idle_;
  // (Tracing keeps lanes: a lane's put and take are traced under the lane lock.)
  tc_on_ = caching_ && !debug_ && !cap_idle_ && cfg_.thread_cache != 0;
  tc_capacity_ = static_cast<std::uint32_t>(cfg_.thread_cache);
  // Lanes never hold oversize blocks (max_split_size is at least a small segment).
  tc_max_ = std::min(cfg_.thread_cache_max_size, max_split_size_ - 1);
  if (tc_on_) {
    tc_scratch_.reserve(thread_cache::lane_count * tc_lane::max_capacity);
    ledger_.set_lanes(&tc_marks_);  // (before any holder is made)
  }
  policy_settings ps;
  ps.adaptive = cfg_.release_policy == release_mode::adaptive;
  ps.limit = memory_limit_ != 0 ? memory_limit_ : device_total_;
  ps.gc_threshold = cfg_.gc_threshold;
  ps.pressure_threshold = cfg_.pressure_threshold;
  ps.expandable = expandable_;
  ps.chunk = large_chunk_;  // (the larger chunk: the release mark's slack)
  ps.max_split_size = max_split_size_;
  policy_ = std::make_unique<release_policy>(ps);
  start_reserve();  // last: it may throw, and takes device memory only if nothing else can fail
}

engine::~engine() {
  // Never throws: complete what is pending where the device still answers, then return every
  // segment, live or not, and every event.
  end_all_routes();
  try {
    poll_pending(true);
  } catch (...) {
  }
  std::lock_guard<std::mutex> lock(pending_mutex_);
  for (pending_free& p : pending_) {
    for (event_t e : p.events) free_events_.push_back(e);
  }
  pending_.clear();
  for (event_t e : free_events_) {
    try {
      backend_->destroy_event(e);
    } catch (...) {
    }
  }
  const auto release_all = [this](stream_state* ss) noexcept {
    for (segment* seg = ss->segments; seg != nullptr;) {
      segment* next = seg->next;
      if (seg->expandable()) {
        destroy_expandable(seg);
      } else if (!arena_ || !arena_->contains(seg->base)) {  // the reserve goes back whole, below
        try {
          backend_->free_segment(reinterpret_cast<void*>(seg->base), seg->size);
        } catch (...) {
        }
      }
      delete seg;
      seg = next;
    }
    ss->segments = nullptr;
  };
  for (stream_state* ss : state_list_) release_all(ss);
  for (const auto& ss : parked_) release_all(ss.get());  // empty, unless misused
  if (arena_) {
    try {
      backend_->free_segment(reinterpret_cast<void*>(arena_->base()), arena_->size());
    } catch (...) {
    }
  }
  if (tracer_) tracer_->flush();
}

stream_state& engine::state_for_slow(stream_t stream) {
  // Under registry_mutex_: the pool a route takes `stream` to, most recent route first.
  const auto route = [this, stream]() -> pool_record& {
    for (auto it = routes_.rbegin(); it != routes_.rend(); ++it) {
      if (it->takes(stream)) return *it->pool;
    }
    return *pools_[0];
  };
  stream_state* state = nullptr;
  std::uint64_t key = 0;
  bool cacheable = false;  // a filter's answer may change from call to call: never cached
  {
    std::shared_lock<std::shared_mutex> lock(registry_mutex_);
    if (auto it = registry_.find(state_key{&route(), stream}); it != registry_.end()) {
      state = it->second.get();
    }
    key = route_key_.load(std::memory_order_relaxed);
    cacheable = filter_routes_ == 0;
  }
  if (state == nullptr) {
    std::unique_lock<std::shared_mutex> lock(registry_mutex_);
    state = &state_of(route(), stream);  // routes may have changed: decide again
    key = route_key_.load(std::memory_order_relaxed);
    cacheable = filter_routes_ == 0;
  }
  if (cacheable) remember(t_stream_cache, key, stream, state, default_pool);
  return *state;
}

std::vector<stream_state*> engine::states() const {
  std::shared_lock<std::shared_mutex> lock(registry_mutex_);
  return state_list_;
}

void engine::record_stream(void* ptr, stream_t stream) {
  const auto addr = reinterpret_cast<std::uintptr_t>(ptr);
  block* b = ptr == nullptr ? nullptr : map_.find(addr);
  if (b == nullptr) {
    CACHALOT_FAIL(invalid_pointer, "record_stream: {}", describe(addr));
  }
  stream_state& ss = *b->owner;
  std::lock_guard<spinlock> lock(ss.lock);
  if (b->addr != addr || b->state != block_state::allocated || b->freeing || b->released.load()) {
    CACHALOT_FAIL(invalid_pointer, "record_stream: {:#x} was freed concurrently", addr);
  }
  if (ss.pool->asleep.load(std::memory_order_acquire)) [[unlikely]]
    slow_pass::refuse_record(*ss.pool, addr, stream);
  if (stream == ss.stream) return;
  if (tc_on_) {  // a free racing this one either sees has_uses or is seen here (block.hpp)
    b->has_uses.store(true);
    if (b->released.load()) {
      b->has_uses.store(!b->used_on.empty());
      CACHALOT_FAIL(invalid_pointer, "record_stream: {:#x} was freed concurrently", addr);
    }
  }
  if (std::find(b->used_on.begin(), b->used_on.end(), stream) == b->used_on.end()) {
    b->used_on.push_back(stream);
  }
}

memory_stats engine::stats_of(const pool_record* only) const {
  memory_stats s;
  all_streams_lock all(*this);
  std::vector<const stream_state*> list;
  std::vector<const stats_holder*> holders;  // the streams of `list` and their lanes
  for (const stream_state* ss : all.streams()) {
    if (only != nullptr && ss->pool != only) continue;
    list.push_back(ss);
    holders.push_back(ss);
    if (ss->tcache) {
      for (const tc_lane& l : ss->tcache->lanes) holders.push_back(&l);
    }
  }
  std::vector<const stream_stats*> retired;  // counters of states that left their pools
  for (const auto& p : pools_) {  // pools_ changes only under stats_mutex_, which `all` holds
    if (only == nullptr || p.get() == only) retired.push_back(&p->retired_totals);
  }
  const std::uint64_t(*peaks)[pool_count + 1] = only == nullptr ? nullptr : only->peaks.peak;
  pool_stats* groups[quantity_count] = {};
  groups[q_requested] = &s.requested_bytes;
  groups[q_allocated] = &s.allocated_bytes;
  groups[q_active] = &s.active_bytes;
  groups[q_inactive] = &s.inactive_split_bytes;
  groups[q_allocations] = &s.allocations;
  groups[q_reserved] = &s.reserved_bytes;
  groups[q_segments] = &s.segments;
  for (std::size_t q = 0; q < quantity_count; ++q) {
    stat* by_pool[pool_count + 1] = {&groups[q]->small, &groups[q]->large, &groups[q]->all};
    for (const stats_holder* ss : holders) {
      for (std::size_t p = 0; p < pool_count; ++p) {
        for (stat* st : {by_pool[p], by_pool[pool_count]}) {
          st->current += ss->stats.current(q, p);
          st->allocated += ss->stats.increases(q, p);
          st->freed += ss->stats.decreases(q, p);
        }
      }
    }
    for (const stream_stats* r : retired) {  // their current values are 0
      for (std::size_t p = 0; p < pool_count; ++p) {
        for (stat* st : {by_pool[p], by_pool[pool_count]}) {
          st->allocated += r->increases(q, p);
          st->freed += r->decreases(q, p);
        }
      }
    }
    // Peaks are raised when `all` is released; they are at least the totals just summed.
    for (std::size_t p = 0; p <= pool_count; ++p) {
      const std::uint64_t peak = peaks == nullptr ? gstats_.peak(q, p) : peaks[q][p];
      by_pool[p]->peak = std::max(peak, by_pool[p]->current);
    }
  }
  for (const stream_stats* c : retired) {
    for (const auto& k : stream_counters) s.*k.reported += c->*k.mine;
  }
  for (const stats_holder* h : holders) {  // (a lane counts only its allocations and frees)
    for (const auto& k : stream_counters) s.*k.reported += h->stats.*k.mine;
  }
  for (const stream_state* ss : list) {
    for (const free_index& index : ss->index) {
      s.num_free_blocks += index.count();
      if (const block* b = index.largest()) {
        s.largest_free_block = std::max<std::uint64_t>(s.largest_free_block, b->size);
      }
    }
    s.num_free_blocks += ss->oversize.count();
    if (const block* b = ss->oversize.largest()) {
      s.largest_free_block = std::max<std::uint64_t>(s.largest_free_block, b->size);
    }
  }
  if (tc_on_) tc_view(list, s);  // blocks in lanes: as free blocks (thread_cache.cpp)
  sleep_->add_stats(only, s);
  // Streams, not (pool, stream) states: the pool's, or every stream the allocator has seen.
  s.num_streams = streams_seen_.load(std::memory_order_relaxed);
  if (only != nullptr) {
    std::vector<stream_t> streams;
    for (const stream_state* ss : list) streams.push_back(ss->stream);
    std::sort(streams.begin(), streams.end(), std::less<stream_t>());
    s.num_streams =
        static_cast<std::uint64_t>(std::unique(streams.begin(), streams.end()) - streams.begin());
  }
  s.num_cache_flushes = gstats_.num_flushes.load(std::memory_order_relaxed);
  s.num_device_syncs = gstats_.num_syncs.load(std::memory_order_relaxed);
  s.num_gc_syncs = gstats_.num_gc_syncs.load(std::memory_order_relaxed);
  if (only == nullptr) {
    s.num_ooms = gstats_.num_ooms.load(std::memory_order_relaxed);
    s.num_alloc_retries = gstats_.num_retries.load(std::memory_order_relaxed);
    s.num_use_after_free_writes = gstats_.num_use_after_free.load(std::memory_order_relaxed);
  } else {
    s.num_ooms = only->num_ooms.load(std::memory_order_relaxed);
    s.num_alloc_retries = only->num_retries.load(std::memory_order_relaxed);
    s.num_use_after_free_writes = only->num_use_after_free.load(std::memory_order_relaxed);
  }
  return s;
}

void engine::reset_peak_stats() {
  all_streams_lock all(*this, nullptr, true);
  // Pools with no stream state now have no current value: their peaks become 0. (The others'
  // are set from their totals when `all` is released.) pools_ changes only under stats_mutex_.
  for (const auto& p : pools_) p->peaks = pool_peaks{};
}

memory_snapshot engine::snapshot() const {
  memory_snapshot snap;
  all_streams_lock all(*this);  // one consistent cut, as stats() reads
  for (const stream_state* ss : all.streams()) {
    for (const segment* seg = ss->segments; seg != nullptr; seg = seg->next) {
      segment_info info;
      info.address = seg->base;
      info.size = seg->size;
      info.stream = ss->stream;
      info.pool = seg->pool;
      info.expandable = seg->expandable();
      info.range_size = seg->range_size;
      info.memory_pool = ss->pool->id;
      info.asleep = seg->asleep;
      for (const block* b = seg->first; b != nullptr; b = b->next) {
        // A span being mapped or unmapped shows as the hole it is (or will be) in the stats.
        if (b->state == block_state::unmapped && !info.blocks.empty() &&
            info.blocks.back().state == block_state::unmapped) {
          info.blocks.back().size += b->size;
          continue;
        }
        // A block in a thread-cache lane is free, and shows merged with free neighbours, as
        // a drain would leave it (stats() counts it so too: tc_view).
        if (b->in_lane.load(std::memory_order_relaxed)) {
          if (!info.blocks.empty() && info.blocks.back().state == block_state::free) {
            info.blocks.back().size += b->size;
          } else {
            info.blocks.push_back(block_info{b->addr, b->size, 0, block_state::free});
          }
          continue;
        }
        if (b->state == block_state::free && !info.blocks.empty() &&
            info.blocks.back().state == block_state::free) {
          info.blocks.back().size += b->size;  // (after a block in a lane)
          continue;
        }
        info.blocks.push_back(block_info{b->addr, b->size, b->requested, b->state});
      }
      snap.segments.push_back(std::move(info));
    }
  }
  std::sort(snap.segments.begin(), snap.segments.end(),
            [](const segment_info& a, const segment_info& b) { return a.address < b.address; });
  sleep_->add_snapshot(snap);
  return snap;
}

std::size_t engine::allocation_size(const void* ptr) const {
  const auto addr = reinterpret_cast<std::uintptr_t>(ptr);
  block* b = ptr == nullptr ? nullptr : map_.find(addr);
  if (b != nullptr) {
    std::lock_guard<spinlock> lock(b->owner->lock);
    if (b->addr == addr && b->state == block_state::allocated && !b->freeing &&
        !b->released.load(std::memory_order_relaxed)) {
      return b->size;
    }
  }
  CACHALOT_FAIL(invalid_pointer, "allocation_size: {}", describe(addr));
}

bool engine::owns(const void* ptr) const noexcept {
  const block* b = ptr == nullptr ? nullptr : map_.find(reinterpret_cast<std::uintptr_t>(ptr));
  return b != nullptr && !b->released.load(std::memory_order_relaxed);  // (not in a lane)
}

std::string engine::describe(std::uintptr_t addr) const {
  if (addr == 0) return "null pointer";
  for (stream_state* ss : states()) {
    std::lock_guard<spinlock> lock(ss->lock);
    for (const segment* seg = ss->segments; seg != nullptr; seg = seg->next) {
      if (addr < seg->base || addr >= seg->end()) continue;
      for (const block* b = seg->first; b != nullptr; b = b->next) {
        if (addr < b->addr || addr >= b->addr + b->size) continue;
        const bool cached = b->in_lane.load(std::memory_order_relaxed);  // in a lane: free
        const char* state = b->state == block_state::free || cached ? "free (already freed?)"
                            : b->state == block_state::pending      ? "pending (already freed)"
                            : b->state == block_state::unmapped     ? "unmapped (a hole)"
                                                                    : "allocated";
        if (addr == b->addr) {
          return fmt::format("{:#x} is not a live allocation: its block of {} B on stream {} is {}",
                             addr, b->size, fmt::ptr(ss->stream), state);
        }
        return fmt::format(
            "{:#x} is an interior pointer, {} B into the {} block at {:#x} of {} B on stream {}",
            addr, addr - b->addr, state, b->addr, b->size, fmt::ptr(ss->stream));
      }
    }
  }
  return fmt::format(
      "{:#x} is not a live allocation of this allocator (freed earlier, or never allocated here)",
      addr);
}

}  // namespace cachalot::detail
