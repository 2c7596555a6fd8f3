// The human-readable memory summary (see detail/summary.hpp). Invariant: every line, rule and
// title is exactly summary_width characters wide (a text longer than a line wraps at spaces; a
// count too long for its column is shortened to three significant digits). Byte rows use
// binary units, count rows plain integers; "-" marks a figure cachalot does not keep. Row names
// are those of torch.cuda.memory_summary() where the quantity is the same (torch/cuda/
// memory.py, memory_summary: "Active allocs", "Non-releasable allocs", "Oversize
// allocations", "Oversize GPU segments"). The footer's "allocation streams" are the streams
// blocks were allocated on (each has its own free lists): stats' num_streams; a stream only
// named by record_stream or by a free is not one.
#include "detail/summary.hpp"

#include <algorithm>

#include "cachalot/config.hpp"
#include "detail/engine.hpp"
#include "detail/format.hpp"

namespace cachalot::detail {
namespace {

constexpr std::size_t name_width = 32;
constexpr std::size_t cell_width = 12;
// "| " name "|" then four " cell |": the width of every line.
static_assert(summary_width == 2 + name_width + 1 + 4 * (cell_width + 3));

void rule(std::string& out, char c) {
  out += '|';
  out.append(summary_width - 2, c);
  out += "|\n";
}

/// One or more lines "| text |", wrapping `text` at spaces to fit.
void line(std::string& out, std::string_view text) {
  constexpr std::size_t room = summary_width - 3;
  do {
    std::size_t cut = text.size();
    if (cut > room) {
      cut = text.rfind(' ', room);
      if (cut == std::string_view::npos || cut == 0) cut = room;
    }
    out += detail::format("| {:<{}}|\n", text.substr(0, cut), room);
    text.remove_prefix(cut);
    while (!text.empty() && text.front() == ' ') text.remove_prefix(1);
  } while (!text.empty());
}

std::string cell(std::uint64_t v, bool bytes) {
  if (bytes) return format_bytes(v);
  std::string s = detail::format("{}", v);
  return s.size() <= cell_width ? s : detail::format("{:.3e}", static_cast<double>(v));
}

const std::string none = "-";

void row(std::string& out, std::string_view name, const std::string& a, const std::string& b,
         const std::string& c, const std::string& d) {
  out += detail::format("| {:<{}}| {:>{}} | {:>{}} | {:>{}} | {:>{}} |\n", name, name_width, a,
                        cell_width, b, cell_width, c, cell_width, d, cell_width);
}

void row(std::string& out, const char* name, const stat& s, bool bytes) {
  row(out, name, cell(s.current, bytes), cell(s.peak, bytes), cell(s.allocated, bytes),
      cell(s.freed, bytes));
}

void group(std::string& out, const char* title, const pool_stats& ps, bool bytes) {
  row(out, title, ps.all, bytes);
  row(out, "      from large pool", ps.large, bytes);
  row(out, "      from small pool", ps.small, bytes);
  rule(out, '-');
}

/// Block counts the stats do not keep, per pool (0 small, 1 large), from a snapshot.
struct block_counts {
  std::uint64_t active[2] = {0, 0};          // allocated or awaiting events
  std::uint64_t non_releasable[2] = {0, 0};  // free blocks of segments with an active block
  std::uint64_t oversize_active = 0;         // active blocks of at least max_split_size
  std::uint64_t oversize_segments = 0;       // segments of at least max_split_size
};

block_counts count_blocks(const memory_snapshot& snap, std::size_t max_split_size) {
  block_counts n;
  for (const segment_info& seg : snap.segments) {
    const int p = seg.pool == pool_kind::large ? 1 : 0;
    std::uint64_t active = 0, free = 0;
    for (const block_info& b : seg.blocks) {
      if (b.state == block_state::allocated || b.state == block_state::pending) {
        ++active;
        if (b.size >= max_split_size) ++n.oversize_active;
      } else if (b.state == block_state::free) {
        ++free;
      }
    }
    n.active[p] += active;
    if (active != 0) n.non_releasable[p] += free;
    if (seg.range_size >= max_split_size) ++n.oversize_segments;
  }
  return n;
}

std::uint64_t minus(std::uint64_t a, std::uint64_t b) {
  return a > b ? a - b : 0;  // stats and snapshot are two pictures: never below 0
}

/// "Active allocs": blocks now, allocations made, allocations no longer active.
void active_rows(std::string& out, const memory_stats& s, const block_counts& n) {
  const auto one = [&](const char* name, std::uint64_t now, const stat& allocs) {
    row(out, name, cell(now, false), none, cell(allocs.allocated, false),
        cell(minus(allocs.allocated, now), false));
  };
  one("Active allocs", n.active[0] + n.active[1], s.allocations.all);
  one("      from large pool", n.active[1], s.allocations.large);
  one("      from small pool", n.active[0], s.allocations.small);
  rule(out, '-');
  row(out, "Non-releasable allocs", cell(n.non_releasable[0] + n.non_releasable[1], false), none,
      none, none);
  row(out, "      from large pool", cell(n.non_releasable[1], false), none, none, none);
  row(out, "      from small pool", cell(n.non_releasable[0], false), none, none, none);
  rule(out, '-');
  row(out, "Oversize allocations", cell(n.oversize_active, false), none,
      cell(s.num_oversize_allocs, false),
      cell(minus(s.num_oversize_allocs, n.oversize_active), false));
  row(out, "Oversize GPU segments", cell(n.oversize_segments, false), none, none, none);
}

const char* type_name(pool_type t) {
  return t == pool_type::graph ? "graph" : "tenant";
}

/// The memory-pools section: one row per pool, as wide as every other line.
void pools_section(std::string& out, const std::vector<summary_pool>& pools) {
  constexpr const char* fmt_row =
      "| {:>2} {:<15} {:<7} {:>4} {:>10} {:>10} {:>10} {:>10} {:>10} {:>4} |\n";
  static_assert(summary_width == 2 + 2 + 15 + 7 + 4 + 5 * 10 + 4 + 9 + 2);
  line(out, "Memory pools (* released)");
  out += detail::format(fmt_row, "id", "name", "type", "prio", "limit", "guarantee", "reserved",
                        "peak", "allocated", "OOMs");
  const auto bytes = [](std::size_t n) { return n == 0 ? std::string("-") : format_bytes(n); };
  for (const summary_pool& p : pools) {
    const pool_info& i = p.info;
    const std::string name = i.name.size() > 15 ? i.name.substr(0, 14) + "~" : i.name;
    const std::string type =
        i.id == default_pool ? "-" : std::string(type_name(i.type)) + (i.released ? "*" : "");
    out += detail::format(fmt_row, i.id, name, type, i.priority, bytes(i.limit), bytes(i.guarantee),
                          format_bytes(p.stats.reserved_bytes.all.current),
                          format_bytes(p.stats.reserved_bytes.all.peak),
                          format_bytes(p.stats.allocated_bytes.all.current), p.stats.num_ooms);
  }
}

/// One line per pool that has slept: its state now and its sleep figures (pool.hpp).
void sleep_lines(std::string& out, const std::vector<summary_pool>& pools, device_timing timing) {
  const auto ms = [](std::uint64_t ns) { return static_cast<double>(ns) / 1e6; };
  for (const summary_pool& p : pools) {
    const sleep_stats& z = p.stats.sleep;
    if (z.num_sleeps + z.num_failed_sleeps + z.pools_asleep == 0) continue;
    const std::string now =
        z.pools_asleep != 0
            ? detail::format("asleep, {} to map at wake, {} offloaded{}",
                             format_bytes(z.bytes_asleep), format_bytes(z.bytes_offloaded),
                             z.bytes_held != 0 ? ", " + format_bytes(z.bytes_held) + " held" : "")
            : std::string("awake");
    line(out,
         detail::format("Pool {} sleep: {}; sleeps {} ({} under pressure, {} failed), wakes {} "
                        "({} failed); sleep {:.3f} ms, wake {:.3f} ms of {} device time; "
                        "copied out {}, in {}",
                        p.info.id, now, z.num_sleeps, z.num_pressure_sleeps, z.num_failed_sleeps,
                        z.num_wakes, z.num_failed_wakes, ms(z.sleep_ns), ms(z.wake_ns),
                        device_timing_name(timing), format_bytes(z.bytes_copied_out),
                        format_bytes(z.bytes_copied_in)));
  }
}

}  // namespace

std::string format_summary(const summary_facts& f) {
  const memory_stats& s = f.stats;
  std::string out;
  rule(out, '=');
  line(out, f.title);
  rule(out, '-');
  line(out,
       detail::format("OOMs: {:<8} alloc retries: {:<8} cache flushes: {:<8} syncs: {}", s.num_ooms,
                      s.num_alloc_retries, s.num_cache_flushes, s.num_device_syncs));
  rule(out, '=');
  row(out, "Metric", "Cur Usage", "Peak Usage", "Tot Alloc", "Tot Freed");
  rule(out, '-');
  group(out, "Allocated memory", s.allocated_bytes, true);
  group(out, "Active memory", s.active_bytes, true);
  group(out, "Requested memory", s.requested_bytes, true);
  group(out, "Reserved memory (segments)", s.reserved_bytes, true);
  group(out, "Non-releasable memory", s.inactive_split_bytes, true);
  group(out, "Allocations", s.allocations, false);
  group(out, "Segments", s.segments, false);
  active_rows(out, s, count_blocks(f.snapshot, f.max_split_size));
  rule(out, '-');
  for (const std::string& note : f.notes) line(out, note);
  const std::uint64_t reserved = s.reserved_bytes.all.current;
  const std::uint64_t allocated = s.allocated_bytes.all.current;
  line(out, detail::format("Reserved but unallocated: {} ({:.1f}% of reserved), allocation "
                           "streams: {}",
                           format_bytes(reserved - allocated),
                           reserved == 0 ? 0.0
                                         : 100.0 * static_cast<double>(reserved - allocated) /
                                               static_cast<double>(reserved),
                           s.num_streams));
  if (f.pools.size() > 1) {
    rule(out, '-');
    pools_section(out, f.pools);
    sleep_lines(out, f.pools, s.device.timing);
  }
  rule(out, '=');
  return out;
}

std::string engine::memory_summary() const {
  summary_facts f;
  f.snapshot = snapshot();
  f.stats = stats();
  f.max_split_size = max_split_size_;
  f.title = detail::format(
      "cachalot memory summary: device {}, served by the {} backend ({} device memory{})",
      backend_->device(), backend_->name(), format_bytes(device_total_),
      memory_limit_ != 0 ? ", memory limit " + format_bytes(memory_limit_) : "");
  const memory_stats& s = f.stats;
  f.notes.push_back(detail::format(
      "Segment allocs: {}, frees: {}; chunk maps: {}, unmaps: {}{}", s.num_segment_allocs,
      s.num_segment_frees, s.num_chunk_maps, s.num_chunk_unmaps,
      cfg_.expandable_segments && cfg_.caching ? " (expandable segments)" : ""));
  f.notes.push_back(detail::format("Deferred frees: {}, pending blocks: {}", s.num_deferred_frees,
                                   s.num_pending_blocks));
  f.notes.push_back(detail::format("Free blocks cached: {}, largest free block: {}",
                                   s.num_free_blocks, format_bytes(s.largest_free_block)));
  if (arena_) {
    const std::size_t uncarved = arena_->free_bytes();
    f.notes.push_back(detail::format(
        "Reserve (taken at start, kept until the allocator ends): {}; {} in segments, {} not "
        "carved (device memory held, not in the table)",
        format_bytes(arena_->size()), format_bytes(arena_->size() - uncarved),
        format_bytes(uncarved)));
  }
  if (cfg_.max_cached != SIZE_MAX) {
    f.notes.push_back(detail::format("Idle cached segments capped at {} (max_cached)",
                                     format_bytes(cfg_.max_cached)));
  }
  if (cfg_.debug) {
    f.notes.push_back(detail::format("Checked mode: on; use-after-free writes detected: {}",
                                     s.num_use_after_free_writes));
  }
  for (pool_info& i : pools()) {
    const pool_id id = i.id;
    f.pools.push_back(summary_pool{std::move(i), stats(id)});
  }
  return format_summary(f);
}

}  // namespace cachalot::detail
