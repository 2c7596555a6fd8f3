// Replay of small hand-written traces with known peaks on the simulated device (default
// layout: 512 B rounding, 2 MiB small segments up to 1 MiB, 20 MiB segments below 10 MiB,
// larger ones rounded up to 2 MiB), failures during replay, threads, and a recorded trace.
#include <gtest/gtest.h>

#include <unistd.h>

#include <cmath>
#include <filesystem>
#include <limits>
#include <random>
#include <string>

#include <thread>

#include "cachalot/allocator.hpp"
#include "trace/min_capacity.hpp"
#include "trace/replay.hpp"

namespace cachalot::tools {
namespace {

const std::string header = "Thread,Time,Action,Pointer,Size,Stream\n";

std::string line(const char* action, std::uintptr_t ptr, std::size_t size,
                 std::uintptr_t stream = 0, int thread = 1) {
  char buf[160];
  std::snprintf(buf, sizeof buf, "%d,10:00:00.000001,%s,0x%zx,%zu,0x%zx\n", thread, action,
                static_cast<std::size_t>(ptr), size, static_cast<std::size_t>(stream));
  return buf;
}

replay_result run(const std::string& text, const char* cfg = "capacity:1GiB", bool threads = true) {
  const prepared_trace p = prepare(parse_trace_text(header + text, "test.csv"));
  replay_options o;
  o.use_threads = threads;
  return replay(p, replay_config(cfg, p.summary, 2.0), o);
}

TEST(Replay, SmallPoolPeaks) {
  const replay_result r = run(line("allocate", 0x1000, 1000) + line("allocate", 0x2000, 3000) +
                              line("free", 0x1000, 1000) + line("free", 0x2000, 3000));
  EXPECT_EQ(r.backend, "simulated");
  EXPECT_EQ(r.ops, 4u);
  EXPECT_EQ(r.peak_requested, 4000u);
  EXPECT_EQ(r.peak_allocated, 1024u + 3072u);
  EXPECT_EQ(r.peak_reserved, 2 * MiB);
  EXPECT_EQ(r.segment_allocs, 1u);
  EXPECT_EQ(r.ooms, 0u);
  EXPECT_DOUBLE_EQ(r.fragmentation, static_cast<double>(2 * MiB) / 4000.0);
}

TEST(Replay, ModeledDeviceTimeNextToBytes) {
  // A 2 MiB small segment, a 20 MiB one and a 30 MiB one at the default prices (50us+1ms/GiB
  // each cuMemAlloc), over a trace whose own span is 4 us... 2 ms.
  std::string text = header;
  text += "1,10:00:00.000000,allocate,0x1000,1000,0x0\n";
  text += "1,10:00:00.000500,allocate,0x2000,3145728,0x0\n";
  text += "1,10:00:00.001000,allocate,0x3000,31457280,0x0\n";
  text += "1,10:00:00.002000,free,0x3000,31457280,0x0\n";
  const prepared_trace p = prepare(parse_trace_text(text, "t.csv"));
  replay_options o;
  o.use_threads = false;
  const replay_result r = replay(p, replay_config("capacity:1GiB", p.summary, 2.0), o);
  const std::uint64_t ns = 3 * 50000 + 1953 + 19531 + 29296;
  EXPECT_EQ(r.device.timing, device_timing::modeled);
  EXPECT_EQ(r.device.calls_of(device_call::segment_alloc), 3u);
  EXPECT_EQ(r.device.total_ns(), ns);
  EXPECT_EQ(r.device.total_calls(), 3u);
  EXPECT_EQ(r.trace_span_us, 2000u);
  EXPECT_DOUBLE_EQ(r.device_ms(), static_cast<double>(ns) / 1e6);
  EXPECT_DOUBLE_EQ(r.device_ms_per_1k_ops(), static_cast<double>(ns) / 1e6 * 1000.0 / 4.0);
  EXPECT_DOUBLE_EQ(r.device_span_share(), static_cast<double>(ns) / 2e6);
  // The pass-through frees what it allocated: a cuMemFree and its implied sync per free.
  const replay_result b =
      replay(p, baseline_config(replay_config("capacity:1GiB", p.summary, 2.0)), o);
  EXPECT_EQ(b.device.calls_of(device_call::segment_free), 1u);
  EXPECT_EQ(b.device.implied_syncs, 1u);
  EXPECT_EQ(b.device.implied_sync_ns, 5000u);
  // With the model off the same calls are counted, with no time.
  const replay_result off =
      replay(p, replay_config("capacity:1GiB,cost_model:off", p.summary, 2.0), o);
  EXPECT_EQ(off.device.timing, device_timing::none);
  EXPECT_EQ(off.device.total_calls(), 3u);
  EXPECT_EQ(off.device.total_ns(), 0u);
  EXPECT_EQ(off.peak_reserved, r.peak_reserved);
  // No span: no share.
  const replay_result flat = run(line("allocate", 0x1000, 1000));
  EXPECT_TRUE(std::isnan(flat.device_span_share()));
}

TEST(Replay, LargePoolPeaks) {
  const replay_result r =
      run(line("allocate", 0x1000, 3 * MiB) + line("allocate", 0x2000, 30 * MiB) +
          line("free", 0x1000, 3 * MiB) + line("free", 0x2000, 30 * MiB));
  EXPECT_EQ(r.peak_requested, 33 * MiB);
  EXPECT_EQ(r.peak_allocated, 33 * MiB);
  EXPECT_EQ(r.peak_reserved, 20 * MiB + 30 * MiB);
  EXPECT_EQ(r.segment_allocs, 2u);
}

TEST(Replay, BigRequestsRoundTo2MiBSegments) {
  // 24 MiB + 1: a 26 MiB segment, split (the 2 MiB - 512 B rest is more than 1 MiB).
  const replay_result split =
      run(line("allocate", 0x1000, 24 * MiB + 1) + line("free", 0x1000, 24 * MiB + 1));
  EXPECT_EQ(split.peak_requested, 24 * MiB + 1);
  EXPECT_EQ(split.peak_allocated, 24 * MiB + 512);
  EXPECT_EQ(split.peak_reserved, 26 * MiB);
  // 25 MiB + 1: a 26 MiB segment not split (less than 1 MiB would remain): all allocated.
  const replay_result whole =
      run(line("allocate", 0x1000, 25 * MiB + 1) + line("free", 0x1000, 25 * MiB + 1));
  EXPECT_EQ(whole.peak_requested, 25 * MiB + 1);
  EXPECT_EQ(whole.peak_allocated, 26 * MiB);
  EXPECT_EQ(whole.peak_reserved, 26 * MiB);
}

TEST(Replay, CachedBlocksAreReused) {
  std::string text;
  for (int i = 0; i < 100; ++i) text += line("allocate", 0x1000, 4096) + line("free", 0x1000, 4096);
  const replay_result r = run(text);
  EXPECT_EQ(r.ops, 200u);
  EXPECT_EQ(r.segment_allocs, 1u);
  EXPECT_EQ(r.peak_reserved, 2 * MiB);
}

TEST(Replay, FailedAllocationIsCountedAndReplayGoesOn) {
  const replay_result r = run(line("allocate", 0x1000, 30 * MiB) + line("allocate", 0x2000, 1000) +
                                  line("free", 0x1000, 30 * MiB) + line("free", 0x2000, 1000),
                              "capacity:16MiB");
  EXPECT_EQ(r.ooms, 1u);
  EXPECT_EQ(r.skipped_frees, 1u);
  EXPECT_EQ(r.errors, 0u);
  EXPECT_EQ(r.peak_requested, 1000u);
}

TEST(Replay, RefusedRunIsNotComplete) {
  const replay_result r =
      run(line("allocate", 0x1000, 30 * MiB) + line("free", 0x1000, 30 * MiB), "capacity:16MiB");
  EXPECT_FALSE(r.complete());
  EXPECT_TRUE(run(line("allocate", 0x1000, 1000) + line("free", 0x1000, 1000)).complete());
}

TEST(Replay, ZeroSizeAllocationsAreCountedApartFromSkippedFrees) {
  const replay_result r = run(line("allocate", 0x1000, 0) + line("allocate", 0x2000, 512) +
                              line("free", 0x1000, 0) + line("free", 0x2000, 512));
  EXPECT_EQ(r.zero_size_allocations, 1u);
  EXPECT_EQ(r.skipped_frees, 0u) << "a free of a 0-byte allocation is not a skipped free";
  EXPECT_EQ(r.ooms, 0u);
  EXPECT_TRUE(r.complete());
}

TEST(Replay, CapacityFactorAndSizesOutOfRangeAreRefused) {
  trace_summary s;
  s.peak_requested_bytes = 5 * MiB;
  for (double f : {1e300, std::numeric_limits<double>::infinity(),
                   std::numeric_limits<double>::quiet_NaN(), 0.0, -1.0}) {
    EXPECT_THROW(replay_config("", s, f), invalid_argument) << f;
  }
  EXPECT_THROW(replay_config("capacity:1024TiB", s, 2.0), invalid_argument);
  EXPECT_THROW(parse_trace_text(header + line("allocate", 0x1000, SIZE_MAX), "big.csv"),
               trace_error);
  EXPECT_THROW(summarize(parse_trace_text(header + line("allocate", 0x1000, std::size_t{1} << 50) +
                                              line("allocate", 0x2000, std::size_t{1} << 50),
                                          "sum.csv")),
               trace_error);
}

// Two 30 MiB allocations, the first freed, then one of 40 MiB: peak requested 70 MiB, and 70 MiB
// is enough (the free 30 MiB segment is returned before the 40 MiB one is made); 68 MiB is not.
TEST(MinCapacity, FindsTheSmallestCleanCapacity) {
  const prepared_trace p = prepare(parse_trace_text(
      header + line("allocate", 0x1000, 30 * MiB) + line("allocate", 0x2000, 30 * MiB) +
          line("free", 0x1000, 30 * MiB) + line("allocate", 0x3000, 40 * MiB) +
          line("free", 0x2000, 30 * MiB) + line("free", 0x3000, 40 * MiB),
      "m.csv"));
  const config base = replay_config("", p.summary, 2.0);
  const min_capacity_result m = find_min_capacity(p, base);
  ASSERT_TRUE(m.found);
  EXPECT_EQ(m.bytes, 70 * MiB);
  EXPECT_DOUBLE_EQ(m.factor, 1.0);
  EXPECT_LE(m.precision, 2 * MiB);
  EXPECT_TRUE(replay_at(p, base, m.bytes).complete());
  EXPECT_FALSE(replay_at(p, base, m.bytes - 2 * MiB).complete());
}

TEST(MinCapacity, SearchesPastFragmentationAndGivesUp) {
  // 1 MiB and 1.5 MiB allocations alternate in small and large segments: more than the peak.
  std::string text;
  for (std::uintptr_t i = 0; i < 64; ++i)
    text += line("allocate", 0x1000 + i, i % 2 ? MiB : 3 * MiB / 2);
  for (std::uintptr_t i = 0; i < 64; i += 2) text += line("free", 0x1000 + i, 0);
  const prepared_trace p = prepare(parse_trace_text(header + text, "f.csv"));
  const config base = replay_config("", p.summary, 2.0);
  const min_capacity_result m = find_min_capacity(p, base);
  ASSERT_TRUE(m.found);
  EXPECT_GT(m.bytes, p.summary.peak_requested_bytes);
  EXPECT_TRUE(replay_at(p, base, m.bytes).complete());
  EXPECT_FALSE(replay_at(p, base, m.bytes - m.precision).complete());
  min_capacity_options tight;
  tight.max_factor = 1.0;
  EXPECT_FALSE(find_min_capacity(p, base, tight).found);
}

TEST(ReplayCore, ReplaysOnSeveralThreadsAtOnceAgreeWithOneAtATime) {
  const prepared_trace p =
      prepare(load_trace(std::string(CACHALOT_TRACES_DIR) + "/llm_inference.csv"));
  const config base = replay_config("", p.summary, 1.2);
  const std::size_t capacities[] = {base.capacity, base.capacity * 2, base.capacity * 3 / 2,
                                    base.capacity + 64 * MiB};
  replay_result serial[4], parallel[4];
  for (int i = 0; i < 4; ++i) serial[i] = replay_at(p, base, capacities[i]);
  std::vector<std::thread> workers;
  for (int i = 0; i < 4; ++i) {
    workers.emplace_back([&, i] { parallel[i] = replay_at(p, base, capacities[i]); });
  }
  for (std::thread& w : workers) w.join();
  for (int i = 0; i < 4; ++i) {
    EXPECT_EQ(parallel[i].peak_reserved, serial[i].peak_reserved) << i;
    EXPECT_EQ(parallel[i].peak_allocated, serial[i].peak_allocated) << i;
    EXPECT_EQ(parallel[i].segment_allocs, serial[i].segment_allocs) << i;
    EXPECT_EQ(parallel[i].ooms, serial[i].ooms) << i;
    EXPECT_EQ(parallel[i].capacity, capacities[i]);
  }
}

TEST(Replay, UnknownFreeIsCountedAndSkipped) {
  const prepared_trace p = prepare(parse_trace_text(
      header + line("free", 0xdead, 8) + line("allocate", 0x1000, 512) + line("free", 0x1000, 512),
      "u.csv"));
  EXPECT_EQ(p.summary.unknown_frees, 1u);
  EXPECT_EQ(p.ops.size(), 2u);
  const replay_result r = replay(p, replay_config("", p.summary, 2.0), {});
  EXPECT_EQ(r.ops, 2u);
  EXPECT_EQ(r.peak_requested, 512u);
}

TEST(Replay, DefaultCapacityIsTwicePeakRoundedUp) {
  trace_summary s;
  s.peak_requested_bytes = 5 * MiB + 1;
  EXPECT_EQ(replay_config("", s, 2.0).capacity, 12 * MiB);
  EXPECT_EQ(replay_config("", s, 2.0).backend, backend_kind::simulated);
  EXPECT_EQ(replay_config("capacity:1GiB", s, 2.0).capacity, GiB);
  EXPECT_FALSE(baseline_config(replay_config("", s, 2.0)).caching);
}

TEST(Replay, ThreadsAndStreamsInLogOrder) {
  std::string text;
  for (std::uintptr_t i = 0; i < 200; ++i) {
    const int thread = static_cast<int>(i % 3);
    text += line("allocate", 0x10000 + i * 0x100, 512 * (i % 7 + 1), i % 2, thread);
    if (i % 4 == 3) text += line("free", 0x10000 + (i - 2) * 0x100, 0, 0, (thread + 1) % 3);
  }
  const replay_result threaded = run(text);
  const replay_result serial = run(text, "capacity:1GiB", false);
  EXPECT_EQ(threaded.threads, 3u);
  EXPECT_EQ(serial.threads, 1u);
  EXPECT_EQ(threaded.peak_requested, serial.peak_requested);
  EXPECT_EQ(threaded.peak_allocated, serial.peak_allocated);
  EXPECT_EQ(threaded.peak_reserved, serial.peak_reserved);
  EXPECT_EQ(threaded.errors + serial.errors, 0u);
}

TEST(Replay, SamplingRecordsTheTimeline) {
  replay_options o;
  o.sample = true;
  const prepared_trace p = prepare(parse_trace_text(
      header + line("allocate", 0x1000, 1000) + line("free", 0x1000, 1000), "s.csv"));
  const replay_result r = replay(p, replay_config("", p.summary, 2.0), o);
  ASSERT_EQ(r.timeline.size(), 3u);
  EXPECT_EQ(r.timeline[1].requested, 1000u);
  EXPECT_EQ(r.timeline[1].allocated, 1024u);
  EXPECT_EQ(r.timeline[1].reserved, 2 * MiB);
  EXPECT_EQ(r.timeline[2].requested, 0u);
}

TEST(Replay, RecordedTraceReplaysToTheSamePeaks) {
  const std::string path = (std::filesystem::temp_directory_path() /
                            ("cachalot_recorded_" + std::to_string(getpid()) + ".csv"))
                               .string();
  memory_stats expected;
  {
    allocator a(config::parse("backend:simulated,capacity:4GiB,trace_file:" + path));
    std::mt19937 rng(5);
    std::vector<std::pair<void*, stream_t>> live;
    for (int i = 0; i < 2000; ++i) {
      if (!live.empty() && rng() % 100 < 40) {
        const std::size_t k = rng() % live.size();
        a.deallocate(live[k].first, live[k].second);
        live[k] = live.back();
        live.pop_back();
        continue;
      }
      const std::size_t size = rng() % 4 == 0 ? 1 + rng() % (24 * MiB) : 1 + rng() % (64 * KiB);
      const auto stream = reinterpret_cast<stream_t>(std::uintptr_t{0x100} * (rng() % 3));
      live.emplace_back(a.allocate(size, stream), stream);
    }
    for (const auto& [p, s] : live) a.deallocate(p, s);
    expected = a.stats();
  }
  const prepared_trace p = prepare(load_trace(path));
  std::filesystem::remove(path);
  EXPECT_EQ(p.summary.unknown_frees, 0u);
  EXPECT_EQ(p.summary.peak_requested_bytes, expected.requested_bytes.all.peak);
  const replay_result r = replay(p, replay_config("capacity:4GiB", p.summary, 2.0), {});
  EXPECT_EQ(r.ops, expected.num_allocs + expected.num_frees);
  EXPECT_EQ(r.peak_requested, expected.requested_bytes.all.peak);
  EXPECT_EQ(r.peak_allocated, expected.allocated_bytes.all.peak);
  EXPECT_EQ(r.peak_reserved, expected.reserved_bytes.all.peak);
  EXPECT_EQ(r.segment_allocs, expected.num_segment_allocs);
}

}  // namespace
}  // namespace cachalot::tools
