// Thread stress on the simulated device with host backing: 8 threads, 10^5+ operations,
// own streams and one shared stream, blocks handed to other threads and freed there, contents
// checked before every free. A concurrent_checker (support/concurrent_checker.hpp) reads the
// stats, the pools' stats and snapshots all along (resetting the peaks now and then) and checks
// what must hold in every read and between reads. At the end the stats must match the snapshot
// and, with everything freed, no byte may be allocated. Configurations: the thread cache's
// lanes (on by default), expandable segments, tenant pools, the reserve, pass-through.
#include <gtest/gtest.h>

#include <atomic>
#include <chrono>
#include <cstring>
#include <mutex>
#include <random>
#include <thread>
#include <vector>

#include "cachalot/allocator.hpp"
#include "cachalot/simulated_device.hpp"
#include "support/concurrent_checker.hpp"
#include "support/invariants.hpp"

namespace cachalot::testing {
namespace {

struct handoff {
  std::mutex mutex;
  std::vector<std::pair<unsigned char*, std::size_t>> blocks;
};

void stamp(unsigned char* p, std::size_t n) {
  const auto tag = static_cast<unsigned char>(reinterpret_cast<std::uintptr_t>(p) >> 9);
  p[0] = tag;
  p[n - 1] = tag;
  p[n / 2] = tag;
}

bool stamped(const unsigned char* p, std::size_t n) {
  const auto tag = static_cast<unsigned char>(reinterpret_cast<std::uintptr_t>(p) >> 9);
  return p[0] == tag && p[n - 1] == tag && p[n / 2] == tag;
}

/// `pools`: each thread's own-stream allocations go to one of three tenant pools (a limit, a
/// guarantee, priorities), the shared stream's to the default pool.
void stress(const std::string& conf, int threads, int ops_per_thread, bool pools = false) {
  sim_options o;
  o.capacity = 2 * GiB;
  o.host_backing = true;
  auto dev = std::make_shared<simulated_device>(o);
  allocator a(config::parse(conf), dev);
  std::vector<pool_id> tenants;
  for (int i = 0; pools && i < 3; ++i) {
    pool_options po;
    po.priority = i - 1;
    po.limit = i == 0 ? 256 * MiB : 0;
    po.guarantee = i == 2 ? 128 * MiB : 0;
    tenants.push_back(a.create_pool(po));
  }
  checker_options co;
  co.pause = std::chrono::microseconds(200);
  co.reset_every = 16;
  co.capacity = o.capacity;
  concurrent_checker watch(a, co);
  handoff shared;
  std::atomic<long> corrupt{0};
  std::atomic<long> ops{0};
  std::atomic<long> ooms{0};
  std::vector<std::thread> pool;
  for (int t = 0; t < threads; ++t) {
    pool.emplace_back([&, t] {
      std::mt19937_64 rng(static_cast<std::uint64_t>(t) + 11);
      const stream_t own = reinterpret_cast<stream_t>(static_cast<std::uintptr_t>(0x1000 + t * 64));
      const stream_t common = reinterpret_cast<stream_t>(std::uintptr_t{0x900});
      std::vector<std::pair<unsigned char*, std::size_t>> mine;
      for (int i = 0; i < ops_per_thread; ++i) {
        const auto op = rng() % 10;
        if ((op < 5 && mine.size() < 200) || mine.empty()) {
          const std::size_t n = rng() % 8 == 0 ? MiB + rng() % (4 * MiB) : 1 + rng() % 16384;
          const bool mine_stream = rng() % 2 != 0;
          unsigned char* p = nullptr;
          try {
            p = static_cast<unsigned char*>(
                mine_stream && !tenants.empty()
                    ? a.allocate(n, own, tenants[static_cast<std::size_t>(t) % tenants.size()])
                    : a.allocate(n, mine_stream ? own : common));
          } catch (const out_of_memory&) {  // a pool's limit (tenant pools only)
            ++ooms;
            ++ops;
            continue;
          }
          stamp(p, n);
          mine.emplace_back(p, n);
        } else if (op < 8 || mine.size() >= 200) {
          const std::size_t k = rng() % mine.size();
          if (!stamped(mine[k].first, mine[k].second)) ++corrupt;
          a.deallocate(mine[k].first);
          mine[k] = mine.back();
          mine.pop_back();
        } else if (op < 9) {
          std::lock_guard<std::mutex> lock(shared.mutex);
          shared.blocks.push_back(mine.back());
          mine.pop_back();
        } else {
          std::lock_guard<std::mutex> lock(shared.mutex);
          if (!shared.blocks.empty()) {
            mine.push_back(shared.blocks.back());
            shared.blocks.pop_back();
          }
        }
        ++ops;
      }
      for (auto& [p, n] : mine) {
        if (!stamped(p, n)) ++corrupt;
        a.deallocate(p);
      }
    });
  }
  for (auto& th : pool) th.join();
  for (auto& [p, n] : shared.blocks) {
    if (!stamped(p, n)) ++corrupt;
    a.deallocate(p);
  }
  watch.stop();
  EXPECT_TRUE(watch.ok()) << watch.report();
  EXPECT_GT(watch.rounds(), 0u);
  EXPECT_EQ(corrupt.load(), 0);
  if (!pools) {
    EXPECT_EQ(ooms.load(), 0);
  }
  EXPECT_GE(ops.load(), static_cast<long>(threads) * ops_per_thread);
  const memory_stats s = a.stats();
  EXPECT_EQ(s.allocated_bytes.all.current, 0u);
  EXPECT_EQ(s.requested_bytes.all.current, 0u);
  EXPECT_EQ(s.num_allocs, s.num_frees);
  expect_stats_match_snapshot(a);
  if (conf.find("reserve") == std::string::npos) {
    expect_device_matches(a, *dev);
  }
}

#if defined(__SANITIZE_THREAD__)
constexpr int ops_per_thread = 4000;
#else
constexpr int ops_per_thread = 15000;
#endif

TEST(thread_stress, EightThreadsOwnAndSharedStreams) {
  stress("", 8, ops_per_thread);
}
TEST(thread_stress, EightThreadsPassThrough) {
  stress("caching:0", 8, ops_per_thread / 5);
}
TEST(thread_stress, EightThreadsExpandable) {
  stress("expandable_segments:1", 8, ops_per_thread / 2);
}
TEST(thread_stress, EightThreadsTenantPools) {
  stress("memory_limit:1536MiB", 8, ops_per_thread / 2, true);
}
TEST(thread_stress, EightThreadsExpandableTenantPools) {
  stress("expandable_segments:1,memory_limit:1536MiB", 8, ops_per_thread / 2, true);
}
TEST(thread_stress, EightThreadsReserveTenantPools) {
  stress("reserve:512MiB,memory_limit:1536MiB", 8, ops_per_thread / 2, true);
}

}  // namespace
}  // namespace cachalot::testing
