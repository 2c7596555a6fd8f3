// The human-readable memory summary: a table in the spirit of torch.cuda.memory_summary(),
// formatted with fmt. Byte rows use binary units; count rows use plain integers.
#include <fmt/format.h>

#include "cachalot/config.hpp"
#include "detail/engine.hpp"

namespace cachalot::detail {
namespace {

constexpr int width = 91;

void rule(std::string& out, char c) {
  out += '|';
  out.append(width - 2, c);
  out += "|\n";
}

void line(std::string& out, const std::string& text) {
  out += fmt::format("| {:<{}}|\n", text, width - 3);
}

void row(std::string& out, const char* name, const stat& s, bool bytes) {
  auto f = [&](std::uint64_t v) { return bytes ? format_bytes(v) : fmt::format("{}", v); };
  out += fmt::format("| {:<32}| {:>12} | {:>12} | {:>12} | {:>12} |\n", name, f(s.current),
                     f(s.peak), f(s.allocated), f(s.freed));
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
  line(out, fmt::format("cachalot memory summary, device {} ({} backend)", backend_->device(),
                        backend_->name()));
  rule(out, '-');
  line(out, fmt::format("OOMs: {:<8} alloc retries: {:<8} cache flushes: {:<8} syncs: {}",
                        s.num_ooms, s.num_alloc_retries, s.num_cache_flushes, s.num_device_syncs));
  rule(out, '=');
  out += fmt::format("| {:<32}| {:>12} | {:>12} | {:>12} | {:>12} |\n", "Metric", "Cur Usage",
                     "Peak Usage", "Tot Alloc", "Tot Freed");
  rule(out, '-');
  group(out, "Allocated memory", s.allocated_bytes, true);
  group(out, "Active memory", s.active_bytes, true);
  group(out, "Requested memory", s.requested_bytes, true);
  group(out, "Reserved memory (segments)", s.reserved_bytes, true);
  group(out, "Non-releasable memory", s.inactive_split_bytes, true);
  group(out, "Allocations", s.allocations, false);
  group(out, "Segments", s.segments, false);
  line(out, fmt::format("Device segment allocs: {}, frees: {}", s.num_segment_allocs,
                        s.num_segment_frees));
  line(out, fmt::format("Oversize allocations: {}, deferred frees: {}, pending blocks: {}",
                        s.num_oversize_allocs, s.num_deferred_frees, s.num_pending_blocks));
  line(out, fmt::format("Free blocks cached: {}, largest free block: {}", s.num_free_blocks,
                        format_bytes(s.largest_free_block)));
  if (cfg_.debug) {
    line(out, fmt::format("Checked mode: on; use-after-free writes detected: {}",
                          s.num_use_after_free_writes));
  }
  const std::uint64_t reserved = s.reserved_bytes.all.current;
  const std::uint64_t allocated = s.allocated_bytes.all.current;
  line(out, fmt::format("Reserved but unallocated: {} ({:.1f}% of reserved), streams: {}",
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
