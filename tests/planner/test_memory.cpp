// Tests of the memory model (planner.h).
//
// Never below the simulated peak on any network, tight on the toy example with free
// communication; peak_inflight against the table of docs/model.md section 2.
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

}  // namespace
}  // namespace plantest
