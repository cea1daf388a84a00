// Fidelity: `adagrouper compare` on synthetic summaries with known errors and rankings;
// the replay's measured result against the simulator's own definitions; the replay of
// a 2-stage plan under mpirun; and the reduced fidelity testbed end to end.
#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <algorithm>
#include <array>
#include <cmath>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <map>
#include <optional>
#include <tuple>
#include <regex>
#include <set>
#include <sstream>
#include <string>
#include <thread>
#include <vector>

#include <fmt/format.h>
#include <nlohmann/json.hpp>

#include "../common/cli_runner.h"
#include "../common/test_util.h"
#include "planner.h"
#include "replay.h"
#include "sim.h"

namespace {

namespace fs = std::filesystem;
using json = nlohmann::json;
using ::testing::ContainsRegex;
using ::testing::HasSubstr;
using testutil::TempDir;
namespace sim = adagrouper::sim;
namespace calib = adagrouper::calib;

// A summary JSON as simulate writes it, with the fields compare reads.
json summary(const std::string& schedule, int k, int b, std::vector<double> times, std::vector<double> busy,
             int micro_batches = 8) {
  json j;
  double total = 0;
  for (double t : times) total += t;
  j["pipeline"] = "synthetic";
  j["schedule"] = schedule;
  j["k"] = k;
  j["micro_batch_size"] = b;
  j["micro_batches"] = micro_batches;
  j["global_batch_size"] = b * micro_batches;
  j["stages"] = busy.size();
  j["iterations"] = times.size();
  j["start_time_s"] = 0.0;
  j["iteration_times_s"] = times;
  j["mean_iteration_time_s"] = total / times.size();
  j["total_time_s"] = total;
  double sum_busy = 0;
  for (double x : busy) sum_busy += x;
  j["bubble_fraction"] = 1 - sum_busy / (busy.size() * total);
  j["per_stage"] = json::array();
  for (std::size_t s = 0; s < busy.size(); ++s)
    j["per_stage"].push_back({{"stage", s}, {"busy_s", busy[s]}, {"bubble_s", total - busy[s]}});
  return j;
}

sim::Summary parsed(const json& j, const std::string& name) { return sim::parse_summary(j, name); }

TEST(Compare, KnownErrors) {
  const auto p = parsed(summary("kfkb", 2, 1, {1.1, 0.9, 1.0}, {1.5, 1.2}), "p.json");
  const auto m = parsed(summary("kfkb", 2, 1, {1.0, 1.0, 1.0}, {1.5, 1.5}), "m.json");
  const sim::Comparison c = sim::compare(p, m);
  ASSERT_EQ(c.iterations.size(), 3u);
  EXPECT_NEAR(c.iterations[0].error_pct, 10.0, 1e-9);
  EXPECT_NEAR(c.iterations[1].error_pct, -10.0, 1e-9);
  EXPECT_NEAR(c.iterations[2].error_pct, 0.0, 1e-9);
  EXPECT_NEAR(c.iterations[0].error_s, 0.1, 1e-12);
  EXPECT_NEAR(c.mape_pct, 20.0 / 3.0, 1e-9);
  EXPECT_NEAR(c.mean_error_pct, 0.0, 1e-9);
  EXPECT_NEAR(c.max_abs_error_pct, 10.0, 1e-9);
  EXPECT_NEAR(c.median_abs_error_pct, 10.0, 1e-9);
  EXPECT_EQ(c.label, "kfkb k=2 b=1");
  // Per stage, per iteration: stage 1 busy 0.4 s predicted, 0.5 s measured.
  ASSERT_EQ(c.per_stage.size(), 2u);
  EXPECT_NEAR(c.per_stage[0].busy_diff_s, 0.0, 1e-12);
  EXPECT_NEAR(c.per_stage[1].busy_predicted_s, 0.4, 1e-12);
  EXPECT_NEAR(c.per_stage[1].busy_measured_s, 0.5, 1e-12);
  EXPECT_NEAR(c.per_stage[1].busy_error_pct, -20.0, 1e-9);
  EXPECT_NEAR(c.per_stage[1].bubble_diff_s, 0.1, 1e-12);
  EXPECT_NEAR(c.bubble_fraction_predicted - c.bubble_fraction_measured, (1 - 2.7 / 6) - 0.5, 1e-12);
}

TEST(Compare, DifferentLengthsCompareThePrefix) {
  const auto p = parsed(summary("1f1b", 1, 2, {2.0, 2.0}, {1.0}), "p.json");
  const auto m = parsed(summary("1f1b", 1, 2, {2.5, 2.0, 4.0, 4.0}, {2.0}), "m.json");
  const auto c = sim::compare(p, m);
  ASSERT_EQ(c.iterations.size(), 2u);
  EXPECT_NEAR(c.mape_pct, 10.0, 1e-9);
  EXPECT_NEAR(c.median_abs_error_pct, 10.0, 1e-9);  // 20% and 0%: the middle of two
  EXPECT_NEAR(c.per_stage[0].busy_measured_s, 0.5, 1e-12);  // 2.0 s over 4 iterations
}

TEST(Compare, MismatchedRunsAreBadInput) {
  const auto p = parsed(summary("kfkb", 2, 1, {1.0}, {0.5}), "p.json");
  const auto m = parsed(summary("kfkb", 3, 1, {1.0}, {0.5}), "m.json");
  EXPECT_THAT(testutil::input_error([&] { sim::compare(p, m); }),
              HasSubstr("m.json: k: 3 does not match 2 in p.json"));
  json bad = summary("kfkb", 2, 1, {1.0, 2.0}, {0.5});
  bad["iterations"] = 3;
  EXPECT_THAT(testutil::input_error([&] { parsed(bad, "x.json"); }), HasSubstr("x.json: iteration_times_s"));
  bad = summary("kfkb", 2, 1, {1.0}, {0.5});
  bad["per_stage"][0].erase("busy_s");
  EXPECT_THAT(testutil::input_error([&] { parsed(bad, "x.json"); }), HasSubstr("busy_s"));
}

// Two runs that differ only in how their backward ran are told apart: the summary
// writes the options that set it, and compare's label names them, as the measured run
// gives them where it does.
TEST(Compare, LabelNamesHowTheBackwardRan) {
  const sim::Pipeline pipe = sim::load_pipeline(std::string(SOURCE_ROOT) + "/configs/examples/toy-4.json");
  const sim::Network net = sim::load_network(std::string(SOURCE_ROOT) + "/configs/examples/toy-net-0.5s.json", 4);
  std::vector<std::string> labels;
  for (const std::optional<int> bound : {std::optional<int>(), std::optional<int>(2)}) {
    sim::ScheduleSpec spec = sim::ScheduleSpec::named("kfkb", 2);
    spec.split_backward = true;
    spec.w_fill = sim::WFill::Dynamic;
    spec.max_pending_w = bound;
    const sim::SimResult run = sim::simulate(sim::make_scenario(pipe, net, sim::make_schedule(spec, 4, 8), 1, 1));
    const json written = sim::summary_json(run);
    EXPECT_EQ(written["w_fill"], "dynamic");
    labels.push_back(sim::compare(parsed(written, "p.json"), parsed(written, "m.json")).label);
  }
  EXPECT_EQ(labels[0], "kfkb k=2 split-backward w-fill=dynamic b=1");
  EXPECT_EQ(labels[1], "kfkb k=2 split-backward w-fill=dynamic max-pending-w=2 b=1");
  // Predicted by the order a fill recorded (static), measured as the candidate (a
  // replay writes its plan's): named as measured.
  sim::ScheduleSpec fixed = sim::ScheduleSpec::named("kfkb", 2);
  fixed.split_backward = true;
  const json recorded =
      sim::summary_json(sim::simulate(sim::make_scenario(pipe, net, sim::make_schedule(fixed, 4, 8), 1, 1)));
  EXPECT_EQ(recorded["w_fill"], "static");
  json replayed = recorded;
  replayed["w_fill"] = "dynamic";
  replayed["max_pending_w"] = 2;
  EXPECT_EQ(sim::compare(parsed(recorded, "p.json"), parsed(replayed, "m.json")).label,
            "kfkb k=2 split-backward w-fill=dynamic max-pending-w=2 b=1");
  // Without those options the summary has no such fields, and the label is as before.
  const json plain = sim::summary_json(
      sim::simulate(sim::make_scenario(pipe, net, sim::make_named("kfkb", 4, 8, 2), 1, 1)));
  EXPECT_FALSE(plain.contains("w_fill"));
  EXPECT_EQ(parsed(plain, "p.json").label(), "kfkb k=2 b=1");
  json bad = plain;
  bad["w_fill"] = "eager";
  EXPECT_THAT(testutil::input_error([&] { parsed(bad, "x.json"); }),
              HasSubstr("x.json: w_fill: must be static or dynamic"));
}

// Three candidates whose measured order swaps the last two: C = 2, D = 1, tau = 1/3.
TEST(Compare, RankingOfCandidates) {
  std::vector<sim::Comparison> cs;
  const std::vector<std::pair<double, double>> pm = {{1.0, 1.1}, {2.0, 2.4}, {3.0, 2.2}};
  for (std::size_t i = 0; i < pm.size(); ++i)
    cs.push_back(sim::compare(parsed(summary("kfkb", static_cast<int>(i) + 1, 1, {pm[i].first}, {0.5}), "p"),
                              parsed(summary("kfkb", static_cast<int>(i) + 1, 1, {pm[i].second}, {0.5}), "m")));
  auto r = sim::rank_agreement(cs, 0);
  EXPECT_EQ(r.pairs, 3);
  EXPECT_EQ(r.concordant, 2);
  EXPECT_EQ(r.discordant, 1);
  EXPECT_NEAR(r.kendall_tau, 1.0 / 3.0, 1e-12);
  EXPECT_NEAR(r.pairwise_agreement, 2.0 / 3.0, 1e-12);
  EXPECT_EQ(r.predicted_best, 0);
  EXPECT_EQ(r.measured_best, 0);
  EXPECT_TRUE(r.best_holds);
  EXPECT_TRUE(r.chosen_is_fastest_measured);
  EXPECT_NEAR(r.regret_pct, 0.0, 1e-12);

  // Now the predicted best is measured slowest: the pick misses by 3.0 / 1.1 - 1.
  cs[0] = sim::compare(parsed(summary("kfkb", 1, 1, {1.0}, {0.5}), "p"),
                       parsed(summary("kfkb", 1, 1, {3.0}, {0.5}), "m"));
  r = sim::rank_agreement(cs, 1);
  EXPECT_EQ(r.predicted_best, 0);
  EXPECT_EQ(r.measured_best, 2);
  EXPECT_FALSE(r.best_holds);
  EXPECT_NEAR(r.regret_pct, 100.0 * (3.0 / 2.2 - 1.0), 1e-9);
  EXPECT_FALSE(r.chosen_is_fastest_measured);
  EXPECT_NEAR(r.chosen_regret_pct, 100.0 * (2.4 / 2.2 - 1.0), 1e-9);
  EXPECT_EQ(r.concordant, 0);
  EXPECT_EQ(r.discordant, 3);
  EXPECT_NEAR(r.kendall_tau, -1.0, 1e-12);

  // Ties in the prediction: tau-b leaves them out of the denominator.
  for (auto& c : cs) c.mean_predicted_s = 1.0;
  r = sim::rank_agreement(cs);
  EXPECT_EQ(r.tied, 3);
  EXPECT_EQ(r.kendall_tau, 1.0);
  EXPECT_FALSE(r.chosen.has_value());
  EXPECT_THAT(testutil::input_error([&] { sim::rank_agreement(cs, 3); }), HasSubstr("--chosen: 3"));
}

class CompareCli : public ::testing::Test {
 public:
  clirunner::Outcome run(const std::string& args) { return clirunner::run_adagrouper(args, tmp_.path()); }
  std::string file(const std::string& name, const json& j) { return tmp_.write(name, j).string(); }
  TempDir tmp_;
};

TEST_F(CompareCli, PairsJsonAndTable) {
  const auto p0 = file("p0.json", summary("1f1b", 1, 2, {2.0, 2.0}, {1.0, 1.0}));
  const auto m0 = file("m0.json", summary("1f1b", 1, 2, {2.1, 1.9}, {1.0, 1.0}));
  const auto p1 = file("p1.json", summary("kfkb", 2, 2, {1.5, 1.5}, {1.0, 1.0}));
  const auto m1 = file("m1.json", summary("kfkb", 2, 2, {1.6, 1.5}, {1.0, 1.0}));
  const auto plan = file("plan.json", json{{"chosen", {{"schedule", "kfkb"}, {"k", 2}, {"micro_batch_size", 2}}}});
  const auto out = tmp_.path() / "cmp.json";
  auto r = run(fmt::format("compare --pair {}={} --pair {}={} --plan {} --json --output {}", p0, m0, p1, m1, plan,
                           out.string()));
  ASSERT_EQ(r.rc, 0) << r.err;
  const json j = json::parse(r.out);
  EXPECT_EQ(j, json::parse(clirunner::slurp(out)));
  EXPECT_EQ(j["schema"], "adagrouper.compare/1");
  ASSERT_EQ(j["comparisons"].size(), 2u);
  EXPECT_NEAR(j["comparisons"][0]["mape_pct"].get<double>(), 100.0 * (0.1 / 2.1 + 0.1 / 1.9) / 2, 1e-9);
  EXPECT_EQ(j["comparisons"][1]["label"], "kfkb k=2 b=2");
  EXPECT_EQ(j["ranking"]["chosen"], 1);
  EXPECT_EQ(j["ranking"]["chosen_is_fastest_measured"], true);
  EXPECT_EQ(j["ranking"]["kendall_tau"], 1.0);
  for (const char* key : {"iterations", "mean_error_pct", "max_abs_error_pct", "median_abs_error_pct",
                          "bubble_fraction_diff", "per_stage"})
    EXPECT_TRUE(j["comparisons"][0].contains(key)) << key;

  // The same as a list file, as a table; --fail-above fails on the first pair's 5%.
  const auto list = tmp_.write("pairs.txt", fmt::format("# predicted measured\n{} {}\n\n{} {}\n", p0, m0, p1, m1));
  r = run(fmt::format("compare --pairs {} --chosen 0 --fail-above 4", list.string()));
  EXPECT_EQ(r.rc, 1);
  EXPECT_THAT(r.out, HasSubstr("kfkb k=2 b=2"));
  EXPECT_THAT(r.out, HasSubstr("planner's pick #0 (1f1b b=2): not the fastest measured"));
  EXPECT_THAT(r.err, HasSubstr("above --fail-above 4%"));

  r = run(fmt::format("compare --predicted {} --measured {}", p0, m0));
  EXPECT_EQ(r.rc, 0);
  EXPECT_THAT(r.out, HasSubstr("MAPE 5.01%"));
}

TEST_F(CompareCli, BadInput) {
  const auto p0 = file("p0.json", summary("1f1b", 1, 2, {2.0}, {1.0}));
  const auto m1 = file("m1.json", summary("gpipe", 8, 2, {2.0}, {1.0}));
  for (const auto& [args, piece] : std::vector<std::pair<std::string, std::string>>{
           {"compare", "--predicted/--measured: missing"},
           {"compare --predicted " + p0, "--measured: missing"},
           {"compare --pair " + p0, "is not PREDICTED=MEASURED"},
           {"compare --predicted " + p0 + " --measured " + m1, "schedule: gpipe does not match 1f1b"},
           {"compare --predicted " + p0 + " --measured /nonexistent.json", "/nonexistent.json"},
           {"compare --pairs /nonexistent.txt", "/nonexistent.txt: cannot open"},
       }) {
    const auto r = run(args);
    EXPECT_EQ(r.rc, 2) << args;
    EXPECT_THAT(r.err, HasSubstr(piece)) << args;
  }
  EXPECT_EQ(run("compare --help").rc, 0);
}

// --- the replay's measured result --------------------------------------------

// What the replay would have recorded had the run gone exactly as simulated.
calib::Measurements measurements_of(const sim::SimResult& r, const calib::ReplayPlan& plan,
                                    const std::vector<calib::IndexedProgram>& progs) {
  calib::Measurements m;
  m.warmup = 0;
  m.iterations = r.iterations;
  const auto& tl = *r.timeline;
  const int S = plan.stages;
  m.ranks.resize(S);
  for (int s = 0; s < S; ++s) {
    auto& rec = m.ranks[s];
    const auto& p = progs[s];
    rec.op_start.assign(p.compute.size() * r.iterations, -1);
    rec.op_end = rec.op_start;
    rec.send_post.assign(p.sends.size() * r.iterations, -1);
    rec.send_done = rec.send_post;
    rec.recv_post.assign(p.recvs.size() * r.iterations, -1);
    rec.recv_done = rec.recv_post;
    rec.iteration_end.assign(r.iterations, 0);
  }
  std::vector<double> opt(S, 0.0);  // a stage's optimizer steps, one per model stage it runs
  for (int j = 0; j < plan.model_stages(); ++j) opt[plan.stage_of(j)] += plan.params[j].opt;
  for (const auto& o : tl.ops) {
    const auto& p = progs[o.stage];
    for (std::size_t c = 0; c < p.compute.size(); ++c) {
      if (p.compute[c].op != o.op) continue;
      const std::size_t k = o.iteration * p.compute.size() + c;
      m.ranks[o.stage].op_start[k] = o.start;
      m.ranks[o.stage].op_end[k] = o.end;
      auto& end = m.ranks[o.stage].iteration_end[o.iteration];
      end = std::max(end, o.end + opt[o.stage]);
    }
  }
  // A message is the one its sending model stage sends for its micro-batch, one way.
  auto same = [](const calib::IndexedProgram::Message& msg, const sim::Timeline::TransferSlice& t) {
    return msg.model_stage == t.model_stage && msg.micro_batch == t.micro_batch && msg.gradient == t.gradient;
  };
  for (const auto& t : tl.transfers) {
    const auto& tx = progs[t.from];
    const auto& rx = progs[t.to];
    for (std::size_t q = 0; q < tx.sends.size(); ++q)
      if (same(tx.sends[q], t)) {
        m.ranks[t.from].send_post[t.iteration * tx.sends.size() + q] = t.start;
        m.ranks[t.from].send_done[t.iteration * tx.sends.size() + q] = t.end;
      }
    for (std::size_t q = 0; q < rx.recvs.size(); ++q)
      if (same(rx.recvs[q], t)) {
        m.ranks[t.to].recv_post[t.iteration * rx.recvs.size() + q] = t.start;
        m.ranks[t.to].recv_done[t.iteration * rx.recvs.size() + q] = t.end;
      }
  }
  double t = r.start_time_s;
  m.boundaries.push_back(t);
  for (double x : r.iteration_times_s) m.boundaries.push_back(t += x);
  m.start_time_s = r.start_time_s;
  return m;
}

calib::ReplayPlan plan_of(const sim::Pipeline& pipe, const sim::Schedule& sch, int b) {
  calib::ReplayPlan plan;
  plan.source = "test-plan.json";
  plan.pipeline = pipe.name;
  plan.stages = sch.num_stages();
  plan.global_batch_size = pipe.global_batch_size;
  plan.memory_limit_bytes = pipe.memory_limit_bytes;
  plan.spec = sch.spec;
  plan.k = sch.k;
  plan.micro_batch_size = b;
  plan.micro_batches = pipe.global_batch_size / b;
  plan.params = pipe.at(b);
  calib::place_model_stages(plan, sch);
  plan.programs = adagrouper::planner::device_programs(sch, plan.params);
  return plan;
}

// Had the replay measured exactly what the simulator computed, its summary would be the
// simulator's: same iteration times, busy and bubble time, in-flight micro-batches,
// memory, channel busy time and queue depth.
// A measured summary g against the simulator's a: the same fields, the same values up to
// rounding.
void expect_same_summary(const json& a, const json& g) {
  ASSERT_EQ(a.size(), g.size());
  for (auto it = a.begin(); it != a.end(); ++it) {
    SCOPED_TRACE(it.key());
    const json& x = *it;
    const json& y = g.at(it.key());
    if (x.is_number_float()) {
      EXPECT_NEAR(x.get<double>(), y.get<double>(), 1e-9 * std::max(1.0, std::abs(x.get<double>())));
    } else if (it.key() == "per_stage" || it.key() == "channels" || it.key() == "iteration_times_s") {
      ASSERT_EQ(x.size(), y.size());
      for (std::size_t i = 0; i < x.size(); ++i) {
        if (x[i].is_number()) {
          EXPECT_NEAR(x[i].get<double>(), y[i].get<double>(), 1e-9);
          continue;
        }
        for (auto f = x[i].begin(); f != x[i].end(); ++f) {
          double want = f->get<double>();
          // The replay moves whole bytes: toy-4's 0.5-byte messages move 1 byte each.
          if (f.key() == "bytes") want = x[i]["messages"].get<double>() * std::round(want / x[i]["messages"].get<double>());
          EXPECT_NEAR(want, y[i].at(f.key()).get<double>(), 1e-6 * std::max(1.0, want))
              << it.key() << "[" << i << "]." << f.key();
        }
      }
    } else {
      EXPECT_EQ(x, y);
    }
  }
}

TEST(MeasuredResult, ReproducesTheSimulatorsDefinitions) {
  TempDir tmp;
  const std::string root = SOURCE_ROOT;
  struct Case {
    std::string pipeline, network, family;
    std::optional<int> k;
    int b;
    int devices = 0;  // 0: one model stage per stage
    int v = 1;
    bool split = false;
  };
  const std::vector<Case> cases = {
      {"configs/examples/toy-4.json", "configs/examples/toy-net-2s.json", "kfkb", 2, 1},
      {"configs/examples/toy-4.json", "configs/examples/toy-net-0.5s.json", "1f1b", std::nullopt, 1},
      {"configs/examples/toy-4.json", "configs/examples/toy-net-0.5s.json", "dapple-b", std::nullopt, 1},
      {"configs/fidelity/pipeline-2.json", "configs/fidelity/net-200mbit.json", "kfkb", 3, 1},
      {"configs/fidelity/pipeline-4.json", "configs/fidelity/net-200mbit.json", "gpipe", std::nullopt, 2},
      // Model stages on stages (loop and V placement, local messages) and split backward.
      {"configs/examples/toy-4.json", "configs/examples/toy-net-0.5s.json", "interleaved-1f1b", std::nullopt, 1, 2, 2},
      {"configs/examples/toy-4.json", "configs/examples/toy-net-0.5s.json", "zbv", std::nullopt, 1, 2, 2},
      {"configs/fidelity/pipeline-4.json", "configs/fidelity/net-200mbit.json", "interleaved-zb", std::nullopt, 2, 2,
       2},
      {"configs/examples/toy-4.json", "configs/examples/toy-net-2s.json", "kfkb", 2, 1, 0, 1, true},
  };
  for (const auto& [pipe_path, net_path, name, k, b, devices, v, split] : cases) {
    SCOPED_TRACE(pipe_path + " " + name);
    const sim::Pipeline pipe = sim::load_pipeline(root + "/" + pipe_path);
    const int D = devices > 0 ? devices : pipe.num_stages();
    sim::Network net = sim::load_network(root + "/" + net_path, D);
    const int M = pipe.global_batch_size / b;
    sim::ScheduleSpec spec = sim::ScheduleSpec::named(name, k);
    spec.virtual_stages = v;
    spec.split_backward = split;
    sim::Schedule sch = sim::make_schedule(spec, D, M);
    std::size_t listed = 0;  // F and B, or F, I and W, per model stage and micro-batch
    for (const auto& order : sch.stages) listed += order.size();
    const calib::ReplayPlan plan = plan_of(pipe, sch, b);
    std::vector<calib::IndexedProgram> progs;
    for (int s = 0; s < plan.stages; ++s) progs.push_back(calib::index_program(plan, s));
    sim::Scenario sc = sim::make_scenario(pipe, std::move(net), std::move(sch), b, 3);
    const sim::SimResult r = sim::simulate(sc, {.timeline = true});
    const calib::Measurements m = measurements_of(r, plan, progs);
    EXPECT_THAT(calib::check_measurements(progs, m, 1e-9), ::testing::IsEmpty());
    const sim::SimResult got = calib::measured_result(plan, progs, m, true);
    expect_same_summary(sim::summary_json(r), sim::summary_json(got));
    EXPECT_EQ(got.timeline->ops.size(), r.timeline->ops.size());
    EXPECT_EQ(got.timeline->transfers.size(), r.timeline->transfers.size());
    EXPECT_FALSE(sim::timeline_json(got).empty());
    // The stage trace holds every op of every measured iteration.
    const std::string csv = calib::stage_trace_csv(progs, m);
    std::size_t ops = 0;
    for (const auto& order : plan.programs)
      for (const auto& e : order.entries) ops += e.kind != adagrouper::planner::ProgramEntry::Kind::Send &&
                                                 e.kind != adagrouper::planner::ProgramEntry::Kind::Recv;
    EXPECT_EQ(ops, listed);
    EXPECT_EQ(std::count(csv.begin(), csv.end(), '\n'), 1 + 3 * static_cast<long>(ops));
  }
}

TEST(MeasuredResult, OutOfOrderRecordsAreReported) {
  const sim::Pipeline pipe = sim::load_pipeline(std::string(SOURCE_ROOT) + "/configs/examples/toy-4.json");
  sim::Network net = sim::load_network(std::string(SOURCE_ROOT) + "/configs/examples/toy-net-0.5s.json", 4);
  sim::Schedule sch = sim::make_named("1f1b", 4, 8, std::nullopt);
  const auto plan = plan_of(pipe, sch, 1);
  std::vector<calib::IndexedProgram> progs;
  for (int s = 0; s < 4; ++s) progs.push_back(calib::index_program(plan, s));
  sim::Scenario sc = sim::make_scenario(pipe, std::move(net), std::move(sch), 1, 1);
  auto m = measurements_of(sim::simulate(sc, {.timeline = true}), plan, progs);
  // Stage 2's first op (F0) starts before its activation arrived.
  m.ranks[2].op_start[0] -= 0.4;
  const auto problems = calib::check_measurements(progs, m, 1e-6);
  ASSERT_FALSE(problems.empty());
  EXPECT_THAT(problems[0], HasSubstr("stage 2 iteration 0: F0 started"));
}

// A runtime W fill (replay --w-fill runtime) runs the W ops where it decides, not where
// the programs list them: records of kFkB with dynamic W fill simulated on one network,
// against programs recorded on another, are out of the programs' order, and consistent
// when checked in the order the ops ran; a W before its I, or two other ops swapped,
// are still reported.
TEST(MeasuredResult, RuntimeWFillIsCheckedInTheOrderTheOpsRan) {
  const std::string root = SOURCE_ROOT;
  const sim::Pipeline pipe = sim::load_pipeline(root + "/configs/examples/toy-4.json");
  sim::ScheduleSpec spec = sim::ScheduleSpec::named("kfkb", 2);
  spec.split_backward = true;
  spec.w_fill = sim::WFill::Dynamic;
  const int M = pipe.global_batch_size;
  const auto scenario = [&](const char* net) {
    return sim::make_scenario(pipe, sim::load_network(root + "/configs/examples/" + net, 4),
                              sim::make_schedule(spec, 4, M), 1, 2);
  };
  // The programs record the fill's order on toy-net-0.5s; the run fills on toy-net-2s.
  const sim::Schedule recorded = adagrouper::planner::deployed_schedule(scenario("toy-net-0.5s.json"));
  ASSERT_NE(recorded.stages, adagrouper::planner::deployed_schedule(scenario("toy-net-2s.json")).stages)
      << "the two networks must fill differently for this test to mean anything";
  const auto plan = plan_of(pipe, recorded, 1);
  std::vector<calib::IndexedProgram> progs;
  for (int s = 0; s < 4; ++s) progs.push_back(calib::index_program(plan, s));
  sim::Scenario run = scenario("toy-net-2s.json");
  auto m = measurements_of(sim::simulate(run, {.timeline = true}), plan, progs);
  EXPECT_THAT(calib::check_measurements(progs, m, 1e-9), ::testing::Not(::testing::IsEmpty()));
  m.runtime_w_fill = true;
  EXPECT_THAT(calib::check_measurements(progs, m, 1e-9), ::testing::IsEmpty());

  // A stage's first W moved to start before its I ended.
  const calib::IndexedProgram& p = progs[1];
  const std::vector<int> w_of = calib::weight_ops(p);
  const auto i_op = std::find_if(w_of.begin(), w_of.end(), [](int w) { return w >= 0; });
  ASSERT_NE(i_op, w_of.end());
  const std::size_t i = static_cast<std::size_t>(i_op - w_of.begin()), w = static_cast<std::size_t>(*i_op);
  EXPECT_EQ(p.compute[w].op.phase, sim::Phase::BackwardWeight);
  EXPECT_EQ(p.compute[w].op.micro_batch, p.compute[i].op.micro_batch);
  auto bad = m;
  bad.ranks[1].op_start[w] = bad.ranks[1].op_end[i] - 1e-3;
  auto problems = calib::check_measurements(progs, bad, 1e-9);
  ASSERT_FALSE(problems.empty());
  EXPECT_THAT(problems, ::testing::Contains(HasSubstr(fmt::format("{} started at", sim::op_name(p.compute[w].op)))));

  // Stage 0's first two forwards swapped.
  bad = m;
  std::swap(bad.ranks[0].op_start[0], bad.ranks[0].op_start[1]);
  std::swap(bad.ranks[0].op_end[0], bad.ranks[0].op_end[1]);
  problems = calib::check_measurements(progs, bad, 1e-9);
  EXPECT_THAT(problems, ::testing::Contains(HasSubstr("stage 0 iteration 0: F1 ran where the program has F0")));
}

// Every op of the weight_ops map: an I names the W of its model stage and micro-batch.
TEST(ReplayPlan, WeightOpsPairEachIWithItsW) {
  const sim::Pipeline pipe = sim::load_pipeline(std::string(SOURCE_ROOT) + "/configs/examples/toy-4.json");
  sim::ScheduleSpec spec = sim::ScheduleSpec::named("zbv", std::nullopt);
  spec.virtual_stages = 2;
  const sim::Schedule sch = sim::make_schedule(spec, 2, pipe.global_batch_size);
  const auto plan = plan_of(pipe, sch, 1);
  for (int s = 0; s < 2; ++s) {
    const calib::IndexedProgram p = calib::index_program(plan, s);
    const std::vector<int> w_of = calib::weight_ops(p);
    ASSERT_EQ(w_of.size(), p.compute.size());
    int pairs = 0;
    for (std::size_t c = 0; c < p.compute.size(); ++c) {
      const sim::Op& op = p.compute[c].op;
      if (op.phase != sim::Phase::BackwardInput) {
        EXPECT_EQ(w_of[c], -1) << sim::op_name(op);
        continue;
      }
      ASSERT_GE(w_of[c], 0) << sim::op_name(op);
      const sim::Op& w = p.compute[static_cast<std::size_t>(w_of[c])].op;
      EXPECT_EQ(w.phase, sim::Phase::BackwardWeight);
      EXPECT_EQ(w.micro_batch, op.micro_batch);
      EXPECT_EQ(w.model_stage, op.model_stage);
      ++pairs;
    }
    EXPECT_GT(pairs, 0);
  }
}

// --- plans for the replay ----------------------------------------------------

TEST(ReplayPlan, ChosenAndOtherCandidates) {
  TempDir tmp;
  const auto plan_path = tmp.path() / "plan.json";
  const auto r = clirunner::run_adagrouper(
      "plan --pipeline configs/fidelity/pipeline-2.json --network configs/fidelity/net-200mbit.json --output " +
          plan_path.string(),
      tmp.path());
  ASSERT_EQ(r.rc, 0) << r.err;
  const std::string pipe = std::string(SOURCE_ROOT) + "/configs/fidelity/pipeline-2.json";
  const calib::ReplayPlan chosen = calib::load_replay_plan(plan_path.string(), {pipe, std::nullopt});
  EXPECT_TRUE(chosen.chosen);
  EXPECT_EQ(chosen.stages, 2);
  const json doc = json::parse(clirunner::slurp(plan_path));
  EXPECT_EQ(chosen.spec.family, doc["chosen"]["schedule"].get<std::string>());
  EXPECT_EQ(chosen.k, doc["chosen"]["k"]);
  EXPECT_EQ(chosen.micro_batches, doc["chosen"]["micro_batches"]);
  ASSERT_EQ(chosen.programs.size(), 2u);
  EXPECT_EQ(chosen.programs[0].entries.size(), doc["devices"][0]["program"].size());
  // Every candidate loads, with programs that index (the planner's own for the others).
  for (std::size_t i = 0; i < doc["candidates"].size(); ++i) {
    const auto c = calib::load_replay_plan(plan_path.string(), {pipe, static_cast<int>(i)});
    EXPECT_EQ(c.chosen, doc["candidates"][i]["status"] == "chosen") << i;
    // The spec carries k for the families that take one, and only for them.
    EXPECT_EQ(c.spec.family, doc["candidates"][i]["schedule"].get<std::string>()) << i;
    EXPECT_EQ(c.spec.k.has_value(), sim::find_schedule_family(c.spec.family)->takes_k) << i;
    if (c.spec.k) {
      EXPECT_EQ(*c.spec.k, doc["candidates"][i]["k"]) << i;
    }
    for (int s = 0; s < 2; ++s) EXPECT_EQ(calib::index_program(c, s).compute.size(), 2u * c.micro_batches);
  }
  EXPECT_THAT(testutil::input_error([&] { calib::load_replay_plan(plan_path.string(), {pipe, 99}); }),
              HasSubstr("--candidate: 99"));
  // A program whose send precedes its producer is refused, naming the entry.
  json bad = doc;
  auto& prog = bad["devices"][0]["program"];
  std::swap(prog[0], prog[1]);  // F0, send F0 -> send F0, F0
  const auto bad_path = tmp.write("bad.json", bad);
  EXPECT_THAT(testutil::input_error([&] { calib::load_replay_plan(bad_path.string(), {pipe, std::nullopt}); }),
              HasSubstr("bad.json: devices"));
}

// A pipeline's op overhead is what a host adds to every op: the plan predicts with it,
// and the ranks of a replay run the profiles alone (their host adds its own).
TEST(ReplayPlan, RanksRunTheProfilesNotTheOpOverhead) {
  TempDir tmp;
  const std::string bare = std::string(SOURCE_ROOT) + "/configs/fidelity/pipeline-2.json";
  json doc = json::parse(clirunner::slurp(bare));
  for (json& st : doc["stages"]) st["op_overhead_s"] = 0.002;
  const auto pipe = tmp.write("pipe.json", doc);
  const auto plan_with = tmp.path() / "with.json", plan_bare = tmp.path() / "bare.json";
  for (const auto& [pipeline, plan] : {std::pair{pipe.string(), plan_with}, std::pair{bare, plan_bare}}) {
    const auto r = clirunner::run_adagrouper(fmt::format("plan --pipeline {} --network {}/configs/fidelity/net-200mbit.json "
                                                         "--output {}",
                                                         pipeline, SOURCE_ROOT, plan.string()),
                                             tmp.path());
    ASSERT_EQ(r.rc, 0) << r.err;
  }
  const json with = json::parse(clirunner::slurp(plan_with)), without = json::parse(clirunner::slurp(plan_bare));
  const calib::ReplayPlan run = calib::load_replay_plan(plan_with.string(), {pipe.string(), 0});
  const calib::ReplayPlan ref = calib::load_replay_plan(plan_with.string(), {bare, 0});
  ASSERT_EQ(run.params.size(), 2u);
  for (std::size_t s = 0; s < 2; ++s) {
    EXPECT_EQ(run.params[s].fwd, ref.params[s].fwd) << s;
    EXPECT_EQ(run.params[s].bwd, ref.params[s].bwd) << s;
  }
  // The same candidate, predicted with and without the overhead: at least one op longer.
  EXPECT_GT(with["candidates"][0]["predicted_iteration_time_s"].get<double>(),
            without["candidates"][0]["predicted_iteration_time_s"].get<double>() + 0.002);
}

// A plan made with `plan --model` has no pipeline file among its inputs: the replay cuts
// the model at the plan's bounds, the pipeline the planner ran (equal to the one
// --pipeline-output writes); bounds that do not cut the model are one line of bad input.
TEST(ReplayPlan, PlanFromAModelNeedsNoPipelineFile) {
  TempDir tmp;
  const auto plan_path = tmp.path() / "plan.json", pipe = tmp.path() / "pipe.json";
  // Absolute inputs: the replay below reads them from this process's folder, wherever it runs.
  const std::string root = SOURCE_ROOT;
  const auto r = clirunner::run_adagrouper(fmt::format("plan --model '{0}/configs/models/gpt2-xl.json' --stages 4 "
                                                       "--network '{0}/configs/networks/eth-25g.json' --output '{1}' "
                                                       "--pipeline-output '{2}'",
                                                       root, plan_path.string(), pipe.string()),
                                           tmp.path());
  ASSERT_EQ(r.rc, 0) << r.err;
  const calib::ReplayPlan from_model = calib::load_replay_plan(plan_path.string(), {});
  const calib::ReplayPlan from_file = calib::load_replay_plan(plan_path.string(), {pipe.string(), std::nullopt});
  EXPECT_THAT(from_model.pipeline_source, HasSubstr("gpt2-xl.json cut at"));
  ASSERT_EQ(from_model.params.size(), 4u);
  for (std::size_t s = 0; s < 4; ++s) {
    EXPECT_DOUBLE_EQ(from_model.params[s].fwd, from_file.params[s].fwd) << s;
    EXPECT_DOUBLE_EQ(from_model.params[s].bwd, from_file.params[s].bwd) << s;
    EXPECT_DOUBLE_EQ(from_model.params[s].out, from_file.params[s].out) << s;
  }
  json bad = json::parse(clirunner::slurp(plan_path));
  bad["partition"]["bounds"][2] = bad["partition"]["bounds"][1];
  const auto bad_path = tmp.write("bad.json", bad);
  EXPECT_THAT(testutil::input_error([&] { calib::load_replay_plan(bad_path.string(), {}); }),
              HasSubstr("partition.bounds[2]: bounds must rise from 0"));
}

// A plan across families on 2 devices (4 model stages): candidates with virtual stages
// and a split backward load with their model stages placed and the pipeline merged as
// the planner merged it; one with dynamic W fill that was not chosen runs the order the
// fill executed in the plan's evaluation (what `simulate --recorded-order` runs for it);
// one its family refused is one line of bad input.
TEST(ReplayPlan, FamiliesWithModelStages) {
  TempDir tmp;
  const auto plan_path = tmp.path() / "plan.json";
  const auto r = clirunner::run_adagrouper(
      fmt::format("plan --pipeline {0}/configs/fidelity/pipeline-4.json --network {0}/configs/fidelity/net-200mbit.json "
                  "--devices 2 --families all --memory-limit 8e9 --output {1}",
                  SOURCE_ROOT, plan_path.string()),
      tmp.path());
  ASSERT_EQ(r.rc, 0) << r.err;
  const json doc = json::parse(clirunner::slurp(plan_path));
  const std::string pipe = std::string(SOURCE_ROOT) + "/configs/fidelity/pipeline-4.json";
  int seen_v2 = 0, seen_split = 0, dynamic_others = 0;
  for (std::size_t i = 0; i < doc["candidates"].size(); ++i) {
    SCOPED_TRACE(i);
    const json& c = doc["candidates"][i];
    const auto load = [&] { return calib::load_replay_plan(plan_path.string(), {pipe, static_cast<int>(i)}); };
    if (c["status"] == "refused") {
      EXPECT_THAT(testutil::input_error(load), HasSubstr("refused by its family"));
      continue;
    }
    const calib::ReplayPlan p = load();
    if (c["w_fill"] == "dynamic" && c["status"] != "chosen" && ++dynamic_others == 1) {
      const auto csv = tmp.path() / "deployed.csv";
      const auto sim_run = clirunner::run_adagrouper(
          fmt::format("simulate --plan {} --candidate {} --recorded-order --pipeline {} --export-schedule {}",
                      plan_path.string(), i, pipe, csv.string()),
          tmp.path());
      ASSERT_EQ(sim_run.rc, 0) << sim_run.err;
      const sim::Schedule deployed = sim::load_torch_csv(csv, p.model_stages(), c["micro_batches"].get<int>());
      for (int s = 0; s < 2; ++s) {
        std::vector<sim::Op> replayed;
        for (const auto& op : calib::index_program(p, s).compute) replayed.push_back(op.op);
        EXPECT_EQ(replayed, deployed.stages[static_cast<std::size_t>(s)]) << s;
      }
    }
    const int v = c["virtual_stages"];
    ASSERT_EQ(p.model_stages(), 2 * v);
    EXPECT_EQ(p.spec.virtual_stages, v);
    std::size_t ops = 0, listed_w = 0;
    for (int s = 0; s < 2; ++s) {
      const calib::IndexedProgram ip = calib::index_program(p, s);
      ops += ip.compute.size();
      for (const auto& op : ip.compute) listed_w += op.op.phase == sim::Phase::BackwardWeight;
      // Every message goes to the other stage; those between model stages of one stage are local.
      for (const auto& msg : ip.sends) EXPECT_EQ(msg.peer, 1 - s);
    }
    // F and B, or F, I and W, for every (model stage, micro-batch).
    const std::size_t M = c["micro_batches"], J = static_cast<std::size_t>(p.model_stages());
    EXPECT_EQ(ops, 2 * M * J + listed_w);
    seen_v2 += v == 2;
    seen_split += listed_w > 0;
  }
  EXPECT_GT(seen_v2, 0);
  EXPECT_GT(seen_split, 0);
  EXPECT_GT(dynamic_others, 0);
  // Without the plan's network, a dynamic candidate it did not choose has no order.
  json moved = doc;
  std::size_t dynamic_other = 0;
  while (moved["candidates"][dynamic_other]["w_fill"] != "dynamic" ||
         moved["candidates"][dynamic_other]["status"] == "chosen")
    ++dynamic_other;
  for (auto& in : moved["inputs"])
    if (in["role"] == "network") in["path"] = "gone/net.json";
  const auto moved_path = tmp.write("moved.json", moved);
  EXPECT_THAT(testutil::input_error([&] {
                calib::load_replay_plan(moved_path.string(), {pipe, static_cast<int>(dynamic_other)});
              }),
              HasSubstr("inputs: the network gone/net.json is not there"));
  // The chosen candidate replays from the plan's own programs.
  EXPECT_TRUE(calib::load_replay_plan(plan_path.string(), {pipe, std::nullopt}).chosen);
  // A pipeline with fewer model stages than the candidate runs is refused.
  int v2 = -1;
  for (std::size_t i = 0; i < doc["candidates"].size() && v2 < 0; ++i)
    if (doc["candidates"][i]["virtual_stages"] == 2 && doc["candidates"][i]["status"] != "refused")
      v2 = static_cast<int>(i);
  ASSERT_GE(v2, 0);
  EXPECT_THAT(testutil::input_error([&] {
                calib::load_replay_plan(plan_path.string(),
                                        {std::string(SOURCE_ROOT) + "/configs/fidelity/pipeline-2.json", v2});
              }),
              HasSubstr("the candidate runs 4 model stages (2 stages x 2 virtual stages)"));
}

// A plan made with --comm-profile: a dynamic candidate it did not choose replays the order
// made on the measured rates, as `simulate --recorded-order` runs it.
TEST(ReplayPlan, NotChosenDynamicOrderOfAProfiledPlan) {
  TempDir tmp;
  std::string samples = "channel,time_s,bytes,duration_s\n";
  for (const char* ch : {"0->1", "1->2", "2->3", "1->0", "2->1", "3->2"})
    for (int t = 0; t < 10; ++t) samples += fmt::format("{},{},0.5,2.0\n", ch, t);
  const auto csv = tmp.path() / "samples.csv", plan_path = tmp.path() / "plan.json";
  std::ofstream(csv) << samples;
  const std::string root = SOURCE_ROOT, pipe = root + "/configs/examples/toy-8.json";
  const auto r = clirunner::run_adagrouper(
      fmt::format("plan --pipeline {} --network {}/configs/examples/toy-net-stepped.json --devices 4 --memory-limit "
                  "1e12 --iterations 4 --comm-profile {} --output {}",
                  pipe, root, csv.string(), plan_path.string()),
      tmp.path());
  ASSERT_EQ(r.rc, 0) << r.err;
  const json doc = json::parse(clirunner::slurp(plan_path));
  int others = 0;
  for (std::size_t i = 0; i < doc["candidates"].size(); ++i) {
    const json& c = doc["candidates"][i];
    if (c["status"] == "chosen" || !c.contains("deployed_iteration_time_s")) continue;
    SCOPED_TRACE(i);
    ++others;
    const calib::ReplayPlan p = calib::load_replay_plan(plan_path.string(), {pipe, static_cast<int>(i)});
    const auto order = tmp.path() / "order.csv";
    const auto sim_run = clirunner::run_adagrouper(
        fmt::format("simulate --plan {} --candidate {} --recorded-order --network {}/configs/examples/toy-net-2s.json "
                    "--export-schedule {}",
                    plan_path.string(), i, root, order.string()),
        tmp.path());
    ASSERT_EQ(sim_run.rc, 0) << sim_run.err;
    const sim::Schedule deployed = sim::load_torch_csv(order, p.model_stages(), c["micro_batches"].get<int>());
    for (int s = 0; s < 4; ++s) {
      std::vector<sim::Op> replayed;
      for (const auto& op : calib::index_program(p, s).compute) replayed.push_back(op.op);
      EXPECT_EQ(replayed, deployed.stages[static_cast<std::size_t>(s)]) << s;
    }
  }
  EXPECT_GT(others, 8);
}

// The order of a dynamic candidate the plan did not choose is the plan's: made on the
// pipeline the plan evaluated, whatever pipeline the replay runs or the simulation times
// (the testbed gives the ranks the bare profiles and the prediction a calibrated
// overhead). A pipeline whose ops cost 1.5 ms more makes another order for most of these
// candidates when the plan is made on it; given to simulate and replay, it leaves the
// plan's. Without the plan's pipeline there is no order: one line naming the input.
TEST(ReplayPlan, NotChosenDynamicOrderIsThePlansWhateverPipelineRuns) {
  TempDir tmp;
  const std::string root = SOURCE_ROOT, pipe = root + "/configs/fidelity/pipeline-4.json";
  json slow = json::parse(clirunner::slurp(pipe));
  for (json& st : slow["stages"]) st["op_overhead_s"] = 0.0015;
  const auto slow_pipe = tmp.write("slow.json", slow);
  const auto net = tmp.write(
      "net.json", R"({"latency_s": 1e-4, "default": {"points": [[0, 25e6], [1.0, 6.25e6]], "repeat_s": 2.0}})");
  const auto make_plan = [&](const std::string& pipeline, const std::string& out) {
    const auto r = clirunner::run_adagrouper(
        fmt::format("plan --pipeline {} --network {} --devices 2 --families kfkb-dynamic --memory-limit 8e9 "
                    "--iterations 8 --output {}",
                    pipeline, net.string(), (tmp.path() / out).string()),
        tmp.path());
    ASSERT_EQ(r.rc, 0) << r.err;
  };
  make_plan(pipe, "plan.json");
  make_plan(slow_pipe.string(), "plan-slow.json");
  const auto order_of = [&](const std::string& plan, std::size_t i, const std::string& extra) {
    const auto csv = tmp.path() / "order.csv";
    const auto r = clirunner::run_adagrouper(
        fmt::format("simulate --plan {} --candidate {} --recorded-order --export-schedule {}{}", plan, i, csv.string(),
                    extra),
        tmp.path());
    EXPECT_EQ(r.rc, 0) << r.err;
    return clirunner::slurp(csv);
  };
  const json doc = json::parse(clirunner::slurp(tmp.path() / "plan.json"));
  int others = 0, moved_by_the_pipeline = 0;
  for (std::size_t i = 0; i < doc["candidates"].size(); ++i) {
    const json& c = doc["candidates"][i];
    if (c["w_fill"] != "dynamic" || c["status"] == "chosen" || c["status"] == "refused") continue;
    SCOPED_TRACE(i);
    ++others;
    const std::string plan = (tmp.path() / "plan.json").string();
    const std::string planned = order_of(plan, i, "");
    moved_by_the_pipeline += order_of((tmp.path() / "plan-slow.json").string(), i, "") != planned;
    EXPECT_EQ(order_of(plan, i, " --pipeline " + slow_pipe.string()), planned);
    const calib::ReplayPlan p = calib::load_replay_plan(plan, {slow_pipe.string(), static_cast<int>(i)});
    const sim::Schedule deployed =
        sim::load_torch_csv(tmp.write("planned.csv", planned), p.model_stages(), c["micro_batches"].get<int>());
    for (int s = 0; s < 2; ++s) {
      std::vector<sim::Op> replayed;
      for (const auto& op : calib::index_program(p, s).compute) replayed.push_back(op.op);
      EXPECT_EQ(replayed, deployed.stages[static_cast<std::size_t>(s)]) << s;
    }
  }
  EXPECT_GT(others, 20);
  EXPECT_GT(moved_by_the_pipeline, 5);  // the test can fail: the pipeline matters to the order
  json moved = doc;
  for (auto& in : moved["inputs"])
    if (in["role"] == "pipeline") in["path"] = "gone/pipe.json";
  const auto moved_path = tmp.write("moved.json", moved);
  std::size_t dynamic_other = 0;
  while (doc["candidates"][dynamic_other]["w_fill"] != "dynamic" ||
         doc["candidates"][dynamic_other]["status"] == "chosen")
    ++dynamic_other;
  EXPECT_THAT(testutil::input_error([&] {
                calib::load_replay_plan(moved_path.string(), {pipe, static_cast<int>(dynamic_other)});
              }),
              HasSubstr("inputs: the pipeline gone/pipe.json is not there"));
  // The replay's own durations without --pipeline are the plan's: there the remedy is --pipeline.
  EXPECT_THAT(testutil::input_error([&] { calib::load_replay_plan(moved_path.string(), {"", std::nullopt}); }),
              HasSubstr("inputs: the pipeline gone/pipe.json is not there (from here or beside the plan); give "
                        "--pipeline FILE"));
  const auto r = clirunner::run_adagrouper(
      fmt::format("simulate --plan {} --candidate {} --recorded-order --pipeline {}", moved_path.string(),
                  dynamic_other, pipe),
      tmp.path());
  EXPECT_EQ(r.rc, 2);
  EXPECT_THAT(r.err, HasSubstr("inputs: the pipeline gone/pipe.json is not there"));
}

// --- the replay under mpirun ------------------------------------------------------

// mpirun's options for ranks on this host: MPI's TCP over the loopback only. Other suites
// create and remove network namespaces and their bridges meanwhile (the testbed), and an
// interface that vanishes between mpirun's listing of them and a rank's connect fails
// the job ("bind on local address ... failed").
#define LOCAL_MPI_TCP "--mca btl tcp,self --mca btl_tcp_if_include lo --mca oob_tcp_if_include lo"

// A shell command's standard output and exit status (the scripts' tests need no MPI).
std::string shell(const std::string& cmd, int& rc) {
  std::string out;
  std::FILE* p = ::popen(cmd.c_str(), "r");
  char buf[4096];
  std::size_t n;
  while ((n = std::fread(buf, 1, sizeof buf, p)) > 0) out.append(buf, n);
  const int status = ::pclose(p);
  rc = WIFEXITED(status) ? WEXITSTATUS(status) : -1;
  return out;
}

// Python CODE (no single quotes) run in tools/scripts, where the testbed's modules are:
// its standard output and errors, and its exit status.
std::string python_in_scripts(const std::string& code, int& rc) {
  return shell(fmt::format("cd '{}/tools/scripts' && python3 -c '{}' 2>&1", SOURCE_ROOT, code), rc);
}

// Python that makes a timeline's events as the replay writes them, iteration 0: op(...)
// a compute op on stage pid, recv(...) a receive's flow end.
std::string timeline_events_py() {
  return "def op(pid, name, ts, dur, mb): return {\"ph\": \"X\", \"cat\": \"forward\" if name[0] == \"F\" else "
         "\"backward\", \"name\": name, \"pid\": pid, \"ts\": ts, \"dur\": dur, \"args\": {\"iteration\": 0, "
         "\"micro_batch\": mb}}\n"
         "def recv(pid, name, ts, dur, mb): return {\"ph\": \"X\", \"cat\": \"transfer\", \"name\": name, \"pid\": pid, "
         "\"ts\": ts, \"dur\": dur, \"flow_in\": True, \"args\": {\"iteration\": 0, \"micro_batch\": mb}}\n";
}

#ifdef ADAGROUPER_CALIB_BIN
// A JSON object's keys in order.
std::vector<std::string> keys_of(const json& doc) {
  std::vector<std::string> keys;
  for (auto it = doc.begin(); it != doc.end(); ++it) keys.push_back(it.key());
  return keys;
}

// The raw records of a replay (one JSON line per op), by (stage, iteration).
std::map<std::pair<int, int>, std::vector<json>> records_by_stage_iteration(const fs::path& raw) {
  std::map<std::pair<int, int>, std::vector<json>> out;
  std::istringstream lines(clirunner::slurp(raw));
  for (std::string line; std::getline(lines, line);) {
    const json j = json::parse(line);
    out[{j["stage"].get<int>(), j["iteration"].get<int>()}].push_back(j);
  }
  return out;
}

// Every op of the plan's programs ran once per iteration, in the program's order.
void expect_programs_ran(const json& plan, const std::map<std::pair<int, int>, std::vector<json>>& records) {
  for (const auto& [key, ops] : records) {
    const auto& program = plan["devices"][key.first]["program"];
    ASSERT_EQ(ops.size(), program.size()) << key.first << " " << key.second;
    double prev_compute_end = -1e300;
    for (std::size_t i = 0; i < ops.size(); ++i) {
      EXPECT_EQ(ops[i]["kind"], program[i]["op"]);
      EXPECT_EQ(ops[i]["micro_batch"], program[i]["micro_batch"]);
      EXPECT_LE(ops[i]["start_s"].get<double>(), ops[i]["end_s"].get<double>());
      if (program[i]["op"] == "forward" || program[i]["op"] == "backward") {
        EXPECT_GE(ops[i]["start_s"].get<double>(), prev_compute_end - 1e-6);
        prev_compute_end = ops[i]["end_s"];
      } else {
        EXPECT_EQ(ops[i]["peer"], program[i]["peer"]);
        EXPECT_EQ(ops[i]["tag"], program[i]["tag"]);
        EXPECT_EQ(ops[i]["bytes"].get<double>(), std::round(program[i]["bytes"].get<double>()));
      }
    }
  }
}

// Send/recv pairs of a two-stage replay with M micro-batches: the n-th send of a channel
// and the n-th recv from it carry the same tag, and the data arrives after the send began.
void expect_send_recv_pairs(std::map<std::pair<int, int>, std::vector<json>>& records, int M) {
  for (int it = -1; it < 2; ++it) {
    for (int from = 0; from < 2; ++from) {
      const int to = 1 - from;
      std::vector<json> sends, recvs;
      for (const auto& j : records[{from, it}])
        if (j["kind"] == "send") sends.push_back(j);
      for (const auto& j : records[{to, it}])
        if (j["kind"] == "recv") recvs.push_back(j);
      ASSERT_EQ(sends.size(), static_cast<std::size_t>(M));
      ASSERT_EQ(recvs.size(), sends.size());
      for (std::size_t n = 0; n < sends.size(); ++n) {
        EXPECT_EQ(sends[n]["tag"], recvs[n]["tag"]);
        EXPECT_EQ(sends[n]["bytes"], recvs[n]["bytes"]);
        EXPECT_GE(recvs[n]["end_s"].get<double>(), sends[n]["start_s"].get<double>() - 1e-4);
      }
    }
  }
}

// The 2-stage fidelity pipeline planned on its 200 Mbit/s links into `plan_path`.
clirunner::Outcome plan_two_stages(const fs::path& plan_path) {
  return clirunner::run_adagrouper("plan --pipeline configs/fidelity/pipeline-2.json --network "
                                   "configs/fidelity/net-200mbit.json --output " + plan_path.string(),
                                   plan_path.parent_path());
}

// Replays the plan at `plan_path` on 2 ranks under mpirun, `iterations` measured and no
// warm-up, with `args` added; returns the output and sets `rc`.
std::string replay_two_stages(const fs::path& plan_path, int iterations, const std::string& args, int& rc) {
  return shell(fmt::format("cd '{}' && mpirun --oversubscribe --allow-run-as-root -np 2 " LOCAL_MPI_TCP " '{}' "
                           "replay --plan '{}' --iterations {} --warmup 0 --timeout 60 {} 2>&1",
                           SOURCE_ROOT, ADAGROUPER_CALIB_BIN, plan_path.string(), iterations, args),
               rc);
}

// Each (options, piece) of bad replay options: exit status 2 and the piece in the output.
void expect_replay_refused(const fs::path& plan_path,
                           const std::vector<std::pair<std::string, std::string>>& cases) {
  for (const auto& [args, piece] : cases) {
    int rc = 0;
    const std::string out = replay_two_stages(plan_path, 1, args, rc);
    EXPECT_EQ(rc, 2) << args << ": " << out;
    EXPECT_THAT(out, HasSubstr(piece)) << args;
  }
}

#endif

TEST(Replay, TwoStagePlanUnderMpirun) {
#ifndef ADAGROUPER_CALIB_BIN
  GTEST_SKIP() << "adagrouper-calib is not built (no MPI): the replay is not tested";
#else
  TempDir tmp;
  const auto plan_path = tmp.path() / "plan.json";
  auto r = plan_two_stages(plan_path);
  ASSERT_EQ(r.rc, 0) << r.err;
  const fs::path run = tmp.path() / "run.json", raw = tmp.path() / "raw.jsonl", tl = tmp.path() / "run.trace.json",
                 st = tmp.path() / "stages.csv", sim_out = tmp.path() / "sim.json";
  int rc = 0;
  const std::string out = shell(
      fmt::format("cd '{}' && mpirun --oversubscribe --allow-run-as-root -np 2 " LOCAL_MPI_TCP " '{}' replay "
                  "--backend cpu --plan '{}' --iterations 2 --warmup 1 --timeout 60 --output '{}' --raw '{}' "
                  "--timeline '{}' --stage-trace '{}' 2>&1",
                  SOURCE_ROOT, ADAGROUPER_CALIB_BIN, plan_path.string(), run.string(), raw.string(), tl.string(),
                  st.string()),
      rc);
  ASSERT_EQ(rc, 0) << out;
  const json plan = json::parse(clirunner::slurp(plan_path));
  const int M = plan["chosen"]["micro_batches"];

  // Every op of the program ran once per iteration, in the program's order, and the
  // sends and receives pair up.
  auto records = records_by_stage_iteration(raw);
  ASSERT_EQ(records.size(), 2u * 3u);  // 2 stages x (1 warm-up + 2 measured)
  expect_programs_ran(plan, records);
  if (testing::Test::HasFatalFailure()) return;
  expect_send_recv_pairs(records, M);
  if (testing::Test::HasFatalFailure()) return;

  // simulate of the plan's chosen schedule, two iterations, writing what `output` (an
  // option and its file) names.
  const auto simulate_chosen = [&](const std::string& output) {
    return clirunner::run_adagrouper(
        fmt::format("simulate --pipeline configs/fidelity/pipeline-2.json --network configs/fidelity/net-200mbit.json "
                    "--schedule {} {} --micro-batch-size {} --iterations 2 {}",
                    plan["chosen"]["schedule"].get<std::string>(),
                    plan["chosen"]["schedule"] == "kfkb" ? fmt::format("--k {}", plan["chosen"]["k"].get<int>()) : "",
                    plan["chosen"]["micro_batch_size"].get<int>(), output),
        tmp.path());
  };
  // The measured summary has the fields of simulate's, in the same order.
  r = simulate_chosen("--output " + sim_out.string());
  ASSERT_EQ(r.rc, 0) << r.err;
  const json measured = json::parse(clirunner::slurp(run)), predicted = json::parse(clirunner::slurp(sim_out));
  EXPECT_EQ(keys_of(measured), keys_of(predicted));
  EXPECT_EQ(measured["iterations"], 2);
  EXPECT_EQ(measured["compute_ops"], 2 * 2 * 2 * M);
  EXPECT_EQ(measured["transfers"], 2 * 2 * M);
  // The compute ops last at least their profile's durations (a busy op never ends early).
  // How much longer depends on the load of the machine running the suite (CI shares two
  // cores among both ranks), so the upper bound only catches gross errors such as an op
  // run twice; docs/fidelity.md has the accuracy measured on a quiet machine.
  for (int s = 0; s < 2; ++s) {
    const double busy = measured["per_stage"][s]["busy_s"].get<double>();
    const double want = predicted["per_stage"][s]["busy_s"].get<double>();
    EXPECT_GE(busy, 0.98 * want) << "stage " << s;
    EXPECT_LE(busy, 1.9 * want) << "stage " << s;
  }
  // compare reads both; the timeline and the stage trace are what simulate reads.
  r = clirunner::run_adagrouper(fmt::format("compare --predicted {} --measured {}", sim_out.string(), run.string()),
                                tmp.path());
  EXPECT_EQ(r.rc, 0) << r.err;
  EXPECT_TRUE(json::parse(clirunner::slurp(tl)).contains("traceEvents"));
  r = simulate_chosen("--stage-trace " + st.string());
  EXPECT_EQ(r.rc, 0) << r.err;

  // A plan for 2 stages under 3 ranks is one line of bad input, exit status 2.
  const std::string bad = shell(fmt::format("cd '{}' && mpirun --oversubscribe --allow-run-as-root -np 3 " LOCAL_MPI_TCP
                                            " '{}' replay --backend cpu --plan '{}' 2>&1",
                                            SOURCE_ROOT, ADAGROUPER_CALIB_BIN, plan_path.string()),
                                rc);
  EXPECT_NE(rc, 0);
  EXPECT_THAT(bad, HasSubstr("the plan has 2 stages, and this job runs 3 ranks"));
#endif
}

// --compute-fifo: a priority out of range or with the cuda backend is one line of bad
// input, exit status 2; a valid one runs the plan with the compute threads under
// SCHED_FIFO, or, where the system refuses it, stops with one line that says so.
TEST(Replay, ComputeFifoRunsOrIsRefusedInOneLine) {
#ifndef ADAGROUPER_CALIB_BIN
  GTEST_SKIP() << "adagrouper-calib is not built (no MPI): the replay is not tested";
#else
  TempDir tmp;
  const auto plan_path = tmp.path() / "plan.json";
  auto r = plan_two_stages(plan_path);
  ASSERT_EQ(r.rc, 0) << r.err;
  expect_replay_refused(
      plan_path,
      {{"--backend cpu --compute-fifo 100", "--compute-fifo: a SCHED_FIFO priority 1-99, or 0 for off, got 100"},
       {"--backend cpu --compute-fifo=-1", "--compute-fifo: a SCHED_FIFO priority 1-99, or 0 for off, got -1"},
       {"--backend cuda --compute-fifo 10", "--compute-fifo: the cpu backend's option"}});
  int rc = 0;
  const fs::path run = tmp.path() / "run.json";
  const std::string out =
      replay_two_stages(plan_path, 1, "--backend cpu --compute-fifo 10 --output '" + run.string() + "'", rc);
  if (rc != 0) {
    EXPECT_THAT(out, HasSubstr("--compute-fifo 10: SCHED_FIFO refused")) << out;
    EXPECT_FALSE(fs::exists(run));
    return;
  }
  EXPECT_THAT(out, HasSubstr("plan streams, compute thread SCHED_FIFO 10, 0 warm-up + 1 measured iterations"));
  const json measured = json::parse(clirunner::slurp(run));
  EXPECT_EQ(measured["iterations"], 1);
  EXPECT_GT(measured["per_stage"][0]["busy_s"].get<double>(), 0);
#endif
}

// --compute-spin and --mpi-poll: out of range or with the cuda backend is one line of
// bad input, exit status 2; a spin of 0 runs every compute op as a sleep to its end and
// a poll of 100 us tests each transfer that often, which the summary says, and no op
// ends before its profiled duration.
TEST(Replay, ComputeSpinAndMpiPollSetTheCpuThreadsWaits) {
#ifndef ADAGROUPER_CALIB_BIN
  GTEST_SKIP() << "adagrouper-calib is not built (no MPI): the replay is not tested";
#else
  TempDir tmp;
  const auto plan_path = tmp.path() / "plan.json";
  auto r = plan_two_stages(plan_path);
  ASSERT_EQ(r.rc, 0) << r.err;
  expect_replay_refused(plan_path,
                        {{"--backend cpu --compute-spin=-1", "--compute-spin: microseconds from 0 to 100000, got -1"},
                         {"--backend cpu --compute-spin 200000", "--compute-spin: microseconds from 0 to 100000, got 200000"},
                         {"--backend cuda --compute-spin 0", "--compute-spin: the cpu backend's option"},
                         {"--backend cpu --mpi-poll 0", "--mpi-poll: microseconds from 1 to 100000, got 0"},
                         {"--backend cuda --mpi-poll 50", "--mpi-poll: the cpu backend's option"}});
  int rc = 0;
  const fs::path st = tmp.path() / "stages.csv";
  const std::string out = replay_two_stages(
      plan_path, 2, "--backend cpu --compute-spin 0 --mpi-poll 100 --stage-trace '" + st.string() + "'", rc);
  ASSERT_EQ(rc, 0) << out;
  EXPECT_THAT(out, HasSubstr("plan streams, ops spin their last 0 us, MPI_Test every 100 us, 0 warm-up + 2 measured"));
  // The profile's durations at the chosen micro-batch size, per stage.
  const json plan = json::parse(clirunner::slurp(plan_path));
  const json pipeline = json::parse(clirunner::slurp(fs::path(SOURCE_ROOT) / "configs/fidelity/pipeline-2.json"));
  const int b = plan["chosen"]["micro_batch_size"];
  std::map<std::pair<int, std::string>, double> planned;
  for (int s = 0; s < 2; ++s)
    for (const auto& point : pipeline["stages"][s]["profile"])
      if (point["micro_batch_size"] == b) {
        planned[{s, "F"}] = point["forward_s"];
        planned[{s, "B"}] = point["backward_s"];
      }
  ASSERT_EQ(planned.size(), 4u);
  std::istringstream rows(clirunner::slurp(st));
  std::string line;
  std::getline(rows, line);  // header
  int ops = 0;
  while (std::getline(rows, line)) {
    std::vector<std::string> cell;
    std::istringstream fields(line);
    for (std::string c; std::getline(fields, c, ',');) cell.push_back(c);
    ASSERT_EQ(cell.size(), 5u) << line;
    const auto it = planned.find({std::stoi(cell[1]), cell[3]});
    ASSERT_NE(it, planned.end()) << line;
    EXPECT_GE(std::stod(cell[4]), it->second) << line;
    ++ops;
  }
  EXPECT_EQ(ops, 2 * 2 * 2 * plan["chosen"]["micro_batches"].get<int>());  // iterations x stages x (F, B)
#endif
}

// ZBV (V placement: two model stages per rank, local messages at the turn, I and W ops)
// and interleaved 1F1B with 2 virtual stages, replayed under mpirun: every op of the
// programs runs, the summary names the model stages, and compare pairs it with
// `simulate --plan` of the same candidate.
TEST(Replay, VirtualStagesAndSplitBackwardUnderMpirun) {
#ifndef ADAGROUPER_CALIB_BIN
  GTEST_SKIP() << "adagrouper-calib is not built (no MPI): the replay is not tested";
#else
  TempDir tmp;
  const auto plan_path = tmp.path() / "plan.json";
  auto r = clirunner::run_adagrouper(
      "plan --pipeline configs/fidelity/pipeline-4.json --network configs/fidelity/net-200mbit.json --devices 2 "
      "--families interleaved-1f1b,zbv --virtual-stages 2 --memory-limit 8e9 --output " + plan_path.string(),
      tmp.path());
  ASSERT_EQ(r.rc, 0) << r.err;
  const json plan = json::parse(clirunner::slurp(plan_path));
  for (const std::string family : {"zbv", "interleaved-1f1b"}) {
    SCOPED_TRACE(family);
    int pick = -1;
    for (std::size_t i = 0; i < plan["candidates"].size() && pick < 0; ++i)
      if (plan["candidates"][i]["schedule"] == family && plan["candidates"][i]["virtual_stages"] == 2)
        pick = static_cast<int>(i);
    ASSERT_GE(pick, 0);
    const fs::path run = tmp.path() / (family + ".json"), raw = tmp.path() / (family + ".jsonl"),
                   sim_out = tmp.path() / (family + "-sim.json");
    int rc = 0;
    const std::string out = shell(
        fmt::format("cd '{}' && mpirun --oversubscribe --allow-run-as-root -np 2 " LOCAL_MPI_TCP " '{}' replay "
                    "--backend cpu --plan '{}' --candidate {} --iterations 1 --warmup 0 --timeout 60 --output '{}' "
                    "--raw '{}' 2>&1",
                    SOURCE_ROOT, ADAGROUPER_CALIB_BIN, plan_path.string(), pick, run.string(), raw.string()),
        rc);
    ASSERT_EQ(rc, 0) << out;
    std::map<std::string, int> kinds;
    std::set<int> model_stages;
    std::istringstream lines(clirunner::slurp(raw));
    for (std::string line; std::getline(lines, line);) {
      const json j = json::parse(line);
      ++kinds[j["kind"].get<std::string>()];
      model_stages.insert(j["model_stage"].get<int>());
    }
    const int M = plan["candidates"][pick]["micro_batches"];
    EXPECT_EQ(model_stages, (std::set<int>{0, 1, 2, 3}));
    EXPECT_EQ(kinds["forward"], 4 * M);
    if (family == "zbv") {
      EXPECT_EQ(kinds["backward_input"] + kinds["backward"], 4 * M);
      EXPECT_EQ(kinds["backward_weight"], kinds["backward_input"]);
      EXPECT_GT(kinds["backward_weight"], 0);
      // V placement: of the 6 messages per micro-batch, the two at the turn (model stage 1
      // to 2 and back) are local; the other 4 cross stages, each a send and a recv.
      EXPECT_EQ(kinds["send"], 4 * M);
    } else {
      EXPECT_EQ(kinds["backward"], 4 * M);
      EXPECT_EQ(kinds["send"], 6 * M);  // loop placement: every message crosses
    }
    EXPECT_EQ(kinds["recv"], kinds["send"]);
    const json measured = json::parse(clirunner::slurp(run));
    EXPECT_EQ(measured["virtual_stages"], 2);
    EXPECT_EQ(measured["model_stages"], 4);
    r = clirunner::run_adagrouper(fmt::format("simulate --plan {} --candidate {} --iterations 1 --output {}",
                                              plan_path.string(), pick, sim_out.string()),
                                  tmp.path());
    ASSERT_EQ(r.rc, 0) << r.err;
    const json predicted = json::parse(clirunner::slurp(sim_out));
    EXPECT_EQ(measured["compute_ops"], predicted["compute_ops"]);
    EXPECT_EQ(measured["transfers"], predicted["transfers"]);
    r = clirunner::run_adagrouper(
        fmt::format("compare --predicted {} --measured {}", sim_out.string(), run.string()), tmp.path());
    EXPECT_EQ(r.rc, 0) << r.err;
    EXPECT_THAT(r.out, HasSubstr(family == "zbv" ? "zbv b=" : "interleaved-1f1b v=2 b="));
  }
#endif
}

// kFkB with dynamic W fill replayed with --w-fill runtime: the W ops run where the
// compute stream puts them as it goes. In the --raw lines (the programs' order) every op
// runs once per iteration; in the order the ops ran, they do not overlap, the other ops
// keep the program's order, each W runs after its I, and before each other op the stage
// holds fewer than P pending W ops (the rule's bound). Bad --w-fill uses are one line, exit 2.
TEST(Replay, RuntimeWFillPlacesTheWOpsAsTheRunGoes) {
#ifndef ADAGROUPER_CALIB_BIN
  GTEST_SKIP() << "adagrouper-calib is not built (no MPI): the replay is not tested";
#else
  TempDir tmp;
  const auto plan_path = tmp.path() / "plan.json";
  auto r = clirunner::run_adagrouper("plan --pipeline configs/fidelity/pipeline-2.json --network "
                                     "configs/fidelity/net-200mbit.json --families kfkb-dynamic --output " +
                                         plan_path.string(),
                                     tmp.path());
  ASSERT_EQ(r.rc, 0) << r.err;
  const json plan = json::parse(clirunner::slurp(plan_path));
  ASSERT_EQ(plan["chosen"]["w_fill"], "dynamic") << "the test needs a plan that chooses dynamic W fill";
  int unlimited = -1, fixed_order = -1;  // a dynamic candidate with P unlimited, a candidate without W ops
  for (std::size_t i = 0; i < plan["candidates"].size(); ++i) {
    const json& c = plan["candidates"][i];
    if (c["w_fill"] == "dynamic" && c["max_pending_w"].is_null() && unlimited < 0) unlimited = static_cast<int>(i);
    if (c["w_fill"] == "static" && fixed_order < 0) fixed_order = static_cast<int>(i);
  }
  ASSERT_GE(unlimited, 0);
  ASSERT_GE(fixed_order, 0);
  expect_replay_refused(plan_path,
                        {{"--backend cpu --w-fill sometimes", "--w-fill: must be recorded or runtime, got 'sometimes'"},
                         {"--backend cuda --w-fill runtime", "--w-fill runtime: the cpu backend's option"},
                         {fmt::format("--backend cpu --w-fill runtime --candidate {}", fixed_order),
                          "has its W ops in its schedule; a runtime fill replays a candidate with dynamic W fill"}});

  const int chosen_p = plan["chosen"]["max_pending_w"];
  for (const auto& [args, P] : {std::pair{std::string(), chosen_p},
                                std::pair{fmt::format("--candidate {}", unlimited), std::numeric_limits<int>::max()}}) {
    SCOPED_TRACE(args);
    const fs::path raw = tmp.path() / "raw.jsonl";
    int rc = 0;
    const std::string out = shell(
        fmt::format("cd '{}' && mpirun --oversubscribe --allow-run-as-root -np 2 " LOCAL_MPI_TCP " '{}' replay "
                    "--backend cpu --plan '{}' {} --w-fill runtime --iterations 2 --warmup 1 --timeout 60 --raw '{}' 2>&1",
                    SOURCE_ROOT, ADAGROUPER_CALIB_BIN, plan_path.string(), args, raw.string()),
        rc);
    ASSERT_EQ(rc, 0) << out;
    EXPECT_THAT(out, HasSubstr(P == chosen_p ? fmt::format("W fill at run time (P = {})", P)
                                             : std::string("W fill at run time (P = unlimited)")));
    const auto records = records_by_stage_iteration(raw);
    ASSERT_EQ(records.size(), 2u * 3u);
    for (const auto& [key, ops] : records) {
      SCOPED_TRACE(fmt::format("stage {} iteration {}", key.first, key.second));
      std::vector<json> compute;  // in the program's order
      for (const auto& j : ops)
        if (j["kind"] != "send" && j["kind"] != "recv") compute.push_back(j);
      std::map<std::string, std::map<int, json>> by_kind;  // kind -> micro-batch -> record
      for (const auto& j : compute) by_kind[j["kind"].get<std::string>()][j["micro_batch"].get<int>()] = j;
      const std::size_t M = by_kind["forward"].size();
      ASSERT_GT(M, 0u);
      EXPECT_EQ(by_kind["backward_input"].size(), M);
      EXPECT_EQ(by_kind["backward_weight"].size(), M);
      EXPECT_EQ(compute.size(), 3 * M);
      std::vector<std::size_t> ran(compute.size());
      for (std::size_t i = 0; i < ran.size(); ++i) ran[i] = i;
      std::stable_sort(ran.begin(), ran.end(), [&](std::size_t a, std::size_t b) {
        return compute[a]["start_s"].get<double>() < compute[b]["start_s"].get<double>();
      });
      std::size_t last_listed = 0;
      for (std::size_t n = 0; n < ran.size(); ++n) {
        const json& op = compute[ran[n]];
        const double start = op["start_s"];
        if (n > 0) {
          EXPECT_GE(start, compute[ran[n - 1]]["end_s"].get<double>() - 1e-6) << op.dump();
        }
        const int m = op["micro_batch"];
        if (op["kind"] == "backward_weight") {
          EXPECT_GE(start, by_kind["backward_input"][m]["end_s"].get<double>() - 1e-6) << op.dump();
          continue;
        }
        EXPECT_GE(ran[n], last_listed) << op.dump();
        last_listed = ran[n];
        int pending = 0;  // I ended, its W not started
        for (const auto& [mb, i_op] : by_kind["backward_input"])
          pending += i_op["end_s"].get<double>() <= start + 1e-9 &&
                     by_kind["backward_weight"][mb]["start_s"].get<double>() >= start - 1e-9;
        EXPECT_LT(pending, P) << op.dump();
      }
    }
  }
#endif
}

// 8 ranks on the few cores of a test machine: the records stay consistent (each rank's
// events are placed on the host clock by the origin event's own time, not by a clock
// read after a wake-up that differs between ranks), and rank 0 says up front that the
// ranks share cores.
TEST(Replay, EightRanksOnFewCoresStayConsistent) {
#ifndef ADAGROUPER_CALIB_BIN
  GTEST_SKIP() << "adagrouper-calib is not built (no MPI): the replay is not tested";
#else
  TempDir tmp;
  json pipe = json::parse(clirunner::slurp(fs::path(SOURCE_ROOT) / "configs/examples/toy-8.json"));
  for (auto& st : pipe["stages"]) {
    st["profile"][0]["forward_s"] = 0.002;
    st["profile"][0]["backward_s"] = 0.004;
    st["profile"][0]["output_bytes"] = 100000;
  }
  const auto pipe_path = tmp.write("pipe-8.json", pipe), plan_path = tmp.path() / "plan.json";
  auto r = clirunner::run_adagrouper(fmt::format("plan --pipeline {} --network configs/examples/toy-net-free.json "
                                                 "--output {}",
                                                 pipe_path.string(), plan_path.string()),
                                     tmp.path());
  ASSERT_EQ(r.rc, 0) << r.err;
  int rc = 0;
  const std::string out = shell(
      fmt::format("cd '{}' && mpirun --oversubscribe --allow-run-as-root -np 8 " LOCAL_MPI_TCP " '{}' replay "
                  "--backend cpu --plan '{}' --iterations 2 --warmup 1 --timeout 120 2>&1",
                  SOURCE_ROOT, ADAGROUPER_CALIB_BIN, plan_path.string()),
      rc);
  EXPECT_EQ(rc, 0) << out;
  EXPECT_THAT(out, ::testing::Not(HasSubstr("consistency problems")));
  if (std::thread::hardware_concurrency() < 8) {
    EXPECT_THAT(out, HasSubstr("8 ranks share"));
  }
#endif
}

// --- the testbed, reduced ----------------------------------------------------------

// tools/scripts/SCRIPT with bad options ARGS: refused in one line that says `piece`,
// with exit status 2.
void expect_refused(const std::string& script, const std::string& args, const std::string& piece) {
  int rc = 0;
  const std::string out = shell(fmt::format("cd '{}' && tools/scripts/{} {} 2>&1", SOURCE_ROOT, script, args), rc);
  EXPECT_EQ(rc, 2) << script << " " << args << "\n" << out;
  EXPECT_THAT(out, HasSubstr(piece)) << script << " " << args;
  EXPECT_EQ(std::count(out.begin(), out.end(), '\n'), 1) << script << " " << args << "\n" << out;
}

// The testbed's options are checked before anything is set up: a bad value is one line
// and exit status 2, also for the drawn scenarios, and so is an option without its value.
// --bucket fixed and lowest keep tbf's bucket constant, which means nothing for htb:
// refused with it (auto, the default, is per-rate there); the model's bucket is a
// constant number of bytes: refused with the per-rate bucket.
TEST(Testbed, BadOptionsAreStatus2) {
#ifndef ADAGROUPER_CALIB_BIN
  GTEST_SKIP() << "adagrouper-calib is not built (no MPI): the testbed is not tested";
#else
  for (const auto& [args, piece] : std::vector<std::pair<std::string, std::string>>{
           {"--random-scenarios x", "--random-scenarios: an integer >= 0"},
           {"--random-scenarios 2 --seed -1", "--seed: an integer >= 0"},
           {"--random-scenarios 2 --repeats 0", "--repeats: a positive integer"},
           {"--random-scenarios 2 --pipeline configs/fidelity/pipeline-2.json", "draws the pipeline and the trace"},
           {"--shaper foo", "--shaper: tbf or htb"},
           {"--rank-by fastest", "--rank-by: auto, predicted or deployed, got 'fastest'"},
           {"--w-fill sometimes", "--w-fill: recorded or runtime, got 'sometimes'"},
           {"--bucket foo", "--bucket: auto, per-rate, fixed or lowest"},
           {"--bucket fixed --shaper htb", "--bucket fixed: tbf only"},
           {"--bucket lowest --shaper htb", "--bucket lowest: tbf only"},
           {"--random-scenarios 2 --bucket x", "--bucket: auto, per-rate, fixed or lowest"},
           {"--bucket-ms 0", "--bucket-ms: auto, or milliseconds more than 0"},
           {"--bucket lowest --bucket-ms 1e3", "--bucket-ms: auto, or milliseconds more than 0"},
           {"--bucket-ms", "--bucket-ms: needs a value"},
           {"--packet-cap 1499", "--packet-cap: auto, or bytes from 1500 to 65536, got '1499'"},
           {"--packet-cap 9k", "--packet-cap: auto, or bytes from 1500 to 65536, got '9k'"},
           {"--latency-situ yes", "--latency-situ: auto, on or off, got 'yes'"},
           {"--calib-compute off --latency-situ on", "--latency-situ on: needs --calib-compute on"},
           // --latency-situ auto without the compute calibration is off: the next check speaks.
           {"--calib-compute off --calib-compute-iterations 0", "--calib-compute-iterations: an integer from 1 to 1000"},
           {"--model-bucket maybe", "--model-bucket: auto, on or off"},
           {"--bucket per-rate --model-bucket on", "--model-bucket on: needs a bucket that never changes"},
           {"--bucket fixed --calibrate p2p --model-bucket on", "--model-bucket on: needs a bucket that never changes"},
           {"--tcp 'a b'", "--tcp: a congestion control's name"},
           {"--tcp-idle-restart maybe", "--tcp-idle-restart: on, off or host"},
           {"--tcp-push lazy", "--tcp-push: eager or host, got 'lazy'"},
           {"--tiny-quantile 2", "--tiny-quantile: a number from 0 to 1, got '2'"},
           {"--calib-latency line", "--calib-latency: auto, fit or tiny"},
           {"--calib-compute yes", "--calib-compute: on or off"},
           {"--stall-fence 0", "--stall-fence: a number of interquartile ranges > 0, or inf, got '0'"},
           {"--op-spread some", "--op-spread: auto, or a number of draws from 0 to 1000, got 'some'"},
           {"--op-spread 1001", "--op-spread: auto, or a number of draws from 0 to 1000, got '1001'"},
           {"--calib-compute off --op-spread 4", "--op-spread 4: needs --calib-compute on"},
           {"--message-spread some", "--message-spread: on or off, got 'some'"},
           {"--op-spread 0 --message-spread on", "--message-spread on: needs the ops' spread"},
           {"--latency-situ off --message-spread on", "--message-spread on: needs the ops' spread (--op-spread N > 0) and --latency-situ on"},
           {"--calib-compute-iterations 0", "--calib-compute-iterations: an integer from 1 to 1000, got '0'"},
           {"--calib-compute-spread x", "--calib-compute-spread: auto, 0 or measured iterations up to 1000, got 'x'"},
           {"--calib-compute-spread 1001", "--calib-compute-spread: auto, 0 or measured iterations up to 1000, got '1001'"},
           {"--calib-compute off --calib-compute-spread 2", "--calib-compute-spread 2: needs --calib-compute on"},
           {"--stall-fence -1", "--stall-fence: a number of interquartile ranges > 0, or inf, got '-1'"},
           {"--compute-spin -5", "--compute-spin: microseconds, an integer from 0 to 100000"},
           {"--mpi-poll 0", "--mpi-poll: microseconds, an integer from 1 to 100000"},
           {"--bucket per-rate --calib-latency tiny", "--calib-latency tiny: needs the model's bucket"},
           // --bucket auto is per-rate with htb, whose bucket the model cannot hold.
           {"--shaper htb --calib-latency tiny", "--calib-latency tiny: needs the model's bucket"},
           {"--bucket fixed --model-bucket off --calib-latency tiny", "--calib-latency tiny: needs the model's bucket"},
           {"--priority fifo", "--priority: auto, rt, compute-rt, nice or none"},
           {"--queue deep", "--queue: auto, per-rate or fixed"},
           {"--random-scenarios 2 --queue 1e6", "--queue: auto, per-rate or fixed"},
           {"--seed", "--seed: needs a value"}})
    expect_refused("fidelity.sh", args, piece);
  // On 3 or 4 ranks each listed family's placement is checked (read from the build's
  // adagrouper): every named one runs on a chain or a ring of namespaces.
  const std::string build = fmt::format(" --build '{}'", BUILD_ROOT);
  for (const auto& [args, piece] : std::vector<std::pair<std::string, std::string>>{
           {"--families all --ranks 3", "--families all: on 3 ranks, list the families"},
           {"--families interleaved-1f1b --ranks 3 --calibrate p2p", "--calibrate p2p: not with a ring of namespaces"},
           {"--families zbv,nonsense --ranks 3", "--families: nonsense: adagrouper schedule: --schedule: unknown schedule"}})
    expect_refused("fidelity.sh", args + build, piece);
#endif
}

// The probe of what a rate change does to the shaper's bucket: bad options are one line
// and exit status 2; where namespaces can be made, a short run prints both throughputs
// and the bytes per change (their values depend on the machine's load: not checked).
TEST(Testbed, BucketProbe) {
#ifndef ADAGROUPER_CALIB_BIN
  GTEST_SKIP() << "adagrouper-calib is not built (no MPI): the testbed is not tested";
#else
  for (const auto& [args, piece] : std::vector<std::pair<std::string, std::string>>{
           {"--shaper foo", "--shaper: tbf or htb"},
           {"--rate 20", "--rate: tc's form"},
           {"--burst 0", "--burst: a positive whole number"},
           {"--period x", "--period: seconds"},
           {"--seconds", "--seconds: needs a value"},
           {"--gso 4k", "--gso: a positive whole number"},
           {"--bogus", "unknown option --bogus"}})
    expect_refused("tbf_refill.sh", args, piece);
  int rc = 0;
  const std::string out =
      shell(fmt::format("cd '{}' && tools/scripts/tbf_refill.sh --seconds 1 --period 0.2 2>&1", SOURCE_ROOT), rc);
  if (rc == 77) GTEST_SKIP() << out;
  ASSERT_EQ(rc, 0) << out;
  EXPECT_THAT(out, HasSubstr("tbf rate 20mbit, bucket 125000 bytes"));
  EXPECT_THAT(out, HasSubstr("left alone:"));
  // tbf refills its 125000-byte bucket at every change: 0.4 to 0.8 of it measured
  // (docs/fidelity.md); a run-to-run wobble is a few hundredths at this rate. Only the
  // changes made while bytes were counted divide the excess: counting those made while
  // the stream started too once gave 0.10 on a slow host.
  std::smatch m;
  ASSERT_TRUE(std::regex_search(out, m, std::regex(R"(per change: -?[0-9]+ bytes \((-?[0-9.]+) of the bucket\))"))) << out;
  EXPECT_GT(std::stod(m[1].str()), 0.25) << out;
#endif
}

// fidelity_resim.py re-simulates a run with one thing changed, against the same
// measurement: on a run whose measurement is its own simulation, no bucket changes
// nothing and a bucket of half a toy message makes every transfer faster; the measured
// op durations change nothing when they are the profile's, and a forward measured 3 s
// slower than its 1 s makes the prediction slower (a positive signed error); on a
// network with 0.5 s of latency, scaling it by 1 changes nothing and by 0 makes the
// prediction faster (a negative signed error).
TEST(Testbed, ResimulatesARunWithOneThingChanged) {
#ifndef ADAGROUPER_CALIB_BIN
  GTEST_SKIP() << "adagrouper-calib is not built (no MPI): the testbed is not tested";
#else
  for (const auto& [args, piece] : std::vector<std::pair<std::string, std::string>>{
           {"/tmp", "nothing to change"},
           {"--latency-scale -1 /tmp", "--latency-scale: must be >= 0"},
           {"--latency-scale x /tmp", "--latency-scale: a factor >= 0, got 'x'"},
           {"--refit --measured-compute /tmp", "--refit: needs --burst-bytes"},
           {"--burst-bytes x /tmp", "--burst-bytes: a number of bytes or auto"},
           {"--burst-bytes 1 --tiny-quantile 0.5 /tmp", "--tiny-quantile: only with --refit"},
           {"--burst-bytes 1 --refit --tiny-quantile 1.5 /tmp", "--tiny-quantile: a number from 0 to 1, got '1.5'"},
           {"--burst-bytes 1 --latency-quantile 0.5 /tmp", "--latency-quantile: only with --refit"},
           {"--burst-bytes 1 --refit --latency-quantile -1 /tmp", "--latency-quantile: must be >= 0"},
           {"--stall-fence 0 /tmp", "--stall-fence: a number of interquartile ranges > 0, or inf, got '0'"},
           {"--latency-situ x /tmp", "--latency-situ: on or off, got 'x'"},
           {"--op-spread x /tmp", "--op-spread: a number of draws from 1 to 1000, got 'x'"},
           {"--op-spread 2 --measured-compute /tmp", "--op-spread: not with --measured-compute"},
           {"--message-spread yes /tmp", "--message-spread: on or off, got 'yes'"},
           {"--message-spread on --op-spread 0 /tmp", "--message-spread on: needs the ops' spread"},
           {"--pooled maybe /tmp", "--pooled: on or off, got 'maybe'"},
           {"--burst-bytes 1 /nonexistent-dir", "not a directory"}})
    expect_refused("fidelity_resim.py", args, piece);
  testutil::TempDir dir;
  const std::string same = R"(0\.00 \( *[+-]0\.00\) +0\.00 \( *[+-]0\.00\))";
  // {network latency (s), SLOW_F, options, expected line}
  const std::vector<std::array<std::string, 4>> cases{
      {"0", "1", "--burst-bytes 0", "kfkb k=3 b=1 +0 +" + same},
      {"0", "1", "--burst-bytes 0.25", R"(kfkb k=3 b=1 +0\.25 +0\.00 \( *[+-]0\.00\) +[1-9][0-9]*\.[0-9]+ \( *-[0-9.]+\))"},
      {"0", "1", "--measured-compute", "kfkb k=3 b=1 +0 +" + same},
      {"0", "4", "--measured-compute", R"(kfkb k=3 b=1 +0 +0\.00 \( *[+-]0\.00\) +[1-9][0-9]*\.[0-9]+ \( *\+[0-9.]+\))"},
      {"0.5", "1", "--latency-scale 1", "kfkb k=3 b=1 +0 +" + same},
      // Without its latency the prediction is faster than the measurement: a negative signed error.
      {"0.5", "1", "--latency-scale 0", R"(kfkb k=3 b=1 +0 +0\.00 \( *[+-]0\.00\) +[1-9][0-9]*\.[0-9]+ \( *-[0-9.]+\))"}};
  for (std::size_t c = 0; c < cases.size(); ++c) {
    const auto& [latency, slow_f, args, expected] = cases[c];
    int rc = 0;
    const std::string out = shell(fmt::format("NET_LATENCY={} '{}/tests/fidelity/resim_fixture.sh' '{}' '{}/adagrouper' "
                                              "'{}/c{}' {} {} 2>&1",
                                              latency, SOURCE_ROOT, SOURCE_ROOT, BUILD_ROOT, dir.path().string(), c,
                                              slow_f, args),
                                  rc);
    ASSERT_EQ(rc, 0) << out;
    EXPECT_THAT(out, ContainsRegex(expected)) << args << "\n" << out;
  }
  // A run directory without pipeline.json (as a shipped scenario's) takes the pipeline
  // its plan names, and refuses it once that file has changed.
  const fs::path moved = dir.path() / "moved" / "run";
  fs::create_directories(moved.parent_path());
  fs::copy(dir.path() / "c0" / "run", moved, fs::copy_options::recursive);
  fs::remove(moved / "pipeline.json");
  const std::string resim =
      fmt::format("--adagrouper '{}/adagrouper' --measured-compute '{}'", BUILD_ROOT, moved.parent_path().string());
  int rc = 0;
  const std::string out =
      shell(fmt::format("cd '{}' && tools/scripts/fidelity_resim.py {} 2>&1", SOURCE_ROOT, resim), rc);
  ASSERT_EQ(rc, 0) << out;
  EXPECT_THAT(out, ContainsRegex("kfkb k=3 b=1 +0 +" + same)) << out;
  // A run without a compute calibration has no ops to calibrate again.
  expect_refused("fidelity_resim.py",
                 fmt::format("--adagrouper '{}/adagrouper' --stall-fence 3 '{}'", BUILD_ROOT, moved.parent_path().string()),
                 "--stall-fence: no calib/run-compute.trace.json and compute.json in it or above it");
  expect_refused("fidelity_resim.py",
                 fmt::format("--adagrouper '{}/adagrouper' --op-spread 2 '{}'", BUILD_ROOT, moved.parent_path().string()),
                 "--op-spread: no calib/run-compute.trace.json and compute.json in it or above it");
  // With a compute calibration whose ops cost nothing beyond their profile (the run's own
  // prediction), drawing each op's cost changes nothing.
  const std::string spread = shell(fmt::format("COMPUTE_CALIBRATION=1 '{}/tests/fidelity/resim_fixture.sh' '{}' "
                                               "'{}/adagrouper' '{}/spread' 1 --op-spread 3 2>&1",
                                               SOURCE_ROOT, SOURCE_ROOT, BUILD_ROOT, dir.path().string()),
                                   rc);
  ASSERT_EQ(rc, 0) << spread;
  EXPECT_THAT(spread, ContainsRegex("kfkb k=3 b=1 +0 +" + same)) << spread;
  std::ofstream(dir.path() / "c0" / "run" / "pipeline.json", std::ios::app) << "\n";
  expect_refused("fidelity_resim.py", resim, "has changed since the plan was made");
  // A run whose prediction read a calibrated pipeline (fidelity.sh --calib-compute on)
  // is re-simulated on it, not on the profile beside it: with every forward 1 s longer
  // there, the re-simulation with nothing else changed is slower than the measurement.
  const fs::path calibrated = dir.path() / "calibrated" / "run";
  fs::create_directories(calibrated.parent_path());
  fs::copy(dir.path() / "c1" / "run", calibrated, fs::copy_options::recursive);
  const std::string slower = shell(
      fmt::format("python3 -c 'import json, sys\np = json.load(open(sys.argv[1]))\nfor st in p[\"stages\"]:\n"
                  "    for x in st[\"profile\"]: x[\"forward_s\"] += 1\njson.dump(p, open(sys.argv[2], \"w\"))' "
                  "'{}' '{}' 2>&1",
                  (calibrated / "pipeline.json").string(), (calibrated / "pipeline-sim.json").string()),
      rc);
  ASSERT_EQ(rc, 0) << slower;
  const std::string resim_calibrated = shell(
      fmt::format("cd '{}' && tools/scripts/fidelity_resim.py --adagrouper '{}/adagrouper' --latency-scale 1 '{}' 2>&1",
                  SOURCE_ROOT, BUILD_ROOT, calibrated.parent_path().string()),
      rc);
  ASSERT_EQ(rc, 0) << resim_calibrated;
  EXPECT_THAT(resim_calibrated,
              ContainsRegex(R"(kfkb k=3 b=1 +0 +0\.00 \( *[+-]0\.00\) +[1-9][0-9]*\.[0-9]+ \( *\+[0-9.]+\))"))
      << resim_calibrated;
#endif
}

// The ops' spread (fidelity_spread.py): each op lasts its predicted duration plus a cost
// drawn from the calibration's, less their mean. With costs of 0, 0.2 and 0.4 s a forward
// of 1 s lasts 0.8, 1.0 or 1.2 s, 1.0 s on average over 2,000 of them, and a backward of
// 2 s 1.8, 2.0 or 2.2 s; the same seed draws the same. The calibration's costs are its
// ops' start latency plus their run past the profile, without the stalls the fence
// leaves out; the averaged prediction's iteration times are the draws' means. Bad
// arguments are one line and exit status 2.
TEST(Testbed, OpSpreadDrawsEachOpsCostAroundTheMean) {
  int rc = 0;
  const std::string out = python_in_scripts(
      "import fidelity_spread as s, json, math, os, random, tempfile\n"
      "ops = [(0, 0, m, \"F\", 1.0) for m in range(2000)] + [(0, 1, 0, \"B\", 2.0)]\n"
      "rows = s.drawn(ops, [0.0, 0.2, 0.4], random.Random(\"s\"))\n"
      "f = [x[4] for x in rows[:-1]]\n"
      "print(sorted({round(x, 9) for x in f}), abs(sum(f) / len(f) - 1.0) < 0.02, round(rows[-1][4], 9) in (1.8, 2.0, 2.2))\n"
      "print(rows == s.drawn(ops, [0.0, 0.2, 0.4], random.Random(\"s\")), rows[0][:4], rows[-1][:4])\n"
      + timeline_events_py() +
      // Two stages of 1F1B at b = 1 (forward 4 ms, backward 8 ms): stage 0's F0 waits for
      // nothing it can be timed by; F1 is ready at F0's end and costs 50 us more than its
      // 4 ms, B0 ready at its input's arrival and 9 ms long (1 ms more); on stage 1 F0 is
      // ready at its input and costs 20 us.
      "ev = [op(1, \"F0\", 0, 4000, 0), op(1, \"F1\", 4000, 4050, 1), recv(1, \"B0 1->0\", 9000, 100, 0),\n"
      "      op(1, \"B0\", 9100, 9000, 0), recv(2, \"F0 0->1\", 4000, 100, 0), op(2, \"F0\", 4100, 4020, 0)]\n"
      "d = tempfile.mkdtemp()\n"
      "json.dump({\"traceEvents\": ev}, open(os.path.join(d, \"t.json\"), \"w\"))\n"
      "p = {\"global_batch_size\": 2, \"stages\": [{\"static_bytes\": 0, \"optimizer_s\": 0, \"profile\": "
      "[{\"micro_batch_size\": 1, \"forward_s\": 0.004, \"backward_s\": 0.008, \"activation_bytes\": 1, "
      "\"output_bytes\": 1}]}] * 2}\n"
      "json.dump(p, open(os.path.join(d, \"p.json\"), \"w\"))\n"
      "print([round(c * 1e6, 3) for c in sorted(s.calibration_costs(os.path.join(d, \"t.json\"), os.path.join(d, \"p.json\"), 1))])\n"
      "r = s.averaged([{\"global_batch_size\": 4, \"iteration_times_s\": [1.0, 3.0]}, {\"global_batch_size\": 4, "
      "\"iteration_times_s\": [2.0, 5.0]}])\n"
      "print(r[\"iteration_times_s\"], r[\"total_time_s\"], r[\"mean_iteration_time_s\"], r[\"throughput_samples_per_s\"])",
      rc);
  ASSERT_EQ(rc, 0) << out;
  EXPECT_EQ(out,
            "[0.8, 1.0, 1.2] True True\nTrue (0, 0, 0, 'F') (0, 1, 0, 'B')\n[20.0, 50.0, 1000.0]\n"
            "[1.5, 4.0] 5.5 2.75 1.4545454545454546\n");
  for (const auto& [args, piece] : std::vector<std::pair<std::string, std::string>>{
           {"", "usage: fidelity_spread.py costs"},
           {"costs t.json p.json 1", "usage: fidelity_spread.py costs"},
           {"costs t.json p.json 1 out.json --stall-fence 0", "--stall-fence: a number of interquartile ranges > 0"},
           {"predict c.json t.json 0 1 out.json -- adagrouper simulate", "DRAWS: a number of draws from 1 to 1000, got '0'"},
           {"predict c.json t.json 2 1 out.json adagrouper simulate", "usage: fidelity_spread.py costs"},
           {"predict /nonexistent.json t.json 2 1 out.json -- adagrouper simulate",
            "/nonexistent.json: costs_s: a non-empty list of seconds expected"}})
    expect_refused("fidelity_spread.py", args, piece);
}

// The messages' spread: each message of a prediction's timeline (named by its sender's
// model stage, micro-batch and direction) gets its channel's latency plus a lag drawn
// from the calibration's less their mean, at least 0; the draws are seeded. Through
// adagrouper: on the worked example's free network (latency 0), lags of 0 and 1 s
// give every message 0 or 0.5 s, between the 33 s of none and the 41 s of all; without
// them the prediction is the point one. Bad arguments are one line and exit status 2.
TEST(Testbed, MessageSpreadDrawsEachMessagesLatencyAroundItsChannels) {
  int rc = 0;
  const std::string out = python_in_scripts(fmt::format(
      "import fidelity_spread as s, json, os, random, subprocess, tempfile\n"
      "msgs = [(0, 0, m, \"F\", 0, 1) for m in range(2000)] + [(1, 3, 0, \"B\", 1, 0)]\n"
      "lat = ({{(0, 1): 1e-3}}, 5e-4)\n"
      "rows = s.drawn_latencies(msgs, lat, [0.0, 2e-4, 4e-4], random.Random(\"m\"))\n"
      "f = [x[4] for x in rows[:-1]]\n"
      "print(sorted({{round(x * 1e6, 6) for x in f}}), abs(sum(f) / len(f) - 1e-3) < 2e-5, round(rows[-1][4] * 1e6, 6) in (300.0, 500.0, 700.0))\n"
      "print(rows == s.drawn_latencies(msgs, lat, [0.0, 2e-4, 4e-4], random.Random(\"m\")), rows[-1][:4])\n"
      "print(sorted({{x[4] for x in s.drawn_latencies(msgs[:50], lat, [0.0, 3e-3], random.Random(\"m\"))}}))\n"
      "d = tempfile.mkdtemp()\n"
      "json.dump({{\"latency_s\": 5e-4, \"channels\": [{{\"from\": 0, \"to\": 1, \"latency_s\": 1e-3}}, {{\"from\": 1, \"to\": 0}}]}}, open(d + \"/n.json\", \"w\"))\n"
      "print(s.channel_latencies(d + \"/n.json\"))\n"
      "ev = [{{\"ph\": \"X\", \"cat\": \"transfer\", \"name\": n, \"flow_out\": True, \"pid\": 1, \"ts\": 0, \"dur\": 1, \"args\": {{\"iteration\": 2}}}}\n"
      "      for n in (\"F5 0->1\", \"3B2 1->0\")] + [{{\"ph\": \"X\", \"cat\": \"transfer\", \"name\": \"F5 0->1\", \"flow_in\": True, \"pid\": 2, \"ts\": 0, \"dur\": 1, \"args\": {{\"iteration\": 2}}}}]\n"
      "json.dump({{\"traceEvents\": ev}}, open(d + \"/t.json\", \"w\"))\n"
      "print(s.predicted_messages(d + \"/t.json\"))\n"
      "sim = [\"{0}/adagrouper\", \"simulate\", \"--pipeline\", \"{1}/configs/examples/toy-4.json\", \"--network\",\n"
      "       \"{1}/configs/examples/toy-net-free.json\", \"--schedule\", \"1f1b\", \"-b\", \"1\", \"-n\", \"2\"]\n"
      "subprocess.run(sim + [\"--output\", d + \"/p.json\", \"--timeline\", d + \"/p.trace.json\"], check=True, stdout=subprocess.DEVNULL)\n"
      "json.dump({{\"situ_latency_s\": 0.5, \"lags_s\": [0.0, 1.0]}}, open(d + \"/situ.json\", \"w\"))\n"
      "json.dump({{\"costs_s\": [0.0]}}, open(d + \"/c.json\", \"w\"))\n"
      "tl = d + \"/p.trace.json\"\n"
      "msg = (s.predicted_messages(tl), s.channel_latencies(s.network_of(sim)), s.read_lags(d + \"/situ.json\"))\n"
      "print(len(msg[0]))\n"
      "times = []\n"
      "for name, m in ((\"p1\", msg), (\"p2\", msg), (\"p3\", None)):\n"
      "    s.predict(sim, s.predicted_ops(tl), [0.0], 4, 7, d + \"/\" + name + \".json\", m)\n"
      "    times.append(json.load(open(d + \"/\" + name + \".json\"))[\"iteration_times_s\"])\n"
      "print(times[0] == times[1], all(33 < t < 41 for t in times[0]), times[0][0] != times[0][1], times[2])\n"
      "r = subprocess.run([\"./fidelity_spread.py\", \"predict\", d + \"/c.json\", tl, \"2\", \"7\", d + \"/e.json\", \"--messages\", d + \"/situ.json\", \"--\"] + sim, capture_output=True, text=True)\n"
      "print(r.returncode, r.stderr.strip(), len(json.load(open(d + \"/e.json\"))[\"iteration_times_s\"]))",
      BUILD_ROOT, SOURCE_ROOT), rc);
  ASSERT_EQ(rc, 0) << out;
  EXPECT_EQ(out,
            "[800.0, 1000.0, 1200.0] True True\nTrue (1, 3, 0, 'B')\n[0.0, 0.0025]\n"
            "({(0, 1): 0.001, (1, 0): 0.0005}, 0.0005)\n[(2, 0, 5, 'F', 0, 1), (2, 3, 2, 'B', 1, 0)]\n96\n"
            "True True True [33.0, 33.0]\n0  2\n");
  for (const auto& [args, piece] : std::vector<std::pair<std::string, std::string>>{
           {"predict c.json t.json 2 1 out.json --lags x.json -- adagrouper simulate", "usage: fidelity_spread.py costs"},
           {"predict c.json t.json 2 1 out.json --messages -- adagrouper simulate", "usage: fidelity_spread.py costs"}})
    expect_refused("fidelity_spread.py", args, piece);
}

// The calibration's fit: on a link of 1 MB/s with 200 us of latency whose 20 kB bucket
// gives every message a head start, the two sizes' times give the rate and the latency
// back when the fit knows the bucket, and a faster rate (the latency clamped at 0)
// when it does not; messages within the bucket that took 100 us give that latency, and
// the rate that goes with it through the large messages. The network it writes carries the bucket; bad arguments are one
// line and exit status 2.
TEST(Testbed, CalibrationFitsTheBucketsHeadStart) {
  int rc = 0;
  const std::string out = python_in_scripts(
      "import fidelity_calib as f, json, os, tempfile\n"
      "a, b = (1e5, 0.0002 + 0.08), (4e5, 0.0002 + 0.38)\n"
      "print(\"%.6g %.6g\" % f.fit_channel(a, b, 2e4))\n"
      "print(\"%.6g %.6g\" % f.fit_channel(a, b))\n"
      "print(\"%.6g %.6g\" % f.fit_channel(a, b, 2e4, (1e4, 0.0001)))\n"
      "d = tempfile.mkdtemp()\n"
      "json.dump({\"levels\": [{\"nominal_bytes_per_s\": 1e6, \"channels\": [{\"from\": 0, \"to\": 1, "
      "\"latency_s\": 0.0002, \"efficiency\": 0.9}]}]}, open(d + \"/c.json\", \"w\"))\n"
      "f.network(d + \"/c.json\", 1e6, d + \"/n.json\", \"constant\", bucket=2e4)\n"
      "n = json.load(open(d + \"/n.json\"))\n"
      "print(n[\"burst_bytes\"], n[\"channels\"][0][\"rate\"], n[\"channels\"][0][\"latency_s\"])",
      rc);
  ASSERT_EQ(rc, 0) << out;
  EXPECT_EQ(out, "0.0002 1e+06\n0 1.05208e+06\n0.0001 999737\n20000.0 {'constant': 900000.0} 0.0002\n");
  for (const auto& [args, piece] : std::vector<std::pair<std::string, std::string>>{
           {"", "usage: fidelity_calib.py fit"},
           {"fit /tmp small x", "fit: LEVEL: a number, got 'x'"},
           {"fit /tmp 'small huge' 1e6", "SIZES is 'small large' or one of them, with tiny or not"},
           {"fit /tmp 'large large' 1e6", "SIZES is 'small large' or one of them, with tiny or not"},
           {"fit /tmp 'small large tiny' 1e6", "SIZES tiny: needs --bucket-bytes B > 0"},
           {"fit /tmp small 1e6 --bucket-bytes -1", "--bucket-bytes: must be >= 0"},
           {"fit /tmp small 1e6 --tiny-quantile 1.1", "--tiny-quantile: a number from 0 to 1, got '1.1'"},
           {"network c.json 1e6 n.json trace", "KIND is constant, or trace followed by RATES_CSV"}})
    expect_refused("fidelity_calib.py", args, piece);
}

// The rate behind a bucket, message by message: on a link of 1 MB/s with 100 us of
// latency and a 20 kB bucket, four 100 kB messages, the first on an idle link (a full
// bucket), the second sent as the first ended (the 100 bytes of its latency), the third
// 5 ms later (5,100 bytes), the fourth 30 ms later (full again), each taking what the
// model gives it: the fit gives 1 MB/s back, where a bucket assumed full at every message
// gives 7.9% less (the median of the four). Through `fit`, with the replays written as
// timelines (large messages, and tiny ones of 100 us): the same rate and the latency on
// both channels. The re-simulation's refit finds those replays (and not the ops'
// calibration beside them) above a run directory, and closes a ring's link.
TEST(Testbed, CalibrationGivesEachMessageTheHeadStartItsBucketHad) {
  int rc = 0;
  const std::string out = python_in_scripts(
      "import fidelity_calib as f, json, os, tempfile\n"
      "L, R, B, x = 1e-4, 1e6, 2e4, 1e5\n"
      "msgs, t = [], 0.0\n"
      "for gap, tokens in ((None, B), (0.0, 100.0), (0.005, 5100.0), (0.03, B)):\n"
      "    t = t if gap is None else msgs[-1][1] + msgs[-1][2] + gap\n"
      "    msgs.append((x, t, L + (x - tokens) / R))\n"
      "print(\"%.9g\" % f.bucket_rate(msgs, B, L))\n"
      "full = sorted((x - B) / (d - L) for _, _, d in msgs)\n"
      "print(\"%.4f\" % ((full[1] + full[2]) / 2 / R))\n"
      "d = tempfile.mkdtemp()\n"
      "c = os.path.join(d, \"calib\")\n"
      "os.makedirs(os.path.join(d, \"run\", \"preempted\"))\n"
      "os.makedirs(c)\n"
      "def timeline(name, ms):\n"
      "    ev = [{\"cat\": \"transfer\", \"ph\": \"X\", \"flow_out\": True, \"name\": \"F%d %s\" % (i, ch),\n"
      "           \"ts\": s * 1e6, \"dur\": du * 1e6, \"args\": {\"bytes\": b}}\n"
      "          for ch in (\"0->1\", \"1->0\") for i, (b, s, du) in enumerate(ms)]\n"
      "    json.dump({\"traceEvents\": ev}, open(os.path.join(c, name), \"w\"))\n"
      "timeline(\"run-1000000-large.trace.json\", msgs)\n"
      "timeline(\"run-1000000-tiny.trace.json\", [(1e4, 0.01 * i, L) for i in range(5)])\n"
      "timeline(\"run-compute.trace.json\", [])\n"
      "cal = f.fit(c, [\"large\", \"tiny\"], [\"1000000\"], B)\n"
      "for ch in cal[\"levels\"][0][\"channels\"]:\n"
      "    print(ch[\"from\"], ch[\"to\"], \"%.9g %.9g\" % (ch[\"rate\"], ch[\"latency_s\"]))\n"
      // Tiny messages of L and 3 L: the rate is fitted with their 10th percentile (L), and
      // the model's latency is their latency_quantile (the median: 3 L) where given.
      "timeline(\"run-1000000-tiny.trace.json\", [(1e4, 0.01 * i, L if i == 0 else 3 * L) for i in range(5)])\n"
      "for q in (None, 0.5):\n"
      "    cal = f.fit(c, [\"large\", \"tiny\"], [\"1000000\"], B, 0.1, q)\n"
      "    ch = cal[\"levels\"][0][\"channels\"][0]\n"
      "    print(q, cal.get(\"latency_quantile\"), \"%.9g %.9g\" % (ch[\"rate\"], ch[\"latency_s\"]))\n"
      "timeline(\"run-1000000-tiny.trace.json\", [(1e4, 0.01 * i, L) for i in range(5)])\n"
      "import fidelity_resim as r\n"
      "_, sizes, levels = r.calib_dir(os.path.join(d, \"run\", \"preempted\"))\n"
      "print(sizes, levels)\n"
      // On a ring the refit closes the ring's link as the run's own fit did.
      "json.dump({\"ring\": 3}, open(os.path.join(d, \"calibration.json\"), \"w\"))\n"
      "p, top = r.refit(os.path.join(d, \"run\", \"preempted\"), B)\n"
      "print(top, [(c[\"from\"], c[\"to\"], c[\"samples\"]) for c in json.load(open(p))[\"levels\"][0][\"channels\"]])",
      rc);
  ASSERT_EQ(rc, 0) << out;
  EXPECT_EQ(out,
            "1000000\n0.9215\n0 1 1000000 0.0001\n1 0 1000000 0.0001\n"
            "None None 1000000 0.0001\n0.5 0.5 1000000 0.0003\n['large', 'tiny'] ['1000000']\n"
            "1000000.0 [(0, 1, 9), (1, 0, 9), (2, 0, 0), (0, 2, 0)]\n");
}

// The tiny messages' latency is the 10th percentile of their times by default: of eleven
// messages (0.10 to 1.00 ms and one of 0.15, in no order) the second quickest; at the
// median (fit --tiny-quantile 0.5, fidelity.sh --tiny-quantile) the sixth.
TEST(Testbed, CalibrationTakesTheLatencyFromTheQuickTinyMessages) {
  int rc = 0;
  const std::string out = python_in_scripts(
      "import fidelity_calib as f, json, os, tempfile\n"
      "ms = [0.5, 0.1, 0.3, 0.2, 0.9, 0.4, 0.6, 0.7, 0.8, 1.0, 0.15]\n"
      "ev = [{\"cat\": \"transfer\", \"ph\": \"X\", \"flow_out\": True, \"name\": \"F%d 0->1\" % i,\n"
      "       \"ts\": 1e4 * i, \"dur\": 1e3 * m, \"args\": {\"bytes\": 1e4}} for i, m in enumerate(ms)]\n"
      "p = os.path.join(tempfile.mkdtemp(), \"run-1-tiny.trace.json\")\n"
      "json.dump({\"traceEvents\": ev}, open(p, \"w\"))\n"
      "print(f.TINY_QUANTILE, {k: (b, round(t * 1e3, 6), n) for k, (b, t, n) in f.quantiles(p, f.TINY_QUANTILE).items()})\n"
      "print({k: round(t * 1e3, 6) for k, (b, t, n) in f.quantiles(p, 0.5).items()})",
      rc);
  ASSERT_EQ(rc, 0) << out;
  EXPECT_EQ(out, "0.1 {(0, 1): (10000.0, 0.15, 11)}\n{(0, 1): 0.5}\n");
}

// A ring of namespaces: the calibration's 1F1B replays never use its link N-1, so the
// fit gives both its channels, at every level, the mean rate and latency of the
// channels it measured (marked by 0 samples), and the network then lists them.
TEST(Testbed, FitClosesARingWithTheChainsMean) {
  int rc = 0;
  const std::string out = python_in_scripts(
      "import fidelity_calib as f, json, os, tempfile\n"
      "ch = lambda a, b, r, l: {\"from\": a, \"to\": b, \"latency_s\": l, \"rate\": r, \"efficiency\": r / 40, "
      "\"samples\": 5}\n"
      "doc = f.close_ring({\"levels\": [{\"nominal_bytes_per_s\": 40, \"channels\": [ch(0, 1, 30, 1e-4), "
      "ch(1, 2, 34, 3e-4), ch(1, 0, 32, 2e-4), ch(2, 1, 36, 2e-4)]}]}, 3)\n"
      "print(doc[\"ring\"], [(c[\"from\"], c[\"to\"], c[\"rate\"], round(c[\"latency_s\"], 9), c[\"efficiency\"], "
      "c[\"samples\"]) for c in doc[\"levels\"][0][\"channels\"][4:]])\n"
      "d = tempfile.mkdtemp()\n"
      "json.dump(doc, open(d + \"/cal.json\", \"w\"))\n"
      "f.network(d + \"/cal.json\", 40, d + \"/net.json\", \"constant\")\n"
      "print([(c[\"from\"], c[\"to\"], c[\"rate\"]) for c in json.load(open(d + \"/net.json\"))[\"channels\"][4:]])",
      rc);
  ASSERT_EQ(rc, 0) << out;
  EXPECT_EQ(out, "3 [(2, 0, 33.0, 0.0002, 0.825, 0), (0, 2, 33.0, 0.0002, 0.825, 0)]\n"
                 "[(2, 0, {'constant': 33.0}), (0, 2, {'constant': 33.0})]\n");
  const std::string bad = python_in_scripts("import fidelity_calib as f; f.main([\"fit\", \"d\", \"small\", \"1\", "
                                            "\"--ring\", \"2\"])",
                                            rc);
  EXPECT_EQ(rc, 2) << bad;
  EXPECT_THAT(bad, HasSubstr("--ring: needs N, the ranks of the ring (at least 3)"));
}

// The compute calibration: on a 2-stage pipeline replayed at b = 2 (its profile measured
// at b = 1 and 4, so the nominal durations interpolate: F 7 ms, B 14 ms), stage 0's second
// forward starts 20 us after its first ends and runs 10 us long (30 us of overhead), its
// backward starts when its input arrives and runs to the profile (0: the stage's mean is
// 15 us); stage 1's forward starts 40 us after its input arrives and runs to the profile
// (40 us). Each stage's mean becomes its op_overhead_s, and its share of the stage's
// forward is reported (a warning above 5%: the host is short of CPU); bad arguments are
// one line.
TEST(Testbed, ComputeCalibrationAddsEachStagesOpOverhead) {
  int rc = 0;
  const std::string out = python_in_scripts(
      "import fidelity_calib as f, json, tempfile\n" +
      timeline_events_py() +
      "ev = [op(1, \"F0\", 0, 7000, 0), op(1, \"F1\", 7020, 7010, 1), recv(2, \"F0 0->1\", 7000, 500, 0), "
      "op(2, \"F0\", 7540, 7000, 0), recv(1, \"B0 1->0\", 15000, 1000, 0), op(1, \"B0\", 16000, 14000, 0)]\n"
      "d = tempfile.mkdtemp()\n"
      "json.dump({\"traceEvents\": ev}, open(d + \"/t.json\", \"w\"))\n"
      "pt = lambda b, fw, bw: {\"micro_batch_size\": b, \"forward_s\": fw, \"backward_s\": bw, \"activation_bytes\": 0}\n"
      "st = {\"profile\": [pt(1, 0.004, 0.008), pt(4, 0.013, 0.026)]}\n"
      "json.dump({\"name\": \"p\", \"global_batch_size\": 4, \"stages\": [st, dict(st)]}, open(d + \"/p.json\", \"w\"))\n"
      "m = f.compute(d + \"/t.json\", d + \"/p.json\", 2, d + \"/out.json\")\n"
      "print([(r[\"ops\"], round(r[\"op_overhead_s\"] * 1e6, 6), round(r[\"overhead_share\"], 9)) for r in m[\"stages\"]], "
      "round(m[\"mean_op_overhead_s\"] * 1e6, 6), repr(f.host_warning(m)))\n"
      "m[\"stages\"][1][\"op_overhead_s\"], m[\"stages\"][1][\"overhead_share\"] = 4e-4, 4e-4 / 0.007\n"
      "print(f.host_warning(m))\n"
      "p = json.load(open(d + \"/out.json\"))\n"
      "for s in p[\"stages\"]: print(round(s[\"op_overhead_s\"] * 1e6, 6), [[round(x[k] * 1e6, 6) for k in "
      "(\"forward_s\", \"backward_s\")] for x in s[\"profile\"]])\n"
      "json.dump({\"name\": \"p\", \"global_batch_size\": 4, \"stages\": [st] * 4}, open(d + \"/p4.json\", \"w\"))\n"
      "f.compute(d + \"/t.json\", d + \"/p4.json\", 2, d + \"/out4.json\")\n"
      "print([round(s[\"op_overhead_s\"] * 1e6, 6) for s in json.load(open(d + \"/out4.json\"))[\"stages\"]])\n"
      "json.dump({\"traceEvents\": [op(1, \"F0\", 0, 7000, 0), op(1, \"F1\", 7100, 8000, 1)]}, open(d + \"/u.json\", \"w\"))\n"
      "m = f.compute([d + \"/t.json\", d + \"/u.json\"], d + \"/p.json\", 2, d + \"/out2.json\")\n"
      "print(m[\"replays\"], [(r[\"ops\"], round(r[\"op_overhead_s\"] * 1e6, 6)) for r in m[\"stages\"]])",
      rc);
  ASSERT_EQ(rc, 0) << out;
  // The profiles stay; the model adds op_overhead_s to every op (sim_test's
  // PipelineFile.OpOverhead*). Four model stages on the replay's two: the mean to each.
  EXPECT_EQ(out,
            "[(2, 15.0, 0.002142857), (1, 40.0, 0.005714286)] 27.5 ''\n"
            "the host adds 400 us to every op of stage 1 (5.7% of its forward at b = 2; above 5% the ranks are short "
            "of CPU): the ops' cost then changes with the load, which a calibration taken before the candidates "
            "does not follow, so expect errors beyond the model's own\n"
            "15.0 [[4000.0, 8000.0], [13000.0, 26000.0]]\n"
            "40.0 [[4000.0, 8000.0], [13000.0, 26000.0]]\n"
            "[27.5, 27.5, 27.5, 27.5]\n"
            // Two replays pooled: stage 0's ops of both (u.json's F1 starts 100 us after F0
            // ends and runs 1 ms past its 7 ms profile at b = 2: 1100 us), stage 1's of t.json.
            "2 [(3, 376.666667), (1, 40.0)]\n");
  // A stage with no op measured (here stage 1 of 3: its ops' events are missing) is
  // refused by number, and nothing is written.
  const std::string gap = python_in_scripts(
      "import fidelity_calib as f, json, os, tempfile\n" + timeline_events_py() +
      "d = tempfile.mkdtemp()\n"
      "json.dump({\"traceEvents\": [op(1, \"F0\", 0, 10, 0), op(1, \"F1\", 20, 10, 1), recv(3, \"F0 1->2\", 0, 10, 0), "
      "op(3, \"F0\", 20, 10, 0)]}, open(d + \"/t.json\", \"w\"))\n"
      "st = {\"profile\": [{\"micro_batch_size\": 1, \"forward_s\": 1e-5, \"backward_s\": 2e-5, \"activation_bytes\": 0}]}\n"
      "json.dump({\"name\": \"p\", \"global_batch_size\": 2, \"stages\": [st, st, st]}, open(d + \"/p.json\", \"w\"))\n"
      "try:\n"
      "    f.compute(d + \"/t.json\", d + \"/p.json\", 1, d + \"/o.json\")\n"
      "finally:\n"
      "    print(sorted(os.listdir(d)))",
      rc);
  EXPECT_EQ(rc, 2) << gap;
  EXPECT_THAT(gap, HasSubstr("no op that could be measured on stage 1\n['p.json', 't.json']")) << gap;
  // A malformed pipeline or timeline: one line naming the file and the field or event.
  for (const auto& [pipeline, events, piece] : std::vector<std::tuple<std::string, std::string, std::string>>{
           {"{\"stages\": [{\"profile\": []}]}", "[]", "p.json: stages[0].profile: a non-empty list expected"},
           {"{\"stages\": [{\"profile\": [{\"micro_batch_size\": 1, \"forward_s\": 1}]}]}", "[]",
            "p.json: stages[0].profile[0].backward_s: a number expected"},
           {"{\"name\": \"p\"}", "[]", "p.json: stages: a non-empty list of stages expected"},
           {"{\"stages\": [{\"profile\": [{\"micro_batch_size\": 1, \"forward_s\": 1, \"backward_s\": 2}]}]}",
            "[{\"ph\": \"X\", \"cat\": \"forward\", \"pid\": 1, \"name\": \"F0\", \"dur\": 5, \"args\": {}}]",
            "t.json: traceEvents[0]: an op or transfer needs pid, name, ts, dur and args"}}) {
    const std::string bad = python_in_scripts(
        "import fidelity_calib as f, json, tempfile\n"
        "d = tempfile.mkdtemp()\n"
        "json.dump(" + pipeline + ", open(d + \"/p.json\", \"w\"))\n"
        "json.dump({\"traceEvents\": " + events + "}, open(d + \"/t.json\", \"w\"))\n"
        "f.compute(d + \"/t.json\", d + \"/p.json\", 1, d + \"/o.json\")",
        rc);
    EXPECT_EQ(rc, 2) << bad;
    EXPECT_THAT(bad, HasSubstr(piece)) << bad;
    EXPECT_EQ(std::count(bad.begin(), bad.end(), '\n'), 1) << bad;
  }
  for (const auto& [args, piece] : std::vector<std::pair<std::string, std::string>>{
           {"compute t.json p.json 0 out.json", "compute: B: a micro-batch size"},
           {"compute /nonexistent.json p.json 1 out.json", "compute: FileNotFoundError"}})
    expect_refused("fidelity_calib.py", args, piece);
}

// The compute calibration can leave out the ops the host stalled: on one stage whose ten
// measured forwards (the first counts from nothing and is left out) start 20 to 40 us
// after the previous one ends and run to the profile, but one starts 4 ms late, the
// quartiles are 20 and 40 us, so Tukey's far-out fence (3 interquartile ranges) is at
// 100 us: the mean of the other nine, 260 / 9 us, is the stage's overhead, and the stall
// is counted. With the fence at inf (the default, null in the JSON) every op is in the mean; a
// fence of 0 or less, or not a number, is refused in one line; fewer than 4 ops have no
// quartiles, and none is left out.
TEST(Testbed, ComputeCalibrationLeavesOutStalledOps) {
  int rc = 0;
  const std::string out = python_in_scripts(
      "import fidelity_calib as f, json, math, tempfile\n" + timeline_events_py() +
      "gaps = [20, 30, 40, 30, 20, 30, 4000, 40, 30, 20]\n"
      "ev, t = [op(1, \"F0\", 0, 1000, 0)], 1000\n"
      "for i, g in enumerate(gaps):\n"
      "    ev.append(op(1, f\"F{i + 1}\", t + g, 1000, i + 1))\n"
      "    t += g + 1000\n"
      "d = tempfile.mkdtemp()\n"
      "json.dump({\"traceEvents\": ev}, open(d + \"/t.json\", \"w\"))\n"
      "st = {\"profile\": [{\"micro_batch_size\": 1, \"forward_s\": 0.001, \"backward_s\": 0.002, "
      "\"activation_bytes\": 0}]}\n"
      "json.dump({\"name\": \"p\", \"global_batch_size\": 11, \"stages\": [st]}, open(d + \"/p.json\", \"w\"))\n"
      "for k in (3, math.inf):\n"
      "    r = f.compute(d + \"/t.json\", d + \"/p.json\", 1, d + \"/o.json\", k)[\"stages\"][0]\n"
      "    print(r[\"ops\"], round(r[\"op_overhead_s\"] * 1e6, 6), r[\"stalls\"], round(r[\"stall_mean_s\"] * 1e6, 6))\n"
      "print(f.stalled([1, 100, 1], 3))\n"
      "print(json.dumps(f.compute(d + \"/t.json\", d + \"/p.json\", 1, d + \"/o.json\")[\"stall_fence\"]))",
      rc);
  ASSERT_EQ(rc, 0) << out;
  // The measurement is JSON (fidelity.sh writes it as calib/compute.json): no fence is null.
  EXPECT_EQ(out, "10 28.888889 1 4000.0\n10 426.0 0 0.0\n[False, False, False]\nnull\n");
  for (const auto& [args, piece] : std::vector<std::pair<std::string, std::string>>{
           {"compute t.json p.json 1 out.json --stall-fence 0", "--stall-fence: a number of interquartile ranges > 0"},
           {"compute t.json p.json 1 out.json --stall-fence x", "--stall-fence: a number of interquartile ranges > 0"},
           {"compute t.json p.json 1 out.json --stall-fence", "--stall-fence: needs a value"}})
    expect_refused("fidelity_calib.py", args, piece);
}

// An iteration in which the host froze is left out of the compute calibration: on one
// stage, three iterations of four forwards, each starting 30 us after the previous one
// ends (the first of an iteration counts from its input, which it has none of, and is
// left out). In iteration 1 one forward starts 25 ms late, more than FREEZE_S (20 ms):
// its iteration's ops are left out and listed. In iteration 2 one starts 15 ms late, a
// stall below the freeze, and counts. Pooled with a replay that did not freeze, the list
// has one entry per replay. The ops' spread draws from the same ops.
TEST(Testbed, ComputeCalibrationLeavesOutIterationsTheHostFroze) {
  int rc = 0;
  const std::string out = python_in_scripts(
      "import fidelity_calib as f, fidelity_spread as sp, json, tempfile\n" + timeline_events_py() +
      "def replay(late):\n"
      "    ev, t = [], 0\n"
      "    for it in range(3):\n"
      "        for i in range(4):\n"
      "            e = op(1, f\"F{i}\", t + late.get((it, i), 30), 1000, i)\n"
      "            e[\"args\"][\"iteration\"] = it\n"
      "            ev.append(e)\n"
      "            t = e[\"ts\"] + 1000\n"
      "    return {\"traceEvents\": ev}\n"
      "d = tempfile.mkdtemp()\n"
      "json.dump(replay({(1, 2): 25000, (2, 1): 15000}), open(d + \"/t.json\", \"w\"))\n"
      "json.dump(replay({}), open(d + \"/u.json\", \"w\"))\n"
      "st = {\"profile\": [{\"micro_batch_size\": 1, \"forward_s\": 0.001, \"backward_s\": 0.002, "
      "\"activation_bytes\": 0}]}\n"
      "json.dump({\"name\": \"p\", \"global_batch_size\": 12, \"stages\": [st]}, open(d + \"/p.json\", \"w\"))\n"
      "for tl in ([d + \"/t.json\"], [d + \"/t.json\", d + \"/u.json\"]):\n"
      "    m = f.compute(tl, d + \"/p.json\", 1, d + \"/o.json\")\n"
      "    r = m[\"stages\"][0]\n"
      "    print(r[\"ops\"], round(r[\"op_overhead_s\"] * 1e6, 6), m[\"frozen_iterations\"], m[\"freeze_s\"])\n"
      "print(len(sp.calibration_costs(d + \"/t.json\", d + \"/p.json\", 1)))",
      rc);
  ASSERT_EQ(rc, 0) << out;
  // Alone: 6 ops, (5 x 30 + 15000) / 6 us; pooled with 9 more: (14 x 30 + 15000) / 15 us.
  EXPECT_EQ(out, "6 2525.0 [[1]] 0.02\n15 1028.0 [[1], []] 0.02\n6\n");
}

// The attribution prints, for a stuck link, the bucket tc reported after the change (with
// --bucket fixed it is not the rate's 1 ms): tc prints it in bytes, KiB or MiB.
TEST(Testbed, AttributionReadsTheBucketTcPrints) {
#ifndef ADAGROUPER_CALIB_BIN
  GTEST_SKIP() << "adagrouper-calib is not built (no MPI): the testbed is not tested";
#else
  int rc = 0;
  const std::string out = python_in_scripts(
      "import fidelity_attribution as f\n"
      "for line in [\"qdisc tbf 8001: root refcnt 3 rate 300Mbit burst 4Kb lat 50ms\", "
      "\"qdisc tbf 8001: root refcnt 3 rate 300Mbit burst 124987b lat 50ms\", "
      "\"qdisc tbf 1: root rate 1Gbit burst 1Mb lat 50ms\", \"qdisc htb 1: root r2q 10 default 0x1\"]:\n"
      "    print(f.parse_burst(line))",
      rc);
  ASSERT_EQ(rc, 0) << out;
  EXPECT_EQ(out, "4096\n124987\n1048576\nNone\n");
#endif
}

// Under --acks free the shaper is a tbf leaf of a root htb: the link's counters are the
// tbf's, whichever of the two tc lists first; a root htb alone (--shaper htb) gives its
// totals.
TEST(Testbed, AttributionReadsTheTbfUnderAnHtb) {
  int rc = 0;
  const std::string out = python_in_scripts(
      "import fidelity_attribution as f, os, tempfile\n"
      "htb = [\"qdisc htb 1: dev next root refcnt 3 r2q 10 default 0x1\", "
      "\" Sent 900 bytes 9 pkt (dropped 0, overlimits 0 requeues 0)\", \" backlog 0b 0p requeues 0\"]\n"
      "tbf = [\"qdisc tbf 10: dev next parent 1:1 rate 100Mbit burst 25000b lat 50ms\", "
      "\" Sent 500 bytes 5 pkt (dropped 2, overlimits 7 requeues 0)\", \" backlog 30b 1p requeues 0\"]\n"
      "for lines in (htb + tbf, tbf + htb, htb):\n"
      "    with tempfile.NamedTemporaryFile(\"w\", suffix=\".txt\", delete=False) as t:\n"
      "        t.write(\"origin 0\\n## after 1.0\\n# ns 0 qdisc\\n\" + \"\\n\".join(lines) + \"\\n\")\n"
      "    print(f.parse_netstat(t.name)[1][0][2][0][\"qdisc\"][\"next\"])\n"
      "    os.unlink(t.name)",
      rc);
  ASSERT_EQ(rc, 0) << out;
  const std::string tbf =
      "{'burst': 25000, 'sent': 500, 'pkts': 5, 'dropped': 2, 'overlimits': 7, 'backlog': 30, 'backlog_p': 1}\n";
  EXPECT_EQ(out, tbf + tbf + "{'sent': 900, 'pkts': 9, 'dropped': 0, 'overlimits': 0, 'backlog': 0, 'backlog_p': 0}\n");
}

// Transfers that left right behind the previous one on their channel, split by whether
// the other direction carried data: the model's duration over the measured one. Left
// out: the channel's first transfer, one after a gap (the bucket refilled), one near a
// rate change, one with the other direction busy for half of it, one recorded at a
// twentieth of the model's duration.
TEST(Testbed, AttributionSplitsTransfersByTheOtherDirection) {
  int rc = 0;
  const std::string out = python_in_scripts(
      "import fidelity_attribution as f\n"
      "k = (\"F0 0->1\", 0, 0)\n"
      "rows = [(k, \"0->1\", 0.0, 0.020, 0.020, 1.0), (k, \"0->1\", 0.020, 0.019, 0.020, 1.0),\n"
      "        (k, \"0->1\", 0.039, 0.025, 0.020, 1.0), (k, \"1->0\", 0.040, 0.035, 0.035, 1.0),\n"
      "        (k, \"0->1\", 0.074, 0.020, 0.020, 1.0), (k, \"0->1\", 0.094, 0.010, 0.010, 0.01),\n"
      "        (k, \"0->1\", 0.104, 0.020, 0.020, 1.0), (k, \"1->0\", 0.114, 0.030, 0.030, 1.0),\n"
      "        (k, \"0->1\", 0.124, 0.001, 0.020, 1.0)]\n"
      "print({c: [round(x, 4) for x in v] for c, v in f.reverse_traffic(rows).items()})",
      rc);
  ASSERT_EQ(rc, 0) << out;
  EXPECT_EQ(out, "{'busy': [0.8], 'idle': [1.0526]}\n");
}

// Transfers by where they lay in their channel's stream: one with the next message
// leaving right at its end (followed), that next one (behind), one after a gap (alone).
// Left out: one near a rate change, one the model does not have. The other channel's
// transfers do not follow this one's.
TEST(Testbed, AttributionSplitsTransfersByTheMessageBehind) {
  int rc = 0;
  const std::string out = python_in_scripts(
      "import fidelity_attribution as f\n"
      "rows = [(\"0->1\", 0.0, 0.006, 0.004, 1.0), (\"0->1\", 0.006, 0.003, 0.005, 1.0),\n"
      "        (\"1->0\", 0.009, 0.004, 0.004, 1.0), (\"0->1\", 0.020, 0.004, 0.004, 1.0),\n"
      "        (\"0->1\", 0.040, 0.004, 0.004, 0.01), (\"0->1\", 0.060, 0.004, None, 1.0)]\n"
      "print({c: [round(x, 4) for x in v] for c, v in f.queued_behind(rows).items()})",
      rc);
  ASSERT_EQ(rc, 0) << out;
  EXPECT_EQ(out, "{'followed': [0.002], 'behind': [-0.002], 'alone': [0.0, 0.0]}\n");
}

// The links apart from the schedule: each channel's model fed the measured sends' posts.
// Channel 0->1 (latency 1 ms, 1 MB/s, a bucket of 1000 bytes): the warm-up's 500 bytes
// arrive after the latency and leave 500 tokens, which the next message's wait for the
// link tops up; the one queued behind it gets the tokens of its latency; the later one a
// full bucket. Measured minus model: +0.2 and +0.5 ms with the other direction busy, 0
// with it idle, and the receive posted after the model's arrival is left out. The other
// direction's one message is covered for 71% of its span: partly. A rate change inside
// the span of bytes_between counts each side at its rate.
TEST(Testbed, AttributionFeedsTheLinksTheMeasuredSends) {
  int rc = 0;
  const std::string out = python_in_scripts(
      "import json, os, tempfile, fidelity_attribution as f\n"
      "d = tempfile.mkdtemp()\n"
      "w = lambda name, text: open(os.path.join(d, name), \"w\").write(text)\n"
      "for a, b in ((0, 1), (1, 0)):\n"
      "    w(f\"r{a}{b}.csv\", \"time_s,value\\n0,1000000\\n\")\n"
      "    w(f\"recorded-3-{a}-{b}.csv\", \"time_s,value\\n0,1000000\\n\")\n"
      "w(\"net-sim-3.json\", json.dumps({\"burst_bytes\": 1000, \"channels\": [{\"from\": a, \"to\": b, "
      "\"latency_s\": 0.001, \"rate\": {\"file\": f\"r{a}{b}.csv\"}} for a, b in ((0, 1), (1, 0))]}))\n"
      "ev = lambda kind, stage, peer, it, tag, s, e, n=10000: dict(stage=stage, iteration=it, kind=kind, "
      "micro_batch=0, model_stage=stage, peer=peer, tag=tag, bytes=n, start_s=s, end_s=e)\n"
      "msgs = [(-1, 8, 0.0, 500, 0.0, 0.001), (0, 0, 0.0, 10000, 0.0, 0.0112), (0, 4, 0.005, 10000, 0.0, 0.0215),\n"
      "        (1, 0, 0.1, 10000, 0.05, 0.110), (1, 4, 0.2, 10000, 0.25, 0.2501)]\n"
      "rows = [ev(\"send\", 0, 1, it, tag, post, post, n) for it, tag, post, n, rp, re in msgs]\n"
      "rows += [ev(\"recv\", 1, 0, it, tag, rp, re, n) for it, tag, post, n, rp, re in msgs]\n"
      "rows += [ev(\"send\", 1, 0, 0, 1, 0.0, 0.0, 30000), ev(\"recv\", 0, 1, 0, 1, 0.0, 0.0301, 30000)]\n"
      "w(\"raw-3.jsonl\", \"\".join(json.dumps(r) + \"\\n\" for r in rows))\n"
      "links, left_out = f.links_given_sends(d, 3)\n"
      "print(sorted((k[0], k[1], [round(1e3 * x, 3) for x in v]) for k, v in links.items()), left_out)\n"
      "print(round(f.Trace([(0.0, 1e6), (0.05, 2e6)]).bytes_between(0.04, 0.06)), f.links_given_sends(d, 4))",
      rc);
  ASSERT_EQ(rc, 0) << out;
  EXPECT_EQ(out,
            "[(1000000.0, 'busy', [0.2, 0.5]), (1000000.0, 'idle', [0.0]), (1000000.0, 'partly', [0.1])] 1\n"
            "30000 ({}, 0)\n");
}

// Each op's cost beyond its profile, as the compute calibration measures it: from the
// later of its input's arrival and its stage's previous op's end to its start, and its
// measured duration less the simulated one plus the overhead the model added. An op the
// simulation lacks is left out. The model's overhead per stage is the pipeline's, or
// their mean where the run has another number of stages than the pipeline (model stages
// merged or placed two to a rank).
TEST(Testbed, AttributionMeasuresTheOpsCostBeyondTheirProfile) {
  int rc = 0;
  const std::string out = python_in_scripts(
      "import json, os, tempfile, fidelity_attribution as f\n" + timeline_events_py() +
      "run = [recv(2, \"F0 0->1\", 5, 10, 0), op(2, \"F0\", 20, 10, 0), recv(2, \"F1 0->1\", 15, 10, 1), "
      "op(2, \"F1\", 31, 12, 1), recv(2, \"F2 0->1\", 20, 10, 2), op(2, \"F2\", 45, 10, 2)]\n"
      "sim = [op(2, \"F0\", 0, 9, 0), op(2, \"F1\", 0, 10, 1)]\n"
      "costs = f.op_costs(run, sim, lambda pid: 2e-6)\n"
      "print({k: [(round(a * 1e6, 3), round(b * 1e6, 3)) for a, b in v] for k, v in costs.items()})\n"
      "d = tempfile.mkdtemp()\n"
      "path = os.path.join(d, \"pipeline-sim.json\")\n"
      "json.dump({\"stages\": [{\"op_overhead_s\": 1e-6}, {\"op_overhead_s\": 3e-6}]}, open(path, \"w\"))\n"
      "ov = f.op_overheads(path)\n"
      "print([round(ov(pid, n) * 1e6, 3) for pid, n in ((1, 2), (2, 2), (1, 4), (2, 1))], "
      "f.op_overheads(os.path.join(d, \"none.json\")))",
      rc);
  ASSERT_EQ(rc, 0) << out;
  EXPECT_EQ(out, "{'F': [(5.0, 3.0), (1.0, 4.0)]}\n[1.0, 3.0, 2.0, 2.0] None\n");
}

// The rate driver's changes against the trace it played: the k-th recorded change is the
// k-th row's; 50 ms late is on time, 5.9 s late is reported, and the start row is not a
// change. A record that ends early (the replay ended) compares what it has.
TEST(Testbed, AttributionFindsTheDriversLateChanges) {
  int rc = 0;
  const std::string out = python_in_scripts(
      "import fidelity_attribution as f\n"
      "due = [(0.0, 1), (2.0, 2), (4.0, 1), (6.0, 2), (8.0, 1)]\n"
      "print(f.late_changes([(0.0, 1), (2.05, 2), (9.9, 1), (9.91, 2)], due), "
      "f.late_changes([(0.3, 1), (2.0, 2)], due), f.late_changes([(0.0, 1), (2.5, 2)], due, 0.6))",
      rc);
  ASSERT_EQ(rc, 0) << out;
  EXPECT_EQ(out, "[(4.0, 9.9), (6.0, 9.91)] [] []\n");
}

// With one receive stream per stage (replay --streams plan) a receive whose stream reached
// it at the end of a receive from another peer, and which then took under 1 ms, is held
// by the stream: its bytes were in. Not: one from the same peer, one after a gap, one that
// took long, a warm-up's; and nothing with per-channel streams. A transfer's name without
// its model stage ("B3 2->1", one model stage per stage) is the sending stage's.
TEST(Testbed, AttributionFindsTransfersHeldByTheReceiveStream) {
  int rc = 0;
  const std::string out = python_in_scripts(
      "import json, os, tempfile, fidelity_attribution as f\n"
      "d = tempfile.mkdtemp()\n"
      "rec = lambda peer, tag, ms, mb, it, s, e: dict(stage=0, iteration=it, kind=\"recv\", micro_batch=mb, "
      "model_stage=ms, peer=peer, tag=tag, bytes=1000, start_s=s, end_s=e)\n"
      "rows = [rec(2, 4, 3, 0, -1, 0.0, 0.01), rec(1, 1, 0, 0, -1, 0.01, 0.0101),\n"
      "        rec(1, 1, 0, 0, 0, 0.02, 0.05), rec(2, 4, 3, 1, 0, 0.05, 0.0502), rec(2, 4, 3, 2, 0, 0.0502, 0.0503),\n"
      "        rec(1, 1, 0, 1, 0, 0.0503, 0.06), rec(2, 4, 3, 3, 0, 0.06, 0.065), rec(1, 1, 0, 2, 0, 0.07, 0.0701),\n"
      "        dict(rec(1, 1, 0, 0, 0, 0.0, 0.1), stage=1, kind=\"send\")]\n"
      "open(os.path.join(d, \"raw-3.jsonl\"), \"w\").write(\"\".join(json.dumps(r) + \"\\n\" for r in rows))\n"
      "log = lambda streams: open(os.path.join(d, \"replay-3.log\"), \"w\").write("
      "\"replay of p.json (cpu backend, \" + streams + \" streams, 1 warm-up)\\n\")\n"
      "log(\"plan\")\n"
      "print(sorted(f.held_by_stream(d, 3)), f.transfer_id((\"2F1 2->0\", 0, 1)), f.transfer_id((\"4I0 1->0\", 2, 0)), f.transfer_id((\"B3 2->1\", 1, 3)))\n"
      "log(\"channel\")\n"
      "print(f.held_by_stream(d, 3))",
      rc);
  ASSERT_EQ(rc, 0) << out;
  EXPECT_EQ(out, "[(2, False, 2, 0, 0, 1)] (2, False, 2, 0, 0, 1) (4, True, 1, 0, 2, 0) (2, True, 2, 1, 1, 3)\nset()\n");
}

// The critical path's steps, walked back from an op: its input (held by the receive
// stream behind a message from another peer: the stream's step, then that message's
// transfer from its producer), and a message queued behind the one before it on its
// channel (its transfer counted from that one's arrival). The steps add up to the last
// op's lag, each class as measured minus predicted.
TEST(Testbed, PathWalksWhatEachStepWaitedFor) {
  int rc = 0;
  const std::string out = python_in_scripts(
      "import types, fidelity_path as f\n"
      "X, Y, X2 = (\"F0 0->1\", 0, 0), (\"B1 2->1\", 0, 1), (\"F1 0->1\", 0, 1)\n"
      "ops = lambda f0, f1, b1s, b1, s2b1, s2f1: {(1, \"F0\", 0, 0): f0, (1, \"F1\", 0, 1): f1, (3, \"B1\", 0, 1): b1s, "
      "(2, \"B1\", 0, 1): b1, (2, \"F1\", 0, 1): s2f1}\n"
      "run = types.SimpleNamespace(ops=ops((0, 10), (10, 12), (0, 5), (22, 29), None, (31, 35)), "
      "messages={X: (10, 20), Y: (5, 21), X2: (12, 30)}, sender={X: 1, Y: 3, X2: 1})\n"
      "sim = types.SimpleNamespace(ops=ops((0, 10), (10, 12), (0, 5), (12, 19), None, (22, 26)), "
      "messages={X: (10, 18), Y: (5, 12), X2: (12, 22)}, sender=run.sender)\n"
      "g = f.Graph(run)\n"
      "for last in ((2, \"B1\", 0, 1), (2, \"F1\", 0, 1)):\n"
      "    rec = []\n"
      "    steps, counts, root = f.walk(run, sim, g, {Y: X}, last, rec)\n"
      "    print(\" \".join(f\"{c} {v:g}\" for c, v in steps.items() if counts[c]), root, "
      "[(x[1], x[2][0] if len(x[2]) == 3 else x[2][1]) for x in rec])\n",
      rc);
  ASSERT_EQ(rc, 0) << out;
  EXPECT_EQ(out,
            "compute 0 start_message 1 transfer 2 stream 7 0 [('compute', 'B1'), ('start_message', 'B1'), "
            "('stream', 'B1 2->1'), ('transfer', 'F0 0->1'), ('compute', 'F0')]\n"
            "compute 0 start_message 1 transfer 8 0 [('compute', 'F1'), ('start_message', 'F1'), "
            "('transfer', 'F1 0->1'), ('transfer', 'F0 0->1'), ('compute', 'F0')]\n");
}

// The path of a fidelity run whose measurement is a simulation with one thing changed:
// every message 0.25 s later puts the iterations' whole growth in the transfers (less the
// waits the prediction had elsewhere), stage 0's slower forwards put it in the compute
// ops; in both the growth is the iteration's measured minus predicted time.
TEST(Testbed, PathAttributesTheLagToWhatChanged) {
  testutil::TempDir dir;
  for (const std::string mode : {"latency", "compute"}) {
    int rc = 0;
    const fs::path out = dir.path() / mode;
    const std::string log = shell(fmt::format("'{}/tests/fidelity/path_fixture.sh' '{}' '{}/adagrouper' '{}' {} 2>&1",
                                              SOURCE_ROOT, SOURCE_ROOT, BUILD_ROOT, out.string(), mode),
                                  rc);
    ASSERT_EQ(rc, 0) << log;
    const json path = json::parse(clirunner::slurp(out / "path.json")).at(0);
    const json& all = path.at("all");
    const json& steps = all.at("steps_us");
    double total = 0;
    for (const auto& [cls, us] : steps.items()) total += us.get<double>();
    EXPECT_NEAR(total, all.at("growth_us").get<double>(), 1e-6) << mode;
    const std::string i = std::to_string(path.at("candidate").get<int>());
    const json run = json::parse(clirunner::slurp(out / "run" / ("run-" + i + ".json")));
    const json sim = json::parse(clirunner::slurp(out / "run" / ("sim-" + i + ".json")));
    EXPECT_NEAR(all.at("growth_us").get<double>(),
                1e6 * (run.at("iteration_times_s").at(0).get<double>() - sim.at("iteration_times_s").at(0).get<double>()),
                1e-3)
        << mode;
    EXPECT_EQ(steps.at("stream").get<double>(), 0) << mode;
    if (mode == "latency") {
      EXPECT_EQ(steps.at("compute").get<double>(), 0);
      EXPECT_GT(steps.at("transfer").get<double>(), all.at("growth_us").get<double>());
    } else {
      EXPECT_EQ(steps.at("transfer").get<double>(), 0);
      EXPECT_EQ(steps.at("compute").get<double>(), all.at("growth_us").get<double>());
    }
    // --channels: the transfer steps by channel add up to the transfer class; with every
    // message 0.25 s late, all of it is in transfers late by more than 1 ms.
    const std::string by_channel =
        shell(fmt::format("cd '{}' && tools/scripts/fidelity_path.py '{}' --channels --json '{}' 2>&1", SOURCE_ROOT,
                          (out / "run").string(), (out / "channels.json").string()),
              rc);
    ASSERT_EQ(rc, 0) << by_channel;
    EXPECT_THAT(by_channel, HasSubstr("transfers on the path by channel")) << by_channel;
    const json c = json::parse(clirunner::slurp(out / "channels.json")).at(0);
    double lag = 0, late = 0;
    for (const auto& [name, v] : c.at("channels").items()) {
      lag += v.at("lag_us").get<double>();
      late += v.at("late_us").get<double>();
    }
    EXPECT_NEAR(lag, c.at("steady").at("steps_us").at("transfer").get<double>(), 1e-6) << mode;
    EXPECT_NEAR(late, mode == "latency" ? lag : 0.0, 1e-6) << mode;
    if (mode == "latency") {
      EXPECT_GT(lag, 0);
    }
  }
  // --tree: a line per run under the directory, the mean of its candidates' steady
  // iterations (here both iterations of the one candidate).
  int rc = 0;
  const std::string tree =
      shell(fmt::format("cd '{}' && tools/scripts/fidelity_path.py '{}' --tree 2>&1", SOURCE_ROOT, dir.path().string()), rc);
  ASSERT_EQ(rc, 0) << tree;
  EXPECT_THAT(tree, ContainsRegex("compute/run +1 +\\+500\\.00 +\\+500\\.00 ")) << tree;
  EXPECT_THAT(tree, ContainsRegex("latency/run +1 +\\+2500\\.00 +\\+0\\.00 ")) << tree;
  expect_refused("fidelity_path.py", "/tmp/nonexistent-dir --tree", "not a directory");
  expect_refused("fidelity_path.py", "/nonexistent-dir", "not a directory");
  expect_refused("fidelity_path.py", "--near-ms -1 /tmp", "--near-ms: a number of milliseconds >= 0");
  expect_refused("fidelity_path.py", "--channels -1 /tmp", "--channels: a number of milliseconds >= 0");
  expect_refused("fidelity_path.py", "/tmp", "no pairs.txt");
}

// How far the same candidate's runs are from each other: three runs of one scenario
// (noise_fixture.sh) whose measurements are late by different amounts. Every pair of
// measured runs, and of predictions, has the MAPE of the later run's iterations against
// the earlier one's; a run's own spread is the median of the pairs it is in, and its
// verdict follows from its prediction's MAPE, the limit and that spread. The drawn
// scenario's layout and the same runs given one by one agree.
TEST(Testbed, NoiseComparesTheRunsOfOneScenario) {
  testutil::TempDir dir;
  int rc = 0;
  const std::string made = shell(fmt::format("'{}/tests/fidelity/noise_fixture.sh' '{}' '{}/adagrouper' '{}' 2>&1",
                                             SOURCE_ROOT, SOURCE_ROOT, BUILD_ROOT, dir.path().string()),
                                 rc);
  ASSERT_EQ(rc, 0) << made;
  const fs::path scenario = dir.path() / "random-0";
  const auto times = [&](int run, const std::string& what) {
    for (const auto& e : fs::directory_iterator(scenario / fmt::format("run-{}", run) / "preempted"))
      if (e.path().filename().string().rfind(what + "-", 0) == 0)
        return json::parse(clirunner::slurp(e.path())).at("iteration_times_s").get<std::vector<double>>();
    ADD_FAILURE() << "no " << what << " summary in run " << run;
    return std::vector<double>{};
  };
  const auto mape = [](const std::vector<double>& predicted, const std::vector<double>& measured) {
    double sum = 0;
    for (std::size_t i = 0; i < measured.size(); ++i) sum += std::abs(predicted[i] - measured[i]) / measured[i];
    return 100 * sum / static_cast<double>(measured.size());
  };
  const double limit = 2.5;
  const std::string cmd = fmt::format("cd '{}' && tools/scripts/fidelity_noise.py --adagrouper '{}/adagrouper' --limit {}",
                                      SOURCE_ROOT, BUILD_ROOT, limit);
  std::vector<json> rows;
  for (const std::string& dirs :
       {fmt::format("'{}' --json '{}/a.json'", dir.path().string(), dir.path().string()),
        fmt::format("'{0}/run-1' '{0}/run-2' '{0}/run-3/preempted' --json '{1}/b.json'", scenario.string(),
                    dir.path().string())}) {
    const std::string out = shell(cmd + " " + dirs + " 2>&1", rc);
    ASSERT_EQ(rc, 0) << out;
    EXPECT_THAT(out, HasSubstr("3 candidate runs of 1 candidates:")) << out;
    rows.push_back(json::parse(clirunner::slurp(dir.path() / (rows.empty() ? "a.json" : "b.json"))).at(0));
  }
  for (const json& row : rows) {
    EXPECT_EQ(row.at("runs"), json::array({1, 2, 3}));
    const json& pairs = row.at("run_to_run_pct");
    const json& predicted = row.at("predictions_run_to_run_pct");
    ASSERT_EQ(pairs.size(), 3u);
    ASSERT_EQ(predicted.size(), 3u);
    std::vector<double> all;
    std::array<std::vector<double>, 4> of_run;  // the pairs each run (1 to 3) is in
    for (std::size_t p = 0; p < 3; ++p) {
      const int a = pairs[p].at("runs")[0].get<int>(), b = pairs[p].at("runs")[1].get<int>();
      EXPECT_LT(a, b);
      const double m = mape(times(a, "run"), times(b, "run"));
      EXPECT_NEAR(pairs[p].at("mape_pct").get<double>(), m, 1e-9);
      EXPECT_NEAR(predicted[p].at("mape_pct").get<double>(), mape(times(a, "sim"), times(b, "sim")), 1e-9);
      all.push_back(m);
      of_run[a].push_back(m);
      of_run[b].push_back(m);
    }
    std::sort(all.begin(), all.end());
    EXPECT_NEAR(row.at("run_to_run_median_pct").get<double>(), all[1], 1e-9);
    EXPECT_GT(all[0], 0);
    std::vector<std::string> expected;
    for (int run = 1; run <= 3; ++run) {
      const double own = (of_run[run][0] + of_run[run][1]) / 2;  // the median of two
      EXPECT_NEAR(row.at("run_spread_pct")[run - 1].get<double>(), own, 1e-9);
      const double m = mape(times(run, "sim"), times(run, "run"));
      EXPECT_NEAR(row.at("mape_pct")[run - 1].get<double>(), m, 1e-9);
      expected.push_back(m <= limit ? "within" : m <= own ? "spread" : "miss");
    }
    EXPECT_EQ(row.at("verdicts").get<std::vector<std::string>>(), expected);
    // The fixture makes each kind appear once: run 1 within the limit, run 2 (predicted
    // 0.25 s late, measured 0.1 s) within its spread, run 3 (measured 0.4 s late, far
    // from the others) beyond even its own.
    EXPECT_EQ(expected, (std::vector<std::string>{"within", "spread", "miss"}));
  }
  EXPECT_EQ(rows[0].at("run_to_run_pct"), rows[1].at("run_to_run_pct"));
  const std::string exe = fmt::format("--adagrouper '{}/adagrouper' ", BUILD_ROOT);
  expect_refused("fidelity_noise.py", exe + "/nonexistent-dir", "/nonexistent-dir: not a directory");
  expect_refused("fidelity_noise.py", exe + "/tmp", "/tmp: not a fidelity run");
  expect_refused("fidelity_noise.py", exe + "--limit -1 /tmp", "--limit: a percentage >= 0");
  expect_refused("fidelity_noise.py", "--adagrouper /nonexistent /tmp", "--adagrouper: /nonexistent is not an executable");
}

// The compute ops that ran late, and those of them that overlap one of the driver's tc
// calls: an op late by more than the threshold in a call, one late outside, one on time
// in a call, one not in the simulation.
TEST(Testbed, AttributionCountsLateOpsDuringTcCalls) {
  int rc = 0;
  const std::string out = python_in_scripts(
      "import fidelity_attribution as f\n"
      "measured = {1: (0.0, 0.020), 2: (1.0, 0.020), 3: (2.0, 0.010), 4: (2.0, 0.5)}\n"
      "simulated = {1: (0.0, 0.010), 2: (1.0, 0.010), 3: (2.0, 0.010)}\n"
      "print(f.late_during(measured, simulated, [(0.005, 0.006), (2.005, 2.02)], 0.005))",
      rc);
  ASSERT_EQ(rc, 0) << out;
  EXPECT_EQ(out, "(2, 1, 3)\n");
}

// An op's start latency: from the later of its stage's previous op's end (any op: F, B, I,
// W) and its input's arrival (its model stage's message); a receive that ends after the op
// started is not its input, and a stage's first op with no input has none.
TEST(Testbed, AttributionMeasuresOpsStartLatency) {
  int rc = 0;
  const std::string out = python_in_scripts(
      "import fidelity_attribution as f\n" +
      timeline_events_py() +
      "ev = [op(1, \"F0\", 0, 10, 0), recv(2, \"F0 0->1\", 5, 10, 0), op(2, \"F0\", 20, 10, 0), "
      "recv(2, \"F1 0->1\", 15, 10, 1), op(2, \"F1\", 30, 10, 1), recv(2, \"B0 2->1\", 45, 15, 0), op(2, \"B0\", 50, 10, 0)]\n"
      "print([round(x * 1e6, 3) for x in f.start_latencies(ev)])\n"
      // Model stages 2 and 5 on stage 3: an op's input is the message of its own model
      // stage (from 4 for model stage 5), not the last receive to end before it.
      "fam = lambda name, ts, ms, ph: dict(op(3, name, ts, 10, 0), cat=\"forward\", "
      "args={\"iteration\": 0, \"micro_batch\": 0, \"model_stage\": ms, \"phase\": ph})\n"
      "print([round(x * 1e6, 3) for x in f.start_latencies(ev + [recv(3, \"4F0 1->2\", 70, 20, 0), "
      "recv(3, \"1F0 1->2\", 75, 20, 0), fam(\"5F0\", 100, 5, \"F\")])])\n"
      // A W op is the stage's previous op for the next one (F2 counts from its end, 72).
      "w = dict(op(2, \"W0\", 62, 10, 0), cat=\"backward-weight\", "
      "args={\"iteration\": 0, \"micro_batch\": 0, \"phase\": \"W\"})\n"
      "print([round(x * 1e6, 3) for x in f.start_latencies(ev + [w, recv(2, \"F2 0->1\", 40, 10, 2), "
      "op(2, \"F2\", 75, 5, 2)])])\n"
      // The first op of the next iteration counts from its input only (the optimizer step
      // and the wait for every stage lie between it and the stage's previous op).
      "it1 = {\"iteration\": 1, \"micro_batch\": 0}\n"
      "ev.append(dict(op(2, \"F0\", 300, 10, 0), args=it1))\n"
      "print([round(x * 1e6, 3) for x in f.start_latencies(ev)])\n"
      "ev.append(dict(recv(2, \"F0 0->1\", 280, 10, 0), args=it1))\n"
      "print([round(x * 1e6, 3) for x in f.start_latencies(ev)])",
      rc);
  ASSERT_EQ(rc, 0) << out;
  EXPECT_EQ(out, "[0.0, 5.0, 10.0]\n[0.0, 5.0, 10.0, 10.0]\n[0.0, 2.0, 3.0, 5.0, 10.0]\n[0.0, 5.0, 10.0]\n"
                 "[0.0, 5.0, 10.0, 10.0]\n");
}

#ifdef ADAGROUPER_CALIB_BIN
// The reduced testbed (fidelity.sh --ci) with `args`, writing into `out`: what it printed,
// and its exit status in rc (77: skipped, no namespaces here).
std::string reduced_run(const std::string& args, const fs::path& out, int& rc) {
  return shell(fmt::format("cd '{}' && tools/scripts/fidelity.sh --ci {} --build '{}' --out '{}' 2>&1", SOURCE_ROOT, args,
                           BUILD_ROOT, out.string()),
               rc);
}
#endif

TEST(Testbed, ReducedRunEndToEnd) {
#ifndef ADAGROUPER_CALIB_BIN
  GTEST_SKIP() << "adagrouper-calib is not built (no MPI): the fidelity testbed needs it";
#else
  TempDir tmp;
  int rc = 0;
  const std::string out = reduced_run("", tmp.path(), rc);
  if (rc == 77) GTEST_SKIP() << out;
  ASSERT_EQ(rc, 0) << out;
  EXPECT_THAT(out, HasSubstr("MAPE"));
  const json cmp = json::parse(clirunner::slurp(tmp.path() / "preempted" / "compare.json"));
  EXPECT_GE(cmp["comparisons"].size(), 2u);
  EXPECT_TRUE(cmp["ranking"].contains("kendall_tau"));
  // The namespaces' TCP: Reno unless --tcp says otherwise, written with the results.
  EXPECT_THAT(clirunner::slurp(tmp.path() / "tcp.txt"), ::testing::StartsWith("congestion control reno,"));
  // tbf's bucket is the same in bytes at every rate (--bucket auto with tbf: fixed, 3 ms
  // of the top rate), and the model holds it; the shaped links' packets are capped at
  // 16 KiB (--packet-cap auto with that bucket).
  EXPECT_THAT(out, HasSubstr("bucket fixed (")) << out;
  EXPECT_THAT(out, HasSubstr(", 3 ms, packets of at most 16384 bytes")) << out;
  EXPECT_THAT(out, HasSubstr("the model's bucket on")) << out;
  EXPECT_TRUE(json::parse(clirunner::slurp(tmp.path() / "preempted" / "net-plan.json")).contains("burst_bytes"));
  // The ops' overhead measured by a 1F1B replay, per stage; the plan and the simulations
  // read the pipeline with it, the ranks the profile.
  EXPECT_THAT(out, HasSubstr("== calibrate compute: 1F1B at b = 1")) << out;
  // The predictions pool it with one more replay after each candidate (--calib-compute-spread
  // auto: 1 iteration each with --ci); ReducedRunSpreadsTheComputeCalibrationOverTheRun.
  EXPECT_THAT(out, HasSubstr("the compute calibration pooled over its 3 replays")) << out;
  const json measured_ops = json::parse(clirunner::slurp(tmp.path() / "calib" / "compute.json"));
  EXPECT_EQ(measured_ops["stages"].size(), 2u);
  const json sim_pipeline = json::parse(clirunner::slurp(tmp.path() / "pipeline-sim.json"));
  EXPECT_EQ(sim_pipeline["stages"][0]["profile"][0]["forward_s"].get<double>(), 0.004);
  EXPECT_DOUBLE_EQ(sim_pipeline["stages"][0]["op_overhead_s"].get<double>(),
                   std::max(0.0, measured_ops["stages"][0]["op_overhead_s"].get<double>()));
  EXPECT_THAT(clirunner::slurp(tmp.path() / "preempted" / "plan.json"), HasSubstr("pipeline-sim.json"));
  // Each candidate predicted as the mean of 16 draws of the ops' costs (--op-spread auto),
  // its prediction with every op at the mean kept and compared beside it.
  EXPECT_THAT(out, HasSubstr("== the ops' spread: ")) << out;
  EXPECT_THAT(out, HasSubstr("the mean of 16 draws of the ops' costs")) << out;
  EXPECT_THAT(out, HasSubstr("with every op at the mean (--op-spread 0): MAPE")) << out;
  EXPECT_FALSE(json::parse(clirunner::slurp(tmp.path() / "calib" / "op-costs.json"))["costs_s"].empty());
  EXPECT_EQ(json::parse(clirunner::slurp(tmp.path() / "preempted" / "op-spread.json"))["draws"], 16);
  EXPECT_EQ(json::parse(clirunner::slurp(tmp.path() / "preempted" / "compare-point.json"))["comparisons"].size(),
            cmp["comparisons"].size());
  // For each candidate the driver recorded the rate changes it applied, from time 0: as
  // a whole (recorded-I.csv) and per link, at the end of the tc call that changed it
  // (recorded-I-F-T.csv, what the simulation follows); and its tc calls and the links'
  // and TCP's counters around the replay.
  int recorded = 0, per_link = 0, tc_calls = 0, netstat = 0, tc_batch = 0;
  for (const auto& e : fs::directory_iterator(tmp.path() / "preempted")) {
    const std::string name = e.path().filename().string();
    tc_calls += name.rfind("tc-calls-", 0) == 0;
    if (name.rfind("tc-batch-", 0) == 0) {  // the driver's tc processes said nothing: every change applied
      ++tc_batch;
      EXPECT_EQ(clirunner::slurp(e.path()), "") << e.path();
    }
    EXPECT_FALSE(fs::is_fifo(e.path())) << e.path() << ": the driver's pipes are removed";
    netstat += name.rfind("netstat-", 0) == 0;
    if (name.rfind("recorded-", 0) != 0) continue;
    (std::count(name.begin(), name.end(), '-') == 1 ? recorded : per_link) += 1;
    EXPECT_THAT(clirunner::slurp(e.path()), ::testing::StartsWith("time_s,value\n0.000000,")) << e.path();
  }
  EXPECT_EQ(recorded, 2);
  EXPECT_EQ(per_link, 4);  // 2 candidates x 2 links (0 -> 1, 1 -> 0)
  EXPECT_EQ(tc_calls, 2);
  EXPECT_EQ(tc_batch, 2);
  EXPECT_EQ(netstat, 2);
  // The attribution of the error reads the run: every iteration and the MAPE.
  const std::string attribution =
      shell(fmt::format("python3 '{}/tools/scripts/fidelity_attribution.py' '{}' --all --summary 2>&1", SOURCE_ROOT,
                        tmp.path().string()),
            rc);
  ASSERT_EQ(rc, 0) << attribution;
  std::size_t mapes = 0;
  for (std::size_t at = attribution.find("MAPE free-running"); at != std::string::npos;
       at = attribution.find("MAPE free-running", at + 1))
    ++mapes;
  EXPECT_EQ(mapes, 2u) << attribution;
#endif
}

// With tbf's bucket constant (--bucket fixed) the model holds it: the calibration is
// fitted with it (its latency, with --calib-latency tiny, from messages of half the
// bucket), and the plan's network and every prediction's carry it. The queue is kept in
// bytes too (--queue fixed): tc takes it at every change.
// With --families kfkb-dynamic,zbv the planner picks kFkB with dynamic W fill (on the
// reduced pipeline it is about 10% ahead of any other candidate) and the fastest ZBV is
// replayed beside it; the replay runs the order the plan records, and so does the
// prediction of that candidate, free-running and aligned (simulate --recorded-order);
// the other is simulated as planned. The plan ranks the dynamic candidates by that
// recorded order (--rank-by auto with --w-fill recorded: deployed).
TEST(Testbed, ReducedFamiliesRunPredictsTheDynamicPickByItsRecordedOrder) {
#ifndef ADAGROUPER_CALIB_BIN
  GTEST_SKIP() << "adagrouper-calib is not built (no MPI): the fidelity testbed needs it";
#else
  TempDir tmp;
  int rc = 0;
  const std::string out = reduced_run("--families kfkb-dynamic,zbv", tmp.path(), rc);
  if (rc == 77) GTEST_SKIP() << out;
  ASSERT_EQ(rc, 0) << out;
  // The replay runs the recorded order, so the plan ranks by it (--rank-by auto).
  EXPECT_THAT(out, HasSubstr("plan (--rank-by deployed): ")) << out;
  const fs::path dir = tmp.path() / "preempted";
  const json plan = json::parse(clirunner::slurp(dir / "plan.json"));
  EXPECT_EQ(plan["chosen"]["w_fill"], "dynamic") << out;
  int replayed = 0, recorded = 0;
  for (std::size_t i = 0; i < plan["candidates"].size(); ++i) {
    const fs::path args = dir / fmt::format("sim-{}.args", i);
    if (!fs::exists(args)) continue;
    ++replayed;
    const bool dynamic = plan["candidates"][i]["w_fill"] == "dynamic";
    recorded += dynamic;
    EXPECT_EQ(clirunner::slurp(args).find("--recorded-order") != std::string::npos, dynamic) << i;
    EXPECT_TRUE(fs::exists(dir / fmt::format("sim-aligned-{}.json", i))) << i;
  }
  EXPECT_GE(replayed, 2);
  EXPECT_EQ(recorded, 1);
  EXPECT_TRUE(fs::exists(dir / "compare.json"));
#endif
}

// On 3 ranks interleaved 1F1B at v = 2 sends from the last rank to the first: the
// namespaces form a ring, the calibration gives its link the chain's mean, the driver
// changes its rate with the others', and the network simulated has both its channels.
// With --bucket per-rate tbf's bucket changes with the rate (1 ms of it) and the model
// has none.
TEST(Testbed, ReducedRingRunForTheLoopPlacement) {
#ifndef ADAGROUPER_CALIB_BIN
  GTEST_SKIP() << "adagrouper-calib is not built (no MPI): the fidelity testbed needs it";
#else
  TempDir tmp;
  int rc = 0;
  const std::string out =
      reduced_run("--ranks 3 --families interleaved-1f1b --streams channel --bucket per-rate", tmp.path(), rc);
  if (rc == 77) GTEST_SKIP() << out;
  ASSERT_EQ(rc, 0) << out;
  EXPECT_THAT(out, HasSubstr("channel 2->0: "));
  EXPECT_THAT(out, HasSubstr("the chain's mean (a ring's link"));
  EXPECT_THAT(out, HasSubstr("bucket per-rate, 1 ms")) << out;
  EXPECT_THAT(out, HasSubstr("the model's bucket off")) << out;
  const fs::path dir = tmp.path() / "preempted";
  const json net = json::parse(clirunner::slurp(dir / "net-plan.json"));
  EXPECT_FALSE(net.contains("burst_bytes"));
  std::set<std::pair<int, int>> channels;
  for (const json& c : net.at("channels")) channels.insert({c.at("from").get<int>(), c.at("to").get<int>()});
  EXPECT_TRUE(channels.count({2, 0}) && channels.count({0, 2})) << net.dump();
  // Every link's both sides changed at every change of the trace, link 2 too.
  bool ring_changed = false;
  for (const auto& e : fs::directory_iterator(dir))
    if (e.path().filename().string().rfind("tc-calls-", 0) == 0)
      ring_changed |= clirunner::slurp(e.path()).find("\n2,next,") != std::string::npos;
  EXPECT_TRUE(ring_changed);
  EXPECT_TRUE(fs::exists(dir / "compare.json"));
#endif
}

TEST(Testbed, ReducedRunWithTheModelsBucket) {
#ifndef ADAGROUPER_CALIB_BIN
  GTEST_SKIP() << "adagrouper-calib is not built (no MPI): the fidelity testbed needs it";
#else
  TempDir tmp;
  int rc = 0;
  const std::string out = reduced_run("--bucket fixed --calib-latency tiny --queue fixed --latency-situ on", tmp.path(), rc);
  if (rc == 77) GTEST_SKIP() << out;
  ASSERT_EQ(rc, 0) << out;
  std::smatch m;
  ASSERT_TRUE(std::regex_search(
      out, m, std::regex(R"(bucket fixed \(([0-9]+) bytes at every rate\).*the model's bucket on \(([0-9]+) bytes)")))
      << out;
  // The model's bucket is the payload of the whole 1514-byte frames tbf's holds.
  const double tbf_bucket = std::stod(m[1].str()), bucket = std::stod(m[2].str());
  EXPECT_EQ(bucket, std::floor(tbf_bucket / 1514) * 1448) << out;
  ASSERT_TRUE(std::regex_search(out, m, std::regex(R"(queue fixed \(([0-9]+) bytes\))"))) << out;
  EXPECT_GE(std::stod(m[1].str()), 131072.0);
  const json calibration = json::parse(clirunner::slurp(tmp.path() / "calibration.json"));
  EXPECT_EQ(calibration.value("bucket_bytes", 0.0), bucket) << calibration.dump();
  // The latency from messages of half the bucket, replayed beside the large ones.
  EXPECT_EQ(calibration.value("latency_from", ""), "tiny") << calibration.dump();
  const json tiny = json::parse(clirunner::slurp(tmp.path() / "calib" / "pipeline-tiny.json"));
  EXPECT_EQ(tiny["stages"][0]["profile"][0]["output_bytes"].get<double>(), std::floor(tbf_bucket / 2));
  for (const auto& level : calibration["levels"])
    for (const auto& ch : level["channels"]) EXPECT_GE(ch["latency_s"].get<double>(), 0) << ch.dump();
  // The latency in situ (--latency-situ on), measured on the compute calibration's
  // replay, is in calibration.json and on every channel of the plan's network (at least
  // 0); the candidates' networks have it measured on every replay of the calibration
  // (--calib-compute-spread, 1 with --ci): calibration-pooled.json's.
  EXPECT_THAT(out, HasSubstr("== latency in situ: ")) << out;
  ASSERT_TRUE(calibration.contains("situ_latency_s")) << calibration.dump();
  const double situ = calibration["situ_latency_s"].get<double>();
  EXPECT_EQ(json::parse(clirunner::slurp(tmp.path() / "calib" / "situ.json")).at("situ_latency_s").get<double>(), situ);
  const double pooled_situ =
      json::parse(clirunner::slurp(tmp.path() / "calibration-pooled.json")).at("situ_latency_s").get<double>();
  // The networks take the channels of the level of the run's rate, the highest.
  const json* top = &calibration["levels"][0];
  for (const auto& level : calibration["levels"])
    if (level["nominal_bytes_per_s"].get<double>() > (*top)["nominal_bytes_per_s"].get<double>()) top = &level;
  std::map<std::pair<int, int>, double> calibrated;
  for (const auto& ch : (*top)["channels"])
    calibrated[{ch["from"].get<int>(), ch["to"].get<int>()}] = ch["latency_s"].get<double>();
  int networks = 0;
  for (const auto& e : fs::directory_iterator(tmp.path() / "preempted")) {
    const std::string name = e.path().filename().string();
    if (name.rfind("net-", 0) != 0 || e.path().extension() != ".json") continue;
    ++networks;
    const json net = json::parse(clirunner::slurp(e.path()));
    EXPECT_EQ(net.value("burst_bytes", 0.0), bucket) << name;
    for (const auto& ch : net["channels"])
      EXPECT_DOUBLE_EQ(ch["latency_s"].get<double>(),
                       std::max(0.0, calibrated.at({ch["from"].get<int>(), ch["to"].get<int>()}) +
                                         (name == "net-plan.json" ? situ : pooled_situ)))
          << name;
  }
  EXPECT_GE(networks, 3);  // the plan's and at least two candidates' predictions
  EXPECT_THAT(out, HasSubstr("MAPE"));
#endif
}

// --calib-compute-spread N: after each candidate the compute calibration's 1F1B plan is
// replayed again with N measured iterations (calib/run-compute-K; 10 by default, 1 with
// --ci, here 2); the plan reads the
// first replay's calibration, the predictions every replay's pooled: the ops' overhead
// (pipeline-sim-pooled.json), their costs and the latency in situ
// (calibration-pooled.json, on every channel of the candidates' networks, while the
// plan's network keeps the first's). fidelity_resim.py --pooled on reproduces those
// predictions to the digit; --pooled off predicts from the first replay alone.
TEST(Testbed, ReducedRunSpreadsTheComputeCalibrationOverTheRun) {
#ifndef ADAGROUPER_CALIB_BIN
  GTEST_SKIP() << "adagrouper-calib is not built (no MPI): the fidelity testbed needs it";
#else
  TempDir tmp;
  int rc = 0;
  const std::string out = reduced_run("--calib-compute-spread 2", tmp.path(), rc);
  if (rc == 77) GTEST_SKIP() << out;
  ASSERT_EQ(rc, 0) << out;
  const fs::path calib = tmp.path() / "calib", dir = tmp.path() / "preempted";
  // --ci replays 2 candidates: 3 replays of the compute calibration in all.
  EXPECT_THAT(out, HasSubstr("the compute calibration pooled over its 3 replays (one after each candidate)")) << out;
  EXPECT_THAT(out, HasSubstr("calibrate compute, 3 replays pooled: 1F1B at b = 1")) << out;
  EXPECT_THAT(out, HasSubstr("iterations in 3 replays")) << out;
  EXPECT_EQ(json::parse(clirunner::slurp(dir / "compute-replays.json"))["replays"], 3);
  for (const std::string k : {"2", "3"})
    EXPECT_EQ(json::parse(clirunner::slurp(calib / ("run-compute-" + k + ".json")))["iterations"], 2) << k;
  const json first = json::parse(clirunner::slurp(calib / "compute.json"));
  const json pooled = json::parse(clirunner::slurp(calib / "compute-pooled.json"));
  EXPECT_EQ(pooled["replays"], 3);
  const json pooled_pipeline = json::parse(clirunner::slurp(tmp.path() / "pipeline-sim-pooled.json"));
  for (std::size_t s = 0; s < 2; ++s) {
    EXPECT_GT(pooled["stages"][s]["ops"].get<int>(), first["stages"][s]["ops"].get<int>()) << s;
    EXPECT_DOUBLE_EQ(pooled_pipeline["stages"][s]["op_overhead_s"].get<double>(),
                     std::max(0.0, pooled["stages"][s]["op_overhead_s"].get<double>()));
  }
  EXPECT_GT(json::parse(clirunner::slurp(calib / "op-costs-pooled.json"))["costs_s"].size(),
            json::parse(clirunner::slurp(calib / "op-costs.json"))["costs_s"].size());
  // The plan reads the first replay's pipeline and network; the candidates' networks the
  // pooled latency in situ.
  EXPECT_THAT(clirunner::slurp(dir / "plan.json"), HasSubstr("pipeline-sim.json"));
  const json cal = json::parse(clirunner::slurp(tmp.path() / "calibration.json"));
  const json cal_pooled = json::parse(clirunner::slurp(tmp.path() / "calibration-pooled.json"));
  EXPECT_EQ(cal_pooled["situ_latency_s"],
            json::parse(clirunner::slurp(calib / "situ-pooled.json"))["situ_latency_s"]);
  EXPECT_EQ(json::parse(clirunner::slurp(calib / "situ-pooled.json"))["replays"], 3);
  const double shift = cal_pooled["situ_latency_s"].get<double>() - cal["situ_latency_s"].get<double>();
  const json plan_net = json::parse(clirunner::slurp(dir / "net-plan.json"));
  int networks = 0;
  for (const auto& e : fs::directory_iterator(dir)) {
    const std::string name = e.path().filename().string();
    if (name.rfind("net-sim-", 0) != 0 || e.path().extension() != ".json") continue;
    ++networks;
    const json net = json::parse(clirunner::slurp(e.path()));
    for (std::size_t c = 0; c < net["channels"].size(); ++c)
      EXPECT_NEAR(net["channels"][c]["latency_s"].get<double>(),
                  std::max(0.0, plan_net["channels"][c]["latency_s"].get<double>() + shift), 1e-12)
          << name;
  }
  EXPECT_EQ(networks, 2);
  // Re-simulated with the replays pooled: the run's own predictions exactly; with the
  // first replay alone: a prediction of its own, for every candidate.
  const std::string resim = fmt::format("cd '{}' && tools/scripts/fidelity_resim.py --adagrouper '{}/adagrouper' ",
                                        SOURCE_ROOT, BUILD_ROOT);
  const std::string on = shell(resim + "--pooled on '" + dir.string() + "' 2>&1", rc);
  ASSERT_EQ(rc, 0) << on;
  const std::regex row(R"(\n\S+ +(.+?) +[0-9.]+ +([0-9.]+) \( *([+-][0-9.]+)\) +([0-9.]+) \( *([+-][0-9.]+)\))");
  int rows = 0;
  for (std::sregex_iterator it(on.begin(), on.end(), row), end; it != end; ++it, ++rows) {
    EXPECT_EQ((*it)[2], (*it)[4]) << on;
    EXPECT_EQ((*it)[3], (*it)[5]) << on;
  }
  EXPECT_EQ(rows, 2) << on;
  const std::string off = shell(resim + "--pooled off '" + dir.string() + "' 2>&1", rc);
  ASSERT_EQ(rc, 0) << off;
  EXPECT_THAT(off, HasSubstr("pooled off")) << off;
  EXPECT_EQ(std::distance(std::sregex_iterator(off.begin(), off.end(), row), std::sregex_iterator()), 2) << off;
  // A replay in which the host froze: the last op of iteration 1 on stage 0 of the second
  // replay starts 25 ms late. The latency in situ leaves that iteration out and lists it
  // (the ops' overhead does the same: ComputeCalibrationLeavesOutIterationsTheHostFroze).
  {
    const fs::path timeline = calib / "run-compute-2.trace.json";
    json trace = json::parse(clirunner::slurp(timeline));
    json* last = nullptr;
    for (auto& e : trace["traceEvents"])
      if (e.value("ph", "") == "X" && (e.value("cat", "") == "forward" || e.value("cat", "") == "backward") &&
          e["pid"] == 1 && e["args"].value("iteration", -1) == 1 && (last == nullptr || e["ts"] > (*last)["ts"]))
        last = &e;
    ASSERT_NE(last, nullptr);
    (*last)["ts"] = (*last)["ts"].get<double>() + 25000;
    std::ofstream(timeline) << trace.dump();
    const std::string situ =
        shell(fmt::format("cd '{}' && tools/scripts/fidelity_situ.py '{}' --adagrouper '{}/adagrouper' --pooled 2>&1",
                          SOURCE_ROOT, tmp.path().string(), BUILD_ROOT),
              rc);
    ASSERT_EQ(rc, 0) << situ;
    const json frozen = json::parse(situ);
    EXPECT_EQ(frozen["frozen_iterations"], json::parse("[[], [1], []]")) << situ;
    EXPECT_EQ(frozen["iterations"].get<int>(),
              json::parse(clirunner::slurp(calib / "situ-pooled.json"))["iterations"].get<int>() - 1);
  }
  // A pooled calibration that does not match the replay's stages is one line naming the
  // file and the field.
  json one_stage = pooled;
  one_stage["stages"].erase(1);
  std::ofstream(calib / "compute-pooled.json") << one_stage.dump();
  expect_refused("fidelity_situ.py",
                 fmt::format("'{}' --adagrouper '{}/adagrouper' --pooled", tmp.path().string(), BUILD_ROOT),
                 (calib / "compute-pooled.json").string() + ": stages: one per stage of");
#endif
}

}  // namespace
