// The thread cache: a few recently freed blocks kept aside, per stream state and per thread
// slot, so that a thread that frees and allocates on a stream several threads share takes no
// shared lock and writes no shared cache line on a hit (docs/design.md, "Threads").
//
// A stream state of the default pool has `lane_count` lanes; a thread uses lane
// (its slot number mod lane_count), slots being handed out to threads in order of first use.
// Each lane has its own lock (uncontended unless more than lane_count threads use the stream),
// at most `capacity` blocks, and its own stats counters (a stats_holder in the ceiling scheme
// of detail/stats_tracker.hpp, so peaks stay exact without a shared write).
// Invariants:
//  - A block in a lane is free in the stats, counted as a drain would leave it: the lane
//    counted its free (allocated, requested, active bytes and allocations down; inactive split
//    bytes up by its size). For its stream it is still allocated: it stays in the pointer map
//    (with block::released set) and keeps its segment live.
//  - Wholly free once drained: a segment whose live blocks all lie in lanes is counted wholly
//    free (no inactive-split byte), by a *mark* (segment.hpp) counted on one of its lane blocks
//    as if that block's free had left the segment whole (stream_stats::add_whole). A lane that
//    owns the segment counts the marks itself, exactly, on its hot path (the free of the last
//    live block outside it marks, a take unmarks); so do its stream's allocations and frees in
//    the segment, under the owner's lock. Every other such segment is marked with its stream
//    state and all its lanes locked under the stats mutex (settle_marks: by an all_streams_lock
//    before stats are read, by the ceiling_lock of that state, and by a peak-ledger pull of
//    inactive-split bytes for every state listed for marks_bit), and the mark is consumed by
//    the first take or stream allocation in it (an exchange). Until then an unmarked segment
//    that lanes hold whole is counted higher than a drain would leave it, never lower: no
//    change under the ceilings can then make a new peak; a decrease, the only change that can
//    leave a segment so, lists its holder for marks_bit (detail/stats_tracker.hpp), and every
//    peak of inactive-split bytes is raised from settled counts (detail/peak_ledger.hpp), so
//    peaks are the maxima over consistent states.
//  - Cumulative totals never go back, though a read may have seen a lane block's inactive
//    count before a mark corrects it: a mark counts the segment's bytes as inactive freed and
//    keeps that count (add_whole), and a lane block whose stream's free leaves its unmarked
//    segment wholly free is counted through (stream_stats::count_through). So with lanes the
//    cumulative inactive-split totals may exceed a drain's (by bytes counted in and out again);
//    current values and peaks are a drain's.
//  - Only plain blocks enter a lane: default pool, no other stream recorded or named at the
//    free, at most the configured size, never oversize; never in checked, pass-through or
//    max_cached modes (the engine creates no lanes then). Tracing: a put and a take are
//    traced while the lane lock is held, so the trace stays in ownership order.
//  - A lane hands out only blocks of its own stream state, so stream order makes reuse safe,
//    whichever thread freed the block.
//  - A block leaves a lane for its stream (eviction, drain) with the stream's lock and the
//    lane's both held, so no reader sees it counted by neither: the lane's count of the free
//    is cancelled and the stream frees the block the ordinary way (marks taken back first).
// Lanes belong to the stream state, not to a thread: a thread that exits leaves its blocks to
// the next thread of its slot (and to every drain), and lanes die with their allocator, so no
// thread ever holds a pointer into an allocator that is gone.
#pragma once

#include <array>
#include <atomic>
#include <cstddef>
#include <cstdint>
#include <vector>

#include "detail/block.hpp"
#include "detail/peak_ledger.hpp"
#include "detail/segment.hpp"
#include "detail/spinlock.hpp"
#include "detail/stats_tracker.hpp"

namespace cachalot::detail {

/// One lane: a small stack of free blocks of one stream state, and their stats.
struct alignas(128) tc_lane : stats_holder {
  static constexpr std::uint32_t max_capacity = 64;  ///< most blocks a lane can hold
  static constexpr std::uint32_t max_owned = 4;      ///< most segments a lane owns
  /// `marks` of a block: its segment is owned by this lane, or may be marked without an owner.
  static constexpr std::uint8_t mark_owned = 1, mark_shared = 2;

  // (The peak ledger locks a lane after its stream state, `outer`: thread_cache's constructor.)
  tc_lane() noexcept : stats_holder(nullptr, nullptr, nullptr) { lane_guard = &lock; }

  enum class put_result : std::uint8_t { done, full, over_ceiling };

  /// Under `lock`: the most recently cached block of `pool` whose size `fits`, counted as
  /// allocated (`requested` bytes asked), or nullptr. With `forced` false, a block whose stats
  /// would cross a ceiling is left in place, `*over_ceiling` set to its size and `*over_whole`
  /// to the bytes of wholly free segment it would take (0: none).
  template <class Fits>
  [[gnu::always_inline]] block* take(pool_kind pool, std::size_t requested, bool forced,
                                     std::size_t* over_ceiling, std::size_t* over_whole,
                                     Fits&& fits) {
    for (std::uint32_t i = count; i-- > 0;) {
      const std::size_t size = sizes[i];
      if (pools[i] != pool || !fits(size)) continue;
      if (marks[i] != 0) [[unlikely]]
        return take_marked(i, requested, forced, over_ceiling, over_whole);
      if (!stats.try_alloc(pool, size, requested, 0, !forced)) [[unlikely]] {
        *over_ceiling = size;
        return nullptr;
      }
      return remove(i, requested);
    }
    if (++misses >= miss_limit) {  // a workload the lane does not serve (random sizes)
      misses = 0;
      go_cold();
    }
    return nullptr;
  }

  /// Hot path, no lock: true if the lane is cold (its recent lookups missed), counting this
  /// allocation off the cold period (whether the lane holds blocks or not: a drained lane comes
  /// back too); a cold lane is skipped by allocations and frees.
  bool skip_cold() noexcept {
    const std::uint32_t c = cold.load(std::memory_order_relaxed);
    if (c == 0) [[likely]]
      return false;
    cold.store(c - 1, std::memory_order_relaxed);  // (racy between threads of a slot: harmless)
    return true;
  }

  /// Under `lock` and the stream's, with `count` == `capacity`: takes the oldest block out (its
  /// free no longer counted here: the caller frees it on its stream, and moves the ceiling
  /// room, before the lock is released); `*at`: its slot, for restore(). Any block of a marked
  /// segment may go (the rest still hold it whole) but one of the size its mark was counted on
  /// (maybe its last live block, whose free would count it whole again; and a drain frees one
  /// such last, so that cumulative totals never go back).
  block* evict_oldest(std::uint32_t* at) noexcept {
    std::uint32_t j = 0;
    while (j < count && segs[j]->lane_whole.load(std::memory_order_relaxed) &&
           sizes[j] == segs[j]->whole_size) {
      ++j;
    }
    if (j == count) return nullptr;
    block* b = slots[j];
    stats.cancel_cached_free(pools[j], b->size, b->requested);
    b->in_lane.store(false, std::memory_order_relaxed);
    --count;
    for (std::uint32_t i = j; i < count; ++i) {
      slots[i] = slots[i + 1];
      sizes[i] = sizes[i + 1];
      pools[i] = pools[i + 1];
      segs[i] = segs[i + 1];
      marks[i] = marks[i + 1];
    }
    filled.store(count, std::memory_order_relaxed);
    *at = j;
    return b;
  }

  /// Under `lock`: puts back block `b` that evict_oldest(&at) took out, exactly as it was.
  void restore(block* b, std::uint32_t at) noexcept {
    for (std::uint32_t i = count; i > at; --i) {
      slots[i] = slots[i - 1];
      sizes[i] = sizes[i - 1];
      pools[i] = pools[i - 1];
      segs[i] = segs[i - 1];
      marks[i] = marks[i - 1];
    }
    place(at, b, 0);
    ++count;
    filled.store(count, std::memory_order_relaxed);
    (void)stats.try_free(b->seg->pool, b->size, b->requested, 0, false);  // as its put counted
    ++stats.num_frees;
    b->in_lane.store(true, std::memory_order_relaxed);
  }

  /// Under `lock`: caches allocated block `b`, counting its free, unless `capacity` blocks are
  /// held or (with `forced` false) its stats would cross a ceiling. In a segment this lane owns,
  /// the segment's last live block outside this lane leaves it wholly free: counted so, and the
  /// segment marked.
  put_result put(block* b, std::uint32_t capacity, bool forced) noexcept {
    if (count >= capacity) return put_result::full;
    if (!used.load(std::memory_order_relaxed)) used.store(true, std::memory_order_release);
    segment* seg = b->seg;
    if (owned_count != 0 && owns(seg)) [[unlikely]]
      return put_owned(b, seg, forced);
    if (!stats.try_free(seg->pool, b->size, b->requested, 0, !forced)) [[unlikely]]
      return put_result::over_ceiling;
    add(b, 0);
    return put_result::done;
  }

  /// Under `lock` (and the stream's): takes every block out, cancelling the lane's count of
  /// its free, and appends it to `out`. The segments' marks must have been taken back first.
  template <class Out>
  void drain(Out& out) {
    if (count == 0) return;  // (an unused lane is not locked: write nothing)
    for (std::uint32_t i = 0; i < count; ++i) {
      block* b = slots[i];
      stats.cancel_cached_free(b->seg->pool, b->size, b->requested);
      b->in_lane.store(false, std::memory_order_relaxed);
      out.push_back(b);
    }
    count = 0;
    filled.store(0, std::memory_order_relaxed);
  }

  /// Under `lock`: how many of this lane's blocks lie in `seg`.
  std::size_t held(const segment* seg) const noexcept {
    std::size_t n = 0;
    for (std::uint32_t i = 0; i < count; ++i) n += segs[i] == seg ? 1 : 0;
    return n;
  }
  /// Under `lock`: true if this lane owns `seg`.
  bool owns(const segment* seg) const noexcept {
    for (std::uint32_t k = 0; k < owned_count; ++k) {
      if (owned[k] == seg) return true;
    }
    return false;
  }
  /// Under `lock` and the segment's stream lock: owns `seg` (giving up another if it owns
  /// max_owned already). Its blocks here are flagged in `marks`.
  void own(segment* seg) noexcept {
    if (owned_count == max_owned) disown(owned[0]);
    owned[owned_count++] = seg;
    seg->lane_owner.store(this, std::memory_order_release);
    flag(seg, mark_owned);
  }
  /// Under `lock` and the segment's stream lock: gives up owned `seg` (a mark it has stays, to
  /// be consumed by an exchange).
  void disown(segment* seg) noexcept {
    for (std::uint32_t k = 0; k < owned_count; ++k) {
      if (owned[k] == seg) {
        owned[k] = owned[--owned_count];
        break;
      }
    }
    seg->lane_owner.store(nullptr, std::memory_order_release);
    flag(seg, seg->lane_whole.load(std::memory_order_relaxed) ? mark_shared : 0);
  }
  /// Under `lock`: sets the `marks` of this lane's blocks of `seg`.
  void flag(const segment* seg, std::uint8_t mark) noexcept {
    for (std::uint32_t i = 0; i < count; ++i) {
      if (segs[i] == seg) marks[i] = mark;
    }
  }
  /// Under `lock`: counts `seg`, all of whose live blocks lie in lanes, one of them here,
  /// wholly free here (on that block), and marks it.
  void mark_whole(segment* seg) noexcept {
    for (std::uint32_t i = 0; i < count; ++i) {
      if (segs[i] != seg) continue;
      stats.add_whole(seg->pool, seg->size);
      set_mark(seg, sizes[i]);
      return;
    }
  }
  /// Under `lock` and the stream's, after a free by the stream in `seg`, which this lane owns:
  /// marks it if this lane now holds all its live blocks (unless it is marked already: one of
  /// them was evicted), else disowns it (the stream uses it: its operations there need not
  /// take this lane's lock any more).
  void after_free(segment* seg) noexcept {
    if (seg->live == 0 || seg->live != held(seg)) {
      disown(seg);
    } else if (!seg->lane_whole.load(std::memory_order_relaxed)) {  // (an eviction keeps it)
      mark_whole(seg);
    }
  }
  /// take() of slot `i`, whose segment may be marked: an allocation in a marked segment (lanes
  /// hold all its live blocks) splits it again. This lane's own mark it clears under its lock;
  /// a mark without an owner goes to whoever exchanges it first (another lane, or the stream):
  /// if that was not this lane, the take is counted as a plain one instead.
  block* take_marked(std::uint32_t i, std::size_t requested, bool forced, std::size_t* over_ceiling,
                     std::size_t* over_whole) noexcept {
    segment* seg = segs[i];
    const pool_kind pool = pools[i];
    const std::size_t size = sizes[i];
    const std::size_t whole = seg->lane_whole.load(std::memory_order_relaxed) ? seg->size : 0;
    if (!stats.try_alloc(pool, size, requested, whole, !forced)) [[unlikely]] {
      *over_ceiling = size;
      *over_whole = whole;
      return nullptr;
    }
    if (whole != 0) {
      if (marks[i] == mark_owned) {
        seg->lane_whole.store(false, std::memory_order_relaxed);
      } else if (!seg->lane_whole.exchange(false, std::memory_order_relaxed)) {
        stats.drop_whole_alloc(pool, size, whole);
      }
    }
    return remove(i, requested);
  }
  /// put() into a segment this lane owns (`live` changes only under this lock then:
  /// segment.hpp): the segment's last live block outside this lane leaves it wholly free.
  put_result put_owned(block* b, segment* seg, bool forced) noexcept {
    const std::size_t live = seg->live;  // (b is one of them, outside this lane)
    const std::size_t whole = live == 1 || live == held(seg) + 1 ? seg->size : 0;
    if (!stats.try_free(seg->pool, b->size, b->requested, whole, !forced)) [[unlikely]]
      return put_result::over_ceiling;
    if (whole != 0) set_mark(seg, b->size);
    add(b, mark_owned);
    return put_result::done;
  }
  /// Under `lock`: marks `seg` as counted wholly free here, on a block of `size` bytes.
  void set_mark(segment* seg, std::size_t size) noexcept {
    seg->whole_lane = this;
    seg->whole_size = size;
    seg->lane_whole.store(true, std::memory_order_relaxed);
  }
  /// Guards everything in the lane (taken after its stream's lock, if both). The hot path only
  /// tries it: a lane busy with another thread of its slot (or a drain) is skipped for that
  /// call, the stream serves it.
  lane_lock lock;
  std::uint32_t count = 0;
  /// `count`, readable without the lock: a hit skips the lock of an empty lane (a stale value
  /// only costs a needless try, or a miss).
  std::atomic<std::uint32_t> filled{0};
  // Adaptive bypass: `miss_limit` misses in a row make the lane cold for `backoff` allocations,
  // doubling (up to max_backoff) while it keeps missing, back to min_backoff at a hit.
  static constexpr std::uint32_t miss_limit = 32, min_backoff = 64, max_backoff = 8192;
  std::uint32_t misses = 0;
  std::uint32_t backoff = min_backoff;
  /// Evictions since the last hit: `evict_limit` of them (the lane turned over with no block
  /// taken back) make it cold like `miss_limit` misses, so frees that are never reused here go
  /// straight to the stream.
  static constexpr std::uint32_t evict_limit = 16;
  std::uint32_t evicted = 0;
  /// Under `lock`: an eviction made room for a put.
  void count_eviction() noexcept {
    if (++evicted < evict_limit) return;
    evicted = 0;
    go_cold();
  }
  /// Under `lock`: skips the lane for `backoff` allocations, doubling the next back-off.
  void go_cold() noexcept {
    cold.store(backoff, std::memory_order_relaxed);
    backoff = backoff < max_backoff ? 2 * backoff : max_backoff;
  }
  std::atomic<std::uint32_t> cold{0};  ///< allocations left to skip the lane (lock-free reads)
  /// Has held a block (so may have counts and a ceiling); an unused lane is left out of
  /// all_streams_lock and ceiling_lock (stats_holder::seized: locked by one). Written under
  /// `lock`.
  std::atomic<bool> used{false};
  /// Segments this lane owns (segment.hpp: their marks are counted here): under `lock`, changed
  /// only holding the segment's stream lock too. An owner stays `used`.
  std::uint32_t owned_count = 0;
  std::array<segment*, max_owned> owned{};
  // The blocks, and their sizes, pools and segments (a hit reads no block but the one it takes),
  // and whether the segment is owned here or may be marked (mark_owned, mark_shared, or 0).
  std::array<block*, max_capacity> slots{};
  std::array<std::size_t, max_capacity> sizes{};
  std::array<segment*, max_capacity> segs{};
  std::array<pool_kind, max_capacity> pools{};
  std::array<std::uint8_t, max_capacity> marks{};

 private:
  /// Caches `b` (its free counted), with `mark` (owned segment).
  void add(block* b, std::uint8_t mark) noexcept {
    b->in_lane.store(true, std::memory_order_relaxed);
    place(count, b, mark);
    ++count;
    filled.store(count, std::memory_order_relaxed);
    ++stats.num_frees;
  }
  /// Hands out slot `i` (its allocation counted).
  block* remove(std::uint32_t i, std::size_t requested) noexcept {
    block* b = slots[i];
    --count;
    filled.store(count, std::memory_order_relaxed);
    slots[i] = slots[count];
    sizes[i] = sizes[count];
    pools[i] = pools[count];
    segs[i] = segs[count];
    marks[i] = marks[count];
    b->requested = requested;
    b->in_lane.store(false, std::memory_order_relaxed);
    ++stats.num_allocs;
    misses = 0;
    evicted = 0;
    backoff = min_backoff;
    return b;
  }
  void place(std::uint32_t i, block* b, std::uint8_t mark) noexcept {
    slots[i] = b;
    sizes[i] = b->size;
    pools[i] = b->seg->pool;
    segs[i] = b->seg;
    marks[i] = mark;
  }
};

/// A lane block (settle_marks' list).
struct tc_held {
  segment* seg;
  tc_lane* lane;
  std::uint32_t slot;
};

/// The peak ledger's view of thread caches (thread_cache_marks.cpp): a pull that raises
/// inactive-split counts locks a listed stream state's lanes after it and settles its marks.
/// Stats mutex only; `scratch` has room for every lane slot of a stream state.
class lane_marks final : public lane_group {
 public:
  explicit lane_marks(std::vector<tc_held>& scratch) noexcept : scratch_(scratch) {}
  void lock_lanes(stats_holder& state, std::vector<stats_holder*>& out) noexcept override;
  void settle_marks(stats_holder& state) noexcept override;

 private:
  std::vector<tc_held>& scratch_;
};

/// Test hook (null outside tests): called with `tc_evict_hook_arg` after a free into a lane that
/// evicted the lane's oldest block, once the lane is unlocked (no engine lock is held), so that
/// a test can read the stats where a racing reader would.
inline std::atomic<void (*)(void*)> tc_evict_hook{nullptr};
inline std::atomic<void*> tc_evict_hook_arg{nullptr};

/// The lanes of one stream state.
struct thread_cache {
  static constexpr std::size_t lane_count = 8;  ///< a power of two

  /// The lanes of stream state `state` (which watches marks_bit from now on).
  thread_cache(stats_holder& state, pool_peaks* peaks, peak_ledger* ledger) noexcept {
    state.watched |= marks_bit;
    for (tc_lane& l : lanes) {
      l.peaks = peaks;
      l.ledger = ledger;
      l.outer = &state;
      l.watched |= marks_bit;
    }
  }
  thread_cache(const thread_cache&) = delete;
  thread_cache& operator=(const thread_cache&) = delete;

  /// The calling thread's lane.
  tc_lane& mine() noexcept { return lanes[thread_slot() & (lane_count - 1)]; }

  /// Keeps lane 0 off the lines before the object (the end of its stream state, read by every
  /// thread of the stream: measured, sharing them cost a quarter of the 2-thread throughput).
  alignas(128) char guard[128] = {};
  std::array<tc_lane, lane_count> lanes;

 private:
  /// This thread's slot number (given in order of first use, process-wide).
  static std::uint32_t thread_slot() noexcept {
    static thread_local std::uint32_t slot = next_slot();
    return slot;
  }
  static std::uint32_t next_slot() noexcept;
};

}  // namespace cachalot::detail
