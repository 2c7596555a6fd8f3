// The cachalot-replay command line (see cli.hpp): argument parsing, the replay of each trace
// on cachalot and on the pass-through baseline, the minimum-capacity search, plots and output.
// Everything that can be checked before a replay runs is checked first: arguments, traces,
// configs and plot files (so that a bad path fails before minutes of replay, not after).
#include "trace/cli.hpp"

#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <charconv>
#include <cmath>
#include <cstdio>
#include <cstring>
#include <fstream>
#include <optional>
#include <stdexcept>
#include <thread>
#include <tuple>

#include <fmt/format.h>

#include "cachalot/errors.hpp"
#include "cachalot/version.h"
#include "trace/min_capacity.hpp"
#include "trace/plot.hpp"
#include "trace/report.hpp"
#include "trace/tune_report.hpp"

namespace cachalot::tools {
namespace {

constexpr std::size_t progress_min_ops = 100000;

const char* const usage =
    "usage: cachalot-replay [options] [--] TRACE.csv...   (- reads a trace from standard input;\n"
    "                       TRACE.csv.gz is read through gzip -dc)\n"
    "Replays RMM-format allocation traces on cachalot and on the pass-through baseline, and\n"
    "reports for each: peak requested, allocated and reserved bytes, fragmentation (peak\n"
    "reserved / peak requested: 1.000 wastes nothing), out-of-memory errors, segment allocs and\n"
    "frees (device calls), and host time per operation.\n"
    "  --config STR          allocator config (key:value,...); default backend:simulated with\n"
    "                        a capacity of --capacity-factor x the trace's peak requested bytes\n"
    "  --capacity-factor F   simulated capacity as a multiple of the peak, in (0, 1e6]\n"
    "                        (default 2)\n"
    "  --capacity SIZE       simulated capacity with a unit (e.g. 40GiB, 512MiB; 4096B for\n"
    "                        bytes), instead of the factor\n"
    "  --repeat N            replays per allocator, 1 to 1000000 (1e3 is fine); ns/op is\n"
    "                        their median (default 3)\n"
    "  --min-capacity        also search the smallest simulated capacity on which the trace\n"
    "                        replays with no refused allocation (bisection, to 0.5% of the\n"
    "                        trace's peak or 2 MiB), reported in bytes and as a multiple of it\n"
    "  --json                one JSON object per trace on one line (with the config replayed)\n"
    "  --plot FILE.svg       memory over the replay, as SVG (FILE-<trace>.svg for several\n"
    "                        traces; the name must end in .svg)\n"
    "  --timeline FILE.csv   cachalot's memory after each operation (every nth above 100,000\n"
    "                        ops) as CSV op,requested,allocated,reserved (FILE-<trace>.csv)\n"
    "  --one-thread          issue every operation from one thread (default: one per trace "
    "thread)\n"
    "  --no-baseline         skip the pass-through baseline\n"
    "  --pool STREAM=NAME[,limit:SIZE][,guarantee:SIZE][,priority:N][,graph]\n"
    "                        route the trace stream logged as STREAM to memory pool NAME\n"
    "                        (repeatable; streams naming one pool share it)\n"
    "  --tune                search the memory keys (expandable_segments, max_split_size,\n"
    "                        gc_threshold, roundup_power2_divisions, segment sizes) on the\n"
    "                        traces and print the CACHALOT_CONF to use, default vs recommended\n"
    "                        (objective: no OOM at the capacity, then least peak reserved\n"
    "                        plus the weighted device calls and modeled device time)\n"
    "  --tune-weight SIZE    with --tune: bytes of peak reserved one device call is worth,\n"
    "                        with a unit (e.g. 1MiB; default 0: device calls only break ties)\n"
    "  --tune-time-weight W  with --tune: bytes of peak reserved one modeled millisecond of\n"
    "                        device time is worth, SIZE or SIZE/ms (e.g. 64MiB/ms; 0: time\n"
    "                        does not count), or auto (the default): each trace's peak\n"
    "                        requested bytes per ms of its span, so that 1% of the trace's\n"
    "                        time in device calls weighs as much as 1% more memory\n"
    "  --jobs N              with --tune: replays run in parallel, 1 to 4096 (default: the\n"
    "                        CPU count)\n"
    "  --version             print the version and exit\n"
    "Options also take --option=value. Exit status: 0 success, 2 bad arguments, config or trace,\n"
    "1 device failure.\n";

struct usage_error : std::runtime_error {
  using std::runtime_error::runtime_error;
};

struct cli_options {
  std::string config;
  double capacity_factor = 2.0;
  std::size_t repeat = 3;
  bool json = false;
  bool one_thread = false;
  bool baseline = true;
  bool min_capacity = false;
  bool tune = false;
  std::size_t tune_weight = 0;
  double tune_time_weight = 0;  // bytes per modeled ms
  bool tune_time_weight_auto = true;
  bool tune_time_weight_set = false;
  std::size_t jobs = 0;      // 0: the CPU count
  std::size_t capacity = 0;  // 0: from --config or --capacity-factor
  std::string plot;
  std::string timeline;
  std::vector<std::string> traces;
  std::vector<pool_spec> pools;
};

constexpr double max_capacity_factor = 1e6;
constexpr std::size_t max_repeat = 1000000;
constexpr std::size_t max_jobs = 4096;

/// The whole text as a number of type T, or nothing.
template <typename T>
std::optional<T> number(const std::string& text) {
  T v{};
  const auto [end, ec] = std::from_chars(text.data(), text.data() + text.size(), v);
  if (ec != std::errc{} || end != text.data() + text.size()) return std::nullopt;
  return v;
}

/// A factor in (0, `max`]; the message quotes the text as given.
double parse_factor(const std::string& flag, const std::string& text, double max) {
  const std::optional<double> v = number<double>(text);
  if (!v || !std::isfinite(*v) || !(*v > 0.0) || *v > max) {
    throw usage_error(fmt::format("{}: bad value '{}' (want a number above 0 and at most {:g})",
                                  flag, text, max));
  }
  return *v;
}

/// A count from 1 to `max`, written as an integer or as a whole number in floating-point
/// notation ("1e3").
std::size_t parse_count(const std::string& flag, const std::string& text, std::size_t max) {
  std::optional<std::size_t> v = number<std::size_t>(text);
  if (!v) {
    const std::optional<double> d = number<double>(text);
    if (!d || !std::isfinite(*d)) {
      throw usage_error(flag + ": bad value '" + text + "' (want a whole number, e.g. 3 or 1e3)");
    }
    if (*d != std::floor(*d)) throw usage_error(flag + ": '" + text + "' is not a whole number");
    if (*d >= 1.0 && *d <= static_cast<double>(max)) v = static_cast<std::size_t>(*d);
  }
  if (!v || *v < 1 || *v > max) {
    throw usage_error(fmt::format("{}: '{}' is out of range (1 to {})", flag, text, max));
  }
  return *v;
}

/// A size with a unit, as the config's keys that size device memory want ("40GiB", "512MiB",
/// "4096B"); "0" is accepted alone when `zero_ok`.
std::size_t parse_size_flag(const std::string& flag, const std::string& text, bool zero_ok) {
  if (const std::optional<std::size_t> plain = number<std::size_t>(text)) {
    if (*plain == 0 && zero_ok) return 0;
    if (*plain != 0) {
      throw usage_error(fmt::format(
          "{}: '{}' has no unit and would mean {} bytes; write e.g. {}GiB or {}MiB, or {}B for "
          "bytes",
          flag, text, text, text, text, text));
    }
  }
  std::size_t v = 0;
  try {
    v = parse_size(text);
  } catch (const invalid_argument& e) {
    throw usage_error(flag + ": bad size '" + text + "' (e.g. 40GiB, 512MiB, 4096B)");
  }
  if (v == 0 && !zero_ok) throw usage_error(flag + ": must be above 0");
  return v;
}

/// --tune-time-weight: auto, or bytes per modeled millisecond (SIZE or SIZE/ms).
void set_time_weight(cli_options& o, const std::string& value) {
  o.tune_time_weight_set = true;
  if (value == "auto") {
    o.tune_time_weight_auto = true;
    return;
  }
  std::string size = value;
  if (size.size() > 3 && size.compare(size.size() - 3, 3, "/ms") == 0) {
    size.resize(size.size() - 3);
  }
  o.tune_time_weight_auto = false;
  o.tune_time_weight = static_cast<double>(parse_size_flag("--tune-time-weight", size, true));
}

/// A plot file name: SVG is what is written, so the name must say .svg.
std::string parse_plot_name(const std::string& text) {
  if (text.empty()) throw usage_error("--plot needs a file name");
  const std::string ext = ".svg";
  if (text.size() <= ext.size() || text.compare(text.size() - ext.size(), ext.size(), ext) != 0) {
    throw usage_error("--plot " + text +
                      ": cachalot-replay writes SVG only; give a file name ending in .svg "
                      "(convert it to PNG with e.g. rsvg-convert or inkscape)");
  }
  return text;
}

bool takes_value(const std::string& flag) {
  return flag == "--config" || flag == "--repeat" || flag == "--capacity-factor" ||
         flag == "--plot" || flag == "--timeline" || flag == "--pool" || flag == "--tune-weight" ||
         flag == "--jobs" || flag == "--capacity" || flag == "--tune-time-weight";
}

void set_flag(cli_options& o, const std::string& flag, const std::string& value) {
  if (flag == "--config") {
    o.config = value;
  } else if (flag == "--repeat") {
    o.repeat = parse_count(flag, value, max_repeat);
  } else if (flag == "--capacity-factor") {
    o.capacity_factor = parse_factor(flag, value, max_capacity_factor);
  } else if (flag == "--plot") {
    o.plot = parse_plot_name(value);
  } else if (flag == "--timeline") {
    if (value.empty()) throw usage_error("--timeline needs a file name");
    o.timeline = value;
  } else if (flag == "--json") {
    o.json = true;
  } else if (flag == "--one-thread") {
    o.one_thread = true;
  } else if (flag == "--no-baseline") {
    o.baseline = false;
  } else if (flag == "--min-capacity") {
    o.min_capacity = true;
  } else if (flag == "--tune") {
    o.tune = true;
  } else if (flag == "--tune-weight") {
    o.tune_weight = parse_size_flag(flag, value, true);
  } else if (flag == "--tune-time-weight") {
    set_time_weight(o, value);
  } else if (flag == "--capacity") {
    o.capacity = parse_size_flag(flag, value, false);
  } else if (flag == "--jobs") {
    o.jobs = parse_count(flag, value, max_jobs);
  } else if (flag == "--pool") {
    try {
      add_pool_spec(o.pools, value);
    } catch (const invalid_argument& e) {
      throw usage_error(e.what());
    }
  } else {
    throw usage_error("unknown option " + flag);
  }
}

cli_options parse_args(const std::vector<std::string>& args) {
  cli_options o;
  bool operands_only = false;
  for (std::size_t i = 0; i < args.size(); ++i) {
    const std::string& a = args[i];
    if (operands_only || a == "-" || a.empty() || a[0] != '-') {
      o.traces.push_back(a);
      continue;
    }
    if (a == "--") {
      operands_only = true;
      continue;
    }
    const std::size_t eq = a.find('=');
    const std::string flag = a.substr(0, eq);
    if (!takes_value(flag)) {
      if (eq != std::string::npos) throw usage_error(flag + " takes no value");
      set_flag(o, flag, "");
    } else if (eq != std::string::npos) {
      set_flag(o, flag, a.substr(eq + 1));
    } else {
      if (i + 1 >= args.size()) throw usage_error(a + " needs a value");
      set_flag(o, flag, args[++i]);
    }
  }
  if (o.traces.empty()) throw usage_error("no trace given");
  if (std::count(o.traces.begin(), o.traces.end(), "-") > 1) {
    throw usage_error("standard input (-) can be given once");
  }
  return o;
}

/// The output file of `trace` for option value `base` (FILE-<trace>.EXT for several traces).
std::string plot_path(const std::string& base, const std::string& trace, std::size_t count,
                      const std::string& ext = ".svg") {
  if (count == 1) return base;
  std::string stem = trace == "-" ? "stdin" : trace.substr(trace.find_last_of('/') + 1);
  if (stem.size() > 3 && stem.compare(stem.size() - 3, 3, ".gz") == 0) stem.resize(stem.size() - 3);
  stem = stem.substr(0, stem.rfind('.'));
  const std::size_t dot = base.rfind(ext);
  const std::string head = dot == std::string::npos ? base : base.substr(0, dot);
  return head + "-" + stem + ext;
}

/// Creates (empties) every plot and timeline file now, so that an unwritable path fails before
/// any replay.
void check_plot_paths(const cli_options& o) {
  for (const auto& [flag, base, ext] :
       {std::tuple{"--plot", &o.plot, ".svg"}, std::tuple{"--timeline", &o.timeline, ".csv"}}) {
    if (base->empty()) continue;
    for (const std::string& t : o.traces) {
      const std::string path = plot_path(*base, t, o.traces.size(), ext);
      errno = 0;
      std::ofstream f(path, std::ios::trunc);
      if (!f) {
        throw usage_error(std::string(flag) + ": cannot write " + path + ": " +
                          (errno != 0 ? std::strerror(errno) : "unknown reason"));
      }
    }
  }
}

double median(std::vector<double> v) {
  std::sort(v.begin(), v.end());
  const std::size_t n = v.size();
  return n % 2 == 1 ? v[n / 2] : (v[n / 2 - 1] + v[n / 2]) / 2;
}

/// Replays `repeat` times; the figures of the first run, the median times.
replay_result replay_median(const prepared_trace& p, const config& cfg, const cli_options& o,
                            const char* label) {
  const bool tty = isatty(STDERR_FILENO) == 1 && p.ops.size() >= progress_min_ops;
  std::vector<double> walls, busy;
  replay_result first;
  for (std::size_t run = 0; run < o.repeat; ++run) {
    replay_options ro;
    ro.use_threads = !o.one_thread;
    ro.pools = o.pools;
    if (tty) {
      ro.progress = [&, run](double f) {
        std::fprintf(stderr, "\r%s: %s, run %zu/%zu: %3.0f%%", p.name.c_str(), label, run + 1,
                     o.repeat, 100.0 * f);
      };
    }
    replay_result r = replay(p, cfg, ro);
    walls.push_back(r.wall_ns);
    busy.push_back(r.busy_ns);
    if (run == 0) first = std::move(r);
  }
  if (tty) std::fputs("\r\033[K", stderr);
  first.wall_ns = median(walls);
  first.busy_ns = median(busy);
  const auto per_op = [&](double ns) {
    return first.ops == 0 ? 0.0 : ns / static_cast<double>(first.ops);
  };
  first.ns_per_op = per_op(first.busy_ns);
  first.ns_per_op_min = per_op(*std::min_element(busy.begin(), busy.end()));
  first.ns_per_op_max = per_op(*std::max_element(busy.begin(), busy.end()));
  return first;
}

void write_file(const std::string& path, const std::string& text) {
  std::ofstream f(path);
  f << text;
  if (!f) throw std::runtime_error("cannot write " + path + ": " + std::strerror(errno));
}

/// The plot and the timeline, from one sampled replay (and the baseline's, for the plot).
void write_sampled(trace_report& rep, const prepared_trace& p, const config& cfg,
                   const cli_options& o) {
  replay_options ro;
  ro.use_threads = !o.one_thread;
  ro.sample = true;
  ro.pools = o.pools;
  const replay_result sampled = replay(p, cfg, ro);
  if (!rep.timeline_file.empty()) write_file(rep.timeline_file, timeline_csv(sampled));
  if (rep.plot_file.empty()) return;
  std::optional<replay_result> base;
  if (o.baseline) base = replay(p, baseline_config(cfg), ro);
  write_file(rep.plot_file, render_svg(replay_plot(rep.trace, sampled, base ? &*base : nullptr)));
}

trace_report run_trace(const trace& t, const prepared_trace& p, const config& cfg,
                       const cli_options& o) {
  trace_report rep;
  rep.trace = t.name;
  rep.summary = p.summary;
  rep.repeat = o.repeat;
  rep.config = cfg.to_string();
  rep.cost_model = cost_items(cfg.cost);
  rep.result = replay_median(p, cfg, o, "cachalot");
  if (o.baseline) rep.baseline = replay_median(p, baseline_config(cfg), o, "pass-through");
  if (o.min_capacity) rep.min_capacity = find_min_capacity(p, cfg);
  const std::string name = t.name == "stdin" ? "-" : t.name;
  if (!o.plot.empty()) rep.plot_file = plot_path(o.plot, name, o.traces.size());
  if (!o.timeline.empty()) rep.timeline_file = plot_path(o.timeline, name, o.traces.size(), ".csv");
  if (!o.plot.empty() || !o.timeline.empty()) write_sampled(rep, p, cfg, o);
  return rep;
}

bool names_capacity(std::string_view config_text) {
  // A key "capacity" anywhere in the string (the search sets the capacity itself).
  for (std::size_t at = config_text.find("capacity"); at != std::string_view::npos;
       at = config_text.find("capacity", at + 1)) {
    const bool starts = at == 0 || config_text[at - 1] == ',' || config_text[at - 1] == ' ';
    std::size_t end = at + 8;
    while (end < config_text.size() && config_text[end] == ' ') ++end;
    if (starts && end < config_text.size() && config_text[end] == ':') return true;
  }
  return false;
}

/// Options that do not go together, refused before any trace is read.
void check_combinations(const cli_options& o) {
  if (o.capacity != 0 && names_capacity(o.config)) {
    throw usage_error("--capacity and a capacity in --config: give the capacity once");
  }
  if (o.tune && (!o.plot.empty() || !o.timeline.empty() || !o.pools.empty() || o.min_capacity)) {
    throw usage_error(
        "--tune cannot be combined with --plot, --timeline, --pool or --min-capacity (it "
        "reports the smallest capacity itself)");
  }
  if (!o.tune && (o.tune_weight != 0 || o.jobs != 0 || o.tune_time_weight_set)) {
    throw usage_error("--tune-weight, --tune-time-weight and --jobs go with --tune");
  }
}

void set_capacity(config& cfg, std::size_t capacity) {
  if (capacity > max_replay_capacity) {
    throw usage_error("--capacity " + format_bytes(capacity) +
                      " is beyond the largest simulated capacity (" +
                      format_bytes(max_replay_capacity) + ")");
  }
  cfg.capacity = capacity;
  cfg.validate();
}

void check_config(const cli_options& o, const config& cfg) {
  const bool simulated = cfg.backend == backend_kind::simulated;
  if (o.min_capacity && (!simulated || names_capacity(o.config))) {
    throw usage_error(
        "--min-capacity searches the simulated device's capacity: leave backend and capacity "
        "out of --config");
  }
  if (o.tune && !simulated) throw usage_error("--tune replays on the simulated device only");
  if (o.tune && !cfg.caching) throw usage_error("--tune needs caching (caching:0 in --config)");
  if (o.tune && !tunable(cfg)) {
    throw usage_error(
        "--tune: the --config sets segment sizes or per-interval roundup_power2_divisions "
        "outside the searched space; leave them out");
  }
}

/// Warnings on stderr for what the trace itself gets wrong (the report repeats them).
void warn_anomalies(const std::string& name, const trace_summary& s, std::ostream& err) {
  if (s.unknown_frees > 0) {
    err << "cachalot-replay: warning: " << name << ": " << s.unknown_frees
        << " frees of pointers not allocated in the trace (skipped)\n";
  }
  if (s.duplicate_allocations > 0) {
    err << "cachalot-replay: warning: " << name << ": " << duplicates_text(s) << '\n';
  }
}

int tune_traces(const cli_options& o, const std::vector<trace>& traces,
                const std::vector<prepared_trace>& prepared, const std::vector<config>& configs,
                std::ostream& out, std::ostream& err) {
  std::vector<const prepared_trace*> ptrs;
  for (std::size_t i = 0; i < prepared.size(); ++i) {
    warn_anomalies(traces[i].name, prepared[i].summary, err);
    ptrs.push_back(&prepared[i]);
  }
  tune_request rq;
  rq.user_config = o.config;
  rq.weight = o.tune_weight;
  rq.time_weight = o.tune_time_weight;
  rq.time_weight_auto = o.tune_time_weight_auto;
  rq.threads = o.jobs != 0 ? o.jobs : std::max(1u, std::thread::hardware_concurrency());
  rq.repeat = o.repeat;
  rq.use_threads = !o.one_thread;
  rq.json = o.json;
  rq.progress = isatty(STDERR_FILENO) == 1;
  return run_tune(ptrs, configs, rq, out, err);
}

int run(const cli_options& o, std::ostream& out, std::ostream& err) {
  std::vector<trace> traces;
  std::vector<prepared_trace> prepared;
  std::vector<config> configs;
  check_combinations(o);
  for (const std::string& path : o.traces) {
    traces.push_back(load_trace(path));
    prepared.push_back(prepare(traces.back()));
    configs.push_back(replay_config(o.config, prepared.back().summary, o.capacity_factor));
    if (o.capacity != 0) set_capacity(configs.back(), o.capacity);
    check_config(o, configs.back());
  }
  if (o.tune) return tune_traces(o, traces, prepared, configs, out, err);
  check_plot_paths(o);
  for (std::size_t i = 0; i < traces.size(); ++i) {
    const prepared_trace& p = prepared[i];
    warn_anomalies(traces[i].name, p.summary, err);
    const trace_report rep = run_trace(traces[i], p, configs[i], o);
    out << (o.json ? format_json(rep) : format_text(rep)) << '\n' << std::flush;
  }
  return 0;
}

}  // namespace

int replay_cli(const std::vector<std::string>& args, std::ostream& out, std::ostream& err) {
  try {
    for (const std::string& a : args) {
      if (a == "--") break;
      if (a == "--help" || a == "-h") {
        out << usage;
        return 0;
      }
      if (a == "--version") {
        out << "cachalot-replay (cachalot) " << CACHALOT_VERSION_STRING << '\n';
        return 0;
      }
    }
    return run(parse_args(args), out, err);
  } catch (const usage_error& e) {
    err << "cachalot-replay: " << e.what() << '\n' << usage;
    return 2;
  } catch (const trace_error& e) {
    err << "cachalot-replay: error: " << e.what() << '\n';
    return 2;
  } catch (const invalid_argument& e) {
    err << "cachalot-replay: error: " << e.what() << '\n';
    return 2;
  } catch (const std::exception& e) {
    err << "cachalot-replay: " << e.what() << '\n';
    return 1;
  }
}

}  // namespace cachalot::tools
