// The cachalot-replay command line (see cli.hpp): argument parsing, the replay of each trace
// on cachalot and on the pass-through baseline, plots and output.
#include "trace/cli.hpp"

#include <unistd.h>

#include <algorithm>
#include <charconv>
#include <cstdio>
#include <fstream>
#include <optional>
#include <stdexcept>

#include "cachalot/errors.hpp"
#include "trace/plot.hpp"
#include "trace/report.hpp"

namespace cachalot::tools {
namespace {

constexpr std::size_t progress_min_ops = 100000;

const char* const usage =
    "usage: cachalot-replay [options] TRACE.csv...\n"
    "Replays RMM-format allocation traces on cachalot and on the pass-through baseline.\n"
    "  --config STR          allocator config (key:value,...); default backend:simulated with\n"
    "                        a capacity of --capacity-factor x the trace's peak requested bytes\n"
    "  --capacity-factor F   simulated capacity as a multiple of the peak (default 2)\n"
    "  --repeat N            replays per allocator; ns/op is their median (default 3)\n"
    "  --json                one JSON object per trace on one line\n"
    "  --plot FILE.svg       memory over the replay (FILE-<trace>.svg for several traces)\n"
    "  --one-thread          issue every operation from one thread (default: one per trace "
    "thread)\n"
    "  --no-baseline         skip the pass-through baseline\n"
    "  --pool STREAM=NAME[,limit:SIZE][,guarantee:SIZE][,priority:N][,graph]\n"
    "                        route the trace stream logged as STREAM to memory pool NAME\n"
    "                        (repeatable; streams naming one pool share it)\n";

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
  std::string plot;
  std::vector<std::string> traces;
  std::vector<pool_spec> pools;
};

template <typename T>
T parse_value(const std::string& flag, const std::string& text) {
  T v{};
  const auto [end, ec] = std::from_chars(text.data(), text.data() + text.size(), v);
  if (ec != std::errc{} || end != text.data() + text.size() || !(v > T{})) {
    throw usage_error(flag + ": bad value '" + text + "'");
  }
  return v;
}

cli_options parse_args(const std::vector<std::string>& args) {
  cli_options o;
  for (std::size_t i = 0; i < args.size(); ++i) {
    const std::string& a = args[i];
    const auto value = [&]() -> const std::string& {
      if (i + 1 >= args.size()) throw usage_error(a + " needs a value");
      return args[++i];
    };
    if (a == "--config") {
      o.config = value();
    } else if (a == "--repeat") {
      o.repeat = parse_value<std::size_t>(a, value());
    } else if (a == "--capacity-factor") {
      o.capacity_factor = parse_value<double>(a, value());
    } else if (a == "--plot") {
      o.plot = value();
    } else if (a == "--json") {
      o.json = true;
    } else if (a == "--one-thread") {
      o.one_thread = true;
    } else if (a == "--no-baseline") {
      o.baseline = false;
    } else if (a == "--pool") {
      try {
        add_pool_spec(o.pools, value());
      } catch (const invalid_argument& e) {
        throw usage_error(e.what());
      }
    } else if (a.size() > 1 && a[0] == '-') {
      throw usage_error("unknown option " + a);
    } else {
      o.traces.push_back(a);
    }
  }
  if (o.traces.empty()) throw usage_error("no trace given");
  return o;
}

std::string plot_path(const std::string& base, const std::string& trace, std::size_t count) {
  if (count == 1) return base;
  std::string stem = trace.substr(trace.find_last_of('/') + 1);
  stem = stem.substr(0, stem.rfind('.'));
  const std::size_t dot = base.rfind(".svg");
  const std::string head = dot == std::string::npos ? base : base.substr(0, dot);
  return head + "-" + stem + ".svg";
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
  first.ns_per_op = first.ops == 0 ? 0.0 : first.busy_ns / static_cast<double>(first.ops);
  return first;
}

void write_plot(trace_report& rep, const prepared_trace& p, const config& cfg,
                const cli_options& o) {
  replay_options ro;
  ro.use_threads = !o.one_thread;
  ro.sample = true;
  ro.pools = o.pools;
  const replay_result sampled = replay(p, cfg, ro);
  std::optional<replay_result> base;
  if (o.baseline) base = replay(p, baseline_config(cfg), ro);
  std::ofstream f(rep.plot_file);
  f << render_svg(replay_plot(rep.trace, sampled, base ? &*base : nullptr));
  if (!f) throw std::runtime_error("cannot write " + rep.plot_file);
}

trace_report run_trace(const trace& t, const prepared_trace& p, const cli_options& o) {
  const config cfg = replay_config(o.config, p.summary, o.capacity_factor);
  trace_report rep;
  rep.trace = t.name;
  rep.summary = p.summary;
  rep.repeat = o.repeat;
  rep.result = replay_median(p, cfg, o, "cachalot");
  if (o.baseline) rep.baseline = replay_median(p, baseline_config(cfg), o, "pass-through");
  if (!o.plot.empty()) {
    rep.plot_file = plot_path(o.plot, t.name, o.traces.size());
    write_plot(rep, p, cfg, o);
  }
  return rep;
}

int run(const cli_options& o, std::ostream& out, std::ostream& err) {
  std::vector<trace> traces;
  for (const std::string& path : o.traces) traces.push_back(load_trace(path));
  for (const trace& t : traces) {
    const prepared_trace p = prepare(t);
    if (p.summary.unknown_frees > 0) {
      err << "cachalot-replay: warning: " << t.name << ": " << p.summary.unknown_frees
          << " frees of pointers not allocated in the trace (skipped)\n";
    }
    const trace_report rep = run_trace(t, p, o);
    out << (o.json ? format_json(rep) : format_text(rep)) << '\n' << std::flush;
  }
  return 0;
}

}  // namespace

int replay_cli(const std::vector<std::string>& args, std::ostream& out, std::ostream& err) {
  try {
    if (std::find(args.begin(), args.end(), "--help") != args.end() ||
        std::find(args.begin(), args.end(), "-h") != args.end()) {
      out << usage;
      return 0;
    }
    return run(parse_args(args), out, err);
  } catch (const usage_error& e) {
    err << "cachalot-replay: " << e.what() << '\n' << usage;
    return 2;
  } catch (const trace_error& e) {
    err << "cachalot-replay: error: " << e.what() << '\n';
    return 2;
  } catch (const invalid_argument& e) {
    err << "cachalot-replay: bad config: " << e.what() << '\n';
    return 2;
  } catch (const std::exception& e) {
    err << "cachalot-replay: " << e.what() << '\n';
    return 1;
  }
}

}  // namespace cachalot::tools
