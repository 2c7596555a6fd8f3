// The device clock: the call counts and time of one backend (cachalot/device_cost.hpp), the small
// interface through which a backend reports its calls. The simulated device charges each call it
// serves at the cost model's price (modeled time); the CUDA backend records the measured wall time
// of each driver call (a timed_call around it). Either way a segment free (or a pinned host free)
// also counts the device-wide synchronization it implies; modeled, that synchronization costs
// cost_device_sync. Each thread also sums what its own calls cost (thread_ns()), so that an
// operation can price itself exactly while other threads use the device.
// Invariants: counts and times only grow; stats() of a quiescent clock is exact, of a busy one
// each field is exact as of some instant (fields are read one by one). Thread-safe: relaxed
// atomics, no lock; never on a cache-hit path.
#pragma once

#include <array>
#include <atomic>
#include <chrono>
#include <cstddef>
#include <cstdint>

#include "cachalot/device_cost.hpp"

namespace cachalot::detail {

/// Counts and time of the device calls of one backend. See the file comment.
class device_clock {
 public:
  /// A modeled clock pricing with `model` (timing none when the model is off), or with
  /// `measured` a clock fed by record() (the model is then unused).
  explicit device_clock(const device_cost_model& model, bool measured = false) noexcept
      : model_(model), measured_(measured) {}
  device_clock(const device_clock&) = delete;
  device_clock& operator=(const device_clock&) = delete;

  /// Counts one call of kind `c` on `bytes` and advances the clock by its modeled price (a
  /// segment free also by the implied device synchronization). Returns the ns charged.
  std::uint64_t charge(device_call c, std::size_t bytes = 0) noexcept {
    std::uint64_t ns = model_.cost_ns(c, bytes);
    add(c, ns);
    if (device_call_implies_sync(c)) {
      const std::uint64_t sync = model_.cost_ns(device_call::device_sync, 0);
      implied_syncs_.fetch_add(1, std::memory_order_relaxed);
      implied_sync_ns_.fetch_add(sync, std::memory_order_relaxed);
      ns += sync;
    }
    t_thread_ns += ns;
    return ns;
  }

  /// Counts one call of kind `c` that took `ns` of measured wall time (a segment free also
  /// counts its implied synchronization, whose time is inside `ns`).
  void record(device_call c, std::uint64_t ns) noexcept {
    add(c, ns);
    if (device_call_implies_sync(c)) implied_syncs_.fetch_add(1, std::memory_order_relaxed);
    t_thread_ns += ns;
  }

  /// The device time charged or recorded so far by the calling thread, on every clock of the
  /// process: the difference across an operation that makes its device calls on one thread (a
  /// pool's sleep or wake) is that operation's device time.
  static std::uint64_t thread_ns() noexcept { return t_thread_ns; }

  /// The device time so far in ns (every call and implied synchronization).
  std::uint64_t now_ns() const noexcept { return stats().total_ns(); }

  /// The figures so far.
  device_call_stats stats() const noexcept {
    device_call_stats s;
    s.timing = measured_        ? device_timing::measured
               : model_.enabled ? device_timing::modeled
                                : device_timing::none;
    for (std::size_t i = 0; i < device_call_count; ++i) {
      s.calls[i] = calls_[i].load(std::memory_order_relaxed);
      s.ns[i] = ns_[i].load(std::memory_order_relaxed);
    }
    s.implied_syncs = implied_syncs_.load(std::memory_order_relaxed);
    s.implied_sync_ns = implied_sync_ns_.load(std::memory_order_relaxed);
    return s;
  }

  /// The model the clock prices with.
  const device_cost_model& model() const noexcept { return model_; }

 private:
  void add(device_call c, std::uint64_t ns) noexcept {
    const auto i = static_cast<std::size_t>(c);
    calls_[i].fetch_add(1, std::memory_order_relaxed);
    ns_[i].fetch_add(ns, std::memory_order_relaxed);
  }

  static inline thread_local std::uint64_t t_thread_ns = 0;

  device_cost_model model_;
  bool measured_;
  std::array<std::atomic<std::uint64_t>, device_call_count> calls_{};
  std::array<std::atomic<std::uint64_t>, device_call_count> ns_{};
  std::atomic<std::uint64_t> implied_syncs_{0};
  std::atomic<std::uint64_t> implied_sync_ns_{0};
};

/// Times one driver call on the steady clock and records it on `clock` when it ends (whether the
/// call succeeded or threw: a failed call took its time too).
class timed_call {
 public:
  timed_call(device_clock& clock, device_call c) noexcept
      : clock_(clock), call_(c), start_(std::chrono::steady_clock::now()) {}
  ~timed_call() {
    const auto d = std::chrono::steady_clock::now() - start_;
    clock_.record(call_, static_cast<std::uint64_t>(
                             std::chrono::duration_cast<std::chrono::nanoseconds>(d).count()));
  }
  timed_call(const timed_call&) = delete;
  timed_call& operator=(const timed_call&) = delete;

 private:
  device_clock& clock_;
  device_call call_;
  std::chrono::steady_clock::time_point start_;
};

}  // namespace cachalot::detail
