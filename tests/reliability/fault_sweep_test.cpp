// Faults survived: a long randomized workload (mixed sizes on 3 streams, same- and cross-stream
// frees, record_stream while streams are held, empty_cache, trim; in the pools variant also a
// tenant pool with a limit and a reclaim callback, and simulated graph captures into a graph
// pool, during which no call may invalidate the capture) runs over a faulty_backend
// wrapping the simulated device, once for every N with the Nth call of one backend operation
// failing, with fixed segments and with expandable segments (whose growth and release call the
// virtual-memory operations: reserve and release a range, map and unmap a chunk). Each call must
// succeed or throw a cachalot::error (backend or out of memory) that leaves the allocator as it
// was; after every call every invariant of invariants.hpp holds; at the end, freeing everything and
// emptying the cache gives the device back every segment.
#include <gtest/gtest.h>

#include <array>
#include <cstdio>
#include <memory>
#include <random>
#include <unordered_map>
#include <vector>

#include "cachalot/cachalot.hpp"
#include "reliability/invariants.hpp"

namespace cachalot {
namespace {

constexpr int workload_steps = 800;
#if defined(__SANITIZE_ADDRESS__) || defined(__SANITIZE_THREAD__)
constexpr std::uint64_t points_per_op = 50;  // sanitized builds run 3-10x slower
constexpr std::uint64_t seeds[] = {1};
#else
constexpr std::uint64_t points_per_op = 150;
constexpr std::uint64_t seeds[] = {1, 11};
#endif
stream_t stream_n(std::uintptr_t n) {
  return reinterpret_cast<stream_t>(n);
}

/// What a rig runs: fixed segments in the default pool, expandable segments, or pools (a graph
/// pool captured now and then, and a tenant pool with a limit and a reclaim callback).
enum class rig_mode { plain, expandable, pools };

/// One allocator over faulty_backend(simulated_device), driven by a seeded random workload.
class rig {
 public:
  explicit rig(std::uint64_t seed, rig_mode mode = rig_mode::plain)
      : rng_(seed), pools_(mode == rig_mode::pools) {
    sim_options o;
    o.capacity = 1 * GiB;
    sim_ = std::make_shared<simulated_device>(o);
    faulty_ = std::make_shared<faulty_backend>(sim_);
    config cfg;
    cfg.expandable_segments = mode == rig_mode::expandable;
    a_ = std::make_unique<allocator>(cfg, faulty_);
    if (!pools_) return;
    pool_options g;
    g.name = "graph";
    g.type = pool_type::graph;
    graph_ = a_->create_pool(g);
    pool_options t;  // stream 2's allocations; gives way under pressure
    t.name = "batch";
    t.limit = 384 * MiB;
    t.priority = -1;
    t.reclaim = [this](pool_id pool, std::size_t) -> std::size_t {
      for (auto it = live_.begin(); it != live_.end(); ++it) {
        if (a_->pool_of(it->first) != pool) continue;
        const std::size_t n = it->second;
        a_->deallocate(it->first);
        live_.erase(it);
        return n;
      }
      return 0;
    };
    tenant_ = a_->create_pool(t);
    a_->begin_allocate_to_pool(tenant_, stream_n(2));
  }
  /// A capture left open would be seen by every allocator of the process: end it.
  ~rig() {
    if (capturing_ && a_) toggle_capture();
  }
  rig(const rig&) = delete;
  rig& operator=(const rig&) = delete;

  faulty_backend& faulty() { return *faulty_; }
  simulated_device& sim() { return *sim_; }
  allocator& alloc() { return *a_; }
  /// Calls that failed with a backend_error (the injected faults that reached the caller).
  std::uint64_t errors() const { return errors_; }

  /// Runs the workload; returns "" or the first broken invariant, with the step. Invariants
  /// are checked after every step, or (`from_fault`) once the fault has fired: until then a
  /// run repeats the fault-free baseline, which was checked.
  std::string run(int steps, bool from_fault = false) {
    for (int i = 0; i < steps; ++i) {
      std::string e = step();
      if (e.empty() && (!from_fault || faulty_->injected() != 0)) {
        e = testing::check_invariants(*a_, sim_.get(), live_);
      }
      if (!e.empty()) return "step " + std::to_string(i) + ": " + e;
    }
    return "";
  }

  /// Clears the faults, frees everything, empties the cache; "" if the device is left empty.
  std::string drain() {
    faulty_->clear();
    if (capturing_) toggle_capture();
    if (pools_ && !capture_error_.empty()) return capture_error_;
    if (pools_ && sim_->capture_violations() != 0) return "a call invalidated a capture";
    if (pools_) a_->release_pool(graph_);  // a graph pool keeps its segments until released
    for (auto& [p, n] : live_) a_->deallocate(p);
    live_.clear();
    for (std::uintptr_t s = 1; s <= 3; ++s) sim_->release_stream(stream_n(s));
    a_->empty_cache();
    std::string e = testing::check_invariants(*a_, sim_.get(), live_);
    if (!e.empty()) return e;
    if (a_->stats().reserved_bytes.all.current != 0) return "reserved bytes left after drain";
    if (sim_->counters().live_segments != 0) return "device segments left after drain";
    if (sim_->counters().live_chunks != 0) return "device chunks left after drain";
    if (sim_->counters().live_ranges != 0) return "device address ranges left after drain";
    a_.reset();
    if (sim_->counters().live_events != 0) return "device events left after destruction";
    return "";
  }

 private:
  std::uint64_t pick(std::uint64_t n) { return rng_() % n; }
  stream_t any_stream() { return stream_n(1 + pick(3)); }
  void* any_live() {
    auto it = live_.begin();
    std::advance(it, static_cast<long>(pick(live_.size())));
    return it->first;
  }
  std::size_t any_size() {
    const std::uint64_t c = pick(100);
    if (c < 70) return 1 + pick(1 * MiB);
    if (c < 95) return 1 * MiB + pick(9 * MiB);
    return 10 * MiB + pick(54 * MiB);
  }

  /// One operation; an error it throws must be a cachalot::error of an allowed kind.
  std::string step() {
    try {
      operate();
    } catch (const error& e) {
      if (e.code() == status::backend) ++errors_;
      if (e.code() != status::backend && e.code() != status::out_of_memory) {
        return std::string("unexpected error: ") + e.what();
      }
    }
    return "";
  }

  void operate() {
    const std::uint64_t op = pick(100);
    if (op < 45 || live_.empty()) return allocate();
    if (op < 70) return release(any_live());
    if (op < 78) return a_->record_stream(any_live(), any_stream());
    if (op < 84) return sim_->hold_stream(any_stream());
    if (op < 90) return sim_->release_stream(any_stream());
    if (op < 93) return a_->process_events();
    if (op < 96) return (void)a_->trim(pick(a_->stats().reserved_bytes.all.current + 1));
    if (op < 98) return a_->empty_cache();
    if (pools_ && op < 99) return toggle_capture();
    huge();
  }

 public:
  /// Ends a capture the workload left open.
  void end_capture() {
    if (capturing_) toggle_capture();
  }

 private:
  /// Begins or ends a global-mode capture of stream 1, routed to the graph pool.
  void toggle_capture() {
    if (!capturing_) {
      a_->begin_allocate_to_pool(graph_, stream_n(1));
      sim_->begin_capture(stream_n(1), capture_mode::global);
      capturing_ = true;
      return;
    }
    capturing_ = false;
    if (!sim_->end_capture(stream_n(1)) && capture_error_.empty()) {
      capture_error_ = "a call of the allocator invalidated the capture";
    }
    a_->end_allocate_to_pool(graph_);
  }

  /// A request that fits only once the cache is released (or not at all): the out-of-memory
  /// path, its release-and-retry, and the out-of-memory report.
  void huge() {
    void* p = a_->allocate(pick(2) == 0 ? 700 * MiB : 2 * GiB, any_stream());
    a_->deallocate(p);
  }

  void allocate() {
    std::size_t live_bytes = 0;
    for (auto& [p, n] : live_) live_bytes += n;
    if (live_bytes > 512 * MiB) return release(any_live());
    const std::size_t n = any_size();
    void* p = a_->allocate(n, any_stream());
    live_.emplace(p, n);
  }

  void release(void* p) {
    if (pick(4) == 0) {
      a_->deallocate(p, any_stream());
    } else {
      a_->deallocate(p);
    }
    live_.erase(p);  // only reached when the free succeeded
  }

  std::mt19937_64 rng_;
  std::shared_ptr<simulated_device> sim_;
  std::shared_ptr<faulty_backend> faulty_;
  std::unique_ptr<allocator> a_;
  std::unordered_map<void*, std::size_t> live_;
  std::uint64_t errors_ = 0;
  bool pools_ = false;
  pool_id graph_ = default_pool;
  pool_id tenant_ = default_pool;
  bool capturing_ = false;
  std::string capture_error_;
};

constexpr fault_op swept_ops[] = {fault_op::allocate_segment, fault_op::free_segment,
                                  fault_op::create_event,     fault_op::record_event,
                                  fault_op::query_event,      fault_op::synchronize,
                                  fault_op::memory_info};
/// With expandable segments: the operations they call.
constexpr fault_op vm_swept_ops[] = {fault_op::reserve_address_range,
                                     fault_op::release_address_range,
                                     fault_op::map_chunk,
                                     fault_op::unmap_chunk,
                                     fault_op::create_event,
                                     fault_op::record_event,
                                     fault_op::synchronize,
                                     fault_op::memory_info,
                                     fault_op::allocate_segment,
                                     fault_op::query_event};

/// The fault points to try for an operation called `calls` times: all of them up to
/// points_per_op, else points_per_op spread evenly (always including the first and the last).
std::vector<std::uint64_t> fault_points(std::uint64_t calls) {
  std::vector<std::uint64_t> points;
  const std::uint64_t n = std::min<std::uint64_t>(calls, points_per_op);
  for (std::uint64_t i = 0; i < n; ++i)
    points.push_back(1 + i * (calls - 1) / std::max<std::uint64_t>(n - 1, 1));
  return points;
}

struct sweep_totals {
  std::uint64_t points = 0;
  std::uint64_t errors = 0;
};

template <class Ops>
void sweep(std::uint64_t seed, fault_mode mode, const Ops& ops, sweep_totals& totals,
           rig_mode kind = rig_mode::plain) {
  rig baseline(seed, kind);
  std::uint64_t before[fault_op_count];  // calls made while constructing the allocator
  for (std::size_t op = 0; op < fault_op_count; ++op) {
    before[op] = baseline.faulty().calls(static_cast<fault_op>(op));
  }
  ASSERT_EQ(baseline.run(workload_steps), "");
  ASSERT_EQ(baseline.errors(), 0u) << "the workload must run without backend errors";
  baseline.end_capture();  // open, it would hold back every other allocator of the process
  for (fault_op op : ops) {
    const std::uint64_t calls = baseline.faulty().calls(op) - before[static_cast<std::size_t>(op)];
    std::printf("[ figures ] seed %llu: %s called %llu times\n",
                static_cast<unsigned long long>(seed), fault_op_name(op),
                static_cast<unsigned long long>(calls));
    for (std::uint64_t n : fault_points(calls)) {
      rig r(seed, kind);
      r.faulty().set_allocate_mode(mode);
      if (op == fault_op::map_chunk || op == fault_op::reserve_address_range) {
        r.faulty().set_mode(op, mode);
      }
      r.faulty().fail_nth(op, n);
      ASSERT_EQ(r.run(workload_steps, true), "") << fault_op_name(op) << " #" << n;
      ASSERT_EQ(r.faulty().injected(), 1u) << fault_op_name(op) << " #" << n;
      ASSERT_EQ(r.drain(), "") << fault_op_name(op) << " #" << n;
      ++totals.points;
      totals.errors += r.errors();
    }
  }
}

TEST(fault_sweep, EveryFailedCallLeavesTheAllocatorConsistent) {
  sweep_totals totals;
  for (std::uint64_t seed : seeds) sweep(seed, fault_mode::out_of_memory, swept_ops, totals);
  std::printf("[ figures ] fault points swept: %llu, backend errors reported to the caller: %llu\n",
              static_cast<unsigned long long>(totals.points),
              static_cast<unsigned long long>(totals.errors));
  EXPECT_GE(totals.points, std::size(seeds) * 2 * points_per_op);
  EXPECT_GT(totals.errors, 0u);
}

TEST(fault_sweep, ExpandableSegmentsEveryFailedCallLeavesTheAllocatorConsistent) {
  sweep_totals totals;
  sweep(21, fault_mode::out_of_memory, vm_swept_ops, totals, rig_mode::expandable);
  std::printf("[ figures ] expandable: fault points swept: %llu, backend errors: %llu\n",
              static_cast<unsigned long long>(totals.points),
              static_cast<unsigned long long>(totals.errors));
  EXPECT_GE(totals.points, 4 * points_per_op);
  EXPECT_GT(totals.errors, 0u);
}

TEST(fault_sweep, ExpandableSegmentsMapAndReserveThrowingInsteadOfRunningOut) {
  sweep_totals totals;
  sweep(22, fault_mode::error, std::array{fault_op::map_chunk, fault_op::reserve_address_range},
        totals, rig_mode::expandable);
  EXPECT_GT(totals.errors, 0u);
}

TEST(fault_sweep, ExpandableSegmentsAnOperationThatAlwaysFails) {
  for (fault_op op : vm_swept_ops) {
    if (op == fault_op::memory_info) continue;  // also fails the allocator's construction
    rig r(23, rig_mode::expandable);
    r.faulty().fail_always(op, true);
    ASSERT_EQ(r.run(workload_steps), "") << fault_op_name(op);
    ASSERT_EQ(r.drain(), "") << fault_op_name(op);
  }
}


TEST(fault_sweep, PoolsAndCapturesSurviveEveryFailedCall) {
  sweep_totals totals;
  sweep(seeds[0], fault_mode::out_of_memory, swept_ops, totals, rig_mode::pools);  // one seed: CI time
  std::printf("[ figures ] pools: fault points swept: %llu, backend errors reported: %llu\n",
              static_cast<unsigned long long>(totals.points),
              static_cast<unsigned long long>(totals.errors));
  EXPECT_GE(totals.points, points_per_op);  // seven operations, some called rarely
  EXPECT_GT(totals.errors, 0u);
}

TEST(fault_sweep, AllocateSegmentThrowingInsteadOfReturningNull) {
  sweep_totals totals;
  sweep(2, fault_mode::error, std::array{fault_op::allocate_segment}, totals);
  EXPECT_GT(totals.errors, 0u);
}

TEST(fault_sweep, AnOperationThatAlwaysFailsNeverBreaksTheInvariants) {
  for (fault_op op : swept_ops) {
    if (op == fault_op::memory_info) continue;  // also fails the allocator's construction
    rig r(3);
    r.faulty().fail_always(op, true);
    ASSERT_EQ(r.run(workload_steps), "") << fault_op_name(op);
    EXPECT_GT(r.faulty().injected(), 0u) << fault_op_name(op);
    ASSERT_EQ(r.drain(), "") << fault_op_name(op);
  }
}

TEST(fault_sweep, AFailedDeferredFreeLeavesTheBlockAllocated) {
  rig r(4);
  void* p = r.alloc().allocate(4096, stream_n(1));
  r.faulty().fail_nth(fault_op::record_event, 1);
  EXPECT_THROW(r.alloc().deallocate(p, stream_n(2)), backend_error);
  EXPECT_TRUE(r.alloc().owns(p));
  EXPECT_EQ(r.alloc().stats().allocated_bytes.all.current, 4096u);
  EXPECT_EQ(testing::check_invariants(r.alloc(), &r.sim(), {{p, 4096}}), "");
  r.alloc().deallocate(p, stream_n(2));
  EXPECT_FALSE(r.alloc().owns(p));
}

TEST(fault_sweep, AnAllocationThatFailsTwiceIsAnOutOfMemoryError) {
  rig r(5);
  r.faulty().fail_always(fault_op::allocate_segment, true);
  try {
    r.alloc().allocate(4096);
    FAIL() << "no error";
  } catch (const out_of_memory& e) {
    EXPECT_EQ(e.info().requested_bytes, 4096u);
    EXPECT_EQ(r.faulty().calls(fault_op::allocate_segment), 2u);  // tried, released, retried
  }
  EXPECT_EQ(r.alloc().stats().num_alloc_retries, 1u);
  EXPECT_EQ(r.alloc().stats().num_ooms, 1u);
}

TEST(fault_injection, FailsOnlyTheChosenCallAndForwardsTheRest) {
  auto sim = std::make_shared<simulated_device>();
  faulty_backend f(sim);
  f.fail_nth(fault_op::allocate_segment, 2);
  void* a = f.allocate_segment(4096, nullptr);
  EXPECT_NE(a, nullptr);
  EXPECT_EQ(f.allocate_segment(4096, nullptr), nullptr);
  void* b = f.allocate_segment(4096, nullptr);
  EXPECT_NE(b, nullptr);
  EXPECT_EQ(sim->counters().segment_allocs, 2u);
  EXPECT_EQ(f.calls(fault_op::allocate_segment), 3u);
  EXPECT_EQ(f.injected(), 1u);
  f.fail_nth(fault_op::free_segment, 1);
  EXPECT_THROW(f.free_segment(a, 4096), backend_error);
  EXPECT_EQ(sim->counters().live_segments, 2u);  // the failed free changed nothing
  f.free_segment(a, 4096);
  f.free_segment(b, 4096);
  f.set_allocate_mode(fault_mode::error);
  f.fail_always(fault_op::allocate_segment, true);
  EXPECT_THROW(f.allocate_segment(4096, nullptr), backend_error);
  f.clear();
  void* c = f.allocate_segment(4096, nullptr);
  f.free_segment(c, 4096);
  EXPECT_EQ(sim->counters().live_segments, 0u);
  EXPECT_EQ(f.name(), "simulated");
  EXPECT_THROW(faulty_backend(nullptr), invalid_argument);
}

}  // namespace
}  // namespace cachalot
