// The config as an allocator uses it: the resolved limit kept in get_config() (so that its
// string parses back), keys the engine does not support yet refused at start, one trace file
// per allocator (the %d placeholder; a shared file is refused before anything is truncated),
// the Thread column holding the OS thread id.
#include <gtest/gtest.h>
#include <sys/syscall.h>
#include <unistd.h>

#include <filesystem>
#include <fstream>
#include <string>
#include <thread>
#include <unordered_map>

#include "cachalot/allocator.hpp"
#include "cachalot/config.hpp"
#include "cachalot/errors.hpp"
#include "cachalot/simulated_device.hpp"
#include "reliability/invariants.hpp"

namespace cachalot {
namespace {

namespace fs = std::filesystem;

std::string read_file(const fs::path& p) {
  std::ifstream in(p);
  return std::string((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
}

TEST(ConfigInUse, GetConfigKeepsTheResolvedLimitAndRoundTrips) {
  allocator a(config::parse("backend:simulated,capacity:4GiB,memory_limit:50%"));
  EXPECT_EQ(a.get_config().memory_limit, 2 * GiB);
  EXPECT_EQ(a.get_config().memory_fraction, 0.0);
  const config back = config::parse(a.get_config().to_string());
  EXPECT_EQ(back, a.get_config()) << a.get_config().to_string();
  allocator b(back);
  EXPECT_EQ(b.get_config(), a.get_config());
}

TEST(ConfigInUse, ResolvedLimitMustHoldASegment) {
  // 0.1 % of 4 GiB is about 4 MiB: below one 20 MiB large segment.
  EXPECT_THROW(allocator(config::parse("backend:simulated,capacity:4GiB,memory_limit:0.1%")),
               invalid_argument);
}

TEST(ConfigInUse, ExpandableSegmentsNeedVirtualMemoryAndAreNeverIgnored) {
  sim_options o;
  o.capacity = GiB;
  o.virtual_memory = false;
  try {
    allocator a(config::parse("backend:simulated,capacity:1GiB,expandable_segments:1"),
                std::make_shared<simulated_device>(o));
    ADD_FAILURE() << "expandable_segments:1 was accepted on a backend without virtual memory";
  } catch (const not_supported& e) {
    EXPECT_NE(std::string(e.what()).find("expandable_segments"), std::string::npos) << e.what();
  }
  allocator a(config::parse("backend:simulated,capacity:1GiB,expandable_segments:1"));
  a.deallocate(a.allocate(3 * MiB));
  EXPECT_GT(a.stats().num_chunk_maps, 0u);
}

TEST(ConfigInUse, SmallSegmentAtMaxSplitSizeIsRefusedAtStart) {
  config c = config::parse("backend:simulated,capacity:1GiB");
  c.small_segment_size = 64 * MiB;
  c.max_split_size = 50 * MiB;
  EXPECT_THROW(allocator{c}, invalid_argument);
}

// The case of issue 9 at the edge of what is now valid: small segments of 64 MiB just under
// max_split_size. Four small allocate/free pairs on one stream, then a 50 MiB request: nothing
// small is oversize, the large request gets a large-pool segment, and the stats agree with the
// snapshot at every step (the invalid form, max_split_size 50 MiB, wrapped small-pool stats).
TEST(ConfigInUse, SmallSegmentsJustBelowMaxSplitSizeKeepExactStats) {
  sim_options o;
  o.capacity = GiB;
  auto sim = std::make_shared<simulated_device>(o);
  allocator a(config::parse("backend:simulated,capacity:1GiB,small_segment:64MiB,"
                            "max_split_size:65MiB"),
              sim);
  std::unordered_map<void*, std::size_t> live;
  for (int i = 0; i < 4; ++i) {
    void* p = a.allocate(4096);
    live[p] = 4096;
    ASSERT_EQ(testing::check_invariants(a, sim.get(), live), "");
    a.deallocate(p);
    live.erase(p);
    ASSERT_EQ(testing::check_invariants(a, sim.get(), live), "");
  }
  void* big = a.allocate(50 * MiB);
  live[big] = 50 * MiB;
  EXPECT_EQ(testing::check_invariants(a, sim.get(), live), "");
  const memory_stats s = a.stats();
  EXPECT_EQ(s.allocated_bytes.small.current, 0u);
  EXPECT_EQ(s.allocated_bytes.large.current, 50 * MiB);
  EXPECT_EQ(s.num_oversize_allocs, 0u);
  a.deallocate(big);
  live.clear();
  EXPECT_EQ(testing::check_invariants(a, sim.get(), live), "");
  EXPECT_EQ(a.stats().allocated_bytes.small.peak, 4096u);
}

class TraceFiles : public ::testing::Test {
 protected:
  void SetUp() override {
    dir_ = fs::temp_directory_path() / ("cachalot_trace_" + std::to_string(getpid()));
    fs::create_directories(dir_);
  }
  void TearDown() override { fs::remove_all(dir_); }
  fs::path dir_;
};

TEST_F(TraceFiles, PlaceholderGivesEachDeviceItsOwnFile) {
  const std::string pattern = (dir_ / "t-%d.csv").string();
  {
    sim_options o;
    o.capacity = GiB;
    o.device = 0;
    allocator a0(config::parse("capacity:1GiB,trace_file:" + pattern),
                 std::make_shared<simulated_device>(o));
    o.device = 1;
    allocator a1(config::parse("capacity:1GiB,trace_file:" + pattern),
                 std::make_shared<simulated_device>(o));
    a0.deallocate(a0.allocate(1000));
    a1.deallocate(a1.allocate(2000));
  }
  const std::string t0 = read_file(dir_ / "t-0.csv");
  const std::string t1 = read_file(dir_ / "t-1.csv");
  EXPECT_NE(t0.find(",allocate,"), std::string::npos) << t0;
  EXPECT_NE(t0.find(",1000,"), std::string::npos) << t0;
  EXPECT_EQ(t0.find(",2000,"), std::string::npos) << t0;
  EXPECT_NE(t1.find(",2000,"), std::string::npos) << t1;
}

TEST_F(TraceFiles, TwoAllocatorsOnOneFileAreRefusedWithoutTruncatingIt) {
  const std::string path = (dir_ / "shared.csv").string();
  allocator first(config::parse("backend:simulated,capacity:1GiB,trace_file:" + path));
  first.deallocate(first.allocate(4096));
  try {
    allocator second(config::parse("backend:simulated,capacity:1GiB,trace_file:" + path));
    ADD_FAILURE() << "a second writer of the same file was accepted";
  } catch (const invalid_argument& e) {
    EXPECT_NE(std::string(e.what()).find("%d"), std::string::npos) << e.what();
  }
  first.deallocate(first.allocate(8192));
  // Another spelling of the same file is the same file.
  const std::string other = (dir_ / "." / "shared.csv").string();
  EXPECT_THROW(allocator(config::parse("backend:simulated,capacity:1GiB,trace_file:" + other)),
               invalid_argument);
  first.deallocate(first.allocate(1));  // still writable
}

TEST_F(TraceFiles, ThreadColumnIsTheOsThreadId) {
  const std::string path = (dir_ / "tid.csv").string();
  long main_tid = static_cast<long>(::syscall(SYS_gettid));
  long worker_tid = 0;
  {
    allocator a(config::parse("backend:simulated,capacity:1GiB,trace_file:" + path));
    a.deallocate(a.allocate(512));
    std::thread([&] {
      worker_tid = static_cast<long>(::syscall(SYS_gettid));
      a.deallocate(a.allocate(1024));
    }).join();
  }
  const std::string text = read_file(path);
  EXPECT_NE(text.find("\n" + std::to_string(main_tid) + ","), std::string::npos) << text;
  EXPECT_NE(text.find("\n" + std::to_string(worker_tid) + ","), std::string::npos) << text;
  EXPECT_NE(main_tid, worker_tid);
}

}  // namespace
}  // namespace cachalot
