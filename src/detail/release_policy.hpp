// The release policy: when the engine gives cached memory back to the device, and when it
// keeps large free blocks whole (the oversize rule of max_split_size). One object per engine,
// with its own state; the engine asks it and reports to it, and it knows nothing of segments,
// streams or locks, so that it can be read, tested and changed alone
// (tests/core/release_policy_test.cpp).
//
// Regimes (config `release_policy`):
//  - adaptive (the default). *Relaxed* while memory is plentiful: no release before a growth,
//    no unmap, every block may be split, so a job that fits makes as few device calls as a
//    cache that never gives anything back (only blocks holding 1/128 of the limit stay whole,
//    so that one request cannot pin a large share of the device). *Tight* once the high-water
//    mark of in-use (active)
//    bytes passes `pressure_threshold` of the limit (memory_limit, else the device): then the
//    oversize rule applies, and a growth that would take reserved bytes above the release mark
//    (gc_threshold of the limit; with expandable segments also 2 % plus a chunk above the
//    in-use high-water mark) first returns cached memory nothing fits in, down to a band below
//    the mark (hysteresis: the next growths do not each release again). Tight lasts until the
//    high-water mark is reset below the threshold.
//  - eager: always tight (the engine before this policy: oversize rule and gc_threshold at
//    every growth; expandable segments unmap above their release mark).
// Whatever the regime, a growth the device or the memory limit refuses releases what it must
// (the out-of-memory sequence, pool_reclaim.cpp); that path does not ask the policy.
//
// Hysteresis: the policy remembers the sizes of the last few segments released before a
// growth; a growth that makes one of them again within that window counts as a *re-make* and
// widens the band (the next release goes further below the mark, so that the released memory
// is not needed back at once), up to a quarter of the mark; a release with no re-make since
// narrows it again.
//
// Thread-safety: decisions read atomics (oversize_rule() is on the allocation path for blocks
// at least max_split_size); reports take the policy's own lock (a leaf: callers may hold any
// engine lock but a stream lock).
#pragma once

#include <array>
#include <atomic>
#include <cstddef>
#include <cstdint>
#include <mutex>

namespace cachalot::detail {

/// How far one release pass of the engine goes (engine::release_pass, release.cpp).
struct release_bounds {
  std::size_t target = 0;        ///< stop once committed bytes are at most this (0: no bound)
  std::size_t want = 0;          ///< stop once this many bytes are released (0: no bound)
  bool above_guarantee = false;  ///< release only what leaves each pool its guarantee
  bool history = false;          ///< report what goes to the release policy (a gc pass)
  std::size_t syncs = 0;         ///< out: segments freed plus streams synchronized
};

/// What the policy is built from (the engine's resolved config).
struct policy_settings {
  bool adaptive = true;             ///< config release_policy: adaptive (else eager)
  std::size_t limit = 0;            ///< memory limit, else device capacity (bytes)
  double gc_threshold = 0.9;        ///< release mark, a fraction of `limit` (0: no mark)
  double pressure_threshold = 0.9;  ///< in-use high-water fraction of `limit` that turns tight
  bool expandable = false;          ///< expandable segments (the mark follows in-use bytes)
  std::size_t chunk = 0;            ///< expandable segments: bytes per chunk
  std::size_t max_split_size = SIZE_MAX;  ///< config max_split_size (the tight split limit)
  /// Relaxed split limit as a share of `limit` (max_split_size at least).
  double relaxed_split = 1.0 / 128;
};

/// What a growth should release first.
struct release_advice {
  bool release = false;    ///< release cached memory before growing
  std::size_t target = 0;  ///< ... until committed bytes are at most this
};

/// Decisions on releasing and splitting; see the file comment.
class release_policy {
 public:
  explicit release_policy(const policy_settings& s) noexcept;
  release_policy(const release_policy&) = delete;
  release_policy& operator=(const release_policy&) = delete;

  /// Blocks at least this big stay whole and serve only requests at least this big that waste
  /// less than a large segment of them: max_split_size while tight; relaxed, only blocks that
  /// hold a large share of the limit (`relaxed_split`), so that one request cannot pin them.
  std::size_t split_limit() const noexcept { return split_limit_.load(std::memory_order_relaxed); }
  /// True while the policy is tight (oversize rule and release mark apply).
  bool tight() const noexcept { return tight_.load(std::memory_order_relaxed); }

  /// Before a growth of `need` bytes with `committed` bytes reserved (segments plus those
  /// being made): whether to return cached memory first, and down to what.
  release_advice before_growth(std::size_t committed, std::size_t need) const noexcept;

  /// The high-water mark of in-use (active) bytes rose to `bytes` (under the stats mutex).
  void on_in_use_peak(std::size_t bytes) noexcept;
  /// The in-use high-water mark was reset to `bytes` (reset_peak_stats).
  void on_peak_reset(std::size_t bytes) noexcept;
  /// A growth made a segment (or mapped chunks) of `bytes`.
  void on_growth(std::size_t bytes) noexcept;
  /// A release before a growth (before_growth's advice) returned a segment or span of `bytes`.
  void on_released(std::size_t bytes) noexcept;
  /// A release pass before a growth ended (whether it freed anything).
  void on_release_pass() noexcept;

  /// The band below the mark that a release before a growth goes down to, in bytes.
  std::size_t band() const noexcept { return band_.load(std::memory_order_relaxed); }
  /// Growths that made a size released just before (see the file comment).
  std::uint64_t remakes() const noexcept { return remakes_.load(std::memory_order_relaxed); }
  /// The in-use high-water mark the policy saw.
  std::size_t in_use_peak() const noexcept { return in_use_peak_.load(std::memory_order_relaxed); }
  const policy_settings& settings() const noexcept { return s_; }

 private:
  /// The mark reserved bytes may reach before a growth releases (0: none).
  std::size_t mark() const noexcept;
  void update_regime(std::size_t in_use_peak) noexcept;

  static constexpr std::size_t history = 8;  ///< released sizes remembered

  const policy_settings s_;
  const std::size_t gc_bytes_;        ///< gc_threshold x limit (0: off)
  const std::size_t pressure_bytes_;  ///< pressure_threshold x limit
  std::atomic<bool> tight_;
  std::atomic<std::size_t> split_limit_;
  const std::size_t relaxed_limit_;
  std::atomic<std::size_t> in_use_peak_{0};
  std::atomic<std::size_t> band_;
  std::atomic<std::uint64_t> remakes_{0};
  // Release history (lock_).
  std::mutex lock_;
  std::array<std::size_t, history> released_{};  ///< sizes, most recent at next_ - 1
  std::size_t next_ = 0;
  bool remade_since_pass_ = false;
};

}  // namespace cachalot::detail
