// The dataflow evaluator against the event engine: the same numbers to the last bit, on
// seeded random scenarios whose values are not exactly representable (so that a
// different order of floating-point operations would show) or, for bytes, whole numbers
// half of the time (memory as a running total), with traces, capacities, latencies, speed
// traces, stage timing traces, a late start, and orders that deadlock.
#include <gtest/gtest.h>

#include <cmath>
#include <string>
#include <vector>

#include "helpers.h"

namespace simtest {
namespace {

using sim::Evaluator;
using sim::Phase;
using sim::RateTrace;

sim::Scenario rough_case(std::uint64_t seed, std::string& desc) {
  Rng rng(seed);
  const int S = rng.range(1, 8);
  const int M = rng.range(1, 24);
  const bool whole = rng.chance(0.5);
  // One case in eight has ties everywhere: durations in quarters of a second (0 among
  // them), no rate and no latency on the links (a message arrives when it is produced,
  // at the instant its consumer may start or an iteration begins), unit speed. The
  // same numbers are drawn, so the other cases are unchanged.
  const bool ties = seed % 8 == 0;
  auto quarter = [&](double t) { return ties ? std::floor(4 * t) / 4 : t; };
  auto bytes = [&](double most) { return whole ? std::floor(most * rng.uniform()) : most * rng.uniform(); };
  std::vector<sim::StageParams> st(S);
  for (auto& p : st) {
    p.fwd = quarter(0.05 + rng.uniform());
    p.bwd = quarter(0.05 + 2 * rng.uniform());
    p.act = bytes(1e6) + (whole ? 1 : 0.3);
    p.out = bytes(1e3);
    p.gout = rng.chance(0.1) ? 0.0 : bytes(1e3);
    p.static_bytes = bytes(1e9);
    p.opt = rng.chance(0.5) ? 0.0 : rng.uniform() * 0.1;
  }
  sim::Network net = sim::Network::uniform(S, std::nullopt);
  net.rewrite_channels([&](sim::ChannelSpec& ch) {
    ch.latency_s = rng.chance(0.5) ? 0.0 : rng.uniform() * 0.05;
    if (!rng.chance(0.1)) ch.set_rate(rough_trace(rng, 3e3));
    ch.capacity = rng.chance(0.6) ? 0 : rng.range(1, 4);
    if (ties) ch.latency_s = 0, ch.rate = nullptr;
  });
  for (int s = 0; s < S; ++s) {
    const RateTrace speed = rng.chance(0.5) ? RateTrace::constant(1.0) : rough_trace(rng, 1.5);
    net.set_speed(s, ties ? RateTrace::constant(1.0) : speed);
  }

  sim::Schedule sch;
  switch (rng.below(5)) {
    case 0: sch = sim::make_named("1f1b", S, M, std::nullopt); break;
    case 1: sch = sim::make_named("gpipe", S, M, std::nullopt); break;
    case 2: sch = sim::make_named("dapple-b", S, M, std::nullopt); break;
    default: sch = sim::make_named("kfkb", S, M, rng.range(1, M)); break;
  }
  const int iterations = rng.range(1, 4);
  desc = "seed " + std::to_string(seed) + ": S=" + std::to_string(S) + " M=" + std::to_string(M) + " " + sch.name() +
         " k=" + std::to_string(sch.k) + " iterations=" + std::to_string(iterations) + (ties ? " (ties)" : "");
  auto sc = sim::make_scenario(pipeline_from(st, M), std::move(net), std::move(sch), 1, iterations);
  sc.start_time_s = rng.chance(0.5) ? 0.0 : quarter(rng.uniform() * 10);
  if (rng.chance(0.3)) {
    std::vector<sim::OpTiming> timings;
    for (int it = 0; it < iterations; ++it)
      for (int s = 0; s < S; ++s)
        for (int m = 0; m < M; ++m)
          for (Phase ph : {Phase::Forward, Phase::Backward})
            if (rng.chance(0.3)) timings.push_back({it, s, m, ph, quarter(rng.uniform()), 0});
    sim::set_op_timings(sc, std::move(timings), "timings.csv");
    desc += " (stage timing trace)";
  }
  if (rng.chance(0.3)) {
    std::vector<sim::MessageTiming> timings;
    for (int it = 0; it < iterations; ++it)
      for (int s = 0; s < S; ++s)
        for (int m = 0; m < M; ++m)
          for (Phase ph : {Phase::Forward, Phase::Backward})
            if ((ph == Phase::Forward ? s + 1 < S : s > 0) && rng.chance(0.3))
              timings.push_back({it, s, m, ph, quarter(rng.uniform() * 0.2), 0});
    sim::set_message_timings(sc, std::move(timings), "latencies.csv");
    desc += " (message timing trace)";
  }
  return sc;
}

TEST(Dataflow, SameNumbersAsTheEventEngine) {
  int timed = 0, latencies = 0, capacity = 0, whole = 0;
  for (std::uint64_t seed = 1; seed <= 400; ++seed) {
    std::string desc;
    const sim::Scenario sc = rough_case(seed, desc);
    SCOPED_TRACE(desc);
    timed += !sc.op_timings.empty();
    latencies += !sc.message_timings.empty();
    whole += sc.model_stages[0].act == std::floor(sc.model_stages[0].act);
    for (int s = 0; s + 1 < sc.num_stages(); ++s) capacity += sc.network.channel(s, s + 1).capacity > 0;
    const auto events = sim::simulate(sc, {.evaluator = Evaluator::Events});
    const auto dataflow = sim::simulate(sc, {.evaluator = Evaluator::Dataflow});
    expect_same(events, dataflow);
    EXPECT_TRUE(dataflow_finishes(sc));  // no deadlock, no rate 0 forever: not the event engine's numbers
    if (testing::Test::HasFailure()) return;
  }
  EXPECT_GT(timed, 60);
  EXPECT_GT(latencies, 60);
  EXPECT_GT(capacity, 200);
  EXPECT_GT(whole, 150);
}

// When memory may be kept as a running total: every sum exact, so in any order.
TEST(Dataflow, MemorySumsExactInAnyOrder) {
  const double whole[] = {120e6, 7, 0, 3e9};
  EXPECT_TRUE(sim::sums_exact_in_any_order(6e9, whole, 4, 2048));
  const double halves[] = {0.5, 1.25, 3};  // multiples of 2^-2
  EXPECT_TRUE(sim::sums_exact_in_any_order(1.5, halves, 3, 1e6));
  const double tenth[] = {1e6, 0.1};  // 0.1 is no multiple of a power of two that fits
  EXPECT_FALSE(sim::sums_exact_in_any_order(0, tenth, 2, 10));
  const double big[] = {std::ldexp(1.0, 40), 1};  // units of 1 byte: 2^40 x 2^12 reaches 2^52 of them
  EXPECT_TRUE(sim::sums_exact_in_any_order(0, big, 2, 2047));
  EXPECT_FALSE(sim::sums_exact_in_any_order(0, big, 2, 4096));
  EXPECT_TRUE(sim::sums_exact_in_any_order(0, big, 1, 4096));  // units of 2^40 bytes: 2^12 of them
  const double bad[] = {-1, std::nan("")};
  EXPECT_FALSE(sim::sums_exact_in_any_order(0, bad, 1, 1));
  EXPECT_FALSE(sim::sums_exact_in_any_order(0, bad + 1, 1, 1));
  EXPECT_FALSE(sim::sums_exact_in_any_order(0.3, whole, 4, 1));
  EXPECT_TRUE(sim::sums_exact_in_any_order(0, nullptr, 0, 1));  // nothing but zeros
}

// The worked example of docs/model.md through the dataflow evaluator explicitly (the default,
// auto, is the dataflow evaluator already; this names it).
TEST(Dataflow, WorkedExample) {
  const auto p = uniform_pipeline(4, 8, 1.0, 2.0, 0.5);
  const struct {
    const char* name;
    std::optional<int> k;
    double t;
  } rows[] = {{"1f1b", std::nullopt, 41}, {"kfkb", 2, 36}, {"kfkb", 4, 36}, {"gpipe", std::nullopt, 36},
              {"dapple-b", std::nullopt, 36}};
  for (const auto& row : rows) {
    auto net = sim::Network::uniform(4, 1.0);
    const auto sc = sim::make_scenario(p, std::move(net), sim::make_named(row.name, 4, 8, row.k), 1, 2);
    const auto r = sim::simulate(sc, {.evaluator = Evaluator::Dataflow});
    ASSERT_EQ(r.iteration_times_s.size(), 2u);
    EXPECT_DOUBLE_EQ(r.iteration_times_s[0], row.t) << row.name;
    EXPECT_DOUBLE_EQ(r.iteration_times_s[1], row.t) << row.name;
  }
}

// The SimError a run throws, or "" when it finishes.
std::string error_of(const sim::Scenario& sc, Evaluator evaluator) {
  try {
    sim::simulate(sc, {.evaluator = evaluator});
  } catch (const SimError& e) {
    return e.what();
  }
  return "";
}

// Errors come from the event engine whichever evaluator was asked for: the same
// deadlock report, the same "stays 0 forever".
TEST(Dataflow, ErrorsAreTheEventEnginesReports) {
  // S = 2, M = 2, a cycle: stage 1 runs micro-batch 1 first, but stage 0 sends its
  // activation only after B0, which needs the gradient of micro-batch 0 from stage 1.
  sim::Schedule sch;
  sch.spec = sim::ScheduleSpec::custom();
  sch.stages = {{{Phase::Forward, 0}, {Phase::Backward, 0}, {Phase::Forward, 1}, {Phase::Backward, 1}},
                {{Phase::Forward, 1}, {Phase::Backward, 1}, {Phase::Forward, 0}, {Phase::Backward, 0}}};
  const auto sc = sim::make_scenario(uniform_pipeline(2, 2, 1.0, 2.0, 0.5), sim::Network::uniform(2, 1.0), sch, 1, 1);
  const std::string events = error_of(sc, Evaluator::Events);
  EXPECT_NE(events.find("deadlock"), std::string::npos) << events;
  EXPECT_EQ(events, error_of(sc, Evaluator::Dataflow));

  // A channel whose rate drops to 0 for good.
  auto net = sim::Network::uniform(2, 1.0);
  edit_channel(net, 0, 1, [](sim::ChannelSpec& c) { c.set_rate(RateTrace::piecewise({0.0, 1.5}, {1.0, 0.0}, 0.0)); });
  const auto stuck = sim::make_scenario(uniform_pipeline(2, 4, 1.0, 2.0, 0.5), std::move(net),
                                        sim::make_named("1f1b", 2, 4, std::nullopt), 1, 1);
  const std::string a = error_of(stuck, Evaluator::Events);
  EXPECT_NE(a.find("stays 0 forever"), std::string::npos) << a;
  EXPECT_EQ(a, error_of(stuck, Evaluator::Dataflow));
}

TEST(Dataflow, NoTimeline) {
  const auto sc = sim::make_scenario(uniform_pipeline(2, 4, 1.0, 2.0, 0.5), sim::Network::uniform(2, 1.0),
                                     sim::make_named("1f1b", 2, 4, std::nullopt), 1, 1);
  EXPECT_THROW(sim::simulate(sc, {.timeline = true, .evaluator = Evaluator::Dataflow}), InputError);
  // Auto with a timeline runs the event engine.
  EXPECT_TRUE(sim::simulate(sc, {.timeline = true}).timeline.has_value());
  EXPECT_FALSE(sim::simulate(sc).timeline.has_value());
}

}  // namespace
}  // namespace simtest
