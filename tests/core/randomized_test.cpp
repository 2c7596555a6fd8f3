// Long randomized sequences of every operation on the simulated device, with host backing so
// that contents are checked: after every step the stats must equal the snapshot sums and the
// device must hold exactly the reserved segments and mapped chunks (fixed and expandable
// segments, thread-cache lanes, tenant pools and the reserve, in the configurations where they
// combine). All along, a concurrent_checker (support/concurrent_checker.hpp) reads the stats,
// the pools' stats and snapshots from another thread and checks what must hold in every read
// and between reads; peaks are reset through it now and then, and right after a reset every
// peak must equal its current value.
#include <gtest/gtest.h>

#include <algorithm>
#include <chrono>
#include <cstring>
#include <memory>
#include <random>
#include <vector>

#include "cachalot/allocator.hpp"
#include "cachalot/simulated_device.hpp"
#include "support/concurrent_checker.hpp"
#include "support/invariants.hpp"

namespace cachalot::testing {
namespace {

stream_t s(int i) {
  return reinterpret_cast<stream_t>(static_cast<std::uintptr_t>(i * 64));
}

struct live_block {
  unsigned char* ptr;
  std::size_t size;
  unsigned char tag;
};

void fill(const live_block& b) {
  std::memset(b.ptr, b.tag, std::min<std::size_t>(b.size, 64));
  if (b.size > 64) std::memset(b.ptr + b.size - 64, b.tag, 64);
}

void check(const live_block& b) {
  for (std::size_t i = 0; i < std::min<std::size_t>(b.size, 64); ++i) ASSERT_EQ(b.ptr[i], b.tag);
  if (b.size > 64) {
    for (std::size_t i = b.size - 64; i < b.size; ++i) ASSERT_EQ(b.ptr[i], b.tag);
  }
}

std::size_t random_size(std::mt19937_64& rng) {
  switch (rng() % 4) {
    case 0:
      return 1 + rng() % 2048;
    case 1:
      return 1 + rng() % MiB;
    case 2:
      return MiB + rng() % (9 * MiB);
    default:
      return 10 * MiB + rng() % (30 * MiB);
  }
}

/// Every peak of `s` equals its current value (right after a reset, nothing changed since).
void expect_peaks_at_current(const memory_stats& s, const std::string& who) {
  for (const detail_cc::group& g : detail_cc::groups) {
    for (const detail_cc::size_class& c : detail_cc::classes) {
      const stat& st = s.*g.field.*c.field;
      EXPECT_EQ(st.peak, st.current) << who << g.name << " (" << c.name << ") after a reset";
    }
  }
}

/// What a run uses besides its config string.
struct run_options {
  bool pools = false;    ///< tenant pools (limits, a guarantee, priorities), created and released
  bool reserve = false;  ///< the config has a reserve: the device holds it besides the segments
};

void run(const std::string& conf, std::uint64_t seed, int steps, run_options ro = {}) {
  sim_options o;
  o.capacity = 512 * MiB;
  o.host_backing = true;
  auto dev = std::make_shared<simulated_device>(o);
  allocator a(config::parse(conf), dev);
  checker_options co;
  co.pause = std::chrono::microseconds(100);
  co.capacity = o.capacity;
  concurrent_checker watch(a, co);
  std::mt19937_64 rng(seed);
  std::vector<live_block> live;
  std::vector<pool_id> tenants;  // live tenant pools
  const auto new_tenant = [&] {
    pool_options po;
    po.priority = static_cast<int>(rng() % 3) - 1;
    if (rng() % 2 == 0) po.limit = 96 * MiB + rng() % 4 * 32 * MiB;
    if (rng() % 3 == 0) po.guarantee = 32 * MiB;
    tenants.push_back(a.create_pool(po));
  };
  if (ro.pools) {
    for (int i = 0; i < 3; ++i) new_tenant();
  }
  for (int step = 0; step < steps; ++step) {
    const auto op = static_cast<unsigned>(rng() % 100);
    if (op < 45 || live.empty()) {
      const std::size_t n = random_size(rng);
      const stream_t st = s(1 + static_cast<int>(rng() % 3));
      try {
        const std::size_t k = ro.pools ? rng() % (tenants.size() + 1) : 0;
        auto* p = static_cast<unsigned char*>(k == 0 ? a.allocate(n, st)
                                                     : a.allocate(n, st, tenants[k - 1]));
        live.push_back({p, n, static_cast<unsigned char>(step)});
        fill(live.back());
      } catch (const out_of_memory&) {
      }
    } else if (op < 85) {
      const std::size_t k = rng() % live.size();
      check(live[k]);
      if (rng() % 4 == 0) {
        a.deallocate(live[k].ptr, s(1 + static_cast<int>(rng() % 3)));
      } else {
        a.deallocate(live[k].ptr);
      }
      live[k] = live.back();
      live.pop_back();
    } else if (op < 91) {
      a.record_stream(live[rng() % live.size()].ptr, s(1 + static_cast<int>(rng() % 4)));
    } else if (op < 94) {
      const int st = 1 + static_cast<int>(rng() % 4);
      if (dev->is_held(s(st))) {
        dev->release_stream(s(st));
      } else {
        dev->hold_stream(s(st));
      }
    } else if (op < 96) {
      a.process_events();
    } else if (op < 97) {
      a.empty_cache();
    } else if (op < 98) {
      a.trim(rng() % (256 * MiB));
    } else if (op < 99) {
      watch.reset_peak_stats();
      expect_peaks_at_current(a.stats(), "");
      for (const pool_info& p : a.pools()) {
        expect_peaks_at_current(a.stats(p.id), "pool " + std::to_string(p.id) + ": ");
      }
    } else if (ro.pools && !tenants.empty()) {  // a pool goes (its live blocks stay), another comes
      const std::size_t k = rng() % tenants.size();
      a.release_pool(tenants[k]);
      tenants.erase(tenants.begin() + static_cast<std::ptrdiff_t>(k));
      new_tenant();
    }
    expect_stats_match_snapshot(a);
    if (!ro.reserve) {
      expect_device_matches(a, *dev);
    }
    if (::testing::Test::HasFailure()) {
      FAIL() << "invariants broken at step " << step << " (seed " << seed << ")";
    }
  }
  for (const live_block& b : live) {
    check(b);
    a.deallocate(b.ptr);
  }
  for (int st = 1; st <= 4; ++st) dev->release_stream(s(st));
  a.empty_cache();
  watch.stop();
  EXPECT_TRUE(watch.ok()) << watch.report();
  EXPECT_GT(watch.rounds(), 0u);
  const memory_stats end = a.stats();
  EXPECT_EQ(end.reserved_bytes.all.current, 0u);
  EXPECT_EQ(end.active_bytes.all.current, 0u);
  EXPECT_EQ(end.requested_bytes.all.current, 0u);
  EXPECT_EQ(dev->counters().live_segments, ro.reserve ? 1u : 0u);
  EXPECT_EQ(dev->counters().live_chunks, 0u);
  EXPECT_EQ(dev->counters().live_ranges, 0u);
}

TEST(randomized, DefaultConfig) {
  run("", 1, 6000);
}
TEST(randomized, MaxSplitSize) {
  run("max_split_size:24MiB", 2, 6000);
}
TEST(randomized, PassThrough) {
  run("caching:0", 3, 3000);
}
TEST(randomized, TightMemoryLimit) {
  run("memory_limit:96MiB", 4, 6000);
}
TEST(randomized, Expandable) {
  run("expandable_segments:1", 5, 6000);
}
TEST(randomized, ExpandableMaxSplitSize) {
  run("expandable_segments:1,max_split_size:24MiB", 6, 6000);
}
TEST(randomized, ExpandableTightMemoryLimit) {
  run("expandable_segments:1,memory_limit:96MiB", 7, 6000);
}
TEST(randomized, ExpandableChecked) {
  run("expandable_segments:1,debug:1", 8, 500);  // poisoning: 40 MiB blocks
}

// Tenant pools (released and replaced as the run goes), the reserve, and both with expandable
// segments or the thread cache's lanes (on by default; reserve refuses expandable segments).
TEST(randomized, TenantPools) {
  run("memory_limit:448MiB", 9, 5000, {true, false});
}
TEST(randomized, ExpandableTenantPools) {
  run("expandable_segments:1,memory_limit:448MiB", 10, 5000, {true, false});
}
TEST(randomized, Reserve) {
  run("reserve:192MiB,memory_limit:448MiB", 11, 5000, {false, true});
}
TEST(randomized, ReserveTenantPools) {
  run("reserve:192MiB,memory_limit:448MiB", 12, 5000, {true, true});
}
TEST(randomized, NoThreadCache) {
  run("thread_cache:0", 13, 4000);
}

}  // namespace
}  // namespace cachalot::testing
