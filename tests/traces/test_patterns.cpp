// Synthetic patterns: exact shapes, determinism across runs and seeds, statistics that
// match their parameters over long durations, and parameter errors.
#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <cmath>
#include <string>
#include <vector>

#include "helpers.h"

namespace tracestest {
namespace {

using testing::HasSubstr;
using testing::StartsWith;

// Lengths of the pieces at `value`, in time order, over [0, span).
std::vector<double> stays(const tr::Trace& t, double value) {
  std::vector<double> out;
  tr::for_each_piece(t.rate, 0.0, t.span_s, [&](double a, double b, double v) {
    if (v == value) out.push_back(b - a);
  });
  return out;
}

double mean(const std::vector<double>& v) {
  double s = 0;
  for (double x : v) s += x;
  return s / static_cast<double>(v.size());
}

// ---------------------------------------------------------------------------------
// periodic

TEST(Periodic, ShapeAndPhase) {
  const tr::Trace t = tr::make_periodic({.high = 10, .low = 2, .period_s = 10, .low_fraction = 0.4});
  EXPECT_EQ(points(t), (P{{0, 10}, {6, 2}}));
  EXPECT_EQ(t.rate.repeat_s(), 10);
  const tr::Trace d = tr::make_periodic({.high = 10, .low = 2, .period_s = 10, .low_fraction = 0.4, .phase_s = 3});
  EXPECT_EQ(points(d), (P{{0, 2}, {3, 10}, {9, 2}}));
  for (double x = 0; x < 40; x += 0.25) EXPECT_EQ(d.rate.value_at(x), t.rate.value_at(std::fmod(x + 7, 10))) << x;
  // A negative phase advances the pattern.
  const tr::Trace n = tr::make_periodic({.high = 10, .low = 2, .period_s = 10, .low_fraction = 0.4, .phase_s = -7});
  expect_same(n, d);
}

TEST(Periodic, LowFractionIsExactOverWholePeriods) {
  for (double f : {0.0, 0.1, 0.25, 0.5, 0.9, 1.0}) {
    for (double period : {0.01, 1.0, 7.3, 60.0}) {
      const tr::Trace t =
          tr::make_periodic({.high = 2.8e9, .low = 0.35e9, .period_s = period, .low_fraction = f, .phase_s = 0.3});
      const tr::TraceStats s = tr::compute_stats(t, 0, 1000 * period, 1e9);
      EXPECT_NEAR(s.fraction_below, f, 1e-9) << f << " " << period;
      EXPECT_NEAR(s.mean, 2.8e9 - f * (2.8e9 - 0.35e9), 1e-9 * 2.8e9);
    }
  }
}

TEST(Periodic, EdgeFractions) {
  EXPECT_EQ(points(tr::make_periodic({.high = 3, .low = 1, .period_s = 5, .low_fraction = 0})), (P{{0, 3}}));
  EXPECT_EQ(points(tr::make_periodic({.high = 3, .low = 1, .period_s = 5, .low_fraction = 1})), (P{{0, 1}}));
}

TEST(Periodic, ParameterErrorsNameTheField) {
  const std::string base = R"("pattern": "periodic", "high": 2, "low": 1, "period_s": 4, "low_fraction": 0.5)";
  EXPECT_EQ(input_error([] { spec(R"({"pattern": "periodic", "high": 1, "low": 2, "period_s": 4, "low_fraction": 0.5})"); }),
            "spec.json: low: low 2 is larger than high 1");
  EXPECT_EQ(input_error([] { spec(R"({"pattern": "periodic", "high": 2, "low": 1, "period_s": 4, "low_fraction": 1.5})"); }),
            "spec.json: low_fraction: must be in [0, 1], got 1.5");
  EXPECT_EQ(input_error([] { spec(R"({"pattern": "periodic", "high": 2, "low": 1, "period_s": 0, "low_fraction": 0.5})"); }),
            "spec.json: period_s: must be > 0, got 0");
  EXPECT_EQ(input_error([] { spec(R"({"pattern": "periodic", "high": 2, "low": -1, "period_s": 1, "low_fraction": 0.5})"); }),
            "spec.json: low: must be a finite number >= 0, got -1");
  EXPECT_EQ(input_error([] { spec(R"({"pattern": "periodic", "high": 2, "low": 1, "low_fraction": 0.5})"); }),
            "spec.json: period_s: missing field");
  EXPECT_EQ(input_error([&] { spec("{" + base + R"(, "periode_s": 3})"); }),
            "spec.json: unknown key \"periode_s\" for periodic (did you mean \"period_s\"?)");
  EXPECT_EQ(input_error([] { spec(R"({"pattern": "sawtooth"})"); }),
            "spec.json: pattern: unknown pattern \"sawtooth\" (periodic, onoff, steps, contention, scale, clip, "
            "concat, shift, min)");
}

// ---------------------------------------------------------------------------------
// onoff

tr::OnOff onoff(std::uint64_t seed, tr::Dwell d = tr::Dwell::exponential) {
  return {.high = 2.8e9, .low = 0.2e9, .mean_high_s = 8, .mean_low_s = 2, .distribution = d, .sigma = 1.0,
          .seed = seed, .duration_s = 1e4};
}

TEST(OnOff, DeterministicForASeedAndDifferentAcrossSeeds) {
  expect_same(tr::make_onoff(onoff(7)), tr::make_onoff(onoff(7)));
  expect_same(tr::make_onoff(onoff(7, tr::Dwell::lognormal)), tr::make_onoff(onoff(7, tr::Dwell::lognormal)));
  EXPECT_NE(tr::make_onoff(onoff(7)).rate.times(), tr::make_onoff(onoff(8)).rate.times());
  // The same seed through JSON gives the same trace.
  expect_same(tr::make_onoff(onoff(7)),
              spec(R"({"pattern": "onoff", "high": 2.8e9, "low": 0.2e9, "mean_high_s": 8, "mean_low_s": 2,
                       "seed": 7, "duration_s": 1e4})"));
}

TEST(OnOff, FixedSeedGivesFixedFirstStays) {
  // Pins the sampling (std::mt19937_64 drawn by hand), so a change that would alter
  // every shipped random trace shows up here.
  const tr::Trace t = tr::make_onoff(onoff(1));
  ASSERT_GE(t.size(), 3u);
  EXPECT_EQ(t.rate.values()[0], 2.8e9);
  EXPECT_EQ(t.rate.values()[1], 0.2e9);
  std::mt19937_64 g(1);
  const double u1 = static_cast<double>(g() >> 11) * 0x1.0p-53;
  const double u2 = static_cast<double>(g() >> 11) * 0x1.0p-53;
  const double first = -8 * std::log1p(-u1);
  EXPECT_EQ(t.rate.times()[1], first);
  EXPECT_EQ(t.rate.times()[2], first + -2 * std::log1p(-u2));
}

TEST(OnOff, MeanStaysMatchWithin5PercentOver1e5Episodes) {
  for (tr::Dwell d : {tr::Dwell::exponential, tr::Dwell::lognormal}) {
    tr::OnOff p = onoff(42, d);
    p.duration_s = 1e5 * (p.mean_high_s + p.mean_low_s);  // about 1e5 episodes of each
    p.repeat = false;
    const tr::Trace t = tr::make_onoff(p);
    const auto high = stays(t, p.high), low = stays(t, p.low);
    ASSERT_GT(low.size(), 90000u);
    EXPECT_NEAR(mean(high), p.mean_high_s, 0.05 * p.mean_high_s);
    EXPECT_NEAR(mean(low), p.mean_low_s, 0.05 * p.mean_low_s);
    const tr::TraceStats s = tr::compute_stats(t, 0, t.span_s);
    EXPECT_NEAR(s.fraction_below, 0.2, 0.01);
    EXPECT_NEAR(s.mean_episode_s, p.mean_low_s, 0.05 * p.mean_low_s);
  }
}

TEST(OnOff, LognormalShapeWidensTheStays) {
  tr::OnOff p = onoff(3, tr::Dwell::lognormal);
  p.duration_s = 1e5;
  p.sigma = 0.1;
  const auto narrow = stays(tr::make_onoff(p), p.low);
  p.sigma = 1.5;
  const auto wide = stays(tr::make_onoff(p), p.low);
  auto cv = [](const std::vector<double>& v) {
    const double m = mean(v);
    double var = 0;
    for (double x : v) var += (x - m) * (x - m);
    return std::sqrt(var / static_cast<double>(v.size())) / m;
  };
  EXPECT_NEAR(cv(narrow), 0.1, 0.02);  // cv of a log-normal: sqrt(exp(sigma^2) - 1)
  EXPECT_GT(cv(wide), 1.5);  // sqrt(exp(2.25) - 1) = 2.9 in theory; heavy-tailed, so loosely
}

TEST(OnOff, StartRepeatAndSpan) {
  tr::OnOff p = onoff(5);
  p.start_high = false;
  p.duration_s = 100;
  const tr::Trace t = tr::make_onoff(p);
  EXPECT_EQ(t.rate.values()[0], p.low);
  EXPECT_EQ(t.rate.repeat_s(), 100);
  p.repeat = false;
  const tr::Trace h = tr::make_onoff(p);
  EXPECT_FALSE(h.repeats());
  EXPECT_EQ(h.span_s, 100);
  EXPECT_LT(h.rate.times().back(), 100);
}

TEST(OnOff, ParameterErrors) {
  const std::string ok = R"("pattern": "onoff", "high": 2, "low": 1, "mean_high_s": 4, "mean_low_s": 1, "duration_s": 100)";
  EXPECT_EQ(input_error([&] { spec("{" + ok + R"(, "distribution": "pareto"})"); }),
            "spec.json: distribution: unknown distribution \"pareto\" (exponential or lognormal)");
  EXPECT_EQ(input_error([&] { spec("{" + ok + R"(, "sigma": 2})"); }),
            "spec.json: sigma: applies to \"distribution\": \"lognormal\" only");
  EXPECT_EQ(input_error([&] { spec("{" + ok + R"(, "seed": -1})"); }), "spec.json: seed: must be >= 0, got -1");
  EXPECT_EQ(input_error([&] { spec("{" + ok + R"(, "start": "middle"})"); }),
            "spec.json: start: must be \"high\" or \"low\", got \"middle\"");
  EXPECT_EQ(input_error([] {
              spec(R"({"pattern": "onoff", "high": 2, "low": 1, "mean_high_s": 0, "mean_low_s": 1, "duration_s": 9})");
            }),
            "spec.json: mean_high_s: must be > 0, got 0");
  EXPECT_THAT(input_error([] {
                spec(R"({"pattern": "onoff", "high": 2, "low": 1, "mean_high_s": 1e-6, "mean_low_s": 1e-6,
                         "duration_s": 4e6})");
              }),
              StartsWith("spec.json: duration_s: the pattern would have about"));
}

// ---------------------------------------------------------------------------------
// steps

TEST(Steps, LevelsAndDurations) {
  const tr::Trace t = spec(R"({"pattern": "steps", "levels": [3, 1, 1, 2], "durations_s": [5, 2, 3, 10]})");
  EXPECT_EQ(points(t), (P{{0, 3}, {5, 1}, {10, 2}}));
  EXPECT_FALSE(t.repeats());
  EXPECT_EQ(t.span_s, 20);
  const tr::Trace r = spec(R"({"pattern": "steps", "levels": [3, 1], "durations_s": [5, 2], "repeat": true})");
  EXPECT_EQ(r.rate.repeat_s(), 7);
  EXPECT_EQ(r.rate.value_at(7 * 100 + 6), 1);
  EXPECT_EQ(input_error([] { spec(R"({"pattern": "steps", "levels": [3, 1], "durations_s": [5]})"); }),
            "spec.json: durations_s: must have one duration per level (2 levels, 1 durations)");
  EXPECT_EQ(input_error([] { spec(R"({"pattern": "steps", "levels": [3], "durations_s": [-5]})"); }),
            "spec.json: durations_s: durations_s[0]: must be > 0, got -5");
}

// ---------------------------------------------------------------------------------
// contention

TEST(Contention, MeanRateMatchesTheFairShareModel) {
  const tr::Contention p{.base = 1e9, .flows = 6, .mean_active_s = 3, .mean_idle_s = 9, .seed = 11, .duration_s = 2e5};
  const tr::Trace t = tr::make_contention(p);
  // Stationary: each flow is active with probability a / (a + i); the rate is
  // base / (1 + X), X ~ Binomial(N, q).
  const double q = 3.0 / 12.0;
  double expected = 0, choose = 1;
  for (int k = 0; k <= p.flows; ++k) {
    if (k > 0) choose = choose * (p.flows - k + 1) / k;
    expected += choose * std::pow(q, k) * std::pow(1 - q, p.flows - k) * p.base / (1 + k);
  }
  const tr::TraceStats s = tr::compute_stats(t, 0, p.duration_s);
  EXPECT_NEAR(s.mean, expected, 0.01 * expected);
  EXPECT_EQ(s.max, p.base);
  EXPECT_GE(s.min, p.base / (1 + p.flows));
  for (double v : t.rate.values()) {  // only base / (1 + k) values
    const double k = p.base / v - 1;
    EXPECT_NEAR(k, std::round(k), 1e-9);
  }
  expect_same(t, tr::make_contention(p));
  tr::Contention other = p;
  other.seed = 12;
  EXPECT_NE(t.rate.times(), tr::make_contention(other).rate.times());
}

TEST(Contention, NoFlowsIsTheBaseRate) {
  const tr::Trace t = spec(R"({"pattern": "contention", "base": 5, "flows": 0, "mean_active_s": 1,
                               "mean_idle_s": 1, "duration_s": 10})");
  EXPECT_EQ(points(t), (P{{0, 5}}));
  EXPECT_EQ(input_error([] {
              spec(R"({"pattern": "contention", "base": 5, "flows": -1, "mean_active_s": 1, "mean_idle_s": 1,
                       "duration_s": 10})");
            }),
            "spec.json: flows: must be >= 0, got -1");
}

// ---------------------------------------------------------------------------------
// units: rates and times of every pattern and transform may be strings with units

TEST(Units, PatternsTakeRatesAndTimesWithUnits) {
  const auto same = [](const std::string& plain, const std::string& units) { expect_same(spec(plain), spec(units)); };
  same(R"({"pattern": "periodic", "high": 3.125e9, "low": 3.125e8, "period_s": 10, "low_fraction": 0.4,
           "phase_s": -1.5})",
       R"({"pattern": "periodic", "high": "25Gbit/s", "low": "2.5 Gbps", "period_s": "10s", "low_fraction": 0.4,
           "phase_s": "-1500ms"})");
  same(R"({"pattern": "onoff", "high": 2.8e9, "low": 2e8, "mean_high_s": 480, "mean_low_s": 0.5, "seed": 3,
           "duration_s": 7200})",
       R"({"pattern": "onoff", "high": "2.8GB/s", "low": "200MB/s", "mean_high_s": "8min", "mean_low_s": "500ms",
           "seed": 3, "duration_s": "2h"})");
  same(R"({"pattern": "steps", "levels": [1.25e9, 1], "durations_s": [60, 0.25]})",
       R"({"pattern": "steps", "levels": ["10Gbit/s", 1], "durations_s": ["1min", "250ms"]})");
  same(R"({"pattern": "contention", "base": 1073741824, "flows": 2, "mean_active_s": 3, "mean_idle_s": 5,
           "duration_s": 60})",
       R"({"pattern": "contention", "base": "1GiB/s", "flows": 2, "mean_active_s": "3s", "mean_idle_s": "5000ms",
           "duration_s": "1min"})");
  same(R"({"pattern": "shift", "by_s": 0.5, "fill": 1e6, "of": {"pattern": "clip", "min": 1e6, "max": 8e6,
           "of": {"pattern": "concat", "parts": [{"of": {"constant": 2e6}, "duration_s": 30},
                                                 {"of": {"constant": 9e6}, "duration_s": 90}]}}})",
       R"({"pattern": "shift", "by_s": "500ms", "fill": "8Mbit/s", "of": {"pattern": "clip", "min": "1MB/s",
           "max": "64Mbps", "of": {"pattern": "concat", "parts": [{"of": {"constant": "2MB/s"}, "duration_s": "30s"},
                                                 {"of": {"constant": "9MB/s"}, "duration_s": "1.5min"}]}}})");
}

TEST(Units, PatternErrorsNameTheFieldAndTheUnits) {
  EXPECT_EQ(input_error([] { spec(R"({"pattern": "periodic", "high": "25Gib/s", "low": 1, "period_s": 4,
                                      "low_fraction": 0.5})"); }),
            "spec.json: high: \"25Gib/s\": unknown rate unit \"Gib/s\" (B/s, kB/s, MB/s, GB/s, TB/s, KiB/s, MiB/s, "
            "GiB/s, TiB/s, bit/s, kbit/s, Mbit/s, Gbit/s, Tbit/s, bps, kbps, Mbps, Gbps, Tbps)");
  EXPECT_THAT(input_error([] { spec(R"({"pattern": "periodic", "high": 2, "low": 1, "period_s": "4GB",
                                        "low_fraction": 0.5})"); }),
              StartsWith("spec.json: period_s: \"4GB\": \"GB\" is a size unit, not a time unit"));
  EXPECT_THAT(input_error([] { spec(R"({"pattern": "steps", "levels": [1, "2x"], "durations_s": [1, 1]})"); }),
              StartsWith("spec.json: levels[1]: \"2x\": unknown rate unit \"x\""));
  // Range checks see the converted value.
  EXPECT_THAT(input_error([] { spec(R"({"pattern": "periodic", "high": "1MB/s", "low": "2MB/s", "period_s": 4,
                                        "low_fraction": 0.5})"); }),
              StartsWith("spec.json: low: low 2000000 is larger than high 1000000"));
  // A scale factor is a multiplier: plain numbers only.
  EXPECT_THAT(input_error([] { spec(R"({"pattern": "scale", "factor": "2GB/s", "of": {"constant": 1}})"); }),
              StartsWith("spec.json: factor: must be a number"));
}

}  // namespace
}  // namespace tracestest
