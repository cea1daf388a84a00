// compute_stats: time-weighted statistics, percentiles and preemption episodes.
#include <gtest/gtest.h>

#include "helpers.h"

namespace tracestest {
namespace {

TEST(Stats, HandComputed) {
  const tr::Trace t = pts({{0, 10}, {2, 2}, {3, 10}, {6, 0}, {7, 10}});
  const tr::TraceStats s = tr::compute_stats(t, 0, 10);
  EXPECT_EQ(s.duration_s, 10);
  EXPECT_EQ(s.pieces, 5u);
  EXPECT_DOUBLE_EQ(s.mean, 8.2);
  EXPECT_EQ(s.min, 0);
  EXPECT_EQ(s.max, 10);
  EXPECT_EQ(s.p5, 0);
  EXPECT_EQ(s.p50, 10);
  EXPECT_EQ(s.p95, 10);
  EXPECT_EQ(s.threshold, 5);  // half the max
  EXPECT_DOUBLE_EQ(s.fraction_below, 0.2);
  EXPECT_EQ(s.episodes, 2u);
  EXPECT_DOUBLE_EQ(s.mean_episode_s, 1.0);
}

TEST(Stats, AdjacentLowPiecesAreOneEpisode) {
  const tr::Trace t = pts({{0, 10}, {1, 2}, {2, 1}, {3, 10}});
  const tr::TraceStats s = tr::compute_stats(t, 0, 4, 3.0);
  EXPECT_EQ(s.episodes, 1u);
  EXPECT_DOUBLE_EQ(s.mean_episode_s, 2.0);
  EXPECT_DOUBLE_EQ(s.fraction_below, 0.5);
  EXPECT_EQ(s.p50, 2);  // the lower value when the quantile falls on a boundary
}

TEST(Stats, WindowOverARepeatingTrace) {
  const tr::Trace t = pts({{0, 4}, {3, 1}}, 4);
  const tr::TraceStats s = tr::compute_stats(t, 2, 2 + 4 * 1000);
  EXPECT_DOUBLE_EQ(s.mean, (3 * 4 + 1) / 4.0);
  EXPECT_NEAR(s.fraction_below, 0.25, 1e-12);
  EXPECT_EQ(s.episodes, 1000u);
  EXPECT_NEAR(s.mean_episode_s, 1.0, 1e-9);
  // A window that starts inside a low stretch counts the truncated stretch.
  const tr::TraceStats part = tr::compute_stats(t, 3.5, 4.5);
  EXPECT_EQ(part.episodes, 1u);
  EXPECT_DOUBLE_EQ(part.mean_episode_s, 0.5);
}

TEST(Stats, NoEpisodes) {
  const tr::TraceStats s = tr::compute_stats(pts({{0, 3}}), 0, 10);
  EXPECT_EQ(s.episodes, 0u);
  EXPECT_EQ(s.mean_episode_s, 0);
  EXPECT_EQ(s.p5, 3);
  EXPECT_THROW(tr::compute_stats(pts({{0, 3}}), 5, 5), std::invalid_argument);
}

}  // namespace
}  // namespace tracestest
