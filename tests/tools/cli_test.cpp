// The cachalot-replay command line: text and JSON output, plots, and errors (malformed traces
// name file and line with exit status 2), in-process and through the real executable.
#include <gtest/gtest.h>

#include <sys/wait.h>
#include <unistd.h>

#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <sstream>
#include <string>

#include "trace/cli.hpp"

namespace cachalot::tools {
namespace {

namespace fs = std::filesystem;

class ReplayCli : public ::testing::Test {
 protected:
  void SetUp() override {
    dir_ = fs::temp_directory_path() / ("cachalot_cli_" + std::to_string(getpid()));
    fs::create_directories(dir_);
  }
  void TearDown() override { fs::remove_all(dir_); }

  std::string write(const std::string& name, const std::string& text) {
    const std::string path = (dir_ / name).string();
    std::ofstream(path) << text;
    return path;
  }
  int cli(std::vector<std::string> args) {
    out_.str("");
    err_.str("");
    return replay_cli(args, out_, err_);
  }
  std::string good_trace() {
    return write("good.csv",
                 "Thread,Time,Action,Pointer,Size,Stream\n"
                 "1,10:00:00.000001,allocate,0x1000,1000,0x0\n"
                 "1,10:00:00.000002,allocate,0x2000,3000000,0x7\n"
                 "1,10:00:00.000003,free,0x1000,1000,0x0\n"
                 "1,10:00:00.000004,free,0x4444,16,0x0\n"
                 "1,10:00:00.000005,free,0x2000,3000000,0x7\n");
  }

  fs::path dir_;
  std::ostringstream out_, err_;
};

TEST_F(ReplayCli, JsonHasTheReportedKeys) {
  ASSERT_EQ(cli({"--json", "--repeat", "2", good_trace()}), 0) << err_.str();
  const std::string json = out_.str();
  EXPECT_EQ(json.front(), '{');
  EXPECT_EQ(json.find('\n'), json.size() - 1) << "one object on one line";
  for (const char* key : {"ops", "peak_requested_bytes", "peak_allocated_bytes",
                          "peak_reserved_bytes", "fragmentation", "ooms", "segment_allocs",
                          "segment_frees", "ns_per_op", "wall_ms", "baseline", "unknown_frees"}) {
    EXPECT_NE(json.find(std::string("\"") + key + "\":"), std::string::npos) << key;
  }
  EXPECT_NE(json.find("\"ops\":4,"), std::string::npos) << json;
  EXPECT_NE(json.find("\"peak_requested_bytes\":3001000,"), std::string::npos) << json;
  EXPECT_NE(json.find("\"unknown_frees\":1,"), std::string::npos) << json;
  EXPECT_NE(err_.str().find("1 frees of pointers not allocated"), std::string::npos);
}

TEST_F(ReplayCli, TextReportShowsBothAllocators) {
  ASSERT_EQ(cli({"--repeat", "1", "--config", "capacity:64MiB", good_trace()}), 0) << err_.str();
  const std::string text = out_.str();
  for (const char* word : {"cachalot", "pass-through", "peak reserved", "fragmentation",
                           "out of memory", "ns per op", "64.00 MiB"}) {
    EXPECT_NE(text.find(word), std::string::npos) << word << "\n" << text;
  }
}

TEST_F(ReplayCli, PlotIsAnSvgWithLegend) {
  const std::string svg = (dir_ / "plot.svg").string();
  ASSERT_EQ(cli({"--repeat", "1", "--plot", svg, good_trace()}), 0) << err_.str();
  std::ifstream in(svg);
  const std::string doc((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
  EXPECT_NE(doc.find("<svg"), std::string::npos);
  EXPECT_NE(doc.find("</svg>"), std::string::npos);
  for (const char* label : {"requested", "allocated", "reserved", "memory (MiB)", "operations"}) {
    EXPECT_NE(doc.find(label), std::string::npos) << label;
  }
}

TEST_F(ReplayCli, MalformedTraceNamesFileAndLine) {
  const std::string bad = write("bad.csv",
                                "Thread,Time,Action,Pointer,Size,Stream\n"
                                "1,10:00:00.000001,allocate,0x1000,1000,0x0\n"
                                "1,10:00:00.000002,allocate,0x2000,lots,0x0\n");
  EXPECT_EQ(cli({good_trace(), bad}), 2);
  EXPECT_NE(err_.str().find(bad + ":3: bad size 'lots'"), std::string::npos) << err_.str();
  EXPECT_TRUE(out_.str().empty()) << "nothing replayed before every trace parsed";
}

TEST_F(ReplayCli, UsageErrorsExitWith2) {
  EXPECT_EQ(cli({}), 2);
  EXPECT_EQ(cli({"--repeat", "0", good_trace()}), 2);
  EXPECT_EQ(cli({"--bogus", good_trace()}), 2);
  EXPECT_EQ(cli({"--config", "nonsense_key:1", good_trace()}), 2);
  EXPECT_EQ(cli({(dir_ / "missing.csv").string()}), 2);
  EXPECT_EQ(cli({"--help"}), 0);
}

TEST_F(ReplayCli, ExecutableExitStatus) {
  const std::string bad = write("bad.csv", "Thread,Time,Action,Pointer,Size,Stream\n1,2,3\n");
  const std::string err = (dir_ / "err.txt").string();
  const int status =
      std::system((std::string(CACHALOT_REPLAY_EXE) + " " + bad + " 2>" + err).c_str());
  ASSERT_TRUE(WIFEXITED(status));
  EXPECT_EQ(WEXITSTATUS(status), 2);
  std::ifstream in(err);
  const std::string msg((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
  EXPECT_NE(msg.find(bad + ":2:"), std::string::npos) << msg;

  const int ok = std::system(
      (std::string(CACHALOT_REPLAY_EXE) + " --json --repeat 1 " + good_trace() + " >/dev/null 2>&1")
          .c_str());
  ASSERT_TRUE(WIFEXITED(ok));
  EXPECT_EQ(WEXITSTATUS(ok), 0);
}

}  // namespace
}  // namespace cachalot::tools
