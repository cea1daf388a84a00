// Transforms (scale, clip, shift, concat, min) and windows (slice, repeat): each on
// its own and composed, as library calls and as JSON.
#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <cmath>
#include <string>

#include "helpers.h"

namespace tracestest {
namespace {

using testing::StartsWith;

// Whether a and b agree at many sample times in [0, horizon).
void expect_same_function(const tr::Trace& a, const tr::Trace& b, double horizon) {
  for (int i = 0; i < 4000; ++i) {
    const double t = horizon * i / 4000.0 + 1e-7;
    ASSERT_EQ(a.rate.value_at(t), b.rate.value_at(t)) << "t = " << t;
  }
}

TEST(Slice, WindowMovedToZero) {
  const tr::Trace t = pts({{0, 5}, {2, 1}, {4, 3}});
  const tr::Trace s = tr::slice(t, 1, 5);
  EXPECT_EQ(points(s), (P{{0, 5}, {1, 1}, {3, 3}}));
  EXPECT_EQ(s.span_s, 4);
  const tr::Trace open = tr::slice(t, 3, std::nullopt);
  EXPECT_EQ(points(open), (P{{0, 1}, {1, 3}}));
  // A window of a repeating trace crosses periods.
  const tr::Trace r = pts({{0, 5}, {2, 1}}, 3);
  EXPECT_EQ(points(tr::slice(r, 2.5, 8.5)), (P{{0, 1}, {0.5, 5}, {2.5, 1}, {3.5, 5}, {5.5, 1}}));
  EXPECT_THROW(tr::slice(r, 1, std::nullopt), std::invalid_argument);
  EXPECT_THROW(tr::slice(t, 3, 3), std::invalid_argument);
  EXPECT_THROW(tr::slice(t, -1, 3), std::invalid_argument);
}

TEST(Repeat, PeriodFromAWindow) {
  const tr::Trace t = pts({{0, 5}, {2, 1}, {4, 3}});
  const tr::Trace r = tr::repeat(t, 3);
  EXPECT_EQ(points(r), (P{{0, 5}, {2, 1}}));
  EXPECT_EQ(r.rate.repeat_s(), 3);
}

TEST(Scale, MultipliesAndMerges) {
  const tr::Trace t = pts({{0, 4}, {1, 2}}, 3);
  const tr::Trace s = tr::scale(t, 0.5);
  EXPECT_EQ(points(s), (P{{0, 2}, {1, 1}}));
  EXPECT_EQ(s.rate.repeat_s(), 3);
  EXPECT_EQ(points(tr::scale(t, 0)), (P{{0, 0}}));
  expect_same(s, spec(R"({"pattern": "scale", "factor": 0.5, "of": {"points": [[0, 4], [1, 2]], "repeat_s": 3}})"));
}

TEST(Clip, Bounds) {
  const tr::Trace t = pts({{0, 4}, {1, 2}, {2, 9}, {3, 0}});
  EXPECT_EQ(points(tr::clip(t, 1, 5)), (P{{0, 4}, {1, 2}, {2, 5}, {3, 1}}));
  EXPECT_EQ(points(tr::clip(t, std::nullopt, 3)), (P{{0, 3}, {1, 2}, {2, 3}, {3, 0}}));
  EXPECT_EQ(points(tr::clip(t, 3, std::nullopt)), (P{{0, 4}, {1, 3}, {2, 9}, {3, 3}}));
  EXPECT_EQ(input_error([] { spec(R"({"pattern": "clip", "of": {"constant": 1}})"); }),
            "spec.json: clip needs \"min\", \"max\" or both");
  EXPECT_EQ(input_error([] { spec(R"({"pattern": "clip", "of": {"constant": 1}, "min": 3, "max": 2})"); }),
            "spec.json: min: min 3 is larger than max 2");
}

TEST(Shift, DelayFillAdvanceAndRotation) {
  const tr::Trace t = pts({{0, 4}, {1, 2}});
  const tr::Trace d = tr::shift(t, 3);
  EXPECT_EQ(points(d), (P{{0, 4}, {4, 2}}));  // fill = the value at 0
  EXPECT_EQ(d.span_s, 4);
  EXPECT_EQ(points(tr::shift(t, 3, 7.0)), (P{{0, 7}, {3, 4}, {4, 2}}));
  EXPECT_EQ(points(tr::shift(t, -0.5)), (P{{0, 4}, {0.5, 2}}));
  const tr::Trace r = pts({{0, 4}, {1, 2}}, 3);
  for (double by : {0.0, 0.5, 1.0, 2.5, 3.0, -1.0, 301.7}) {
    const tr::Trace s = tr::shift(r, by);
    EXPECT_EQ(s.rate.repeat_s(), 3);
    for (int i = 0; i < 600; ++i) {
      const double x = i * 0.0503 + 10;
      // Away from the switching instants, new(x) = old(x - by).
      const double local = std::fmod(x - by + 3000, 3.0);
      if (std::fabs(local - 1) < 1e-6 || local < 1e-6 || local > 3 - 1e-6) continue;
      EXPECT_EQ(s.rate.value_at(x), r.rate.value_at(x - by + 3000)) << by << " " << x;
    }
  }
  expect_same(tr::shift(r, 3), r);
}

TEST(Concat, PartsOneAfterTheOther) {
  const tr::Trace a = pts({{0, 1}, {1, 2}});
  const tr::Trace b = pts({{0, 5}, {2, 1}}, 3);
  const tr::Trace c = tr::concat({a, b}, {1.5, 4}, false);
  EXPECT_EQ(points(c), (P{{0, 1}, {1, 2}, {1.5, 5}, {3.5, 1}, {4.5, 5}}));
  EXPECT_EQ(c.span_s, 5.5);
  EXPECT_FALSE(c.repeats());
  const tr::Trace r = tr::concat({a, b}, {1.5, 4}, true);
  EXPECT_EQ(r.rate.repeat_s(), 5.5);
  // Slices of a trace concatenated give the trace back.
  const tr::Trace whole = tr::make_onoff({.high = 3, .low = 1, .mean_high_s = 2, .mean_low_s = 1, .seed = 4,
                                          .duration_s = 60, .repeat = false});
  const tr::Trace joined =
      tr::concat({tr::slice(whole, 0, 20), tr::slice(whole, 20, 45), tr::slice(whole, 45, 60)}, {20, 25, 15}, false);
  expect_same_function(joined, whole, 60);
  expect_same(c, spec(R"({"pattern": "concat", "parts": [
      {"of": {"points": [[0, 1], [1, 2]]}, "duration_s": 1.5},
      {"of": {"points": [[0, 5], [2, 1]], "repeat_s": 3}, "duration_s": 4}]})"));
}

TEST(Min, ExactCases) {
  const tr::Trace a = pts({{0, 5}, {2, 1}, {6, 4}});
  const tr::Trace b = pts({{0, 3}, {4, 6}});
  const auto m = tr::min_exact(a, b);
  ASSERT_TRUE(m);
  EXPECT_EQ(points(*m), (P{{0, 3}, {2, 1}, {6, 4}}));
  EXPECT_EQ(m->span_s, 6);
  // Repeating with periods 2 and 3: the minimum repeats every 6.
  const tr::Trace p2 = pts({{0, 5}, {1, 1}}, 2);
  const tr::Trace p3 = pts({{0, 2}, {2, 9}}, 3);
  const auto r = tr::min_exact(p2, p3);
  ASSERT_TRUE(r);
  EXPECT_EQ(r->rate.repeat_s(), 6);
  for (int i = 0; i < 1000; ++i) {
    const double t = i * 0.0731 + 0.001;
    EXPECT_EQ(r->rate.value_at(t), std::min(p2.rate.value_at(t), p3.rate.value_at(t))) << t;
  }
  // min(x, x) = x.
  expect_same(*tr::min_exact(p2, p2), p2);
  // A constant caps a repeating trace, whichever comes first.
  const tr::Trace cap = pts({{0, 3}});
  EXPECT_EQ(points(*tr::min_exact(p2, cap)), (P{{0, 3}, {1, 1}}));
  expect_same(*tr::min_exact(cap, p2), *tr::min_exact(p2, cap));
  EXPECT_EQ(tr::min_exact(cap, p2)->rate.repeat_s(), 2);
}

TEST(Min, IncommensurateNeedsAWindow) {
  const tr::Trace p = pts({{0, 5}, {1, 1}}, 2);
  const tr::Trace q = pts({{0, 2}, {1, 9}}, std::sqrt(2.0) * 1.5);
  EXPECT_FALSE(tr::min_exact(p, q));
  EXPECT_FALSE(tr::min_exact(p, pts({{0, 1}, {5, 2}})));
  const std::string body = R"("of": [{"points": [[0, 5], [1, 1]], "repeat_s": 2}, {"points": [[0, 3], [5, 4]]}])";
  EXPECT_THAT(input_error([&] { spec(R"({"pattern": "min", )" + body + "}"); }),
              StartsWith("spec.json: the minimum of these rates does not repeat from t = 0"));
  const tr::Trace w = spec(R"({"pattern": "min", "duration_s": 4, )" + body + "}");
  EXPECT_EQ(points(w), (P{{0, 3}, {1, 1}, {2, 3}, {3, 1}}));
  EXPECT_EQ(w.rate.repeat_s(), 4);
  const tr::Trace h = spec(R"({"pattern": "min", "duration_s": 4, "repeat": false, )" + body + "}");
  EXPECT_FALSE(h.repeats());
  EXPECT_EQ(h.span_s, 4);
  EXPECT_EQ(input_error([] { spec(R"({"pattern": "min", "of": [{"constant": 3}]})"); }),
            "spec.json: of: must list at least two rates");
}

TEST(Compose, NestedTransformsAgreeWithTheLibraryCalls) {
  const tr::Periodic per{.high = 10, .low = 2, .period_s = 10, .low_fraction = 0.3, .phase_s = 1};
  const tr::Trace direct = tr::clip(tr::scale(tr::shift(tr::make_periodic(per), 2), 0.5), 2, 4);
  const tr::Trace nested = spec(R"({"pattern": "clip", "min": 2, "max": 4, "of":
      {"pattern": "scale", "factor": 0.5, "of":
        {"pattern": "shift", "by_s": 2, "of":
          {"pattern": "periodic", "high": 10, "low": 2, "period_s": 10, "low_fraction": 0.3, "phase_s": 1}}}})");
  expect_same(direct, nested);
  EXPECT_EQ(points(nested), (P{{0, 2}, {3, 4}}));
  EXPECT_EQ(nested.rate.repeat_s(), 10);
  // Shifting a periodic pattern is the same as giving it that phase.
  const tr::Periodic later{.high = 10, .low = 2, .period_s = 10, .low_fraction = 0.3, .phase_s = 3};
  expect_same_function(tr::shift(tr::make_periodic(per), 2), tr::make_periodic(later), 50);
  // min of a periodic pattern and a cap equals clipping it.
  expect_same(*tr::min_exact(tr::make_periodic(per), tr::repeat(pts({{0, 6}}), 10)),
              tr::clip(tr::make_periodic(per), std::nullopt, 6));
}

TEST(Compose, DepthIsBounded) {
  std::string s = R"({"constant": 1})";
  for (int i = 0; i < 40; ++i) s = R"({"pattern": "scale", "factor": 1, "of": )" + s + "}";
  EXPECT_THAT(input_error([&] { spec(s); }), testing::HasSubstr("nest more than 16 levels deep"));
}

}  // namespace
}  // namespace tracestest
