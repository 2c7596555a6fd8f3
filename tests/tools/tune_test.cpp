// cachalot-replay --tune: the search finds a setting known by construction, gives the same
// result whatever the threads and the early stopping, composes a CACHALOT_CONF that parses, and
// the command line refuses what does not go together (exit 2).
#include <gtest/gtest.h>

#include <unistd.h>

#include <filesystem>
#include <fstream>
#include <iomanip>
#include <sstream>
#include <string>
#include <vector>

#include "cachalot/errors.hpp"
#include "trace/cli.hpp"
#include "trace/tune.hpp"
#include "trace/tune_report.hpp"

namespace cachalot::tools {
namespace {

namespace fs = std::filesystem;

/// Six 6 MiB tensors (two 20 MiB segments with the defaults), four freed so that each segment
/// keeps one live tensor, then 16 MiB. On a 40 MiB device the defaults cannot place the 16 MiB
/// (both segments are pinned, the device is full): one out-of-memory error. With mid_size 4 MiB
/// and large_segment 8 MiB each 6 MiB tensor gets its own segment, the freed ones go back to the
/// device and the 16 MiB fits: no error, and 36 MiB reserved at the peak, the trace's own peak.
std::string fragmenting_trace() {
  std::ostringstream t;
  t << "Thread,Time,Action,Pointer,Size,Stream\n";
  int time = 0;
  const auto ev = [&](const char* action, unsigned long ptr, std::size_t size) {
    t << "1,00:00:00." << std::setw(6) << std::setfill('0') << ++time << ',' << action << ",0x"
      << std::hex << ptr << std::dec << ',' << size << ",0x0\n";
  };
  for (int i = 1; i <= 6; ++i) ev("allocate", 0x1000000ul * i, 6 * MiB);
  for (int i : {1, 2, 4, 5}) ev("free", 0x1000000ul * i, 6 * MiB);
  ev("allocate", 0x90000000ul, 16 * MiB);
  ev("free", 0x90000000ul, 16 * MiB);
  for (int i : {3, 6}) ev("free", 0x1000000ul * i, 6 * MiB);
  return t.str();
}

/// 48 tensors of 2.5 MiB (120 MiB), two of every three freed, then 24 MiB, on a 128 MiB device.
/// Every fixed-segment layout keeps a live tensor in each segment (8 per 20 MiB segment, 3 per
/// 8 MiB, 12 per 32 MiB), so nothing can be given back and 24 MiB do not fit; expandable
/// segments unmap the 2 MiB chunks freed between the live tensors (one per three tensors) and
/// serve it.
std::string pinned_segments_trace() {
  std::ostringstream t;
  t << "Thread,Time,Action,Pointer,Size,Stream\n";
  const auto ev = [&](const char* action, unsigned long ptr, std::size_t size) {
    t << "1,00:00:01.000000," << action << ",0x" << std::hex << ptr << std::dec << ',' << size
      << ",0x0\n";
  };
  const std::size_t size = 5 * MiB / 2;
  for (unsigned long i = 0; i < 48; ++i) ev("allocate", 0x10000000ul + i * 0x1000000ul, size);
  for (unsigned long i = 0; i < 48; ++i) {
    if (i % 3 != 0) ev("free", 0x10000000ul + i * 0x1000000ul, size);
  }
  ev("allocate", 0x9000000000ul, 24 * MiB);
  ev("free", 0x9000000000ul, 24 * MiB);
  for (unsigned long i = 0; i < 48; i += 3) ev("free", 0x10000000ul + i * 0x1000000ul, size);
  return t.str();
}

prepared_trace prepared_text(const std::string& text, const std::string& name) {
  return prepare(parse_trace_text(text, name));
}

config base_at(std::size_t capacity) {
  config c = config::parse("backend:simulated");
  c.capacity = capacity;
  return c;
}

TEST(Tune, FindsTheSegmentSizesThatAvoidTheOutOfMemory) {
  const prepared_trace p = prepared_text(fragmenting_trace(), "frag.csv");
  ASSERT_EQ(p.summary.peak_requested_bytes, 36 * MiB);
  const tune_result r = tune({&p}, {base_at(40 * MiB)}, tune_options{});
  EXPECT_EQ(r.base.score.ooms, 1u);
  EXPECT_EQ(r.base.runs.at(0).ooms, 1u);
  EXPECT_EQ(r.best.score.ooms, 0u);
  EXPECT_EQ(r.best.runs.at(0).peak_reserved, 36 * MiB);
  EXPECT_EQ(setting_string(r.best.setting), "mid_size:4MiB,large_segment:8MiB");
  // The recommendation replays as reported.
  const config conf =
      config::parse("backend:simulated,capacity:40MiB," + recommended_conf("", r.best.setting));
  const replay_result again = replay_at(p, conf, 40 * MiB);
  EXPECT_EQ(again.ooms, 0u);
  EXPECT_EQ(again.peak_reserved, 36 * MiB);
}

TEST(Tune, FindsExpandableSegmentsWhenNoFixedLayoutFits) {
  const prepared_trace p = prepared_text(pinned_segments_trace(), "pinned.csv");
  const config base = base_at(128 * MiB);
  // By construction: every fixed-segment setting of the searched space refuses an allocation.
  std::size_t fixed = 0;
  for (const std::size_t split :
       {std::size_t{32} * MiB, SIZE_MAX, std::size_t{64} * MiB, std::size_t{128} * MiB,
        std::size_t{256} * MiB, std::size_t{1024} * MiB}) {
    for (const double gc : {0.9, 0.0, 0.8, 0.7, 0.6, 0.5}) {
      for (const std::uint32_t div : {0u, 2u, 4u, 8u}) {
        for (std::size_t family = 0; family < tune_segment_families().size(); ++family) {
          for (const bool eager : {false, true}) {  // (release_policy is searched too)
            const tune_setting s{false, split, gc, eager, div, family};
            const config c = apply_setting(base, s);
            try {
              c.validate();
            } catch (const invalid_argument&) {
              continue;
            }
            ++fixed;
            EXPECT_GT(replay_at(p, c, 128 * MiB).ooms, 0u) << setting_string(s);
          }
        }
      }
    }
  }
  EXPECT_GT(fixed, 500u);
  const tune_result r = tune({&p}, {base}, tune_options{});
  EXPECT_EQ(r.base.score.ooms, 1u);
  EXPECT_EQ(r.best.score.ooms, 0u);
  EXPECT_TRUE(r.best.setting.expandable);
  EXPECT_EQ(setting_string(r.best.setting), "expandable_segments:1,gc_threshold:off");
}

TEST(Tune, SameResultWhateverThreadsAndEarlyStop) {
  const trace t = load_trace(std::string(CACHALOT_TRACES_DIR) + "/llm_training.csv");
  const prepared_trace a = prepare(t);
  const prepared_trace b = prepared_text(fragmenting_trace(), "frag.csv");
  config ca = replay_config("", a.summary, 1.3);
  config cb = base_at(40 * MiB);
  tune_options serial;
  serial.threads = 1;
  serial.prune = false;
  tune_options parallel;
  parallel.threads = 3;
  const tune_result x = tune({&a, &b}, {ca, cb}, serial);
  const tune_result y = tune({&a, &b}, {ca, cb}, parallel);
  EXPECT_EQ(x.stopped, 0u);
  EXPECT_TRUE(x.best.setting == y.best.setting) << setting_string(y.best.setting);
  EXPECT_EQ(x.replayed, y.replayed);
  EXPECT_EQ(x.rounds, y.rounds);
  for (const auto* c : {&x, &y}) ASSERT_EQ(c->best.runs.size(), 2u);
  for (std::size_t i = 0; i < 2; ++i) {
    EXPECT_EQ(x.best.runs[i].peak_reserved, y.best.runs[i].peak_reserved);
    EXPECT_EQ(x.best.runs[i].ooms, y.best.runs[i].ooms);
    EXPECT_EQ(device_calls(x.best.runs[i]), device_calls(y.best.runs[i]));
    EXPECT_EQ(x.base.runs[i].peak_reserved, y.base.runs[i].peak_reserved);
  }
  // Never worse than the base on the objective.
  EXPECT_LE(x.best.score.ooms, x.base.score.ooms);
  if (x.best.score.ooms == x.base.score.ooms) {
    EXPECT_LE(x.best.score.cost, x.base.score.cost);
  }
}

TEST(Tune, WeightTradesMemoryForDeviceCalls) {
  const trace t = load_trace(std::string(CACHALOT_TRACES_DIR) + "/llm_training.csv");
  const prepared_trace p = prepare(t);
  const config base = replay_config("", p.summary, 2.0);
  const tune_result free_calls = tune({&p}, {base}, tune_options{});
  tune_options costly;
  costly.weight = 1 * GiB;  // one call is worth more than any saving here
  const tune_result dear = tune({&p}, {base}, costly);
  EXPECT_LT(free_calls.best.runs[0].peak_reserved, free_calls.base.runs[0].peak_reserved);
  EXPECT_LE(device_calls(dear.best.runs[0]), device_calls(dear.base.runs[0]));
  EXPECT_LE(device_calls(dear.best.runs[0]), device_calls(free_calls.best.runs[0]));
}

TEST(Tune, TraceCostWeighsBytesAgainstModeledTime) {
  // 3 MiB rounds up to 4 MiB (2 MiB steps); 10 calls at 1 KiB; 2.5 modeled ms at 1 MiB/ms.
  EXPECT_EQ(trace_cost(3 * MiB, 10, 2500000, 2 * MiB, KiB, static_cast<double>(MiB)),
            4 * MiB + 10 * KiB + 5 * MiB / 2);
  EXPECT_EQ(trace_cost(3 * MiB, 10, 2500000, 2 * MiB, 0, 0.0), 4 * MiB);
  trace_summary s;
  s.peak_requested_bytes = 100 * MiB;
  s.span_us = 50000;  // 50 ms: 2 MiB per ms
  EXPECT_DOUBLE_EQ(auto_time_weight(s), static_cast<double>(2 * MiB));
  s.span_us = 0;
  EXPECT_EQ(auto_time_weight(s), 0.0);
}

TEST(Tune, TimeWeightTradesMemoryForDeviceTime) {
  const trace t = load_trace(std::string(CACHALOT_TRACES_DIR) + "/llm_training.csv");
  const prepared_trace p = prepare(t);
  const config base = replay_config("", p.summary, 2.0);
  const tune_result bytes_only = tune({&p}, {base}, tune_options{});
  tune_options timed;
  timed.time_weight = {1e15};  // a modeled millisecond is worth more than any saving here
  const tune_result time_first = tune({&p}, {base}, timed);
  const auto ms = [](const tune_candidate& c) { return c.runs.at(0).device_ms(); };
  EXPECT_LT(bytes_only.best.runs[0].peak_reserved, bytes_only.base.runs[0].peak_reserved);
  EXPECT_LT(ms(time_first.best), ms(time_first.base));
  EXPECT_LT(ms(time_first.best), ms(bytes_only.best));
  // The auto weight sits in between: never more device time than bytes alone would spend,
  // never more memory than time alone would reserve.
  tune_options balanced;
  balanced.time_weight = {auto_time_weight(p.summary)};
  const tune_result mid = tune({&p}, {base}, balanced);
  EXPECT_LE(ms(mid.best), ms(bytes_only.best));
  EXPECT_LE(mid.best.runs[0].peak_reserved, time_first.best.runs[0].peak_reserved);
}

TEST(Tune, TimeWeightedSearchIsTheSameWhateverThreads) {
  const trace t = load_trace(std::string(CACHALOT_TRACES_DIR) + "/llm_training.csv");
  const prepared_trace a = prepare(t);
  const config ca = replay_config("", a.summary, 1.3);
  tune_options serial;
  serial.threads = 1;
  serial.prune = false;
  serial.time_weight = {auto_time_weight(a.summary)};
  tune_options parallel = serial;
  parallel.threads = 3;
  parallel.prune = true;
  const tune_result x = tune({&a}, {ca}, serial);
  const tune_result y = tune({&a}, {ca}, parallel);
  EXPECT_TRUE(x.best.setting == y.best.setting) << setting_string(y.best.setting);
  EXPECT_EQ(x.best.score.cost, y.best.score.cost);
  EXPECT_EQ(x.best.runs.at(0).device.total_ns(), y.best.runs.at(0).device.total_ns());
  EXPECT_EQ(x.replayed, y.replayed);
}

TEST(Tune, AHugeWeightSaturatesInsteadOfWrapping) {
  // weight x device calls beyond 64 bits must saturate: any weight worth more than every peak
  // makes the fewest device calls win (issue 18: SIZE_MAX x calls wrapped, and the config with
  // the most calls looked cheapest).
  const trace t = load_trace(std::string(CACHALOT_TRACES_DIR) + "/llm_training.csv");
  const prepared_trace p = prepare(t);
  const config base = replay_config("", p.summary, 2.0);
  for (std::size_t weight : {SIZE_MAX, SIZE_MAX / 3, std::size_t{1} << 63}) {
    tune_options costly;
    costly.weight = weight;
    const tune_result dear = tune({&p}, {base}, costly);
    ASSERT_EQ(dear.best.runs.size(), 1u) << weight;
    EXPECT_LE(device_calls(dear.best.runs[0]), device_calls(dear.base.runs[0])) << weight;
    EXPECT_GE(dear.best.score.cost, dear.best.score.calls) << weight;  // no wrapped sum
  }
}

TEST(Tune, RecommendedConfKeepsTheUsersOtherKeys) {
  tune_setting s;
  s.expandable = true;
  s.gc_threshold = 0.0;
  EXPECT_EQ(recommended_conf("backend:simulated, capacity:1GiB,debug:1,max_split_size_mb:64,"
                             "roundup_power2_divisions:[256:1,>:4],trace_file:/tmp/t%d.csv",
                             s),
            "debug:1,trace_file:/tmp/t%d.csv,expandable_segments:1,gc_threshold:off");
  tune_setting d;
  EXPECT_EQ(recommended_conf("", d), "");
  d.max_split_size = SIZE_MAX;
  d.divisions = 4;
  d.segments = 3;
  const std::string conf = recommended_conf("", d);
  EXPECT_EQ(conf, "max_split_size:none,roundup_power2_divisions:4,small_size:512KiB");
  EXPECT_TRUE(apply_setting(config{}, d) == config::parse(conf));
  EXPECT_TRUE(tunable(config::parse(conf)));
  EXPECT_FALSE(tunable(config::parse("roundup_power2_divisions:[256:1,>:4]")));
  EXPECT_FALSE(tunable(config::parse("large_segment:64MiB,max_split_size:128MiB")));
}

TEST(Tune, SearchesSizeBands) {
  tune_setting s;
  s.bands = band_mode::eager;
  EXPECT_EQ(setting_string(s), "size_bands:eager");
  EXPECT_TRUE(apply_setting(config{}, s) == config::parse("size_bands:eager"));
  EXPECT_EQ(setting_of(config::parse("size_bands:off")).bands, band_mode::off);
  // The tuned keys the user gave are replaced by the recommendation, not kept beside it.
  EXPECT_EQ(recommended_conf("size_bands:off,release_policy:eager,debug:1", tune_setting{}),
            "debug:1");
  EXPECT_EQ(recommended_conf("size_bands:off", s), "size_bands:eager");
  // large_chunk: searched with expandable segments only, and said only with them.
  tune_setting e;
  e.expandable = true;
  e.large_chunk = 20 * MiB;
  EXPECT_EQ(setting_string(e), "expandable_segments:1,large_chunk:20MiB");
  EXPECT_TRUE(apply_setting(config{}, e) ==
              config::parse("expandable_segments:1,large_chunk:20MiB"));
  e.expandable = false;
  EXPECT_EQ(setting_string(e), "");
}

TEST(Tune, EveryCandidateValidatesOrIsSkipped) {
  // large-mid has a 32 MiB large segment: max_split_size 32 MiB is refused with it.
  tune_setting s;
  s.segments = 2;
  EXPECT_THROW(apply_setting(config{}, s).validate(), invalid_argument);
  s.max_split_size = 64 * MiB;
  EXPECT_NO_THROW(apply_setting(config{}, s).validate());
}

class TuneCli : public ::testing::Test {
 protected:
  void SetUp() override {
    dir_ = fs::temp_directory_path() / ("cachalot_tune_" + std::to_string(getpid()));
    fs::create_directories(dir_);
    trace_ = (dir_ / "frag.csv").string();
    std::ofstream(trace_) << fragmenting_trace();
  }
  void TearDown() override { fs::remove_all(dir_); }
  int cli(std::vector<std::string> args) {
    out_.str("");
    err_.str("");
    return replay_cli(args, out_, err_);
  }
  /// The output without what depends on timing (the first line, ns per op).
  std::string stable_output() {
    std::istringstream in(out_.str());
    std::string line, kept;
    while (std::getline(in, line)) {
      if (line.rfind("cachalot-replay --tune:", 0) == 0 || line.find("ns per op") != line.npos) {
        continue;
      }
      kept += line + "\n";
    }
    return kept;
  }

  fs::path dir_;
  std::string trace_;
  std::ostringstream out_, err_;
};

TEST_F(TuneCli, PrintsTheLineAndTheComparisonTheSameEachRun) {
  ASSERT_EQ(cli({"--tune", "--capacity", "40MiB", "--repeat", "1", trace_}), 0) << err_.str();
  const std::string first = stable_output();
  for (const char* text :
       // (release_policy is searched too: at 40 MiB, just above the trace's peak, the default
       // makes no more calls than release_policy:eager once an out-of-memory retry no longer
       // tries a growth the device cannot hold, so only the segment sizes are recommended.)
       {"CACHALOT_CONF=mid_size:4MiB,large_segment:8MiB\n", "out of memory at 40.00 MiB",
        "smallest capacity without OOM", "36.00 MiB (1.000x)", "segment allocs / frees",
        "chunk maps / unmaps",
        "recommendation avoids 1 of the default's 1 out-of-memory errors at the capacity, saves "
        "4.00 MiB of peak reserved (10.0%) (the default's peak covers only what it served), needs "
        "20.00 MiB less capacity; costs 8 more device calls"}) {
    EXPECT_NE(first.find(text), std::string::npos) << text << "\n" << first;
  }
  ASSERT_EQ(cli({"--tune", "--capacity=40MiB", "--repeat", "1", "--jobs", "1", trace_}), 0);
  EXPECT_EQ(stable_output(), first);
  EXPECT_NE(first.find("modeled device time"), std::string::npos) << first;
  EXPECT_NE(first.find("time weight auto"), std::string::npos) << first;
  ASSERT_EQ(cli({"--tune", "--capacity", "40MiB", "--repeat", "1", "--tune-time-weight", "64MiB/ms",
                 trace_}),
            0)
      << err_.str();
  EXPECT_NE(out_.str().find("time weight 64.00 MiB/ms"), std::string::npos) << out_.str();
  ASSERT_EQ(cli({"--tune", "--capacity", "40MiB", "--repeat", "1", "--json", trace_}), 0);
  const std::string json = out_.str();
  EXPECT_NE(json.find("\"time_weight\":\"auto\""), json.npos) << json;
  EXPECT_NE(json.find("\"time_weight_bytes_per_ms\":"), json.npos) << json;
  EXPECT_NE(json.find("\"device_ms\":"), json.npos) << json;
  EXPECT_NE(json.find("\"recommended\":\"mid_size:4MiB,large_segment:8MiB\""), json.npos) << json;
  EXPECT_NE(json.find("\"recommended_is_default\":false"), json.npos);
  EXPECT_NE(json.find("\"ooms\":1,"), json.npos);
  // The configs replayed, whole: the default, and the default with the recommendation applied.
  EXPECT_NE(json.find("\"default_config\":\"backend:simulated,device:0,capacity:41943040B,"),
            json.npos)
      << json;
  const std::size_t at = json.find("\"recommended_config\":\"");
  ASSERT_NE(at, json.npos) << json;
  const std::string best = json.substr(at + 22, json.find('"', at + 22) - at - 22);
  EXPECT_NE(best.find("large_segment:8388608B"), best.npos) << best;
  EXPECT_NE(best.find("mid_size:4194304B"), best.npos) << best;
  EXPECT_NE(best.find("capacity:41943040B"), best.npos) << best;
}

TEST_F(TuneCli, RefusesWhatDoesNotGoTogether) {
  const std::vector<std::vector<std::string>> bad = {
      {"--tune", "--plot", (dir_ / "p.svg").string(), trace_},
      {"--tune", "--min-capacity", trace_},
      {"--tune-weight", "1MiB", trace_},
      {"--tune-time-weight", "auto", trace_},
      {"--tune", "--tune-time-weight", "fast", trace_},
      {"--tune", "--tune-time-weight", "-1MiB/ms", trace_},
      {"--jobs", "2", trace_},
      {"--capacity", "40MiB", "--config", "capacity:1GiB", trace_},
      {"--capacity", "0", trace_},
      {"--capacity", "lots", trace_},
      {"--tune", "--config", "caching:0", trace_},
      {"--tune", "--config", "large_segment:64MiB,max_split_size:none", trace_},
  };
  for (const auto& args : bad) {
    EXPECT_EQ(cli(args), 2) << args[0] << " " << args[1] << "\n" << out_.str();
    EXPECT_NE(err_.str().find("cachalot-replay: "), std::string::npos) << err_.str();
  }
}

TEST(ReplayStop, StopsWhereAsked) {
  const prepared_trace p = prepared_text(fragmenting_trace(), "frag.csv");
  replay_options ro;
  ro.use_threads = false;
  ro.stop = [](const memory_stats&, std::size_t) { return true; };
  // The check runs every 4096 operations: a 14-op trace completes.
  EXPECT_FALSE(replay(p, base_at(40 * MiB), ro).stopped);
  std::string big = "Thread,Time,Action,Pointer,Size,Stream\n";
  for (int i = 0; i < 5000; ++i) {
    big += "1,00:00:00.000001,allocate,0x" + std::to_string(1000 + i) + "0,512,0x0\n";
  }
  const prepared_trace q = prepared_text(big, "big.csv");
  const replay_result r = replay(q, base_at(40 * MiB), ro);
  EXPECT_TRUE(r.stopped);
  EXPECT_EQ(r.peak_requested, 4096u * 512u);
}

}  // namespace
}  // namespace cachalot::tools
