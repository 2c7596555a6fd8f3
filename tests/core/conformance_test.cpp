// The conformance suite: the allocator's contract, run against every backend and
// configuration of support/backends.hpp (the CUDA case only where a device exists). Each test
// ends by checking that the stats agree exactly with the snapshot.
#include <gtest/gtest.h>

#include <algorithm>
#include <cstdlib>
#include <cstring>
#include <random>
#include <vector>

#include "cachalot/buffer.hpp"
#include "support/backends.hpp"
#include "support/invariants.hpp"

namespace cachalot::testing {
namespace {

class conformance : public ::testing::TestWithParam<backend_case> {
 protected:
  void SetUp() override {
    cfg_ = config::parse(GetParam().conf);
    backend_ = GetParam().make(cfg_);
    alloc_ = std::make_unique<allocator>(cfg_, backend_);
    pool_ = route_to_case_pool(*alloc_, GetParam());
    streams_ = std::make_unique<stream_pool>(GetParam().fake_streams);
  }
  void TearDown() override {
    if (alloc_) expect_stats_match_snapshot(*alloc_);
    if (sim() != nullptr) expect_device_matches(*alloc_, *sim());
  }
  simulated_device* sim() const { return dynamic_cast<simulated_device*>(backend_.get()); }
  bool expandable() const { return cfg_.expandable_segments; }
  /// The blocks of a segment that have memory behind them (all of them, but the holes of an
  /// expandable segment).
  static std::vector<block_info> mapped_blocks(const segment_info& seg) {
    std::vector<block_info> out;
    for (const block_info& b : seg.blocks) {
      if (b.state != block_state::unmapped) out.push_back(b);
    }
    return out;
  }
  stream_t stream(int i) { return streams_->get(i); }
  allocator& a() { return *alloc_; }
  /// A graph pool keeps its segments until released.
  bool pinned() const { return GetParam().pool == "graph"; }
  /// Ends the routing to the case's pool and releases it (its free segments go at once).
  void release_case_pool() {
    if (pool_ == default_pool) return;
    a().end_allocate_to_pool(pool_);
    a().release_pool(pool_);
  }

  config cfg_;
  std::shared_ptr<device_backend> backend_;
  std::unique_ptr<allocator> alloc_;
  pool_id pool_ = default_pool;
  std::unique_ptr<stream_pool> streams_;
};

TEST_P(conformance, ZeroBytesGivesNullAndFreeingNullIsANoOp) {
  EXPECT_EQ(a().allocate(0), nullptr);
  a().deallocate(nullptr);
  a().deallocate(nullptr, stream(1));
  EXPECT_EQ(a().stats().num_allocs, 0u);
  EXPECT_EQ(a().stats().num_frees, 0u);
}

TEST_P(conformance, RoundsEveryRequestToTheGranularityAtPoolEdges) {
  struct edge {
    std::size_t bytes, rounded;
    pool_kind pool;
  };
  const edge edges[] = {{1, 512, pool_kind::small},
                        {511, 512, pool_kind::small},
                        {512, 512, pool_kind::small},
                        {513, 1024, pool_kind::small},
                        {MiB - 1, MiB, pool_kind::small},
                        {MiB, MiB, pool_kind::small},
                        {MiB + 1, MiB + 512, pool_kind::large}};
  for (const edge& e : edges) {
    const memory_stats before = a().stats();
    void* p = a().allocate(e.bytes);
    ASSERT_NE(p, nullptr);
    EXPECT_EQ(reinterpret_cast<std::uintptr_t>(p) % 256, 0u);
    EXPECT_EQ(a().allocation_size(p), e.rounded) << e.bytes;
    const memory_stats after = a().stats();
    EXPECT_EQ(after.allocated_bytes.of(e.pool).current - before.allocated_bytes.of(e.pool).current,
              e.rounded)
        << e.bytes;
    EXPECT_EQ(after.requested_bytes.all.current - before.requested_bytes.all.current, e.bytes);
    a().deallocate(p);
  }
}

TEST_P(conformance, SegmentSizesFollowTheSizeClasses) {
  struct klass {
    std::size_t bytes, segment;
  };
  const klass classes[] = {{512, 2 * MiB},
                           {MiB, 2 * MiB},
                           {MiB + 1, 20 * MiB},
                           {10 * MiB - 512, 20 * MiB},
                           {10 * MiB - 1, 10 * MiB},  // rounds up to 10 MiB
                           {10 * MiB, 10 * MiB},
                           {10 * MiB + 1, 12 * MiB},
                           {100 * MiB + 7, 102 * MiB}};
  for (const klass& k : classes) {
    allocator fresh(cfg_, GetParam().make(cfg_));
    const pool_id pool = route_to_case_pool(fresh, GetParam());
    void* p = fresh.allocate(k.bytes, stream(1));
    EXPECT_EQ(fresh.pool_of(p), pool);
    // Expandable segments map only the chunks (2 MiB) the request needs.
    const std::size_t want =
        expandable() ? (k.bytes + 2 * MiB - 1) / (2 * MiB) * (2 * MiB) : k.segment;
    EXPECT_EQ(fresh.stats().reserved_bytes.all.current, want) << k.bytes;
    EXPECT_EQ(fresh.stats().num_segment_allocs, 1u);
    fresh.deallocate(p);
    expect_stats_match_snapshot(fresh);
  }
}

TEST_P(conformance, SplitsAndCoalescesBackIntoOneBlock) {
  void* x = a().allocate(4 * KiB);
  void* y = a().allocate(4 * KiB);
  void* z = a().allocate(4 * KiB);
  const auto bx = reinterpret_cast<std::uintptr_t>(x);
  EXPECT_EQ(reinterpret_cast<std::uintptr_t>(y), bx + 4 * KiB);
  EXPECT_EQ(reinterpret_cast<std::uintptr_t>(z), bx + 8 * KiB);
  memory_snapshot snap = a().snapshot();
  ASSERT_EQ(snap.segments.size(), 1u);
  std::vector<block_info> blocks = mapped_blocks(snap.segments[0]);
  ASSERT_EQ(blocks.size(), 4u);
  EXPECT_EQ(blocks[3].size, 2 * MiB - 12 * KiB);
  EXPECT_EQ(blocks[3].state, block_state::free);

  a().deallocate(y);  // a hole between two live blocks
  EXPECT_EQ(a().stats().inactive_split_bytes.all.current, 2 * MiB - 8 * KiB);
  a().deallocate(x);  // merges with the hole
  snap = a().snapshot();
  blocks = mapped_blocks(snap.segments[0]);
  ASSERT_EQ(blocks.size(), 3u);
  EXPECT_EQ(blocks[0].size, 8 * KiB);
  a().deallocate(z);  // merges both sides: one whole free block
  snap = a().snapshot();
  blocks = mapped_blocks(snap.segments[0]);
  ASSERT_EQ(blocks.size(), 1u);
  EXPECT_EQ(blocks[0].size, 2 * MiB);
  EXPECT_EQ(a().stats().inactive_split_bytes.all.current, 0u);
  EXPECT_EQ(a().stats().largest_free_block, 2 * MiB);
}

TEST_P(conformance, ReusesAFreedBlockWithoutTouchingTheDevice) {
  void* p = a().allocate(3000, stream(1));
  a().deallocate(p);
  const memory_stats before = a().stats();
  sim_counters c0;
  if (sim() != nullptr) c0 = sim()->counters();
  for (int i = 0; i < 1000; ++i) {
    void* q = a().allocate(3000, stream(1));
    EXPECT_EQ(q, p);
    a().deallocate(q);
  }
  EXPECT_EQ(a().stats().num_segment_allocs, before.num_segment_allocs);
  if (sim() != nullptr) {
    const sim_counters c1 = sim()->counters();
    EXPECT_EQ(c1.segment_allocs, c0.segment_allocs);
    EXPECT_EQ(c1.chunk_maps, c0.chunk_maps);
    EXPECT_EQ(c1.chunk_unmaps, c0.chunk_unmaps);
    EXPECT_EQ(c1.event_records, c0.event_records);
    EXPECT_EQ(c1.event_queries, c0.event_queries);
    EXPECT_EQ(c1.memory_info_calls, c0.memory_info_calls);
  }
}

TEST_P(conformance, LiveBlocksNeverOverlap) {
  std::mt19937_64 rng(42);
  std::uniform_int_distribution<int> pick(0, 3);
  std::vector<std::pair<std::uintptr_t, std::size_t>> live;
  for (int i = 0; i < 300; ++i) {
    const std::size_t sizes[] = {1 + rng() % 4096, 1 + rng() % MiB, MiB + rng() % (8 * MiB),
                                 1 + rng() % (64 * KiB)};
    const std::size_t n = sizes[pick(rng)];
    void* p = a().allocate(n, stream(1 + static_cast<int>(rng() % 2)));
    live.emplace_back(reinterpret_cast<std::uintptr_t>(p), n);
    if (GetParam().host_backed) std::memset(p, i & 0xff, n);
    if (i % 3 == 2) {
      const std::size_t k = rng() % live.size();
      if (GetParam().host_backed) {
        const auto* bytes = reinterpret_cast<const unsigned char*>(live[k].first);
        const unsigned char want = bytes[0];
        for (std::size_t j = 0; j < live[k].second; j += 97) ASSERT_EQ(bytes[j], want);
      }
      a().deallocate(reinterpret_cast<void*>(live[k].first));
      live.erase(live.begin() + static_cast<std::ptrdiff_t>(k));
    }
  }
  std::sort(live.begin(), live.end());
  for (std::size_t i = 1; i < live.size(); ++i) {
    EXPECT_LE(live[i - 1].first + live[i - 1].second, live[i].first) << "overlap";
  }
  for (auto& [p, n] : live) a().deallocate(reinterpret_cast<void*>(p));
  EXPECT_EQ(a().stats().allocated_bytes.all.current, 0u);
}

TEST_P(conformance, StreamsNeverShareBlocks) {
  void* p = a().allocate(8 * KiB, stream(1));
  a().deallocate(p);
  void* q = a().allocate(8 * KiB, stream(2));
  EXPECT_NE(q, p);
  const memory_snapshot snap = a().snapshot();
  ASSERT_EQ(snap.segments.size(), 2u);
  EXPECT_NE(snap.segments[0].stream, snap.segments[1].stream);
  void* r = a().allocate(8 * KiB, stream(1));
  EXPECT_EQ(r, p);
  a().deallocate(q);
  a().deallocate(r);
}

TEST_P(conformance, RecordedStreamDefersReuseUntilItsWorkCompletes) {
  if (sim() == nullptr) GTEST_SKIP() << "needs a simulated device to hold a stream back";
  void* p = a().allocate(64 * KiB, stream(1));
  a().record_stream(p, stream(2));
  sim()->hold_stream(stream(2));  // a kernel still running on stream 2
  a().deallocate(p);
  EXPECT_EQ(a().stats().num_pending_blocks, 1u);
  EXPECT_EQ(a().stats().active_bytes.all.current, 64 * KiB);
  EXPECT_EQ(a().stats().allocated_bytes.all.current, 0u);
  a().process_events();
  void* q = a().allocate(64 * KiB, stream(1));
  EXPECT_NE(q, p) << "reused while stream 2 still runs";
  sim()->release_stream(stream(2));
  a().process_events();
  EXPECT_EQ(a().stats().num_pending_blocks, 0u);
  void* r = a().allocate(64 * KiB, stream(1));
  EXPECT_EQ(r, p);
  a().deallocate(q);
  a().deallocate(r);
}

TEST_P(conformance, FreeOnAnotherStreamDefersReuse) {
  if (sim() == nullptr) GTEST_SKIP() << "needs a simulated device to hold a stream back";
  void* p = a().allocate(4 * KiB, stream(1));
  sim()->hold_stream(stream(3));
  a().deallocate(p, stream(3));
  EXPECT_EQ(a().stats().num_deferred_frees, 1u);
  void* q = a().allocate(4 * KiB, stream(1));
  EXPECT_NE(q, p);
  sim()->release_stream(stream(3));
  a().process_events();
  void* r = a().allocate(4 * KiB, stream(1));
  EXPECT_EQ(r, p);
  a().deallocate(q);
  a().deallocate(r, stream(1));  // its own stream: immediate
  EXPECT_EQ(a().stats().num_deferred_frees, 1u);
}

TEST_P(conformance, OneUnfinishedEventNeverBlocksOthers) {
  if (sim() == nullptr) GTEST_SKIP() << "needs a simulated device to hold a stream back";
  void* slow = a().allocate(4 * KiB, stream(1));
  void* fast = a().allocate(8 * KiB, stream(1));
  a().record_stream(slow, stream(2));
  a().record_stream(fast, stream(3));
  sim()->hold_stream(stream(2));
  a().deallocate(slow);  // pending first, and stays pending
  a().deallocate(fast);
  a().process_events();
  EXPECT_EQ(a().stats().num_pending_blocks, 1u);
  EXPECT_EQ(a().allocate(8 * KiB, stream(1)), fast);
  sim()->release_stream(stream(2));
  a().process_events();
  EXPECT_EQ(a().stats().num_pending_blocks, 0u);
  a().deallocate(fast);
}

TEST_P(conformance, EventsArePooled) {
  if (sim() == nullptr) GTEST_SKIP() << "counts backend calls on the simulated device";
  for (int i = 0; i < 200; ++i) {
    void* p = a().allocate(1000, stream(1));
    a().record_stream(p, stream(2));
    a().record_stream(p, stream(2));  // recorded once per stream
    a().deallocate(p);
    a().process_events();
  }
  const sim_counters c = sim()->counters();
  EXPECT_EQ(c.event_creates, 1u);
  EXPECT_EQ(c.event_records, 200u);
}

TEST_P(conformance, RecordStreamOnItsOwnStreamChangesNothing) {
  void* p = a().allocate(4 * KiB, stream(1));
  a().record_stream(p, stream(1));
  a().deallocate(p);
  EXPECT_EQ(a().stats().num_deferred_frees, 0u);
  EXPECT_EQ(a().allocate(4 * KiB, stream(1)), p);
  a().deallocate(p);
}

TEST_P(conformance, InvalidPointersAreRejectedAndChangeNothing) {
  void* p = a().allocate(4 * KiB);
  void* q = a().allocate(4 * KiB);
  a().deallocate(q);
  const memory_stats before = a().stats();
  int foreign = 0;
  EXPECT_THROW(a().deallocate(&foreign), invalid_pointer);
  EXPECT_THROW(a().deallocate(static_cast<char*>(p) + 512), invalid_pointer);
  EXPECT_THROW(a().deallocate(q), invalid_pointer);  // double free
  EXPECT_THROW(a().record_stream(q, stream(1)), invalid_pointer);
  EXPECT_THROW((void)a().allocation_size(q), invalid_pointer);
  try {
    a().deallocate(static_cast<char*>(p) + 512);
  } catch (const invalid_pointer& e) {
    EXPECT_NE(std::string(e.what()).find("interior"), std::string::npos) << e.what();
    EXPECT_EQ(e.code(), status::invalid_pointer);
  }
  try {
    a().deallocate(q);
  } catch (const invalid_pointer& e) {
    EXPECT_NE(std::string(e.what()).find("not a live allocation"), std::string::npos) << e.what();
  }
  const memory_stats after = a().stats();
  EXPECT_EQ(after.allocated_bytes.all.current, before.allocated_bytes.all.current);
  EXPECT_EQ(after.num_frees, before.num_frees);
  EXPECT_TRUE(a().owns(p));
  a().deallocate(p);
}

TEST_P(conformance, ImpossibleSizesFailWithoutChangingState) {
  void* keep = a().allocate(4 * KiB);
  const memory_stats before = a().stats();
  for (std::size_t n : {SIZE_MAX, SIZE_MAX - 4096, std::size_t{1} << 50}) {
    try {
      (void)a().allocate(n, stream(1));
      ADD_FAILURE() << "allocated " << n;
    } catch (const out_of_memory& e) {
      EXPECT_EQ(e.info().requested_bytes, n);
      EXPECT_NE(std::string(e.what()).find("out of memory"), std::string::npos);
    }
  }
  const memory_stats after = a().stats();
  EXPECT_EQ(after.num_ooms, before.num_ooms + 3);
  EXPECT_EQ(after.reserved_bytes.all.current, before.reserved_bytes.all.current);
  EXPECT_EQ(after.allocated_bytes.all.current, before.allocated_bytes.all.current);
  EXPECT_EQ(after.requested_bytes.all.current, before.requested_bytes.all.current);
  EXPECT_EQ(after.num_segment_frees, before.num_segment_frees) << "flushed the cache for nothing";
  void* p = a().allocate(4 * KiB);  // still works
  EXPECT_NE(p, nullptr);
  a().deallocate(p);
  a().deallocate(keep);
}

TEST_P(conformance, EmptyCacheReleasesEveryUnusedSegment) {
  void* live = a().allocate(4 * KiB, stream(1));
  std::vector<void*> ps;
  for (std::size_t n : {4 * KiB, 3 * MiB, 12 * MiB, 40 * MiB})
    ps.push_back(a().allocate(n, stream(2)));
  for (void* p : ps) a().deallocate(p);
  // Fixed: one segment per request; expandable: one per stream and pool.
  EXPECT_EQ(a().stats().segments.all.current, expandable() ? 3u : 4u);
  a().empty_cache();
  if (pinned()) {  // a graph pool keeps every segment until it is released, which frees them
    EXPECT_EQ(a().stats().segments.all.current, 4u);
    release_case_pool();
  }
  const memory_stats s = a().stats();
  EXPECT_EQ(s.segments.all.current, 1u);
  EXPECT_EQ(s.reserved_bytes.all.current, 2 * MiB);
  EXPECT_EQ(s.num_cache_flushes, pinned() ? 2u : 1u);
  a().deallocate(live);
  a().empty_cache();
  EXPECT_EQ(a().stats().reserved_bytes.all.current, 0u);
}

TEST_P(conformance, TrimReleasesLargestFirstDownToTheTarget) {
  std::vector<void*> ps;
  for (std::size_t n : {12 * MiB, 40 * MiB, 4 * KiB, 14 * MiB}) ps.push_back(a().allocate(n));
  for (void* p : ps) a().deallocate(p);
  // Segments: 12, 40, 2, 14 MiB = 68 MiB (expandable: the same chunks, in two segments).
  EXPECT_EQ(a().stats().reserved_bytes.all.current, 68 * MiB);
  if (pinned()) {  // a graph pool keeps every segment until it is released, which frees them
    EXPECT_EQ(a().trim(0), 0u);
    EXPECT_EQ(a().stats().reserved_bytes.all.current, 68 * MiB);
    release_case_pool();
    EXPECT_EQ(a().stats().reserved_bytes.all.current, 0u);
    return;
  }
  if (expandable()) {  // chunks come off the largest free block, only as many as needed
    EXPECT_EQ(a().trim(30 * MiB), 38 * MiB);
    EXPECT_EQ(a().stats().reserved_bytes.all.current, 30 * MiB);
    EXPECT_EQ(a().trim(28 * MiB), 2 * MiB);
    EXPECT_EQ(a().trim(28 * MiB), 0u);
  } else {
    EXPECT_EQ(a().trim(30 * MiB), 40 * MiB);
    EXPECT_EQ(a().stats().reserved_bytes.all.current, 28 * MiB);
    EXPECT_EQ(a().trim(28 * MiB), 0u);
  }
  EXPECT_EQ(a().trim(0), 28 * MiB);
  EXPECT_EQ(a().stats().reserved_bytes.all.current, 0u);
}

TEST_P(conformance, BufferFreesOnScopeExitAndMoves) {
  {
    buffer b1(a(), 10000, stream(1));
    EXPECT_TRUE(b1);
    EXPECT_EQ(a().stats().allocations.all.current, 1u);
    buffer b2 = std::move(b1);
    EXPECT_FALSE(b1);
    EXPECT_EQ(b2.size(), 10000u);
    buffer b3(a(), 100, stream(1));
    b3 = std::move(b2);
    EXPECT_EQ(a().stats().allocations.all.current, 1u);
  }
  EXPECT_EQ(a().stats().allocations.all.current, 0u);
  buffer b4(a(), 64);
  void* raw = b4.release();
  EXPECT_TRUE(a().owns(raw));
  a().deallocate(raw);
}

TEST_P(conformance, PeaksTrackAndReset) {
  void* p = a().allocate(MiB);
  void* q = a().allocate(MiB / 2);
  a().deallocate(p);
  memory_stats s = a().stats();
  EXPECT_EQ(s.allocated_bytes.all.peak, MiB + MiB / 2);
  EXPECT_EQ(s.allocated_bytes.all.current, MiB / 2);
  EXPECT_EQ(s.allocated_bytes.all.allocated, MiB + MiB / 2);
  EXPECT_EQ(s.allocated_bytes.all.freed, MiB);
  a().reset_peak_stats();
  s = a().stats();
  EXPECT_EQ(s.allocated_bytes.all.peak, MiB / 2);
  EXPECT_EQ(s.reserved_bytes.all.peak, s.reserved_bytes.all.current);
  a().deallocate(q);
}

TEST_P(conformance, SummaryNamesEveryQuantity) {
  void* p = a().allocate(5 * MiB);
  const std::string text = a().memory_summary();
  for (const char* word : {"Allocated memory", "Active memory", "Requested memory",
                           "Reserved memory", "Non-releasable memory", "Allocations", "Segments",
                           "largest free block", "from large pool", "5.00 MiB"}) {
    EXPECT_NE(text.find(word), std::string::npos) << word << "\n" << text;
  }
  a().deallocate(p);
}

std::string case_name(const ::testing::TestParamInfo<backend_case>& info) {
  return info.param.name;
}

INSTANTIATE_TEST_SUITE_P(backends, conformance, ::testing::ValuesIn(conformance_cases()),
                         case_name);

TEST(conformance_cuda, RunsWhereADeviceExists) {
  const char* fake = std::getenv("CACHALOT_TEST_FAKE_CUDA");
  if (fake != nullptr && *fake != '\0') {  // the run on the fake driver must have its case
    ASSERT_GT(cuda_device_count(), 0) << cuda_unavailable_reason();
    return;
  }
  if (cuda_device_count() == 0) {
    GTEST_SKIP() << "no CUDA device (or no driver): the conformance suite ran on the simulated "
                    "device only";
  }
  if (!runtime_sees_a_device()) {
    GTEST_SKIP() << "cachalot's driver sees a device but the CUDA runtime, which makes the "
                    "case's streams, sees none: the conformance suite ran on the simulated "
                    "device only";
  }
  SUCCEED();
}

}  // namespace
}  // namespace cachalot::testing
