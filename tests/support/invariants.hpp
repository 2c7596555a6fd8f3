// Test support: checks that an allocator's stats agree exactly with its snapshot, and that
// the snapshot itself is well formed (blocks tile their segments, no two adjacent free blocks,
// no overlap between segments; an asleep segment holds only allocated blocks and holes). Used
// after every step of randomized and fault tests.
#pragma once

#include <gtest/gtest.h>

#include <algorithm>
#include <cstdint>
#include <string>
#include <vector>

#include "cachalot/allocator.hpp"
#include "cachalot/simulated_device.hpp"

namespace cachalot::testing {

/// Sums over a snapshot, per pool (index 0 small, 1 large) and for all.
struct snapshot_sums {
  std::uint64_t reserved[3] = {};
  std::uint64_t allocated[3] = {};
  std::uint64_t requested[3] = {};
  std::uint64_t active[3] = {};
  std::uint64_t inactive_split[3] = {};
  std::uint64_t allocations[3] = {};
  std::uint64_t segments[3] = {};
  std::uint64_t free_blocks = 0;
  std::uint64_t largest_free = 0;
};

/// True if a segment holds an allocated or pending block (its free bytes are inactive-split).
/// The segment holding `p` in a snapshot, or nullptr.
inline const segment_info* segment_of(const memory_snapshot& snap, const void* p) {
  const auto a = reinterpret_cast<std::uintptr_t>(p);
  for (const segment_info& s : snap.segments) {
    if (a >= s.address && a < s.address + s.range_size) return &s;
  }
  return nullptr;
}

/// True if `p` and `q` lie in one segment of `snap`.
inline bool same_segment(const memory_snapshot& snap, const void* p, const void* q) {
  const segment_info* s = segment_of(snap, p);
  return s != nullptr && s == segment_of(snap, q);
}

inline bool holds_live_block(const segment_info& seg) {
  return std::any_of(seg.blocks.begin(), seg.blocks.end(), [](const block_info& b) {
    return b.state == block_state::allocated || b.state == block_state::pending;
  });
}

/// `only`: the segments of one memory pool (default: all).
inline snapshot_sums sum_snapshot(const memory_snapshot& snap, const pool_id* only = nullptr) {
  snapshot_sums s;
  for (const segment_info& seg : snap.segments) {
    if (only != nullptr && seg.memory_pool != *only) continue;
    const std::size_t p = static_cast<std::size_t>(seg.pool);
    for (std::size_t i : {p, std::size_t{2}}) {
      s.reserved[i] += seg.size;
      s.segments[i] += 1;
    }
    const bool split = holds_live_block(seg);
    for (const block_info& b : seg.blocks) {
      for (std::size_t i : {p, std::size_t{2}}) {
        if (b.state == block_state::allocated) {
          s.allocated[i] += b.size;
          s.requested[i] += b.requested;
          s.allocations[i] += 1;
        }
        if (b.state == block_state::allocated || b.state == block_state::pending) {
          s.active[i] += b.size;
        }
        if (b.state == block_state::free && split) s.inactive_split[i] += b.size;
      }
      if (b.state == block_state::free) {
        ++s.free_blocks;
        s.largest_free = std::max<std::uint64_t>(s.largest_free, b.size);
      }
    }
  }
  return s;
}

/// Asserts the snapshot's shape: blocks tile each segment (an expandable one: its whole
/// address range) in order, adjacent free blocks are coalesced, so are adjacent holes, holes
/// start and end on `chunk` boundaries, the mapped blocks add up to the segment's size, and
/// segments do not overlap.
inline void expect_well_formed(const memory_snapshot& snap, std::size_t chunk = 2 * MiB) {
  std::uintptr_t prev_end = 0;
  for (const segment_info& seg : snap.segments) {
    EXPECT_GE(seg.address, prev_end) << "segments overlap";
    if (!seg.expandable) {
      EXPECT_EQ(seg.range_size, seg.size) << "a fixed segment's range";
    }
    prev_end = seg.address + seg.range_size;
    std::uintptr_t at = seg.address;
    block_state prev = block_state::allocated;
    std::size_t mapped = 0;
    ASSERT_FALSE(seg.blocks.empty());
    for (const block_info& b : seg.blocks) {
      EXPECT_EQ(b.address, at) << "blocks do not tile the segment";
      EXPECT_GT(b.size, 0u);
      const bool adjacent =
          b.state == prev && (b.state == block_state::free || b.state == block_state::unmapped);
      EXPECT_FALSE(adjacent) << "adjacent free blocks or holes at " << b.address;
      if (seg.asleep) {  // allocated blocks and holes, anywhere
        EXPECT_TRUE(b.state == block_state::allocated || b.state == block_state::unmapped)
            << "a free or pending block in an asleep segment at " << b.address;
      } else if (b.state == block_state::unmapped) {
        EXPECT_TRUE(seg.expandable) << "a hole in a fixed segment";
        EXPECT_EQ(b.address % chunk, 0u) << "a hole off the chunk boundaries";
        EXPECT_EQ(b.size % chunk, 0u) << "a hole off the chunk boundaries";
      } else {
        mapped += b.size;
      }
      prev = b.state;
      at += b.size;
    }
    EXPECT_EQ(at, seg.address + seg.range_size) << "blocks do not cover the segment";
    if (seg.asleep) {  // its size is what it still holds (chunks whose unmap failed)
      EXPECT_TRUE(seg.expandable) << "an asleep fixed segment";
      EXPECT_EQ(seg.size % chunk, 0u) << "held bytes off the chunk boundaries";
    } else {
      EXPECT_EQ(mapped, seg.size) << "mapped blocks do not add up to the segment's size";
    }
  }
}

/// Asserts that every stat of `st` equals the corresponding sum over `snap` (or over the
/// segments of pool `*only`).
inline void expect_stats_match(const memory_stats& st, const memory_snapshot& snap,
                               const pool_id* only, const char* what) {
  const snapshot_sums s = sum_snapshot(snap, only);
  const pool_stats* groups[] = {&st.reserved_bytes, &st.allocated_bytes,      &st.requested_bytes,
                                &st.active_bytes,   &st.inactive_split_bytes, &st.allocations,
                                &st.segments};
  const std::uint64_t* sums[] = {s.reserved,       s.allocated,   s.requested, s.active,
                                 s.inactive_split, s.allocations, s.segments};
  const char* names[] = {"reserved",       "allocated",   "requested", "active",
                         "inactive_split", "allocations", "segments"};
  for (std::size_t g = 0; g < 7; ++g) {
    EXPECT_EQ(groups[g]->small.current, sums[g][0]) << what << names[g] << " (small pool)";
    EXPECT_EQ(groups[g]->large.current, sums[g][1]) << what << names[g] << " (large pool)";
    EXPECT_EQ(groups[g]->all.current, sums[g][2]) << what << names[g] << " (all)";
    EXPECT_LE(groups[g]->all.current, groups[g]->all.peak) << what << names[g] << " peak";
    EXPECT_LE(groups[g]->small.current, groups[g]->small.peak) << what << names[g] << " peak";
    EXPECT_LE(groups[g]->large.current, groups[g]->large.peak) << what << names[g] << " peak";
  }
  // A sleeping pool's blocks stay allocated with nothing mapped behind them.
  EXPECT_LE(st.allocated_bytes.all.current, st.reserved_bytes.all.current + st.sleep.bytes_asleep)
      << what;
  std::uint64_t asleep = 0;
  for (const sleeping_pool_info& p : snap.sleeping_pools) {
    if (only == nullptr || p.pool == *only) asleep += p.bytes_asleep;
  }
  EXPECT_EQ(st.sleep.bytes_asleep, asleep) << what << "bytes asleep";
  EXPECT_LE(st.requested_bytes.all.current, st.allocated_bytes.all.current) << what;
  EXPECT_EQ(st.num_free_blocks, s.free_blocks) << what;
  EXPECT_EQ(st.largest_free_block, s.largest_free) << what;
  EXPECT_EQ(st.num_segment_allocs - st.num_segment_frees, st.segments.all.current) << what;
  EXPECT_EQ(st.num_allocs - st.num_frees, st.allocations.all.current) << what;
}

/// Asserts that every stat equals the corresponding sum over the snapshot, for the allocator
/// and for each of its memory pools, and that the pools' counters add up to the allocator's.
/// `quiescent`: no growth or release is in flight, so pools()' reserved bytes (room taken,
/// in-flight growth included) equal the stats too.
inline void expect_stats_match_snapshot(const allocator& a, bool quiescent = true) {
  const std::vector<pool_info> pools = a.pools();
  const memory_snapshot snap = a.snapshot();
  const memory_stats st = a.stats();
  std::vector<memory_stats> per_pool;
  for (const pool_info& p : pools) per_pool.push_back(a.stats(p.id));
  expect_well_formed(snap);
  expect_stats_match(st, snap, nullptr, "");
  memory_stats sum;
  for (std::size_t i = 0; i < pools.size(); ++i) {
    const std::string what = "pool " + std::to_string(pools[i].id) + ": ";
    expect_stats_match(per_pool[i], snap, &pools[i].id, what.c_str());
    if (quiescent && per_pool[i].reserved_bytes.all.current != pools[i].reserved_bytes) {
      // pools() is read at another instant: only compare where nothing runs concurrently
      ADD_FAILURE() << what << "pools() reserved " << pools[i].reserved_bytes << " but stats "
                    << per_pool[i].reserved_bytes.all.current;
    }
    sum.num_allocs += per_pool[i].num_allocs;
    sum.num_frees += per_pool[i].num_frees;
    sum.num_segment_allocs += per_pool[i].num_segment_allocs;
    sum.num_segment_frees += per_pool[i].num_segment_frees;
    sum.num_ooms += per_pool[i].num_ooms;
    sum.allocated_bytes.all.allocated += per_pool[i].allocated_bytes.all.allocated;
    sum.reserved_bytes.all.freed += per_pool[i].reserved_bytes.all.freed;
    EXPECT_LE(per_pool[i].reserved_bytes.all.peak, st.reserved_bytes.all.peak) << what;
  }
  if (!pools.empty()) {
    EXPECT_EQ(sum.num_allocs, st.num_allocs);
    EXPECT_EQ(sum.num_frees, st.num_frees);
    EXPECT_EQ(sum.num_segment_allocs, st.num_segment_allocs);
    EXPECT_EQ(sum.num_segment_frees, st.num_segment_frees);
    EXPECT_LE(sum.num_ooms, st.num_ooms);  // impossible sizes fail before any pool is chosen
    EXPECT_EQ(sum.allocated_bytes.all.allocated, st.allocated_bytes.all.allocated);
    EXPECT_EQ(sum.reserved_bytes.all.freed, st.reserved_bytes.all.freed);
  }
}

/// Asserts that the simulated device holds exactly the allocator's reserved bytes (segments
/// and mapped chunks), segments and address ranges, and saw the same calls.
inline void expect_device_matches(const allocator& a, const simulated_device& dev) {
  const sim_counters c = dev.counters();
  const memory_stats st = a.stats();
  EXPECT_EQ(c.live_segments + c.live_ranges, st.segments.all.current);
  EXPECT_EQ(c.segment_allocs + c.range_reserves, st.num_segment_allocs);
  EXPECT_EQ(c.segment_frees + c.range_releases, st.num_segment_frees);
  EXPECT_EQ(c.used_bytes + c.mapped_bytes, st.reserved_bytes.all.current);
  EXPECT_EQ(c.chunk_maps, st.num_chunk_maps);
  EXPECT_EQ(c.chunk_unmaps, st.num_chunk_unmaps);
}

}  // namespace cachalot::testing
