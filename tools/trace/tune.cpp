// The config tuner (see tune.hpp): candidates, their parallel replay with early stop, and the
// coordinate-descent rounds.
#include "trace/tune.hpp"

#include <fmt/format.h>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <cmath>
#include <mutex>
#include <stdexcept>
#include <string>
#include <thread>
#include <tuple>

#include "cachalot/errors.hpp"

namespace cachalot::tools {
namespace {

constexpr std::size_t none = SIZE_MAX;

const std::vector<std::size_t> split_values = {32 * MiB,  none,      64 * MiB,
                                               128 * MiB, 256 * MiB, 1024 * MiB};
const std::vector<double> gc_values = {0.9, 0.0, 0.8, 0.7, 0.6, 0.5};
const std::vector<std::uint32_t> division_values = {0, 2, 4, 8};

std::string size_text(std::size_t v) {
  if (v == none) return "none";
  if (v % MiB == 0) return fmt::format("{}MiB", v / MiB);
  if (v % KiB == 0) return fmt::format("{}KiB", v / KiB);
  return fmt::format("{}B", v);
}

/// Lexicographic order of scores (lower is better).
auto key(const tune_score& s) {
  return std::make_tuple(s.ooms, s.cost, s.calls);
}

std::uint64_t quantized(std::size_t bytes, std::size_t quantum) {
  return (bytes + quantum - 1) / quantum * quantum;
}

/// a + b and a x b, saturating at the largest value: a weight of SIZE_MAX bytes per call (or
/// summed over traces) must rank configs by calls, never wrap around into a small cost.
std::uint64_t saturated_add(std::uint64_t a, std::uint64_t b) {
  std::uint64_t r = 0;
  return __builtin_add_overflow(a, b, &r) ? UINT64_MAX : r;
}
std::uint64_t saturated_mul(std::uint64_t a, std::uint64_t b) {
  std::uint64_t r = 0;
  return __builtin_mul_overflow(a, b, &r) ? UINT64_MAX : r;
}

/// Every setting that differs from `s` in one dimension.
std::vector<tune_setting> neighbours(const tune_setting& s) {
  std::vector<tune_setting> out;
  // large_chunk means nothing with fixed segments: one form of each such setting, so that two
  // alike are not both replayed.
  const auto canonical = [](tune_setting t) {
    if (!t.expandable) t.large_chunk = 0;
    return t;
  };
  const tune_setting self = canonical(s);
  const auto vary = [&](auto member, const auto& values) {
    for (const auto& v : values) {
      tune_setting n = s;
      n.*member = v;
      n = canonical(n);
      if (!(n == self)) out.push_back(n);
    }
  };
  vary(&tune_setting::expandable, std::vector<bool>{false, true});
  if (!s.expandable) vary(&tune_setting::max_split_size, split_values);  // ignored when expandable
  vary(&tune_setting::gc_threshold, gc_values);
  vary(&tune_setting::eager, std::vector<bool>{false, true});
  vary(&tune_setting::bands,
       std::vector<band_mode>{band_mode::lazy, band_mode::eager, band_mode::off});
  if (s.expandable) vary(&tune_setting::large_chunk, std::vector<std::size_t>{0, 20 * MiB});
  vary(&tune_setting::divisions, division_values);
  std::vector<std::size_t> families(tune_segment_families().size());
  for (std::size_t i = 0; i < families.size(); ++i) families[i] = i;
  vary(&tune_setting::segments, families);
  return out;
}

/// The shared state of one search.
class searcher {
 public:
  searcher(const std::vector<const prepared_trace*>& traces, const std::vector<config>& bases,
           const tune_options& o)
      : traces_(traces), bases_(bases), o_(o) {}

  /// Replays `settings` in parallel; returns them in the same order.
  std::vector<tune_candidate> run(const std::vector<tune_setting>& settings) {
    std::vector<tune_candidate> out(settings.size());
    std::atomic<std::size_t> next{0};
    const auto work = [&] {
      for (std::size_t i = next++; i < settings.size(); i = next++) {
        try {
          out[i] = evaluate(settings[i]);
        } catch (const std::exception& e) {  // never across a thread: the candidate is out
          out[i].setting = settings[i];
          out[i].stopped = true;
          out[i].error = e.what();
        }
        report(out[i]);
      }
    };
    const std::size_t n = std::max<std::size_t>(1, std::min(o_.threads, settings.size()));
    std::vector<std::thread> pool;
    for (std::size_t t = 1; t < n; ++t) pool.emplace_back(work);
    work();
    for (std::thread& t : pool) t.join();
    return out;
  }

  /// Replays one setting on the calling thread; its exceptions propagate.
  tune_candidate run_here(const tune_setting& setting) {
    tune_candidate c = evaluate(setting);
    report(c);
    return c;
  }

  std::size_t replayed() const { return replayed_; }
  void set_round(std::size_t r) { round_ = r; }
  std::size_t stopped() const { return stopped_; }

 private:
  tune_candidate evaluate(const tune_setting& s) {
    tune_candidate c;
    c.setting = s;
    tune_score done;  // of the traces replayed so far
    for (std::size_t t = 0; t < traces_.size(); ++t) {
      config cfg = apply_setting(bases_[t], s);
      cfg.trace_file.clear();
      replay_options ro;
      ro.use_threads = false;
      if (o_.prune) {
        ro.stop = [&](const memory_stats& st, std::size_t ooms) {
          tune_score so_far = done;
          so_far.ooms += ooms;
          const std::uint64_t calls = st.num_segment_allocs + st.num_segment_frees +
                                      st.num_chunk_maps + st.num_chunk_unmaps;
          so_far.cost = saturated_add(
              so_far.cost, trace_cost(st.reserved_bytes.all.peak, calls, st.device.total_ns(),
                                      o_.quantum, o_.weight, time_weight(t)));
          so_far.calls += calls;
          return worse_than_best(so_far);
        };
      }
      replay_result r = replay(*traces_[t], cfg, ro);
      if (r.stopped) {
        c.stopped = true;
        c.runs.clear();
        return c;
      }
      const std::uint64_t calls = device_calls(r);
      done.ooms += r.ooms + r.errors;
      done.cost = saturated_add(done.cost, trace_cost(r.peak_reserved, calls, r.device.total_ns(),
                                                      o_.quantum, o_.weight, time_weight(t)));
      done.calls += calls;
      c.runs.push_back(std::move(r));
    }
    c.score = done;
    offer(done);
    return c;
  }

  double time_weight(std::size_t t) const {
    return t < o_.time_weight.size() ? o_.time_weight[t] : 0.0;
  }

  bool worse_than_best(const tune_score& s) {
    const std::lock_guard<std::mutex> lock(mutex_);
    return have_best_ && key(s) > key(best_);
  }

  void offer(const tune_score& s) {
    const std::lock_guard<std::mutex> lock(mutex_);
    if (!have_best_ || key(s) < key(best_)) best_ = s, have_best_ = true;
  }

  void report(const tune_candidate& c) {
    const std::lock_guard<std::mutex> lock(mutex_);
    ++replayed_;
    if (c.stopped) ++stopped_;
    if (o_.progress) {
      o_.progress(fmt::format("round {}: {} configs replayed, {} stopped early", round_, replayed_,
                              stopped_));
    }
  }

  const std::vector<const prepared_trace*>& traces_;
  const std::vector<config>& bases_;
  const tune_options& o_;
  std::mutex mutex_;
  bool have_best_ = false;
  tune_score best_;
  std::size_t replayed_ = 0;
  std::size_t stopped_ = 0;
  std::size_t round_ = 0;
};

/// True when `a` beats `b` (complete candidates; index order breaks ties by the caller).
bool better(const tune_candidate& a, const tune_candidate& b) {
  return !a.stopped && (b.stopped || key(a.score) < key(b.score));
}

bool valid(const std::vector<config>& bases, const tune_setting& s) {
  try {
    for (const config& b : bases) apply_setting(b, s).validate();
    return true;
  } catch (const invalid_argument&) {
    return false;
  }
}

}  // namespace

const std::vector<tune_segment_family>& tune_segment_families() {
  static const std::vector<tune_segment_family> families = {
      {"default", 1 * MiB, 2 * MiB, 10 * MiB, 20 * MiB},
      {"small-mid", 1 * MiB, 2 * MiB, 4 * MiB, 8 * MiB},
      {"large-mid", 2 * MiB, 4 * MiB, 16 * MiB, 32 * MiB},
      {"tiny-small", 512 * KiB, 2 * MiB, 10 * MiB, 20 * MiB},
  };
  return families;
}

tune_setting setting_of(const config& cfg) {
  tune_setting s;
  s.expandable = cfg.expandable_segments;
  s.max_split_size = cfg.max_split_size;
  s.gc_threshold = cfg.gc_threshold;
  s.eager = cfg.release_policy == release_mode::eager;
  s.bands = cfg.size_bands;
  s.large_chunk = cfg.large_chunk;
  s.divisions = cfg.roundup_power2_divisions[0];
  const auto& f = tune_segment_families();
  for (std::size_t i = 0; i < f.size(); ++i) {
    if (f[i].small_size == cfg.small_size && f[i].small_segment == cfg.small_segment_size &&
        f[i].mid_size == cfg.mid_size_limit && f[i].large_segment == cfg.large_segment_size) {
      s.segments = i;
    }
  }
  return s;
}

config apply_setting(const config& base, const tune_setting& s) {
  config c = base;
  c.expandable_segments = s.expandable;
  c.max_split_size = s.max_split_size;
  c.gc_threshold = s.gc_threshold;
  c.release_policy = s.eager ? release_mode::eager : release_mode::adaptive;
  c.size_bands = s.bands;
  c.large_chunk = s.large_chunk;
  c.roundup_power2_divisions.fill(s.divisions);
  const tune_segment_family& f = tune_segment_families().at(s.segments);
  c.small_size = f.small_size;
  c.small_segment_size = f.small_segment;
  c.mid_size_limit = f.mid_size;
  c.large_segment_size = f.large_segment;
  return c;
}

std::string setting_string(const tune_setting& s) {
  const tune_setting d = setting_of(config{});
  std::vector<std::string> items;
  if (s.expandable != d.expandable)
    items.push_back(fmt::format("expandable_segments:{}", s.expandable ? 1 : 0));
  if (s.max_split_size != d.max_split_size && !s.expandable) {
    items.push_back("max_split_size:" + size_text(s.max_split_size));
  }
  if (s.gc_threshold != d.gc_threshold) {
    items.push_back(s.gc_threshold == 0.0 ? std::string("gc_threshold:off")
                                          : fmt::format("gc_threshold:{}", s.gc_threshold));
  }
  if (s.eager != d.eager)
    items.push_back(s.eager ? "release_policy:eager" : "release_policy:adaptive");
  if (s.bands != d.bands) {
    items.push_back(s.bands == band_mode::eager ? "size_bands:eager"
                    : s.bands == band_mode::off ? "size_bands:off"
                                                : "size_bands:lazy");
  }
  if (s.large_chunk != d.large_chunk && s.expandable) {
    items.push_back(s.large_chunk == 0 ? std::string("large_chunk:granule")
                                       : "large_chunk:" + size_text(s.large_chunk));
  }
  if (s.divisions != d.divisions)
    items.push_back(fmt::format("roundup_power2_divisions:{}", s.divisions));
  if (s.segments != d.segments) {
    const tune_segment_family& f = tune_segment_families().at(s.segments);
    const tune_segment_family& df = tune_segment_families().at(d.segments);
    if (f.small_size != df.small_size) items.push_back("small_size:" + size_text(f.small_size));
    if (f.small_segment != df.small_segment) {
      items.push_back("small_segment:" + size_text(f.small_segment));
    }
    if (f.mid_size != df.mid_size) items.push_back("mid_size:" + size_text(f.mid_size));
    if (f.large_segment != df.large_segment) {
      items.push_back("large_segment:" + size_text(f.large_segment));
    }
  }
  std::string out;
  for (const std::string& i : items) out += (out.empty() ? "" : ",") + i;
  return out;
}

std::uint64_t device_calls(const replay_result& r) {
  return r.segment_allocs + r.segment_frees + r.chunk_maps + r.chunk_unmaps;
}

double auto_time_weight(const trace_summary& s) {
  if (s.span_us == 0) return 0.0;
  return static_cast<double>(s.peak_requested_bytes) / (static_cast<double>(s.span_us) / 1e3);
}

std::uint64_t trace_cost(std::size_t peak_reserved, std::uint64_t calls, std::uint64_t device_ns,
                         std::size_t quantum, std::size_t weight, double time_weight) {
  const double time_cost = time_weight * static_cast<double>(device_ns) / 1e6;
  const std::uint64_t time_bytes = time_cost >= 9e18
                                       ? std::uint64_t{9} * 1000000000000000000u
                                       : static_cast<std::uint64_t>(std::llround(time_cost));
  return saturated_add(
      saturated_add(quantized(peak_reserved, quantum), saturated_mul(weight, calls)), time_bytes);
}

tune_result tune(const std::vector<const prepared_trace*>& traces, const std::vector<config>& bases,
                 const tune_options& options) {
  const auto t0 = std::chrono::steady_clock::now();
  searcher s(traces, bases, options);
  tune_result res;
  const tune_setting start = setting_of(bases.at(0));
  std::vector<tune_setting> seen{start};
  // Round 0 replays the base alone first, without pruning pressure from others: its figures
  // are always complete.
  res.base = s.run_here(start);  // on this thread: its errors reach the caller
  if (res.base.stopped) throw std::logic_error("tune: the base replay was stopped");
  res.best = res.base;
  for (res.rounds = 1; res.rounds <= options.max_rounds; ++res.rounds) {
    std::vector<tune_setting> round;
    for (const tune_setting& n : neighbours(res.best.setting)) {
      if (std::find(seen.begin(), seen.end(), n) != seen.end()) continue;
      seen.push_back(n);
      if (valid(bases, n)) round.push_back(n);
    }
    s.set_round(res.rounds);
    const std::vector<tune_candidate> done = s.run(round);
    bool improved = false;
    for (const tune_candidate& c : done) {
      if (better(c, res.best)) res.best = c, improved = true;
    }
    if (!improved) break;
  }
  res.rounds = std::min(res.rounds, options.max_rounds);
  res.replayed = s.replayed();
  res.stopped = s.stopped();
  res.seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  return res;
}

}  // namespace cachalot::tools
