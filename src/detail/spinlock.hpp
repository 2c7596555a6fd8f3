// A small lock for the allocator's short critical sections (a free-list update, a hash-map
// update, a stats update) that also behaves when it waits long (a growth or a stats rebalance
// holding it, more threads than cores, a preempted holder).
//
// Uncontended it costs what a test-and-set lock costs: one exchange to lock, a store and a load
// (no atomic read-modify-write) to unlock. Contended, a waiter spins briefly, yields a few
// times, then parks: it counts itself in `waiters_` and sleeps on the lock word (a futex on
// Linux) until an unlock that sees a waiter wakes one. An unlock reads `waiters_` without a
// fence, so it can miss a waiter that is just parking; such a waiter sleeps at most
// `park_timeout` before it looks again. So a waiter never burns a core, and the hot path pays
// no fence. Satisfies Lockable (usable with std::lock_guard).
#pragma once

#include <atomic>
#include <chrono>
#include <cstdint>
#include <thread>

namespace cachalot::detail {

/// Parks the calling thread while `*word == expected`, at most `timeout`; may return early.
void park_on(std::atomic<std::uint32_t>& word, std::uint32_t expected,
             std::chrono::microseconds timeout) noexcept;
/// Wakes one thread parked on `word`.
void unpark_one(std::atomic<std::uint32_t>& word) noexcept;

/// Short-section lock that parks when it waits long. Not recursive.
class spinlock {
 public:
  /// Longest sleep of a parked waiter before it looks at the lock again.
  static constexpr std::chrono::microseconds park_timeout{1000};

  /// Acquires the lock.
  void lock() noexcept {
    if (state_.exchange(1, std::memory_order_acquire) == 0) [[likely]]
      return;
    lock_contended();
  }
  /// Tries once; true if acquired.
  bool try_lock() noexcept {
    return state_.load(std::memory_order_relaxed) == 0 &&
           state_.exchange(1, std::memory_order_acquire) == 0;
  }
  /// Releases the lock, waking one parked waiter if it sees one.
  void unlock() noexcept {
    state_.store(0, std::memory_order_release);
    if (waiters_.load(std::memory_order_relaxed) != 0) [[unlikely]]
      unpark_one(state_);
  }

 private:
  [[gnu::noinline]] void lock_contended() noexcept {
    for (unsigned spins = 0; spins < 96; ++spins) {
      if (try_lock()) return;
      if (spins < 64) {
#if defined(__x86_64__) || defined(__i386__)
        __builtin_ia32_pause();
#endif
      } else {
        std::this_thread::yield();
      }
    }
    waiters_.fetch_add(1, std::memory_order_seq_cst);
    while (!try_lock()) park_on(state_, 1, park_timeout);
    waiters_.fetch_sub(1, std::memory_order_relaxed);
  }

  std::atomic<std::uint32_t> state_{0};    ///< 0 free, 1 held
  std::atomic<std::uint32_t> waiters_{0};  ///< threads parked or about to park
};

}  // namespace cachalot::detail
