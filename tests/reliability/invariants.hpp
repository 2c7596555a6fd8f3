// The allocator's accounting invariants, checked from outside through the public API, for the
// fault sweep, the stress program and the fuzzers. check_invariants() returns "" when every one
// holds, else a description of the first that fails:
//  - allocated <= active <= reserved, per pool and for all;
//  - every byte stat equals the sum over snapshot(): reserved = segment sizes, allocated =
//    allocated block sizes, active = allocated + pending block sizes, requested = requested
//    sizes of allocated blocks, inactive split = free bytes of segments not wholly free; the
//    counts (segments, allocations, pending and free blocks, largest free block) likewise;
//  - blocks tile their segment (an expandable one: its address range) exactly, no two free
//    blocks and no two holes are adjacent, holes lie on chunk boundaries, mapped blocks add up
//    to the segment's size;
//  - the same for every memory pool, over the segments the snapshot gives to it;
//  - on a simulated device: segment bytes + mapped chunk bytes == reserved, live segments +
//    live address ranges == segments, chunk maps and unmaps as the allocator counted them;
//  - every pointer the caller believes live is owned and has its size.
// Needs a quiescent allocator (no concurrent calls).
#pragma once

#include <algorithm>
#include <cstddef>
#include <cstdint>
#include <string>
#include <tuple>
#include <unordered_map>
#include <utility>

#include "cachalot/allocator.hpp"
#include "cachalot/simulated_device.hpp"

namespace cachalot::testing {

namespace detail_inv {
struct pool_sums {
  std::uint64_t reserved = 0, allocated = 0, active = 0, requested = 0, inactive = 0;
  std::uint64_t segments = 0, allocations = 0;
};

inline std::string compare(const char* what, std::uint64_t stat, std::uint64_t sum) {
  if (stat == sum) return "";
  return std::string(what) + ": stats say " + std::to_string(stat) + ", snapshot sums to " +
         std::to_string(sum);
}

inline std::string check_segment(const segment_info& seg, pool_sums& p, std::uint64_t& pending,
                                 std::uint64_t& free_blocks, std::uint64_t& largest) {
  constexpr std::size_t chunk = std::size_t{2} << 20;  // the simulated device's granularity
  std::uintptr_t at = seg.address;
  block_state prev = block_state::allocated;
  std::uint64_t free_bytes = 0, mapped = 0;
  bool live = false;
  for (const block_info& b : seg.blocks) {
    if (b.address != at) return "blocks do not tile segment " + std::to_string(seg.address);
    at += b.size;
    const bool is_free = b.state == block_state::free;
    if (is_free && prev == block_state::free) return "two adjacent free blocks were not coalesced";
    if (b.state == block_state::unmapped) {
      if (prev == block_state::unmapped) return "two adjacent holes were not merged";
      if (!seg.expandable) return "a hole in a fixed segment";
      if (b.address % chunk != 0 || b.size % chunk != 0) return "a hole off chunk boundaries";
      prev = b.state;
      continue;
    }
    prev = b.state;
    mapped += b.size;
    if (is_free) {
      free_bytes += b.size;
      ++free_blocks;
      largest = std::max<std::uint64_t>(largest, b.size);
    } else if (b.state == block_state::allocated) {
      live = true;
      p.allocated += b.size;
      p.active += b.size;
      p.requested += b.requested;
      ++p.allocations;
    } else {
      live = true;
      p.active += b.size;
      ++pending;
    }
  }
  if (at != seg.address + seg.range_size) return "blocks do not cover their segment";
  if (mapped != seg.size) return "mapped blocks do not add up to the segment's size";
  if (live) p.inactive += free_bytes;  // free bytes of segments with no live block are not
  p.reserved += seg.size;
  ++p.segments;
  return "";
}

inline std::string check_pool(const char* pool, const memory_stats& s, pool_kind k,
                              const pool_sums& p) {
  const std::string prefix = std::string(pool) + " ";
  for (auto [what, stat, sum] :
       {std::tuple{"reserved", s.reserved_bytes.of(k).current, p.reserved},
        std::tuple{"allocated", s.allocated_bytes.of(k).current, p.allocated},
        std::tuple{"active", s.active_bytes.of(k).current, p.active},
        std::tuple{"requested", s.requested_bytes.of(k).current, p.requested},
        std::tuple{"inactive split", s.inactive_split_bytes.of(k).current, p.inactive},
        std::tuple{"segments", s.segments.of(k).current, p.segments},
        std::tuple{"allocations", s.allocations.of(k).current, p.allocations}}) {
    std::string e = compare((prefix + what).c_str(), stat, sum);
    if (!e.empty()) return e;
  }
  return "";
}
/// Every byte and count stat of each memory pool equals the sum over its segments.
inline std::string check_memory_pools(const allocator& a, const memory_snapshot& snap) {
  for (const pool_info& info : a.pools()) {
    const memory_stats s = a.stats(info.id);
    pool_sums pools[pool_count];
    std::uint64_t pending = 0, free_blocks = 0, largest = 0;
    for (const segment_info& seg : snap.segments) {
      if (seg.memory_pool != info.id) continue;
      std::string e = check_segment(seg, pools[static_cast<std::size_t>(seg.pool)], pending,
                                    free_blocks, largest);
      if (!e.empty()) return e;
    }
    const std::string name = "pool " + std::to_string(info.id) + " ";
    for (auto [cls, k] :
         {std::pair{"small", pool_kind::small}, std::pair{"large", pool_kind::large}}) {
      std::string e = check_pool((name + cls).c_str(), s, k, pools[static_cast<std::size_t>(k)]);
      if (!e.empty()) return e;
    }
    for (auto [what, stat, sum] :
         {std::tuple{"pending blocks", s.num_pending_blocks, pending},
          std::tuple{"free blocks", s.num_free_blocks, free_blocks},
          std::tuple{"largest free block", s.largest_free_block, largest}}) {
      std::string e = compare((name + what).c_str(), stat, sum);
      if (!e.empty()) return e;
    }
    if (s.reserved_bytes.all.current > s.reserved_bytes.all.peak) return name + "peak < current";
    if (info.limit != 0 && s.reserved_bytes.all.peak > info.limit) return name + "over its limit";
  }
  return "";
}
}  // namespace detail_inv

/// Checks every invariant of the file comment, against `s` and `snap`, a stats() and a
/// snapshot() of `a` taken with nothing in between (a caller that checks more of them reads
/// them once). `live` maps pointers the caller holds to the size it asked for; `device` may be
/// null (no device checks). `with_pools` false leaves out the memory pools' stats (a fuzzer
/// checks them every few operations, where the allocator has only its default pool).
inline std::string check_invariants(const allocator& a, const memory_stats& s,
                                    const memory_snapshot& snap, const simulated_device* device,
                                    const std::unordered_map<void*, std::size_t>& live,
                                    bool with_pools = true) {
  using namespace detail_inv;
  pool_sums pools[pool_count];
  std::uint64_t pending = 0, free_blocks = 0, largest = 0;
  for (const segment_info& seg : snap.segments) {
    std::string e = check_segment(seg, pools[static_cast<std::size_t>(seg.pool)], pending,
                                  free_blocks, largest);
    if (!e.empty()) return e;
  }
  for (auto [name, k] :
       {std::pair{"small", pool_kind::small}, std::pair{"large", pool_kind::large}}) {
    std::string e = check_pool(name, s, k, pools[static_cast<std::size_t>(k)]);
    if (!e.empty()) return e;
  }
  const auto& all = s.reserved_bytes.all.current;
  if (all != pools[0].reserved + pools[1].reserved) return "reserved (all) != small + large";
  if (s.allocated_bytes.all.current > s.active_bytes.all.current ||
      s.active_bytes.all.current > all) {
    return "allocated <= active <= reserved does not hold";
  }
  for (auto [what, stat, sum] :
       {std::tuple{"pending blocks", s.num_pending_blocks, pending},
        std::tuple{"free blocks", s.num_free_blocks, free_blocks},
        std::tuple{"largest free block", s.largest_free_block, largest},
        std::tuple{"live allocations", s.allocations.all.current, std::uint64_t{live.size()}}}) {
    std::string e = compare(what, stat, sum);
    if (!e.empty()) return e;
  }
  if (with_pools) {
    if (std::string e = check_memory_pools(a, snap); !e.empty()) return e;
  }
  if (device != nullptr) {
    const sim_counters c = device->counters();
    for (auto [what, stat, sum] :
         {std::tuple{"device used + mapped bytes vs reserved", all, c.used_bytes + c.mapped_bytes},
          std::tuple{"device live segments + ranges vs segments", s.segments.all.current,
                     c.live_segments + c.live_ranges},
          std::tuple{"device chunk maps", s.num_chunk_maps, c.chunk_maps},
          std::tuple{"device chunk unmaps", s.num_chunk_unmaps, c.chunk_unmaps}}) {
      std::string e = compare(what, stat, sum);
      if (!e.empty()) return e;
    }
  }
  std::uint64_t requested = 0;
  for (const auto& [ptr, size] : live) {
    if (!a.owns(ptr)) return "a live pointer is not owned";
    if (a.allocation_size(ptr) < size) return "a live allocation is smaller than requested";
    requested += size;
  }
  return compare("requested vs caller's live sizes", s.requested_bytes.all.current, requested);
}

/// check_invariants on a stats() and a snapshot() read now.
inline std::string check_invariants(const allocator& a, const simulated_device* device,
                                    const std::unordered_map<void*, std::size_t>& live) {
  const memory_stats s = a.stats();
  return check_invariants(a, s, a.snapshot(), device, live);
}

}  // namespace cachalot::testing
