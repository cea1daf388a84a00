// Tests of the memory model (planner.h).
//
// Never below the simulated peak on any network, for every schedule family (model stages
// on stages, split backward, static and dynamic W fill); exact without message bytes;
// tight on the toy example with free communication; peak_inflight against the table of
// docs/model.md section 2; the chain analysis gives the pipeline analysis's numbers with
// one model stage per stage.
#include <gtest/gtest.h>

#include <fmt/format.h>

#include <algorithm>
#include <string>
#include <vector>

#include "helpers.h"

namespace plantest {
namespace {

sim::Pipeline toy_pipeline() { return sim::load_pipeline(kRoot / "configs/examples/toy-4.json"); }
sim::Network toy_network(const std::string& name, int S) {
  return sim::load_network(kRoot / "configs/examples" / name, S);
}

TEST(PeakInflight, MatchesTheTableOfTheModel) {
  struct Row {
    const char* name;
    std::optional<int> k;
    std::vector<int> expected;
  };
  const std::vector<Row> rows = {{"1f1b", std::nullopt, {4, 3, 2, 1}},
                                 {"kfkb", 2, {8, 6, 4, 2}},
                                 {"kfkb", 4, {8, 8, 8, 4}},
                                 {"gpipe", std::nullopt, {8, 8, 8, 8}},
                                 {"dapple-b", std::nullopt, {7, 5, 3, 1}}};
  for (const auto& row : rows) {
    const sim::Schedule sch = sim::make_named(row.name, 4, 8, row.k);
    EXPECT_EQ(planner::peak_inflight(sch), row.expected) << row.name << " k=" << row.k.value_or(0);
  }
  // kfkb with k = 1 is 1f1b, k = M is gpipe.
  EXPECT_EQ(planner::peak_inflight(sim::make_kfkb(4, 8, 1)), (std::vector<int>{4, 3, 2, 1}));
  EXPECT_EQ(planner::peak_inflight(sim::make_kfkb(4, 8, 8)), (std::vector<int>{8, 8, 8, 8}));
}

TEST(PeakInflight, EqualsTheSimulatedPeakInflight) {
  const sim::Pipeline p = toy_pipeline();
  const sim::Network net = toy_network("toy-net-0.5s.json", 4);
  for (int k = 1; k <= 8; ++k) {
    const sim::Schedule sch = sim::make_kfkb(4, 8, k);
    const sim::SimResult r = sim::simulate(sim::make_scenario(p, net, sch, 1, 1));
    const auto model = planner::peak_inflight(sch);
    for (int s = 0; s < 4; ++s) EXPECT_EQ(model[s], r.stages[s].peak_inflight) << "k=" << k << " stage " << s;
  }
}

// Tight when communication is free: the toy example (S=4, M=8, fwd 1, bwd 2,
// out = gout = 0.5 bytes, act 1e8, static 2e9), messages arriving the instant they are
// produced.
// With free communication the model is tight up to its receive-buffer allowance: the
// activation part is exact, and the excess over the equal-speed simulation is at most
// one waiting message per micro-batch in flight (the messages that could wait if the
// receiver were delayed, which the model must allow and an equal-speed run never
// shows). On the toy example, for 1f1b stage 0: 4 in flight, excess 2 bytes = 4
// gradients of 0.5 bytes.
TEST(MemoryModel, TightUpToTheReceiveBufferAllowanceOnTheToyExample) {
  const sim::Pipeline p = toy_pipeline();
  const sim::Network net = toy_network("toy-net-free.json", 4);
  const auto stages = p.at(1);
  for (const auto& [name, k] : {std::pair<const char*, std::optional<int>>{"1f1b", std::nullopt}, {"kfkb", 2}}) {
    const sim::Schedule sch = sim::make_named(name, 4, 8, k);
    const sim::SimResult r = sim::simulate(sim::make_scenario(p, net, sch, 1, 1));
    const auto model = planner::memory_model(stages, sch, net);
    const auto inflight = planner::peak_inflight(sch);
    ASSERT_EQ(model.size(), 4u);
    for (int s = 0; s < 4; ++s) {
      const double excess = model[s] - r.stages[s].peak_memory_bytes;
      const double message = std::max(s > 0 ? stages[s - 1].out : 0.0, s + 1 < 4 ? stages[s + 1].gout : 0.0);
      const std::string what = fmt::format("{} k={} stage {}: model {} simulated {}", name, k.value_or(1), s,
                                           model[s], r.stages[s].peak_memory_bytes);
      EXPECT_GE(excess, 0.0) << what;
      EXPECT_LE(excess, inflight[s] * message) << what;
      EXPECT_LT(excess, stages[s].act) << what;
    }
  }
}

// The activation part of the model is static + act x peak in-flight; with free
// communication on the toy example, never less than that.
TEST(MemoryModel, AtLeastStaticPlusActivationsInFlight) {
  const sim::Pipeline p = toy_pipeline();
  const auto stages = p.at(1);
  for (const char* net_name : {"toy-net-free.json", "toy-net-0.5s.json", "toy-net-2s.json"}) {
    const sim::Network net = toy_network(net_name, 4);
    for (const char* name : {"1f1b", "gpipe", "dapple-b"}) {
      const sim::Schedule sch = sim::make_named(name, 4, 8, std::nullopt);
      const auto model = planner::memory_model(stages, sch, net);
      const auto inflight = planner::peak_inflight(sch);
      for (int s = 0; s < 4; ++s) EXPECT_GE(model[s], stages[s].static_bytes + stages[s].act * inflight[s]);
    }
  }
}

struct MemCase {
  sim::Pipeline pipeline;
  sim::Network network;
  sim::Schedule schedule;
  int iterations = 1;
  double start = 0;
  std::string desc;
};

MemCase random_mem_case(Rng& rng) {
  MemCase c;
  const int S = rng.range(1, 6);
  const int M = rng.range(1, 12);
  std::vector<std::vector<Entry>> profiles(S);
  std::vector<double> statics(S);
  std::string desc = fmt::format("S={} M={}", S, M);
  for (int s = 0; s < S; ++s) {
    Entry e{1, rng.dyadic(0, 16, 4), rng.dyadic(0, 32, 4), rng.dyadic(0, 16, 1),
            rng.chance(0.15) ? 0.0 : rng.dyadic(0, 24, 4), rng.chance(0.15) ? 0.0 : rng.dyadic(0, 24, 4)};
    statics[s] = rng.dyadic(0, 64, 1);
    profiles[s].push_back(e);
    desc += fmt::format(" | s{}: fwd {} bwd {} act {} out {} gout {} static {}", s, e.fwd, e.bwd, e.act, e.out, e.gout,
                        statics[s]);
  }
  c.pipeline = make_pipeline(profiles, statics, M, 1e18);

  c.network = sim::Network::uniform(S, std::nullopt, 0.0);
  auto trace_desc = [](const sim::RateTrace& t) {
    std::string d = "[";
    for (std::size_t i = 0; i < t.size(); ++i) d += fmt::format("{}({},{})", i ? " " : "", t.times()[i], t.values()[i]);
    return d + fmt::format("] repeat {}", t.repeat_s());
  };
  c.network.rewrite_channels([&](sim::ChannelSpec& ch) {
    ch.latency_s = rng.chance(0.5) ? 0.0 : rng.dyadic(0, 4, 4);
    ch.capacity = rng.range(0, 3);
    if (rng.chance(0.8)) ch.set_rate(random_trace(rng, 1, 16, 4));
    desc += fmt::format(" | ch {}->{} lat {} cap {} rate {}", ch.from, ch.to, ch.latency_s, ch.capacity,
                        ch.unlimited() ? std::string("unlimited") : trace_desc(*ch.rate));
  });
  for (int s = 0; s < S; ++s) {
    if (rng.chance(0.5)) {
      c.network.set_speed(s, random_trace(rng, 1, 8, 4));
      desc += fmt::format(" | speed {} {}", s, trace_desc(c.network.speed(s)));
    }
  }
  const int which = rng.range(0, 3);
  static const char* names[] = {"1f1b", "gpipe", "dapple-b", "kfkb"};
  const int k = rng.range(1, M);
  c.schedule = sim::make_named(names[which], S, M, which == 3 ? std::optional<int>(k) : std::nullopt);
  c.iterations = rng.range(1, 3);
  c.start = rng.chance(0.5) ? 0.0 : rng.dyadic(0, 80, 4);
  c.desc = fmt::format("{} k={} iterations {} start {} | {}", names[which], c.schedule.k, c.iterations, c.start, desc);
  return c;
}

// The model must never be below what the simulator measures, on any network.
TEST(MemoryModel, NeverBelowTheSimulatedPeakOnRandomScenarios) {
  int failures = 0;
  for (std::uint64_t seed = 1; seed <= 3000 && failures < 5; ++seed) {
    Rng rng(seed * 0x9E3779B97F4A7C15ULL);
    const MemCase c = random_mem_case(rng);
    sim::Scenario sc = sim::make_scenario(c.pipeline, c.network, c.schedule, 1, c.iterations);
    sc.start_time_s = c.start;
    const sim::SimResult r = sim::simulate(sc);
    const auto model = planner::memory_model(c.pipeline.at(1), c.schedule, c.network);
    ASSERT_EQ(model.size(), r.stages.size());
    for (std::size_t s = 0; s < model.size(); ++s) {
      if (model[s] < r.stages[s].peak_memory_bytes) {
        ++failures;
        ADD_FAILURE() << "seed " << seed << " stage " << s << ": model " << model[s] << " < simulated "
                      << r.stages[s].peak_memory_bytes << "\n  " << c.desc;
        break;
      }
    }
  }
}

// With free communication and unit speeds the buffered-message bound must still hold,
// and every stage's model is at least its static + activations.
TEST(MemoryModel, NeverBelowTheSimulatedPeakWithFreeCommunication) {
  for (std::uint64_t seed = 1; seed <= 500; ++seed) {
    Rng rng(seed + 77);
    MemCase c = random_mem_case(rng);
    const int S = c.pipeline.num_stages();
    c.network = sim::Network::uniform(S, std::nullopt, 0.0);
    const sim::SimResult r = sim::simulate(sim::make_scenario(c.pipeline, c.network, c.schedule, 1, 1));
    const auto st = c.pipeline.at(1);
    const auto model = planner::memory_model(st, c.schedule, c.network);
    const auto inflight = planner::peak_inflight(c.schedule);
    for (int s = 0; s < S; ++s) {
      EXPECT_GE(model[s], r.stages[s].peak_memory_bytes) << "seed " << seed << " stage " << s << " " << c.desc;
      EXPECT_GE(model[s], st[s].static_bytes + st[s].act * inflight[s]) << "seed " << seed << " stage " << s;
    }
  }
}

// --- every schedule family -------------------------------------------------------------

// A random schedule of `family` ("kfkb-dynamic": kfkb or 1f1b with dynamic W fill) on a
// random pipeline of D x v model stages: v as the family runs, split backward and W fill
// where the family takes them. nullopt when the family refuses (D, v, M).
std::optional<MemCase> random_family_case(Rng& rng, const std::string& family) {
  const bool kfkb_dynamic = family == planner::kKfkbDynamic;
  const sim::ScheduleFamily& f = *sim::find_schedule_family(kfkb_dynamic ? "kfkb" : family);
  const int D = rng.range(1, 5), M = rng.range(1, 12);
  const int v = f.virtual_stages != 0 ? f.virtual_stages : rng.range(1, 3);
  sim::ScheduleSpec spec = sim::ScheduleSpec::named(f.name, f.takes_k ? std::optional<int>(rng.range(1, M))
                                                                      : std::nullopt);
  spec.virtual_stages = v;
  if (f.backward != sim::Backward::Split) spec.split_backward = kfkb_dynamic || rng.chance(0.4);
  if (kfkb_dynamic || ((spec.split_backward || f.backward != sim::Backward::Whole) && rng.chance(0.5))) {
    spec.w_fill = sim::WFill::Dynamic;
    if (rng.chance(0.6)) spec.max_pending_w = rng.range(0, 3);
  }
  MemCase c;
  try {
    c.schedule = sim::make_schedule(spec, D, M);
  } catch (const InputError&) {
    return std::nullopt;
  }
  c.pipeline = dyadic_pipeline(rng, D * v, M);
  c.network = random_device_network(rng, D);
  c.iterations = rng.range(1, 2);
  c.start = rng.chance(0.5) ? 0.0 : rng.dyadic(0, 40, 4);
  c.desc = fmt::format("{} D={} M={} iterations {} start {}", spec.label(), D, M, c.iterations, c.start);
  return c;
}

std::vector<std::string> every_family() {
  std::vector<std::string> out{std::string(planner::kKfkbDynamic)};
  for (const auto& f : sim::schedule_families()) out.emplace_back(f.name);
  return out;
}

// The model must never be below what the simulator measures, for every family, with
// pending W under dynamic fill bounded by P (or by every I so far, P unlimited).
TEST(MemoryModel, NeverBelowTheSimulatedPeakForEveryFamily) {
  for (const std::string& family : every_family()) {
    int checked = 0, failures = 0;
    for (std::uint64_t seed = 1; seed <= 400 && failures < 3; ++seed) {
      Rng rng(seed * 0x9E3779B97F4A7C15ULL + family.size());
      const std::optional<MemCase> c = random_family_case(rng, family);
      if (!c) continue;
      sim::Scenario sc = sim::make_scenario(c->pipeline, c->network, c->schedule, 1, c->iterations);
      sc.start_time_s = c->start;
      const sim::SimResult r = sim::simulate(sc);
      const auto model = planner::memory_model(c->pipeline.at(1), c->schedule, c->network);
      ASSERT_EQ(model.size(), r.stages.size());
      for (std::size_t s = 0; s < model.size(); ++s)
        if (model[s] < r.stages[s].peak_memory_bytes) {
          ++failures;
          ADD_FAILURE() << "seed " << seed << " stage " << s << ": model " << model[s] << " < simulated "
                        << r.stages[s].peak_memory_bytes << "\n  " << c->desc;
          break;
        }
      ++checked;
    }
    EXPECT_GE(checked, 150) << family << ": too few scenarios the family runs";
  }
}

// The activation part is exact: without message bytes and with W ops in the orders, the
// model is exactly the simulated peak (every op has a positive duration, so the state
// while it runs settles).
TEST(MemoryModel, ExactWithoutMessageBytesForEveryFamily) {
  for (const std::string& family : every_family()) {
    int checked = 0;
    for (std::uint64_t seed = 1; seed <= 200; ++seed) {
      Rng rng(seed * 7919 + family.size());
      std::optional<MemCase> c = random_family_case(rng, family);
      if (!c || c->schedule.spec.w_fill == sim::WFill::Dynamic) continue;
      for (auto& st : c->pipeline.stages)
        for (auto& pt : st.profile) pt.output_bytes = 0, pt.grad_output_bytes = 0.0;
      const sim::SimResult r = sim::simulate(sim::make_scenario(c->pipeline, c->network, c->schedule, 1, 1));
      const auto model = planner::memory_model(c->pipeline.at(1), c->schedule, c->network);
      for (std::size_t s = 0; s < model.size(); ++s)
        EXPECT_EQ(model[s], r.stages[s].peak_memory_bytes) << "seed " << seed << " stage " << s << " " << c->desc;
      ++checked;
    }
    if (family != planner::kKfkbDynamic) {
      EXPECT_GE(checked, 40) << family;
    }
  }
}

// The parameters with some terms zeroed, so that the peak shows the others alone: 0 all
// terms, 1 messages only, 2 forward messages only, 3 backward messages only.
std::vector<sim::StageParams> only_some_terms(std::vector<sim::StageParams> stages, int variant) {
  for (sim::StageParams& p : stages) {
    if (variant == 0) continue;
    p.act = p.wgrad = 0;
    if (variant == 2) p.gout = 0;
    if (variant == 3) p.out = 0;
  }
  return stages;
}

// With one model stage per stage the planner analyses chains along the pipeline only;
// the general chain analysis (forced by naming the placement) gives the same numbers, also
// with only the messages (or one direction of them) counted.
TEST(MemoryModel, ChainAnalysisEqualsThePipelineAnalysisWithOneModelStagePerStage) {
  int compared = 0;
  for (std::uint64_t seed = 1; seed <= 300; ++seed) {
    Rng rng(seed + 4242);
    const std::vector<std::string> families = every_family();
    const std::string family = families[rng.below(families.size())];
    std::optional<MemCase> c = random_family_case(rng, family);
    if (!c || !c->schedule.placement.empty()) continue;
    sim::Schedule named = c->schedule;
    for (int s = 0; s < named.num_stages(); ++s) named.placement.push_back(s);
    for (int variant = 0; variant < 4; ++variant) {
      const auto stages = only_some_terms(c->pipeline.at(1), variant);
      EXPECT_EQ(planner::memory_model(stages, c->schedule, c->network),
                planner::memory_model(stages, named, c->network))
          << c->desc << " variant " << variant;
    }
    ++compared;
  }
  EXPECT_GE(compared, 100);
}

TEST(PeakInflight, EqualsTheSimulatedPeakWithModelStagesOnStages) {
  const sim::Pipeline p = sim::load_pipeline(kRoot / "configs/examples/toy-8.json");
  const sim::Network net = toy_network("toy-net-0.5s.json", 4);
  // docs/model.md section 14, the worked examples at 0.5 s.
  const std::vector<std::pair<sim::ScheduleSpec, std::vector<int>>> rows = [] {
    auto v2 = [](const char* name) {
      sim::ScheduleSpec s = sim::ScheduleSpec::named(name);
      s.virtual_stages = 2;
      return s;
    };
    return std::vector<std::pair<sim::ScheduleSpec, std::vector<int>>>{
        {v2("interleaved-1f1b"), {11, 9, 7, 5}}, {v2("looped-bfs"), {16, 16, 16, 16}},
        {v2("interleaved-zb"), {8, 8, 8, 8}},    {sim::ScheduleSpec::named("zbv"), {8, 8, 8, 8}},
        {sim::ScheduleSpec::named("dualpipev"), {9, 9, 9, 9}}};
  }();
  for (const auto& [spec, expected] : rows) {
    const sim::Schedule sch = sim::make_schedule(spec, 4, 8);
    EXPECT_EQ(planner::peak_inflight(sch), expected) << spec.label();
    const sim::SimResult r = sim::simulate(sim::make_scenario(p, net, sch, 1, 1));
    for (int s = 0; s < 4; ++s) EXPECT_EQ(r.stages[s].peak_inflight, expected[s]) << spec.label() << " stage " << s;
  }
}

}  // namespace
}  // namespace plantest
