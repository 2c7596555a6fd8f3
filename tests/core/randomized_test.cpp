// Long randomized sequences of every operation on the simulated device, with host backing so
// that contents are checked: after every step the stats must equal the snapshot sums and the
// device must hold exactly the reserved segments and mapped chunks (fixed and expandable
// segments).
#include <gtest/gtest.h>

#include <cstring>
#include <memory>
#include <random>
#include <vector>

#include "cachalot/allocator.hpp"
#include "cachalot/simulated_device.hpp"
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

void run(const std::string& conf, std::uint64_t seed, int steps) {
  sim_options o;
  o.capacity = 512 * MiB;
  o.host_backing = true;
  auto dev = std::make_shared<simulated_device>(o);
  allocator a(config::parse(conf), dev);
  std::mt19937_64 rng(seed);
  std::vector<live_block> live;
  for (int step = 0; step < steps; ++step) {
    const auto op = static_cast<unsigned>(rng() % 100);
    if (op < 45 || live.empty()) {
      const std::size_t n = random_size(rng);
      try {
        auto* p = static_cast<unsigned char*>(a.allocate(n, s(1 + static_cast<int>(rng() % 3))));
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
    } else if (op < 92) {
      a.record_stream(live[rng() % live.size()].ptr, s(1 + static_cast<int>(rng() % 4)));
    } else if (op < 95) {
      const int st = 1 + static_cast<int>(rng() % 4);
      if (dev->is_held(s(st))) {
        dev->release_stream(s(st));
      } else {
        dev->hold_stream(s(st));
      }
    } else if (op < 97) {
      a.process_events();
    } else if (op < 98) {
      a.empty_cache();
    } else {
      a.trim(rng() % (256 * MiB));
    }
    expect_stats_match_snapshot(a);
    expect_device_matches(a, *dev);
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
  const memory_stats end = a.stats();
  EXPECT_EQ(end.reserved_bytes.all.current, 0u);
  EXPECT_EQ(end.active_bytes.all.current, 0u);
  EXPECT_EQ(end.requested_bytes.all.current, 0u);
  EXPECT_EQ(dev->counters().live_segments, 0u);
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

}  // namespace
}  // namespace cachalot::testing
