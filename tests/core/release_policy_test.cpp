// The release policy alone (src/detail/release_policy.hpp), with no engine: its regimes, the
// advice it gives a growth, the split limit, and the hysteresis band.
#include <gtest/gtest.h>

#include "cachalot/types.hpp"
#include "detail/release_policy.hpp"

namespace cachalot::detail {
namespace {

policy_settings settings(bool adaptive, bool expandable = false) {
  policy_settings s;
  s.adaptive = adaptive;
  s.limit = 4000 * MiB;
  s.gc_threshold = 0.9;
  s.pressure_threshold = 0.9;
  s.max_split_size = 16 * MiB;
  s.expandable = expandable;
  s.chunk = 2 * MiB;
  return s;
}

TEST(release_policy, AdaptiveIsRelaxedUntilInUseMemoryNearsTheLimit) {
  release_policy p(settings(true));
  EXPECT_FALSE(p.tight());
  // Relaxed: no release before a growth, even with reserved memory at the limit...
  EXPECT_FALSE(p.before_growth(3990 * MiB, 20 * MiB).release);
  // ... and only blocks holding 1/128 of the limit stay whole.
  EXPECT_EQ(p.split_limit(), 4000 * MiB / 128);
  p.on_in_use_peak(3599 * MiB);
  EXPECT_FALSE(p.tight());
  p.on_in_use_peak(3601 * MiB);  // above 90 % of the limit
  EXPECT_TRUE(p.tight());
  EXPECT_EQ(p.split_limit(), 16 * MiB);
  const release_advice a = p.before_growth(3590 * MiB, 20 * MiB);
  EXPECT_TRUE(a.release);
  EXPECT_EQ(a.target, 3600 * MiB - 20 * MiB) << "down to the mark minus the growth";
  EXPECT_FALSE(p.before_growth(3570 * MiB, 20 * MiB).release);
  p.on_peak_reset(100 * MiB);  // reset_peak_stats: relaxed again
  EXPECT_FALSE(p.tight());
  EXPECT_EQ(p.split_limit(), 4000 * MiB / 128);
}

TEST(release_policy, EagerIsAlwaysTight) {
  release_policy p(settings(false));
  EXPECT_TRUE(p.tight());
  EXPECT_EQ(p.split_limit(), 16 * MiB);
  EXPECT_TRUE(p.before_growth(3590 * MiB, 20 * MiB).release);
  p.on_peak_reset(0);
  EXPECT_TRUE(p.tight());
}

TEST(release_policy, NoGcThresholdMeansNoReleaseBeforeAGrowth) {
  policy_settings s = settings(false);
  s.gc_threshold = 0;
  release_policy p(s);
  EXPECT_FALSE(p.before_growth(3999 * MiB, 500 * MiB).release);
}

TEST(release_policy, TheExpandableMarkFollowsTheInUsePeak) {
  release_policy p(settings(false, true));
  p.on_in_use_peak(100 * MiB);
  // 100 MiB + 2 % = 102 MiB, rounded up to a chunk (102), plus a chunk: 104 MiB.
  EXPECT_FALSE(p.before_growth(100 * MiB, 4 * MiB).release);
  const release_advice a = p.before_growth(102 * MiB, 4 * MiB);
  EXPECT_TRUE(a.release);
  EXPECT_EQ(a.target, 100 * MiB);
  p.on_in_use_peak(8000 * MiB);  // capped by gc_threshold of the limit
  EXPECT_EQ(p.before_growth(3590 * MiB, 20 * MiB).target, 3580 * MiB);
}

TEST(release_policy, ASizeReleasedAndMadeAgainWidensTheBand) {
  release_policy p(settings(true));
  p.on_in_use_peak(3601 * MiB);  // tight
  EXPECT_EQ(p.band(), 0u);
  p.on_released(64 * MiB);
  p.on_release_pass();
  p.on_growth(20 * MiB);  // not a size just released
  EXPECT_EQ(p.remakes(), 0u);
  p.on_growth(64 * MiB);  // made again: the next release goes further below the mark
  EXPECT_EQ(p.remakes(), 1u);
  EXPECT_EQ(p.band(), 64 * MiB);
  EXPECT_EQ(p.before_growth(3590 * MiB, 20 * MiB).target, 3600 * MiB - 20 * MiB - 64 * MiB);
  p.on_released(64 * MiB);
  p.on_growth(64 * MiB);
  EXPECT_EQ(p.band(), 128 * MiB);
  for (int i = 0; i < 10; ++i) {
    p.on_released(64 * MiB);
    p.on_growth(64 * MiB);
  }
  EXPECT_EQ(p.band(), 3600 * MiB / 4) << "at most a quarter of the mark";
  p.on_release_pass();  // (remade since the last pass: stays)
  EXPECT_EQ(p.band(), 3600 * MiB / 4);
  p.on_release_pass();  // a pass with no re-make since: halves
  EXPECT_EQ(p.band(), 3600 * MiB / 8);
}

TEST(release_policy, RelaxedAndEagerPoliciesKeepNoBand) {
  for (const bool adaptive : {true, false}) {  // relaxed: no release; eager: as before
    release_policy p(settings(adaptive));
    p.on_released(64 * MiB);
    p.on_growth(64 * MiB);
    EXPECT_EQ(p.remakes(), 0u);
    EXPECT_EQ(p.band(), 0u);
  }
}

}  // namespace
}  // namespace cachalot::detail
