// A small test-and-test-and-set lock for the allocator's short critical sections (a free-list
// update, a hash-map probe, a stats update). It spins briefly, then yields, so that it stays
// sane with more threads than cores. Satisfies Lockable (usable with std::lock_guard).
#pragma once

#include <atomic>
#include <thread>

namespace cachalot::detail {

/// Short-section lock. Not recursive.
class spinlock {
 public:
  /// Acquires the lock.
  void lock() noexcept {
    if (!locked_.exchange(true, std::memory_order_acquire)) [[likely]]
      return;
    lock_contended();
  }
  /// Tries once; true if acquired.
  bool try_lock() noexcept {
    return !locked_.load(std::memory_order_relaxed) &&
           !locked_.exchange(true, std::memory_order_acquire);
  }
  /// Releases the lock.
  void unlock() noexcept { locked_.store(false, std::memory_order_release); }

 private:
  [[gnu::noinline]] void lock_contended() noexcept {
    for (unsigned spins = 0;; ++spins) {
      if (!locked_.load(std::memory_order_relaxed) &&
          !locked_.exchange(true, std::memory_order_acquire)) {
        return;
      }
      if (spins < 64) {
#if defined(__x86_64__) || defined(__i386__)
        __builtin_ia32_pause();
#endif
      } else {
        std::this_thread::yield();
      }
    }
  }

  std::atomic<bool> locked_{false};
};

}  // namespace cachalot::detail
