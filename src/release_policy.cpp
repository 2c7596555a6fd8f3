// The release policy (detail/release_policy.hpp): regimes, the release mark and its band.
#include "detail/release_policy.hpp"

#include <algorithm>

namespace cachalot::detail {
namespace {

std::size_t fraction_of(std::size_t bytes, double f) noexcept {
  if (f <= 0.0) return 0;
  return static_cast<std::size_t>(static_cast<long double>(bytes) * static_cast<long double>(f));
}

std::size_t round_up(std::size_t bytes, std::size_t unit) noexcept {
  return unit == 0 ? bytes : (bytes + unit - 1) / unit * unit;
}

}  // namespace

release_policy::release_policy(const policy_settings& s) noexcept
    : s_(s),
      gc_bytes_(fraction_of(s.limit, s.gc_threshold)),
      pressure_bytes_(fraction_of(s.limit, s.pressure_threshold)),
      tight_(!s.adaptive),
      split_limit_(s.adaptive ? std::max(s.max_split_size, fraction_of(s.limit, s.relaxed_split))
                              : s.max_split_size),
      relaxed_limit_(split_limit_.load()),
      band_(0) {}

std::size_t release_policy::mark() const noexcept {
  if (gc_bytes_ == 0) return 0;
  if (!s_.expandable) return gc_bytes_;
  // Expandable segments: memory never needed at the in-use peak is not kept either: at most
  // 2 % (plus a chunk) above it (docs/benchmarks.md).
  const std::size_t peak = in_use_peak_.load(std::memory_order_relaxed);
  const std::size_t m = round_up(peak + peak / 50, s_.chunk) + s_.chunk;
  return std::min(m, gc_bytes_);
}

release_advice release_policy::before_growth(std::size_t committed,
                                             std::size_t need) const noexcept {
  if (!tight()) return {};
  const std::size_t m = mark();
  if (m == 0 || committed + need <= m) return {};
  const std::size_t keep = m > need ? m - need : 0;
  const std::size_t b = band_.load(std::memory_order_relaxed);
  return {true, keep > b ? keep - b : 0};
}

void release_policy::update_regime(std::size_t in_use_peak) noexcept {
  if (!s_.adaptive) return;
  const bool t = pressure_bytes_ != 0 && in_use_peak > pressure_bytes_;
  tight_.store(t, std::memory_order_relaxed);
  split_limit_.store(t ? s_.max_split_size : relaxed_limit_, std::memory_order_relaxed);
}

void release_policy::on_in_use_peak(std::size_t bytes) noexcept {
  std::size_t seen = in_use_peak_.load(std::memory_order_relaxed);
  while (bytes > seen &&
         !in_use_peak_.compare_exchange_weak(seen, bytes, std::memory_order_relaxed)) {
  }
  if (bytes > seen && !tight()) update_regime(bytes);
}

void release_policy::on_peak_reset(std::size_t bytes) noexcept {
  in_use_peak_.store(bytes, std::memory_order_relaxed);
  update_regime(bytes);
}

void release_policy::on_growth(std::size_t bytes) noexcept {
  if (!tight() || !s_.adaptive) return;  // (eager: as before the policy, no band)
  std::lock_guard<std::mutex> lock(lock_);
  const auto end = released_.begin() + static_cast<std::ptrdiff_t>(std::min(next_, history));
  if (std::find(released_.begin(), end, bytes) == end) return;
  // A size just released is made again: the next release goes further below the mark.
  remakes_.fetch_add(1, std::memory_order_relaxed);
  remade_since_pass_ = true;
  const std::size_t cap = mark() / 4;
  const std::size_t b = band_.load(std::memory_order_relaxed);
  band_.store(std::min(cap, std::max(2 * b, bytes)), std::memory_order_relaxed);
}

void release_policy::on_released(std::size_t bytes) noexcept {
  std::lock_guard<std::mutex> lock(lock_);
  released_[next_ % history] = bytes;
  ++next_;
}

void release_policy::on_release_pass() noexcept {
  std::lock_guard<std::mutex> lock(lock_);
  if (!remade_since_pass_) band_.store(band_.load(std::memory_order_relaxed) / 2);
  remade_since_pass_ = false;
}

}  // namespace cachalot::detail
