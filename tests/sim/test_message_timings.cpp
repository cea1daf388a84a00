// Message timing traces at the engine level: measured latencies replace the channel's
// for exactly the messages (iteration, sending model stage, micro-batch, direction) they
// list, in both evaluators.
#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <map>
#include <string>
#include <tuple>

#include "helpers.h"

namespace simtest {
namespace {

using ::testing::HasSubstr;
using sim::Evaluator;
using sim::MessageTiming;
using sim::Phase;
using sim::ScheduleSpec;

ScheduleSpec spec(const char* family, std::optional<int> k, int v) {
  ScheduleSpec s = ScheduleSpec::named(family, k);
  s.virtual_stages = v;
  return s;
}

// The worked examples' pipeline (docs/model.md §3 and §14: 4 stages, M = 8, forward 1 s
// and backward 2 s per stage) with messages of 0 bytes on channels of latency
// `latency_s`.
sim::Scenario worked(const ScheduleSpec& s, double latency_s, int iterations = 1) {
  const int v = s.virtual_stages, D = 4, M = 8;
  const auto p = uniform_pipeline(D * v, M, 1.0 / v, 2.0 / v, 0.0);
  return sim::make_scenario(p, sim::Network::uniform(D, 1.0, latency_s), sim::make_schedule(s, D, M), 1, iterations);
}

// Every message of iteration `it` (local ones too, which take no transfer) at `latency_s`.
std::vector<MessageTiming> every_message(const sim::Scenario& sc, int it, double latency_s) {
  std::vector<MessageTiming> out;
  const int J = sc.num_model_stages();
  for (int j = 0; j < J; ++j)
    for (int m = 0; m < sc.micro_batches(); ++m) {
      if (j + 1 < J) out.push_back({it, j, m, Phase::Forward, latency_s, 0});
      if (j > 0) out.push_back({it, j, m, Phase::Backward, latency_s, 0});
    }
  return out;
}

struct Row {
  const char* label;
  ScheduleSpec spec;
  double times[2];  // every message 0.5 and 2 s in transit (the SPEC's worked examples)
};

const Row kRows[] = {
    {"1f1b", spec("1f1b", {}, 1), {41, 65}},
    {"kfkb k=2", spec("kfkb", 2, 1), {36, 49}},
    {"interleaved-1f1b v=2", spec("interleaved-1f1b", {}, 2), {35.5, 70}},
    {"zbv", spec("zbv", {}, 2), {32.5, 67.5}},
    {"dualpipev", spec("dualpipev", {}, 2), {34, 70}},
};

TEST(MessageTimings, EveryMessageAtTheLatencyGivesTheWorkedExamples) {
  for (const Row& row : kRows)
    for (int i = 0; i < 2; ++i) {
      const double transit = i == 0 ? 0.5 : 2.0;
      SCOPED_TRACE(fmt::format("{}, {} s", row.label, transit));
      sim::Scenario sc = worked(row.spec, 0.0);
      sim::set_message_timings(sc, every_message(sc, 0, transit), "trace.csv");
      for (Evaluator e : {Evaluator::Events, Evaluator::Dataflow})
        EXPECT_DOUBLE_EQ(sim::simulate(sc, {.evaluator = e}).total_time_s, row.times[i]);
    }
}

TEST(MessageTimings, ReplaceExactlyTheListedMessages) {
  const sim::Scenario plain = worked(spec("1f1b", {}, 1), 0.25, 2);
  sim::Scenario timed = plain;
  sim::set_message_timings(
      timed, {MessageTiming{1, 0, 0, Phase::Forward, 1.75, 3}, MessageTiming{0, 3, 5, Phase::Backward, 0.0, 2}},
      "trace.csv");
  const auto r = sim::simulate(timed, {.timeline = true});
  int changed = 0;
  for (const auto& t : r.timeline->transfers) {
    const double latency = t.moving - t.start;
    if (t.iteration == 1 && t.model_stage == 0 && t.micro_batch == 0 && !t.gradient) {
      EXPECT_DOUBLE_EQ(latency, 1.75);
      ++changed;
    } else if (t.iteration == 0 && t.model_stage == 3 && t.micro_batch == 5 && t.gradient) {
      EXPECT_DOUBLE_EQ(latency, 0.0);
      ++changed;
    } else {
      EXPECT_DOUBLE_EQ(latency, 0.25) << t.iteration << " " << t.model_stage << " " << t.micro_batch;
    }
  }
  EXPECT_EQ(changed, 2);
  // The first is on the critical path (the warm-up's first message): 1.5 s later. The
  // second has slack.
  const auto before = sim::simulate(plain).iteration_times_s;
  EXPECT_DOUBLE_EQ(r.iteration_times_s[0], before[0]);
  EXPECT_DOUBLE_EQ(r.iteration_times_s[1], before[1] + 1.5);
  EXPECT_EQ(sim::simulate(timed, {.evaluator = Evaluator::Dataflow}).iteration_times_s, r.iteration_times_s);
}

TEST(MessageTimings, LatencyBeforeTheBytesAtTheRate) {
  // 1 byte at 1 byte/s after a latency of 0.5 s: the transfer ends 1.5 s after it starts.
  const auto p = uniform_pipeline(2, 1, 1.0, 2.0, 1.0);
  sim::Scenario sc =
      sim::make_scenario(p, sim::Network::uniform(2, 1.0), sim::make_named("1f1b", 2, 1, std::nullopt), 1, 1);
  sim::set_message_timings(sc, {MessageTiming{0, 0, 0, Phase::Forward, 0.5, 1}}, "trace.csv");
  // F0 on stage 0 (1 s), transfer 1.5 s, F0 and B0 on stage 1 (3 s), gradient 1 s, B0 (2 s).
  for (Evaluator e : {Evaluator::Events, Evaluator::Dataflow})
    EXPECT_DOUBLE_EQ(sim::simulate(sc, {.evaluator = e}).total_time_s, 8.5);
}

TEST(MessageTimings, IterationsBeyondTheRunAreIgnored) {
  sim::Scenario sc = worked(spec("1f1b", {}, 1), 0.0);
  sim::set_message_timings(sc, {MessageTiming{5, 0, 0, Phase::Forward, 100.0, 1}}, "trace.csv");
  EXPECT_DOUBLE_EQ(sim::simulate(sc).total_time_s, 33.0);
}

TEST(MessageTimings, BadEntriesNameTheFileAndLine) {
  auto bad = [](MessageTiming t, const char* what) {
    sim::Scenario sc = worked(spec("1f1b", {}, 1), 0.0);
    try {
      sim::set_message_timings(sc, {t}, "trace.csv");
      ADD_FAILURE() << "accepted " << what;
    } catch (const InputError& e) {
      EXPECT_THAT(e.what(), HasSubstr("trace.csv:7"));
      EXPECT_THAT(e.what(), HasSubstr(what));
    }
  };
  bad(MessageTiming{0, 4, 0, Phase::Backward, 1.0, 7}, "stage 4 does not exist");
  bad(MessageTiming{0, 0, 8, Phase::Forward, 1.0, 7}, "micro_batch 8 does not exist");
  bad(MessageTiming{0, 0, 0, Phase::Forward, -1.0, 7}, "latency_s");
  bad(MessageTiming{-1, 0, 0, Phase::Forward, 1.0, 7}, "iteration -1");
  bad(MessageTiming{0, 3, 0, Phase::Forward, 1.0, 7}, "stage 3 is the last and sends no activation message");
  bad(MessageTiming{0, 0, 0, Phase::Backward, 1.0, 7}, "stage 0 is the first and sends no gradient message");
  bad(MessageTiming{0, 1, 0, Phase::BackwardInput, 1.0, 7}, "phase must be F (the activation message) or B");
  sim::Scenario sc = worked(spec("1f1b", {}, 1), 0.0);
  try {
    sim::set_message_timings(
        sc, {MessageTiming{0, 2, 1, Phase::Backward, 1.0, 4}, MessageTiming{0, 2, 1, Phase::Backward, 2.0, 7}},
        "trace.csv");
    ADD_FAILURE() << "accepted a duplicate";
  } catch (const InputError& e) {
    EXPECT_THAT(e.what(),
                HasSubstr("trace.csv:7: the gradient message of B1 of stage 2 in iteration 0 is listed twice (also on "
                          "line 4)"));
  }
}

}  // namespace
}  // namespace simtest
