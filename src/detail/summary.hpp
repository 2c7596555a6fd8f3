// The human-readable memory summary (a table in the spirit of torch.cuda.memory_summary()),
// made from the facts an allocator gathers: stats, a snapshot (for the block counts of
// PyTorch's table that the stats do not keep: active and non-releasable blocks, oversize
// blocks and segments), notes and the memory pools. engine::memory_summary() gathers them; a
// default allocator not created yet has a table of zeros made from its config alone.
#pragma once

#include <cstddef>
#include <string>
#include <vector>

#include "cachalot/pool.hpp"
#include "cachalot/stats.hpp"

namespace cachalot::detail {

/// One memory pool of the summary's pool section.
struct summary_pool {
  pool_info info;      ///< the pool
  memory_stats stats;  ///< its counters
};

/// What one summary shows.
struct summary_facts {
  std::string title;                ///< first line (device, backend, capacity)
  memory_stats stats;               ///< the counters
  memory_snapshot snapshot;         ///< segments and blocks, for the block counts
  std::size_t max_split_size = 0;   ///< blocks and segments this big are "oversize"
  std::vector<std::string> notes;   ///< lines after the counters' table, before the footer
  std::vector<summary_pool> pools;  ///< the pool section, shown with two pools or more
};

/// Every line, rule and title of the summary is exactly this wide.
inline constexpr std::size_t summary_width = 95;

/// The summary of `f`.
std::string format_summary(const summary_facts& f);

}  // namespace cachalot::detail
