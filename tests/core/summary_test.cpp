// memory_summary(): every line of the table, rules and titles included, has the same width,
// whatever the numbers; the title names the device and the backend that serves it.
#include <gtest/gtest.h>

#include <sstream>
#include <string>
#include <vector>

#include "cachalot/allocator.hpp"
#include "cachalot/config.hpp"

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

}  // namespace
}  // namespace cachalot
