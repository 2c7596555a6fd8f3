// The caching engine behind cachalot::allocator.
//
// Layers: allocator (public facade) -> engine (this file) -> device_backend. The engine keeps,
// per stream and memory pool (detail/pool.hpp), segments tiled by blocks and a segregated-fit
// free index per size class; a sharded pointer map finds a block from its address; a stats
// tracker counts everything. Routes (pool.cpp) decide which pool's state of a stream an
// allocation uses (detail/stream_registry.hpp caches the answer per thread). What to release
// and when large blocks stay whole is the release policy's (detail/release_policy.hpp).
//
// Hot path (inline, in engine_hot.hpp, engine_blocks.hpp and engine_lanes.hpp): allocate =
// thread-local stream lookup, then a hit in the thread's lane of the stream's thread cache
// (detail/thread_cache.hpp: one uncontended lock, no map write), else one stream lock, an O(1)
// index lookup, maybe a split, a stats update, a map insert. deallocate = a lock-free map
// lookup and the block's `released` flag, then the thread's lane, else a map erase, one stream
// lock, coalescing, a stats update. Neither calls the backend.
// Cold paths: growth and out of memory (engine_slow.cpp, pool_reclaim.cpp), releases
// (release.cpp), pending events (deferred_free.cpp), snapshots and stats (engine.cpp).
// Checked mode (config debug:1, checked.cpp) and pass-through mode (caching:0) share one
// out-of-line free path, so the default hot path pays one branch each way, as tracing does.
//
// Locks and the order they are taken in: detail/all_streams_lock.hpp.
#pragma once

#include <array>
#include <atomic>
#include <condition_variable>
#include <cstddef>
#include <cstdint>
#include <exception>
#include <functional>
#include <memory>
#include <mutex>
#include <shared_mutex>
#include <string>
#include <unordered_map>
#include <vector>

#include "cachalot/backend.hpp"
#include "cachalot/config.hpp"
#include "cachalot/stats.hpp"
#include "detail/block.hpp"
#include "detail/capture.hpp"
#include "detail/expandable.hpp"
#include "detail/global_stats.hpp"
#include "detail/peak_ledger.hpp"
#include "detail/pointer_map.hpp"
#include "detail/pool.hpp"
#include "detail/release_policy.hpp"
#include "detail/reserve_arena.hpp"
#include "detail/stream_registry.hpp"
#include "detail/stream_state.hpp"
#include "detail/trace_writer.hpp"

namespace cachalot::detail {

class sleeper;

/// The caching engine. Thread-safe.
class engine {
 public:
  engine(const config& cfg, std::shared_ptr<device_backend> backend);
  ~engine();
  engine(const engine&) = delete;
  engine& operator=(const engine&) = delete;

  /// See allocator::allocate.
  void* allocate(std::size_t bytes, stream_t stream) {
    if (bytes == 0) return nullptr;
    if (bytes > max_request_) [[unlikely]]
      fail_impossible(bytes, stream);
    return allocate_on(state_for(stream), bytes, stream);
  }

  /// See allocator::allocate(bytes, stream, pool).
  void* allocate(std::size_t bytes, stream_t stream, pool_id pool) {
    if (bytes == 0) return nullptr;
    if (bytes > max_request_) [[unlikely]]
      fail_impossible(bytes, stream);
    return allocate_on(state_in(pool, stream), bytes, stream);
  }

  /// Allocates `bytes` (0 < bytes <= max_request_) from `ss`, the state of `stream`.
  void* allocate_on(stream_state& ss, std::size_t bytes, stream_t stream);

  /// See allocator::deallocate. `on_stream`: `stream` names where the block was last used.
  void deallocate(void* ptr, stream_t stream, bool on_stream) {
    if (ptr == nullptr) return;
    if (slow_free_) [[unlikely]]
      return deallocate_slow(ptr, stream, on_stream, nullptr);
    free_cached(ptr, stream, on_stream);
  }

  /// See allocator::deallocate(ptr, size, stream): `size` is checked in checked mode only.
  void deallocate_sized(void* ptr, std::size_t size, stream_t stream) {
    if (ptr == nullptr) return;
    if (slow_free_) [[unlikely]]
      return deallocate_slow(ptr, stream, true, &size);
    free_cached(ptr, stream, true);
  }

  void record_stream(void* ptr, stream_t stream);
  void empty_cache();
  std::size_t trim(std::size_t target_reserved_bytes);
  void process_events() {
    if (pending_count_.load(std::memory_order_acquire) != 0) poll_pending(false);
  }

  memory_stats stats() const { return stats_of(nullptr); }
  void reset_peak_stats();
  memory_snapshot snapshot() const;
  std::string memory_summary() const;
  std::size_t allocation_size(const void* ptr) const;
  bool owns(const void* ptr) const noexcept;

  // Memory pools (pool.cpp): see allocator.hpp.
  pool_id create_pool(const pool_options& options);
  void retain_pool(pool_id pool);
  void release_pool(pool_id pool);
  void begin_allocate_to_pool(pool_id pool, stream_t stream, stream_filter filter);
  void end_allocate_to_pool(pool_id pool);
  pool_id pool_of(const void* ptr) const;
  memory_stats stats(pool_id pool) const;
  std::vector<pool_info> pools() const;

  const config& get_config() const noexcept { return cfg_; }
  device_backend& backend() const noexcept { return *backend_; }
  /// Sleep and wake of tenant pools (detail/pool_sleep.hpp).
  sleeper& sleep_control() const noexcept { return *sleep_; }

  /// See allocator::set_oom_callback (engine_knobs.cpp).
  void set_oom_callback(std::function<bool(std::size_t, stream_t)> callback, unsigned max_retries);

 private:
  /// Why a growth got no segment: the pool's limit, the allocator's limit or the other pools'
  /// guarantees (budget), or the device.
  enum class refusal : std::uint8_t { none, pool_limit, budget, device };

  struct pending_free {
    block* b;
    std::vector<event_t> events;
    /// Streams whose events are still to be recorded (the free came while a capture may have
    /// been under way): the first poll after every capture ended records them.
    std::vector<stream_t> unrecorded;
  };

  /// The caching free: the block goes back to its stream's free index at once, or, if it was
  /// used on other streams, after events recorded there complete. Anything but the plain case
  /// (another stream involved, tracing, a stats ceiling crossed) claims the block under the
  /// stream lock and continues out of line, so that a racing record_stream fails cleanly.
  void free_cached(void* ptr, stream_t stream, bool on_stream);

  /// free_cached for a block taken out of the pointer map.
  void free_listed(block* b, stream_t stream, bool on_stream);
  /// The free of claimed block `b` of an asleep segment (pool_sleep.cpp): no device call.
  [[gnu::noinline]] void free_asleep(block* b, stream_t last_used);
  friend class sleeper;
  // --- thread cache: inline in detail/engine_lanes.hpp, cold parts in thread_cache.cpp ---
  /// A block of lane `l` (of `ss`) for `rounded` bytes, or nullptr.
  block* tc_take(stream_state& ss, tc_lane& l, pool_kind pool, std::size_t rounded,
                 std::size_t requested);
  /// Caches `b` (won by this free) in the calling thread's lane if it may; false: not cached.
  bool tc_put(block* b, stream_t stream, bool on_stream);

  std::size_t round_up(std::size_t bytes) const noexcept {
    if (rounding_) [[unlikely]]
      return round_divisions(bytes);
    return (bytes + granularity_ - 1) & ~(granularity_ - 1);
  }

  /// The free index (band) of a request: the lower band of a pool holds requests below
  /// band_split_ (0 without caching: every request in the upper band).
  std::size_t band_of(pool_kind pool, std::size_t rounded) const noexcept {
    const auto p = static_cast<std::size_t>(pool);
    return 2 * p + (rounded >= band_split_[p] ? 1 : 0);
  }
  /// Under ss.lock: the band of a segment made for a request of `band`. With
  /// `size_bands:lazy` a pool's first segment on a stream is an upper-band one, shared by both
  /// bands: a lower band gets segments of its own only once its pool has one and none of its
  /// free blocks fits (docs/design.md, "Size bands").
  std::size_t growth_band(const stream_state& ss, std::size_t band) const noexcept {
    return lazy_bands_ && band % 2 == 0 && ss.kind_segments(band / 2) == 0 ? band + 1 : band;
  }

  /// The state an allocation on `stream` uses: the routed pool's (default pool if none).
  stream_state& state_for(stream_t stream) {
    stream_cache& c = t_stream_cache;
    const std::uint64_t key = route_key_.load(std::memory_order_relaxed);
    for (const auto& e : c.entries) {
      if (e.engine_id == key && e.stream == stream) [[likely]]
        return *e.state;
    }
    return state_for_slow(stream);
  }

  /// The state of `stream` in `pool` (an explicit pool allocation).
  stream_state& state_in(pool_id pool, stream_t stream) {
    stream_cache& c = t_pool_stream_cache;
    const std::uint64_t key = route_key_.load(std::memory_order_relaxed);
    for (const auto& e : c.entries) {
      if (e.engine_id == key && e.stream == stream && e.pool == pool) return *e.state;
    }
    return state_in_slow(pool, stream);
  }

  /// Under ss.lock: takes a cached block of `rounded` bytes, or returns nullptr: no block fits,
  /// or (`*over_ceiling` set) taking it would cross a stats ceiling: redo under a ceiling_lock
  /// with `forced`, which applies the stats unchecked.
  block* take_cached(stream_state& ss, pool_kind pool, std::size_t rounded, std::size_t requested,
                     bool forced, bool* over_ceiling);
  /// Under ss.lock, no block of `band` fits: a block of another index that may serve the
  /// request (a lower band with no segment: the upper band's; relaxed: an oversize block).
  block* take_elsewhere(stream_state& ss, std::size_t band, std::size_t rounded, bool oversize);
  /// Under ss.lock: hands out free block `b` (still in the free structures) for `rounded`
  /// bytes, splitting off the remainder when worth keeping; see take_cached for the rest.
  block* claim(stream_state& ss, block* b, pool_kind pool, std::size_t rounded,
               std::size_t requested, bool forced, bool* over_ceiling);
  /// Under ss.lock, its stats counted: allocates free `b` (split at `split_at` unless 0).
  block* hand_out(stream_state& ss, block* b, std::size_t split_at, std::size_t requested);
  /// Reserved bytes of the segment if freeing `b` (allocated or pending) leaves it with no
  /// live block, else 0.
  static std::size_t whole_after_free(const block* b) noexcept;
  /// Under ss.lock: frees an allocated block (not deferred). False, with nothing changed, if its
  /// stats would cross a ceiling (then redo with `forced` under a ceiling_lock). `held`: a lane
  /// the caller has locked.
  bool free_block(stream_state& ss, block* b, bool forced, const tc_lane* held = nullptr);
  bool should_split(const block* b, std::size_t rounded) const noexcept;
  bool should_split_size(pool_kind pool, std::size_t size, std::size_t rounded) const noexcept;
  void split(stream_state& ss, block* b, std::size_t rounded);
  void insert_free(stream_state& ss, block* b);
  void remove_free(stream_state& ss, block* b);
  /// Under ss.lock: makes `b` free, merged with its free neighbours; returns the merged block.
  block* coalesce_free(stream_state& ss, block* b);
  /// Under ss.lock: frees an allocated or pending block, coalescing it with free neighbours.
  /// (Whether that leaves the segment wholly free is known beforehand: whole_after_free.)
  void release_block(stream_state& ss, block* b);
  /// Under ss.lock: fixed segment `seg` has no live block and is not indexed: index it.
  [[gnu::noinline]] void note_idle(stream_state& ss, segment* seg);
  /// Under ss.lock: takes `seg` out of its pool's idle index if it is in.
  void unindex(stream_state& ss, segment* seg);
  /// Under ss.lock: puts `ss` (with expandable segments) on the list release passes visit.
  [[gnu::noinline]] void list_for_release(stream_state& ss);

  class all_streams_lock;  // the stats mutex with every stream lock (all_streams_lock.hpp)
  class ceiling_lock;      // the stats mutex with one state's locks (all_streams_lock.hpp)

  // --- thread cache, cold parts (thread_cache.cpp) ---
  [[gnu::noinline]] block* tc_take_forced(tc_lane& l, pool_kind pool, std::size_t rounded,
                                          std::size_t requested);
  [[gnu::noinline]] bool tc_put_forced(tc_lane& l, block* b);
  /// Under l.lock, `l` full: frees its oldest block on `ss` (tried) to make room; false if not.
  [[gnu::noinline]] bool tc_evict(stream_state& ss, tc_lane& l);
  [[gnu::noinline]] bool tc_borrow(stream_state& ss, tc_lane& me, pool_kind pool, std::size_t size,
                                   std::size_t requested, std::uint64_t inactive, bool alloc);
  /// An allocation of `ss` crossed a ceiling: takes its lanes' slack (tried), then retries.
  block* tc_take_lent(stream_state& ss, pool_kind pool, std::size_t rounded, std::size_t requested);
  bool tc_drain(stream_state& ss);  // ss and its lanes seized: their blocks freed unchecked
  void tc_flush();
  block* tc_flush_and_take(stream_state& ss, pool_kind pool, std::size_t rounded,
                           std::size_t requested);
  void tc_attach(stream_state& ss, pool_record& pool);
  void tc_view(const std::vector<const stream_state*>& list, memory_stats& s) const;
  // claim() and free_block() in a segment a lane owns or that is marked (thread_cache_marks.cpp).
  [[gnu::noinline]] block* claim_marked(stream_state& ss, block* b, pool_kind pool,
                                        std::size_t split_at, std::size_t requested, bool forced,
                                        bool* over_ceiling);
  [[gnu::noinline]] bool free_owned(stream_state& ss, block* b, bool forced, const tc_lane* held);

  // --- cold paths (engine_slow.cpp) ---
  [[gnu::noinline]] stream_state& state_for_slow(stream_t stream);
  [[gnu::noinline]] block* allocate_slow(stream_state& ss, pool_kind pool, std::size_t rounded,
                                         std::size_t requested, bool over_ceiling);
  [[gnu::noinline]] bool free_claimed(block* b, stream_t last_used);
  void release_claimed(block* b);
  void defer_free(block* b, std::vector<stream_t> used_on, const std::vector<stream_t>& streams);
  void trace_free(const block* b) noexcept;
  [[gnu::noinline]] block* take_all_locked(stream_state& ss, pool_kind pool, std::size_t rounded,
                                           std::size_t requested);
  void complete_pending(stream_state& ss, block* b);
  [[gnu::noinline]] block* find_oversize(stream_state& ss, std::size_t rounded);
  [[gnu::noinline]] void insert_oversize(stream_state& ss, block* b);
  [[gnu::noinline]] void remove_oversize(stream_state& ss, block* b);
  [[gnu::noinline]] void deallocate_passthrough(void* ptr, stream_t stream, bool on_stream);
  // Checked mode and pass-through frees (checked.cpp): validation, poisoning, dispatch.
  [[gnu::noinline]] void deallocate_slow(void* ptr, stream_t stream, bool on_stream,
                                         const std::size_t* size);
  [[gnu::noinline]] void after_allocate(block* b, std::size_t bytes, stream_t stream);
  /// Validates a free (throws invalid_pointer, changing nothing); returns the block's size if
  /// it becomes free at once, 0 if it will wait for events.
  std::size_t check_free(void* ptr, stream_t stream, bool on_stream, const std::size_t* size);
  void poison(std::uintptr_t addr, std::size_t size) const noexcept;
  void check_poison(const block* b, stream_t stream);
  [[noreturn, gnu::noinline, gnu::cold]] void fail_impossible(std::size_t bytes, stream_t stream);
  [[noreturn, gnu::noinline, gnu::cold]] void fail_invalid_free(void* ptr) const;
  [[noreturn, gnu::noinline, gnu::cold]] void fail_oom(std::size_t bytes, stream_t stream,
                                                       const char* why,
                                                       const pool_record* pool = nullptr);
  std::string describe(std::uintptr_t addr) const;

  std::size_t segment_size_for(pool_kind pool, std::size_t rounded) const noexcept;
  void* grow(std::size_t bytes, stream_t stream, pool_record& pool, bool in_capture, refusal* why);
  block* add_segment(stream_state& ss, pool_kind pool, void* base, std::size_t size,
                     std::size_t rounded, std::size_t requested);
  void poll_pending(bool wait);
  void finish_pending(block* b) noexcept;
  event_t acquire_event();
  void recycle_event(event_t e) noexcept;
  std::size_t release_cached(std::size_t target_reserved, bool largest_first);
  /// One release pass (release.cpp), release_mutex_ held: see release_free_segments.
  std::size_t release_pass(const std::vector<pool_record*>& from, stream_state* first,
                           release_bounds& bounds);
  // --- expandable segments (expandable.cpp) ---
  std::size_t growth_bytes(pool_kind pool, std::size_t rounded,
                           std::size_t seg_size) const noexcept;
  /// Expandable segments: bytes per mapped chunk of a pool's segments (config large_chunk).
  std::size_t chunk_of(pool_kind pool) const noexcept {
    return pool == pool_kind::large ? large_chunk_ : chunk_;
  }
  block* grow_memory(stream_state& ss, pool_kind pool, std::size_t rounded, std::size_t requested,
                     std::size_t seg_size, refusal* why);
  block* grow_expandable(stream_state& ss, pool_kind pool, std::size_t rounded,
                         std::size_t requested, bool* no_space, refusal* why);
  growth_span new_expandable(stream_state& ss, pool_kind pool, std::size_t band, std::size_t bytes);
  std::size_t map_span(const block* span, std::uint64_t& maps, std::uint64_t& unmaps,
                       std::exception_ptr& error);
  block* attach(stream_state& ss, const growth_span& g, std::size_t mapped, std::uint64_t maps,
                std::uint64_t unmaps);
  void drop_fresh(stream_state& ss, segment* seg);
  bool device_has(std::size_t bytes, std::size_t chunk);
  void collect_spans(stream_state& ss, std::vector<release_candidate>& out,
                     std::size_t budget) const;
  std::size_t pick_span(span_batches& spans, release_candidate c, std::size_t over);
  std::string mapped_note() const;
  std::size_t release_spans(stream_state& ss, const std::vector<release_candidate>& picks);
  void restore_span(stream_state& ss, const unmap_span& u, std::size_t unmapped);
  std::vector<segment*> unlink_empty(stream_state& ss);
  void release_ranges(stream_state& ss, const std::vector<segment*>& empty);
  void sync_stream(stream_t stream);
  bool vm_allowed(stream_t stream);
  void destroy_expandable(segment* seg) noexcept;
  bool release_segment(stream_state& ss, segment* seg);
  void release_or_keep(stream_state& ss, segment* seg) noexcept;
  std::vector<stream_state*> states() const;
  // Knobs (engine_knobs.cpp): roundup_power2_divisions, the reserve, the idle-cache cap and the
  // out-of-memory callback. Each costs the default paths at most one predictable branch.
  [[gnu::noinline]] std::size_t round_divisions(std::size_t bytes) const noexcept;
  void start_reserve();
  void* carve_reserve(pool_record& pool, std::size_t bytes);
  void return_segment(pool_record& pool, std::uintptr_t base, std::size_t size, bool* to_reserve);
  void cap_idle(stream_state& ss) noexcept;
  std::size_t release_idle(stream_state& ss, std::size_t bytes);
  block* retry_after_oom_callback(stream_state& ss, pool_kind pool, std::size_t rounded,
                                  std::size_t requested);
  bool quiet_oom() const noexcept;
  memory_stats stats_of(const pool_record* only) const;

  // --- memory pools (pool.cpp, pool_reclaim.cpp) ---
  [[gnu::noinline]] stream_state& state_in_slow(pool_id pool, stream_t stream);
  pool_record& pool_by_id(pool_id pool) const;                 // under registry_mutex_
  stream_state& state_of(pool_record& pool, stream_t stream);  // under registry_mutex_ (unique)
  void remember(stream_cache& cache, std::uint64_t key, stream_t stream, stream_state* state,
                pool_id pool) noexcept;
  void new_route_key() noexcept;
  refusal reserve_room(pool_record& pool, std::size_t bytes);
  void release_room(pool_record& pool, std::size_t bytes) noexcept;
  bool capture_underway() { return captures_.underway(); }
  block* grow_in_capture(stream_state& ss, pool_kind pool, std::size_t rounded,
                         std::size_t requested, std::size_t seg_size);
  block* grow_under_pressure(stream_state& ss, pool_kind pool, std::size_t rounded,
                             std::size_t requested, std::size_t seg_size, refusal why,
                             const char** reason);
  /// The reclaim order (pool_reclaim.cpp) for `p`, refused (`why`) `want` bytes: releases and
  /// sleeps (`first`'s spans first), each followed by `attempt` until it returns true.
  bool relieve(pool_record& p, std::size_t want, const refusal& why,
               const std::function<bool()>& attempt, const char** reason,
               stream_state* first = nullptr);
  /// Releases idle segments and free spans of `from` (release.cpp: release_pass), until
  /// committed() <= target or `want` bytes went (0: no bound). Lanes are not drained.
  std::size_t release_free_segments(const std::vector<pool_record*>& from, bool above_guarantee,
                                    std::size_t target, std::size_t want, stream_state* first);
  std::vector<pool_record*> pools_where(bool (*pick)(const pool_record&, const pool_record&),
                                        const pool_record& requester) const;
  void gc_release(stream_state& requester, std::size_t target);
  std::size_t drain_released();
  void retire_if_empty(pool_record& pool);
  void end_all_routes() noexcept;

  config cfg_;
  std::shared_ptr<device_backend> backend_;
  const std::uint64_t id_;
  std::atomic<std::uint64_t> route_key_;  ///< see stream_cache; read on the hot path
  // Config copied into plain members for the hot path.
  std::size_t granularity_;
  std::size_t small_size_;
  std::size_t max_split_size_;
  std::size_t small_split_remainder_;
  std::size_t large_split_remainder_;
  std::size_t max_request_;
  std::size_t memory_limit_;
  std::size_t device_total_;
  bool caching_;
  bool expandable_ = false;  ///< expandable segments (config and caching on)
  std::size_t chunk_ = 0;    ///< expandable segments: the device's granularity (small-pool chunk)
  std::size_t large_chunk_ = 0;  ///< expandable segments: bytes per large-pool chunk
  std::size_t range_bytes_ = 0;  ///< expandable segments: address space per segment
  std::size_t band_split_[pool_count] = {0, 0};  ///< see band_of
  bool lazy_bands_ = false;                      ///< size_bands:lazy (growth_band)
  // Checked mode (config.debug), poison_: its use-after-free checks on host-accessible memory.
  bool debug_;
  bool poison_;
  bool slow_free_;                 ///< !caching_ || debug_: frees go through deallocate_slow
  bool alloc_hooks_;               ///< tracer_ || poison_: allocations go through after_allocate
  bool free_hooks_;                ///< tracer_ || cap_idle_: every free goes through free_claimed
  bool rounding_;                  ///< roundup_power2_divisions set: round_up calls round_divisions
  bool cap_idle_;                  ///< max_cached set (with caching): frees check the idle bytes
  bool tc_on_;                     ///< thread caches (config thread_cache, none of the modes above)
  std::uint32_t tc_capacity_ = 0;  ///< blocks per lane (config thread_cache)
  std::size_t tc_max_ = 0;         ///< largest block a lane takes (config thread_cache_max_size)
  mutable std::vector<tc_held> tc_scratch_;   ///< settle_marks' list (under stats_mutex_)
  mutable lane_marks tc_marks_{tc_scratch_};  ///< the peak ledger's view of lanes (tc_on_)
  std::size_t max_cached_;
  std::unique_ptr<reserve_arena> arena_;  ///< the reserve, when configured
  /// When to release and when the oversize rule applies (detail/release_policy.hpp).
  std::unique_ptr<release_policy> policy_;

  pointer_map map_;
  mutable global_stats gstats_;
  mutable peak_ledger ledger_;      // granted ceilings and slack lists (detail/peak_ledger.hpp)
  mutable std::mutex stats_mutex_;  // peaks and ceilings; taken before any stream lock
  std::unique_ptr<trace_writer> tracer_;

  // Stream states by (pool, stream), pools and routes: registry_mutex_.
  mutable std::shared_mutex registry_mutex_;
  std::unordered_map<state_key, std::unique_ptr<stream_state>, state_key_hash> registry_;
  std::vector<stream_state*> state_list_;
  std::vector<std::unique_ptr<stream_state>> parked_;  ///< states of retired pools, for reuse
  std::atomic<std::uint64_t> streams_seen_{0};         ///< distinct streams with a state, ever
  /// By id; pools_[0] is the default. Changed only with stats_mutex_ and registry_mutex_
  /// (exclusive) held, so either lock is enough to read it.
  std::vector<std::unique_ptr<pool_record>> pools_;
  std::vector<pool_route> routes_;        ///< most recent last
  std::size_t filter_routes_ = 0;         ///< routes with a filter (no caching)
  std::atomic<std::size_t> draining_{0};  ///< released pools not yet retired
  capture_tracker& captures_ = capture_tracker::instance();
  std::mutex budget_mutex_;               ///< pools' committed bytes against limits
  std::vector<pool_record*> guaranteed_;  ///< live pools with a guarantee (budget_mutex_)

  std::mutex pending_mutex_;
  std::vector<pending_free> pending_;
  std::size_t finishing_ = 0;  ///< blocks taken off pending_ and not yet free (pending_mutex_)
  std::condition_variable finished_;  ///< signalled when finishing_ drops to 0
  std::atomic<std::size_t> pending_count_{0};
  std::mutex events_mutex_;
  std::vector<event_t> free_events_;
  std::mutex release_mutex_;
  std::mutex idle_mutex_;  ///< release_states_: states with expandable segments, for releases
  std::vector<stream_state*> release_states_;
  std::mutex oom_mutex_;  // the out-of-memory callback (a leaf; never held while it runs)
  std::function<bool(std::size_t, stream_t)> oom_callback_;
  unsigned oom_retries_ = 0;
  std::atomic<bool> has_oom_callback_{false};
  std::unique_ptr<sleeper> sleep_;  ///< sleep and wake of tenant pools (pool_sleep.cpp)
};

}  // namespace cachalot::detail

#include "detail/all_streams_lock.hpp"
#include "detail/engine_blocks.hpp"
#include "detail/engine_hot.hpp"
#include "detail/engine_lanes.hpp"
