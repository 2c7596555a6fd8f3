// Parsing of RMM-format traces: valid lines, summaries, and every kind of malformed input
// giving an error that names the file and the line.
#include <gtest/gtest.h>

#include <string>

#include "trace/trace.hpp"

namespace cachalot::tools {
namespace {

const std::string header = "Thread,Time,Action,Pointer,Size,Stream\n";

TEST(TraceParse, ReadsEveryField) {
  const trace t =
      parse_trace_text(header +
                           "140071234,12:03:04.123456,allocate,0x7f0000000000,1024,0x0\n"
                           "7,00:00:01.5,free,0x7f0000000000,1024,0x55aa\r\n"
                           "\n"
                           "7,23:59:59.000001,allocate failure,(nil),4096,55aa\n",
                       "t.csv");
  ASSERT_EQ(t.events.size(), 3u);
  const trace_event& a = t.events[0];
  EXPECT_EQ(a.thread, 140071234u);
  EXPECT_EQ(a.time_us, ((12ull * 60 + 3) * 60 + 4) * 1000000ull + 123456ull);
  EXPECT_EQ(a.action, trace_action::allocate);
  EXPECT_EQ(a.pointer, 0x7f0000000000u);
  EXPECT_EQ(a.size, 1024u);
  EXPECT_EQ(a.stream, 0u);
  EXPECT_EQ(a.line, 2u);
  EXPECT_EQ(t.events[1].time_us, 1500000u);
  EXPECT_EQ(t.events[1].stream, 0x55aau);
  EXPECT_EQ(t.events[2].action, trace_action::allocate_failure);
  EXPECT_EQ(t.events[2].pointer, 0u);
  EXPECT_EQ(t.events[2].stream, 0x55aau);
  EXPECT_EQ(t.events[2].line, 5u);
}

TEST(TraceParse, CommentsCarryPyTorchFigures) {
  const trace t = parse_trace_text(
      "# converted from a PyTorch memory snapshot\n"
      "# pytorch.peak_reserved: 67108864\n"
      "# pytorch.peak_reserved_kind: exact\n" +
          header +
          "# a comment between events\n"
          "1,00:00:00.000010,allocate,0x7f0000000000,1024,0x1000\n",
      "t.csv");
  ASSERT_EQ(t.events.size(), 1u);
  EXPECT_EQ(t.events[0].line, 6u);
  EXPECT_TRUE(t.pytorch.present);
  EXPECT_EQ(t.pytorch.peak_reserved, 64u << 20);
  EXPECT_TRUE(t.pytorch.exact);
  EXPECT_EQ(summarize(t).pytorch.peak_reserved, 64u << 20);

  const trace plain =
      parse_trace_text("# pytorch.peak_reserved_kind: lower-bound\n" + header, "p.csv");
  EXPECT_FALSE(plain.pytorch.present);
  EXPECT_FALSE(plain.pytorch.exact);
  try {
    (void)parse_trace_text("# pytorch.peak_reserved: 12x\n" + header, "bad.csv");
    FAIL() << "a bad figure was accepted";
  } catch (const trace_error& e) {
    EXPECT_EQ(e.line(), 1u);
    EXPECT_NE(std::string(e.what()).find("bad pytorch.peak_reserved '12x'"), std::string::npos);
  }
}

TEST(TraceParse, SiteColumnNamesTheCodeThatHoldsMemory) {
  const trace t = parse_trace_text(
      "# site 1: /job/model.py:54 forward\n"
      "# site 2: (autograd) DivBackward0\n"
      "Thread,Time,Action,Pointer,Size,Stream,Site\n"
      "1,00:00:00.000001,allocate,0x1000,100,0x0,1\n"
      "1,00:00:00.000002,allocate,0x2000,300,0x0,2\n"
      "1,00:00:00.000003,allocate,0x3000,50,0x0,\n"
      "1,00:00:00.000004,allocate,0x4000,30,0x0,1\n"
      "1,00:00:00.000005,free,0x2000,300,0x0,\n"
      "1,00:00:00.000006,free,0x4000,30,0x0,\n"
      "# site 3: defined after the header: /job/train.py:9 main\n"
      "# site notes: a remark, not a site\n"
      "1,00:00:00.000007,allocate,0x5000,10,0x0,3\n",
      "s.csv");
  ASSERT_EQ(t.events.size(), 7u);
  EXPECT_EQ(t.events[6].line, 12u);
  EXPECT_EQ(t.events[0].site, 1u);
  EXPECT_EQ(t.events[1].site, 2u);
  EXPECT_EQ(t.events[2].site, 0u);
  EXPECT_EQ(t.events[4].site, 0u);
  ASSERT_EQ(t.sites.size(), 4u);
  EXPECT_EQ(t.sites[1], "/job/model.py:54 forward");
  EXPECT_EQ(t.sites[3], "defined after the header: /job/train.py:9 main");
  const trace_summary s = summarize(t);
  EXPECT_EQ(s.peak_requested_bytes, 480u);  // after the fourth allocation
  EXPECT_EQ(s.live_at_end_bytes, 160u);
  ASSERT_EQ(s.peak_holders.size(), 3u);  // most bytes first, allocations without a site too
  EXPECT_EQ(s.peak_holders[0].site, "(autograd) DivBackward0");
  EXPECT_EQ(s.peak_holders[0].bytes, 300u);
  EXPECT_EQ(s.peak_holders[1].site, "/job/model.py:54 forward");
  EXPECT_EQ(s.peak_holders[1].bytes, 130u);
  EXPECT_EQ(s.peak_holders[1].allocations, 2u);
  EXPECT_EQ(s.peak_holders[2].site, "(no site)");
  EXPECT_EQ(s.peak_holders[2].bytes, 50u);
  // a trace without sites lists no holders
  EXPECT_TRUE(summarize(parse_trace_text(header + "1,00:00:00.1,allocate,0x1,8,0x0\n", "p.csv"))
                  .peak_holders.empty());
}

TEST(TraceParse, SummaryFindsPeakAndAnomalies) {
  const trace t = parse_trace_text(header +
                                       "1,00:00:00.000001,allocate,0x1000,100,0x0\n"
                                       "1,00:00:00.000002,allocate,0x2000,300,0x1\n"
                                       "2,00:00:00.000003,free,0x1000,100,0x0\n"
                                       "2,00:00:00.000004,free,0x9999,8,0x0\n"
                                       "1,00:00:00.000005,allocate,0x3000,50,0x0\n"
                                       "1,00:00:00.000006,allocate failure,0x0,999,0x0\n",
                                   "s.csv");
  const trace_summary s = summarize(t);
  EXPECT_EQ(s.ops, 5u);
  EXPECT_EQ(s.allocations, 3u);
  EXPECT_EQ(s.frees, 2u);
  EXPECT_EQ(s.unknown_frees, 1u);
  EXPECT_EQ(s.recorded_failures, 1u);
  EXPECT_EQ(s.threads, 2u);
  EXPECT_EQ(s.streams, 2u);
  EXPECT_EQ(s.peak_requested_bytes, 400u);
  EXPECT_EQ(s.largest_allocation, 300u);
}

TEST(TraceParse, SummaryGivesTheTracesOwnSpan) {
  const auto span = [](const std::string& times) {
    std::string text = "Thread,Time,Action,Pointer,Size,Stream\n";
    std::size_t ptr = 0x1000;
    for (std::size_t at = 0; at < times.size();) {
      const std::size_t end = times.find(' ', at);
      const std::string t = times.substr(at, end == std::string::npos ? end : end - at);
      text += "1," + t + ",allocate,0x" + std::to_string(ptr++) + ",16,0x0\n";
      at = end == std::string::npos ? times.size() : end + 1;
    }
    return summarize(parse_trace_text(text, "span.csv")).span_us;
  };
  EXPECT_EQ(span("09:00:00.000010"), 0u);
  EXPECT_EQ(span("09:00:00.000010 09:00:00.332630"), 332620u);
  // Lines of several threads a little out of order: the span runs from the earliest to the
  // latest time.
  EXPECT_EQ(span("09:00:00.000100 09:00:00.000050 09:00:01.000000 09:00:00.900000"), 999950u);
  // Past midnight: 23:59:59.5 to 00:00:00.25 is 0.75 s.
  EXPECT_EQ(span("23:59:59.500000 00:00:00.250000"), 750000u);
}

TEST(TraceParse, HeaderOnlyIsAnEmptyTrace) {
  EXPECT_TRUE(parse_trace_text(header, "h.csv").events.empty());
}

struct malformed_case {
  const char* text;
  std::size_t line;
};

class TraceMalformed : public ::testing::TestWithParam<malformed_case> {};

TEST_P(TraceMalformed, NamesFileAndLine) {
  const malformed_case& c = GetParam();
  try {
    parse_trace_text(c.text, "bad.csv");
    FAIL() << "no error for: " << c.text;
  } catch (const trace_error& e) {
    EXPECT_EQ(e.file(), "bad.csv");
    EXPECT_EQ(e.line(), c.line);
    EXPECT_NE(std::string(e.what()).find("bad.csv:" + std::to_string(c.line) + ": "),
              std::string::npos)
        << e.what();
  }
}

INSTANTIATE_TEST_SUITE_P(
    Inputs, TraceMalformed,
    ::testing::Values(
        malformed_case{"", 1}, malformed_case{"Thread,Time,Action\n", 1},
        malformed_case{"Thread,Time,Action,Pointer,Size,Stream\n1,00:00:00.1,allocate,0x10,8\n", 2},
        malformed_case{"Thread,Time,Action,Pointer,Size,Stream\n\n1,0:0:0.1,free,0x1,8,0x0,9\n", 3},
        malformed_case{"Thread,Time,Action,Pointer,Size,Stream\nx,00:00:00.1,free,0x1,8,0x0\n", 2},
        malformed_case{"Thread,Time,Action,Pointer,Size,Stream\n1,00:00,free,0x1,8,0x0\n", 2},
        malformed_case{"Thread,Time,Action,Pointer,Size,Stream\n1,00:61:00.1,free,0x1,8,0x0\n", 2},
        malformed_case{"Thread,Time,Action,Pointer,Size,Stream\n1,00:00:00.,free,0x1,8,0x0\n", 2},
        malformed_case{"Thread,Time,Action,Pointer,Size,Stream\n1,00:00:00.1,alloc,0x1,8,0x0\n", 2},
        malformed_case{"Thread,Time,Action,Pointer,Size,Stream\n1,00:00:00.1,free,0xZZ,8,0x0\n", 2},
        malformed_case{"Thread,Time,Action,Pointer,Size,Stream\n1,00:00:00.1,free,0x1,-8,0x0\n", 2},
        malformed_case{"Thread,Time,Action,Pointer,Size,Stream\n1,00:00:00.1,free,0x1,"
                       "99999999999999999999,0\n",
                       2},
        malformed_case{"Thread,Time,Action,Pointer,Size,Stream\n1,00:00:00.1,free,0x1,8,s1\n", 2},
        malformed_case{"Thread,Time,Action,Pointer,Size,Stream\n1,00:00:00.1,allocate,(nil),8,0\n",
                       2},
        // the site column: only with its header, ids defined by "# site" lines, once
        malformed_case{"Thread,Time,Action,Pointer,Size,Stream,Site\n1,0:0:0.1,free,0x1,8,0x0\n",
                       2},
        malformed_case{"Thread,Time,Action,Pointer,Size,Stream,Site\n\n1,0:0:0.1,free,0x1,8,0,7\n",
                       3},
        malformed_case{"# site 1: a.py:1 f\nThread,Time,Action,Pointer,Size,Stream,Site\n"
                       "1,0:0:0.1,allocate,0x1,8,0x0,0\n",
                       3},
        malformed_case{"# site 1: a.py:1 f\nThread,Time,Action,Pointer,Size,Stream,Site\n"
                       "1,0:0:0.1,allocate,0x1,8,0x0,x1\n",
                       3},
        malformed_case{"# site 1: a.py:1 f\n# site 1: b.py:2 g\n", 2},
        malformed_case{"# site 99999999999: a.py:1 f\n", 1},
        malformed_case{"# pytorch.reserved_at_start: -5\n", 1}));

TEST(TraceLoad, MissingFileIsAnError) {
  EXPECT_THROW(load_trace("/nonexistent/trace.csv"), trace_error);
}

TEST(TraceLoad, BundledTracesAreWellFormed) {
  for (const char* name :
       {"llm_inference.csv", "llm_training.csv", "cnn_training.csv", "cnn_workspace_spike.csv",
        "two_stream_pipeline.csv", "pinned_fragments.csv", "random_mixed.csv", "llm_serving.csv"}) {
    const trace t = load_trace(std::string(CACHALOT_TRACES_DIR) + "/" + name);
    const trace_summary s = summarize(t);
    EXPECT_GT(s.ops, 5000u) << name;
    EXPECT_EQ(s.unknown_frees, 0u) << name;
    EXPECT_EQ(s.allocations, s.frees) << name;
    EXPECT_GT(s.peak_requested_bytes, 0u) << name;
  }
}

}  // namespace
}  // namespace cachalot::tools
