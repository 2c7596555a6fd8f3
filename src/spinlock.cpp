// Parking for detail/spinlock.hpp: a futex wait with a timeout on Linux, a short sleep
// elsewhere. The lock word is a std::atomic<std::uint32_t>, which has the layout of a
// std::uint32_t.
#include "detail/spinlock.hpp"

#if defined(__linux__)
#include <linux/futex.h>
#include <sys/syscall.h>
#include <time.h>
#include <unistd.h>
#endif

namespace cachalot::detail {

void park_on(std::atomic<std::uint32_t>& word, std::uint32_t expected,
             std::chrono::microseconds timeout) noexcept {
#if defined(__linux__)
  const long us = static_cast<long>(timeout.count());
  timespec ts{};
  ts.tv_sec = us / 1000000;
  ts.tv_nsec = (us % 1000000) * 1000;
  // Returns at once if the word no longer holds `expected` (the lock was released meanwhile).
  syscall(SYS_futex, reinterpret_cast<std::uint32_t*>(&word), FUTEX_WAIT_PRIVATE, expected, &ts,
          nullptr, 0);
#else
  if (word.load(std::memory_order_relaxed) == expected) std::this_thread::sleep_for(timeout / 10);
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
