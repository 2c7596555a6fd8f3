// The device cost model (cachalot/device_cost.hpp): the config keys and their value syntax
// (every key, units, decimals, the size part, every refusal naming the key), the latency
// arithmetic, the simulated device's exact modeled time per call kind for a known sequence of
// calls (failed calls, implied syncs of segment frees, the model off), the figures in
// memory_stats, and that the model changes time only: identical stats and snapshots with the
// model on and off on a randomized workload, fixed and expandable segments.
#include <gtest/gtest.h>

#include <cstdint>
#include <map>
#include <memory>
#include <random>
#include <string>
#include <vector>

#include "cachalot/allocator.hpp"
#include "cachalot/config.hpp"
#include "cachalot/device_cost.hpp"
#include "cachalot/errors.hpp"
#include "cachalot/simulated_device.hpp"

namespace cachalot::testing {
namespace {

constexpr std::uint64_t us = 1000;
constexpr std::uint64_t ms = 1000 * us;

std::string refusal(const std::string& text) {
  try {
    (void)config::parse(text);
  } catch (const invalid_argument& e) {
    return e.what();
  }
  return "(accepted)";
}

bool contains(const std::string& text, const std::string& part) {
  return text.find(part) != std::string::npos;
}

const call_latency& lat(const config& c, device_call k) {
  return c.cost.of(k);
}

TEST(DeviceCostConfig, EveryKeyParsesWithUnits) {
  const config c = config::parse(
      "cost_model:on,cost_segment_alloc:25us+40us/GiB,cost_segment_free:30us+10us/GiB,"
      "cost_range_reserve:1.5us,cost_range_release:2ms,cost_chunk_create:9us+1ms/GiB,"
      "cost_chunk_map:3us+0.5ms/GiB,cost_chunk_access:4us + 2 ms / GiB,cost_chunk_unmap:5us,"
      "cost_chunk_release:6us+0/GiB,cost_event_create:250ns,cost_event_record:0.5us,"
      "cost_event_query:1US,cost_event_sync:2us,cost_stream_sync:3us,cost_device_sync:0.001s,"
      "cost_copy:10us+31ms/GiB");
  EXPECT_TRUE(c.cost.enabled);
  EXPECT_EQ(lat(c, device_call::segment_alloc), (call_latency{25 * us, 40 * us}));
  EXPECT_EQ(lat(c, device_call::segment_free), (call_latency{30 * us, 10 * us}));
  EXPECT_EQ(lat(c, device_call::range_reserve), (call_latency{1500, 0}));
  EXPECT_EQ(lat(c, device_call::range_release), (call_latency{2 * ms, 0}));
  EXPECT_EQ(lat(c, device_call::chunk_create), (call_latency{9 * us, 1 * ms}));
  EXPECT_EQ(lat(c, device_call::chunk_map), (call_latency{3 * us, ms / 2}));
  EXPECT_EQ(lat(c, device_call::chunk_access), (call_latency{4 * us, 2 * ms}));
  EXPECT_EQ(lat(c, device_call::chunk_unmap), (call_latency{5 * us, 0}));
  EXPECT_EQ(lat(c, device_call::chunk_release), (call_latency{6 * us, 0}));
  EXPECT_EQ(lat(c, device_call::event_create), (call_latency{250, 0}));
  EXPECT_EQ(lat(c, device_call::event_record), (call_latency{500, 0}));
  EXPECT_EQ(lat(c, device_call::event_query), (call_latency{1 * us, 0}));
  EXPECT_EQ(lat(c, device_call::event_sync), (call_latency{2 * us, 0}));
  EXPECT_EQ(lat(c, device_call::stream_sync), (call_latency{3 * us, 0}));
  EXPECT_EQ(lat(c, device_call::device_sync), (call_latency{1 * ms, 0}));
  EXPECT_EQ(lat(c, device_call::copy), (call_latency{10 * us, 31 * ms}));
  EXPECT_FALSE(config::parse("cost_model:off").cost.enabled);
  EXPECT_EQ(lat(config::parse("cost_event_query:0"), device_call::event_query),
            (call_latency{0, 0}));
  // Fractions of a nanosecond (a measured "3.57ns") round to the nearest nanosecond.
  EXPECT_EQ(lat(config::parse("cost_event_query:3.57ns"), device_call::event_query),
            (call_latency{4, 0}));
  EXPECT_EQ(lat(config::parse("cost_event_query:0.4ns"), device_call::event_query),
            (call_latency{0, 0}));
  EXPECT_EQ(lat(config::parse("cost_copy:1.2345678us+0.5ns/GiB"), device_call::copy),
            (call_latency{1235, 1}));
  // Every key of the model is one the parser knows.
  for (const char* key : device_cost_keys()) {
    const std::string k = key;
    const std::string value = k == "cost_model" ? "off" : "7us";
    EXPECT_NO_THROW((void)config::parse(k + ":" + value)) << k;
  }
}

TEST(DeviceCostConfig, AcceptsTheLineGpuCheckPrints) {
  // The shape of scripts/gpu-check.sh's "cost-model config:" line: every key once, in order,
  // values with two decimals below 10, one below 100, "0ns" parts.
  const config c = config::parse(
      "cost_segment_alloc:25.3us+40.1us/GiB,cost_segment_free:30us+10us/GiB,"
      "cost_range_reserve:8.12us+0ns/GiB,cost_range_release:6.5us+0ns/GiB,"
      "cost_chunk_create:9us+1.25ms/GiB,cost_chunk_map:3.57us+0.5ms/GiB,"
      "cost_chunk_access:4us+2ms/GiB,cost_chunk_unmap:5us+1ms/GiB,"
      "cost_chunk_release:6us+0.25ms/GiB,cost_event_create:144ns,cost_event_record:244ns,"
      "cost_event_query:1.02us,cost_event_sync:2.5us,cost_stream_sync:3.57ns,"
      "cost_device_sync:3.07us,cost_copy:10us+30.7ms/GiB");
  EXPECT_EQ(lat(c, device_call::segment_alloc), (call_latency{25300, 40100}));
  EXPECT_EQ(lat(c, device_call::range_reserve), (call_latency{8120, 0}));
  EXPECT_EQ(lat(c, device_call::chunk_map), (call_latency{3570, ms / 2}));
  EXPECT_EQ(lat(c, device_call::stream_sync), (call_latency{4, 0}));
  EXPECT_EQ(lat(c, device_call::copy), (call_latency{10 * us, 30700 * us}));
  EXPECT_EQ(config::parse(c.to_string()), c) << c.to_string();
}

TEST(DeviceCostConfig, DefaultsAreTheDocumentedOnes) {
  const config c;
  EXPECT_TRUE(c.cost.enabled);
  EXPECT_EQ(lat(c, device_call::segment_alloc), (call_latency{50 * us, 1 * ms}));
  EXPECT_EQ(lat(c, device_call::segment_free), (call_latency{30 * us, ms / 2}));
  EXPECT_EQ(lat(c, device_call::chunk_create), (call_latency{30 * us, 1 * ms}));
  EXPECT_EQ(lat(c, device_call::chunk_map), (call_latency{10 * us, ms / 2}));
  EXPECT_EQ(lat(c, device_call::chunk_access), (call_latency{20 * us, 1 * ms}));
  EXPECT_EQ(lat(c, device_call::event_query), (call_latency{1 * us, 0}));
  EXPECT_EQ(lat(c, device_call::device_sync), (call_latency{5 * us, 0}));
  EXPECT_EQ(lat(c, device_call::copy), (call_latency{10 * us, 31 * ms}));
  EXPECT_EQ(c.cost.to_string(), "cost_model:on");
}

TEST(DeviceCostConfig, RoundTripsThroughToString) {
  const config c = config::parse(
      "cost_model:off,cost_segment_alloc:25us+40us/GiB,cost_event_query:1.5us,"
      "cost_copy:1s+7ns/GiB,cost_device_sync:0");
  EXPECT_EQ(c.cost.to_string(),
            "cost_model:off,cost_segment_alloc:25us+40us/GiB,cost_event_query:1500ns,"
            "cost_device_sync:0,cost_copy:1s+7ns/GiB");
  EXPECT_EQ(config::parse(c.to_string()), c) << c.to_string();
  config d;
  d.cost.of(device_call::chunk_map).fixed_ns = 1;
  EXPECT_NE(d, config{});
  EXPECT_EQ(config::parse(d.to_string()), d);
}

TEST(DeviceCostConfig, BadValuesAreRefusedNamingTheKey) {
  const std::map<std::string, std::string> cases = {
      {"cost_event_query:1", "has no unit"},
      {"cost_event_query:1.5", "has no unit"},
      {"cost_event_query:1h", "unknown unit 'h'"},
      {"cost_event_query:-1us", "must not be negative"},
      {"cost_event_query:3601s", "above the limit of 3600 s"},
      {"cost_event_query:99999999999999999999s", "overflows"},
      {"cost_event_query:1us+1us/GiB", "takes no size"},
      {"cost_event_query:1us/GiB", "takes no size"},
      {"cost_segment_alloc:40us/GiB", "only a size-proportional part"},
      {"cost_segment_alloc:25us+40us", "per GiB"},
      {"cost_segment_alloc:25us+40us/MiB", "per GiB"},
      {"cost_segment_alloc:25us+/GiB", "is not a number"},
      {"cost_segment_alloc:+40us/GiB", "is not a number"},
      {"cost_segment_alloc:us", "is not a number"},
      {"cost_model:maybe", "is not a boolean"},
  };
  for (const auto& [text, why] : cases) {
    const std::string key = text.substr(0, text.find(':'));
    const std::string msg = refusal(text);
    EXPECT_TRUE(contains(msg, "'" + key + "'")) << text << ": " << msg;
    EXPECT_TRUE(contains(msg, why)) << text << ": " << msg;
  }
  EXPECT_TRUE(contains(refusal("cost_event_querry:1us"), "did you mean 'cost_event_query'"))
      << refusal("cost_event_querry:1us");
  EXPECT_TRUE(contains(refusal("cost_segment_alloc:1us,cost_segment_alloc:2us"), "given twice"));
  EXPECT_THROW((void)parse_call_latency("1", device_call::copy), invalid_argument);
}

TEST(DeviceCostModel, LatencyArithmetic) {
  const call_latency l{25 * us, 40 * us};
  EXPECT_EQ(l.ns(0), 25 * us);
  EXPECT_EQ(l.ns(GiB), 65 * us);
  EXPECT_EQ(l.ns(512 * MiB), 45 * us);
  EXPECT_EQ(l.ns(3), 25 * us);  // 3 x 40000 / 2^30 rounds down to 0
  EXPECT_EQ((call_latency{0, 1u << 30}).ns(7), 7u);
  EXPECT_EQ((call_latency{1, UINT64_MAX}).ns(SIZE_MAX), UINT64_MAX);  // saturates
  device_cost_model m;
  m.of(device_call::copy) = l;
  EXPECT_EQ(m.cost_ns(device_call::copy, GiB), 65 * us);
  m.enabled = false;
  EXPECT_EQ(m.cost_ns(device_call::copy, GiB), 0u);
  EXPECT_EQ(format_call_latency(call_latency{1500, 0}, false), "1500ns");
  EXPECT_EQ(format_call_latency(call_latency{2 * ms, 3 * us}, true), "2ms+3us/GiB");
  EXPECT_EQ(format_call_latency(call_latency{0, 0}, true), "0");
  for (std::size_t i = 0; i < device_call_count; ++i) {
    const auto c = static_cast<device_call>(i);
    EXPECT_EQ(device_call_key(c), std::string("cost_") + device_call_name(c));
    EXPECT_EQ(device_cost_keys()[i + 1], device_call_key(c));
  }
}

// A model where every kind has its own price, so that each call's share is visible.
device_cost_model distinct_model() {
  device_cost_model m;
  for (std::size_t i = 0; i < device_call_count; ++i) {
    m.latency[i] = call_latency{(i + 1) * 1000, 0};
  }
  m.of(device_call::segment_alloc).per_gib_ns = 1024 * us;  // 1 us per MiB
  m.of(device_call::segment_free).per_gib_ns = 2048 * us;   // 2 us per MiB
  m.of(device_call::chunk_create).per_gib_ns = 1024 * us;
  return m;
}

std::uint64_t price(const device_cost_model& m, device_call c, std::size_t bytes = 0) {
  return m.of(c).ns(bytes);
}

TEST(DeviceCostSimulated, ExactModeledTimePerCallKind) {
  sim_options o;
  o.capacity = 64 * MiB;
  o.cost = distinct_model();
  const device_cost_model& m = o.cost;
  simulated_device dev(o);
  void* seg = dev.allocate_segment(8 * MiB, nullptr);
  ASSERT_NE(seg, nullptr);
  EXPECT_EQ(dev.allocate_segment(128 * MiB, nullptr), nullptr);  // out of memory: priced too
  dev.free_segment(seg, 8 * MiB);
  event_t e = dev.create_event();
  dev.record_event(e, nullptr);
  EXPECT_TRUE(dev.query_event(e));
  dev.synchronize_event(e);
  dev.synchronize_device();
  dev.destroy_event(e);  // not a priced call
  void* range = dev.reserve_address_range(8 * MiB);
  ASSERT_NE(range, nullptr);
  ASSERT_TRUE(dev.map_chunk(range, 2 * MiB));
  dev.fail_nth(sim_op::map_chunk, 1);  // out of memory: cuMemCreate is the only call made
  EXPECT_FALSE(dev.map_chunk(static_cast<char*>(range) + 2 * MiB, 2 * MiB));
  dev.fail_nth(sim_op::unmap_chunk, 1);
  EXPECT_THROW(dev.unmap_chunk(range, 2 * MiB), backend_error);  // injected: unmap only
  dev.unmap_chunk(range, 2 * MiB);
  dev.release_address_range(range, 8 * MiB);
  EXPECT_THROW(dev.unmap_chunk(range, 2 * MiB), backend_error);  // misuse: not priced

  const device_call_stats s = dev.call_stats();
  EXPECT_EQ(s.timing, device_timing::modeled);
  const auto expect = [&](device_call c, std::uint64_t calls, std::uint64_t ns) {
    EXPECT_EQ(s.calls_of(c), calls) << device_call_name(c);
    EXPECT_EQ(s.ns_of(c), ns) << device_call_name(c);
  };
  expect(device_call::segment_alloc, 2,
         price(m, device_call::segment_alloc, 8 * MiB) +
             price(m, device_call::segment_alloc, 128 * MiB));
  EXPECT_EQ(s.ns_of(device_call::segment_alloc), 1000 + 8 * us + 1000 + 128 * us);
  expect(device_call::segment_free, 1, 2000 + 16 * us);
  expect(device_call::event_create, 1, price(m, device_call::event_create));
  expect(device_call::event_record, 1, price(m, device_call::event_record));
  expect(device_call::event_query, 1, price(m, device_call::event_query));
  expect(device_call::event_sync, 1, price(m, device_call::event_sync));
  expect(device_call::device_sync, 1, price(m, device_call::device_sync));
  expect(device_call::range_reserve, 1, price(m, device_call::range_reserve));
  expect(device_call::range_release, 1, price(m, device_call::range_release));
  expect(device_call::chunk_create, 2,
         2 * price(m, device_call::chunk_create) + 4 * us);  // 1 us per MiB
  expect(device_call::chunk_map, 1, price(m, device_call::chunk_map));
  expect(device_call::chunk_access, 1, price(m, device_call::chunk_access));
  expect(device_call::chunk_unmap, 2, 2 * price(m, device_call::chunk_unmap));
  expect(device_call::chunk_release, 1, price(m, device_call::chunk_release));
  expect(device_call::stream_sync, 0, 0);
  expect(device_call::copy, 0, 0);
  // The segment free implied one device-wide synchronization, priced as cost_device_sync.
  EXPECT_EQ(s.implied_syncs, 1u);
  EXPECT_EQ(s.implied_sync_ns, price(m, device_call::device_sync));
  EXPECT_EQ(s.explicit_syncs(), 2u);
  EXPECT_EQ(s.syncs(), 3u);
  std::uint64_t sum = s.implied_sync_ns;
  for (const std::uint64_t ns : s.ns) sum += ns;
  EXPECT_EQ(s.total_ns(), sum);
  EXPECT_EQ(s.total_calls(), 17u);
  const sim_counters c = dev.counters();
  EXPECT_EQ(c.device_ns, s.total_ns());
  EXPECT_EQ(c.implied_syncs, 1u);
}

TEST(DeviceCostSimulated, ModelOffCountsWithoutTime) {
  sim_options o;
  o.capacity = 64 * MiB;
  o.cost.enabled = false;
  simulated_device dev(o);
  dev.free_segment(dev.allocate_segment(MiB, nullptr), MiB);
  dev.synchronize_device();
  const device_call_stats s = dev.call_stats();
  EXPECT_EQ(s.timing, device_timing::none);
  EXPECT_EQ(s.calls_of(device_call::segment_alloc), 1u);
  EXPECT_EQ(s.calls_of(device_call::segment_free), 1u);
  EXPECT_EQ(s.implied_syncs, 1u);
  EXPECT_EQ(s.total_ns(), 0u);
  EXPECT_EQ(dev.counters().device_ns, 0u);
}

TEST(DeviceCostSimulated, AllocatorStatsCarryTheDeviceFigures) {
  auto dev = std::make_shared<simulated_device>([] {
    sim_options o;
    o.capacity = GiB;
    return o;
  }());
  allocator a(config::parse("backend:simulated,capacity:1GiB,max_split_size:256MiB"), dev);
  void* small = a.allocate(1000, nullptr);
  void* large = a.allocate(3 * MiB, nullptr);
  a.deallocate(small);
  a.deallocate(large);
  a.empty_cache();
  const memory_stats st = a.stats();
  const device_cost_model m;  // the defaults
  EXPECT_EQ(st.device.timing, device_timing::modeled);
  EXPECT_EQ(st.device.calls_of(device_call::segment_alloc), 2u);  // 2 MiB and 20 MiB
  EXPECT_EQ(st.device.ns_of(device_call::segment_alloc),
            m.cost_ns(device_call::segment_alloc, 2 * MiB) +
                m.cost_ns(device_call::segment_alloc, 20 * MiB));
  EXPECT_EQ(st.device.ns_of(device_call::segment_alloc), 100 * us + 1953 + 19531);
  EXPECT_EQ(st.device.calls_of(device_call::segment_free), 2u);
  EXPECT_EQ(st.device.implied_syncs, 2u);
  EXPECT_EQ(st.device.implied_sync_ns, 2 * 5 * us);
  EXPECT_EQ(st.device.total_ns(), dev->call_stats().total_ns());
  EXPECT_EQ(st.device.total_ns(), dev->counters().device_ns);
  a.reset_peak_stats();  // the device figures are cumulative: never reset
  EXPECT_EQ(a.stats().device.total_ns(), st.device.total_ns());
  EXPECT_EQ(a.stats(default_pool).device.total_ns(), st.device.total_ns());
}

// --- The model changes time only ------------------------------------------------------------

/// A snapshot with every address made relative to the first segment of its kind (fixed or
/// expandable), so that two devices with different address-space bases compare equal when
/// they placed everything alike.
std::vector<std::string> layout(const memory_snapshot& snap) {
  std::uintptr_t base[2] = {0, 0};
  for (const segment_info& seg : snap.segments) {
    std::uintptr_t& b = base[seg.expandable ? 1 : 0];
    if (b == 0 || seg.address < b) b = seg.address;
  }
  std::vector<std::string> out;
  for (const segment_info& seg : snap.segments) {
    const std::uintptr_t b = base[seg.expandable ? 1 : 0];
    std::string line = std::to_string(seg.address - b) + " " + std::to_string(seg.size) + " " +
                       std::to_string(seg.range_size) + " " +
                       std::to_string(reinterpret_cast<std::uintptr_t>(seg.stream)) + " " +
                       std::to_string(static_cast<int>(seg.pool)) + ":";
    for (const block_info& blk : seg.blocks) {
      line += " " + std::to_string(blk.address - seg.address) + "/" + std::to_string(blk.size) +
              "/" + std::to_string(blk.requested) + "/" +
              std::to_string(static_cast<int>(blk.state));
    }
    out.push_back(line);
  }
  return out;
}

/// Every byte and count stat of `s` (the device figures left out) as numbers.
std::vector<std::uint64_t> byte_stats(const memory_stats& s) {
  std::vector<std::uint64_t> v;
  for (const pool_stats* p :
       {&s.requested_bytes, &s.allocated_bytes, &s.reserved_bytes, &s.active_bytes,
        &s.inactive_split_bytes, &s.allocations, &s.segments}) {
    for (const stat* x : {&p->all, &p->small, &p->large}) {
      v.insert(v.end(), {x->current, x->peak, x->allocated, x->freed});
    }
  }
  v.insert(v.end(),
           {s.num_allocs, s.num_frees, s.num_segment_allocs, s.num_segment_frees, s.num_chunk_maps,
            s.num_chunk_unmaps, s.num_ooms, s.num_alloc_retries, s.num_cache_flushes,
            s.num_device_syncs, s.num_oversize_allocs, s.num_deferred_frees, s.num_pending_blocks,
            s.num_streams, s.num_free_blocks, s.largest_free_block});
  return v;
}

struct workload_trace {
  std::vector<std::vector<std::string>> layouts;
  std::vector<std::vector<std::uint64_t>> stats;
  std::vector<std::uintptr_t> offsets;  // each allocation, relative to the first one
  device_call_stats device;
};

workload_trace run_workload(const std::string& conf, std::uint64_t seed) {
  allocator a(config::parse(conf));
  std::mt19937_64 rng(seed);
  struct live {
    void* ptr;
    stream_t stream;
  };
  std::vector<live> blocks;
  workload_trace t;
  std::uintptr_t first = 0;
  for (int step = 0; step < 3000; ++step) {
    const auto stream = reinterpret_cast<stream_t>(static_cast<std::uintptr_t>(rng() % 3) * 64);
    const unsigned op = static_cast<unsigned>(rng() % 100);
    if (op < 55 || blocks.empty()) {
      const std::size_t size = rng() % 4 == 0 ? MiB + rng() % (40 * MiB) : 1 + rng() % MiB;
      try {
        void* p = a.allocate(size, stream);
        if (first == 0) first = reinterpret_cast<std::uintptr_t>(p);
        t.offsets.push_back(reinterpret_cast<std::uintptr_t>(p) - first);
        blocks.push_back({p, stream});
        if (rng() % 8 == 0) {
          a.record_stream(p, reinterpret_cast<stream_t>(std::uintptr_t{4096}));
        }
      } catch (const out_of_memory&) {
        t.offsets.push_back(0);
      }
    } else if (op < 97) {
      const std::size_t i = rng() % blocks.size();
      a.deallocate(blocks[i].ptr, blocks[i].stream);
      blocks[i] = blocks.back();
      blocks.pop_back();
    } else if (op < 99) {
      a.empty_cache();
    } else {
      (void)a.trim(64 * MiB);
    }
    if (step % 100 == 0) {
      t.layouts.push_back(layout(a.snapshot()));
      t.stats.push_back(byte_stats(a.stats()));
    }
  }
  t.layouts.push_back(layout(a.snapshot()));
  t.stats.push_back(byte_stats(a.stats()));
  t.device = a.stats().device;
  return t;
}

TEST(DeviceCostModel, ChangesTimeOnlyNeverBytes) {
  for (const char* kind : {"", ",expandable_segments:1", ",caching:0"}) {
    for (const std::uint64_t seed : {1u, 2u, 3u}) {
      const std::string base = std::string("backend:simulated,capacity:512MiB") + kind;
      const workload_trace on = run_workload(base + ",cost_model:on", seed);
      const workload_trace off = run_workload(base + ",cost_model:off", seed);
      const workload_trace pricey =
          run_workload(base + ",cost_segment_alloc:1s+1s/GiB,cost_chunk_map:1s", seed);
      SCOPED_TRACE(base + " seed " + std::to_string(seed));
      EXPECT_EQ(on.layouts, off.layouts);
      EXPECT_EQ(on.stats, off.stats);
      EXPECT_EQ(on.layouts, pricey.layouts);
      EXPECT_EQ(on.stats, pricey.stats);
      if (std::string(kind) != ",expandable_segments:1") {  // one address space: offsets hold
        EXPECT_EQ(on.offsets, off.offsets);
        EXPECT_EQ(on.offsets, pricey.offsets);
      }
      EXPECT_EQ(on.device.calls, off.device.calls);  // the same calls, priced or not
      EXPECT_GT(on.device.total_ns(), 0u);
      EXPECT_EQ(off.device.total_ns(), 0u);
      EXPECT_GT(pricey.device.total_ns(), on.device.total_ns());
    }
  }
}

}  // namespace
}  // namespace cachalot::testing
