// memory_summary(): every line of the table, rules, titles and the memory-pools section
// included, has the same width, whatever the numbers; the title names the device and the
// backend that serves it; the rows of torch.cuda.memory_summary() that the stats do not keep
// (active and non-releasable blocks, oversize allocations and segments) count the snapshot's
// blocks; the footer counts the streams blocks were allocated on.
#include <gtest/gtest.h>

#include <memory>
#include <sstream>
#include <string>
#include <vector>

#include "cachalot/allocator.hpp"
#include "cachalot/config.hpp"
#include "cachalot/pool.hpp"
#include "cachalot/simulated_device.hpp"

namespace cachalot {
namespace {

std::vector<std::string> lines_of(const std::string& text) {
  std::vector<std::string> out;
  std::istringstream in(text);
  for (std::string l; std::getline(in, l);) out.push_back(l);
  return out;
}

void expect_aligned(const std::string& summary) {
  const std::vector<std::string> lines = lines_of(summary);
  ASSERT_GT(lines.size(), 10u);
  for (const std::string& l : lines) {
    EXPECT_EQ(l.size(), lines[0].size()) << "misaligned line:\n" << l << "\nin\n" << summary;
    EXPECT_EQ(l.front(), '|') << l;
    EXPECT_EQ(l.back(), '|') << l;
  }
}

TEST(MemorySummary, EveryLineHasTheSameWidth) {
  allocator a(config::parse("backend:simulated,capacity:8GiB,memory_limit:6GiB,debug:1"));
  expect_aligned(a.memory_summary());
  std::vector<void*> live;
  for (std::size_t s : {std::size_t{1}, 1000 * KiB, 3 * MiB, 30 * MiB, GiB}) {
    live.push_back(a.allocate(s));
  }
  for (int i = 0; i < 100000; ++i) a.deallocate(a.allocate(512));
  a.deallocate(live[1]);
  expect_aligned(a.memory_summary());
  for (void* p : live) {
    if (p != live[1]) a.deallocate(p);
  }
  expect_aligned(a.memory_summary());
}

TEST(MemorySummary, TitleNamesDeviceAndBackend) {
  allocator a(config::parse("backend:simulated,capacity:8GiB"));
  const std::string s = a.memory_summary();
  EXPECT_NE(s.find("device 0, served by the simulated backend"), std::string::npos) << s;
  EXPECT_NE(s.find("8.00 GiB"), std::string::npos) << s;
}

// The cells of the first row named `name` ("Active allocs"), after `from` (a row name
// before it: for the "from large pool" rows of one group).
std::vector<std::string> cells(const std::string& summary, const std::string& name,
                               const std::string& from = "") {
  std::size_t at = from.empty() ? 0 : summary.find("| " + from);
  at = summary.find(name + " ", at);
  if (at == std::string::npos) return {};
  at = summary.rfind('\n', at) + 1;
  const std::string l = summary.substr(at, summary.find('\n', at) - at);
  std::vector<std::string> out;
  std::istringstream in(l);
  for (std::string c; std::getline(in, c, '|');) {
    const std::size_t b = c.find_first_not_of(' ');
    if (b != std::string::npos) out.push_back(c.substr(b, c.find_last_not_of(' ') - b + 1));
  }
  return std::vector<std::string>(out.begin() + 1, out.end());  // without the name
}

using row = std::vector<std::string>;

stream_t stream(int i) {
  return reinterpret_cast<stream_t>(static_cast<std::uintptr_t>(i * 64));
}

TEST(MemorySummary, PoolSectionIsAsWideAsTheTable) {
  allocator a(config::parse("backend:simulated,capacity:8GiB"));
  pool_options o;
  o.name = "a-tenant-pool-name-longer-than-its-column";
  o.limit = GiB;
  o.guarantee = 256 * MiB;
  o.priority = -3;
  const pool_id p = a.create_pool(o);
  void* x = a.allocate(5 * MiB, stream(1), p);
  const std::string s = a.memory_summary();
  ASSERT_NE(s.find("Memory pools (* released)"), std::string::npos) << s;
  EXPECT_NE(s.find("a-tenant-pool-~"), std::string::npos) << s;
  expect_aligned(s);
  a.deallocate(x);
}

TEST(MemorySummary, StreamsAreTheStreamsAllocatedOn) {
  allocator a(config::parse("backend:simulated,capacity:8GiB"));
  void* p = a.allocate(KiB, stream(1));
  a.record_stream(p, stream(2));  // used there, not allocated there
  EXPECT_NE(a.memory_summary().find("allocation streams: 1"), std::string::npos)
      << a.memory_summary();
  void* q = a.allocate(KiB, stream(2));
  EXPECT_NE(a.memory_summary().find("allocation streams: 2"), std::string::npos)
      << a.memory_summary();
  a.deallocate(p);
  a.deallocate(q);
}

TEST(MemorySummary, PyTorchBlockRowsCountTheBlocks) {
  auto dev = std::make_shared<simulated_device>(sim_options{8 * GiB, false, 512, 0});
  allocator a(config::parse("max_split_size:64MiB"), dev);
  void* small = a.allocate(KiB, stream(1));
  void* large = a.allocate(3 * MiB, stream(1));   // split from a larger segment
  void* huge = a.allocate(100 * MiB, stream(1));  // oversize: at least max_split_size
  a.record_stream(small, stream(2));
  dev->hold_stream(stream(2));
  a.deallocate(small);  // awaits stream 2: still active
  std::string s = a.memory_summary();
  expect_aligned(s);
  //                      current, peak, allocated, freed
  EXPECT_EQ(cells(s, "Active allocs"), (row{"3", "-", "3", "0"})) << s;
  EXPECT_EQ(cells(s, "from large pool", "Active allocs"), (row{"2", "-", "2", "0"})) << s;
  EXPECT_EQ(cells(s, "from small pool", "Active allocs"), (row{"1", "-", "1", "0"})) << s;
  // The free rest of each segment that holds an active block cannot be released.
  EXPECT_EQ(cells(s, "Non-releasable allocs"), (row{"2", "-", "-", "-"})) << s;
  EXPECT_EQ(cells(s, "from large pool", "Non-releasable allocs"), (row{"1", "-", "-", "-"})) << s;
  EXPECT_EQ(cells(s, "from small pool", "Non-releasable allocs"), (row{"1", "-", "-", "-"})) << s;
  EXPECT_EQ(cells(s, "Oversize allocations"), (row{"1", "-", "1", "0"})) << s;
  EXPECT_EQ(cells(s, "Oversize GPU segments"), (row{"1", "-", "-", "-"})) << s;
  dev->release_stream(stream(2));
  a.process_events();
  a.deallocate(huge);
  a.deallocate(large);
  a.empty_cache();
  s = a.memory_summary();
  EXPECT_EQ(cells(s, "Active allocs"), (row{"0", "-", "3", "3"})) << s;
  EXPECT_EQ(cells(s, "Non-releasable allocs"), (row{"0", "-", "-", "-"})) << s;
  EXPECT_EQ(cells(s, "Oversize allocations"), (row{"0", "-", "1", "1"})) << s;
  EXPECT_EQ(cells(s, "Oversize GPU segments"), (row{"0", "-", "-", "-"})) << s;
}

}  // namespace
}  // namespace cachalot
