// The engine on hand-checked scenarios: the worked examples of docs/model.md, the closed form with free
// communication, summary numbers, optimizer steps, speed traces, capacity, memory.
#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <map>
#include <tuple>
#include <optional>
#include <string>
#include <vector>

#include "eval/evaluator.h"
#include "helpers.h"

namespace simtest {
namespace {

using sim::Network;
using sim::Phase;
using sim::SimResult;

struct Named {
  const char* name;
  std::optional<int> k;
};

std::string label(const Named& n) {
  return n.k ? std::string(n.name) + " k=" + std::to_string(*n.k) : std::string(n.name);
}

// docs/model.md section 3: S = 4, M = 8 (B = 8, b = 1), fwd 1, bwd 2, out = gout = 0.5 bytes.
SimResult run_toy(const Named& n, const Network& net, int iterations = 1, bool timeline = false) {
  const auto p = uniform_pipeline(4, 8, 1.0, 2.0, 0.5);
  const auto sc = sim::make_scenario(p, net, sim::make_named(n.name, 4, 8, n.k), 1, iterations);
  return sim::simulate(sc, {.timeline = timeline});
}

struct WorkedExample {
  Named schedule;
  double time_half;          // messages 0.5 s
  std::vector<int> peak;     // peak in-flight per stage
  double time_two;           // messages 2 s
};

const std::vector<WorkedExample>& worked_examples() {
  static const std::vector<WorkedExample> v{
      {{"1f1b", std::nullopt}, 41, {4, 3, 2, 1}, 65},
      {{"kfkb", 2}, 36, {8, 6, 4, 2}, 49},
      {{"kfkb", 4}, 36, {8, 8, 8, 4}, 48},
      {{"gpipe", std::nullopt}, 36, {8, 8, 8, 8}, 52},
      {{"dapple-b", std::nullopt}, 36, {7, 5, 3, 1}, 48},
  };
  return v;
}

TEST(WorkedExamples, HalfSecondMessages) {
  for (const auto& ex : worked_examples()) {
    SCOPED_TRACE(label(ex.schedule));
    const auto r = run_toy(ex.schedule, Network::uniform(4, 1.0));
    ASSERT_EQ(r.iteration_times_s.size(), 1u);
    EXPECT_DOUBLE_EQ(r.iteration_times_s[0], ex.time_half);
    EXPECT_DOUBLE_EQ(r.total_time_s, ex.time_half);
    ASSERT_EQ(r.stages.size(), 4u);
    for (int s = 0; s < 4; ++s) EXPECT_EQ(r.stages[s].peak_inflight, ex.peak[s]) << "stage " << s;
  }
}

// The same 0.5 s per message from a latency-only network (no rate: latency only), and
// from a network file with a default rate.
TEST(WorkedExamples, HalfSecondMessagesFromLatencyOrNetworkFile) {
  const auto net_latency = sim::parse_network({{"latency_s", 0.5}}, "lat.json", 4);
  const auto net_default = sim::parse_network({{"default", {{"constant", 1.0}}}}, "def.json", 4);
  for (const auto& ex : worked_examples()) {
    SCOPED_TRACE(label(ex.schedule));
    EXPECT_DOUBLE_EQ(run_toy(ex.schedule, net_latency).total_time_s, ex.time_half);
    EXPECT_DOUBLE_EQ(run_toy(ex.schedule, net_default).total_time_s, ex.time_half);
  }
}

TEST(WorkedExamples, FreeMessages) {
  for (const auto& ex : worked_examples()) {
    SCOPED_TRACE(label(ex.schedule));
    EXPECT_DOUBLE_EQ(run_toy(ex.schedule, Network::uniform(4, std::nullopt)).total_time_s, 33.0);
    EXPECT_DOUBLE_EQ(run_toy(ex.schedule, Network::uniform(4, 1e30)).total_time_s, 33.0);
  }
}

TEST(WorkedExamples, TwoSecondMessages) {
  for (const auto& ex : worked_examples()) {
    SCOPED_TRACE(label(ex.schedule));
    const auto r = run_toy(ex.schedule, Network::uniform(4, 0.25));
    EXPECT_DOUBLE_EQ(r.total_time_s, ex.time_two);
    for (int s = 0; s < 4; ++s) EXPECT_EQ(r.stages[s].peak_inflight, ex.peak[s]) << "stage " << s;
  }
}

// The order example of docs/model.md section 2, S = 2, M = 4, k = 2, as the engine runs it.
TEST(WorkedExamples, SpecOrderExampleRunsInThatOrder) {
  const auto p = uniform_pipeline(2, 4, 1.0, 2.0, 0.5);
  const auto sc = sim::make_scenario(p, Network::uniform(2, 1.0), sim::make_named("kfkb", 2, 4, 2), 1, 1);
  const auto r = sim::simulate(sc, {.timeline = true});
  ASSERT_TRUE(r.timeline);
  std::vector<std::vector<sim::Op>> ran(2);
  for (const auto& o : r.timeline->ops) ran[o.stage].push_back(o.op);
  EXPECT_EQ(order_string(ran[0]), "F0 F1 F2 F3 B0 B1 B2 B3");
  EXPECT_EQ(order_string(ran[1]), "F0 F1 B0 B1 F2 F3 B2 B3");
}

TEST(WorkedExamples, SummaryNumbersK2) {
  const int iterations = 3;
  const auto r = run_toy({"kfkb", 2}, Network::uniform(4, 1.0), iterations);
  ASSERT_EQ(r.iteration_times_s.size(), static_cast<std::size_t>(iterations));
  for (double t : r.iteration_times_s) EXPECT_DOUBLE_EQ(t, 36.0);
  EXPECT_DOUBLE_EQ(r.total_time_s, 108.0);
  EXPECT_DOUBLE_EQ(r.mean_iteration_time_s(), 36.0);
  EXPECT_DOUBLE_EQ(r.throughput_samples_per_s(), 8.0 / 36.0);
  EXPECT_DOUBLE_EQ(r.bubble_fraction(), 1.0 - 96.0 / (4 * 36.0));
  for (const auto& st : r.stages) {
    EXPECT_DOUBLE_EQ(st.busy_s, 24.0 * iterations);
    EXPECT_DOUBLE_EQ(st.bubble_s, (36.0 - 24.0) * iterations);
  }
  EXPECT_EQ(r.compute_ops, 4u * 16u * iterations);
  EXPECT_EQ(r.transfers, 6u * 8u * iterations);

  const auto one = run_toy({"kfkb", 2}, Network::uniform(4, 1.0), 1);
  const auto j = sim::summary_json(one);
  EXPECT_EQ(j["schedule"], "kfkb");
  EXPECT_EQ(j["k"], 2);
  EXPECT_EQ(j["micro_batch_size"], 1);
  EXPECT_EQ(j["micro_batches"], 8);
  EXPECT_EQ(j["stages"], 4);
  EXPECT_EQ(j["iterations"], 1);
  ASSERT_EQ(j["iteration_times_s"].size(), 1u);
  EXPECT_DOUBLE_EQ(j["iteration_times_s"][0].get<double>(), 36.0);
  EXPECT_DOUBLE_EQ(j["mean_iteration_time_s"].get<double>(), 36.0);
  EXPECT_DOUBLE_EQ(j["throughput_samples_per_s"].get<double>(), 8.0 / 36.0);
  EXPECT_DOUBLE_EQ(j["bubble_fraction"].get<double>(), 1.0 - 96.0 / 144.0);
  ASSERT_EQ(j["per_stage"].size(), 4u);
  const std::vector<int> peak{8, 6, 4, 2};
  for (int s = 0; s < 4; ++s) {
    EXPECT_EQ(j["per_stage"][s]["stage"], s);
    EXPECT_DOUBLE_EQ(j["per_stage"][s]["busy_s"].get<double>(), 24.0);
    EXPECT_EQ(j["per_stage"][s]["peak_inflight"], peak[s]);
  }
  const std::string text = sim::summary_text(one);
  EXPECT_THAT(text, testing::HasSubstr("kfkb k=2"));
  EXPECT_THAT(text, testing::HasSubstr("36"));
}

// Closed form with free communication: (M + S - 1)(fwd + bwd) for every schedule.
TEST(ClosedForm, FreeCommunicationEverySchedule) {
  const std::vector<std::pair<double, double>> durations{{1, 2}, {0.5, 0.5}, {1.25, 2.75}, {0.5, 1.0}, {2.0, 0.25}};
  int checked = 0;
  for (int S = 1; S <= 5; ++S) {
    for (int M : {1, 2, 3, 5, 7, 8}) {
      for (auto [f, b] : durations) {
        const auto p = uniform_pipeline(S, M, f, b, 3.0);
        std::vector<sim::Schedule> all{sim::make_named("1f1b", S, M, std::nullopt),
                                       sim::make_named("gpipe", S, M, std::nullopt),
                                       sim::make_named("dapple-b", S, M, std::nullopt)};
        for (int k = 1; k <= M; ++k) all.push_back(sim::make_named("kfkb", S, M, k));
        for (const auto& sch : all) {
          SCOPED_TRACE(testing::Message() << sch.name() << " k=" << sch.k << " S=" << S << " M=" << M << " fwd=" << f
                                          << " bwd=" << b);
          const auto sc = sim::make_scenario(p, Network::uniform(S, std::nullopt), sch, 1, 2);
          const auto r = sim::simulate(sc);
          const double want = (M + S - 1) * (f + b);
          ASSERT_EQ(r.iteration_times_s.size(), 2u);
          EXPECT_DOUBLE_EQ(r.iteration_times_s[0], want);
          EXPECT_DOUBLE_EQ(r.iteration_times_s[1], want);
          for (const auto& st : r.stages) EXPECT_DOUBLE_EQ(st.busy_s, 2 * M * (f + b));
          ++checked;
        }
      }
    }
  }
  EXPECT_GT(checked, 500);
}

// Optimizer steps end the iteration: T = max over s of (end of s + opt[s]). In 1f1b with
// free messages (S = 4, M = 8, fwd 1, bwd 2) stage 3 ends at 27 and stage 0 at 33.
TEST(Engine, OptimizerStepExtendsIteration) {
  auto run = [](double opt0, double opt3, int iterations) {
    auto doc = uniform_pipeline_json(4, 8, 1.0, 2.0, 0.5);
    doc["stages"][0]["optimizer_s"] = opt0;
    doc["stages"][3]["optimizer_s"] = opt3;
    const auto p = sim::parse_pipeline(doc, "opt.json");
    return sim::simulate(sim::make_scenario(p, Network::uniform(4, std::nullopt),
                                            sim::make_named("1f1b", 4, 8, std::nullopt), 1, iterations));
  };
  EXPECT_DOUBLE_EQ(run(0, 5, 1).total_time_s, 33.0);
  EXPECT_DOUBLE_EQ(run(0, 7, 1).total_time_s, 34.0);
  EXPECT_DOUBLE_EQ(run(1, 0, 1).total_time_s, 34.0);
  const auto r = run(1, 7, 2);
  ASSERT_EQ(r.iteration_times_s.size(), 2u);
  EXPECT_DOUBLE_EQ(r.iteration_times_s[0], 34.0);
  EXPECT_DOUBLE_EQ(r.iteration_times_s[1], 34.0);
  EXPECT_DOUBLE_EQ(r.stages[0].optimizer_s, 2.0);
  EXPECT_DOUBLE_EQ(r.stages[3].optimizer_s, 14.0);
  EXPECT_DOUBLE_EQ(r.stages[0].busy_s, 2 * 24.0);  // optimizer time is not busy time
}

// A stage speed trace stretches ops; busy time counts the stretched duration, and a
// later iteration sees the trace at its own absolute time.
TEST(Engine, StageSpeedTrace) {
  const auto p = uniform_pipeline(1, 1, 1.0, 1.0, 0.0);
  const auto sch = sim::make_named("1f1b", 1, 1, std::nullopt);
  {
    const auto net = sim::parse_network({{"stages", {{{"stage", 0}, {"speed", {{"constant", 0.5}}}}}}}, "n.json", 1);
    const auto r = sim::simulate(sim::make_scenario(p, net, sch, 1, 1));
    EXPECT_DOUBLE_EQ(r.total_time_s, 4.0);
    EXPECT_DOUBLE_EQ(r.stages[0].busy_s, 4.0);
  }
  {
    // Speed 1 until t = 2, then 0.5: iteration 0 takes 2 s, iteration 1 takes 4 s.
    const auto net = sim::parse_network(
        {{"stages", {{{"stage", 0}, {"speed", {{"points", {{0, 1.0}, {2, 0.5}}}}}}}}}, "n.json", 1);
    const auto r = sim::simulate(sim::make_scenario(p, net, sch, 1, 3), {.timeline = true});
    ASSERT_EQ(r.iteration_times_s.size(), 3u);
    EXPECT_DOUBLE_EQ(r.iteration_times_s[0], 2.0);
    EXPECT_DOUBLE_EQ(r.iteration_times_s[1], 4.0);
    EXPECT_DOUBLE_EQ(r.iteration_times_s[2], 4.0);
    EXPECT_DOUBLE_EQ(r.stages[0].busy_s, 10.0);
    ASSERT_EQ(r.timeline->ops.size(), 6u);
    EXPECT_DOUBLE_EQ(r.timeline->ops[2].start, 2.0);
    EXPECT_DOUBLE_EQ(r.timeline->ops[2].end, 4.0);
  }
  {
    // An op straddling a slowdown: F0 at speed 1 on [0, 0.5), then 0.25 -> ends at 2.5.
    const auto net = sim::parse_network(
        {{"stages", {{{"stage", 0}, {"speed", {{"points", {{0, 1.0}, {0.5, 0.25}, {10, 1.0}}}}}}}}}, "n.json", 1);
    const auto r = sim::simulate(sim::make_scenario(p, net, sch, 1, 1), {.timeline = true});
    EXPECT_DOUBLE_EQ(r.timeline->ops[0].end, 2.5);
    EXPECT_DOUBLE_EQ(r.total_time_s, 6.5);  // B0: 1 nominal second at 0.25
  }
}

// Capacity Q: the transfer of the n-th message waits until the op consuming message
// n - Q has started. S = 2, M = 3, gpipe, stage 0 fwd 1, stage 1 fwd 5, latency 1.
TEST(Engine, ChannelCapacity) {
  sim::StageParams s0{.fwd = 1, .bwd = 1, .act = 0, .out = 0, .gout = 0, .static_bytes = 0, .opt = 0};
  sim::StageParams s1{.fwd = 5, .bwd = 1, .act = 0, .out = 0, .gout = 0, .static_bytes = 0, .opt = 0};
  const auto p = pipeline_from({s0, s1}, 3);
  auto run = [&](int capacity) {
    auto net = sim::parse_network(
        {{"latency_s", 1.0}, {"channels", {{{"from", 0}, {"to", 1}, {"capacity", capacity}}}}}, "cap.json", 2);
    const auto r = sim::simulate(sim::make_scenario(p, net, sim::make_named("gpipe", 2, 3, std::nullopt), 1, 1),
                                 {.timeline = true});
    std::vector<double> starts;
    for (const auto& t : r.timeline->transfers)
      if (t.from == 0) starts.push_back(t.start);
    return std::pair(starts, r);
  };
  {
    // Q = 1: message 2 waits for F(1,1), which starts at 7 (F(1,0) runs [2, 7]).
    auto [starts, r] = run(1);
    EXPECT_THAT(starts, testing::ElementsAre(1.0, 2.0, 7.0));
    EXPECT_LE(r.channels[0].peak_queue_depth, 1);
  }
  {
    // Q = 2: message 2 waits for F(1,0), started at 2; it is produced at 3.
    auto [starts, r] = run(2);
    EXPECT_THAT(starts, testing::ElementsAre(1.0, 2.0, 3.0));
    EXPECT_LE(r.channels[0].peak_queue_depth, 2);
  }
  {
    const auto net = sim::parse_network({{"latency_s", 1.0}}, "cap.json", 2);
    const auto r = sim::simulate(sim::make_scenario(p, net, sim::make_named("gpipe", 2, 3, std::nullopt), 1, 1));
    EXPECT_EQ(r.channels[0].peak_queue_depth, 2);  // messages 1 and 2 wait while F(1,0) runs
  }
}

// Memory (docs/model.md section 5): static + act x in-flight + bytes waiting in the receive buffer.
TEST(Memory, SingleStageGPipeAndOneFOneB) {
  const auto p = uniform_pipeline(1, 4, 1.0, 1.0, 0.0, /*act=*/10.0, /*static=*/100.0);
  auto peak = [&](const char* name) {
    const auto sc = sim::make_scenario(p, Network::uniform(1, std::nullopt), sim::make_named(name, 1, 4, std::nullopt), 1, 2);
    return sim::simulate(sc).stages[0].peak_memory_bytes;
  };
  EXPECT_DOUBLE_EQ(peak("gpipe"), 140.0);
  EXPECT_DOUBLE_EQ(peak("1f1b"), 110.0);
  EXPECT_DOUBLE_EQ(peak("dapple-b"), 110.0);
}

// Two stages, gpipe, M = 2, free messages of 500 bytes (gout defaults to out = 500).
// Stage 0: fwd 1, bwd 5, act 7, static 0. Stage 1: fwd 10, bwd 1, act 100, static 1000.
//   stage 0: F0 [0,1] F1 [1,2] ... B0 [22,27] B1 [27,32]
//   stage 1: F0 [1,11] F1 [11,21] B0 [21,22] B1 [22,23]
// Stage 1 at t in [2, 11): 1000 + 100 (F0) + 500 (activation 1 waiting) = 1600.
// Stage 0 at t in [23, 27): 2 x 7 + 500 (gradient 1 waiting while B0 runs) = 514.
TEST(Memory, ReceiveBufferCountsTowardsMemory) {
  sim::StageParams s0{.fwd = 1, .bwd = 5, .act = 7, .out = 500, .gout = 0, .static_bytes = 0, .opt = 0};
  sim::StageParams s1{.fwd = 10, .bwd = 1, .act = 100, .out = 0, .gout = 500, .static_bytes = 1000, .opt = 0};
  const auto p = pipeline_from({s0, s1}, 2);
  const auto sc = sim::make_scenario(p, Network::uniform(2, std::nullopt), sim::make_named("gpipe", 2, 2, std::nullopt), 1, 1);
  const auto r = sim::simulate(sc, {.timeline = true});
  EXPECT_DOUBLE_EQ(r.total_time_s, 32.0);
  EXPECT_DOUBLE_EQ(r.stages[1].peak_memory_bytes, 1600.0);
  EXPECT_DOUBLE_EQ(r.stages[0].peak_memory_bytes, 514.0);
  EXPECT_EQ(r.stages[0].peak_inflight, 2);
  EXPECT_EQ(r.stages[1].peak_inflight, 2);
  // Without the waiting message the peak of stage 1 would be 1000 + 2 x 100 = 1200.
  EXPECT_EQ(r.channels[0].peak_queue_depth, 1);
  EXPECT_EQ(r.channels[1].peak_queue_depth, 1);

  // The memory counter of stage 1 passes through 1600 on [2, 11) and 1200 on [11, 21).
  std::map<double, double> mem1;
  for (const auto& c : r.timeline->counters)
    if (c.kind == sim::Counter::Memory && c.stage == 1) mem1[c.time] = c.value;
  ASSERT_TRUE(mem1.count(2.0));
  EXPECT_DOUBLE_EQ(mem1[2.0], 1600.0);
  ASSERT_TRUE(mem1.count(11.0));
  EXPECT_DOUBLE_EQ(mem1[11.0], 1200.0);
}

// A message consumed the instant it arrives never shows up in the peak (releases
// before allocations at equal times), and neither does a B ending as the next F starts.
// S = 2, M = 2, 1f1b, messages of 1000 bytes, free. Stage 0: fwd 1, bwd 1; stage 1:
// fwd 0.5, bwd 0.5. Stage 0 runs F0 [0,1] F1 [1,2] B0 [2,3] B1 [3,4]; stage 1 runs
// F0 [1,1.5] B0 [1.5,2] F1 [2,2.5] B1 [2.5,3]: every message arrives exactly when its
// consumer starts.
// Stage 0 (fwd = bwd = 1 s, 10-byte activations, 1000-byte messages, 100 static bytes)
// in front of `last`, under 1F1B with M micro-batches, on a network without rates.
sim::Scenario behind_stage0(const sim::StageParams& last, int M) {
  const sim::StageParams s0{.fwd = 1, .bwd = 1, .act = 10, .out = 1000, .gout = 0, .static_bytes = 100, .opt = 0};
  return sim::make_scenario(pipeline_from({s0, last}, M), Network::uniform(2, std::nullopt),
                            sim::make_named("1f1b", 2, M, std::nullopt), 1, 1);
}

TEST(Memory, EqualTimesReleaseBeforeAllocate) {
  const auto r =
      sim::simulate(behind_stage0({.fwd = 0.5, .bwd = 0.5, .act = 10, .out = 0, .gout = 1000, .static_bytes = 100, .opt = 0}, 2));
  EXPECT_DOUBLE_EQ(r.total_time_s, 4.0);
  EXPECT_DOUBLE_EQ(r.stages[1].peak_memory_bytes, 110.0);
  EXPECT_EQ(r.stages[1].peak_inflight, 1);
  EXPECT_EQ(r.stages[0].peak_inflight, 2);
  EXPECT_DOUBLE_EQ(r.stages[0].peak_memory_bytes, 120.0);
  EXPECT_EQ(r.channels[0].peak_queue_depth, 0);
  EXPECT_EQ(r.channels[1].peak_queue_depth, 0);
}

// Changes at one instant settle once: stage 1's ops and the messages take no time, so
// at each arrival (1F1B, S = 2, M = 3; stage 0: F0 F1 B0 F2 B1 B2, 1 s each) stage 1's
// F starts and its B starts and ends at that very instant, and nothing is held when time
// moves on (docs/model.md, levels). Both evaluators.
TEST(Memory, ZeroDurationOpsAtOneInstantHoldNothing) {
  const auto sc = behind_stage0({.fwd = 0, .bwd = 0, .act = 10, .out = 0, .gout = 1000, .static_bytes = 100, .opt = 0}, 3);
  for (const sim::Evaluator e : {sim::Evaluator::Events, sim::Evaluator::Dataflow}) {
    const auto r = sim::simulate(sc, {.evaluator = e});
    EXPECT_DOUBLE_EQ(r.total_time_s, 6.0);
    EXPECT_DOUBLE_EQ(r.stages[1].peak_memory_bytes, 100.0);
    EXPECT_EQ(r.stages[1].peak_inflight, 0);
    EXPECT_EQ(r.channels[0].peak_queue_depth, 0);
  }
}

// A token bucket on each channel (docs/model.md, "Shaped links"): 1 MB messages at
// 100 MB/s take 10 ms; with a 250 kB bucket on an idle channel, 7.5 ms. S = 2, M = 1,
// fwd = bwd = 1 s: F0 [0, 1], activation [1, 1.0075], F1 [1.0075, 2.0075], B1 [2.0075,
// 3.0075], gradient [3.0075, 3.015], B0 [3.015, 4.015]. The dataflow evaluator hands
// the scenario to the event engine.
TEST(Engine, TokenBucketGivesAnIdleChannelAHeadStart) {
  sim::StageParams s0{.fwd = 1, .bwd = 1, .act = 0, .out = 1e6, .gout = 0, .static_bytes = 0, .opt = 0};
  sim::StageParams s1{.fwd = 1, .bwd = 1, .act = 0, .out = 0, .gout = 1e6, .static_bytes = 0, .opt = 0};
  Network net = Network::uniform(2, 1e8);
  net.rewrite_channels([](sim::ChannelSpec& ch) { ch.burst_bytes = 2.5e5; });
  const auto sc = sim::make_scenario(pipeline_from({s0, s1}, 1), net, sim::make_named("1f1b", 2, 1, std::nullopt), 1, 1);
  for (const sim::Evaluator e : {sim::Evaluator::Events, sim::Evaluator::Dataflow}) {
    const auto r = sim::simulate(sc, {.evaluator = e});
    EXPECT_DOUBLE_EQ(r.total_time_s, 4.015);
    EXPECT_NEAR(r.channels[0].busy_s, 0.0075, 1e-12);  // end - start of times near 1 and 3
    EXPECT_NEAR(r.channels[1].busy_s, 0.0075, 1e-12);
  }
  EXPECT_FALSE(sim::eval::run_dataflow(sc, sim::eval::build_program(sc), {}).has_value());
  const auto plain = sim::simulate(sim::make_scenario(pipeline_from({s0, s1}, 1), Network::uniform(2, 1e8),
                                                      sim::make_named("1f1b", 2, 1, std::nullopt), 1, 1));
  EXPECT_DOUBLE_EQ(plain.total_time_s, 4.02);
}

sim::Schedule custom_order(const std::vector<std::vector<sim::Op>>& stages) {
  sim::Schedule s;
  s.spec = sim::ScheduleSpec::custom();
  s.k = 0;
  s.stages = stages;
  return s;
}

// A channel carries its messages in the order the receiver consumes them, not the
// order the sender produces them. S = 2, M = 2, fwd = bwd = 1, 0.5 s messages.
TEST(Engine, ChannelsDeliverInReceiverOrder) {
  using sim::Op;
  const Op F0{Phase::Forward, 0}, F1{Phase::Forward, 1}, B0{Phase::Backward, 0}, B1{Phase::Backward, 1};
  const auto p = uniform_pipeline(2, 2, 1.0, 1.0, 0.5);
  auto transfers = [](const SimResult& r, int from) {
    std::vector<std::tuple<int, double, double>> v;
    for (const auto& t : r.timeline->transfers)
      if (t.from == from) v.emplace_back(t.micro_batch, t.start, t.end);
    return v;
  };
  using T = std::tuple<int, double, double>;
  {
    // Stage 1 consumes activation 1 first: it leaves when F(0,1) ends at 2; activation
    // 0 waits behind it. Stage 1: F1 [2.5,3.5] F0 [3.5,4.5] B0 [4.5,5.5] B1 [5.5,6.5];
    // stage 0: B0 [6,7] B1 [7,8].
    const auto sc = sim::make_scenario(p, Network::uniform(2, 1.0), custom_order({{F0, F1, B0, B1}, {F1, F0, B0, B1}}), 1, 1);
    const auto r = sim::simulate(sc, {.timeline = true});
    EXPECT_THAT(transfers(r, 0), testing::ElementsAre(T{1, 2.0, 2.5}, T{0, 2.5, 3.0}));
    EXPECT_THAT(transfers(r, 1), testing::ElementsAre(T{0, 5.5, 6.0}, T{1, 6.5, 7.0}));
    EXPECT_DOUBLE_EQ(r.total_time_s, 8.0);
  }
  {
    // Stage 0 consumes gradient 1 first: it leaves when B(1,1) ends at 5.5.
    // Stage 1: F0 [1.5,2.5] F1 [2.5,3.5] B0 [3.5,4.5] B1 [4.5,5.5]; stage 0: B1 [6,7] B0 [7,8].
    const auto sc = sim::make_scenario(p, Network::uniform(2, 1.0), custom_order({{F0, F1, B1, B0}, {F0, F1, B0, B1}}), 1, 1);
    const auto r = sim::simulate(sc, {.timeline = true});
    EXPECT_THAT(transfers(r, 0), testing::ElementsAre(T{0, 1.0, 1.5}, T{1, 2.0, 2.5}));
    EXPECT_THAT(transfers(r, 1), testing::ElementsAre(T{1, 5.5, 6.0}, T{0, 6.0, 6.5}));
    EXPECT_DOUBLE_EQ(r.total_time_s, 8.0);
  }
}

TEST(Engine, ScenarioChecks) {
  const auto p = uniform_pipeline(2, 4, 1.0, 1.0, 1.0);
  EXPECT_THROW(sim::make_scenario(p, Network::uniform(3, 1.0), sim::make_named("1f1b", 2, 4, std::nullopt), 1, 1),
               InputError);
  EXPECT_THROW(sim::make_scenario(p, Network::uniform(2, 1.0), sim::make_named("1f1b", 3, 4, std::nullopt), 1, 1),
               InputError);
  EXPECT_THROW(sim::make_scenario(p, Network::uniform(2, 1.0), sim::make_named("1f1b", 2, 2, std::nullopt), 1, 1),
               InputError);  // the schedule is for M = 2, the pipeline has M = 4
  EXPECT_THAT([&] { sim::make_scenario(p, Network::uniform(2, 1.0), sim::make_named("1f1b", 2, 4, std::nullopt), 1, 0); },
              testing::ThrowsMessage<InputError>(testing::HasSubstr("--iterations")));
  const auto sc = sim::make_scenario(p, Network::uniform(2, 1.0), sim::make_named("1f1b", 2, 4, std::nullopt), 1, 1);
  EXPECT_EQ(sc.num_stages(), 2);
  EXPECT_EQ(sc.micro_batches(), 4);
  EXPECT_EQ(sc.pipeline_name, "toy");
}

}  // namespace
}  // namespace simtest
