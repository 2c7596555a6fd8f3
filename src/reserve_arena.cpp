// The reserve's free ranges (see detail/reserve_arena.hpp).
#include "detail/reserve_arena.hpp"

#include <iterator>

namespace cachalot::detail {

reserve_arena::reserve_arena(std::uintptr_t base, std::size_t size, std::size_t alignment)
    : base_(base), size_(size), alignment_(alignment) {
  if (size != 0) {
    by_address_.emplace(base, size);
    by_size_.emplace(size, base);
    free_ = size;
  }
}

void* reserve_arena::carve(std::size_t bytes) {
  const std::size_t n = rounded(bytes);
  std::lock_guard<std::mutex> lock(mutex_);
  const auto it = by_size_.lower_bound({n, 0});
  if (n == 0 || it == by_size_.end()) return nullptr;
  const auto [size, start] = *it;
  by_size_.erase(it);
  by_address_.erase(start);
  if (size > n) {
    by_address_.emplace(start + n, size - n);
    by_size_.emplace(size - n, start + n);
  }
  free_ -= n;
  return reinterpret_cast<void*>(start);
}

bool reserve_arena::fits(std::size_t bytes) const {
  const std::size_t n = rounded(bytes);
  std::lock_guard<std::mutex> lock(mutex_);
  return n != 0 && by_size_.lower_bound({n, 0}) != by_size_.end();
}

bool reserve_arena::give_back(std::uintptr_t addr, std::size_t bytes) {
  if (!contains(addr)) return false;
  std::uintptr_t start = addr;
  std::size_t n = rounded(bytes);
  std::lock_guard<std::mutex> lock(mutex_);
  free_ += n;
  auto next = by_address_.lower_bound(start);
  if (next != by_address_.end() && next->first == start + n) {  // merge with the range above
    n += next->second;
    by_size_.erase({next->second, next->first});
    next = by_address_.erase(next);
  }
  if (next != by_address_.begin()) {  // and with the range below
    const auto prev = std::prev(next);
    if (prev->first + prev->second == start) {
      start = prev->first;
      n += prev->second;
      by_size_.erase({prev->second, prev->first});
      by_address_.erase(prev);
    }
  }
  by_address_.emplace(start, n);
  by_size_.emplace(n, start);
  return true;
}

std::size_t reserve_arena::free_bytes() const {
  std::lock_guard<std::mutex> lock(mutex_);
  return free_;
}

}  // namespace cachalot::detail
