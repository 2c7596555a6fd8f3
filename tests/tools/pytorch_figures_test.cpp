// PyTorch's figures from a converted trace: PyTorch's recorded peak stands beside a replay's
// only for a cold-start window; otherwise the reports say why and give the peak minus what
// PyTorch had reserved before the window, labelled as such.
#include <gtest/gtest.h>

#include <string>

#include "trace/pytorch_figures.hpp"
#include "trace/trace.hpp"

namespace cachalot::tools {
namespace {

constexpr std::size_t MiB = std::size_t{1} << 20;

pytorch_figures figures(const std::string& comments) {
  return parse_trace_text(comments + "Thread,Time,Action,Pointer,Size,Stream\n", "p.csv").pytorch;
}

bool has(const std::string& text, const std::string& part) {
  return text.find(part) != std::string::npos;
}

TEST(PyTorchFigures, ColdStartIsComparable) {
  const pytorch_figures p = figures(
      "# pytorch.peak_reserved: 67108864\n# pytorch.peak_reserved_kind: exact\n"
      "# pytorch.reserved_at_start: 0\n# pytorch.reserved_at_start_kind: exact\n"
      "# pytorch.reconstructed_allocations: 0\n");
  EXPECT_TRUE(p.cold_start());
  EXPECT_TRUE(p.comparable());
  EXPECT_EQ(p.why_not_comparable(), "");
  EXPECT_EQ(pytorch_text(p, 48 * MiB),
            "  PyTorch reserved at its peak (from the snapshot, a cold start): 64.00 MiB; "
            "cachalot: 48.00 MiB (-25.0%)\n");
  EXPECT_EQ(pytorch_text(p, 0),
            "  PyTorch reserved at its peak (from the snapshot, a cold start): 64.00 MiB\n");
  EXPECT_EQ(
      pytorch_json(p),
      ",\"reconstructed_allocations\":0,\"reconstructed_bytes\":0,\"pytorch_comparable\":true,"
      "\"pytorch_peak_reserved_bytes\":67108864,\"pytorch_peak_exact\":true,"
      "\"pytorch_recorded_peak_reserved_bytes\":67108864,\"pytorch_reserved_at_start_bytes\":0,"
      "\"pytorch_reserved_at_start_exact\":true,\"pytorch_peak_minus_start_bytes\":67108864");
}

TEST(PyTorchFigures, WarmStartSaysWhyAndGivesTheGrowthLabelled) {
  const pytorch_figures p = figures(
      "# pytorch.peak_reserved: 104857600\n# pytorch.peak_reserved_kind: exact\n"
      "# pytorch.reserved_at_start: 83886080\n# pytorch.reserved_at_start_kind: exact\n"
      "# pytorch.reconstructed_allocations: 3\n# pytorch.reconstructed_bytes: 1048576\n");
  EXPECT_FALSE(p.comparable());
  EXPECT_EQ(p.peak_minus_start(), 20 * MiB);
  const std::string text = pytorch_text(p, 48 * MiB);
  EXPECT_TRUE(has(text, "live set when the recorded window began: 3 allocations, 1.00 MiB"));
  EXPECT_TRUE(has(text,
                  "PyTorch's recorded peak reserved (100.00 MiB) is not comparable: PyTorch had "
                  "80.00 MiB reserved before the recorded window began"));
  EXPECT_TRUE(has(text, "peak minus what it had reserved before the window: 20.00 MiB"));
  EXPECT_FALSE(has(text, "cachalot: 48.00 MiB")) << "never beside cachalot's peak";
  const std::string json = pytorch_json(p);
  EXPECT_TRUE(has(json, "\"pytorch_comparable\":false"));
  EXPECT_FALSE(has(json, "\"pytorch_peak_reserved_bytes\""));
  EXPECT_TRUE(has(json, "\"pytorch_not_comparable\":\"PyTorch had 80.00 MiB reserved"));
  EXPECT_TRUE(has(json, "\"pytorch_peak_minus_start_bytes\":20971520"));
  EXPECT_TRUE(has(json, "\"reconstructed_allocations\":3,\"reconstructed_bytes\":1048576"));
}

TEST(PyTorchFigures, UnknownLowerBoundOrInconsistentStartsAreNotComparable) {
  // converted before reserved_at_start existed
  const pytorch_figures old = figures("# pytorch.peak_reserved: 1048576\n");
  EXPECT_FALSE(old.comparable());
  EXPECT_TRUE(has(old.why_not_comparable(), "convert the snapshot again"));
  EXPECT_FALSE(has(pytorch_text(old, MiB), "peak minus")) << "no growth without a start";
  // no segment list: the start (even 0) is only a lower bound
  const pytorch_figures bound = figures(
      "# pytorch.peak_reserved: 1048576\n# pytorch.peak_reserved_kind: lower-bound\n"
      "# pytorch.reserved_at_start: 0\n# pytorch.reserved_at_start_kind: lower-bound\n");
  EXPECT_FALSE(bound.comparable());
  EXPECT_TRUE(has(bound.why_not_comparable(), "at least 0 B reserved"));
  EXPECT_TRUE(has(pytorch_text(bound, MiB), "(1.00 MiB, a lower bound) is not comparable"));
  // nothing reserved at the start, yet allocations live then
  const pytorch_figures odd = figures(
      "# pytorch.peak_reserved: 1048576\n# pytorch.peak_reserved_kind: exact\n"
      "# pytorch.reserved_at_start: 0\n# pytorch.reserved_at_start_kind: exact\n"
      "# pytorch.reconstructed_allocations: 2\n");
  EXPECT_FALSE(odd.comparable());
  EXPECT_TRUE(has(odd.why_not_comparable(), "the snapshot is inconsistent"));
  // a plain trace says nothing
  const pytorch_figures none = figures("# a comment\n");
  EXPECT_EQ(pytorch_text(none, MiB), "");
  EXPECT_EQ(pytorch_json(none), "");
}

}  // namespace
}  // namespace cachalot::tools
