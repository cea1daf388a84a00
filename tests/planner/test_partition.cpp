// Tests of stage partitioning (planner/partition.h).
//
// The DP against brute force over every cut on small random models, balanced and
// memory-bound cuts with known answers, the pipeline of a cut, and model -> partition ->
// plan end to end on a shipped model.
#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <fmt/format.h>

#include <algorithm>
#include <cmath>
#include <functional>
#include <limits>
#include <set>
#include <string>
#include <vector>

#include "helpers.h"

namespace plantest {
namespace {

using testutil::input_error;

// A model of `times.size()` layers listed at b = 1 and 2 (values at 2 are 2x, minus a
// fixed part for times), with no reserved memory unless given.
planner::Model make_model(const std::vector<double>& times, const std::vector<double>& acts,
                          const std::vector<double>& params, const std::vector<double>& outs,
                          double optimizer_ratio = 0, double reserved = 0) {
  planner::Model m;
  m.name = "gen";
  m.source_file = "gen.json";
  m.optimizer_bytes_per_parameter_byte = optimizer_ratio;
  m.device.memory_bytes = 1e12;
  m.device.reserved_bytes = reserved;
  for (std::size_t l = 0; l < times.size(); ++l) {
    planner::Layer layer;
    layer.name = fmt::format("L{}", l);
    layer.parameter_bytes = params[l];
    layer.optimizer_s = 0.01 * static_cast<double>(l % 3);
    for (int b : {1, 2}) {
      planner::LayerPoint p;
      p.micro_batch_size = b;
      p.forward_s = times[l] * (b == 1 ? 1.0 : 1.75) / 3;
      p.backward_s = 2 * p.forward_s;
      p.activation_bytes = acts[l] * b;
      p.output_bytes = outs[l] * b;
      layer.profile.push_back(p);
    }
    m.layers.push_back(layer);
  }
  return m;
}

// Every way to cut L layers into S non-empty contiguous stages.
void all_cuts(int L, int S, std::vector<int>& cur, const std::function<void(const std::vector<int>&)>& f) {
  if (static_cast<int>(cur.size()) == S) {
    cur.push_back(L);
    f(cur);
    cur.pop_back();
    return;
  }
  const int lo = cur.back() + 1, hi = L - (S - static_cast<int>(cur.size()));
  for (int c = lo; c <= hi; ++c) {
    cur.push_back(c);
    all_cuts(L, S, cur, f);
    cur.pop_back();
  }
}

// The latency model recomputed from the pipeline of the cut (independently of
// PartitionProblem): sum of fwd + bwd + transfers + (M - 1) x slowest stage or message.
double latency_of(const std::vector<sim::StageParams>& st, const sim::Network& net, int M) {
  double total = 0, slowest = 0, transfers = 0;
  for (std::size_t s = 0; s < st.size(); ++s) {
    total += st[s].fwd + st[s].bwd;
    slowest = std::max(slowest, st[s].fwd + st[s].bwd);
    if (s == 0) continue;
    auto t = [](const sim::ChannelSpec& ch, double bytes) {
      if (bytes <= 0) return ch.latency_s;
      return ch.unlimited() ? ch.latency_s : ch.latency_s + bytes / ch.rate->value_at(0);
    };
    const int j = static_cast<int>(s);
    const double tf = t(net.channel(j - 1, j), st[s - 1].out), tb = t(net.channel(j, j - 1), st[s].gout);
    slowest = std::max({slowest, tf, tb});
    transfers += tf + tb;
  }
  return total + transfers + (M - 1) * slowest;
}

bool close(double a, double b) { return std::fabs(a - b) <= 1e-9 * std::max({1.0, std::fabs(a), std::fabs(b)}); }

TEST(Partition, DpFindsTheBruteForceOptimum) {
  Rng rng(20261129);
  int instances = 0, infeasible = 0, uneven = 0;
  for (int trial = 0; trial < 160; ++trial) {
    const int L = rng.range(2, 9), S = rng.range(1, std::min(L, 4));
    std::vector<double> times, acts, params, outs;
    for (int l = 0; l < L; ++l) {
      times.push_back(rng.dyadic(1, 40, 8));
      acts.push_back(rng.dyadic(1, 16, 1) * 1e8);
      params.push_back(rng.dyadic(0, 16, 1) * 1e8);
      outs.push_back(rng.chance(0.2) ? 0.0 : rng.dyadic(1, 64, 1) * 1e6);
    }
    const planner::Model m = make_model(times, acts, params, outs, rng.range(0, 3), rng.dyadic(0, 4, 1) * 1e8);
    const std::vector<std::string> names = {"1f1b", "kfkb", "gpipe", "dapple-b"};
    planner::PartitionOptions o;
    o.stages = S;
    o.micro_batch_size = rng.range(1, 2);
    o.global_batch_size = o.micro_batch_size * rng.range(1, 8);
    const int M = o.global_batch_size / o.micro_batch_size;
    const std::string name = names[rng.below(names.size())];
    o.schedule = sim::ScheduleSpec::named(name, name == "kfkb" ? std::optional<int>(rng.range(1, M)) : std::nullopt);
    o.memory_limit_bytes = rng.dyadic(2, 60, 1) * 1e9;
    sim::Network net = sim::Network::uniform(S, rng.chance(0.2) ? std::nullopt : std::optional<double>(rng.dyadic(1, 64, 1) * 1e7),
                                             rng.chance(0.5) ? rng.dyadic(0, 8, 1000) : 0.0);
    std::vector<int> caps;  // drawn forward, backward per boundary, as the test always did
    for (int s = 0; s + 1 < S; ++s)
      for (int d = 0; d < 2; ++d) caps.push_back(rng.chance(0.3) ? rng.range(1, 3) : 0);
    net.rewrite_channels([&](sim::ChannelSpec& c) {
      const int s = std::min(c.from, c.to);
      const int cap = caps[static_cast<std::size_t>(2 * s + (c.to < c.from))];
      if (cap > 0) c.capacity = cap;
    });
    const planner::PartitionProblem problem(m, net, o);
    const auto front = problem.solve();

    // Brute force over every cut with the problem's own scoring, checked against the
    // pipeline of the cut (the planner's memory model, the latency model recomputed).
    std::optional<double> best;
    std::vector<int> cur{0};
    all_cuts(L, S, cur, [&](const std::vector<int>& b) {
      const planner::CutScore c = problem.evaluate(b);
      const sim::Pipeline p = planner::pipeline_of(m, b, o.global_batch_size, o.memory_limit_bytes);
      const auto st = p.at(o.micro_batch_size);
      const auto mem = planner::memory_model(st, problem.schedule(), net);
      for (int s = 0; s < S; ++s)
        ASSERT_TRUE(close(c.memory_bytes[s], mem[s])) << "trial " << trial << " stage " << s << ": " << c.memory_bytes[s]
                                                      << " vs " << mem[s];
      ASSERT_TRUE(close(c.predicted_s, latency_of(st, net, M))) << "trial " << trial;
      if (c.fits && (!best || c.predicted_s < *best)) best = c.predicted_s;
    });
    ++instances;
    if (!best) {
      ++infeasible;
      EXPECT_TRUE(front.empty()) << "trial " << trial << ": the DP found a cut where none fits";
      continue;
    }
    ASSERT_FALSE(front.empty()) << "trial " << trial << ": the DP found nothing, brute force " << *best;
    const planner::CutScore got = problem.evaluate(front[0]);
    EXPECT_TRUE(got.fits) << "trial " << trial;
    EXPECT_TRUE(close(got.predicted_s, *best)) << "trial " << trial << ": DP " << got.predicted_s << " vs " << *best;
    for (std::size_t i = 1; i < front.size(); ++i) {  // the other Pareto cuts fit and are not better
      const planner::CutScore c = problem.evaluate(front[i]);
      EXPECT_TRUE(c.fits);
      EXPECT_GE(c.predicted_s, got.predicted_s);
    }
    uneven += S > 1 && front[0][1] * S != L;
  }
  // The instances exercise both outcomes and non-trivial cuts.
  EXPECT_GT(infeasible, 5);
  EXPECT_LT(infeasible, instances - 50);
  EXPECT_GT(uneven, 20);
}

TEST(Partition, BalancedLayersSplitEvenly) {
  const int L = 32;
  const planner::Model m = make_model(std::vector<double>(L, 0.3), std::vector<double>(L, 1e8),
                                      std::vector<double>(L, 1e8), std::vector<double>(L, 4e6), 7, 1e9);
  for (int S : {1, 2, 4, 8, 16, 32}) {
    planner::PartitionOptions o;
    o.stages = S;
    o.micro_batch_size = 2;
    o.global_batch_size = 64;
    o.memory_limit_bytes = 32.0 * (1ull << 30);
    const sim::Network net = sim::Network::uniform(S, 1e9, 1e-5);
    const planner::PartitionResult r = planner::partition(m, net, o);
    std::vector<int> even;
    for (int s = 0; s <= S; ++s) even.push_back(s * L / S);
    EXPECT_EQ(r.chosen.bounds, even) << "S = " << S;
    EXPECT_EQ(r.candidates[r.dp_index].bounds, even) << "S = " << S;
    ASSERT_TRUE(r.chosen.simulated_s.has_value());
    // With free transfers the latency model of equal stages is exact, (M + S - 1)(f + b);
    // the simulation adds stage 0's optimizer step (it runs the last backward op).
    const planner::PartitionResult free = planner::partition(m, sim::Network::uniform(S, std::nullopt), o);
    EXPECT_EQ(free.chosen.bounds, even);
    EXPECT_NEAR(free.chosen.predicted_s, (32 + S - 1) * (0.3 * 1.75 * L / S), 1e-9) << "S = " << S;
    EXPECT_NEAR(*free.chosen.simulated_s, free.chosen.predicted_s + free.stages[0].opt, 1e-9) << "S = " << S;
  }
}

TEST(Partition, MemoryHeavyLayerMovesTheCut) {
  // 8 equal layers in 2 stages; 1F1B with M = 4 keeps 2 micro-batches in flight on stage
  // 0 and 1 on stage 1. Layer 3 keeps 6 GB of activations, the others 1 GB.
  std::vector<double> acts(8, 1e9);
  acts[3] = 6e9;
  const planner::Model m = make_model(std::vector<double>(8, 1.0), acts, std::vector<double>(8, 0.0),
                                      std::vector<double>(8, 0.0));
  planner::PartitionOptions o;
  o.stages = 2;
  o.micro_batch_size = 1;
  o.global_batch_size = 4;
  const sim::Network net = sim::Network::uniform(2, std::nullopt);
  o.memory_limit_bytes = 1e12;
  EXPECT_EQ(planner::partition(m, net, o).chosen.bounds, (std::vector<int>{0, 4, 8}));
  // 12 GB: stage 0 = layers 0-3 would need 2 x 9 GB; the cut moves before layer 3.
  o.memory_limit_bytes = 12e9;
  const planner::PartitionResult r = planner::partition(m, net, o);
  EXPECT_EQ(r.chosen.bounds, (std::vector<int>{0, 3, 8}));
  EXPECT_EQ(r.chosen.memory_bytes, (std::vector<double>{6e9, 10e9}));
  // On stage 1 (one micro-batch in flight) the same layer fits the balanced cut.
  std::vector<double> late(8, 1e9);
  late[5] = 6e9;
  const planner::Model m2 = make_model(std::vector<double>(8, 1.0), late, std::vector<double>(8, 0.0),
                                       std::vector<double>(8, 0.0));
  EXPECT_EQ(planner::partition(m2, net, o).chosen.bounds, (std::vector<int>{0, 4, 8}));
  // With gpipe every stage keeps all 4: layers 0-3 need 36 GB, layers 3-7 40 GB.
  o.schedule = sim::ScheduleSpec::named("gpipe");
  o.memory_limit_bytes = 36e9;
  EXPECT_EQ(planner::partition(m, net, o).chosen.bounds, (std::vector<int>{0, 4, 8}));
  o.memory_limit_bytes = 35e9;
  EXPECT_THAT(input_error([&] { planner::partition(m, net, o); }),
              HasSubstr("gen.json: no cut into 2 stages fits the memory limit of 32.60 GiB per stage with gpipe at "
                        "micro-batch size 1 (M = 4): every stage could hold some layer, but no contiguous cut fits"));
  o.schedule = sim::ScheduleSpec::named("1f1b");
  o.memory_limit_bytes = 1.5e9;
  EXPECT_THAT(input_error([&] { planner::partition(m, net, o); }),
              HasSubstr("stage 0 needs at least 1.86 GiB even holding only layer 0 ('L0')"));
}

TEST(Partition, PipelineOfACutSumsLayersAndTakesMessagesFromTheCut) {
  std::vector<double> outs = {1e6, 2e6, 3e6, 4e6, 5e6};
  planner::Model m = make_model({1, 2, 3, 4, 5}, {1e8, 2e8, 3e8, 4e8, 5e8}, {1e9, 1e9, 2e9, 2e9, 3e9}, outs, 7, 1e9);
  m.layers[1].profile[0].grad_output_bytes = 7e5;  // the gradient crossing the cut after layer 1, at b = 1
  m.layers[1].profile[1].grad_output_bytes = 1.4e6;
  const sim::Pipeline p = planner::pipeline_of(m, {0, 2, 5}, 8, 1e11);
  ASSERT_EQ(p.num_stages(), 2);
  EXPECT_EQ(p.stages[0].static_bytes, 1e9 + 2e9 * 8);
  EXPECT_EQ(p.stages[1].static_bytes, 1e9 + 7e9 * 8);
  EXPECT_DOUBLE_EQ(p.stages[1].optimizer_s, 0.02 + 0.0 + 0.01);
  const auto st = p.at(2);
  EXPECT_DOUBLE_EQ(st[0].fwd, (1 + 2) * 1.75 / 3);
  EXPECT_DOUBLE_EQ(st[1].bwd, 2 * (3 + 4 + 5) * 1.75 / 3);
  EXPECT_EQ(st[0].act, 6e8);
  EXPECT_EQ(st[0].out, 4e6);    // layer 1's output at b = 2
  EXPECT_EQ(st[1].gout, 1.4e6); // its gradient
}

// `adagrouper model` -> `partition` -> `plan` / `simulate`, and `plan --model`, on a
// shipped model file.
class PartitionCli : public ::testing::Test {
 public:
  Outcome run(const std::string& args) { return run_cli(args, tmp_.path()); }
  TempDir tmp_;
};

TEST_F(PartitionCli, ShippedModelToPlan) {
  const std::string model = "configs/models/gpt3-2.7b.json";
  const std::string net = "configs/networks/preempted-25g.json";
  const fs::path pipe = tmp_.path() / "pipe.json";
  Outcome r = run(fmt::format("partition --model {} --stages 8 --micro-batch-size 2 --network {} --output '{}'", model,
                              net, pipe.string()));
  ASSERT_EQ(r.rc, 0) << r.err;
  EXPECT_THAT(r.out, HasSubstr("34 layers into 8 stages at b = 2"));
  EXPECT_THAT(r.out, HasSubstr("latency model:"));
  const sim::Pipeline p = sim::load_pipeline(pipe);
  EXPECT_EQ(p.num_stages(), 8);
  EXPECT_EQ(p.min_micro_batch_size(), 1);

  // The pipeline file plans and simulates.
  r = run(fmt::format("plan --pipeline '{}' --network {} --json", pipe.string(), net));
  ASSERT_EQ(r.rc, 0) << r.err;
  const json plan = json::parse(r.out);
  EXPECT_EQ(plan["stages"], 8);
  r = run(fmt::format("simulate --pipeline '{}' --network {} --schedule 1f1b -b 2 --json", pipe.string(), net));
  ASSERT_EQ(r.rc, 0) << r.err;
  const json sim1 = json::parse(r.out);
  // partition --json reports the same simulated time for its chosen cut.
  r = run(fmt::format("partition --model {} --stages 8 --micro-batch-size 2 --network {} --json", model, net));
  ASSERT_EQ(r.rc, 0) << r.err;
  const json rep = json::parse(r.out);
  EXPECT_EQ(rep["schema"], "adagrouper.partition/1");
  EXPECT_DOUBLE_EQ(rep["chosen"]["simulated_iteration_time_s"].get<double>(), sim1["mean_iteration_time_s"].get<double>());
  EXPECT_EQ(rep["chosen"]["stages"].size(), 8u);

  // One command from the model: --stages 8 and --stages auto.
  const fs::path chosen = tmp_.path() / "chosen.json";
  r = run(fmt::format("plan --model {} --stages 8 --network {} --json --pipeline-output '{}'", model, net,
                      chosen.string()));
  ASSERT_EQ(r.rc, 0) << r.err;
  const json mp = json::parse(r.out);
  EXPECT_EQ(mp["schema"], "adagrouper.plan/2");
  EXPECT_EQ(mp["stages"], 8);
  EXPECT_EQ(mp["partition"]["stages"], 8);
  EXPECT_EQ(mp["inputs"][0]["role"], "model");
  EXPECT_EQ(sim::load_pipeline(chosen).num_stages(), 8);
  // --stages auto on a small generated model (8 layers: S = 2, 4, 8).
  const fs::path small = tmp_.path() / "small.json";
  r = run(fmt::format("model --arch gpt --layers 6 --hidden 1024 --heads 16 --seq-len 512 --vocab 5000 "
                      "--global-batch-size 16 --memory-bytes 2e9 --output '{}'",
                      small.string()));
  ASSERT_EQ(r.rc, 0) << r.err;
  r = run(fmt::format("plan --model '{}' --stages auto --network configs/networks/eth-25g.json --json", small.string()));
  ASSERT_EQ(r.rc, 0) << r.err;
  const json autoplan = json::parse(r.out);
  std::set<int> tried;
  for (const auto& t : autoplan["partition"]["trials"]) tried.insert(t["stages"].get<int>());
  EXPECT_EQ(tried, (std::set<int>{2, 4, 8}));
  EXPECT_EQ(autoplan["stages"], autoplan["partition"]["stages"]);

  // Bad input: exit 2, one line, no output.
  for (const auto& [args, want] : std::vector<std::pair<std::string, std::string>>{
           {fmt::format("partition --model {} --stages 40 -b 2", model), "--stages: 40 stages need at least 40 layers"},
           {fmt::format("partition --model {} --stages 4 -b 3", model), "--micro-batch-size: must be >= 1 and divide"},
           {fmt::format("partition --model {} --stages 2 -b 8", model), "no cut into 2 stages fits the memory limit"},
           {fmt::format("partition --model {} --stages 4", model), "--micro-batch-size: missing"},
           {fmt::format("partition --model {} --stages 4 -b 2 --schedule kfkb", model), "--k: the kfkb schedule needs"},
           {fmt::format("plan --model {} --network {}", model, net), "--stages: missing"},
           {fmt::format("plan --model {} --stages x --network {}", model, net), "--stages: must be a number"},
           {fmt::format("plan --pipeline '{}' --stages 4 --network {}", pipe.string(), net), "--stages: only with --model"},
       }) {
    const fs::path out = tmp_.path() / "never.json";
    r = run(args + fmt::format(" --output '{}'", out.string()));
    EXPECT_EQ(r.rc, 2) << args << "\n" << r.err;
    EXPECT_THAT(r.err, HasSubstr(want)) << args;
    EXPECT_EQ(std::count(r.err.begin(), r.err.end(), '\n'), 1) << r.err;
    EXPECT_FALSE(fs::exists(out)) << args;
  }
  r = run("partition --help");
  EXPECT_EQ(r.rc, 0);
  EXPECT_THAT(r.out, HasSubstr("(M - 1) x max"));
}

}  // namespace
}  // namespace plantest
