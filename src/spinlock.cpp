// Parking for detail/spinlock.hpp: a futex wait on Linux, a short sleep elsewhere. The lock
// word is a std::atomic<std::uint32_t>, which has the layout of a std::uint32_t. The wait has
// no timeout: the lock's protocol never needs one to make progress (see spinlock.hpp).
#include "detail/spinlock.hpp"

#include <chrono>

#if defined(__linux__)
#include <linux/futex.h>
#include <sys/syscall.h>
#include <unistd.h>
#endif

namespace cachalot::detail {

void park_on(std::atomic<std::uint32_t>& word, std::uint32_t expected) noexcept {
#if defined(__linux__)
  // Returns at once if the word no longer holds `expected` (the kernel checks it atomically
  // with queueing this thread), when woken, or on a signal.
  syscall(SYS_futex, reinterpret_cast<std::uint32_t*>(&word), FUTEX_WAIT_PRIVATE, expected, nullptr,
          nullptr, 0);
#else
  if (word.load(std::memory_order_relaxed) == expected) {
    std::this_thread::sleep_for(std::chrono::microseconds(100));
  }
#endif
}

void unpark_one(std::atomic<std::uint32_t>& word) noexcept {
#if defined(__linux__)
  syscall(SYS_futex, reinterpret_cast<std::uint32_t*>(&word), FUTEX_WAKE_PRIVATE, 1, nullptr,
          nullptr, 0);
#else
  (void)word;
#endif
}

}  // namespace cachalot::detail
