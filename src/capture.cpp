// The process-wide capture tracker (see detail/capture.hpp).
#include "detail/capture.hpp"

#include <algorithm>

namespace cachalot::detail {

capture_tracker& capture_tracker::instance() {
  static auto* t = new capture_tracker();  // never destroyed: engines may outlive statics
  return *t;
}

void capture_tracker::declare() {
  std::unique_lock<std::shared_mutex> fence(fence_);  // waits for sections in flight
  declared_.fetch_add(1, std::memory_order_acq_rel);
}

void capture_tracker::undeclare() noexcept {
  declared_.fetch_sub(1, std::memory_order_acq_rel);
}

void capture_tracker::observe(const std::shared_ptr<device_backend>& backend, stream_t stream) {
  std::lock_guard<std::mutex> lock(observed_mutex_);
  for (const observed& o : observed_) {
    if (o.key == backend.get() && o.stream == stream) return;
  }
  observed_.push_back(observed{backend, backend.get(), stream});
  observed_count_.store(observed_.size(), std::memory_order_release);
}

bool capture_tracker::underway() {
  if (declared_.load(std::memory_order_acquire) != 0) return true;
  if (observed_count_.load(std::memory_order_acquire) == 0) return false;
  std::lock_guard<std::mutex> lock(observed_mutex_);
  // Forget streams whose capture ended (or whose backend is gone); asking is always legal.
  const auto ended = [](const observed& o) {
    const std::shared_ptr<device_backend> b = o.backend.lock();
    if (!b) return true;
    try {
      return !b->is_capturing(o.stream);
    } catch (...) {  // the stream is gone (destroyed after its capture): nothing captures on it
      return true;
    }
  };
  observed_.erase(std::remove_if(observed_.begin(), observed_.end(), ended), observed_.end());
  observed_count_.store(observed_.size(), std::memory_order_release);
  return !observed_.empty();
}

}  // namespace cachalot::detail
