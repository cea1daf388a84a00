// Tests of channel profiling (planner/profiling.h): the moving-average estimator in closed form.
#include <gtest/gtest.h>

#include <vector>

#include "helpers.h"

namespace plantest {
namespace {

TEST(WindowRate, LastWindowSamplesBytesOverDurationMinusLatency) {
  const std::vector<planner::CommSample> xs = {
      {0.0, 100, 1.5}, {1.0, 300, 2.5}, {2.0, 50, 0.75}, {3.0, 150, 1.25}};
  const planner::WindowRate all = planner::window_rate(xs, 10, 0.25);
  EXPECT_EQ(all.first, 0u);
  EXPECT_EQ(all.used, 4u);
  EXPECT_EQ(all.bytes, 600.0);
  EXPECT_EQ(all.seconds, 5.0);  // 1.25 + 2.25 + 0.5 + 1
  EXPECT_EQ(all.rate(), 120.0);
  EXPECT_FALSE(all.not_longer_than_latency);

  const planner::WindowRate last2 = planner::window_rate(xs, 2, 0.25);
  EXPECT_EQ(last2.first, 2u);
  EXPECT_EQ(last2.used, 2u);
  EXPECT_EQ(last2.rate(), 200.0 / 1.5);

  // A sample that takes only the latency is flagged (by its index), and a window that
  // moved nothing has no rate.
  const std::vector<planner::CommSample> bad = {{0.0, 100, 1.0}, {1.0, 0, 0.25}, {2.0, 0, 0.2}};
  const planner::WindowRate wb = planner::window_rate(bad, 3, 0.25);
  ASSERT_TRUE(wb.not_longer_than_latency);
  EXPECT_EQ(*wb.not_longer_than_latency, 1u);
  EXPECT_FALSE(planner::window_rate(bad, 2, 0.25).rate());
  EXPECT_FALSE(planner::window_rate({}, 5, 0.0).rate());
}

}  // namespace
}  // namespace plantest
