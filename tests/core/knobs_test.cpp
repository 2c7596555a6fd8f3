// The engine's optional knobs: roundup_power2_divisions (PyTorch's rounding of request sizes),
// reserve (one device allocation at start that segments are carved from), max_cached (a cap on
// idle cached segments) and the out-of-memory callback, each checked by exact sizes, device
// calls and stats that agree with the snapshot.
#include <gtest/gtest.h>

#include <unistd.h>
#include <filesystem>
#include <fstream>
#include <memory>
#include <stdexcept>
#include <string>
#include <unordered_map>
#include <vector>

#include "cachalot/allocator.hpp"
#include "cachalot/config.hpp"
#include "cachalot/errors.hpp"
#include "cachalot/simulated_device.hpp"
#include "reliability/invariants.hpp"

namespace cachalot {
namespace {

struct fixture {
  explicit fixture(const std::string& conf, std::size_t capacity = GiB) {
    sim_options o;
    o.capacity = capacity;
    sim = std::make_shared<simulated_device>(o);
    alloc = std::make_unique<allocator>(config::parse("backend:simulated," + conf), sim);
  }
  void* take(std::size_t n, stream_t s = nullptr) {
    void* p = alloc->allocate(n, s);
    live[p] = n;
    return p;
  }
  void give(void* p, stream_t s = nullptr) {
    alloc->deallocate(p, s);
    live.erase(p);
  }
  std::string invariants(bool device = true) {
    return testing::check_invariants(*alloc, device ? sim.get() : nullptr, live);
  }
  std::shared_ptr<simulated_device> sim;
  std::unique_ptr<allocator> alloc;
  std::unordered_map<void*, std::size_t> live;
};

// --- roundup_power2_divisions ----------------------------------------------------------------

TEST(RoundupPower2Divisions, RequestsAreRoundedAsPyTorchRoundsThem) {
  fixture f("roundup_power2_divisions:4");
  for (std::size_t n : {std::size_t{1}, std::size_t{1200}, std::size_t{5000}, 300 * KiB + 1,
                        3 * MiB + 1, 11 * MiB + 1, 100 * MiB + 7}) {
    void* p = f.take(n);
    EXPECT_EQ(f.alloc->allocation_size(p), round_request(n, 512, 4)) << n;
    EXPECT_EQ(f.invariants(), "");
  }
  EXPECT_EQ(f.alloc->allocation_size(f.take(11 * MiB + 1)), 12 * MiB);
  EXPECT_EQ(f.alloc->allocation_size(f.take(300 * KiB + 1)), 320 * KiB);
  EXPECT_EQ(f.alloc->stats().requested_bytes.all.current, [&] {
    std::size_t sum = 0;
    for (const auto& [p, n] : f.live) sum += n;
    return sum;
  }());
}

TEST(RoundupPower2Divisions, PerRangeFormAndOffByDefault) {
  fixture off("large_split_min:0");  // blocks split to their exact rounded size
  EXPECT_EQ(off.alloc->allocation_size(off.take(11 * MiB + 1)), 11 * MiB + 512);
  // 2 divisions below 4 MiB, none in [4, 8) MiB, 8 from 8 MiB (">" after the 2 MiB entry
  // covers [4, 8) too: here the [4:0] entry keeps it off).
  fixture f("roundup_power2_divisions:[2:2,4:0,>:8],large_split_min:0");
  EXPECT_EQ(f.alloc->allocation_size(f.take(3 * MiB + 1)), 4 * MiB);
  EXPECT_EQ(f.alloc->allocation_size(f.take(5 * MiB + 1)), 5 * MiB + 512);
  EXPECT_EQ(f.alloc->allocation_size(f.take(9 * MiB + 1)), 10 * MiB);
  EXPECT_EQ(f.invariants(), "");
}

TEST(RoundupPower2Divisions, ImpossibleSizesStillFailCleanly) {
  fixture f("roundup_power2_divisions:4");
  for (std::size_t n : {SIZE_MAX, SIZE_MAX / 2 + 12345, SIZE_MAX / 4 * 3, 2 * GiB}) {
    EXPECT_THROW(f.alloc->allocate(n), out_of_memory) << n;
  }
  EXPECT_EQ(f.invariants(), "");
}

TEST(RoundupPower2Divisions, VaryingSizesReuseOneBlock) {
  // Sizes between 16 and 20 MiB all round to 20 MiB with 4 divisions: after the first, every
  // allocation reuses the cached block instead of a new segment.
  fixture f("roundup_power2_divisions:4,large_split_min:0");
  for (std::size_t n = 16 * MiB + 1; n < 20 * MiB; n += 300 * KiB) f.give(f.take(n));
  EXPECT_EQ(f.alloc->stats().num_segment_allocs, 1u);
  fixture plain("large_split_min:0");
  for (std::size_t n = 16 * MiB + 1; n < 20 * MiB; n += 300 * KiB) plain.give(plain.take(n));
  EXPECT_GT(plain.alloc->stats().num_segment_allocs, 1u);
}

// --- reserve ---------------------------------------------------------------------------------

TEST(Reserve, TakenAtStartAndCarvedWithoutDeviceCalls) {
  fixture f("reserve:256MiB,gc_threshold:0");
  EXPECT_EQ(f.sim->counters().segment_allocs, 1u);
  EXPECT_EQ(f.sim->counters().used_bytes, 256 * MiB);
  EXPECT_EQ(f.alloc->stats().reserved_bytes.all.current, 0u) << "reserved counts segments";
  std::vector<void*> ps;
  for (int i = 0; i < 20; ++i) {
    ps.push_back(f.take(1000 + static_cast<std::size_t>(i), reinterpret_cast<stream_t>(i % 3)));
    ps.push_back(f.take(3 * MiB, reinterpret_cast<stream_t>(i % 3)));
  }
  ps.push_back(f.take(40 * MiB));
  EXPECT_EQ(f.sim->counters().segment_allocs, 1u) << "every segment carved from the reserve";
  EXPECT_EQ(f.invariants(false), "");
  EXPECT_GT(f.alloc->stats().reserved_bytes.all.current, 40 * MiB);
  EXPECT_NE(f.alloc->memory_summary().find("Reserve (taken at start"), std::string::npos);
  for (std::size_t i = 0; i < ps.size(); ++i) {
    f.give(ps[i], i + 1 == ps.size() ? nullptr : reinterpret_cast<stream_t>((i / 2) % 3));
  }
  f.alloc->empty_cache();
  EXPECT_EQ(f.alloc->stats().reserved_bytes.all.current, 0u);
  EXPECT_EQ(f.sim->counters().segment_frees, 0u) << "the reserve stays";
  EXPECT_EQ(f.sim->counters().used_bytes, 256 * MiB);
  EXPECT_EQ(f.invariants(false), "");
  // Carved again after empty_cache, still without a device call.
  f.give(f.take(100 * MiB));
  EXPECT_EQ(f.sim->counters().segment_allocs, 1u);
  f.alloc.reset();
  EXPECT_EQ(f.sim->counters().used_bytes, 0u) << "returned when the allocator ends";
  EXPECT_EQ(f.sim->counters().live_segments, 0u);
}

TEST(Reserve, BeyondTheReserveTheDeviceServes) {
  fixture f("reserve:64MiB,gc_threshold:0");
  void* a = f.take(60 * MiB);
  void* b = f.take(30 * MiB);  // does not fit what is left of the reserve
  EXPECT_EQ(f.sim->counters().segment_allocs, 2u);
  EXPECT_EQ(f.sim->counters().used_bytes, 64 * MiB + 30 * MiB);
  f.give(a);
  f.give(b);
  f.alloc->empty_cache();
  EXPECT_EQ(f.sim->counters().segment_frees, 1u) << "only the device's own segment went back";
  EXPECT_EQ(f.sim->counters().used_bytes, 64 * MiB);
  EXPECT_EQ(f.invariants(false), "");
}

TEST(Reserve, CountsAgainstTheMemoryLimit) {
  fixture f("reserve:256MiB,memory_limit:300MiB");
  void* a = f.take(250 * MiB);  // from the reserve
  EXPECT_THROW(f.alloc->allocate(50 * MiB), out_of_memory) << "256 MiB + 50 MiB > 300 MiB";
  void* b = f.take(40 * MiB);  // 256 + 40 <= 300
  EXPECT_EQ(f.sim->counters().used_bytes, 296 * MiB);
  f.give(a);
  f.give(b);
  EXPECT_EQ(f.invariants(false), "");
}

TEST(Reserve, AReserveTheDeviceCannotSupplyFailsAtStart) {
  sim_options o;
  o.capacity = 512 * MiB;
  auto sim = std::make_shared<simulated_device>(o);
  try {
    allocator a(config::parse("backend:simulated,capacity:1GiB,reserve:768MiB"), sim);
    ADD_FAILURE() << "a reserve larger than the device was accepted";
  } catch (const out_of_memory& e) {
    EXPECT_NE(std::string(e.what()).find("reserve"), std::string::npos) << e.what();
  }
  EXPECT_EQ(sim->counters().used_bytes, 0u);
}

// --- max_cached ------------------------------------------------------------------------------

TEST(MaxCached, ZeroKeepsNoIdleSegment) {
  fixture f("max_cached:0");
  void* a = f.take(12 * MiB);
  void* b = f.take(12 * MiB);
  EXPECT_EQ(f.sim->counters().segment_allocs, 2u);
  f.give(a);
  EXPECT_EQ(f.sim->counters().segment_frees, 1u) << "the idle segment went back at once";
  EXPECT_EQ(f.alloc->stats().reserved_bytes.all.current, 12 * MiB);
  EXPECT_EQ(f.invariants(), "");
  f.give(b);
  EXPECT_EQ(f.alloc->stats().reserved_bytes.all.current, 0u);
  EXPECT_EQ(f.invariants(), "");
}

TEST(MaxCached, KeepsUpToTheCapLargestReleasedFirst) {
  fixture f("max_cached:30MiB");
  void* a = f.take(12 * MiB, reinterpret_cast<stream_t>(1));
  void* b = f.take(16 * MiB, reinterpret_cast<stream_t>(2));
  void* c = f.take(24 * MiB, reinterpret_cast<stream_t>(2));
  f.give(a, reinterpret_cast<stream_t>(1));
  f.give(b, reinterpret_cast<stream_t>(2));  // 28 MiB idle, under the cap
  EXPECT_EQ(f.sim->counters().segment_frees, 0u);
  f.give(c, reinterpret_cast<stream_t>(2));  // 52 MiB idle: the 24 MiB segment goes
  EXPECT_EQ(f.sim->counters().segment_frees, 1u);
  EXPECT_EQ(f.alloc->stats().reserved_bytes.all.current, 28 * MiB) << "summed over streams";
  EXPECT_EQ(f.invariants(), "");
}

TEST(MaxCached, DeferredFreesAreCappedWhenTheyComplete) {
  fixture f("max_cached:0");
  const auto other = reinterpret_cast<stream_t>(7);
  void* a = f.take(12 * MiB);
  f.alloc->record_stream(a, other);
  f.sim->hold_stream(other);
  f.give(a);  // pending on the held stream
  EXPECT_EQ(f.alloc->stats().reserved_bytes.all.current, 12 * MiB);
  f.sim->release_stream(other);
  f.alloc->process_events();
  EXPECT_EQ(f.alloc->stats().reserved_bytes.all.current, 0u);
  EXPECT_EQ(f.invariants(), "");
}

TEST(MaxCached, NoneKeepsEverything) {
  fixture f("capacity:1GiB");
  f.give(f.take(12 * MiB));
  EXPECT_EQ(f.sim->counters().segment_frees, 0u);
}

// --- out-of-memory callback ------------------------------------------------------------------

TEST(OomCallback, FreesMemoryAndTheAllocationIsRetried) {
  fixture f("capacity:64MiB", 64 * MiB);
  void* first = f.take(40 * MiB);
  int calls = 0;
  f.alloc->set_oom_callback([&](std::size_t bytes, stream_t s) {
    ++calls;
    EXPECT_EQ(bytes, 40 * MiB);
    EXPECT_EQ(s, nullptr);
    f.give(first);
    return true;
  });
  void* second = f.take(40 * MiB);
  EXPECT_NE(second, nullptr);
  EXPECT_EQ(calls, 1);
  EXPECT_EQ(f.alloc->stats().num_ooms, 0u);
  EXPECT_EQ(f.invariants(), "");
}

TEST(OomCallback, RetriesAreBoundedAndFailOnce) {
  fixture f("capacity:64MiB", 64 * MiB);
  void* held = f.take(40 * MiB);
  int calls = 0;
  f.alloc->set_oom_callback([&](std::size_t, stream_t) { return ++calls, true; }, 3);
  const memory_stats before = f.alloc->stats();
  EXPECT_THROW(f.alloc->allocate(40 * MiB), out_of_memory);
  EXPECT_EQ(calls, 3);
  const memory_stats after = f.alloc->stats();
  EXPECT_EQ(after.num_ooms, before.num_ooms + 1) << "the quiet retries count no OOM";
  EXPECT_EQ(after.allocated_bytes.all.current, before.allocated_bytes.all.current);
  calls = 0;
  f.alloc->set_oom_callback([&](std::size_t, stream_t) { return ++calls, false; });
  EXPECT_THROW(f.alloc->allocate(40 * MiB), out_of_memory);
  EXPECT_EQ(calls, 1);
  f.alloc->set_oom_callback({});
  calls = 0;
  EXPECT_THROW(f.alloc->allocate(40 * MiB), out_of_memory);
  EXPECT_EQ(calls, 0);
  f.give(held);
  EXPECT_EQ(f.invariants(), "");
}

TEST(OomCallback, NeitherCalledForImpossibleSizesNorFromItsOwnAllocations) {
  fixture f("capacity:64MiB", 64 * MiB);
  void* held = f.take(40 * MiB);
  int calls = 0;
  bool inner_failed = false;
  f.alloc->set_oom_callback([&](std::size_t, stream_t) {
    ++calls;
    try {
      f.alloc->allocate(40 * MiB);  // fails, without calling the callback again
    } catch (const out_of_memory&) {
      inner_failed = true;
    }
    return false;
  });
  EXPECT_THROW(f.alloc->allocate(GiB), out_of_memory);
  EXPECT_EQ(calls, 0) << "no callback can make a size beyond the device fit";
  EXPECT_THROW(f.alloc->allocate(40 * MiB), out_of_memory);
  EXPECT_EQ(calls, 1);
  EXPECT_TRUE(inner_failed);
  f.give(held);
}

TEST(OomCallback, AnExceptionItThrowsLeavesNothingChanged) {
  fixture f("capacity:64MiB", 64 * MiB);
  void* held = f.take(40 * MiB);
  f.alloc->set_oom_callback([](std::size_t, stream_t) -> bool { throw std::runtime_error("no"); });
  const memory_stats before = f.alloc->stats();
  EXPECT_THROW(f.alloc->allocate(40 * MiB), std::runtime_error);
  EXPECT_EQ(f.alloc->stats().allocated_bytes.all.current, before.allocated_bytes.all.current);
  EXPECT_EQ(f.invariants(), "");
  f.give(held);
}

TEST(OomCallback, RetriedAllocationsTraceNoFailure) {
  const std::string path = (std::filesystem::temp_directory_path() /
                            ("cachalot_oomcb_" + std::to_string(getpid()) + ".csv"))
                               .string();
  {
    fixture f("capacity:64MiB,trace_file:" + path, 64 * MiB);
    void* first = f.take(40 * MiB);
    f.alloc->set_oom_callback([&](std::size_t, stream_t) {
      f.give(first);
      return true;
    });
    f.give(f.take(40 * MiB));
  }
  std::ifstream in(path);
  const std::string text((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
  std::filesystem::remove(path);
  EXPECT_EQ(text.find("allocate failure"), std::string::npos) << text;
}

}  // namespace
}  // namespace cachalot
