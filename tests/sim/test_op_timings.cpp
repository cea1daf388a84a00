// Stage timing traces at the engine level: measured op durations replace the profile's
// for exactly the ops (iteration, stage, micro-batch, phase) they list.
#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <map>
#include <string>
#include <tuple>

#include "helpers.h"

namespace {

using namespace simtest;
using ::testing::HasSubstr;
using sim::OpTiming;
using sim::Phase;

sim::Scenario toy(int iterations) {
  // S = 2, M = 4, fwd 1, bwd 2, free communication, speed 1.
  const sim::Pipeline p = uniform_pipeline(2, 4, 1.0, 2.0, 0.0);
  return sim::make_scenario(p, sim::Network::uniform(2, std::nullopt), sim::make_named("1f1b", 2, 4, std::nullopt),
                            1, iterations);
}

std::map<std::tuple<int, int, std::string>, double> durations(const sim::SimResult& r) {
  std::map<std::tuple<int, int, std::string>, double> d;
  for (const auto& o : r.timeline->ops) d[{o.iteration, o.stage, sim::op_name(o.op)}] = o.end - o.start;
  return d;
}

}  // namespace

TEST(OpTimings, ReplaceExactlyTheListedOps) {
  const sim::Scenario plain = toy(2);
  sim::Scenario timed = plain;
  sim::set_op_timings(timed,
                      {OpTiming{1, 0, 2, Phase::Forward, 1.75, 3}, OpTiming{0, 1, 3, Phase::Backward, 0.5, 2}},
                      "trace.csv");
  const auto a = durations(sim::simulate(plain, {.timeline = true}));
  const auto b = durations(sim::simulate(timed, {.timeline = true}));
  ASSERT_EQ(a.size(), b.size());
  int changed = 0;
  for (const auto& [key, d] : a) {
    const double got = b.at(key);
    if (key == std::tuple(1, 0, std::string("F2"))) {
      EXPECT_DOUBLE_EQ(got, 1.75);
      ++changed;
    } else if (key == std::tuple(0, 1, std::string("B3"))) {
      EXPECT_DOUBLE_EQ(got, 0.5);
      ++changed;
    } else {
      EXPECT_DOUBLE_EQ(got, d) << std::get<0>(key) << " " << std::get<1>(key) << " " << std::get<2>(key);
    }
  }
  EXPECT_EQ(changed, 2);
}

TEST(OpTimings, StillStretchedByTheSpeedTrace) {
  sim::Scenario sc = toy(1);
  sc.network.set_speed(0, sim::RateTrace::constant(0.5));  // stage 0 at half speed
  sim::set_op_timings(sc, {OpTiming{0, 0, 0, Phase::Forward, 3.0, 1}}, "trace.csv");
  const auto d = durations(sim::simulate(sc, {.timeline = true}));
  EXPECT_DOUBLE_EQ((d.at({0, 0, "F0"})), 6.0);  // 3 nominal seconds at speed 0.5
  EXPECT_DOUBLE_EQ((d.at({0, 0, "F1"})), 2.0);  // the profile's 1 s at speed 0.5
}

TEST(OpTimings, IterationsBeyondTheRunAreIgnored) {
  sim::Scenario sc = toy(1);
  sim::set_op_timings(sc, {OpTiming{5, 0, 0, Phase::Forward, 100.0, 1}}, "trace.csv");
  EXPECT_DOUBLE_EQ(sim::simulate(sc).total_time_s, sim::simulate(toy(1)).total_time_s);
}

TEST(OpTimings, BadEntriesNameTheFileAndLine) {
  auto bad = [](OpTiming t, const char* what) {
    sim::Scenario sc = toy(1);
    try {
      sim::set_op_timings(sc, {t}, "trace.csv");
      ADD_FAILURE() << "accepted " << what;
    } catch (const InputError& e) {
      EXPECT_THAT(e.what(), HasSubstr("trace.csv:7"));
      EXPECT_THAT(e.what(), HasSubstr(what));
    }
  };
  bad(OpTiming{0, 2, 0, Phase::Forward, 1.0, 7}, "stage 2 does not exist");
  bad(OpTiming{0, 0, 4, Phase::Forward, 1.0, 7}, "micro_batch 4 does not exist");
  bad(OpTiming{0, 0, 0, Phase::Forward, -1.0, 7}, "duration_s");
  bad(OpTiming{-1, 0, 0, Phase::Forward, 1.0, 7}, "iteration -1");
  sim::Scenario sc = toy(1);
  try {
    sim::set_op_timings(sc, {OpTiming{0, 0, 1, Phase::Backward, 1.0, 4}, OpTiming{0, 0, 1, Phase::Backward, 2.0, 7}},
                        "trace.csv");
    ADD_FAILURE() << "accepted a duplicate";
  } catch (const InputError& e) {
    EXPECT_THAT(e.what(), HasSubstr("trace.csv:7: B1 of stage 0 in iteration 0 is listed twice (also on line 4)"));
  }
}
