// `cachalot-replay --tune` (see tune_report.hpp): the search, the side-by-side measurements and
// their output.
#include "trace/tune_report.hpp"

#include <fmt/format.h>

#include <algorithm>
#include <atomic>
#include <cmath>
#include <cstdio>
#include <mutex>
#include <string_view>
#include <thread>

#include "trace/min_capacity.hpp"
#include "trace/report.hpp"

namespace cachalot::tools {
namespace {

constexpr const char* objective_text =
    "fewest out-of-memory errors at the capacity, then least peak reserved (2 MiB steps) plus "
    "--tune-weight bytes per device call plus --tune-time-weight bytes per modeled ms of device "
    "time, then fewest device calls";

/// The time weight of each trace, as the request asks.
std::vector<double> time_weights(const std::vector<const prepared_trace*>& traces,
                                 const tune_request& rq) {
  std::vector<double> w;
  for (const prepared_trace* p : traces) {
    w.push_back(rq.time_weight_auto ? auto_time_weight(p->summary) : rq.time_weight);
  }
  return w;
}

std::string weight_text(double bytes_per_ms) {
  return fmt::format("{}/ms", format_bytes(static_cast<std::size_t>(std::llround(bytes_per_ms))));
}

/// Items of a key:value,... string, split at commas outside brackets.
std::vector<std::string> config_items(std::string_view text) {
  std::vector<std::string> items;
  std::string cur;
  int depth = 0;
  for (const char c : text) {
    depth += c == '[' ? 1 : c == ']' ? -1 : 0;
    if (c == ',' && depth == 0) {
      items.push_back(cur);
      cur.clear();
    } else {
      cur += c;
    }
  }
  items.push_back(cur);
  return items;
}

std::string item_key(const std::string& item) {
  std::string k = item.substr(0, item.find(':'));
  k.erase(0, k.find_first_not_of(' '));
  k.erase(k.find_last_not_of(' ') + 1);
  return k;
}

bool dropped_key(const std::string& k) {
  static const char* const keys[] = {
      "backend",        "capacity",          "host_backing", "expandable_segments",
      "max_split_size", "max_split_size_mb", "gc_threshold", "garbage_collection_threshold",
      "small_size",     "small_segment",     "mid_size",     "large_segment",
      "release_policy", "size_bands",        "large_chunk",  "roundup_power2_divisions"};
  return k.empty() || std::find(std::begin(keys), std::end(keys), k) != std::end(keys);
}

double median(std::vector<double> v) {
  std::sort(v.begin(), v.end());
  const std::size_t n = v.size();
  return n % 2 == 1 ? v[n / 2] : (v[n / 2 - 1] + v[n / 2]) / 2;
}

/// Median ns per op of `repeat` replays.
double timed(const prepared_trace& p, const config& cfg, const tune_request& r) {
  std::vector<double> ns;
  for (std::size_t i = 0; i < std::max<std::size_t>(1, r.repeat); ++i) {
    replay_options ro;
    ro.use_threads = r.use_threads;
    config c = cfg;
    c.trace_file.clear();
    ns.push_back(replay(p, c, ro).ns_per_op);
  }
  return median(ns);
}

/// Side-by-side figures of one trace.
struct trace_pair {
  const prepared_trace* trace = nullptr;
  double time_weight = 0;  ///< bytes per modeled ms in the objective
  replay_result base, best;
  min_capacity_result base_min, best_min;
  std::string base_config, best_config;  // the configs replayed (to_string)
};

/// The min-capacity searches of every trace for both configs, in parallel.
void min_capacities(std::vector<trace_pair>& pairs, const std::vector<config>& base,
                    const std::vector<config>& best, std::size_t threads) {
  std::atomic<std::size_t> next{0};
  const std::size_t jobs = pairs.size() * 2;
  const auto work = [&] {
    for (std::size_t j = next++; j < jobs; j = next++) {
      trace_pair& tp = pairs[j / 2];
      const replay_result& run = j % 2 == 0 ? tp.base : tp.best;
      min_capacity_options mo;
      if (run.complete()) mo.hint = run.peak_reserved;  // it never needed more
      (j % 2 == 0 ? tp.base_min : tp.best_min) =
          find_min_capacity(*tp.trace, j % 2 == 0 ? base[j / 2] : best[j / 2], mo);
    }
  };
  std::vector<std::thread> pool;
  for (std::size_t t = 1; t < std::min(threads, jobs); ++t) pool.emplace_back(work);
  work();
  for (std::thread& t : pool) t.join();
}

std::string min_cell(const min_capacity_result& m) {
  return m.found ? fmt::format("{} ({:.3f}x)", format_bytes(m.bytes), m.factor)
                 : fmt::format("none up to {}", format_bytes(m.searched_up_to));
}

std::string signed_bytes(long double delta) {
  const std::size_t mag = static_cast<std::size_t>(delta < 0 ? -delta : delta);
  return fmt::format("{}{}", delta < 0 ? "-" : "", format_bytes(mag));
}

std::string verdict(const std::vector<trace_pair>& pairs) {
  long double reserved = 0, base_reserved = 0, capacity = 0;
  long long calls = 0;
  double device_ms = 0;
  std::size_t base_ooms = 0, best_ooms = 0;
  bool capacity_known = true;
  for (const trace_pair& tp : pairs) {
    reserved += static_cast<long double>(tp.base.peak_reserved) - tp.best.peak_reserved;
    base_reserved += tp.base.peak_reserved;
    calls += static_cast<long long>(device_calls(tp.best)) -
             static_cast<long long>(device_calls(tp.base));
    device_ms += tp.best.device_ms() - tp.base.device_ms();
    base_ooms += tp.base.ooms;
    best_ooms += tp.best.ooms;
    capacity_known = capacity_known && tp.base_min.found && tp.best_min.found;
    if (capacity_known) {
      capacity += static_cast<long double>(tp.base_min.bytes) - tp.best_min.bytes;
    }
  }
  std::vector<std::string> parts;
  if (base_ooms > best_ooms) {
    parts.push_back(
        fmt::format("avoids {} of the default's {} out-of-memory errors at the capacity",
                    base_ooms - best_ooms, base_ooms));
  }
  const double pct = base_reserved == 0 ? 0.0 : static_cast<double>(100 * reserved / base_reserved);
  parts.push_back(
      reserved >= 0
          ? fmt::format("saves {} of peak reserved ({:.1f}%)", signed_bytes(reserved), pct)
          : fmt::format("reserves {} more at its peak ({:+.1f}%)", signed_bytes(-reserved), -pct));
  if (base_ooms > 0) parts.back() += " (the default's peak covers only what it served)";
  if (capacity_known) {
    parts.push_back(capacity >= 0 ? fmt::format("needs {} less capacity", signed_bytes(capacity))
                                  : fmt::format("needs {} more capacity", signed_bytes(-capacity)));
  }
  std::string out;
  for (const std::string& p : parts) out += (out.empty() ? "" : ", ") + p;
  out += calls >= 0 ? fmt::format("; costs {} more device calls", calls)
                    : fmt::format("; and makes {} fewer device calls", -calls);
  return out + (device_ms >= 0
                    ? fmt::format(" and {:.3f} ms more modeled device time", device_ms)
                    : fmt::format(" and {:.3f} ms less modeled device time", -device_ms));
}

std::string text_table(const trace_pair& tp) {
  const replay_result& a = tp.base;
  const replay_result& b = tp.best;
  std::vector<std::vector<std::string>> rows = {{"", "default", "recommended"}};
  const auto add = [&](const std::string& name, auto&& f) { rows.push_back({name, f(a), f(b)}); };
  add("peak reserved", [](const replay_result& x) { return format_bytes(x.peak_reserved); });
  add("fragmentation", [](const replay_result& x) {
    return x.complete() ? fmt::format("{:.3f}", x.fragmentation) : std::string("n/a");
  });
  add("out of memory at " + format_bytes(a.capacity),
      [](const replay_result& x) { return std::to_string(x.ooms); });
  rows.push_back({"smallest capacity without OOM", min_cell(tp.base_min), min_cell(tp.best_min)});
  add("segment allocs / frees", [](const replay_result& x) {
    return fmt::format("{} / {}", x.segment_allocs, x.segment_frees);
  });
  add("chunk maps / unmaps",
      [](const replay_result& x) { return fmt::format("{} / {}", x.chunk_maps, x.chunk_unmaps); });
  add("device calls (all kinds)",
      [](const replay_result& x) { return std::to_string(x.device.total_calls()); });
  add("device syncs (explicit / implied)", [](const replay_result& x) {
    return fmt::format("{} / {}", x.device.explicit_syncs(), x.device.implied_syncs);
  });
  add("modeled device time", [](const replay_result& x) {
    return fmt::format("{:.3f} ms ({:.3f} ms per 1,000 ops)", x.device_ms(),
                       x.device_ms_per_1k_ops());
  });
  add("  share of the trace's span", [](const replay_result& x) {
    const double share = x.device_span_share();
    return std::isfinite(share) ? fmt::format("{:.2f}%", 100.0 * share) : std::string("n/a");
  });
  add("ns per op (median)",
      [](const replay_result& x) { return fmt::format("{:.1f}", x.ns_per_op); });
  std::size_t w0 = 0, w1 = 0, w2 = 0;
  for (const auto& r : rows) {
    w0 = std::max(w0, r[0].size()), w1 = std::max(w1, r[1].size()), w2 = std::max(w2, r[2].size());
  }
  std::string out;
  for (const auto& r : rows) {
    out += fmt::format("  {:<{}}  {:>{}}  {:>{}}\n", r[0], w0, r[1], w1, r[2], w2);
  }
  return out;
}

std::string text_output(const tune_result& res, const std::vector<trace_pair>& pairs,
                        const std::string& conf, const tune_request& rq) {
  std::string out = fmt::format(
      "cachalot-replay --tune: {} configs replayed in {:.2f} s on {} threads ({} stopped early)\n",
      res.replayed, res.seconds, rq.threads, res.stopped);
  out += fmt::format("objective: {} (weight {} B per call, time weight {})\n", objective_text,
                     rq.weight,
                     rq.time_weight_auto ? std::string("auto: each trace's peak per ms of its span")
                                         : weight_text(rq.time_weight));
  out += fmt::format("search: {} trace{}, {} round{} of coordinate descent\n", pairs.size(),
                     pairs.size() == 1 ? "" : "s", res.rounds, res.rounds == 1 ? "" : "s");
  out += res.best.setting == res.base.setting
             ? "recommended: the defaults (nothing searched did better)\n"
             : "recommended:\n";
  out += fmt::format("  CACHALOT_CONF={}\n", conf);
  for (const trace_pair& tp : pairs) {
    out += fmt::format(
        "\n{}: {} ops, trace peak {}, span {:.1f} ms, time weight {}\n", tp.trace->name,
        tp.trace->ops.size(), format_bytes(tp.trace->summary.peak_requested_bytes),
        static_cast<double>(tp.trace->summary.span_us) / 1e3, weight_text(tp.time_weight));
    out += text_table(tp);
    out += pytorch_text(tp.trace->summary.pytorch, 0);
  }
  out += "\nrecommendation " + verdict(pairs) + "\n";
  return out;
}

std::string json_output(const tune_result& res, const std::vector<trace_pair>& pairs,
                        const std::string& conf, const tune_request& rq) {
  std::string out = fmt::format(
      "{{\"tune\":true,\"recommended\":{},\"recommended_is_default\":{},\"weight_bytes\":{},"
      "\"time_weight\":{},\"configs_replayed\":{},\"stopped_early\":{},\"rounds\":{},"
      "\"search_seconds\":{},\"traces\":[",
      json_string(conf), res.best.setting == res.base.setting ? "true" : "false", rq.weight,
      rq.time_weight_auto ? std::string("\"auto\"") : json_number(rq.time_weight), res.replayed,
      res.stopped, res.rounds, json_number(res.seconds));
  for (std::size_t i = 0; i < pairs.size(); ++i) {
    const trace_pair& tp = pairs[i];
    out += fmt::format(
        "{}{{\"trace\":{},\"trace_peak_requested_bytes\":{},\"trace_span_us\":{},"
        "\"time_weight_bytes_per_ms\":{},\"default_config\":{},\"recommended_config\":{},"
        "\"default\":{{{}}},\"recommended\":{{{}}},"
        "\"default_min_capacity\":{},\"recommended_min_capacity\":{}",
        i == 0 ? "" : ",", json_string(tp.trace->name), tp.trace->summary.peak_requested_bytes,
        tp.trace->summary.span_us, json_number(tp.time_weight), json_string(tp.base_config),
        json_string(tp.best_config), json_figures(tp.base), json_figures(tp.best),
        json_min_capacity(tp.base_min), json_min_capacity(tp.best_min));
    out += pytorch_json(tp.trace->summary.pytorch) + "}";
  }
  return out + "]}";
}

}  // namespace

std::string recommended_conf(const std::string& user_config, const tune_setting& best) {
  std::string out;
  for (const std::string& item : config_items(user_config)) {
    if (!dropped_key(item_key(item))) out += (out.empty() ? "" : ",") + item;
  }
  const std::string tuned = setting_string(best);
  if (!tuned.empty()) out += (out.empty() ? "" : ",") + tuned;
  return out;
}

bool tunable(const config& base) {
  return apply_setting(base, setting_of(base)) == base;
}

int run_tune(const std::vector<const prepared_trace*>& traces, const std::vector<config>& bases,
             const tune_request& rq, std::ostream& out, std::ostream& err) {
  std::mutex progress_mutex;
  tune_options o;
  o.threads = rq.threads;
  o.weight = rq.weight;
  o.time_weight = time_weights(traces, rq);
  if (rq.progress) {
    o.progress = [&](const std::string& line) {
      const std::lock_guard<std::mutex> lock(progress_mutex);
      std::fprintf(stderr, "\r\033[Ktune: %s", line.c_str());
    };
  }
  const tune_result res = tune(traces, bases, o);
  std::vector<config> best(bases.size());
  std::vector<trace_pair> pairs(traces.size());
  for (std::size_t i = 0; i < traces.size(); ++i) {
    best[i] = apply_setting(bases[i], res.best.setting);
    pairs[i].trace = traces[i];
    pairs[i].time_weight = o.time_weight[i];
    pairs[i].base = res.base.runs.at(i);
    pairs[i].best = res.best.runs.at(i);
    pairs[i].base_config = bases[i].to_string();
    pairs[i].best_config = best[i].to_string();
  }
  if (o.progress) o.progress("smallest capacities");
  min_capacities(pairs, bases, best, rq.threads);
  if (o.progress) o.progress("timing");
  for (std::size_t i = 0; i < pairs.size(); ++i) {
    pairs[i].base.ns_per_op = timed(*traces[i], bases[i], rq);
    pairs[i].best.ns_per_op = timed(*traces[i], best[i], rq);
  }
  if (rq.progress) std::fputs("\r\033[K", stderr);
  const std::string conf = recommended_conf(rq.user_config, res.best.setting);
  out << (rq.json ? json_output(res, pairs, conf, rq) : text_output(res, pairs, conf, rq)) << '\n'
      << std::flush;
  (void)err;
  return 0;
}

}  // namespace cachalot::tools
