// The minimum-capacity search (see min_capacity.hpp).
#include "trace/min_capacity.hpp"

#include <algorithm>
#include <cmath>

#include "cachalot/errors.hpp"

namespace cachalot::tools {
namespace {

std::size_t round_up(std::size_t v, std::size_t g) {
  return (v + g - 1) / g * g;
}

}  // namespace

min_capacity_result find_min_capacity(const prepared_trace& p, const config& base,
                                      const min_capacity_options& o) {
  min_capacity_result r;
  const std::size_t g = o.granule;
  const std::size_t peak = p.summary.peak_requested_bytes;
  const auto ok = [&](std::size_t capacity) {
    ++r.replays;
    r.searched_up_to = std::max(r.searched_up_to, capacity);
    try {
      return replay_at(p, base, capacity, true).complete();  // stops at the first refusal
    } catch (const invalid_argument&) {
      return false;  // a capacity the config cannot start with (e.g. below its reserve)
    }
  };
  const std::size_t step =
      round_up(std::max<std::size_t>(
                   g, static_cast<std::size_t>(std::ceil(o.precision * static_cast<double>(peak)))),
               g);
  const double limit = std::min(o.max_factor * static_cast<double>(std::max<std::size_t>(peak, g)),
                                static_cast<double>(max_replay_capacity));
  // lo: a capacity known to fail (below the peak nothing can pass); hi: one to try.
  std::size_t lo = peak > g ? (peak - 1) / g * g : 0;
  std::size_t hi = std::max(g, round_up(peak, g));
  bool hinted = false;
  if (o.hint != 0) {
    const std::size_t h = std::max(hi, round_up(o.hint, g));
    if (static_cast<double>(h) <= limit) {
      hinted = ok(h);
      (hinted ? hi : lo) = h;
      if (!hinted) hi = round_up(h * 2, g);
    }
  }
  while (!hinted) {
    if (static_cast<double>(hi) > limit) return r;  // not found
    if (ok(hi)) break;
    lo = hi;
    hi = round_up(hi * 2, g);
  }
  while (hi - lo > step) {
    const std::size_t mid = std::max(lo + g, (lo + (hi - lo) / 2) / g * g);
    if (mid >= hi) break;
    (ok(mid) ? hi : lo) = mid;
  }
  r.found = true;
  r.bytes = hi;
  r.factor = peak == 0 ? 0.0 : static_cast<double>(hi) / static_cast<double>(peak);
  r.precision = hi - lo;
  return r;
}

}  // namespace cachalot::tools
