// Text and JSON output of cachalot-replay (see report.hpp).
#include "trace/report.hpp"

#include <fmt/format.h>

#include <algorithm>
#include <cmath>
#include <vector>

#include "cachalot/config.hpp"
#include "cachalot/version.h"

namespace cachalot::tools {

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

std::string cost_items(const device_cost_model& model) {
  std::string out = model.enabled ? "cost_model:on" : "cost_model:off";
  for (std::size_t k = 0; k < device_call_count; ++k) {
    const auto kind = static_cast<device_call>(k);
    out += ',';  // (appends: GCC 12's -Wrestrict misfires on "," + string&& at -O3)
    out += device_call_key(kind);
    out += ':';
    out += format_call_latency(model.of(kind), device_call_sized(kind));
  }
  return out;
}

namespace {

/// Per-pool figures as a JSON member (with its leading comma), or "" without pools.
std::string json_pools(const replay_result& r) {
  if (r.pools.empty()) return "";
  std::string out = ",\"pools\":[";
  for (std::size_t i = 0; i < r.pools.size(); ++i) {
    const pool_figures& p = r.pools[i];
    out += fmt::format(
        "{}{{\"name\":{},\"priority\":{},\"limit_bytes\":{},\"guarantee_bytes\":{},"
        "\"allocations\":{},\"ooms\":{},\"peak_requested_bytes\":{},\"peak_reserved_bytes\":{},"
        "\"segment_frees\":{},\"sleepable\":{},\"sleeps\":{},\"pressure_sleeps\":{},"
        "\"wakes\":{},\"failed_wakes\":{},\"sleep_ns\":{},\"wake_ns\":{},"
        "\"bytes_slept\":{},\"bytes_copied_out\":{}}}",
        i == 0 ? "" : ",", json_string(p.name), p.options.priority, p.options.limit,
        p.options.guarantee, p.allocations, p.ooms, p.peak_requested, p.peak_reserved,
        p.segment_frees, p.options.sleepable ? "true" : "false", p.sleep.num_sleeps,
        p.sleep.num_pressure_sleeps, p.sleep.num_wakes, p.sleep.num_failed_wakes, p.sleep.sleep_ns,
        p.sleep.wake_ns, p.sleep.bytes_slept, p.sleep.bytes_copied_out);
  }
  return out + "]";
}

}  // namespace

std::string json_device(const replay_result& r) {
  return fmt::format(
      ",\"device_ms\":{},\"device_ms_per_1k_ops\":{},\"device_span_share\":{},\"device\":{}",
      json_number(r.device_ms()), json_number(r.device_ms_per_1k_ops()),
      json_number(r.device_span_share()), to_json(r.device));
}

/// The figures of one replay as JSON members (no braces).
std::string json_figures(const replay_result& r) {
  return fmt::format(
             "\"backend\":{},\"capacity_bytes\":{},\"threads\":{},\"ops\":{},\"complete\":{},"
             "\"peak_requested_bytes\":{},\"peak_allocated_bytes\":{},\"peak_reserved_bytes\":{},"
             "\"fragmentation\":{},\"ooms\":{},\"errors\":{},\"skipped_frees\":{},"
             "\"zero_size_allocations\":{},\"segment_allocs\":{},\"segment_frees\":{},"
             "\"chunk_maps\":{},\"chunk_unmaps\":{},\"device_syncs\":{},\"gc_syncs\":{},"
             "\"ns_per_op\":{},\"ns_per_op_min\":{},\"ns_per_op_max\":{},\"wall_ms\":{},"
             "\"busy_ms\":{}",
             json_string(r.backend), r.capacity, r.threads, r.ops, r.complete() ? "true" : "false",
             r.peak_requested, r.peak_allocated, r.peak_reserved,
             r.complete() ? json_number(r.fragmentation) : "null", r.ooms, r.errors,
             r.skipped_frees, r.zero_size_allocations, r.segment_allocs, r.segment_frees,
             r.chunk_maps, r.chunk_unmaps, r.device_syncs, r.gc_syncs, json_number(r.ns_per_op),
             json_number(r.ns_per_op_min), json_number(r.ns_per_op_max),
             json_number(r.wall_ns / 1e6), json_number(r.busy_ns / 1e6)) +
         json_device(r) + json_pools(r);
}

std::string json_min_capacity(const min_capacity_result& m) {
  if (!m.found) {
    return fmt::format("{{\"found\":false,\"searched_up_to_bytes\":{},\"replays\":{}}}",
                       m.searched_up_to, m.replays);
  }
  return fmt::format(
      "{{\"found\":true,\"bytes\":{},\"factor\":{},\"precision_bytes\":{},\"replays\":{}}}",
      m.bytes, json_number(m.factor), m.precision, m.replays);
}

namespace {

std::string bytes(std::size_t v) {
  return format_bytes(v);
}

/// Rows of cells laid out in columns as wide as their widest cell: the first left-aligned,
/// the others right-aligned, every column at least two spaces from the next.
std::string columns(const std::vector<std::vector<std::string>>& rows) {
  std::vector<std::size_t> width;
  for (const auto& row : rows) {
    width.resize(std::max(width.size(), row.size()));
    for (std::size_t i = 0; i < row.size(); ++i) width[i] = std::max(width[i], row[i].size());
  }
  std::string out;
  for (const auto& row : rows) {
    std::string line = "  ";
    for (std::size_t i = 0; i < row.size(); ++i) {
      if (i == 0) {
        line += fmt::format("{:<{}}", row[i], width[i]);
      } else {
        line += fmt::format("  {:>{}}", row[i], std::max<std::size_t>(width[i], 12));
      }
    }
    while (!line.empty() && line.back() == ' ') line.pop_back();
    out += line + "\n";
  }
  return out;
}

/// The sites holding the most bytes at the trace's live peak (one line; "" without sites).
std::string holders_text(const trace_summary& s) {
  if (s.peak_holders.empty()) return "";
  std::string out = "  at the trace's live peak, held by:";
  for (const site_bytes& h : s.peak_holders) {
    out +=
        fmt::format("\n    {:>10}  {:>5} allocations  {}", bytes(h.bytes), h.allocations, h.site);
  }
  return out + "\n";
}

/// The same as a JSON member with its leading comma ("" without sites).
std::string json_holders(const trace_summary& s) {
  if (s.peak_holders.empty()) return "";
  std::string out = ",\"peak_holders\":[";
  for (std::size_t i = 0; i < s.peak_holders.size(); ++i) {
    const site_bytes& h = s.peak_holders[i];
    out += fmt::format("{}{{\"site\":{},\"bytes\":{},\"allocations\":{}}}", i == 0 ? "" : ",",
                       json_string(h.site), h.bytes, h.allocations);
  }
  return out + "]";
}

/// What a device-time row is called: the time is modeled, measured or not kept.
std::string device_time_label(const replay_result& c, const char* what) {
  const char* how = c.device.timing == device_timing::measured ? "measured" : "modeled";
  return fmt::format("device time{} ({})", what,
                     c.device.timing == device_timing::none ? "not kept" : how);
}

std::string share_cell(const replay_result& x) {
  const double share = x.device_span_share();
  if (!std::isfinite(share)) return "n/a (no span)";
  return fmt::format("{:.2f}% of {:.1f} ms", 100.0 * share,
                     static_cast<double>(x.trace_span_us) / 1e3);
}

/// The driver call behind each kind, for people reading the table.
const char* driver_name(device_call c) {
  static constexpr const char* names[device_call_count] = {
      "cuMemAlloc",         "cuMemFree",           "cuMemAddressReserve",
      "cuMemAddressFree",   "cuMemCreate",         "cuMemMap",
      "cuMemSetAccess",     "cuMemUnmap",          "cuMemRelease",
      "cuEventCreate",      "cuEventRecord",       "cuEventQuery",
      "cuEventSynchronize", "cuStreamSynchronize", "cuCtxSynchronize",
      "host<->device copy"};
  return names[static_cast<std::size_t>(c)];
}

/// "1 thread", "2 threads".
std::string counted(std::size_t n, const char* one, const char* many) {
  return fmt::format("{} {}", n, n == 1 ? one : many);
}

std::string fragmentation_cell(const replay_result& x) {
  return x.complete() ? fmt::format("{:.3f}", x.fragmentation)
                      : fmt::format("n/a ({} refused)", x.ooms + x.errors);
}

}  // namespace

std::string format_text(const trace_report& r) {
  const replay_result& c = r.result;
  const replay_result* b = r.baseline ? &*r.baseline : nullptr;
  std::string out = fmt::format(
      "{}\n  {}, {}, {}, trace peak {}; {} device, capacity {}\n", r.trace,
      counted(r.summary.ops, "op", "ops"), counted(r.summary.threads, "thread", "threads"),
      counted(r.summary.streams, "stream", "streams"), bytes(r.summary.peak_requested_bytes),
      c.backend, bytes(c.capacity));
  if (r.summary.unknown_frees + r.summary.recorded_failures + r.summary.duplicate_allocations > 0) {
    out += fmt::format(
        "  trace anomalies: {} frees of unknown pointers (skipped), {} recorded allocation "
        "failures (skipped), {}\n",
        r.summary.unknown_frees, r.summary.recorded_failures, duplicates_text(r.summary));
  }
  for (const replay_result* x : {&c, b}) {
    if (x != nullptr && !x->complete()) {
      out += fmt::format(
          "  INCOMPLETE ({}): {} allocations refused for lack of memory{}; peaks cover only what "
          "was served, so no fragmentation is given\n",
          x == &c ? "cachalot" : "pass-through", x->ooms,
          x->errors != 0 ? fmt::format(", {} other errors", x->errors) : std::string());
    }
  }
  std::vector<std::vector<std::string>> rows;
  rows.push_back({"", "cachalot", "pass-through"});
  const auto add = [&](const char* name, auto&& f) {
    rows.push_back({name, f(c), b != nullptr ? f(*b) : std::string("-")});
  };
  add("peak requested", [](const replay_result& x) { return bytes(x.peak_requested); });
  add("peak allocated", [](const replay_result& x) { return bytes(x.peak_allocated); });
  add("peak reserved", [](const replay_result& x) { return bytes(x.peak_reserved); });
  add("fragmentation", fragmentation_cell);
  add("out of memory", [](const replay_result& x) { return std::to_string(x.ooms); });
  add("segment allocs / frees", [](const replay_result& x) {
    return fmt::format("{} / {}", x.segment_allocs, x.segment_frees);
  });
  add("chunk maps / unmaps",
      [](const replay_result& x) { return fmt::format("{} / {}", x.chunk_maps, x.chunk_unmaps); });
  add("device calls",
      [](const replay_result& x) { return std::to_string(x.device.total_calls()); });
  add("device syncs (explicit / implied)", [](const replay_result& x) {
    return fmt::format("{} / {}", x.device.explicit_syncs(), x.device.implied_syncs);
  });
  add(device_time_label(c, "").c_str(),
      [](const replay_result& x) { return fmt::format("{:.3f} ms", x.device_ms()); });
  add("  per 1,000 ops",
      [](const replay_result& x) { return fmt::format("{:.3f} ms", x.device_ms_per_1k_ops()); });
  add("  share of the trace's span", share_cell);
  for (std::size_t i = 0; i < device_call_count; ++i) {
    const auto k = static_cast<device_call>(i);
    if (c.device.calls[i] == 0 && (b == nullptr || b->device.calls[i] == 0)) continue;
    add(fmt::format("  {}", driver_name(k)).c_str(), [k](const replay_result& x) {
      return fmt::format("{} calls, {:.3f} ms", x.device.calls_of(k),
                         static_cast<double>(x.device.ns_of(k)) / 1e6);
    });
  }
  add("ns per op (median)",
      [](const replay_result& x) { return fmt::format("{:.1f}", x.ns_per_op); });
  add("  fastest to slowest repeat", [](const replay_result& x) {
    return fmt::format("{:.1f} to {:.1f}", x.ns_per_op_min, x.ns_per_op_max);
  });
  add("wall time (median)",
      [](const replay_result& x) { return fmt::format("{:.3f} ms", x.wall_ns / 1e6); });
  if (c.errors + (b ? b->errors : 0) > 0) {
    add("other errors", [](const replay_result& x) { return std::to_string(x.errors); });
  }
  if (c.zero_size_allocations > 0) {
    add("0-byte allocations",
        [](const replay_result& x) { return std::to_string(x.zero_size_allocations); });
  }
  out += columns(rows);
  out += pytorch_text(r.summary.pytorch, c.peak_reserved);
  out += holders_text(r.summary);
  for (const pool_figures& pf : c.pools) {
    out += fmt::format(
        "  pool {:<12} prio {:>3}, limit {}, guarantee {}: peak requested {}, peak reserved {}, "
        "{} allocations, {} out of memory, {} segments given back\n",
        pf.name, pf.options.priority, pf.options.limit == 0 ? "-" : bytes(pf.options.limit),
        pf.options.guarantee == 0 ? "-" : bytes(pf.options.guarantee), bytes(pf.peak_requested),
        bytes(pf.peak_reserved), pf.allocations, pf.ooms, pf.segment_frees);
    const sleep_stats& z = pf.sleep;
    if (z.num_sleeps + z.num_failed_sleeps + z.num_failed_wakes != 0) {
      out += fmt::format(
          "  pool {:<12} slept {} times ({} under pressure), woke {} ({} wakes out of memory): "
          "{} unmapped, {} copied out; device time {:.3f} ms to sleep, {:.3f} ms to wake\n",
          pf.name, z.num_sleeps, z.num_pressure_sleeps, z.num_wakes, z.num_failed_wakes,
          bytes(z.bytes_slept), bytes(z.bytes_copied_out), static_cast<double>(z.sleep_ns) / 1e6,
          static_cast<double>(z.wake_ns) / 1e6);
    }
  }
  if (r.min_capacity) {
    const min_capacity_result& m = *r.min_capacity;
    out += m.found ? fmt::format(
                         "  smallest capacity without refusals: {} ({:.3f}x the trace "
                         "peak), to within {}, {} replays\n",
                         bytes(m.bytes), m.factor, bytes(m.precision), m.replays)
                   : fmt::format(
                         "  smallest capacity without refusals: none up to {} ({} "
                         "replays)\n",
                         bytes(m.searched_up_to), m.replays);
  }
  if (!r.plot_file.empty()) out += fmt::format("  plot: {}\n", r.plot_file);
  if (!r.timeline_file.empty()) out += fmt::format("  timeline: {}\n", r.timeline_file);
  return out;
}

std::string duplicates_text(const trace_summary& s) {
  std::string out = counted(s.duplicate_allocations, "allocation of a pointer already live",
                            "allocations of pointers already live");
  if (s.duplicate_allocations == 0) return out;
  out += " (replayed as new allocations; the live one is never freed): ";
  for (std::size_t i = 0; i < s.duplicates.size(); ++i) {
    const duplicate_allocation& d = s.duplicates[i];
    out += fmt::format("{}{:#x} at line {} (live since line {})", i == 0 ? "" : ", ", d.pointer,
                       d.line, d.live_since);
  }
  if (s.duplicate_allocations > s.duplicates.size()) {
    out += fmt::format(" and {} more", s.duplicate_allocations - s.duplicates.size());
  }
  return out;
}

std::string format_json(const trace_report& r) {
  std::string duplicates;
  for (const duplicate_allocation& d : r.summary.duplicates) {
    duplicates += fmt::format("{}{{\"pointer\":\"{:#x}\",\"line\":{},\"live_since_line\":{}}}",
                              duplicates.empty() ? "" : ",", d.pointer, d.line, d.live_since);
  }
  std::string out = fmt::format(
      "{{\"trace\":{},\"version\":{},\"config\":{},\"cost_model\":{},\"repeat\":{},\"streams\":{},"
      "\"trace_threads\":{},\"trace_peak_requested_bytes\":{},\"trace_span_us\":{},"
      "\"unknown_frees\":{},\"recorded_failures\":{},\"duplicate_allocations\":{},"
      "\"duplicates\":[{}],{}",
      json_string(r.trace), json_string(CACHALOT_VERSION_STRING), json_string(r.config),
      json_string(r.cost_model), r.repeat, r.summary.streams, r.summary.threads,
      r.summary.peak_requested_bytes, r.summary.span_us, r.summary.unknown_frees,
      r.summary.recorded_failures, r.summary.duplicate_allocations, duplicates,
      json_figures(r.result));
  out += fmt::format(",\"trace_live_at_end_bytes\":{}", r.summary.live_at_end_bytes);
  out += pytorch_json(r.summary.pytorch) + json_holders(r.summary);
  if (r.min_capacity) out += ",\"min_capacity\":" + json_min_capacity(*r.min_capacity);
  if (!r.plot_file.empty()) out += ",\"plot\":" + json_string(r.plot_file);
  if (!r.timeline_file.empty()) out += ",\"timeline\":" + json_string(r.timeline_file);
  if (r.baseline) out += ",\"baseline\":{" + json_figures(*r.baseline) + "}";
  return out + "}";
}

}  // namespace cachalot::tools
