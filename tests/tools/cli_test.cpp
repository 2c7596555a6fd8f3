// The cachalot-replay command line: text and JSON output, plots, gzip-compressed traces, and
// errors (malformed traces name file and line with exit status 2; sizes need a unit, counts
// are whole numbers, numbers are range-checked and quoted as given), in-process and through
// the real executable.
#include <gtest/gtest.h>

#include <sys/wait.h>
#include <unistd.h>

#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <sstream>
#include <string>
#include <vector>

#include "cachalot/config.hpp"
#include "cachalot/version.h"
#include "trace/cli.hpp"
#include "trace/report.hpp"

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

TEST_F(ReplayCli, JsonHasTheDeviceTimeNextToBytes) {
  ASSERT_EQ(cli({"--json", "--repeat", "1", "--config", "capacity:64MiB", good_trace()}), 0)
      << err_.str();
  const std::string json = out_.str();
  // Time next to bytes: the trace's span and the modeled device time of both replays (a 2 MiB
  // and a 20 MiB cuMemAlloc at 50us+1ms/GiB: 121,484 ns; the pass-through: 1,000 + 3,000,000 B
  // segments, freed with the implied device synchronizations).
  EXPECT_NE(json.find("\"trace_span_us\":4,"), std::string::npos) << json;
  EXPECT_NE(json.find("\"device_ms\":0.1215,\"device_ms_per_1k_ops\":30.3710,"
                      "\"device_span_share\":30.3710,\"device\":{\"timing\":\"modeled\","
                      "\"total_ns\":121484,\"calls\":2,\"syncs\":0,"),
            std::string::npos)
      << json;
  EXPECT_NE(json.find("\"by_kind\":{\"segment_alloc\":{\"calls\":2,\"ns\":121484},"),
            std::string::npos)
      << json;
  const std::size_t base = json.find("\"baseline\":");
  ASSERT_NE(base, std::string::npos);
  EXPECT_NE(json.find("\"segment_free\":{\"calls\":2,", base), std::string::npos) << json;
  EXPECT_NE(json.find("\"implied_syncs\":2,\"implied_sync_ns\":10000,", base), std::string::npos)
      << json;
}

TEST_F(ReplayCli, JsonNamesEveryKeyOfTheCostModel) {
  // Every latency, defaults included, so that saved figures priced by another tool (the PyTorch
  // peer, scripts/snapshot_table.py --pytorch-figures) can be refused when the model changed.
  ASSERT_EQ(cli({"--json", "--repeat", "1", "--no-baseline", good_trace()}), 0) << err_.str();
  EXPECT_NE(out_.str().find("\"cost_model\":\"cost_model:on,cost_segment_alloc:50us+1ms/GiB,"
                            "cost_segment_free:30us+500us/GiB,cost_range_reserve:12us,"),
            std::string::npos)
      << out_.str();
  EXPECT_NE(out_.str().find(",cost_host_free:20us+50ms/GiB\","), std::string::npos) << out_.str();
  out_.str("");
  ASSERT_EQ(cli({"--json", "--repeat", "1", "--no-baseline", "--config",
                 "cost_model:off,cost_chunk_map:1ms", good_trace()}),
            0)
      << err_.str();
  EXPECT_NE(out_.str().find("\"cost_model\":\"cost_model:off,"), std::string::npos) << out_.str();
  EXPECT_NE(out_.str().find(",cost_chunk_map:1ms,"), std::string::npos) << out_.str();
}

TEST_F(ReplayCli, TextReportShowsDeviceTimeNextToBytes) {
  ASSERT_EQ(cli({"--repeat", "1", "--config", "capacity:64MiB", good_trace()}), 0) << err_.str();
  const std::string text = out_.str();
  for (const char* row :
       {"device calls", "device syncs (explicit / implied)", "device time (modeled)",
        "per 1,000 ops", "share of the trace's span", "3037.10% of 0.0 ms", "  cuMemAlloc ",
        "2 calls, 0.121 ms", "chunk maps / unmaps"}) {
    EXPECT_NE(text.find(row), std::string::npos) << row << "\n" << text;
  }
  ASSERT_EQ(cli({"--repeat", "1", "--config", "cost_model:off", good_trace()}), 0) << err_.str();
  EXPECT_NE(out_.str().find("device time (not kept)"), std::string::npos) << out_.str();
  EXPECT_EQ(cli({"--repeat", "1", "--config", "cost_chunk_map:5", good_trace()}), 2);
  EXPECT_NE(err_.str().find("config key 'cost_chunk_map'"), std::string::npos) << err_.str();
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
  for (const char* label :
       {"requested", "allocated", "reserved", "memory (MiB)", "operations", "pass-through reserved",
        "reserved - requested", "allocated - requested", "pass-through reserved - requested",
        "over requested", "capacity "}) {
    EXPECT_NE(doc.find(label), std::string::npos) << label;
  }
}

TEST_F(ReplayCli, TimelineIsTheMemoryAfterEachOperation) {
  const std::string csv = (dir_ / "timeline.csv").string();
  ASSERT_EQ(cli({"--repeat", "1", "--json", "--config", "capacity:64MiB", "--timeline", csv,
                 good_trace()}),
            0)
      << err_.str();
  EXPECT_NE(out_.str().find("\"timeline\":\"" + csv + "\""), std::string::npos) << out_.str();
  std::ifstream in(csv);
  std::vector<std::string> lines;
  for (std::string line; std::getline(in, line);) lines.push_back(line);
  // 4 operations replayed (the free of 0x4444 is skipped at preparation): 1,000 B in a 2 MiB
  // small segment, 3,000,000 B in a 20 MiB one, then the frees (cached, still reserved)
  ASSERT_EQ(lines, (std::vector<std::string>{"op,requested,allocated,reserved", "0,0,0,0",
                                             "1,1000,1024,2097152", "2,3001000,3001344,23068672",
                                             "3,3000000,3000320,23068672", "4,0,0,23068672"}));
  const std::string bad = (dir_ / "no-such-dir" / "t.csv").string();
  EXPECT_EQ(cli({"--repeat", "1", "--timeline", bad, good_trace()}), 2);
  EXPECT_NE(err_.str().find("--timeline: cannot write " + bad), std::string::npos) << err_.str();
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
  EXPECT_NE(out_.str().find("--min-capacity"), std::string::npos);
}

TEST_F(ReplayCli, RefusedAllocationsMarkTheRunIncomplete) {
  const std::string t = write("oom.csv",
                              "Thread,Time,Action,Pointer,Size,Stream\n"
                              "1,10:00:00.000001,allocate,0x1000,40000000,0x0\n"
                              "1,10:00:00.000002,allocate,0x2000,1000,0x0\n"
                              "1,10:00:00.000003,allocate,0x3000,0,0x0\n"
                              "1,10:00:00.000004,free,0x3000,0,0x0\n"
                              "1,10:00:00.000005,free,0x1000,40000000,0x0\n"
                              "1,10:00:00.000006,free,0x2000,1000,0x0\n");
  ASSERT_EQ(cli({"--json", "--repeat=1", "--config=capacity:16MiB", t}), 0) << err_.str();
  const std::string json = out_.str();
  EXPECT_NE(json.find("\"complete\":false,"), std::string::npos) << json;
  EXPECT_NE(json.find("\"fragmentation\":null,\"ooms\":1,"), std::string::npos) << json;
  EXPECT_NE(json.find("\"skipped_frees\":1,\"zero_size_allocations\":1,"), std::string::npos)
      << json;
  ASSERT_EQ(cli({"--repeat=1", "--config=capacity:16MiB", t}), 0) << err_.str();
  EXPECT_NE(out_.str().find("INCOMPLETE (cachalot): 1 allocations refused"), std::string::npos)
      << out_.str();
  EXPECT_NE(out_.str().find("n/a (1 refused)"), std::string::npos) << out_.str();
  const std::string svg = (dir_ / "oom.svg").string();
  ASSERT_EQ(cli({"--repeat=1", "--config=capacity:16MiB", "--plot=" + svg, t}), 0);
  std::ifstream in(svg);
  const std::string doc((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
  EXPECT_NE(doc.find("INCOMPLETE: 1 allocations refused"), std::string::npos);
}

TEST_F(ReplayCli, CompleteRunsSayComplete) {
  ASSERT_EQ(cli({"--json", "--repeat", "1", good_trace()}), 0) << err_.str();
  EXPECT_NE(out_.str().find("\"complete\":true,"), std::string::npos) << out_.str();
  EXPECT_NE(out_.str().find("\"version\":\"" CACHALOT_VERSION_STRING "\","), std::string::npos)
      << out_.str();
}

TEST_F(ReplayCli, OutOfRangeNumbersAreRefusedWithExit2) {
  for (const char* f : {"1e300", "inf", "nan", "-1", "0", "1e400", "1e7"}) {
    EXPECT_EQ(cli({"--capacity-factor", f, good_trace()}), 2) << f;
    EXPECT_TRUE(out_.str().empty()) << f;
    EXPECT_NE(err_.str().find(std::string("--capacity-factor: bad value '") + f +
                              "' (want a number above 0 and at most 1e+06)"),
              std::string::npos)
        << err_.str();
    EXPECT_EQ(err_.str().find("0000000000"), std::string::npos) << "no 300-digit echo";
  }
  const std::string gib = write("gib.csv",
                                "Thread,Time,Action,Pointer,Size,Stream\n"
                                "1,10:00:00.000001,allocate,0x1000,1073741824,0x0\n");
  EXPECT_EQ(cli({"--capacity-factor", "1e5", gib}), 2);
  EXPECT_NE(err_.str().find("--capacity-factor 100000 x the trace's peak (1.00 GiB) is beyond the "
                            "largest simulated capacity"),
            std::string::npos)
      << err_.str();
  const std::string huge = write("huge.csv",
                                 "Thread,Time,Action,Pointer,Size,Stream\n"
                                 "1,10:00:00.000001,allocate,0x1000,18446744073709551615,0x0\n");
  EXPECT_EQ(cli({huge}), 2);
  EXPECT_NE(err_.str().find(huge + ":2: size beyond any device"), std::string::npos) << err_.str();
}

TEST_F(ReplayCli, OptionSyntax) {
  const std::string t = good_trace();
  ASSERT_EQ(cli({"--json", "--repeat=1", "--capacity-factor=3", "--no-baseline", t}), 0)
      << err_.str();
  EXPECT_EQ(out_.str().find("\"baseline\""), std::string::npos);
  EXPECT_EQ(cli({"--json=1", t}), 2);
  EXPECT_NE(err_.str().find("--json takes no value"), std::string::npos);
  EXPECT_EQ(cli({"--repeat=", t}), 2);
  // After --, a name that starts with a dash is a trace.
  const std::string dashed = (dir_ / "-dashed.csv").string();
  std::filesystem::copy_file(t, dashed, std::filesystem::copy_options::overwrite_existing);
  const auto cwd = std::filesystem::current_path();
  std::filesystem::current_path(dir_);
  const int rc = cli({"--repeat", "1", "--", "-dashed.csv"});
  std::filesystem::current_path(cwd);
  EXPECT_EQ(rc, 0) << err_.str();
  EXPECT_EQ(cli({"--version"}), 0);
  EXPECT_EQ(out_.str(), "cachalot-replay (cachalot) " CACHALOT_VERSION_STRING "\n");
  EXPECT_EQ(cli({"-", "-"}), 2);
}

TEST_F(ReplayCli, FileErrorsGiveTheReason) {
  EXPECT_EQ(cli({(dir_ / "missing.csv").string()}), 2);
  EXPECT_NE(err_.str().find("missing.csv: cannot open: No such file or directory"),
            std::string::npos)
      << err_.str();
  EXPECT_EQ(err_.str().find(":0:"), std::string::npos) << "no line 0: " << err_.str();
  EXPECT_EQ(cli({dir_.string()}), 2);
  EXPECT_NE(err_.str().find("Is a directory"), std::string::npos) << err_.str();
}

TEST_F(ReplayCli, SizesNeedAUnitAsInTheConfig) {
  EXPECT_EQ(cli({"--capacity", "10", good_trace()}), 2);
  EXPECT_NE(err_.str().find("--capacity: '10' has no unit and would mean 10 bytes; write e.g. "
                            "10GiB or 10MiB, or 10B for bytes"),
            std::string::npos)
      << err_.str();
  EXPECT_EQ(cli({"--tune", "--tune-weight", "4096", good_trace()}), 2);
  EXPECT_NE(err_.str().find("--tune-weight: '4096' has no unit"), std::string::npos) << err_.str();
  EXPECT_EQ(cli({"--capacity", "0", good_trace()}), 2);
  EXPECT_EQ(cli({"--capacity", "1e9", good_trace()}), 2);
  ASSERT_EQ(cli({"--json", "--repeat", "1", "--capacity", "4194304B", good_trace()}), 0)
      << err_.str();
  EXPECT_NE(out_.str().find("\"capacity_bytes\":4194304,"), std::string::npos) << out_.str();
  ASSERT_EQ(cli({"--json", "--repeat", "1", "--capacity", "8MiB", good_trace()}), 0);
  EXPECT_NE(out_.str().find("\"capacity_bytes\":8388608,"), std::string::npos) << out_.str();
}

TEST_F(ReplayCli, CountsAreWholeNumbers) {
  ASSERT_EQ(cli({"--json", "--no-baseline", "--repeat", "1e2", good_trace()}), 0) << err_.str();
  EXPECT_NE(out_.str().find("\"repeat\":100,"), std::string::npos) << out_.str();
  EXPECT_EQ(cli({"--repeat", "2.5", good_trace()}), 2);
  EXPECT_NE(err_.str().find("--repeat: '2.5' is not a whole number"), std::string::npos)
      << err_.str();
  EXPECT_EQ(cli({"--repeat", "1e7", good_trace()}), 2);
  EXPECT_NE(err_.str().find("--repeat: '1e7' is out of range (1 to 1000000)"), std::string::npos)
      << err_.str();
  EXPECT_EQ(cli({"--repeat", "three", good_trace()}), 2);
  EXPECT_NE(err_.str().find("want a whole number"), std::string::npos) << err_.str();
  EXPECT_EQ(cli({"--tune", "--jobs", "1e9", good_trace()}), 2);
  EXPECT_NE(err_.str().find("--jobs: '1e9' is out of range (1 to 4096)"), std::string::npos)
      << err_.str();
}

TEST_F(ReplayCli, PlotsAreSvgOnly) {
  const std::string png = (dir_ / "out.png").string();
  EXPECT_EQ(cli({"--repeat", "1", "--plot", png, good_trace()}), 2);
  EXPECT_NE(err_.str().find("--plot " + png + ": cachalot-replay writes SVG only"),
            std::string::npos)
      << err_.str();
  EXPECT_FALSE(fs::exists(png)) << "nothing written";
  EXPECT_TRUE(out_.str().empty());
}

TEST_F(ReplayCli, JsonCarriesTheConfigReplayed) {
  ASSERT_EQ(cli({"--json", "--repeat", "1", "--config", "max_split_size:64MiB", good_trace()}), 0)
      << err_.str();
  const std::string json = out_.str();
  const std::size_t at = json.find("\"config\":\"backend:simulated,");
  ASSERT_NE(at, std::string::npos) << json;
  const std::string conf = json.substr(at + 10, json.find('"', at + 10) - at - 10);
  EXPECT_NE(conf.find("max_split_size:67108864B"), std::string::npos) << conf;
  EXPECT_NE(conf.find("capacity:"), std::string::npos) << conf;
  // It is a config cachalot reads back as the one replayed.
  EXPECT_EQ(config::parse(conf).to_string(), conf);
}

TEST_F(ReplayCli, AllocationsOfLivePointersAreNamed) {
  std::string text = "Thread,Time,Action,Pointer,Size,Stream\n";
  text += "1,10:00:00.000001,allocate,0x1000,100,0x0\n";                              // line 2
  for (int i = 0; i < 4; ++i) text += "1,10:00:00.000002,allocate,0x1000,100,0x0\n";  // 3..6
  const std::string t = write("dup.csv", text);
  ASSERT_EQ(cli({"--repeat", "1", t}), 0) << err_.str();
  const std::string named =
      "4 allocations of pointers already live (replayed as new allocations; the live one is "
      "never freed): 0x1000 at line 3 (live since line 2), 0x1000 at line 4 (live since line 2), "
      "0x1000 at line 5 (live since line 2) and 1 more";
  EXPECT_NE(out_.str().find(named), std::string::npos) << out_.str();
  EXPECT_NE(err_.str().find("warning: " + t + ": " + named), std::string::npos) << err_.str();
  ASSERT_EQ(cli({"--json", "--repeat", "1", t}), 0);
  EXPECT_NE(out_.str().find("\"duplicate_allocations\":4,\"duplicates\":[{\"pointer\":\"0x1000\","
                            "\"line\":3,\"live_since_line\":2},"),
            std::string::npos)
      << out_.str();
}

TEST_F(ReplayCli, GzipTracesAreReadThroughGzip) {
  const std::string plain = good_trace();
  if (std::system(("gzip -kf " + plain + " 2>/dev/null").c_str()) != 0) {
    GTEST_SKIP() << "no gzip on this machine";
  }
  ASSERT_EQ(cli({"--json", "--repeat", "1", plain}), 0) << err_.str();
  const std::string want = out_.str().substr(out_.str().find("\"repeat\""), 200);
  ASSERT_EQ(cli({"--json", "--repeat", "1", plain + ".gz"}), 0) << err_.str();
  EXPECT_NE(out_.str().find("\"trace\":\"" + plain + ".gz\""), std::string::npos);
  EXPECT_EQ(out_.str().substr(out_.str().find("\"repeat\""), 200), want) << "same trace";
  const std::string bad = write("bad.csv.gz", "not compressed\n");
  EXPECT_EQ(cli({bad}), 2);
  EXPECT_NE(err_.str().find(bad + ": cannot decompress (gzip -dc): gzip: "), std::string::npos)
      << err_.str();
  EXPECT_NE(err_.str().find("not in gzip format"), std::string::npos) << err_.str();
  // A malformed line inside is named as in a plain trace.
  const std::string broken = write("broken.csv", "Thread,Time,Action,Pointer,Size,Stream\n1,2\n");
  ASSERT_EQ(std::system(("gzip -kf " + broken).c_str()), 0);
  EXPECT_EQ(cli({broken + ".gz"}), 2);
  EXPECT_NE(err_.str().find(broken + ".gz:2: expected 6 comma-separated fields"), std::string::npos)
      << err_.str();
  // Without gzip on PATH, the message says so.
  const std::string path = std::getenv("PATH") != nullptr ? std::getenv("PATH") : "";
  setenv("PATH", dir_.c_str(), 1);
  const int rc = cli({plain + ".gz"});
  setenv("PATH", path.c_str(), 1);
  EXPECT_EQ(rc, 2);
  EXPECT_NE(err_.str().find("cannot decompress: gzip cannot be run"), std::string::npos)
      << err_.str();
}

TEST_F(ReplayCli, HelpDefinesTheColumns) {
  ASSERT_EQ(cli({"--help"}), 0);
  EXPECT_NE(out_.str().find("fragmentation (peak\nreserved / peak requested"), std::string::npos)
      << out_.str();
  EXPECT_NE(out_.str().find(".gz"), std::string::npos);
}

TEST_F(ReplayCli, OneOfAThingIsSingular) {
  ASSERT_EQ(cli({"--repeat", "1", good_trace()}), 0) << err_.str();
  EXPECT_NE(out_.str().find("  5 ops, 1 thread, 2 streams,"), std::string::npos) << out_.str();
  EXPECT_EQ(out_.str().find("1 threads"), std::string::npos) << out_.str();
}

TEST_F(ReplayCli, ByteOrderMarks) {
  const std::string bom = write("bom.csv",
                                "\xEF\xBB\xBFThread,Time,Action,Pointer,Size,Stream\n"
                                "1,10:00:00.000001,allocate,0x1000,1000,0x0\n"
                                "1,10:00:00.000002,free,0x1000,1000,0x0\n");
  EXPECT_EQ(cli({"--repeat", "1", bom}), 0) << err_.str();
  const std::string utf16 = write("utf16.csv", std::string("\xFF\xFET\0h\0", 6));
  EXPECT_EQ(cli({utf16}), 2);
  EXPECT_NE(err_.str().find("UTF-16"), std::string::npos) << err_.str();
}

TEST_F(ReplayCli, UnwritablePlotFailsBeforeAnyReplay) {
  const std::string bad = (dir_ / "no-such-dir" / "plot.svg").string();
  EXPECT_EQ(cli({"--repeat", "1", "--plot", bad, good_trace()}), 2);
  EXPECT_TRUE(out_.str().empty()) << "nothing replayed: " << out_.str();
  EXPECT_NE(err_.str().find("cannot write " + bad + ": No such file or directory"),
            std::string::npos)
      << err_.str();
}

TEST_F(ReplayCli, MinCapacityIsReported) {
  ASSERT_EQ(cli({"--json", "--repeat=1", "--min-capacity", good_trace()}), 0) << err_.str();
  const std::string json = out_.str();
  EXPECT_NE(json.find("\"min_capacity\":{\"found\":true,\"bytes\":"), std::string::npos) << json;
  ASSERT_EQ(cli({"--repeat=1", "--min-capacity", good_trace()}), 0) << err_.str();
  EXPECT_NE(out_.str().find("smallest capacity without refusals: "), std::string::npos)
      << out_.str();
  EXPECT_EQ(cli({"--min-capacity", "--config", "capacity:1GiB", good_trace()}), 2);
  EXPECT_NE(err_.str().find("leave backend and capacity out"), std::string::npos) << err_.str();
}

TEST_F(ReplayCli, TableColumnsNeverRunTogether) {
  trace_report r;
  r.trace = "t.csv";
  r.result.backend = "simulated";
  r.result.segment_allocs = 123456789012;
  r.result.segment_frees = 123456789012;
  r.result.ns_per_op = 123456789.5;
  r.result.wall_ns = 9.9e15;
  r.baseline = r.result;
  r.baseline->ooms = 77777777777;
  const std::string text = format_text(r);
  std::istringstream in(text);
  std::string l;
  std::getline(in, l);
  std::getline(in, l);
  int rows = 0;
  while (std::getline(in, l)) {
    if (l.rfind("  INCOMPLETE", 0) == 0 || l.empty()) continue;
    // Name, cachalot, pass-through: three cells separated by at least two spaces.
    std::vector<std::string> cells;
    std::size_t i = 0;
    while (i < l.size()) {
      while (i < l.size() && l[i] == ' ') ++i;
      std::size_t j = i;
      while (j < l.size() && !(l[j] == ' ' && j + 1 < l.size() && l[j + 1] == ' ')) ++j;
      if (j > i) cells.push_back(l.substr(i, j - i));
      i = j;
    }
    EXPECT_EQ(cells.size(), rows == 0 ? 2u : 3u) << "line: '" << l << "'\n" << text;
    ++rows;
  }
  EXPECT_GE(rows, 8);
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

  // "-" reads the trace from standard input.
  const std::string json = (dir_ / "stdin.json").string();
  const int piped = std::system((std::string(CACHALOT_REPLAY_EXE) + " --json --repeat=1 - <" +
                                 good_trace() + " >" + json + " 2>/dev/null")
                                    .c_str());
  ASSERT_TRUE(WIFEXITED(piped));
  EXPECT_EQ(WEXITSTATUS(piped), 0);
  std::ifstream j(json);
  const std::string line((std::istreambuf_iterator<char>(j)), std::istreambuf_iterator<char>());
  EXPECT_NE(line.find("\"trace\":\"stdin\""), std::string::npos) << line;
  EXPECT_NE(line.find("\"ops\":4,"), std::string::npos) << line;
}

}  // namespace
}  // namespace cachalot::tools
