// CUDA graph capture, simulated: a capture into a graph pool grows the pool (in relaxed mode),
// a block freed in the capture is reused by the capture but never by eager work, releasing the
// pool returns its memory, and a global-mode capture on one stream keeps every capture-unsafe
// call off every stream, from every thread (issue 9 item 7), whether the capture was declared
// (a graph-pool route) or only seen (the backend reported it). The simulated device refuses
// what a capture forbids and invalidates the capture then, so a valid end_capture() and zero
// capture_violations() are the proof.
#include <gtest/gtest.h>

#include <atomic>
#include <chrono>
#include <functional>
#include <future>
#include <memory>
#include <string>
#include <thread>

#include "cachalot/allocator.hpp"
#include "cachalot/simulated_device.hpp"
#include "support/hooked_backend.hpp"
#include "support/invariants.hpp"

namespace cachalot::testing {
namespace {

stream_t s(int i) {
  return reinterpret_cast<stream_t>(static_cast<std::uintptr_t>(0x9000 + i * 16));
}

struct rig {
  explicit rig(std::size_t capacity = GiB, const std::string& conf = "gc_threshold:0") {
    sim_options o;
    o.capacity = capacity;
    dev = std::make_shared<simulated_device>(o);
    alloc = std::make_unique<allocator>(config::parse(conf), dev);
  }
  pool_id graph_pool(const char* name = "graph") {
    pool_options o;
    o.name = name;
    o.type = pool_type::graph;
    return alloc->create_pool(o);
  }
  std::shared_ptr<simulated_device> dev;
  std::unique_ptr<allocator> alloc;
};

/// Runs `body` on another thread that captures `stream` in `mode` meanwhile (begun before
/// `body` runs, ended after it); returns whether the capture stayed valid.
bool while_another_thread_captures(simulated_device& dev, stream_t stream, capture_mode mode,
                                   const std::function<void()>& body) {
  std::promise<void> begun;
  std::promise<void> done;
  std::promise<bool> valid;
  std::thread capturer([&] {
    dev.begin_capture(stream, mode);
    begun.set_value();
    done.get_future().wait();
    valid.set_value(dev.end_capture(stream));
  });
  begun.get_future().wait();
  try {
    body();
  } catch (const std::exception& e) {  // e.g. the device refused a call: still end the capture
    ADD_FAILURE() << "a call failed during the other thread's capture: " << e.what();
  }
  done.set_value();
  capturer.join();
  return valid.get_future().get();
}

TEST(graph_capture, ColdCaptureGrowsTheGraphPoolAndStaysValid) {
  rig r;
  const pool_id g = r.graph_pool();
  r.alloc->begin_allocate_to_pool(g, s(1));
  r.dev->begin_capture(s(1));
  void* a = r.alloc->allocate(4 * KiB, s(1));  // cold: a new small segment, during the capture
  void* b = r.alloc->allocate(30 * MiB, s(1));
  EXPECT_EQ(r.alloc->pool_of(a), g);
  EXPECT_EQ(r.alloc->pool_of(b), g);
  r.alloc->deallocate(a);  // freed in the capture: the capture may reuse it (stream order)
  void* c = r.alloc->allocate(4 * KiB, s(1));
  EXPECT_EQ(c, a);
  EXPECT_TRUE(r.dev->end_capture(s(1)));
  r.alloc->end_allocate_to_pool(g);
  EXPECT_EQ(r.dev->capture_violations(), 0u);
  const memory_stats gs = r.alloc->stats(g);
  EXPECT_EQ(gs.segments.all.current, 2u);
  EXPECT_EQ(gs.num_segment_allocs, 2u);
  EXPECT_EQ(gs.reserved_bytes.all.current, 2 * MiB + 30 * MiB);
  EXPECT_EQ(r.alloc->stats(default_pool).segments.all.current, 0u);
  r.alloc->deallocate(c);
  r.alloc->deallocate(b);
  expect_stats_match_snapshot(*r.alloc);
  expect_device_matches(*r.alloc, *r.dev);
}

TEST(graph_capture, WithoutAGraphPoolACaptureMissFailsAndTheCaptureStaysValid) {
  rig r;
  r.dev->begin_capture(s(1));
  EXPECT_THROW((void)r.alloc->allocate(4 * KiB, s(1)), not_supported);
  EXPECT_TRUE(r.dev->end_capture(s(1)));
  EXPECT_EQ(r.dev->capture_violations(), 0u);
  EXPECT_EQ(r.dev->counters().segment_allocs, 0u);
  void* p = r.alloc->allocate(4 * KiB, s(1));  // after the capture: a plain miss
  r.alloc->deallocate(p);
}

TEST(graph_capture, ABlockFreedInTheCaptureIsNeverGivenToEagerWork) {
  rig r;
  const pool_id g = r.graph_pool();
  r.alloc->begin_allocate_to_pool(g, [](stream_t st) { return st == s(1); });
  r.dev->begin_capture(s(1));
  void* p = r.alloc->allocate(64 * KiB, s(1));
  r.alloc->deallocate(p);  // free again, inside the pool
  // Eager work meanwhile, on another stream and on the capturing stream's default-pool state.
  void* e1 = r.alloc->allocate(64 * KiB, s(2));
  EXPECT_EQ(r.alloc->pool_of(e1), default_pool);
  EXPECT_NE(e1, p);
  EXPECT_TRUE(r.dev->end_capture(s(1)));
  r.alloc->end_allocate_to_pool(g);
  void* e2 = r.alloc->allocate(64 * KiB, s(1));  // route ended: default pool, never p
  EXPECT_EQ(r.alloc->pool_of(e2), default_pool);
  EXPECT_NE(e2, p);
  // A second capture into the same pool (graphs sharing a pool) reuses the pool's block.
  r.alloc->begin_allocate_to_pool(g, s(1));
  r.dev->begin_capture(s(1));
  void* q = r.alloc->allocate(64 * KiB, s(1));
  EXPECT_EQ(q, p);
  EXPECT_TRUE(r.dev->end_capture(s(1)));
  r.alloc->end_allocate_to_pool(g);
  for (void* x : {e1, e2, q}) r.alloc->deallocate(x);
  EXPECT_EQ(r.dev->capture_violations(), 0u);
  expect_stats_match_snapshot(*r.alloc);
}

TEST(graph_capture, ReleaseReturnsThePoolsMemoryOnceItsBlocksAreFree) {
  rig r;
  const pool_id g = r.graph_pool();
  r.alloc->retain_pool(g);  // two graphs share the pool
  r.alloc->begin_allocate_to_pool(g, s(1));
  r.dev->begin_capture(s(1));
  void* out = r.alloc->allocate(30 * MiB, s(1));  // a graph output the user keeps
  void* tmp = r.alloc->allocate(MiB, s(1));
  r.alloc->deallocate(tmp);
  EXPECT_TRUE(r.dev->end_capture(s(1)));
  r.alloc->end_allocate_to_pool(g);
  r.alloc->empty_cache();  // a graph pool keeps its segments
  EXPECT_EQ(r.alloc->stats(g).segments.all.current, 2u);
  r.alloc->release_pool(g);  // the first graph is gone; the second still holds the pool
  EXPECT_EQ(r.alloc->stats(g).segments.all.current, 2u);
  r.alloc->release_pool(g);  // the last one: the free small segment goes at once
  EXPECT_EQ(r.alloc->stats(g).segments.all.current, 1u);
  EXPECT_EQ(r.dev->counters().live_segments, 1u);
  EXPECT_THROW((void)r.alloc->allocate(MiB, s(1), g), invalid_argument);
  EXPECT_THROW(r.alloc->begin_allocate_to_pool(g, s(1)), invalid_argument);
  r.alloc->deallocate(out);  // the output is freed: its segment goes at the next trim or miss
  EXPECT_EQ(r.alloc->trim(0), 30 * MiB);
  EXPECT_EQ(r.dev->counters().live_segments, 0u);
  const memory_stats gs = r.alloc->stats(g);  // the pool's history stays readable
  EXPECT_EQ(gs.reserved_bytes.all.current, 0u);
  EXPECT_EQ(gs.reserved_bytes.all.peak, 32 * MiB);
  EXPECT_EQ(gs.num_segment_allocs, 2u);
  EXPECT_EQ(gs.num_segment_frees, 2u);
  EXPECT_EQ(gs.num_allocs, 2u);
  EXPECT_TRUE(r.alloc->pools()[g].released);
  // The stream's state is reused by the next pool on that stream, which starts from zero.
  const pool_id h = r.graph_pool("next");
  r.alloc->begin_allocate_to_pool(h, s(1));
  void* n = r.alloc->allocate(MiB, s(1));
  EXPECT_EQ(r.alloc->stats(h).num_allocs, 1u);
  EXPECT_EQ(r.alloc->stats(g).num_allocs, 2u);
  r.alloc->deallocate(n);
  r.alloc->end_allocate_to_pool(h);
  expect_stats_match_snapshot(*r.alloc);
  expect_device_matches(*r.alloc, *r.dev);
}

TEST(graph_capture, GrowthOverThePoolLimitDuringACaptureFailsAndTheCaptureStaysValid) {
  rig r;
  pool_options o;
  o.name = "small graph";
  o.type = pool_type::graph;
  o.limit = 20 * MiB;
  const pool_id g = r.alloc->create_pool(o);
  r.alloc->begin_allocate_to_pool(g, s(1));
  r.dev->begin_capture(s(1));
  void* a = r.alloc->allocate(12 * MiB, s(1));  // a 12 MiB segment
  try {
    (void)r.alloc->allocate(12 * MiB, s(1));
    ADD_FAILURE() << "grew over the pool's limit";
  } catch (const out_of_memory& e) {
    EXPECT_EQ(e.info().pool, g);
    EXPECT_EQ(e.info().pool_limit, 20 * MiB);
    EXPECT_NE(std::string(e.what()).find("pool 'small graph'"), std::string::npos) << e.what();
  }
  EXPECT_TRUE(r.dev->end_capture(s(1)));
  EXPECT_EQ(r.dev->capture_violations(), 0u);
  r.alloc->end_allocate_to_pool(g);
  EXPECT_EQ(r.alloc->stats(g).num_ooms, 1u);
  r.alloc->deallocate(a);
}

// Issue 9 item 7: another thread's global-mode capture is never broken by cachalot's calls.
struct eager_setup {
  void* pending = nullptr;  // freed, waiting for held stream 3 (its event predates the capture)
  explicit eager_setup(rig& r) {
    pending = r.alloc->allocate(16 * MiB, s(2));  // a 20 MiB segment
    r.alloc->record_stream(pending, s(3));
    r.dev->hold_stream(s(3));
    r.alloc->deallocate(pending);
    void* y = r.alloc->allocate(12 * MiB, s(2));  // a second 20 MiB segment, cached
    r.alloc->deallocate(y);
  }
};

// Every call a capture could forbid, made by this thread while another thread captures.
void eager_calls(rig& r) {
  const sim_counters before = r.dev->counters();
  void* z = r.alloc->allocate(24 * MiB, s(2));  // a miss with a pending free: no event query
  r.alloc->process_events();
  r.alloc->empty_cache();  // nothing freed, nothing synchronized
  EXPECT_EQ(r.alloc->trim(0), 0u);
  r.alloc->deallocate(z, s(4));  // a free on another stream: its event waits for the capture
  const sim_counters after = r.dev->counters();
  EXPECT_EQ(after.event_queries, before.event_queries);
  EXPECT_EQ(after.event_syncs, before.event_syncs);
  EXPECT_EQ(after.event_records, before.event_records);
  EXPECT_EQ(after.segment_frees, before.segment_frees);
  EXPECT_EQ(after.device_syncs, before.device_syncs);
  EXPECT_EQ(after.segment_allocs, before.segment_allocs + 1);  // growth stays possible
}

// After the capture: what waited happens.
void after_capture(rig& r) {
  r.dev->release_stream(s(3));
  r.alloc->process_events();  // records the deferred event, then completes both frees
  EXPECT_EQ(r.alloc->stats().num_pending_blocks, 0u);
  r.alloc->empty_cache();
  EXPECT_EQ(r.dev->counters().live_segments, 0u);
  EXPECT_EQ(r.dev->capture_violations(), 0u);
  expect_stats_match_snapshot(*r.alloc);
  expect_device_matches(*r.alloc, *r.dev);
}

TEST(graph_capture, ADeclaredGlobalCaptureKeepsUnsafeCallsOffEveryStreamAndThread) {
  rig r(64 * MiB);
  eager_setup setup(r);
  const pool_id g = r.graph_pool();
  r.alloc->begin_allocate_to_pool(g, s(1));  // declares the capture before it begins
  const bool valid =
      while_another_thread_captures(*r.dev, s(1), capture_mode::global, [&] { eager_calls(r); });
  EXPECT_TRUE(valid) << "a call of this thread invalidated the other thread's capture";
  r.alloc->end_allocate_to_pool(g);
  after_capture(r);
}

TEST(graph_capture, AnObservedGlobalCaptureKeepsUnsafeCallsOffEveryStreamAndThread) {
  rig r(64 * MiB);
  eager_setup setup(r);
  // No route: the capture is seen when its thread misses on the capturing stream.
  const bool valid = while_another_thread_captures(*r.dev, s(1), capture_mode::global, [&] {
    std::thread([&] {
      EXPECT_THROW((void)r.alloc->allocate(4 * KiB, s(1)), not_supported);
    }).join();
    eager_calls(r);
  });
  EXPECT_TRUE(valid);
  after_capture(r);
}

TEST(graph_capture, EagerGrowthOnTheCapturingThreadKeepsItsOwnCaptureValid) {
  rig r;
  const pool_id g = r.graph_pool();
  r.alloc->begin_allocate_to_pool(g, s(1));
  r.dev->begin_capture(s(1));                       // this thread captures stream 1 in global mode
  void* eager = r.alloc->allocate(40 * MiB, s(2));  // and misses on stream 2 meanwhile
  EXPECT_EQ(r.alloc->pool_of(eager), default_pool);
  EXPECT_TRUE(r.dev->end_capture(s(1)));
  r.alloc->end_allocate_to_pool(g);
  EXPECT_EQ(r.dev->capture_violations(), 0u);
  r.alloc->deallocate(eager);
}

TEST(graph_capture, AFreeDuringACaptureOfABlockUsedOnAnotherStreamWaitsForTheEnd) {
  rig r;
  const pool_id g = r.graph_pool();
  r.alloc->begin_allocate_to_pool(g, [](stream_t st) { return st == s(1) || st == s(5); });
  r.dev->begin_capture(s(1));
  r.dev->begin_capture(s(5));  // a second stream joined the capture
  void* p = r.alloc->allocate(MiB, s(1));
  r.alloc->record_stream(p, s(5));
  r.alloc->deallocate(p);  // an event now would be captured: it waits
  EXPECT_EQ(r.dev->counters().event_records, 0u);
  EXPECT_EQ(r.alloc->stats(g).num_pending_blocks, 1u);
  void* q = r.alloc->allocate(MiB, s(1));
  EXPECT_NE(q, p) << "reused before the other stream's use completed";
  EXPECT_TRUE(r.dev->end_capture(s(5)));
  EXPECT_TRUE(r.dev->end_capture(s(1)));
  r.alloc->end_allocate_to_pool(g);
  r.alloc->process_events();
  EXPECT_EQ(r.dev->counters().event_records, 1u);
  EXPECT_EQ(r.alloc->stats(g).num_pending_blocks, 0u);
  EXPECT_EQ(r.alloc->allocate(MiB, s(1), g), p);  // back in the pool, for the pool only
  r.alloc->deallocate(p);
  r.alloc->deallocate(q);
  EXPECT_EQ(r.dev->capture_violations(), 0u);
  expect_stats_match_snapshot(*r.alloc);
}

TEST(graph_capture, ReleasingAPoolDuringACaptureFreesItsSegmentsAfterwards) {
  rig r;
  const pool_id g = r.graph_pool("old");
  void* p = r.alloc->allocate(MiB, s(2), g);
  r.alloc->deallocate(p);
  const pool_id h = r.graph_pool("capturing");
  r.alloc->begin_allocate_to_pool(h, s(1));
  r.dev->begin_capture(s(1));
  r.alloc->release_pool(g);  // cudaFree now would break the capture
  EXPECT_EQ(r.dev->counters().segment_frees, 0u);
  EXPECT_TRUE(r.dev->end_capture(s(1)));
  r.alloc->end_allocate_to_pool(h);
  r.alloc->empty_cache();
  EXPECT_EQ(r.dev->counters().segment_frees, 1u);
  EXPECT_EQ(r.dev->capture_violations(), 0u);
  expect_stats_match_snapshot(*r.alloc);
}

// The fence: a capture declared while an unsafe call is in flight waits for that call, so the
// capture that follows begin_allocate_to_pool can never overlap it.
TEST(graph_capture, DeclaringACaptureWaitsForUnsafeCallsInFlight) {
  sim_options o;
  o.capacity = GiB;
  auto dev = std::make_shared<simulated_device>(o);
  auto hooked = std::make_shared<hooked_backend>(dev);
  allocator a(config::parse("gc_threshold:0"), hooked);
  const pool_id g = [&] {
    pool_options po;
    po.type = pool_type::graph;
    return a.create_pool(po);
  }();
  std::atomic<bool> freed{false};
  std::atomic<bool> declared{false};
  std::thread declarer;
  hooked->on_free_segment = [&](void*, std::size_t) {
    declarer = std::thread([&] {
      a.begin_allocate_to_pool(g, s(1));
      declared = true;
      EXPECT_TRUE(freed.load()) << "the capture was declared while cudaFree was in flight";
    });
    std::this_thread::sleep_for(std::chrono::milliseconds(50));
    EXPECT_FALSE(declared.load());
  };
  hooked->after_free_segment = [&](void*, std::size_t) { freed = true; };
  a.deallocate(a.allocate(MiB, s(2)));
  a.empty_cache();
  declarer.join();
  EXPECT_TRUE(declared.load());
  hooked->on_free_segment = nullptr;
  a.end_allocate_to_pool(g);
}

}  // namespace
}  // namespace cachalot::testing
