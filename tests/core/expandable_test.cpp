// Expandable segments (src/expandable.cpp): holes unmapped in the middle of a segment and
// mapped again on reuse, chunk boundaries, the size bands, the release mark, trim, the
// adversarial pattern of issue 10, device faults in map and unmap, the windows of a growth
// and a release (another thread's call inside the device call), capture, checked mode,
// pass-through mode, and the fallbacks (no address space, no virtual memory).
#include <gtest/gtest.h>

#include <algorithm>
#include <cstring>
#include <memory>
#include <random>
#include <string>
#include <vector>

#include "cachalot/cachalot.hpp"
#include "support/hooked_backend.hpp"
#include "support/invariants.hpp"

namespace cachalot::testing {
namespace {

constexpr std::size_t chunk = 2 * MiB;

stream_t stream_n(std::uintptr_t n) {
  return reinterpret_cast<stream_t>(n);
}

std::shared_ptr<simulated_device> make_device(std::size_t capacity, bool host_backing = false) {
  sim_options o;
  o.capacity = capacity;
  o.host_backing = host_backing;
  return std::make_shared<simulated_device>(o);
}

config expandable_config(const std::string& extra = "") {
  return config::parse("backend:simulated,expandable_segments:1" +
                       (extra.empty() ? "" : "," + extra));
}

/// The snapshot block starting at `addr`, or nullptr.
const block_info* block_at(const segment_info& seg, std::uintptr_t addr) {
  for (const block_info& b : seg.blocks) {
    if (b.address == addr) return &b;
  }
  return nullptr;
}

void expect_consistent(const allocator& a, const simulated_device& dev) {
  expect_stats_match_snapshot(a);
  expect_device_matches(a, dev);
}

TEST(expandable, AHoleInTheMiddleIsUnmappedAndMappedAgainWithContentIntactAround) {
  auto dev = make_device(1 * GiB, true);
  allocator a(expandable_config(), dev);
  // Three 4 MiB blocks, back to back in one segment: chunks 0-1, 2-3, 4-5.
  auto* x = static_cast<unsigned char*>(a.allocate(4 * MiB));
  auto* y = static_cast<unsigned char*>(a.allocate(4 * MiB));
  auto* z = static_cast<unsigned char*>(a.allocate(4 * MiB));
  ASSERT_EQ(y, x + 4 * MiB);
  ASSERT_EQ(z, y + 4 * MiB);
  EXPECT_EQ(a.stats().reserved_bytes.all.current, 12 * MiB);
  std::memset(x, 0x11, 4 * MiB);
  std::memset(y, 0x22, 4 * MiB);
  std::memset(z, 0x33, 4 * MiB);
  a.deallocate(y);
  a.empty_cache();
  // The middle chunks went back to the device; the segment keeps its address range.
  EXPECT_FALSE(dev->is_mapped(y, 4 * MiB));
  EXPECT_TRUE(dev->is_mapped(x, 4 * MiB));
  EXPECT_TRUE(dev->is_mapped(z, 4 * MiB));
  memory_stats s = a.stats();
  EXPECT_EQ(s.reserved_bytes.all.current, 8 * MiB);
  EXPECT_EQ(s.num_chunk_unmaps, 2u);
  EXPECT_EQ(s.segments.all.current, 1u);
  const memory_snapshot snap = a.snapshot();
  const segment_info* seg = segment_of(snap, y);
  ASSERT_NE(seg, nullptr);
  EXPECT_TRUE(seg->expandable);
  EXPECT_EQ(seg->size, 8 * MiB);
  const block_info* hole = block_at(*seg, reinterpret_cast<std::uintptr_t>(y));
  ASSERT_NE(hole, nullptr);
  EXPECT_EQ(hole->state, block_state::unmapped);
  EXPECT_EQ(hole->size, 4 * MiB);
  expect_consistent(a, *dev);
  // The same size again lands in the hole (it maps the fewest chunks, at the lowest address).
  const std::uint64_t maps = s.num_chunk_maps;
  auto* w = static_cast<unsigned char*>(a.allocate(4 * MiB));
  EXPECT_EQ(w, y);
  EXPECT_EQ(a.stats().num_chunk_maps, maps + 2);
  std::memset(w, 0x44, 4 * MiB);
  for (std::size_t i = 0; i < 4 * MiB; i += 4093) {
    ASSERT_EQ(x[i], 0x11);
    ASSERT_EQ(z[i], 0x33);
    ASSERT_EQ(w[i], 0x44);
  }
  expect_consistent(a, *dev);
  for (void* p : {static_cast<void*>(x), static_cast<void*>(z), static_cast<void*>(w)}) {
    a.deallocate(p);
  }
  a.empty_cache();
  EXPECT_EQ(a.stats().reserved_bytes.all.current, 0u);
  EXPECT_EQ(a.stats().segments.all.current, 0u);
  EXPECT_EQ(dev->counters().live_ranges, 0u);
  expect_consistent(a, *dev);
}

TEST(expandable, OnlyWholeChunksOfAFreeBlockAreUnmapped) {
  auto dev = make_device(1 * GiB);
  allocator a(expandable_config(), dev);
  // 3 MiB blocks: the middle one spans [3, 6) MiB of the segment, of which only the chunk
  // [4, 6) MiB is whole.
  void* p = a.allocate(3 * MiB);
  void* q = a.allocate(3 * MiB);
  void* r = a.allocate(3 * MiB);
  const auto base = reinterpret_cast<std::uintptr_t>(p);
  ASSERT_EQ(reinterpret_cast<std::uintptr_t>(q), base + 3 * MiB);
  EXPECT_EQ(a.stats().reserved_bytes.all.current, 10 * MiB);  // 9 MiB in 5 chunks
  a.deallocate(q);
  a.empty_cache();
  EXPECT_EQ(a.stats().reserved_bytes.all.current, 8 * MiB);
  const memory_snapshot snap = a.snapshot();
  const segment_info* seg = segment_of(snap, p);
  ASSERT_NE(seg, nullptr);
  const block_info* head = block_at(*seg, base + 3 * MiB);
  const block_info* hole = block_at(*seg, base + 4 * MiB);
  ASSERT_NE(head, nullptr);
  ASSERT_NE(hole, nullptr);
  EXPECT_EQ(head->state, block_state::free);
  EXPECT_EQ(head->size, 1 * MiB);
  EXPECT_EQ(hole->state, block_state::unmapped);
  EXPECT_EQ(hole->size, 2 * MiB);
  expect_consistent(a, *dev);
  a.deallocate(p);
  a.deallocate(r);
  expect_consistent(a, *dev);
}

TEST(expandable, GrowthExtendsAFreeBlockNextToUnmappedSpace) {
  auto dev = make_device(1 * GiB);
  allocator a(expandable_config(), dev);
  void* p = a.allocate(3 * MiB);  // maps 2 chunks; 1 MiB free after it
  EXPECT_EQ(a.stats().num_chunk_maps, 2u);
  void* q = a.allocate(3 * MiB);  // uses that free 1 MiB and maps one more chunk
  EXPECT_EQ(q, static_cast<char*>(p) + 3 * MiB);
  EXPECT_EQ(a.stats().num_chunk_maps, 3u);
  EXPECT_EQ(a.stats().reserved_bytes.all.current, 6 * MiB);
  a.deallocate(p);
  a.deallocate(q);
  expect_consistent(a, *dev);
}

TEST(expandable, SmallRequestsGrowTheirOwnSegments) {
  // Size bands: a tiny block never shares a chunk with a larger one, so that a long-lived tiny
  // block cannot keep the chunk of a freed larger one mapped. With expandable segments the
  // default size_bands:lazy opens the bands at once (as eager does): a band's own range
  // reserves only address space, and its chunks are mapped as it needs them.
  auto dev = make_device(1 * GiB);
  allocator a(expandable_config(), dev);
  void* tiny = a.allocate(4 * KiB);
  void* medium = a.allocate(512 * KiB);
  void* sub_chunk = a.allocate(1536 * KiB);
  void* large = a.allocate(6 * MiB);
  const memory_snapshot snap = a.snapshot();
  EXPECT_EQ(snap.segments.size(), 4u);
  const segment_info* segs[] = {segment_of(snap, tiny), segment_of(snap, medium),
                                segment_of(snap, sub_chunk), segment_of(snap, large)};
  for (int i = 0; i < 4; ++i) {
    for (int j = i + 1; j < 4; ++j) EXPECT_NE(segs[i], segs[j]) << i << " " << j;
  }
  EXPECT_EQ(segs[0]->pool, pool_kind::small);
  EXPECT_EQ(segs[1]->pool, pool_kind::small);
  EXPECT_EQ(segs[2]->pool, pool_kind::large);
  EXPECT_EQ(segs[3]->pool, pool_kind::large);
  // The freed medium block's chunk goes back although the tiny block lives on.
  a.deallocate(medium);
  a.empty_cache();
  EXPECT_EQ(a.stats().reserved_bytes.small.current, chunk);
  for (void* p : {tiny, sub_chunk, large}) a.deallocate(p);
  expect_consistent(a, *dev);
}

TEST(expandable, LargeChunksMapTheLargePoolInPiecesOfTheirSize) {
  // large_chunk:20MiB: one map covers 20 MiB of a large-pool segment (PyTorch's page); the
  // small pool still maps one granule; a release unmaps only whole 20 MiB chunks.
  auto dev = make_device(1 * GiB);
  allocator a(expandable_config("large_chunk:20MiB"), dev);
  void* tiny = a.allocate(4 * KiB);
  EXPECT_EQ(a.stats().reserved_bytes.small.current, chunk);
  // With chunks larger than a granule the bands open lazily, as for fixed segments: a band's
  // own range would map a whole large chunk for its first block.
  void* medium = a.allocate(512 * KiB);
  EXPECT_TRUE(same_segment(a.snapshot(), tiny, medium));
  a.deallocate(medium);
  void* six = a.allocate(6 * MiB);
  EXPECT_EQ(a.stats().reserved_bytes.large.current, 20 * MiB);
  EXPECT_EQ(a.stats().num_chunk_maps, 2u);
  void* more = a.allocate(30 * MiB);  // 14 MiB free above `six`: one more chunk
  EXPECT_EQ(a.stats().reserved_bytes.large.current, 40 * MiB);
  EXPECT_EQ(a.stats().num_chunk_maps, 3u);
  EXPECT_EQ(reinterpret_cast<std::uintptr_t>(more),
            reinterpret_cast<std::uintptr_t>(six) + 6 * MiB);
  a.deallocate(six);  // [0, 6 MiB) free: no whole chunk in it
  a.empty_cache();
  EXPECT_EQ(a.stats().reserved_bytes.large.current, 40 * MiB);
  EXPECT_EQ(a.stats().num_chunk_unmaps, 0u);
  a.deallocate(more);  // [0, 40 MiB) free: both chunks go back
  a.empty_cache();
  EXPECT_EQ(a.stats().reserved_bytes.large.current, 0u);
  EXPECT_EQ(a.stats().num_chunk_unmaps, 2u);
  EXPECT_EQ(a.stats().reserved_bytes.small.current, chunk);
  a.deallocate(tiny);
  expect_consistent(a, *dev);
}

TEST(expandable, LargeChunkMustBeAMultipleOfTheGranularity) {
  auto dev = make_device(1 * GiB);
  try {
    allocator a(expandable_config("large_chunk:3MiB"), dev);
    FAIL() << "3 MiB chunks accepted on a 2 MiB granularity";
  } catch (const invalid_argument& e) {
    EXPECT_NE(std::string(e.what()).find("config key 'large_chunk'"), std::string::npos)
        << e.what();
  }
  allocator fixed(config::parse("backend:simulated,large_chunk:3MiB"), dev);  // (unused there)
  fixed.deallocate(fixed.allocate(MiB));
}

TEST(expandable, ReservedStaysWithinTwoPercentOfThePeakWhenShapesChange) {
  // Each round frees blocks of one size and asks for blocks of another: fixed segments keep
  // what no longer fits, expandable segments unmap it before growing past the active peak
  // (the release mark: always with release_policy:eager, else once memory is tight).
  auto dev = make_device(8 * GiB);
  allocator a(expandable_config("release_policy:eager"), dev);
  std::mt19937_64 rng(7);
  std::vector<void*> live;
  for (int round = 0; round < 20; ++round) {
    for (void* p : live) a.deallocate(p);
    live.clear();
    const std::size_t size = (3 + rng() % 40) * MiB + rng() % MiB;
    for (std::size_t total = 0; total + size <= 512 * MiB; total += size) {
      live.push_back(a.allocate(size));
    }
  }
  const memory_stats s = a.stats();
  EXPECT_LE(s.reserved_bytes.all.peak,
            s.active_bytes.all.peak + s.active_bytes.all.peak / 50 + 2 * chunk);
  EXPECT_GT(s.num_chunk_unmaps, 0u);
  for (void* p : live) a.deallocate(p);
  expect_consistent(a, *dev);
}

/// The adversarial pattern of issue 10, small: medium blocks each followed by a tiny or a
/// small long-lived one, all medium blocks freed, then larger requests; three cycles, the
/// oldest long-lived blocks ending each cycle.
struct op {
  bool allocate;
  std::size_t slot;
  std::size_t size;
};

std::vector<op> pinned_pattern(std::size_t fill, std::size_t* peak) {
  std::mt19937_64 rng(11);
  std::vector<op> ops;
  std::vector<std::size_t> sizes;
  std::vector<std::size_t> pinned;
  std::size_t live = 0;
  *peak = 0;
  const auto alloc = [&](std::size_t n) {
    ops.push_back({true, sizes.size(), n});
    sizes.push_back(n);
    live += n;
    *peak = std::max(*peak, live);
    return sizes.size() - 1;
  };
  const auto release = [&](std::size_t slot) {
    ops.push_back({false, slot, 0});
    live -= sizes[slot];
  };
  for (int cycle = 0; cycle < 3; ++cycle) {
    std::vector<std::size_t> medium;
    while (live < fill) {
      const bool small = rng() % 10 < 4;
      medium.push_back(alloc(small ? 64 * KiB + rng() % (960 * KiB) : MiB + rng() % (8 * MiB)));
      if (small && rng() % 10 < 8) pinned.push_back(alloc(256 + rng() % (16 * KiB)));
      if (!small && rng() % 10 < 3) pinned.push_back(alloc(MiB + rng() % MiB));
    }
    std::shuffle(medium.begin(), medium.end(), rng);
    for (std::size_t m : medium) release(m);
    std::vector<std::size_t> big;
    while (live < fill) big.push_back(alloc(16 * MiB + rng() % (48 * MiB)));
    for (std::size_t b : big) release(b);
    const std::size_t ending = pinned.size() / 3;
    for (std::size_t i = 0; i < ending; ++i) release(pinned[i]);
    pinned.erase(pinned.begin(), pinned.begin() + static_cast<std::ptrdiff_t>(ending));
  }
  for (std::size_t p : pinned) release(p);
  return ops;
}

std::size_t replay_ooms(const std::vector<op>& ops, const std::string& conf, std::size_t capacity) {
  auto dev = make_device(capacity);
  allocator a(config::parse("backend:simulated," + conf), dev);
  std::vector<void*> slots(ops.size(), nullptr);
  std::size_t ooms = 0;
  for (const op& o : ops) {
    if (o.allocate) {
      try {
        slots[o.slot] = a.allocate(o.size);
      } catch (const out_of_memory&) {
        ++ooms;
      }
    } else if (slots[o.slot] != nullptr) {
      a.deallocate(slots[o.slot]);
    }
  }
  expect_consistent(a, *dev);
  return ooms;
}

TEST(expandable, TheAdversarialPatternRunsAtOnePointTwoFiveItsPeak) {
  std::size_t peak = 0;
  const std::vector<op> ops = pinned_pattern(768 * MiB, &peak);
  const std::size_t capacity = (peak + peak / 4 + chunk - 1) / chunk * chunk;
  EXPECT_EQ(replay_ooms(ops, "expandable_segments:1", capacity), 0u);
  // Closer to the peak, fixed segments refuse requests where expandable ones do not: the
  // pattern does what it should.
  const std::size_t tight = (peak + peak / 20 + chunk - 1) / chunk * chunk;
  EXPECT_EQ(replay_ooms(ops, "expandable_segments:1", tight), 0u);
  EXPECT_GT(replay_ooms(ops, "expandable_segments:0", tight), 0u);
}

TEST(expandable, TrimUnmapsOnlyTheChunksItNeeds) {
  auto dev = make_device(1 * GiB);
  allocator a(expandable_config(), dev);
  a.deallocate(a.allocate(64 * MiB));
  EXPECT_EQ(a.trim(50 * MiB), 14 * MiB);
  EXPECT_EQ(a.stats().reserved_bytes.all.current, 50 * MiB);
  EXPECT_EQ(a.stats().num_chunk_unmaps, 7u);
  EXPECT_EQ(a.trim(49 * MiB), 2 * MiB);  // whole chunks only
  expect_consistent(a, *dev);
}

TEST(expandable, AFailedMapLeavesNothingMappedAndTheRetrySucceeds) {
  auto dev = make_device(1 * GiB);
  allocator a(expandable_config(), dev);
  void* keep = a.allocate(8 * MiB);
  const memory_stats before = a.stats();
  dev->fail_nth(sim_op::map_chunk, 3);  // the third chunk of the next growth
  void* p = a.allocate(10 * MiB);       // refused once, released and retried
  EXPECT_NE(p, nullptr);
  const memory_stats after = a.stats();
  EXPECT_EQ(after.num_alloc_retries, before.num_alloc_retries + 1);
  EXPECT_EQ(after.reserved_bytes.all.current, 18 * MiB);
  expect_consistent(a, *dev);
  dev->fail_always(sim_op::map_chunk, true);
  EXPECT_THROW(a.allocate(10 * MiB), out_of_memory);
  dev->fail_always(sim_op::map_chunk, false);
  EXPECT_EQ(a.stats().reserved_bytes.all.current, 18 * MiB);
  expect_consistent(a, *dev);
  a.deallocate(p);
  a.deallocate(keep);
}

TEST(expandable, AFailedUnmapRestoresTheStatsExactly) {
  auto dev = make_device(1 * GiB);
  allocator a(expandable_config(), dev);
  void* keep = a.allocate(2 * MiB);
  void* p = a.allocate(8 * MiB);
  a.deallocate(p);
  const memory_stats before = a.stats();
  dev->fail_nth(sim_op::unmap_chunk, 3);  // chunks 1 and 2 go, 3 and 4 stay
  EXPECT_THROW(a.empty_cache(), backend_error);
  const memory_stats after = a.stats();
  EXPECT_EQ(after.reserved_bytes.all.current, before.reserved_bytes.all.current - 4 * MiB);
  EXPECT_EQ(after.reserved_bytes.all.freed, before.reserved_bytes.all.freed + 4 * MiB);
  EXPECT_EQ(after.reserved_bytes.all.allocated, before.reserved_bytes.all.allocated);
  EXPECT_EQ(after.inactive_split_bytes.all.current,
            before.inactive_split_bytes.all.current - 4 * MiB);
  EXPECT_EQ(after.num_chunk_unmaps, 2u);
  expect_consistent(a, *dev);
  a.empty_cache();
  EXPECT_EQ(a.stats().reserved_bytes.all.current, 2 * MiB);
  expect_consistent(a, *dev);
  a.deallocate(keep);
}

TEST(expandable, AFailedSynchronizationBeforeUnmappingChangesNothing) {
  auto dev = make_device(1 * GiB);
  allocator a(expandable_config(), dev);
  a.deallocate(a.allocate(8 * MiB));
  const memory_stats before = a.stats();
  dev->fail_nth(sim_op::synchronize, 1);
  EXPECT_THROW(a.empty_cache(), backend_error);
  const memory_stats after = a.stats();
  EXPECT_EQ(after.reserved_bytes.all.current, before.reserved_bytes.all.current);
  EXPECT_EQ(after.reserved_bytes.all.freed, before.reserved_bytes.all.freed);
  EXPECT_EQ(after.num_chunk_unmaps, 0u);
  expect_consistent(a, *dev);
}

TEST(expandable, AFailedRangeReleaseKeepsTheEmptySegmentForTheNextPass) {
  auto dev = make_device(1 * GiB);
  allocator a(expandable_config(), dev);
  a.deallocate(a.allocate(8 * MiB));
  dev->fail_nth(sim_op::release_address_range, 1);
  EXPECT_THROW(a.empty_cache(), backend_error);
  memory_stats s = a.stats();
  EXPECT_EQ(s.reserved_bytes.all.current, 0u);
  EXPECT_EQ(s.segments.all.current, 1u);  // empty, still holding its range
  expect_consistent(a, *dev);
  a.empty_cache();
  s = a.stats();
  EXPECT_EQ(s.segments.all.current, 0u);
  EXPECT_EQ(dev->counters().live_ranges, 0u);
  expect_consistent(a, *dev);
}

TEST(expandable, SegmentCountsAgreeWhileARefusedFreshRangeGoesBack) {
  // A growth that reserves a new address range and then maps nothing (the memory limit refuses
  // it) returns the range at once. Inside that release, another thread's stats must count the
  // range's segment allocation and free together: num_segment_allocs - num_segment_frees ==
  // segments at every instant (issue 18: 2 allocs, 0 frees, 1 segment).
  auto dev = make_device(1 * GiB);
  auto hooked = std::make_shared<hooked_backend>(dev);
  allocator a(expandable_config("memory_limit:64MiB,gc_threshold:0"), hooked);
  void* p = a.allocate(40 * MiB, stream_n(1));  // stream 1's segment
  int seen = 0;
  hooked->on_release_range = [&](void*, std::size_t) {
    const memory_stats s = a.stats();
    EXPECT_EQ(s.num_segment_allocs, s.num_segment_frees + s.segments.all.current);
    EXPECT_EQ(s.segments.all.allocated, s.num_segment_allocs);
    EXPECT_EQ(s.segments.all.freed, s.num_segment_frees);
    expect_stats_match_snapshot(a, false);
    ++seen;
  };
  EXPECT_THROW(a.allocate(40 * MiB, stream_n(2)), out_of_memory);  // a fresh range for stream 2
  EXPECT_GE(seen, 1);
  hooked->on_release_range = nullptr;
  expect_consistent(a, *dev);
  // The device refuses to take such a range back: it stays as an empty segment, counted once,
  // until a release pass returns it.
  dev->fail_nth(sim_op::release_address_range, 1);
  EXPECT_THROW(a.allocate(40 * MiB, stream_n(3)), backend_error);
  EXPECT_EQ(a.stats().segments.all.current, 2u);
  expect_consistent(a, *dev);
  a.empty_cache();
  EXPECT_EQ(a.stats().segments.all.current, 1u);
  expect_consistent(a, *dev);
  a.deallocate(p);
  a.empty_cache();
  expect_consistent(a, *dev);
}

TEST(expandable, StatsAndSnapshotAgreeWhileChunksAreMappedOrUnmapped) {
  // Inside the device calls (no lock held), another thread's stats and snapshot must agree,
  // and must not count memory before it is mapped or after its unmapping began.
  auto dev = make_device(1 * GiB);
  auto hooked = std::make_shared<hooked_backend>(dev);
  allocator a(expandable_config(), hooked);
  int seen = 0;
  const auto check = [&](void*, std::size_t) {
    const memory_stats s = a.stats();
    expect_stats_match_snapshot(a, false);  // (the growth's room is taken, not yet mapped)
    EXPECT_LE(s.reserved_bytes.all.current, dev->counters().mapped_bytes);
    ++seen;
  };
  hooked->on_map_chunk = check;
  hooked->on_unmap_chunk = check;
  void* p = a.allocate(6 * MiB);
  a.deallocate(p);
  a.empty_cache();
  EXPECT_EQ(seen, 6);
}

TEST(expandable, AnotherThreadOfTheStreamMayTakeTheBlockAGrowthExtends) {
  // While a growth maps chunks to extend a free block, another thread of the same stream
  // takes that block: the growth must still hand out memory that is its own.
  auto dev = make_device(1 * GiB);
  auto hooked = std::make_shared<hooked_backend>(dev);
  allocator a(expandable_config(), hooked);
  void* first = a.allocate(3 * MiB);  // 1 MiB free after it, next to unmapped space
  void* taken = nullptr;
  hooked->on_map_chunk = [&](void*, std::size_t) {
    if (taken == nullptr) taken = a.allocate(1 * MiB + 512);  // takes the free 1 MiB block
  };
  void* grown = a.allocate(5 * MiB);
  hooked->on_map_chunk = nullptr;
  ASSERT_NE(taken, nullptr);
  const auto g = reinterpret_cast<std::uintptr_t>(grown);
  const auto t = reinterpret_cast<std::uintptr_t>(taken);
  EXPECT_TRUE(g + 5 * MiB <= t || t + 1 * MiB + 512 <= g) << "overlap";
  for (void* p : {first, taken, grown}) a.deallocate(p);
  expect_consistent(a, *dev);
}

TEST(expandable, AFreeNextToASpanBeingUnmappedIsCoalescedCorrectly) {
  auto dev = make_device(1 * GiB);
  auto hooked = std::make_shared<hooked_backend>(dev);
  allocator a(expandable_config(), hooked);
  void* p = a.allocate(3 * MiB);
  void* q = a.allocate(5 * MiB);
  void* r = a.allocate(3 * MiB);
  a.deallocate(q);
  bool freed = false;
  hooked->on_unmap_chunk = [&](void*, std::size_t) {
    if (!freed) {
      freed = true;
      a.deallocate(p);  // next to the partial chunk left of the span
      a.deallocate(r);
    }
  };
  a.empty_cache();
  EXPECT_TRUE(freed);
  expect_consistent(a, *dev);
  a.empty_cache();
  EXPECT_EQ(a.stats().reserved_bytes.all.current, 0u);
  expect_consistent(a, *dev);
}

TEST(expandable, AReleasePassSkipsABlockCoalescedAwayAfterItWasPicked) {
  // A release pass picks the free blocks of every stream first, then unmaps stream by stream.
  // While it synchronizes stream 1, a free on stream 2 merges the picked block into its lower
  // neighbour, whose node then covers it: the pass must not carve the stale node (found by the
  // stress program).
  auto dev = make_device(1 * GiB);
  auto hooked = std::make_shared<hooked_backend>(dev);
  allocator a(expandable_config(), hooked);
  void* other = a.allocate(8 * MiB, stream_n(1));
  void* low = a.allocate(3 * MiB, stream_n(2));
  void* picked = a.allocate(8 * MiB, stream_n(2));
  void* high = a.allocate(3 * MiB, stream_n(2));
  a.deallocate(other);
  a.deallocate(picked);
  bool freed = false;
  hooked->on_record_event = [&](event_t, stream_t s) {
    if (s == stream_n(1) && !freed) {
      freed = true;
      a.deallocate(low, stream_n(2));  // absorbs the picked block
    }
  };
  a.empty_cache();
  ASSERT_TRUE(freed);
  hooked->on_record_event = nullptr;
  expect_consistent(a, *dev);
  a.empty_cache();  // the merged block's chunks go now
  expect_consistent(a, *dev);
  a.deallocate(high, stream_n(2));
  a.empty_cache();
  EXPECT_EQ(a.stats().reserved_bytes.all.current, 0u);
  expect_consistent(a, *dev);
}

TEST(expandable, NoMapOrUnmapForAStreamBeingCaptured) {
  auto dev = make_device(1 * GiB);
  auto hooked = std::make_shared<hooked_backend>(dev);
  allocator a(expandable_config(), hooked);
  void* p = a.allocate(8 * MiB, stream_n(1));
  void* q = a.allocate(8 * MiB, stream_n(2));
  a.deallocate(p);
  a.deallocate(q);
  hooked->capturing = [](stream_t s) { return s == stream_n(1); };
  const std::uint64_t maps = dev->counters().chunk_maps;
  EXPECT_THROW(a.allocate(32 * MiB, stream_n(1)), not_supported);
  void* hit = a.allocate(8 * MiB, stream_n(1));  // the cache serves a captured stream
  a.deallocate(hit);
  EXPECT_EQ(dev->counters().chunk_maps, maps);
  // The failed miss made the capture known process-wide: while it lasts nothing is unmapped, on
  // any stream (an unmap is one of the calls a capture forbids).
  a.empty_cache();
  EXPECT_EQ(a.stats().reserved_bytes.all.current, 16 * MiB);
  hooked->capturing = nullptr;
  a.empty_cache();
  EXPECT_EQ(a.stats().reserved_bytes.all.current, 0u);
  expect_consistent(a, *dev);
}

TEST(expandable, CheckedModePoisonsNewlyMappedChunks) {
  auto dev = make_device(256 * MiB, true);
  allocator a(expandable_config("debug:1"), dev);
  auto* p = static_cast<unsigned char*>(a.allocate(5 * MiB));
  std::memset(p, 1, 5 * MiB);
  a.deallocate(p);
  a.empty_cache();  // unmaps; the next growth maps zero-filled chunks, poisoned before use
  auto* q = static_cast<unsigned char*>(a.allocate(5 * MiB));
  EXPECT_EQ(a.stats().num_use_after_free_writes, 0u);
  a.deallocate(q);
  q[100] = 7;  // a write after free is still caught
  a.deallocate(a.allocate(5 * MiB));
  EXPECT_EQ(a.stats().num_use_after_free_writes, 1u);
  expect_consistent(a, *dev);
}

TEST(expandable, PassThroughModeIgnoresIt) {
  auto dev = make_device(1 * GiB);
  allocator a(expandable_config("caching:0"), dev);
  void* p = a.allocate(3 * MiB);
  void* q = a.allocate(4 * KiB);
  EXPECT_EQ(dev->counters().live_segments, 2u);
  EXPECT_EQ(dev->counters().chunk_maps, 0u);
  a.deallocate(p);
  a.deallocate(q);
  EXPECT_EQ(dev->counters().live_segments, 0u);
  expect_consistent(a, *dev);
}

TEST(expandable, WithoutAddressSpaceFixedSegmentsServe) {
  sim_options o;
  o.capacity = 1 * GiB;
  o.vm_address_space = 16 * MiB;  // room for a small range or two, then none
  auto dev = std::make_shared<simulated_device>(o);
  allocator a(expandable_config(), dev);
  void* p = a.allocate(3 * MiB);   // a range, as large as the address space allows
  void* q = a.allocate(64 * MiB);  // no range holds it: a fixed segment
  void* r = a.allocate(4 * KiB);
  const memory_snapshot snap = a.snapshot();
  EXPECT_TRUE(segment_of(snap, p)->expandable);
  EXPECT_FALSE(segment_of(snap, q)->expandable);
  EXPECT_EQ(segment_of(snap, q)->size, 64 * MiB);
  EXPECT_GE(dev->counters().failed_range_reserves, 1u);
  for (void* x : {p, q, r}) a.deallocate(x);
  expect_consistent(a, *dev);
  a.empty_cache();
  expect_consistent(a, *dev);
}

TEST(expandable, ABackendWithoutVirtualMemoryIsRefused) {
  sim_options o;
  o.virtual_memory = false;
  auto dev = std::make_shared<simulated_device>(o);
  try {
    allocator a(expandable_config(), dev);
    FAIL() << "started";
  } catch (const not_supported& e) {
    EXPECT_NE(std::string(e.what()).find("expandable_segments"), std::string::npos) << e.what();
  }
}

TEST(expandable, OutOfMemoryMessageNamesTheMappedBytes) {
  auto dev = make_device(64 * MiB);
  allocator a(expandable_config(), dev);
  void* keep = a.allocate(40 * MiB);
  try {
    a.allocate(40 * MiB);
    FAIL() << "allocated";
  } catch (const out_of_memory& e) {
    EXPECT_NE(std::string(e.what()).find("(40.00 MiB of it mapped in expandable segments)"),
              std::string::npos)
        << e.what();
  }
  // The device said how little it had left: no chunk was mapped only to be unmapped again,
  // and no empty segment stays behind.
  EXPECT_EQ(a.stats().num_chunk_maps, 20u);
  EXPECT_EQ(a.stats().num_chunk_unmaps, 0u);
  EXPECT_EQ(a.stats().segments.all.current, 1u);
  EXPECT_NE(a.memory_summary().find("chunk maps: 20, unmaps: 0"), std::string::npos)
      << a.memory_summary();
  a.deallocate(keep);
  expect_consistent(a, *dev);
}

}  // namespace
}  // namespace cachalot::testing
