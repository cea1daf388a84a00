// Tests of adaptive re-planning (planner/adapt.h, `adagrouper adapt`).
//
// On a step change the controller switches no later than R and W say and beats the
// first-window plan; on a constant network it never switches; the oracle is never worse
// than any policy and the best static plan never worse than any static plan; the command
// line end to end on configs/, byte-identical on a rerun.
#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <fmt/format.h>

#include <algorithm>
#include <cmath>
#include <map>
#include <set>
#include <string>
#include <vector>

#include "helpers.h"

namespace plantest {
namespace {

const std::string kBursty = "configs/networks/bursty-minutes-25g.json";
constexpr double kHigh = 2.8e9, kLow = 0.35e9, kLatency = 30e-6;

// --- the controller ---------------------------------------------------------------------

// Every channel of the U-Net at `before` until t_step, then `after` forever.
sim::Network step_network(int S, double t_step, double before, double after) {
  sim::Network n = sim::Network::uniform(S, before, kLatency);
  n.rewrite_channels([&](sim::ChannelSpec& c) { c.set_rate(sim::RateTrace::piecewise({0.0, t_step}, {before, after})); });
  return n;
}

planner::AdaptOptions options_for(const sim::Pipeline& p, int n, int r, int w, double pause) {
  planner::AdaptOptions o;
  o.memory_limit_bytes = *p.memory_limit_bytes;
  o.global_batch_size = p.global_batch_size;
  o.iterations = n;
  o.replan_every = r;
  o.window = w;
  o.threshold = 0.02;
  o.switch_pause_s = pause;
  return o;
}

// What the planner chooses on a constant network, as its label ("kfkb k=2 b=4").
std::string planner_choice(const sim::Pipeline& p, double rate) {
  planner::PlanOptions po;
  po.memory_limit_bytes = *p.memory_limit_bytes;
  po.global_batch_size = p.global_batch_size;
  const planner::PlanResult r = planner::make_plan(p, sim::Network::uniform(p.num_stages(), rate, kLatency), po);
  const planner::Candidate& c = r.candidates[r.chosen];
  return c.label();
}

std::string key(const planner::Candidate& c) { return c.label(); }

// The orderings every run must satisfy, whatever the trace.
void expect_orderings(const planner::AdaptResult& r) {
  const double tol = 1e-9;
  const double oracle = r.policy("oracle").total_time_s, best = r.policy("best-static").total_time_s;
  EXPECT_EQ(best, *std::min_element(r.static_total_s.begin(), r.static_total_s.end()));
  for (double t : r.static_total_s) EXPECT_LE(best, t);
  for (const auto& p : r.policies) {
    if (!p.available) continue;
    EXPECT_LE(oracle, p.total_time_s * (1 + tol)) << p.name;
    ASSERT_EQ(p.rows.size(), static_cast<std::size_t>(r.options.iterations)) << p.name;
    // Rows chain: each iteration starts when the previous one ended plus the pause.
    double t = 0, pauses = 0;
    int switches = 0;
    for (std::size_t i = 0; i < p.rows.size(); ++i) {
      const auto& row = p.rows[i];
      EXPECT_EQ(row.iteration, static_cast<int>(i));
      t += row.pause_s;
      pauses += row.pause_s;
      EXPECT_EQ(row.start_s, t) << p.name << " iteration " << i;
      t += row.time_s;
      if (i > 0 && row.plan != p.rows[i - 1].plan) {
        ++switches;
        EXPECT_EQ(row.pause_s, r.options.switch_pause_s) << p.name;
        EXPECT_EQ(row.iteration % r.options.replan_every, 0) << p.name << ": switches only at period boundaries";
      } else {
        EXPECT_EQ(row.pause_s, 0.0) << p.name << " iteration " << i;
      }
    }
    EXPECT_EQ(t, p.total_time_s) << p.name;
    EXPECT_EQ(switches, p.switches) << p.name;
    EXPECT_EQ(pauses, p.pause_s) << p.name;
  }
  // Static policies are their candidate's static run.
  for (const char* name : {"1f1b", "dapple-b", "first-window", "best-static"}) {
    const auto& p = r.policy(name);
    if (!p.available) continue;
    EXPECT_EQ(p.switches, 0) << name;
    EXPECT_EQ(p.total_time_s, r.static_total_s[p.rows.front().plan]) << name;
  }
  EXPECT_EQ(r.policy("first-window").rows.front().plan, r.launch_plan);
  EXPECT_EQ(r.policy("adaptive").rows.front().plan, r.launch_plan);
}

TEST(Adapt, StepChangeSwitchesWithinTheWindowAndPeriodAndBeatsTheFirstWindowPlan) {
  const sim::Pipeline unet = sim::load_pipeline(kRoot / kUnet);
  const int N = 48, R = 4, W = 64;
  const double t_step = 50.0;
  const planner::AdaptResult r =
      planner::run_adapt(unet, step_network(unet.num_stages(), t_step, kHigh, kLow), options_for(unet, N, R, W, 0.5));
  expect_orderings(r);

  // The launch profile (1F1B, ceil(W / M) iterations) ends before the step, so the first
  // plan is the planner's choice on the fast network.
  EXPECT_EQ(r.candidates[r.profile_plan].spec.label(), "1f1b");
  const int m0 = r.candidates[r.profile_plan].micro_batches;
  EXPECT_EQ(r.profile_iterations, (W + m0 - 1) / m0);
  EXPECT_EQ(key(r.candidates[r.launch_plan]), planner_choice(unet, kHigh));
  ASSERT_NE(planner_choice(unet, kHigh), planner_choice(unet, kLow)) << "the step must change the best plan";

  // The step falls inside iteration i_step of the launch plan. From iteration i_step + 1
  // on every transfer sees the slow rate; ceil(W / M) iterations later the whole window
  // does, and the next decision point (a multiple of R) must switch.
  const auto& first = r.policy("first-window").rows;
  int i_step = -1;
  for (const auto& row : first)
    if (row.start_s < t_step && t_step <= row.start_s + row.time_s) i_step = row.iteration;
  ASSERT_GE(i_step, 0);
  const int m = r.candidates[r.launch_plan].micro_batches;
  const int full = i_step + 1 + (W + m - 1) / m;  // first iteration after a window of slow samples
  const int latest = R * ((full + R - 1) / R);
  ASSERT_LT(latest, N);

  const planner::Decision* sw = nullptr;
  for (const auto& d : r.decisions) {
    if (d.iteration <= i_step) {
      EXPECT_FALSE(d.switched) << "decision at " << d.iteration << " before the step: " << d.reason;
      EXPECT_EQ(d.best, r.launch_plan);
    }
    if (d.switched && !sw) sw = &d;
    if (d.iteration >= latest) {
      // A window of slow samples only: the estimate is the slow rate.
      for (const auto& c : d.channels) {
        ASSERT_TRUE(c.rate);
        EXPECT_NEAR(*c.rate, kLow, kLow * 1e-9) << "decision " << d.iteration;
        EXPECT_EQ(c.samples, static_cast<std::size_t>(W));
      }
      EXPECT_EQ(key(r.candidates[d.best]), planner_choice(unet, kLow));
    }
  }
  ASSERT_NE(sw, nullptr) << "never switched";
  EXPECT_GT(sw->iteration, i_step);
  EXPECT_LE(sw->iteration, latest) << "i_step " << i_step << ", M " << m;
  EXPECT_EQ(sw->iteration % R, 0);
  // It ends on the slow network's plan, and it beats the plan it started with.
  const auto& adaptive = r.policy("adaptive");
  EXPECT_EQ(key(r.candidates[adaptive.rows.back().plan]), planner_choice(unet, kLow));
  EXPECT_GE(adaptive.switches, 1);
  EXPECT_LT(adaptive.total_time_s, r.policy("first-window").total_time_s);
  EXPECT_LT(r.policy("oracle").total_time_s, r.policy("best-static").total_time_s);

  // A pause longer than what the switch saves until the next decision keeps the plan.
  const planner::AdaptResult slow = planner::run_adapt(
      unet, step_network(unet.num_stages(), t_step, kHigh, kLow), options_for(unet, N, R, W, 1000.0));
  EXPECT_EQ(slow.policy("adaptive").switches, 0);
  EXPECT_EQ(slow.policy("adaptive").total_time_s, slow.policy("first-window").total_time_s);
  EXPECT_EQ(slow.policy("oracle").switches, 0);
  expect_orderings(slow);

  // The payback horizon: a pause that the saving repays over the rest of the run but
  // not over the next R iterations stops the switch when --horizon is R.
  const double saving = sw->current_predicted_s - sw->best_predicted_s;  // per iteration
  ASSERT_GT(saving, 0);
  const double pause = 2.0 * R * saving;
  ASSERT_GT((N - sw->iteration) * saving, pause);
  planner::AdaptOptions o = options_for(unet, N, R, W, pause);
  const planner::AdaptResult rest = planner::run_adapt(unet, step_network(unet.num_stages(), t_step, kHigh, kLow), o);
  EXPECT_GE(rest.policy("adaptive").switches, 1);
  o.horizon = R;
  const planner::AdaptResult myopic =
      planner::run_adapt(unet, step_network(unet.num_stages(), t_step, kHigh, kLow), o);
  EXPECT_EQ(myopic.policy("adaptive").switches, 0);
  EXPECT_THAT(myopic.decisions.at(sw->iteration / R - 1).reason, HasSubstr("not more than the"));
}

TEST(Adapt, ConstantNetworkNeverSwitches) {
  const sim::Pipeline unet = sim::load_pipeline(kRoot / kUnet);
  for (double rate : {kHigh, kLow}) {
    const planner::AdaptResult r = planner::run_adapt(unet, sim::Network::uniform(unet.num_stages(), rate, kLatency),
                                                      options_for(unet, 30, 3, 48, 0.0));
    expect_orderings(r);
    EXPECT_EQ(key(r.candidates[r.launch_plan]), planner_choice(unet, rate));
    const auto& a = r.policy("adaptive");
    EXPECT_EQ(a.switches, 0) << rate;
    EXPECT_EQ(r.decisions.size(), 9u);
    for (const auto& d : r.decisions) EXPECT_FALSE(d.switched) << d.reason;
    EXPECT_EQ(a.total_time_s, r.policy("first-window").total_time_s);
    // Every iteration of a static plan takes the same time on a constant network, so
    // the oracle has nothing to gain over the best static plan.
    EXPECT_NEAR(r.policy("oracle").total_time_s, r.policy("best-static").total_time_s,
                1e-9 * r.policy("best-static").total_time_s);
    EXPECT_NEAR(a.total_time_s, r.policy("best-static").total_time_s, 1e-9 * a.total_time_s);
  }
}

// With --families the controller chooses among the schedule families too: a superset
// of the candidates, so the best static plan in hindsight is never slower, the orderings
// hold, and the rows name each variant apart from plain kFkB.
TEST(Adapt, FamiliesWidenTheCandidates) {
  const sim::Pipeline unet = sim::load_pipeline(kRoot / kUnet);
  const sim::Network net = step_network(unet.num_stages(), 60.0, kHigh, kLow);
  const planner::AdaptResult plain = planner::run_adapt(unet, net, options_for(unet, 40, 4, 48, 0.5));
  planner::AdaptOptions o = options_for(unet, 40, 4, 48, 0.5);
  o.families = planner::parse_families("kfkb-dynamic,interleaved-1f1b");
  const planner::AdaptResult wide = planner::run_adapt(unet, net, o);
  expect_orderings(wide);
  std::set<std::string> labels;
  for (const auto& c : wide.candidates) labels.insert(c.label());
  for (const auto& c : plain.candidates) EXPECT_TRUE(labels.count(c.label())) << c.label();
  EXPECT_GT(wide.candidates.size(), plain.candidates.size());
  EXPECT_TRUE(std::any_of(wide.candidates.begin(), wide.candidates.end(),
                          [](const planner::Candidate& c) { return c.spec.w_fill == sim::WFill::Dynamic; }));
  EXPECT_LE(wide.policy("best-static").total_time_s, plain.policy("best-static").total_time_s * (1 + 1e-12));
  for (std::size_t q = 0; q < wide.candidates.size(); ++q) {
    const auto& c = wide.candidates[q];
    if (!c.spec.split_backward) continue;
    const std::string row = planner::row_csv("best-static", {.iteration = 0, .plan = static_cast<int>(q)}, c);
    EXPECT_THAT(row, HasSubstr("," + c.spec.family + " split-backward w-fill=dynamic")) << row;
  }
}

// Random preemption steps on a random pipeline with several micro-batch sizes: the
// orderings hold whatever the trace, and the run is deterministic.
TEST(Adapt, OrderingsHoldOnRandomTraces) {
  int ran = 0, switched = 0;
  for (std::uint64_t seed = 1; seed <= 8; ++seed) {
    Rng rng(seed);
    const int S = rng.range(2, 4);
    const sim::Pipeline p = random_pipeline(rng, S, {1, 2, 4}, 8, 16e9);
    std::vector<double> times{0.0}, values{rng.dyadic(4, 16, 1)};
    for (int i = 0; i < 12; ++i) {
      times.push_back(times.back() + rng.dyadic(8, 160, 1));
      values.push_back(rng.chance(0.5) ? rng.dyadic(1, 4, 4) : rng.dyadic(4, 16, 1));
    }
    // The random pipeline's messages are 1e7..1.6e8 bytes per sample: rates of
    // 0.25e8..16e8 B/s make transfers from a fraction of an op to many ops long.
    for (double& v : values) v *= 1e8;
    sim::Network n = sim::Network::uniform(S, 1.0, 0.0);
    n.rewrite_channels([&](sim::ChannelSpec& c) { c.set_rate(sim::RateTrace::piecewise(times, values)); });
    planner::AdaptOptions o;
    o.memory_limit_bytes = 16e9;
    o.global_batch_size = 8;
    o.iterations = 30;
    o.replan_every = rng.range(1, 5);
    o.window = rng.range(1, 24);
    o.threshold = 0.01;
    o.switch_pause_s = rng.dyadic(0, 8, 4);
    planner::AdaptResult r;
    try {
      r = planner::run_adapt(p, n, o);
    } catch (const InputError& e) {
      continue;  // nothing fits this random pipeline's limit
    }
    SCOPED_TRACE(fmt::format("seed {}: S={}, R={}, W={}, pause={}", seed, S, o.replan_every, o.window,
                             o.switch_pause_s));
    ++ran;
    switched += r.policy("oracle").switches > 0 && r.policy("adaptive").switches > 0;
    expect_orderings(r);
    const planner::AdaptResult again = planner::run_adapt(p, n, o);
    for (std::size_t i = 0; i < r.policies.size(); ++i) {
      EXPECT_EQ(r.policies[i].total_time_s, again.policies[i].total_time_s);
      EXPECT_EQ(r.policies[i].switches, again.policies[i].switches);
    }
  }
  EXPECT_GE(ran, 6) << "most random pipelines should fit";
  EXPECT_GE(switched, 2) << "the orderings should be exercised with switching policies";
}

TEST(Adapt, BadOptionsNameTheOption) {
  const sim::Pipeline unet = sim::load_pipeline(kRoot / kUnet);
  const sim::Network net = sim::Network::uniform(unet.num_stages(), kHigh, kLatency);
  auto bad = [&](auto change) {
    planner::AdaptOptions o = options_for(unet, 10, 2, 8, 1.0);
    change(o);
    return testutil::input_error([&] { planner::run_adapt(unet, net, o); });
  };
  EXPECT_THAT(bad([](auto& o) { o.iterations = 0; }), HasSubstr("--iterations"));
  EXPECT_THAT(bad([](auto& o) { o.replan_every = 0; }), HasSubstr("--replan-every"));
  EXPECT_THAT(bad([](auto& o) { o.window = 0; }), HasSubstr("--window"));
  EXPECT_THAT(bad([](auto& o) { o.threshold = -0.1; }), HasSubstr("--threshold"));
  EXPECT_THAT(bad([](auto& o) { o.switch_pause_s = std::nan(""); }), HasSubstr("--switch-pause"));
  EXPECT_THAT(bad([](auto& o) { o.horizon = -1; }), HasSubstr("--horizon"));
  EXPECT_THAT(bad([](auto& o) { o.memory_limit_bytes = 1e9; }), HasSubstr("memory_limit_bytes"));
}

// --- the command line -------------------------------------------------------------------

class AdaptCli : public ::testing::Test {
 public:
  Outcome run(const std::string& args) { return run_cli(args, tmp_.path()); }
  fs::path path(const std::string& name) const { return tmp_.path() / name; }
  TempDir tmp_;
};

// The rows CSV of `adapt` by policy, each row split into its 9 cells, after checking the
// header.
void rows_by_policy(const std::string& csv, std::map<std::string, std::vector<std::vector<std::string>>>& out) {
  std::istringstream in(csv);
  std::string line;
  std::getline(in, line);
  EXPECT_EQ(line, "policy,iteration,start_s,schedule,k,micro_batch_size,micro_batches,pause_s,iteration_time_s");
  while (std::getline(in, line)) {
    std::vector<std::string> f;
    std::stringstream ls(line);
    std::string cell;
    while (std::getline(ls, cell, ',')) f.push_back(cell);
    ASSERT_EQ(f.size(), 9u) << line;
    out[f[0]].push_back(f);
  }
}

TEST_F(AdaptCli, EndToEndOnShippedConfigsIsByteIdenticalOnARerun) {
  // --quiet: progress lines appear only when a run takes seconds, which a loaded
  // machine can make it do.
  const std::string common = fmt::format(
      "adapt --pipeline {} --network {} --iterations 40 --replan-every 5 --window 64 --quiet", kUnet, kBursty);
  std::string first_rows, first_json, first_out;
  for (int round = 0; round < 2; ++round) {
    const Outcome r = run(fmt::format("{} --rows '{}' --output '{}'", common, path("rows.csv").string(),
                                      path("summary.json").string()));
    ASSERT_EQ(r.rc, 0) << r.err;
    EXPECT_EQ(r.err, "");
    EXPECT_THAT(r.out, HasSubstr("best-static"));
    EXPECT_FALSE(fs::exists(path("rows.csv.partial")));
    if (round == 0) {
      first_rows = slurp(path("rows.csv"));
      first_json = slurp(path("summary.json"));
      first_out = r.out;
    } else {
      EXPECT_EQ(slurp(path("rows.csv")), first_rows);
      EXPECT_EQ(slurp(path("summary.json")), first_json);
      EXPECT_EQ(r.out, first_out);
    }
  }

  // Rows: a header, then 40 per policy, six policies.
  std::map<std::string, std::vector<std::vector<std::string>>> by_policy;
  rows_by_policy(first_rows, by_policy);
  if (HasFatalFailure()) return;
  EXPECT_EQ(by_policy.size(), 6u);
  for (const auto& [name, rows] : by_policy) EXPECT_EQ(rows.size(), 40u) << name;

  // The summary agrees with the rows, and static 1F1B is what `simulate` reports.
  const json doc = json::parse(first_json);
  EXPECT_EQ(doc.at("schema"), "adagrouper.adapt/1");
  EXPECT_EQ(doc.at("settings").at("replan_every"), 5);
  // The inputs are named with the sha256 of their bytes, as a plan's are.
  ASSERT_EQ(doc.at("inputs").size(), 2u);
  for (const auto& in : doc.at("inputs")) {
    const std::string sha = in.at("sha256").get<std::string>();
    EXPECT_EQ(sha.size(), 64u);
    EXPECT_EQ(sha.find_first_not_of("0123456789abcdef"), std::string::npos) << sha;
  }
  EXPECT_NE(doc.at("inputs")[0].at("sha256"), doc.at("inputs")[1].at("sha256"));
  EXPECT_EQ(doc.at("decisions").size(), 7u);
  for (const auto& p : doc.at("policies")) {
    const auto& rows = by_policy.at(p.at("policy").get<std::string>());
    double sum = 0;
    for (const auto& f : rows) sum += std::stod(f[7]) + std::stod(f[8]);
    EXPECT_NEAR(sum, p.at("total_time_s").get<double>(), 1e-9 * sum) << p.at("policy");
  }
  const auto& f1 = by_policy.at("1f1b");
  const Outcome sim = run(fmt::format("simulate --pipeline {} --network {} --schedule 1f1b --micro-batch-size {} "
                                      "--iterations 40 --json",
                                      kUnet, kBursty, f1.front()[5]));
  ASSERT_EQ(sim.rc, 0) << sim.err;
  const json times = json::parse(sim.out).at("iteration_times_s");
  ASSERT_EQ(times.size(), 40u);
  for (int i = 0; i < 40; ++i) EXPECT_NEAR(std::stod(f1[i][8]), times[i].get<double>(), 1e-9) << i;

  // --json prints the same document; JSON Lines rows carry the same values.
  const Outcome j = run(common + " --json --rows '" + path("rows.jsonl").string() + "'");
  ASSERT_EQ(j.rc, 0) << j.err;
  EXPECT_EQ(j.out, first_json);
  std::istringstream jl(slurp(path("rows.jsonl")));
  int n = 0;
  for (std::string line; std::getline(jl, line);) {
    const json row = json::parse(line);
    if (n == 0) {
      EXPECT_EQ(row.at("policy"), "1f1b");
      EXPECT_EQ(row.at("iteration_time_s").get<double>(), std::stod(f1[0][8]));
    }
    ++n;
  }
  EXPECT_EQ(n, 240);
}

TEST_F(AdaptCli, HelpAndBadInput) {
  const Outcome h = run("adapt --help");
  EXPECT_EQ(h.rc, 0);
  for (const char* s : {"--replan-every", "--window", "--threshold", "--switch-pause", "--horizon", "--rows",
                        "--families", "docs/formats.md",
                        "oracle", "first-window", "Example"})
    EXPECT_THAT(h.out, HasSubstr(s));

  const std::string base = fmt::format("adapt --pipeline {} --network {} --iterations 10 --rows '{}' --output '{}'",
                                       kUnet, kBursty, path("rows.csv").string(), path("out.json").string());
  for (const auto& [args, piece] : std::vector<std::pair<std::string, std::string>>{
           {" --replan-every 0", "--replan-every"},
           {" --threshold -1", "--threshold"},
           {" --rows-format xml", "--rows-format"},
           {" --families zbx", "--families: unknown family 'zbx'"},
           {" --memory-limit 1e9", "memory_limit_bytes"}}) {
    const Outcome r = run(base + args);
    EXPECT_EQ(r.rc, 2) << args;
    EXPECT_EQ(std::count(r.err.begin(), r.err.end(), '\n'), 1) << r.err;
    EXPECT_THAT(r.err, HasSubstr(piece));
    EXPECT_FALSE(fs::exists(path("rows.csv"))) << args;
    EXPECT_FALSE(fs::exists(path("rows.csv.partial"))) << args;
    EXPECT_FALSE(fs::exists(path("out.json"))) << args;
  }
}

}  // namespace
}  // namespace plantest
