// Exact statistics without a shared hot-path lock.
//
// Every holder (a stream state, or a thread-cache lane of one) keeps its own counters
// (stream_stats), changed under its own lock: for each quantity and size class ("small/large
// pool"), monotonic totals of increases and decreases (current = inc - dec), and a *ceiling*.
// The engine keeps the allocator's peaks (global_stats, detail/global_stats.hpp) and each memory
// pool its own (pool_peaks). Invariant: for every quantity, the sum of the holders' ceilings of
// a size class never exceeds that class's recorded peak, and the sum over both classes never
// exceeds the all-classes peak; both for the holders of each memory pool against the pool's
// peaks and for all holders against the allocator's. A change that stays under its holder's
// ceilings therefore cannot create a new peak, of its pool or of the allocator, and is applied
// locally with no shared write. A change that would cross a ceiling is redone under the stats
// mutex with its stream state (and that state's lanes) locked, then settled with the peak
// ledger (detail/peak_ledger.hpp): room is taken from the peaks' headroom, else from the slack
// of the holders listed with the ledger, else the peaks rise to the exact totals, in amortized
// O(1) whatever the number of streams and lanes. Only the rare reads and resets that need one
// view of everything lock every holder (all_streams_lock: a full rebalance). Peaks are thus the
// exact maxima over every consistent state, and steady-state traffic (each stream reusing what
// it freed) never touches shared memory. Every change that can leave a current value below its
// ceiling (a free, an inactive-split decrease, a ceiling given by another holder) records its
// quantity in `grown()`, and every decrease marks_bit (a lane may then hold a segment whole
// without a mark: detail/thread_cache.hpp), so that the holder lists itself with the ledger
// (sync) before its lock is released: a holder not listed for a quantity is at its ceiling.
#pragma once

#include <algorithm>
#include <array>
#include <cstddef>
#include <cstdint>

#include "cachalot/stats.hpp"
#include "detail/spinlock.hpp"

namespace cachalot::detail {

/// Quantities with current / peak / cumulative values.
enum quantity : std::size_t {
  q_requested,
  q_allocated,
  q_active,
  q_inactive,
  q_allocations,
  q_reserved,
  q_segments,
  quantity_count
};

/// A set of quantities, bit q for quantity q.
using quantity_mask = std::uint8_t;
/// The mask of quantity `q`.
constexpr quantity_mask bit_of(std::size_t q) noexcept {
  return static_cast<quantity_mask>(1u << q);
}
/// The quantities a free of an allocated block lowers.
inline constexpr quantity_mask free_mask =
    bit_of(q_requested) | bit_of(q_allocated) | bit_of(q_active) | bit_of(q_allocations);
/// Every quantity's bit.
inline constexpr quantity_mask quantity_bits = bit_of(quantity_count) - 1;
/// Not a quantity: the slot and bit of "the holder's stream state may hold a segment whose live
/// blocks all lie in thread-cache lanes without a mark" (detail/thread_cache.hpp), which only a
/// decrease can bring about. Every decrease sets it in grown(); a holder with lanes lists itself
/// for it with the peak ledger, like a quantity's slack (detail/peak_ledger.hpp).
inline constexpr std::size_t marks_slot = quantity_count;
inline constexpr quantity_mask marks_bit = bit_of(marks_slot);
static_assert(quantity_count < 8, "quantity_mask has a bit per quantity and marks_bit");

/// A signed change of every quantity of one pool.
struct stats_delta {
  std::array<std::int64_t, quantity_count> d{};
  std::int64_t whole_free = 0;  ///< bytes of wholly free segments (inactive is derived)

  /// Sets inactive from the others: inactive = reserved - active - whole_free.
  stats_delta& derive_inactive() noexcept {
    d[q_inactive] = d[q_reserved] - d[q_active] - whole_free;
    return *this;
  }
};

/// One stream's counters. Guarded by the stream's lock.
class stream_stats {
 public:
  /// Counts an allocation of `size` bytes (asked: `requested`) that takes `whole` bytes of
  /// wholly free segment (0 if none). With `checked`, returns false and changes nothing if an
  /// increase would cross a ceiling; unchecked is only under the stats mutex with the holder
  /// locked (ceiling_lock, all_streams_lock: a settle or a rebalance follows).
  bool try_alloc(pool_kind pool, std::uint64_t size, std::uint64_t requested, std::uint64_t whole,
                 bool checked = true) noexcept {
    const std::size_t p = static_cast<std::size_t>(pool);
    const std::uint64_t up_inactive = whole > size ? whole - size : 0;
    const std::uint64_t down_inactive = size > whole ? size - whole : 0;
    if (checked && (crosses(q_allocated, p, size) || crosses(q_requested, p, requested) ||
                    crosses(q_active, p, size) || crosses(q_allocations, p, 1) ||
                    crosses(q_inactive, p, up_inactive))) {
      return false;
    }
    inc_[q_allocated][p] += size;
    inc_[q_requested][p] += requested;
    inc_[q_active][p] += size;
    inc_[q_allocations][p] += 1;
    inc_[q_inactive][p] += up_inactive;
    dec_[q_inactive][p] += down_inactive;
    whole_free_[p] -= whole;
    if (down_inactive != 0) grown_ |= bit_of(q_inactive);
    return true;
  }

  /// Counts the free of an allocated block of `size` bytes (asked: `requested`) that leaves
  /// `whole` bytes of segment wholly free (0 if none); `checked` as for try_alloc.
  bool try_free(pool_kind pool, std::uint64_t size, std::uint64_t requested, std::uint64_t whole,
                bool checked = true) noexcept {
    const std::size_t p = static_cast<std::size_t>(pool);
    const std::uint64_t up_inactive = size > whole ? size - whole : 0;
    const std::uint64_t down_inactive = whole > size ? whole - size : 0;
    if (checked && crosses(q_inactive, p, up_inactive)) return false;
    dec_[q_allocated][p] += size;
    dec_[q_requested][p] += requested;
    dec_[q_active][p] += size;
    dec_[q_allocations][p] += 1;
    inc_[q_inactive][p] += up_inactive;
    dec_[q_inactive][p] += down_inactive;
    whole_free_[p] += whole;
    grown_ |= static_cast<quantity_mask>(free_mask | marks_bit |
                                         (down_inactive != 0 ? bit_of(q_inactive) : 0));
    return true;
  }

  /// Applies `delta` (the cold paths' changes) without a ceiling check: for decreases, or under
  /// the stats mutex with the holder locked (ceiling_lock, all_streams_lock: a settle follows).
  void apply(pool_kind pool, const stats_delta& delta) noexcept {
    const std::size_t p = static_cast<std::size_t>(pool);
    for (std::size_t q = 0; q < quantity_count; ++q) {
      const std::int64_t d = delta.d[q];
      if (d >= 0) {
        inc_[q][p] += static_cast<std::uint64_t>(d);
      } else {
        dec_[q][p] += static_cast<std::uint64_t>(-d);
        grown_ |= static_cast<quantity_mask>(bit_of(q) | marks_bit);
      }
    }
    whole_free_[p] += static_cast<std::uint64_t>(delta.whole_free);
  }

  /// Takes back an earlier apply(pool, delta) exactly, cumulative totals included (a device
  /// call that failed after its stats were applied). Increases current values: only under the
  /// stats mutex with the holder locked (a settle follows).
  void undo(pool_kind pool, const stats_delta& delta) noexcept {
    const std::size_t p = static_cast<std::size_t>(pool);
    for (std::size_t q = 0; q < quantity_count; ++q) {
      const std::int64_t d = delta.d[q];
      if (d >= 0) {
        inc_[q][p] -= static_cast<std::uint64_t>(d);
        if (d != 0) grown_ |= bit_of(q);
      } else {
        dec_[q][p] -= static_cast<std::uint64_t>(-d);
      }
    }
    whole_free_[p] -= static_cast<std::uint64_t>(delta.whole_free);
  }

  /// Takes back a try_free(pool, size, requested, 0) exactly, cumulative totals and the free
  /// count included: a block a thread cache held goes back to its stream, which frees it.
  void cancel_cached_free(pool_kind pool, std::uint64_t size, std::uint64_t requested) noexcept {
    const std::size_t p = static_cast<std::size_t>(pool);
    dec_[q_allocated][p] -= size;
    dec_[q_requested][p] -= requested;
    dec_[q_active][p] -= size;
    dec_[q_allocations][p] -= 1;
    inc_[q_inactive][p] -= size;
    --num_frees;
    grown_ |= bit_of(q_inactive);
  }

  /// After a counted try_free(pool, size, ..., 0), counts the current values try_free(pool,
  /// size, ..., whole) would have left: the free left its segment (`whole` >= `size` bytes)
  /// wholly free (a thread cache's last live block of a segment, detail/thread_cache.hpp). The
  /// first count may have been read already, so cumulative totals only rise: the `whole`
  /// inactive bytes (the free's `size` among them) count as freed. Only lowers current values.
  /// remove_whole takes it back.
  void add_whole(pool_kind pool, std::uint64_t whole) noexcept {
    const std::size_t p = static_cast<std::size_t>(pool);
    dec_[q_inactive][p] += whole;
    whole_free_[p] += whole;
    grown_ |= bit_of(q_inactive);
  }
  /// Takes back the current values of an earlier add_whole(pool, whole) (`whole` may have grown
  /// since by bytes mapped as wholly free) and of the try_free(pool, `size`, ..., 0) before it,
  /// whose block goes back to its stream: the stream's free of it (the segment's last, leaving
  /// it wholly free) follows under the same locks, and the three together leave the cumulative
  /// totals as they were. Only under the stats mutex with the holder's state and lanes locked.
  void remove_whole(pool_kind pool, std::uint64_t size, std::uint64_t whole) noexcept {
    const std::size_t p = static_cast<std::size_t>(pool);
    inc_[q_inactive][p] += size;          // (cancel_cached_free takes it off again)
    dec_[q_inactive][p] -= whole - size;  // (the stream's free counts it again)
    whole_free_[p] -= whole;
  }
  /// Counts `bytes` of quantity `q` as both increased and decreased (current unchanged): a lane
  /// block's free that left its segment wholly free, in the stream, after cancel_cached_free
  /// took back the lane's count (the lane counted the block inactive; the stream's free counts
  /// from allocated, not raising inactive): so the pair raises cumulative totals only.
  void count_through(std::size_t q, std::size_t p, std::uint64_t bytes) noexcept {
    inc_[q][p] += bytes;
    dec_[q][p] += bytes;
  }
  /// Turns a counted try_alloc(pool, size, ..., whole) into try_alloc(pool, size, ..., 0): the
  /// segment was no longer wholly free (another holder counted that first). Only lowers.
  void drop_whole_alloc(pool_kind pool, std::uint64_t size, std::uint64_t whole) noexcept {
    const std::size_t p = static_cast<std::size_t>(pool);
    inc_[q_inactive][p] -= whole - size;
    dec_[q_inactive][p] += size;
    whole_free_[p] += whole;
    grown_ |= bit_of(q_inactive);
  }

  /// Adds the cumulative totals and counters of `o`, whose current values are all zero (the
  /// counters of a stream state leaving its pool), to this one's: every counter of
  /// stream_counters (below).
  void absorb(const stream_stats& o) noexcept;

  /// Current value (inc - dec). A thread-cache holder's may be negative (it frees what its
  /// stream allocated): values are two's complement, compared as signed (crosses, signed_max).
  std::uint64_t current(std::size_t q, std::size_t p) const noexcept {
    return inc_[q][p] - dec_[q][p];
  }
  /// By how much current + `add` exceeds the ceiling (0 if it does not).
  std::uint64_t deficit(std::size_t q, std::size_t p, std::uint64_t add) const noexcept {
    const auto over = static_cast<std::int64_t>(current(q, p) + add - ceiling_[q][p]);
    return over > 0 ? static_cast<std::uint64_t>(over) : 0;
  }
  /// Moves up to `want` bytes of ceiling room (never below current) from this holder to `to`,
  /// a holder of the same memory pool, both locked: the sum of ceilings, the invariant, stays.
  /// Returns the room moved.
  std::uint64_t give(std::size_t q, std::size_t p, std::uint64_t want, stream_stats& to) noexcept {
    const auto slack = static_cast<std::int64_t>(ceiling_[q][p] - current(q, p));
    if (slack <= 0) return 0;
    const std::uint64_t moved = std::min<std::uint64_t>(want, static_cast<std::uint64_t>(slack));
    ceiling_[q][p] -= moved;
    to.ceiling_[q][p] += moved;
    to.grown_ |= bit_of(q);
    return moved;
  }
  /// True if every current value is zero.
  bool at_zero() const noexcept {
    for (std::size_t q = 0; q < quantity_count; ++q) {
      for (std::size_t p = 0; p < pool_count; ++p) {
        if (inc_[q][p] != dec_[q][p]) return false;
      }
    }
    return true;
  }
  /// Sets every ceiling to zero (only at zero, under the stats mutex: the sums only drop).
  void clear_ceilings() noexcept {
    for (auto& row : ceiling_) {
      for (std::uint64_t& c : row) c = 0;
    }
  }
  /// True if current + `add` exceeds the ceiling (signed comparison).
  bool crosses(std::size_t q, std::size_t p, std::uint64_t add) const noexcept {
    return static_cast<std::int64_t>(current(q, p) + add) >
           static_cast<std::int64_t>(ceiling_[q][p]);
  }
  std::uint64_t increases(std::size_t q, std::size_t p) const noexcept { return inc_[q][p]; }
  /// Bytes of this stream's wholly free (idle) segments in pool `p`.
  std::uint64_t whole_free(std::size_t p) const noexcept { return whole_free_[p]; }
  std::uint64_t decreases(std::size_t q, std::size_t p) const noexcept { return dec_[q][p]; }
  std::uint64_t ceiling(std::size_t q, std::size_t p) const noexcept { return ceiling_[q][p]; }
  void set_ceiling(std::size_t q, std::size_t p, std::uint64_t c) noexcept { ceiling_[q][p] = c; }
  /// Raises a ceiling by `add` bytes of room the ledger granted (the holder lists it: grown).
  void add_room(std::size_t q, std::size_t p, std::uint64_t add) noexcept {
    ceiling_[q][p] += add;
    grown_ |= bit_of(q);
  }
  /// Ceiling minus current (two's complement; negative while a forced change is not settled).
  std::int64_t slack(std::size_t q, std::size_t p) const noexcept {
    return static_cast<std::int64_t>(ceiling_[q][p] - current(q, p));
  }
  /// Bit q * pool_count + p for every (q, p) whose current value is above its ceiling.
  std::uint32_t deficits() const noexcept {
    static_assert(quantity_count * pool_count <= 32);
    std::uint32_t m = 0;
    for (std::size_t q = 0; q < quantity_count; ++q) {
      for (std::size_t p = 0; p < pool_count; ++p) {
        m |= static_cast<std::uint32_t>(slack(q, p) < 0) << (q * pool_count + p);
      }
    }
    return m;
  }
  /// Quantities whose slack may have grown since the ledger last took this holder's slack.
  quantity_mask grown() const noexcept { return grown_; }
  /// The ledger took the slack of the quantities in `m` (detail/peak_ledger.hpp).
  void clear_grown(quantity_mask m) noexcept { grown_ &= static_cast<quantity_mask>(~m); }

  std::uint64_t num_allocs = 0;    ///< successful allocations on this stream
  std::uint64_t num_frees = 0;     ///< frees of this stream's blocks
  std::uint64_t num_oversize = 0;  ///< oversize allocations
  std::uint64_t num_deferred = 0;  ///< frees that waited for events
  std::uint64_t num_pending = 0;   ///< blocks awaiting events now
  std::uint64_t num_segment_allocs = 0;
  std::uint64_t num_segment_frees = 0;
  std::uint64_t num_chunk_maps = 0;    ///< chunks mapped into expandable segments
  std::uint64_t num_chunk_unmaps = 0;  ///< chunks unmapped from expandable segments

 private:
  std::uint64_t inc_[quantity_count][pool_count] = {};
  std::uint64_t dec_[quantity_count][pool_count] = {};
  std::uint64_t ceiling_[quantity_count][pool_count] = {};
  std::uint64_t whole_free_[pool_count] = {};
  quantity_mask grown_ = 0;
};

/// Every counter of a stream_stats, and the memory_stats field that reports it: a stats read
/// and a retiring pool (stream_stats::absorb) go through this one list.
inline constexpr struct {
  std::uint64_t stream_stats::*mine;
  std::uint64_t memory_stats::*reported;
} stream_counters[] = {
    {&stream_stats::num_allocs, &memory_stats::num_allocs},
    {&stream_stats::num_frees, &memory_stats::num_frees},
    {&stream_stats::num_oversize, &memory_stats::num_oversize_allocs},
    {&stream_stats::num_deferred, &memory_stats::num_deferred_frees},
    {&stream_stats::num_pending, &memory_stats::num_pending_blocks},
    {&stream_stats::num_segment_allocs, &memory_stats::num_segment_allocs},
    {&stream_stats::num_segment_frees, &memory_stats::num_segment_frees},
    {&stream_stats::num_chunk_maps, &memory_stats::num_chunk_maps},
    {&stream_stats::num_chunk_unmaps, &memory_stats::num_chunk_unmaps},
};

inline void stream_stats::absorb(const stream_stats& o) noexcept {
  for (std::size_t q = 0; q < quantity_count; ++q) {
    for (std::size_t p = 0; p < pool_count; ++p) {
      inc_[q][p] += o.inc_[q][p];
      dec_[q][p] += o.dec_[q][p];
    }
  }
  for (const auto& c : stream_counters) this->*c.mine += o.*c.mine;
}

/// The larger of two two's-complement values (a holder's current value or ceiling).
inline std::uint64_t signed_max(std::uint64_t a, std::uint64_t b) noexcept {
  return static_cast<std::int64_t>(a) >= static_cast<std::int64_t>(b) ? a : b;
}

/// The peaks of one memory pool (detail/pool.hpp), and scratch sums for a rebalance. Read and
/// written only under the engine's stats mutex.
struct pool_peaks {
  std::uint64_t peak[quantity_count][pool_count + 1] = {};  ///< by quantity and size class
  /// Sum of the ceilings of the pool's holders (detail/peak_ledger.hpp), never above `peak`.
  std::uint64_t granted[quantity_count][pool_count + 1] = {};
  std::uint64_t total[pool_count + 1] = {};  ///< scratch: sum of current values
  std::uint64_t sum[pool_count + 1] = {};    ///< scratch: sum of ceilings
};

class peak_ledger;

/// What counts stats against ceilings (global_stats::rebalance): a stream state, or one slot
/// (lane) of its thread cache (detail/thread_cache.hpp). Guarded by its lock: `*guard` (a
/// stream state's) or `*lane_guard` (a lane's, taken after its stream state's, `outer`).
struct stats_holder {
  stats_holder(pool_peaks* pp, spinlock* g, peak_ledger* l) noexcept
      : peaks(pp), guard(g), ledger(l) {}
  pool_peaks* peaks;                ///< the peaks of the holder's memory pool
  stream_stats stats;               ///< counters and ceilings
  spinlock* const guard;            ///< a stream state's lock (a lane: nullptr)
  lane_lock* lane_guard = nullptr;  ///< a lane's lock (set with `outer`)
  stats_holder* outer = nullptr;    ///< a lane: its stream state (locked before the lane)
  peak_ledger* ledger;              ///< the ledger it lists itself with (set before first use)
  /// Quantities (and marks_bit) the holder is listed for with the ledger (under its lock).
  quantity_mask listed = 0;
  /// What sync() lists: every quantity, and marks_bit for a state with lanes and its lanes.
  quantity_mask watched = quantity_bits;
  /// Locked by the stats mutex's holder: a ceiling_lock, an all_streams_lock (lanes) or a
  /// ledger pull (stats mutex only).
  bool seized = false;
  /// A stream state whose lanes a pull has locked and whose marks it has settled (stats mutex).
  bool grouped = false;

  void lock() noexcept {
    if (guard != nullptr) {
      guard->lock();
    } else {
      lane_guard->lock();
    }
  }
  void unlock() noexcept {
    if (guard != nullptr) {
      guard->unlock();
    } else {
      lane_guard->unlock();
    }
  }

  /// Under its lock, after a change: lists the holder for every watched quantity whose slack
  /// may have grown (and for marks_bit) and that it is not listed for (detail/peak_ledger.hpp;
  /// a leaf lock, rarely taken).
  void sync() noexcept {
    if ((stats.grown() & watched & static_cast<quantity_mask>(~listed)) != 0) [[unlikely]]
      list_grown();
  }

 private:
  void list_grown() noexcept;
};

}  // namespace cachalot::detail
