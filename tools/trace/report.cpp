// Text and JSON output of cachalot-replay (see report.hpp).
#include "trace/report.hpp"

#include <fmt/format.h>

#include <cmath>

#include "cachalot/config.hpp"

namespace cachalot::tools {
namespace {

std::string json_string(const std::string& s) {
  std::string out = "\"";
  for (const char c : s) {
    if (c == '"' || c == '\\') {
      out += '\\';
      out += c;
    } else if (static_cast<unsigned char>(c) < 0x20) {
      out += fmt::format("\\u{:04x}", static_cast<int>(c));
    } else {
      out += c;
    }
  }
  return out + "\"";
}

std::string json_number(double v) {
  return std::isfinite(v) ? fmt::format("{:.4f}", v) : "null";
}

/// Per-pool figures as a JSON member (with its leading comma), or "" without pools.
std::string json_pools(const replay_result& r) {
  if (r.pools.empty()) return "";
  std::string out = ",\"pools\":[";
  for (std::size_t i = 0; i < r.pools.size(); ++i) {
    const pool_figures& p = r.pools[i];
    out += fmt::format(
        "{}{{\"name\":{},\"priority\":{},\"limit_bytes\":{},\"guarantee_bytes\":{},"
        "\"allocations\":{},\"ooms\":{},\"peak_requested_bytes\":{},\"peak_reserved_bytes\":{},"
        "\"segment_frees\":{}}}",
        i == 0 ? "" : ",", json_string(p.name), p.options.priority, p.options.limit,
        p.options.guarantee, p.allocations, p.ooms, p.peak_requested, p.peak_reserved,
        p.segment_frees);
  }
  return out + "]";
}

/// The figures of one replay as JSON members (no braces).
std::string json_figures(const replay_result& r) {
  return fmt::format(
             "\"backend\":{},\"capacity_bytes\":{},\"threads\":{},\"ops\":{},"
             "\"peak_requested_bytes\":{},\"peak_allocated_bytes\":{},\"peak_reserved_bytes\":{},"
             "\"fragmentation\":{},\"ooms\":{},\"errors\":{},\"skipped_frees\":{},"
             "\"segment_allocs\":{},\"segment_frees\":{},\"ns_per_op\":{},\"wall_ms\":{},\"busy_"
             "ms\":{}",
             json_string(r.backend), r.capacity, r.threads, r.ops, r.peak_requested,
             r.peak_allocated, r.peak_reserved, json_number(r.fragmentation), r.ooms, r.errors,
             r.skipped_frees, r.segment_allocs, r.segment_frees, json_number(r.ns_per_op),
             json_number(r.wall_ns / 1e6), json_number(r.busy_ns / 1e6)) +
         json_pools(r);
}

std::string row(const char* name, const std::string& a, const std::string& b) {
  return fmt::format("  {:<26}{:>18}{:>18}\n", name, a, b);
}

std::string bytes(std::size_t v) {
  return format_bytes(v);
}

}  // namespace

std::string format_text(const trace_report& r) {
  const replay_result& c = r.result;
  const replay_result* b = r.baseline ? &*r.baseline : nullptr;
  const auto both = [&](auto&& f) { return std::pair{f(c), b ? f(*b) : std::string("-")}; };
  std::string out =
      fmt::format("{}\n  {} ops, {} threads, {} streams, trace peak {}; {} device, capacity {}\n",
                  r.trace, r.summary.ops, r.summary.threads, r.summary.streams,
                  bytes(r.summary.peak_requested_bytes), c.backend, bytes(c.capacity));
  if (r.summary.unknown_frees + r.summary.recorded_failures + r.summary.duplicate_allocations > 0) {
    out += fmt::format(
        "  trace anomalies: {} frees of unknown pointers (skipped), {} recorded allocation "
        "failures (skipped), {} allocations of live pointers\n",
        r.summary.unknown_frees, r.summary.recorded_failures, r.summary.duplicate_allocations);
  }
  out += row("", "cachalot", "pass-through");
  const auto add = [&](const char* name, auto&& f) {
    const auto [x, y] = both(f);
    out += row(name, x, y);
  };
  add("peak requested", [](const replay_result& x) { return bytes(x.peak_requested); });
  add("peak allocated", [](const replay_result& x) { return bytes(x.peak_allocated); });
  add("peak reserved", [](const replay_result& x) { return bytes(x.peak_reserved); });
  add("fragmentation",
      [](const replay_result& x) { return fmt::format("{:.3f}", x.fragmentation); });
  add("out of memory", [](const replay_result& x) { return std::to_string(x.ooms); });
  add("segment allocs / frees", [](const replay_result& x) {
    return fmt::format("{} / {}", x.segment_allocs, x.segment_frees);
  });
  add("ns per op (median)",
      [](const replay_result& x) { return fmt::format("{:.1f}", x.ns_per_op); });
  add("wall time (median)",
      [](const replay_result& x) { return fmt::format("{:.3f} ms", x.wall_ns / 1e6); });
  if (c.errors + (b ? b->errors : 0) > 0) {
    add("other errors", [](const replay_result& x) { return std::to_string(x.errors); });
  }
  for (const pool_figures& pf : c.pools) {
    out += fmt::format(
        "  pool {:<12} prio {:>3}, limit {}, guarantee {}: peak requested {}, peak reserved {}, "
        "{} allocations, {} out of memory, {} segments given back\n",
        pf.name, pf.options.priority, pf.options.limit == 0 ? "-" : bytes(pf.options.limit),
        pf.options.guarantee == 0 ? "-" : bytes(pf.options.guarantee), bytes(pf.peak_requested),
        bytes(pf.peak_reserved), pf.allocations, pf.ooms, pf.segment_frees);
  }
  if (!r.plot_file.empty()) out += fmt::format("  plot: {}\n", r.plot_file);
  return out;
}

std::string format_json(const trace_report& r) {
  std::string out = fmt::format(
      "{{\"trace\":{},\"repeat\":{},\"streams\":{},\"trace_threads\":{},"
      "\"trace_peak_requested_bytes\":{},\"unknown_frees\":{},\"recorded_failures\":{},{}",
      json_string(r.trace), r.repeat, r.summary.streams, r.summary.threads,
      r.summary.peak_requested_bytes, r.summary.unknown_frees, r.summary.recorded_failures,
      json_figures(r.result));
  if (!r.plot_file.empty()) out += ",\"plot\":" + json_string(r.plot_file);
  if (r.baseline) out += ",\"baseline\":{" + json_figures(*r.baseline) + "}";
  return out + "}";
}

}  // namespace cachalot::tools
