// A small lock for the allocator's short critical sections (a free-list update, a hash-map
// update, a stats update) that also behaves when it waits long (a growth or a stats rebalance
// holding it, more threads than cores, a preempted holder).
//
// One 32-bit word, three states (the futex mutex of Drepper's "Futexes Are Tricky"): 0 free,
// 1 held, 2 held and perhaps waited for. Uncontended, locking is one compare-exchange and
// unlocking one exchange. Contended, a waiter spins briefly, yields a few times, then parks:
// it exchanges 2 into the word and, unless that exchange found the lock free (then it holds
// it), sleeps on the word (a futex on Linux) while it still reads 2. An unlock that finds 2
// wakes one sleeper. Why no wake-up is lost, with no fence and no timeout: a waiter's exchange
// and every unlock's exchange are read-modify-writes of the one word, so they are totally
// ordered. If the waiter's exchange comes first, the unlock after it reads the 2 it wrote (a
// lock that follows writes 1 only over 0, so only an unlock can clear it) and wakes; the futex
// wait sleeps only if the word still holds 2 when the kernel checks it, atomically with
// queueing the sleeper, so that wake finds it or the wait returns at once. If the unlock comes
// first, the waiter's exchange reads the 0 and takes the lock instead of sleeping. A woken
// waiter exchanges 2 again, so the lock stays marked while others may sleep (at worst one
// needless wake). So a waiter never burns a core, and nothing depends on a timer. Satisfies
// Lockable (usable with std::lock_guard).
#pragma once

#include <atomic>
#include <cstdint>
#include <thread>

namespace cachalot::detail {

/// Parks the calling thread while `*word == expected` (a futex wait on Linux; elsewhere a
/// short sleep, after which the caller looks again); may return early.
void park_on(std::atomic<std::uint32_t>& word, std::uint32_t expected) noexcept;
/// Wakes one thread parked on `word`.
void unpark_one(std::atomic<std::uint32_t>& word) noexcept;

/// One step of a wait for another thread's short section: the `n`th in a row; a CPU pause for
/// the first 64, then a yield (the other thread may have been preempted: spinning only delays
/// it).
inline void wait_step(unsigned n) noexcept {
  if (n < 64) {
#if defined(__x86_64__) || defined(__i386__)
    __builtin_ia32_pause();
#endif
  } else {
    std::this_thread::yield();
  }
}

/// Short-section lock that parks when it waits long. Not recursive.
class spinlock {
 public:
  /// Acquires the lock.
  void lock() noexcept {
    std::uint32_t free = 0;
    if (state_.compare_exchange_strong(free, 1, std::memory_order_acquire,
                                       std::memory_order_relaxed)) [[likely]]
      return;
    lock_contended();
  }
  /// Tries once; true if acquired.
  bool try_lock() noexcept {
    std::uint32_t free = 0;
    return state_.load(std::memory_order_relaxed) == 0 &&
           state_.compare_exchange_strong(free, 1, std::memory_order_acquire,
                                          std::memory_order_relaxed);
  }
  /// Releases the lock, waking one parked waiter if the lock says there may be one.
  void unlock() noexcept {
    if (state_.exchange(0, std::memory_order_release) == 2) [[unlikely]]
      unpark_one(state_);
  }

 private:
  [[gnu::noinline]] void lock_contended() noexcept {
    for (unsigned spins = 0; spins < 96; ++spins) {
      if (try_lock()) return;
      wait_step(spins);
    }
    while (state_.exchange(2, std::memory_order_acquire) != 0) park_on(state_, 2);
  }

  std::atomic<std::uint32_t> state_{0};  ///< 0 free, 1 held, 2 held and perhaps waited for
};

/// The lock of a thread-cache lane (detail/thread_cache.hpp). The hot path only tries it; it is
/// waited for only by rare cold paths (a drain, a stats read, a stream allocation or free in a
/// segment the lane owns), and then only for the few instructions a hit holds it, since every
/// long holder (a stats-mutex holder: all_streams_lock, ceiling_lock, a peak-ledger pull) holds
/// the lane's stream lock too, which those waiters take first. So a waiter spins, then yields,
/// and never sleeps: the unlock is one release store, with no wake-up to lose and no
/// read-modify-write on the hit. Lockable.
class lane_lock {
 public:
  /// Acquires the lock.
  void lock() noexcept {
    if (state_.exchange(true, std::memory_order_acquire)) [[unlikely]]
      lock_contended();
  }
  /// Tries once; true if acquired.
  bool try_lock() noexcept {
    return !state_.load(std::memory_order_relaxed) &&
           !state_.exchange(true, std::memory_order_acquire);
  }
  /// Releases the lock.
  void unlock() noexcept { state_.store(false, std::memory_order_release); }

 private:
  [[gnu::noinline]] void lock_contended() noexcept {
    for (unsigned spins = 0; !try_lock(); ++spins) wait_step(spins);
  }

  std::atomic<bool> state_{false};  ///< held
};

}  // namespace cachalot::detail
