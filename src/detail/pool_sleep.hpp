// Sleep and wake of tenant memory pools (cachalot/pool.hpp): the engine's sleeper, its record of
// each sleeping pool, and the guard that keeps allocations out of a pool that sleeps.
//
// A sleeping pool's expandable segments are *asleep*: their allocated blocks stay where they
// are (in the pointer map, counted as allocated), everything else in them is a hole, and no
// memory is mapped behind any of it except what `held` lists (the chunks mapped when the pool
// froze, until each is unmapped; afterwards only chunks whose unmap failed, or that a failed
// wake could not unmap again). The stats follow: reserved bytes are the held bytes, an asleep
// segment has no inactive-split or idle bytes, its blocks keep their allocated bytes.
//
// Sleep: (1) mark the pool asleep, so that allocations are refused (slow_pass), and wait until
// no allocation of the pool is in its slow path (no growth is in flight); (2) wait for the
// events of its pending blocks, let them complete; (3) freeze, under every stream lock: free
// blocks become holes, the segments asleep, the streams to wait for are collected (the pool's
// and those recorded on its blocks); a pending or half-freed block makes it retry from (2);
// (4) synchronize those streams (an event each), (5) offload: one pinned host buffer, a copy of
// every run of allocated blocks, a synchronization, (6) unmap every held chunk. A failure in
// (2)-(5) wakes the segments again with no device call (the chunks are still mapped): the pool
// is awake, its contents intact. A failed unmap leaves the pool asleep with that chunk held.
//
// Wake: map the chunks that hold allocated blocks (and are not held) with budget room for
// them, relieving pressure in the engine's reclaim order when the device or the budget refuses;
// copy the offloaded bytes back into the blocks still allocated; then, under every stream lock,
// turn the holes inside the mapped chunks into free blocks and the segments awake. A failure
// unmaps what it mapped and leaves the pool asleep.
//
// Frees while asleep (engine::free_asleep): the block becomes a hole, its allocated bytes go,
// no device call is made. Locks: the sleeper's mutex is a leaf (never held while another lock
// is taken); one thread at a time changes a pool's sleep (its phase says which), others wait.
#pragma once

#include <atomic>
#include <condition_variable>
#include <cstddef>
#include <cstdint>
#include <memory>
#include <mutex>
#include <vector>

#include "cachalot/pool.hpp"
#include "cachalot/stats.hpp"
#include "detail/capture.hpp"

namespace cachalot::detail {

class engine;
struct pool_record;
struct stream_state;
struct segment;
struct block;

/// Addresses [lo, hi), chunk-aligned.
struct address_span {
  std::uintptr_t lo = 0;
  std::uintptr_t hi = 0;
};

/// The bytes of `spans`.
inline std::size_t span_bytes(const std::vector<address_span>& spans) noexcept {
  std::size_t n = 0;
  for (const address_span& s : spans) n += s.hi - s.lo;
  return n;
}

/// Adds [at, at + bytes) to `spans` (kept by address), joining the last span when adjacent.
inline void append_span(std::vector<address_span>& spans, std::uintptr_t at, std::size_t bytes) {
  if (!spans.empty() && spans.back().hi == at) {
    spans.back().hi += bytes;
  } else {
    spans.push_back(address_span{at, at + bytes});
  }
}

/// An expandable segment of a sleeping pool and what is still mapped in it.
struct asleep_segment {
  stream_state* ss = nullptr;
  segment* seg = nullptr;
  std::vector<address_span> held;  ///< mapped chunk runs, by address
};

/// A run of allocated blocks whose bytes are kept in the pool's host buffer.
struct offloaded_run {
  stream_state* ss = nullptr;  ///< the segment's stream (copies run on it)
  segment* seg = nullptr;
  std::uintptr_t addr = 0;
  std::size_t bytes = 0;
  std::size_t offset = 0;  ///< in the host buffer
};

/// What the sleeper keeps of one pool.
struct pool_sleep_record {
  enum class phase : std::uint8_t { awake, entering, asleep, waking };
  phase now = phase::awake;
  sleep_mode mode = sleep_mode::offload;
  std::vector<asleep_segment> segments;
  std::vector<offloaded_run> runs;
  void* host = nullptr;  ///< the pinned copy (offload)
  std::size_t host_bytes = 0;
  std::vector<stream_t> late_streams;  ///< named by frees while the pool was going to sleep
  bool asking = false;                 ///< its sleep callback is being asked (pressure)
  sleep_stats figures;                 ///< cumulative counters and times (not the current ones)
};

/// Keeps allocations out of a pool that sleeps: counts the calling thread into the pool's slow
/// path (pool_record::in_slow) for its scope, or throws pool_asleep if the pool sleeps.
class slow_pass {
 public:
  slow_pass(pool_record& pool, std::size_t bytes, stream_t stream);
  ~slow_pass();
  slow_pass(const slow_pass&) = delete;
  slow_pass& operator=(const slow_pass&) = delete;
  /// True if the calling thread is inside an allocation of `pool` (a callback it called).
  static bool inside(const pool_record& pool) noexcept;
  /// Throws the pool_asleep error of a record_stream(addr, stream) on a block of `pool`.
  [[noreturn, gnu::cold]] static void refuse_record(const pool_record& pool, std::uintptr_t addr,
                                                    stream_t stream);

 private:
  pool_record& pool_;
};

/// Sleep and wake of the engine's tenant pools. See the file comment.
class sleeper {
 public:
  explicit sleeper(engine& e) : e_(e) {}
  /// Frees the host copies of pools still asleep (the engine returns their segments).
  ~sleeper();
  sleeper(const sleeper&) = delete;
  sleeper& operator=(const sleeper&) = delete;

  /// create_pool of a sleepable pool: throws invalid_argument (not_supported) naming what
  /// keeps these options from sleeping.
  void check_options(const pool_options& options) const;
  /// allocator::sleep (pool_sleep.cpp).
  bool sleep(pool_id pool, sleep_mode mode);
  /// allocator::wake (pool_wake.cpp).
  bool wake(pool_id pool);
  /// Puts `q` (sleepable, of lower priority than a request under pressure that needs `bytes`)
  /// to sleep in its own mode, asking its callback first and telling it after. False if it
  /// did not sleep (refused, busy, failed); never throws.
  bool sleep_for_pressure(pool_record& q, std::size_t bytes) noexcept;
  /// True while a sleep callback runs on the calling thread.
  static bool in_callback() noexcept;

  /// Every stream lock held, `b` claimed (out of the pointer map): frees `b` of an asleep
  /// segment as a hole. False, with nothing changed, if its segment is awake.
  bool drop(block* b, stream_t last_used);
  /// Under every stream lock: adds the sleep figures of `only` (nullptr: every pool) to `s`.
  void add_stats(const pool_record* only, memory_stats& s) const;
  /// Under every stream lock: the sleeping pools into `snap`.
  void add_snapshot(memory_snapshot& snap) const;
  /// Before release_pool: a pool asleep with no live block wakes with nothing to map (no
  /// device call but the host copy's free). Throws invalid_argument for a pool that is asleep
  /// with live blocks, or going to sleep or waking.
  void before_release(pool_record& pool);
  /// Teardown of an asleep segment: unmaps its held chunks and releases its range. Never throws.
  void destroy(segment* seg) noexcept;

 private:
  using phase = pool_sleep_record::phase;
  /// The capture fence around one stretch of a sleep's or wake's device calls.
  /// @throws not_supported while a capture may be under way
  struct section {
    explicit section(engine& e);
    capture_tracker::section fence;
  };

  /// Chunk runs mapped by a wake, by index of pool_sleep_record::segments.
  using mapped_spans = std::vector<std::vector<address_span>>;

  pool_sleep_record& record(pool_id id);  // mutex_
  pool_record& pool_of_id(pool_id id) const;
  /// Waits until `p`'s sleep is not changing; then, if it is `from`, makes it `to` and returns
  /// true (false: it is already in the other stable phase). `wait` false: busy returns false.
  bool begin(pool_record& p, phase from, phase to, bool wait);
  /// Ends the change begun by begin(): the pool is in phase `to`.
  void finish(pool_record& p, phase to);
  void check_sleepable(const pool_record& p, sleep_mode mode) const;
  // The steps of a sleep (pool_sleep.cpp; the rest of the sleeper is in pool_asleep.cpp).
  bool sleep_pool(pool_record& p, sleep_mode mode, bool pressure, std::size_t* released);
  void enter(pool_record& p, sleep_mode mode, std::size_t* released, bool* asleep);
  void settle_pending(pool_record& p);
  bool freeze(pool_record& p, sleep_mode mode, std::vector<stream_t>& streams);
  void offload(pool_record& p);
  std::size_t unmap_held(pool_record& p);
  /// Frees the pool's host copy; false (the buffer kept for the teardown) if the device
  /// refuses.
  bool release_host(pool_id id) noexcept;
  std::size_t bytes_asleep(const asleep_segment& a) const;
  // The steps of a wake (pool_wake.cpp).
  void wake_pool(pool_record& p, std::size_t* mapped_bytes);
  mapped_spans plan_wake(pool_record& p, std::size_t* total);
  void map_asleep(pool_record& p, const mapped_spans& want, mapped_spans& mapped,
                  std::size_t total);
  void unmap_spans(pool_record& p, const mapped_spans& mapped) noexcept;
  /// The chunk of asleep segment `i` of `p` (segment::chunk).
  std::size_t chunk_of_asleep(pool_record& p, std::size_t i) noexcept;
  void restore(pool_record& p);
  /// Takes every stream lock: every segment of the pool awake, its mapped memory being its held
  /// chunks plus `mapped` (a wake's; none for a sleep undone).
  void thaw(pool_record& p, const mapped_spans& mapped);
  void awaken(const asleep_segment& a, const std::vector<address_span>& runs, std::size_t newly);

  engine& e_;
  mutable std::mutex mutex_;
  std::condition_variable changed_;                          ///< a pool's phase changed
  std::vector<std::unique_ptr<pool_sleep_record>> records_;  ///< by pool id (mutex_)
  std::vector<std::pair<void*, std::size_t>> stale_;  ///< host copies the device kept (mutex_)
};

}  // namespace cachalot::detail
