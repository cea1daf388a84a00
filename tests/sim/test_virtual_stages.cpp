// Model stages on stages, split backward and W fill (docs/model.md §14): the worked
// examples, exactly, from both evaluators.
#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <cmath>
#include <map>
#include <tuple>

#include <fmt/format.h>

#include "helpers.h"

namespace simtest {
namespace {

using sim::Evaluator;
using sim::Phase;
using sim::ScheduleSpec;
using sim::WFill;

struct Row {
  const char* label;
  ScheduleSpec spec;
  double times[3];  // messages taking 0, 0.5 and 2 s
  int inflight[4];  // peak in-flight per stage with 0.5 s messages
};

ScheduleSpec spec(const char* family, std::optional<int> k, int v, bool split, WFill fill) {
  ScheduleSpec s = ScheduleSpec::named(family, k);
  s.virtual_stages = v;
  s.split_backward = split;
  s.w_fill = fill;
  return s;
}

const Row kRows[] = {
    {"1f1b", spec("1f1b", {}, 1, false, WFill::Static), {33, 41, 65}, {4, 3, 2, 1}},
    {"kfkb k=2", spec("kfkb", 2, 1, false, WFill::Static), {33, 36, 49}, {8, 6, 4, 2}},
    {"1f1b split dynamic", spec("1f1b", {}, 1, true, WFill::Dynamic), {27, 31, 55}, {6, 5, 4, 3}},
    {"kfkb k=2 split dynamic", spec("kfkb", 2, 1, true, WFill::Dynamic), {27, 28.5, 43}, {8, 8, 8, 8}},
    {"interleaved-zb v=1", spec("interleaved-zb", {}, 1, false, WFill::Static), {27, 33, 57}, {4, 4, 4, 4}},
    {"interleaved-1f1b v=2", spec("interleaved-1f1b", {}, 2, false, WFill::Static), {28.5, 35.5, 70}, {11, 9, 7, 5}},
    {"looped-bfs v=2", spec("looped-bfs", {}, 2, false, WFill::Static), {28.5, 31.5, 78}, {16, 16, 16, 16}},
    {"interleaved-zb v=2", spec("interleaved-zb", {}, 2, false, WFill::Static), {25.5, 36, 81}, {8, 8, 8, 8}},
    {"zbv", spec("zbv", {}, 2, false, WFill::Static), {25.5, 32.5, 67.5}, {8, 8, 8, 8}},
    {"dualpipev", spec("dualpipev", {}, 2, false, WFill::Static), {25.5, 34, 70}, {9, 9, 9, 9}},
    {"zbv dynamic", spec("zbv", {}, 2, false, WFill::Dynamic), {25.5, 30, 67.5}, {9, 11, 13, 16}},
};

// The 4-stage pipeline of docs/model.md §3 (forward 1 s, backward 2 s, so I = W = 1 s), or
// each of its stages cut in two (8 model stages, forward 0.5 s, backward 1 s), with
// messages of `transit` bytes at 1 byte/s.
sim::Scenario worked(const ScheduleSpec& s, double transit) {
  const int v = s.virtual_stages, D = 4, M = 8;
  const auto p = uniform_pipeline(D * v, M, 1.0 / v, 2.0 / v, transit);
  return sim::make_scenario(p, sim::Network::uniform(D, 1.0), sim::make_schedule(s, D, M), 1, 1);
}

TEST(VirtualStages, WorkedExamplesExactly) {
  for (const Row& row : kRows) {
    SCOPED_TRACE(row.label);
    const double transits[3] = {0.0, 0.5, 2.0};
    for (int t = 0; t < 3; ++t) {
      const auto sc = worked(row.spec, transits[t]);
      for (Evaluator e : {Evaluator::Events, Evaluator::Dataflow}) {
        const auto r = sim::simulate(sc, {.evaluator = e});
        EXPECT_EQ(r.iteration_times_s[0], row.times[t]) << "messages " << transits[t] << " s, "
                                                         << (e == Evaluator::Events ? "events" : "dataflow");
        if (t != 1) continue;
        for (int d = 0; d < 4; ++d) EXPECT_EQ(r.stages[d].peak_inflight, row.inflight[d]) << "stage " << d;
      }
    }
  }
}

}  // namespace
}  // namespace simtest

namespace simtest {
namespace {

// The families and what each takes, for random cases.
struct FamilyCase {
  const char* name;
  int min_v, max_v;
  bool whole;  // lists B ops (--split-backward applies)
  bool has_w;  // lists W ops of its own
};
constexpr FamilyCase kFamilyCases[] = {
    {"kfkb", 1, 1, true, false},          {"1f1b", 1, 1, true, false},
    {"gpipe", 1, 1, true, false},         {"dapple-b", 1, 1, true, false},
    {"interleaved-1f1b", 1, 3, true, false}, {"looped-bfs", 1, 3, true, false},
    {"interleaved-zb", 1, 3, false, true},  {"zbv", 2, 2, false, true},
    {"dualpipev", 2, 2, true, true},
};

// A random spec for D stages and M micro-batches (nullopt when the family refuses them).
std::optional<sim::Schedule> random_schedule(Rng& rng, int D, int M, std::string& desc) {
  const FamilyCase& f = kFamilyCases[rng.below(std::size(kFamilyCases))];
  ScheduleSpec spec = ScheduleSpec::named(f.name, std::string(f.name) == "kfkb" ? std::optional(rng.range(1, M))
                                                                                  : std::nullopt);
  spec.virtual_stages = rng.range(f.min_v, f.max_v);
  spec.split_backward = f.whole && rng.chance(0.5);
  if ((spec.split_backward || f.has_w) && rng.chance(0.5)) {
    spec.w_fill = WFill::Dynamic;
    if (rng.chance(0.5)) spec.max_pending_w = rng.range(0, 3);
  }
  desc += " " + spec.label();
  try {
    return sim::make_schedule(spec, D, M);
  } catch (const adagrouper::InputError&) {
    return std::nullopt;
  }
}

// Random model stages (durations not exactly representable, I + W not equal to B), a
// network with rough rates on every channel, latencies, capacities and speeds. Bytes are
// whole numbers in half of the cases (the dataflow evaluator then keeps memory as a
// running total, sim/accounting.h) and not exactly representable in the others.
// With `ties`: durations in quarters of a second (0 among them), links with no rate and
// no latency, unit speed, so that arrivals, op events and iteration starts coincide; the
// same numbers are drawn either way. With `unbounded`: no channel has a capacity (the
// capacities are drawn and then dropped).
sim::Scenario random_case(Rng& rng, const sim::Schedule& sch, int M, int iterations, bool ties = false,
                          bool unbounded = false) {
  const int J = sch.num_model_stages(), D = sch.num_stages();
  const bool whole = rng.chance(0.5);
  auto quarter = [&](double t) { return ties ? std::floor(4 * t) / 4 : t; };
  auto bytes = [&](double most) { return whole ? std::floor(most * rng.uniform()) : most * rng.uniform(); };
  std::vector<sim::StageParams> st(J);
  for (auto& p : st) {
    p.fwd = quarter(0.1 + rng.uniform());
    p.bwd = quarter(0.1 + 2 * rng.uniform());
    p.bwd_input = quarter(0.05 + rng.uniform());
    p.bwd_weight = quarter(0.05 + rng.uniform());
    p.act = bytes(1e8);
    p.wgrad = bytes(p.act);
    p.out = rng.chance(0.1) ? 0.0 : bytes(1e3);
    p.gout = rng.chance(0.1) ? 0.0 : bytes(1e3);
    p.static_bytes = bytes(1e9);
    p.opt = rng.chance(0.5) ? 0.0 : 0.1 * rng.uniform();
  }
  sim::Network net = sim::Network::uniform(D, std::nullopt);
  net.rewrite_channels([&](sim::ChannelSpec& ch) {
    ch.latency_s = rng.chance(0.5) ? 0.0 : rng.uniform() * 0.05;
    if (!rng.chance(0.1)) ch.set_rate(rough_trace(rng, 3e3));
    ch.capacity = rng.chance(0.6) ? 0 : rng.range(1, 4);
    if (unbounded) ch.capacity = 0;
    if (ties) ch.latency_s = 0, ch.rate = nullptr;
  });
  for (int s = 0; s < D; ++s) {
    const sim::RateTrace speed = rng.chance(0.5) ? sim::RateTrace::constant(1.0) : rough_trace(rng, 1.5);
    net.set_speed(s, ties ? sim::RateTrace::constant(1.0) : speed);
  }
  auto sc = sim::make_scenario(pipeline_from(st, M), std::move(net), sch, 1, iterations);
  sc.start_time_s = rng.chance(0.5) ? 0.0 : quarter(rng.uniform() * 10);
  return sc;
}

// What the timeline of a run must show: every op of every (model stage, micro-batch) once
// per iteration on its stage, its backward after its forward and W after I, and memory
// never below the stage's static bytes.
void expect_well_formed(const sim::Scenario& sc, const sim::SimResult& r) {
  const int J = sc.num_model_stages(), M = sc.micro_batches();
  std::map<std::tuple<int, int, int, int>, std::pair<double, double>> seen;  // (it, j, m, phase) -> times
  for (const auto& o : r.timeline->ops) {
    EXPECT_EQ(sc.schedule.stage_of(o.op.model_stage), o.stage);
    const auto key = std::tuple(o.iteration, o.op.model_stage, o.op.micro_batch, static_cast<int>(o.op.phase));
    EXPECT_TRUE(seen.emplace(key, std::pair(o.start, o.end)).second) << "ran twice: " << sim::action_name(o.op);
  }
  for (int it = 0; it < sc.iterations; ++it)
    for (int j = 0; j < J; ++j)
      for (int m = 0; m < M; ++m) {
        auto at = [&](Phase ph) { return seen.find(std::tuple(it, j, m, static_cast<int>(ph))); };
        ASSERT_NE(at(Phase::Forward), seen.end()) << "F missing: " << j << " " << m;
        const auto b = at(Phase::Backward), i = at(Phase::BackwardInput), w = at(Phase::BackwardWeight);
        ASSERT_TRUE((b != seen.end()) != (i != seen.end() && w != seen.end())) << j << " " << m;
        const auto first_back = b != seen.end() ? b : i;
        EXPECT_GE(first_back->second.first, at(Phase::Forward)->second.second);
        if (w != seen.end()) {
          EXPECT_GE(w->second.first, i->second.second);
        }
      }
  for (const auto& c : r.timeline->counters)
    if (c.kind == sim::Counter::Memory) {
      EXPECT_GE(c.value, 0.0);
    }
}

TEST(VirtualStages, RandomScenariosBothEvaluatorsAgree) {
  int ran = 0, dynamic = 0, v2 = 0, whole = 0;
  for (std::uint64_t seed = 1; seed <= 300; ++seed) {
    Rng rng(seed);
    const int D = rng.range(1, 5), M = rng.range(1, 12), iterations = rng.range(1, 3);
    const bool ties = seed % 8 == 0;
    std::string desc = fmt::format("seed {}: D={} M={}{}", seed, D, M, ties ? " (ties)" : "");
    const auto sch = random_schedule(rng, D, M, desc);
    if (!sch) continue;
    SCOPED_TRACE(desc);
    const auto sc = random_case(rng, *sch, M, iterations, ties);
    const auto events = sim::simulate(sc, {.timeline = true, .record_order = true, .evaluator = Evaluator::Events});
    const auto dataflow = sim::simulate(sc, {.record_order = true, .evaluator = Evaluator::Dataflow});
    expect_same(events, dataflow);
    EXPECT_EQ(events.executed, dataflow.executed);
    EXPECT_TRUE(dataflow_finishes(sc));  // no deadlock, no rate 0 forever: not the event engine's numbers
    expect_well_formed(sc, events);
    expect_same(dataflow, sim::simulate(sc, {.evaluator = Evaluator::Dataflow}));  // reruns are identical
    if (testing::Test::HasFailure()) return;
    ++ran;
    dynamic += sc.schedule.spec.w_fill == WFill::Dynamic;
    v2 += sc.num_model_stages() == 2 * sc.num_stages();
    whole += sc.model_stages[0].static_bytes == std::floor(sc.model_stages[0].static_bytes);
  }
  EXPECT_GE(ran, 150);
  EXPECT_GE(whole, 50);
  EXPECT_GE(dynamic, 30);
  EXPECT_GE(v2, 30);
}

// A static order over unbounded channels for several iterations: the dataflow evaluator
// runs every iteration after the first from the sequence the first one recorded, sends on
// channels out of production order (V placement) included. Every family, the same
// numbers as the event engine.
TEST(VirtualStages, RecordedSequenceGivesTheSameNumbers) {
  int ran = 0, v2 = 0;
  for (std::uint64_t seed = 1; seed <= 300; ++seed) {
    Rng rng(1000 + seed);
    const int D = rng.range(2, 5), M = rng.range(1, 12), iterations = rng.range(2, 5);
    const bool ties = seed % 8 == 0;
    std::string desc = fmt::format("seed {}: D={} M={} iterations={}{}", 1000 + seed, D, M, iterations,
                                   ties ? " (ties)" : "");
    const auto sch = random_schedule(rng, D, M, desc);
    if (!sch || sch->spec.w_fill == WFill::Dynamic) continue;
    SCOPED_TRACE(desc);
    const auto sc = random_case(rng, *sch, M, iterations, ties, true);
    expect_same(sim::simulate(sc, {.evaluator = Evaluator::Events}), sim::simulate(sc, {.evaluator = Evaluator::Dataflow}));
    EXPECT_TRUE(dataflow_finishes(sc));
    if (testing::Test::HasFailure()) return;
    ++ran;
    v2 += sc.num_model_stages() == 2 * sc.num_stages();
  }
  EXPECT_GE(ran, 150);
  EXPECT_GE(v2, 35);
}

// A compiled scenario rebound to other model stages' parameters runs as the scenario
// built with them does, on both evaluators, and back again (nothing of the first
// parameters stays: messages of 0 bytes in one and not the other, token buckets); so
// does one moved, or started at another time.
TEST(VirtualStages, CompiledScenarioRunsWithNewParametersAsSimulateDoes) {
  int ran = 0;
  for (std::uint64_t seed = 1; seed <= 120; ++seed) {
    Rng rng(seed);
    const int D = rng.range(1, 5), M = rng.range(1, 10);
    std::string desc = fmt::format("seed {}: D={} M={}", seed, D, M);
    const auto sch = random_schedule(rng, D, M, desc);
    if (!sch) continue;
    SCOPED_TRACE(desc);
    sim::Scenario a = random_case(rng, *sch, M, 2);
    if (seed % 3 == 0)
      a.network.rewrite_channels(
          [&](sim::ChannelSpec& ch) { ch.burst_bytes = ch.unlimited() ? 0 : 1e3 * rng.uniform(); });
    sim::Scenario b = a;
    b.model_stages = random_case(rng, *sch, M, 2).model_stages;
    sim::CompiledScenario compiled(a);
    for (const sim::Scenario* sc : {&a, &b, &a}) {
      compiled.set_model_stages(sc->model_stages);
      for (const Evaluator e : {Evaluator::Events, Evaluator::Dataflow})
        expect_same(compiled.simulate({.evaluator = e}), sim::simulate(*sc, {.evaluator = e}));
    }
    // Moved (a vector that grows moves its elements) and started elsewhere in the traces.
    std::vector<sim::CompiledScenario> moved;
    moved.push_back(std::move(compiled));
    moved.emplace_back(b);
    a.start_time_s += 0.75;
    moved[0].set_start_time(a.start_time_s);
    expect_same(moved[0].simulate(), sim::simulate(a));
    expect_same(moved[1].simulate(), sim::simulate(b));
    if (testing::Test::HasFailure()) return;
    ++ran;
  }
  EXPECT_GE(ran, 60);
  sim::CompiledScenario compiled(sim::make_scenario(uniform_pipeline(2, 4, 1, 2, 8), sim::Network::uniform(2, 1e3),
                                                    sim::make_named("1f1b", 2, 4, std::nullopt), 1, 1));
  EXPECT_THROW(compiled.set_model_stages(std::vector<sim::StageParams>(3)), adagrouper::InputError);
}

// Dynamic W fill with P = 0 runs every W right after its I: the static split order.
TEST(VirtualStages, DynamicFillWithNoPendingIsTheStaticSplit) {
  for (std::uint64_t seed = 1; seed <= 40; ++seed) {
    Rng rng(seed);
    const int D = rng.range(1, 4), M = D * rng.range(1, 3);  // interleaved-1f1b runs rounds of D
    for (const char* family : {"1f1b", "kfkb", "interleaved-1f1b"}) {
      ScheduleSpec spec = ScheduleSpec::named(family, std::string(family) == "kfkb" ? std::optional(2) : std::nullopt);
      if (spec.k && *spec.k > M) continue;
      spec.split_backward = true;
      const auto sc = random_case(rng, sim::make_schedule(spec, D, M), M, 2);
      spec.w_fill = WFill::Dynamic;
      spec.max_pending_w = 0;
      auto filled = sc;
      filled.schedule = sim::make_schedule(spec, D, M);
      SCOPED_TRACE(fmt::format("seed {} {}", seed, family));
      const auto a = sim::simulate(sc), b = sim::simulate(filled, {.record_order = true});
      EXPECT_EQ(a.iteration_times_s, b.iteration_times_s);
      EXPECT_EQ(a.stages[0].peak_memory_bytes, b.stages[0].peak_memory_bytes);
      EXPECT_EQ(b.executed[0], sc.schedule.stages);
    }
  }
}

// PyTorch's CSV of a named schedule reads back as the same schedule and the same run.
TEST(VirtualStages, ImportedCsvRunsLikeTheNamedSchedule) {
  for (const ScheduleSpec& s : {spec("zbv", {}, 2, false, WFill::Static), spec("dualpipev", {}, 2, false, WFill::Static),
                                spec("interleaved-1f1b", {}, 2, false, WFill::Static),
                                spec("kfkb", 2, 1, true, WFill::Static)}) {
    SCOPED_TRACE(s.label());
    const auto named = worked(s, 0.5);
    auto imported = named;
    imported.schedule = sim::parse_torch_csv(sim::torch_csv(named.schedule), "x.csv", named.num_model_stages(), 8);
    EXPECT_EQ(imported.schedule.stages, named.schedule.stages);
    EXPECT_EQ(imported.schedule.placement, named.schedule.placement);
    EXPECT_EQ(imported.schedule.spec.family, "custom");
    imported.schedule.spec = named.schedule.spec;  // only the name differs
    imported.schedule.k = named.schedule.k;
    expect_same(sim::simulate(named), sim::simulate(imported));
  }
}

}  // namespace
}  // namespace simtest
