// Orders that cannot finish, and rates that stay 0 forever: errors, never hangs.
#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <string>

#include "helpers.h"

namespace simtest {
namespace {

using nlohmann::json;
using sim::Op;
using sim::Phase;
using testing::AllOf;
using testing::HasSubstr;

std::vector<Op> ops(const std::string& text) {
  std::vector<Op> out;
  std::size_t i = 0;
  while (i < text.size()) {
    if (text[i] == ' ') {
      ++i;
      continue;
    }
    const Phase ph = text[i] == 'F' ? Phase::Forward : Phase::Backward;
    std::size_t j = i + 1;
    int m = 0;
    while (j < text.size() && text[j] != ' ') m = 10 * m + (text[j++] - '0');
    out.push_back({ph, m});
    i = j;
  }
  return out;
}

sim::Schedule custom(std::vector<std::string> stages) {
  sim::Schedule s;
  s.spec = sim::ScheduleSpec::custom();
  s.k = 0;
  for (const auto& st : stages) s.stages.push_back(ops(st));
  return s;
}

std::string sim_error(const sim::Scenario& sc) {
  try {
    sim::simulate(sc);
  } catch (const SimError& e) {
    return e.what();
  }
  ADD_FAILURE() << "expected SimError";
  return {};
}

// S = 3, M = 2: stage 1 runs B0 before F0. B(1,0) needs the gradient from B(2,0),
// which needs F(2,0), which needs the activation from F(1,0), ordered after B(1,0).
TEST(Deadlock, BackwardBeforeForwardOnMiddleStage) {
  const auto p = uniform_pipeline(3, 2, 1.0, 2.0, 1.0);
  const auto sc = sim::make_scenario(p, sim::Network::uniform(3, 1.0),
                                     custom({"F0 F1 B0 B1", "B0 F0 F1 B1", "F0 B0 F1 B1"}), 1, 1);
  const auto cycle = sim::find_dependency_cycle(sc);
  ASSERT_FALSE(cycle.empty());
  EXPECT_EQ(cycle.front(), cycle.back());  // a closed loop
  EXPECT_THAT(cycle, testing::Contains("stage 1 B0"));
  EXPECT_THAT(cycle, testing::Contains("stage 1 F0"));
  EXPECT_THAT(cycle, testing::Contains("stage 2 F0"));
  EXPECT_THAT(cycle, testing::Contains("stage 2 B0"));

  const std::string msg = sim_error(sc);
  EXPECT_THAT(msg, HasSubstr("deadlock"));
  EXPECT_THAT(msg, HasSubstr("stage 0 waits for B0"));
  EXPECT_THAT(msg, HasSubstr("stage 1 waits for B0"));
  EXPECT_THAT(msg, HasSubstr("stage 2 waits for F0"));
  // What each op waits for.
  EXPECT_THAT(msg, HasSubstr("gradient of micro-batch 0 from stage 2"));
  EXPECT_THAT(msg, HasSubstr("activation of micro-batch 0 from stage 1"));
}

// The last stage runs B0 before F0: B(S-1,0) needs F(S-1,0) on the same stage.
TEST(Deadlock, LastStageBackwardBeforeForward) {
  const auto p = uniform_pipeline(2, 1, 1.0, 1.0, 1.0);
  const auto sc = sim::make_scenario(p, sim::Network::uniform(2, std::nullopt), custom({"F0 B0", "B0 F0"}), 1, 1);
  const auto cycle = sim::find_dependency_cycle(sc);
  ASSERT_FALSE(cycle.empty());
  EXPECT_THAT(cycle, testing::Contains("stage 1 B0"));
  EXPECT_THAT(cycle, testing::Contains("stage 1 F0"));
  const std::string msg = sim_error(sc);
  EXPECT_THAT(msg, HasSubstr("deadlock"));
  EXPECT_THAT(msg, HasSubstr("stage 0 waits for B0"));
  EXPECT_THAT(msg, AllOf(HasSubstr("stage 1 waits for B0"), HasSubstr("F0 on the same stage")));
}

// A deadlock only in a later iteration is impossible (every iteration runs the same
// order), but one in iteration 0 names it.
TEST(Deadlock, ReportNamesIteration) {
  const auto p = uniform_pipeline(2, 2, 1.0, 1.0, 1.0);
  const auto sc = sim::make_scenario(p, sim::Network::uniform(2, 1.0), custom({"F0 B0 F1 B1", "F1 B1 F0 B0"}), 1, 3);
  // Stage 1 consumes activations in the order 1, 0: the channel sends micro-batch 1
  // first, which stage 0 produces only after B0, which needs stage 1's B0.
  EXPECT_FALSE(sim::find_dependency_cycle(sc).empty());
  const std::string msg = sim_error(sc);
  EXPECT_THAT(msg, HasSubstr("deadlock in iteration 0"));
  EXPECT_THAT(msg, HasSubstr("stage 1 waits for F1"));
  EXPECT_THAT(msg, HasSubstr("stage 0 waits for B0"));
}

// A valid hand-written order: no cycle, and it runs like the named schedule it spells.
TEST(Deadlock, ValidCustomOrderSimulates) {
  const auto p = uniform_pipeline(3, 2, 1.0, 2.0, 0.5);
  const auto sch = custom({"F0 F1 B0 B1", "F0 F1 B0 B1", "F0 B0 F1 B1"});
  const auto sc = sim::make_scenario(p, sim::Network::uniform(3, 1.0), sch, 1, 2);
  EXPECT_TRUE(sim::find_dependency_cycle(sc).empty());
  const auto r = sim::simulate(sc);
  EXPECT_EQ(r.spec.family, "custom");
  EXPECT_EQ(r.k, 0);
  const auto named = sim::simulate(
      sim::make_scenario(p, sim::Network::uniform(3, 1.0), sim::make_named("1f1b", 3, 2, std::nullopt), 1, 2));
  EXPECT_EQ(sc.schedule.stages, sim::make_named("1f1b", 3, 2, std::nullopt).stages);
  EXPECT_DOUBLE_EQ(r.total_time_s, named.total_time_s);

  // Consuming gradients in an unusual but possible order is fine too.
  const auto odd = sim::make_scenario(p, sim::Network::uniform(3, 1.0),
                                      custom({"F0 F1 B1 B0", "F0 F1 B1 B0", "F0 F1 B1 B0"}), 1, 1);
  EXPECT_TRUE(sim::find_dependency_cycle(odd).empty());
  EXPECT_NO_THROW(sim::simulate(odd));
}

TEST(Deadlock, NamedSchedulesHaveNoCycle) {
  for (int S = 1; S <= 5; ++S) {
    for (int M = 1; M <= 6; ++M) {
      const auto p = uniform_pipeline(S, M, 1.0, 1.0, 1.0);
      auto net = sim::Network::uniform(S, 1.0);
      net.rewrite_channels([](sim::ChannelSpec& ch) { ch.capacity = 1; });
      for (const char* name : {"1f1b", "gpipe", "dapple-b"}) {
        const auto sc = sim::make_scenario(p, net, sim::make_named(name, S, M, std::nullopt), 1, 1);
        EXPECT_TRUE(sim::find_dependency_cycle(sc).empty()) << name << " S=" << S << " M=" << M;
        EXPECT_NO_THROW(sim::simulate(sc)) << name << " S=" << S << " M=" << M;
      }
    }
  }
}

// ---------------------------------------------------------------------------------
// Rates that stay 0 forever

const sim::Pipeline& two_stages() {
  static const sim::Pipeline p = uniform_pipeline(2, 2, 1.0, 1.0, 1.0);
  return p;
}

sim::Scenario two_stage_scenario(const json& net, int iterations = 1) {
  return sim::make_scenario(two_stages(), sim::parse_network(net, "net.json", 2),
                            sim::make_named("1f1b", 2, 2, std::nullopt), 1, iterations);
}

TEST(ZeroRateForever, ConstantZeroChannel) {
  const auto sc = two_stage_scenario({{"channels", {{{"from", 0}, {"to", 1}, {"rate", {{"constant", 0}}}}}}});
  const std::string msg = sim_error(sc);
  EXPECT_THAT(msg, AllOf(HasSubstr("net.json"), HasSubstr("0 -> 1"), HasSubstr("0 forever")));
}

TEST(ZeroRateForever, BackwardChannelPointsEndingInZero) {
  // The rate drops to 0 at t = 2; the first gradient leaves at t = 3.
  const auto sc = two_stage_scenario(
      {{"channels", {{{"from", 1}, {"to", 0}, {"rate", {{"points", {{0, 1.0}, {2, 0.0}}}}}}}}});
  const std::string msg = sim_error(sc);
  EXPECT_THAT(msg, AllOf(HasSubstr("1 -> 0"), HasSubstr("0 forever")));
}

TEST(ZeroRateForever, DropDuringTransfer) {
  // A 1-byte message at 1 B/s leaving at t = 1 gets half a byte before the drop at 1.5.
  const auto sc = two_stage_scenario(
      {{"channels", {{{"from", 0}, {"to", 1}, {"rate", {{"points", {{0, 1.0}, {1.5, 0.0}}}}}}}}});
  EXPECT_THAT(sim_error(sc), HasSubstr("0 -> 1"));
}

TEST(ZeroRateForever, DefaultRateZeroInLaterIteration) {
  // Everything fits in the first iterations; the rate is gone from t = 100 on.
  const auto sc = two_stage_scenario({{"default", {{"points", {{0, 1.0}, {100, 0.0}}}}}}, 50);
  EXPECT_THAT(sim_error(sc), HasSubstr("stays 0 forever"));
}

TEST(ZeroRateForever, ZeroBytesNeedNoBandwidth) {
  const auto p = uniform_pipeline(2, 2, 1.0, 1.0, 0.0);
  const auto sc = sim::make_scenario(p, sim::parse_network({{"default", {{"constant", 0}}}, {"latency_s", 0.5}}, "n.json", 2),
                                     sim::make_named("1f1b", 2, 2, std::nullopt), 1, 1);
  // Every message takes exactly the 0.5 s latency. Stage 0: F0 [0,1] F1 [1,2];
  // stage 1: F0 [1.5,2.5] B0 [2.5,3.5] F1 [3.5,4.5] B1 [4.5,5.5]; stage 0: B0 [4,5]
  // B1 [6,7].
  const auto r = sim::simulate(sc);
  EXPECT_DOUBLE_EQ(r.total_time_s, 7.0);
}

TEST(ZeroRateForever, StageSpeedZero) {
  {
    const auto sc = two_stage_scenario({{"stages", {{{"stage", 1}, {"speed", {{"constant", 0}}}}}}});
    EXPECT_THAT(sim_error(sc), AllOf(HasSubstr("net.json"), HasSubstr("stage 1"), HasSubstr("0 forever")));
  }
  {
    const auto sc = two_stage_scenario({{"stages", {{{"stage", 0}, {"speed", {{"points", {{0, 1.0}, {0.5, 0.0}}}}}}}}});
    EXPECT_THAT(sim_error(sc), AllOf(HasSubstr("stage 0"), HasSubstr("0 forever")));
  }
  {
    const auto sc =
        two_stage_scenario({{"stages", {{{"stage", 1}, {"speed", {{"points", {{0, 0.0}}}, {"repeat_s", 3}}}}}}});
    EXPECT_THAT(sim_error(sc), HasSubstr("stage 1"));
  }
}

// A rate with long zero gaps that always comes back is slow, not an error.
TEST(ZeroRateForever, RepeatingGapsFinish) {
  const auto sc = two_stage_scenario(
      {{"default", {{"points", {{0, 0.0}, {99, 1.0}}}, {"repeat_s", 100}}}}, 3);
  const auto r = sim::simulate(sc);
  EXPECT_EQ(r.iteration_times_s.size(), 3u);
  EXPECT_GT(r.total_time_s, 99.0);
}

}  // namespace
}  // namespace simtest
