// The human-readable memory summary: a table in the spirit of torch.cuda.memory_summary().
// Invariant: every line, rule and title is exactly `width` characters wide (a text longer than
// a line wraps at spaces; a count too long for its column is shortened to three significant
// digits). Byte rows use binary units; count rows use plain integers. The title names the
// device and the backend that serves it.
#include "cachalot/config.hpp"
#include "detail/engine.hpp"
#include "detail/format.hpp"

namespace cachalot::detail {
namespace {

constexpr std::size_t name_width = 32;
constexpr std::size_t cell_width = 12;
// "| " name "|" then four " cell |": the width of every line.
constexpr std::size_t width = 2 + name_width + 1 + 4 * (cell_width + 3);

void rule(std::string& out, char c) {
  out += '|';
  out.append(width - 2, c);
  out += "|\n";
}

/// One or more lines "| text |", wrapping `text` at spaces to fit.
void line(std::string& out, std::string_view text) {
  constexpr std::size_t room = width - 3;
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

}  // namespace

std::string engine::memory_summary() const {
  const memory_stats s = stats();
  std::string out;
  rule(out, '=');
  line(out,
       detail::format("cachalot memory summary: device {}, served by the {} backend ({} device "
                      "memory{})",
                      backend_->device(), backend_->name(), format_bytes(device_total_),
                      memory_limit_ != 0 ? ", memory limit " + format_bytes(memory_limit_) : ""));
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
  line(out, detail::format("Segment allocs: {}, frees: {}; chunk maps: {}, unmaps: {}{}",
                           s.num_segment_allocs, s.num_segment_frees, s.num_chunk_maps,
                           s.num_chunk_unmaps,
                           cfg_.expandable_segments && cfg_.caching ? " (expandable segments)"
                                                                    : ""));
  line(out, detail::format("Oversize allocations: {}, deferred frees: {}, pending blocks: {}",
                           s.num_oversize_allocs, s.num_deferred_frees, s.num_pending_blocks));
  line(out, detail::format("Free blocks cached: {}, largest free block: {}", s.num_free_blocks,
                           format_bytes(s.largest_free_block)));
  if (arena_) {
    const std::size_t uncarved = arena_->free_bytes();
    line(out, detail::format("Reserve (taken at start, kept until the allocator ends): {}; {} in "
                             "segments, {} not carved (device memory held, not in the table)",
                             format_bytes(arena_->size()), format_bytes(arena_->size() - uncarved),
                             format_bytes(uncarved)));
  }
  if (cfg_.max_cached != SIZE_MAX) {
    line(out, detail::format("Idle cached segments capped at {} (max_cached)",
                             format_bytes(cfg_.max_cached)));
  }
  if (cfg_.debug) {
    line(out, detail::format("Checked mode: on; use-after-free writes detected: {}",
                             s.num_use_after_free_writes));
  }
  const std::uint64_t reserved = s.reserved_bytes.all.current;
  const std::uint64_t allocated = s.allocated_bytes.all.current;
  line(out, detail::format("Reserved but unallocated: {} ({:.1f}% of reserved), streams: {}",
                           format_bytes(reserved - allocated),
                           reserved == 0 ? 0.0
                                         : 100.0 * static_cast<double>(reserved - allocated) /
                                               static_cast<double>(reserved),
                           s.num_streams));
  if (std::string pools = pools_summary(); !pools.empty()) {
    rule(out, '-');
    out += pools;
  }
  rule(out, '=');
  return out;
}

}  // namespace cachalot::detail
