// Tests of `adagrouper plan` end to end on the shipped configs.
//
// The toy example's choices (configs/examples/toy-4.json, docs/model.md section 9), the
// infeasible-limit error, stable JSON with the fields of docs/formats.md ("Plan JSON"),
// help and bad command lines, and predictions equal to `adagrouper simulate`; with
// schedule families and devices: predictions equal to `simulate` on the merged pipeline,
// the PyTorch CSV reads back to the same numbers, programs across any pair of devices,
// and the bad combinations.
#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <fmt/format.h>

#include <algorithm>
#include <fstream>
#include <map>
#include <set>
#include <string>
#include <tuple>
#include <vector>

#include "helpers.h"

namespace plantest {
namespace {

const std::string kToyPipe = "configs/examples/toy-4.json";
const std::string kGpt = "configs/pipelines/gpt-8stage-v100.json";
const std::string kPreempted = "configs/networks/preempted-25g.json";

class PlanCli : public ::testing::Test {
 public:
  Outcome run(const std::string& args) { return run_cli(args, tmp_.path()); }

  // Runs plan --json and parses stdout.
  json plan_json(const std::string& args) {
    const Outcome r = run("plan " + args + " --json");
    EXPECT_EQ(r.rc, 0) << args << "\n" << r.err;
    EXPECT_EQ(r.err, "");
    try {
      return json::parse(r.out);
    } catch (const std::exception& e) {
      ADD_FAILURE() << "not JSON: " << e.what() << "\n" << r.out;
      return json::object();
    }
  }

  // A bad-input run: exit 2, one line on stderr containing every piece, no output file.
  std::string expect_bad(const std::string& args, const std::vector<std::string>& pieces) {
    const fs::path out = tmp_.path() / "plan.json";
    const Outcome r = run(args + " --output '" + out.string() + "'");
    EXPECT_EQ(r.rc, 2) << args << "\n" << r.err;
    EXPECT_EQ(std::count(r.err.begin(), r.err.end(), '\n'), 1) << args << "\n" << r.err;
    for (const auto& p : pieces) EXPECT_THAT(r.err, HasSubstr(p)) << args;
    EXPECT_FALSE(fs::exists(out)) << args;
    for (const auto& e : fs::directory_iterator(tmp_.path()))
      EXPECT_EQ(e.path().filename().string().find("plan.json"), std::string::npos) << "left behind: " << e.path();
    return r.err;
  }

  TempDir tmp_;
};

std::set<std::string> candidate_schedules(const json& doc) {
  std::set<std::string> out;
  for (const auto& c : doc.at("candidates")) out.insert(c.at("schedule").get<std::string>());
  return out;
}

// --- the toy example -------------------------------------------------------------------

TEST_F(PlanCli, ToyExampleWithHalfSecondMessagesPicksGroupingOverOneFOneB) {
  const json doc = plan_json("--pipeline " + kToyPipe + " --network configs/examples/toy-net-0.5s.json");
  const json& ch = doc.at("chosen");
  const std::string s = ch.at("schedule");
  EXPECT_TRUE((s == "kfkb" && ch.at("k").get<int>() >= 2) || s == "dapple-b") << ch.dump();
  EXPECT_NE(s, "1f1b");
  EXPECT_EQ(ch.at("predicted_iteration_time_s").get<double>(), 36.0);
  EXPECT_DOUBLE_EQ(ch.at("speedup_over_1f1b").get<double>(), 41.0 / 36.0);
}

TEST_F(PlanCli, ToyExampleWithFreeCommunicationPicksOneFOneB) {
  const json doc = plan_json("--pipeline " + kToyPipe + " --network configs/examples/toy-net-free.json");
  EXPECT_EQ(doc.at("chosen").at("schedule"), "1f1b") << doc.at("chosen").dump();
  EXPECT_EQ(doc.at("chosen").at("predicted_iteration_time_s").get<double>(), 33.0);
  EXPECT_DOUBLE_EQ(doc.at("chosen").at("speedup_over_1f1b").get<double>(), 1.0);
}

TEST_F(PlanCli, BaselinesAlwaysAppear) {
  const std::vector<std::pair<std::string, std::string>> runs = {
      {kToyPipe, "configs/examples/toy-net-0.5s.json"}, {kToyPipe, "configs/examples/toy-net-free.json"},
      {kToyPipe, "configs/examples/toy-net-2s.json"},   {kGpt, "configs/networks/eth-25g.json"},
      {kGpt, kPreempted},                               {kGpt, "configs/networks/roce-100g.json"},
      {kUnet, "configs/networks/eth-25g.json"},         {kUnet, kPreempted}};
  for (const auto& [pipe, net] : runs) {
    const json doc = plan_json("--pipeline " + pipe + " --network " + net);
    const auto names = candidate_schedules(doc);
    for (const char* b : {"1f1b", "dapple-b", "gpipe"}) EXPECT_TRUE(names.count(b)) << pipe << " " << net << ": " << b;
    int chosen = 0;
    for (const auto& c : doc.at("candidates")) chosen += c.at("status") == "chosen";
    EXPECT_EQ(chosen, 1) << pipe << " " << net;
  }
  // Also when the limit leaves gpipe (and more) infeasible.
  const json doc = plan_json("--pipeline " + kGpt + " --network " + kPreempted + " --memory-limit 2e10");
  const auto names = candidate_schedules(doc);
  for (const char* b : {"1f1b", "dapple-b", "gpipe"}) EXPECT_TRUE(names.count(b)) << b;
}

TEST_F(PlanCli, HumanTableMarksTheChosenPlan) {
  const Outcome r = run("plan --pipeline " + kToyPipe + " --network configs/examples/toy-net-free.json");
  EXPECT_EQ(r.rc, 0) << r.err;
  EXPECT_THAT(r.out, HasSubstr("* 1f1b"));
  EXPECT_THAT(r.out, HasSubstr("chosen"));
  EXPECT_THAT(r.out, HasSubstr("gpipe"));
  EXPECT_THAT(r.out, HasSubstr("dapple-b"));
}

// --- infeasible memory limit --------------------------------------------------------

TEST_F(PlanCli, InfeasibleMemoryLimit) {
  const std::string err =
      expect_bad("plan --pipeline " + kGpt + " --network " + kPreempted + " --memory-limit 1000",
                 {"adagrouper plan", kGpt, "memory_limit_bytes", "smallest", "stage"});
  // The smallest memory any plan needs, and where: computed with the library.
  const sim::Pipeline p = sim::load_pipeline(kRoot / kGpt);
  const sim::Network net = sim::load_network(kRoot / kPreempted, p.num_stages());
  double least = 1e300;
  int stage = -1;
  for (int b = p.min_micro_batch_size(); b <= p.max_micro_batch_size(); ++b) {
    if (p.global_batch_size % b) continue;
    const int M = p.global_batch_size / b;
    std::vector<sim::Schedule> all = {sim::make_named("1f1b", 8, M, std::nullopt),
                                      sim::make_named("dapple-b", 8, M, std::nullopt),
                                      sim::make_named("gpipe", 8, M, std::nullopt)};
    for (int k = 1; k <= M; ++k) all.push_back(sim::make_kfkb(8, M, k));
    for (const auto& sch : all) {
      const auto m = planner::memory_model(p.at(b), sch, net);
      const auto it = std::max_element(m.begin(), m.end());
      if (*it < least) least = *it, stage = static_cast<int>(it - m.begin());
    }
  }
  EXPECT_THAT(err, HasSubstr(fmt::format("{}", least))) << "smallest need " << least;
  EXPECT_THAT(err, HasSubstr(fmt::format("stage {}", stage)));
  // Also on stdout-only runs: nothing printed on stdout.
  const Outcome r = run("plan --pipeline " + kToyPipe + " --network configs/examples/toy-net-free.json --memory-limit 1000 --json");
  EXPECT_EQ(r.rc, 2);
  EXPECT_EQ(r.out, "");
  EXPECT_THAT(r.err, HasSubstr(kToyPipe));
}

// --- JSON output ------------------------------------------------------------------------

std::string sha256sum(const fs::path& p) {
  const std::string out = shell("sha256sum '" + p.string() + "'");
  return out.substr(0, 64);
}

// Inputs: paths and sha256 of both files.
void check_plan_inputs(const json& doc, const std::string& pipe, const std::string& net) {
  std::map<std::string, std::string> sha;
  for (const auto& in : doc.at("inputs")) {
    const std::string h = in.at("sha256");
    EXPECT_EQ(h.size(), 64u);
    EXPECT_TRUE(std::all_of(h.begin(), h.end(), [](char c) { return std::isxdigit(c) && !std::isupper(c); })) << h;
    sha[in.at("path").get<std::string>()] = h;
    EXPECT_TRUE(in.contains("role"));
  }
  ASSERT_TRUE(sha.count(pipe)) << doc.at("inputs").dump();
  ASSERT_TRUE(sha.count(net)) << doc.at("inputs").dump();
  EXPECT_EQ(sha[pipe], sha256sum(kRoot / pipe));
  EXPECT_EQ(sha[net], sha256sum(kRoot / net));
}

void check_plan_document(const json& doc, const std::string& pipe, const std::string& net, int S) {
  SCOPED_TRACE(pipe + " " + net);
  EXPECT_EQ(doc.at("schema"), "adagrouper.plan/2");
  EXPECT_TRUE(doc.at("global_batch_size").is_number_integer());
  EXPECT_TRUE(doc.at("memory_limit_bytes").is_number());
  check_plan_inputs(doc, pipe, net);

  // chosen: the fields of docs/formats.md, "Plan JSON".
  const json& ch = doc.at("chosen");
  for (const char* f : {"schedule", "k", "virtual_stages", "split_backward", "w_fill", "max_pending_w",
                        "micro_batch_size", "micro_batches", "predicted_iteration_time_s", "peak_memory_bytes",
                        "speedup_over_1f1b", "status", "reason"})
    EXPECT_TRUE(ch.contains(f)) << f;
  EXPECT_EQ(ch.at("peak_memory_bytes").size(), static_cast<std::size_t>(S));
  EXPECT_EQ(ch.at("micro_batch_size").get<int>() * ch.at("micro_batches").get<int>(),
            doc.at("global_batch_size").get<int>());
  for (const auto& m : ch.at("peak_memory_bytes"))
    EXPECT_LE(m.get<double>(), doc.at("memory_limit_bytes").get<double>());

  // candidates: the fields, statuses, exactly one chosen equal to `chosen`.
  int chosen = 0;
  const std::set<std::string> statuses = {"chosen", "lost", "pruned", "infeasible", "refused"};
  for (const auto& c : doc.at("candidates")) {
    for (const char* f : {"schedule", "k", "virtual_stages", "split_backward", "w_fill", "max_pending_w",
                          "micro_batch_size", "micro_batches", "predicted_iteration_time_s", "peak_memory_bytes",
                          "status", "reason"})
      EXPECT_TRUE(c.contains(f)) << f << " in " << c.dump();
    EXPECT_TRUE(statuses.count(c.at("status").get<std::string>())) << c.dump();
    EXPECT_EQ(c.at("peak_memory_bytes").size(), static_cast<std::size_t>(S));
    if (c.at("status") == "chosen") {
      ++chosen;
      for (const char* f : {"schedule", "k", "micro_batch_size", "micro_batches", "predicted_iteration_time_s",
                            "peak_memory_bytes"})
        EXPECT_EQ(c.at(f), ch.at(f)) << f;
    }
  }
  EXPECT_EQ(chosen, 1);

  // devices: one program per stage; p2p ops with their stream and fields; every
  // communicator id names exactly one (from, to) pair and direction, and vice versa.
  ASSERT_EQ(doc.at("devices").size(), static_cast<std::size_t>(S));
  std::map<int, std::tuple<int, int>> comm;          // id -> (from, to)
  std::map<std::tuple<int, int>, std::set<int>> ids;  // (from, to) -> ids
  std::map<int, std::pair<int, int>> counts;         // id -> (sends, recvs)
  const int M = ch.at("micro_batches");
  for (std::size_t d = 0; d < doc.at("devices").size(); ++d) {
    const json& dev = doc.at("devices")[d];
    EXPECT_EQ(dev.at("stage").get<int>(), static_cast<int>(d));
    int compute = 0;
    for (const auto& op : dev.at("program")) {
      const std::string kind = op.at("op");
      EXPECT_TRUE(op.contains("micro_batch")) << op.dump();
      EXPECT_TRUE(op.contains("model_stage")) << op.dump();
      if (kind == "forward" || kind == "backward") {
        ++compute;
        continue;
      }
      ASSERT_TRUE(kind == "send" || kind == "recv") << op.dump();
      EXPECT_EQ(op.at("stream"), kind) << op.dump();
      for (const char* f : {"peer", "bytes", "tag", "communicator"}) EXPECT_TRUE(op.contains(f)) << f << op.dump();
      const int peer = op.at("peer"), id = op.at("communicator");
      EXPECT_EQ(std::abs(peer - static_cast<int>(d)), 1) << op.dump();
      const auto pair = kind == "send" ? std::tuple(static_cast<int>(d), peer) : std::tuple(peer, static_cast<int>(d));
      const auto [it, fresh] = comm.emplace(id, pair);
      EXPECT_EQ(it->second, pair) << "communicator " << id << " used for two pairs/directions";
      ids[pair].insert(id);
      (kind == "send" ? counts[id].first : counts[id].second)++;
    }
    EXPECT_EQ(compute, 2 * M);
  }
  for (const auto& [pair, set] : ids)
    EXPECT_EQ(set.size(), 1u) << "pair " << std::get<0>(pair) << "->" << std::get<1>(pair) << " uses several ids";
  for (const auto& [id, c] : counts) {
    EXPECT_EQ(c.first, c.second) << "communicator " << id;
    EXPECT_EQ(c.first, M) << "communicator " << id;
  }
  EXPECT_EQ(comm.size(), static_cast<std::size_t>(2 * (S - 1)));
}

// The programs of a plan across any pair of devices: compute ops with their model stage,
// each (communicator, tag) sent once and received once with the same bytes, every
// communicator used listed with its pair, and the chosen order's compute ops.
void check_plan_programs(const json& doc) {
  std::map<int, std::pair<int, int>> listed;  // id -> (from, to)
  for (const auto& c : doc.at("communicators")) listed[c.at("id").get<int>()] = {c.at("from"), c.at("to")};
  std::map<std::pair<int, int>, std::pair<int, double>> sent, received;  // (communicator, tag) -> (count, bytes)
  const auto& order = doc.at("chosen").at("order");
  for (std::size_t d = 0; d < doc.at("devices").size(); ++d) {
    std::size_t compute = 0;
    for (const auto& op : doc.at("devices")[d].at("program")) {
      const std::string kind = op.at("op");
      EXPECT_TRUE(op.contains("model_stage")) << op.dump();
      if (kind != "send" && kind != "recv") {
        EXPECT_TRUE(kind == "forward" || kind == "backward" || kind == "backward_input" || kind == "backward_weight");
        ++compute;
        continue;
      }
      const int id = op.at("communicator"), peer = op.at("peer");
      ASSERT_TRUE(listed.count(id)) << op.dump();
      const auto pair = kind == "send" ? std::pair(static_cast<int>(d), peer) : std::pair(peer, static_cast<int>(d));
      EXPECT_EQ(listed[id], pair) << op.dump();
      auto& side = (kind == "send" ? sent : received)[{id, op.at("tag").get<int>()}];
      ++side.first;
      side.second = op.at("bytes");
    }
    EXPECT_EQ(compute, order[d].size()) << "device " << d;
  }
  EXPECT_EQ(sent, received);
  for (const auto& [key, c] : sent) EXPECT_EQ(c.first, 1) << "communicator " << key.first << " tag " << key.second;
}

TEST_F(PlanCli, JsonIsStableAndComplete) {
  const std::vector<std::tuple<std::string, std::string, std::string, int>> runs = {
      {kGpt, kPreempted, " --eval-iterations 3", 8},
      {kToyPipe, "configs/examples/toy-net-0.5s.json", "", 4},
      {kUnet, "configs/networks/eth-25g.json", "", 4}};
  for (const auto& [pipe, net, extra, S] : runs) {
    const std::string args = "plan --pipeline " + pipe + " --network " + net + extra + " --json --output ";
    const fs::path o1 = tmp_.path() / "a.json", o2 = tmp_.path() / "b.json";
    const Outcome r1 = run(args + "'" + o1.string() + "'");
    const Outcome r2 = run(args + "'" + o2.string() + "'");
    ASSERT_EQ(r1.rc, 0) << r1.err;
    ASSERT_EQ(r2.rc, 0) << r2.err;
    EXPECT_EQ(r1.out, r2.out) << "stdout differs between runs";
    const std::string f1 = slurp(o1), f2 = slurp(o2);
    EXPECT_FALSE(f1.empty());
    EXPECT_EQ(f1, f2) << "--output differs between runs";
    const json doc = json::parse(f1);
    EXPECT_EQ(doc, json::parse(r1.out));
    check_plan_document(doc, pipe, net, S);
  }
}

// --- help and bad command lines --------------------------------------------------------

TEST_F(PlanCli, HelpMentionsEveryOption) {
  const Outcome r = run("plan --help");
  EXPECT_EQ(r.rc, 0);
  for (const char* s : {"--pipeline", "--network", "--memory-limit", "--global-batch-size", "--iterations",
                        "--start-time", "--output", "--json", "--help", "adagrouper.plan/2", "1f1b", "dapple-b",
                        "gpipe", "kFkB", "--devices", "--families", "--virtual-stages", "--torch-csv",
                        "kfkb-dynamic", "interleaved-1f1b", "looped-bfs", "interleaved-zb", "zbv", "dualpipev",
                        "refused"})
    EXPECT_THAT(r.out, HasSubstr(s)) << s;
  EXPECT_EQ(run("plan -h").rc, 0);
}

TEST_F(PlanCli, BadCommandLines) {
  const std::string p = "--pipeline " + kGpt, n = "--network " + kPreempted;
  expect_bad("plan " + n, {"--pipeline"});
  expect_bad("plan " + p, {"--network"});
  expect_bad("plan " + p + " " + n + " --eval-iterations 0", {"--iterations"});
  expect_bad("plan " + p + " " + n + " --eval-start -1", {"--start-time"});
  expect_bad("plan " + p + " " + n + " --memory-limit -5", {"--memory-limit"});
  expect_bad("plan " + p + " " + n + " --memory-limit 0", {"--memory-limit"});
  expect_bad("plan " + p + " " + n + " --memory-limit abc", {"--memory-limit"});
  expect_bad("plan " + p + " " + n + " --eval-iterations x", {"--iterations"});
  expect_bad("plan " + p + " " + n + " --global-batch-size 0", {"--global-batch-size"});
  // Refused before any candidate is evaluated: b = 1 gives 2^24 micro-batches on 8 stages.
  expect_bad("plan " + p + " " + n + " --global-batch-size 16777216",
             {"--global-batch-size 16777216: micro-batch size 1 gives M = 16777216 micro-batches on 8 stages"});
  expect_bad("plan " + p + " " + n + " --frobnicate", {"--frobnicate"});
  expect_bad("plan --pipeline configs/nope.json " + n, {"configs/nope.json"});
  expect_bad("plan " + p + " --network configs/nope-net.json", {"configs/nope-net.json"});
}

// --- predictions equal `adagrouper simulate` ------------------------------------------------

void expect_predictions_equal_simulate(PlanCli& cli, const json& doc, const std::string& pipe,
                                       const std::string& net, int iterations, double start) {
  int evaluated = 0;
  for (const auto& c : doc.at("candidates")) {
    if (c.at("predicted_iteration_time_s").is_null()) continue;
    ++evaluated;
    const std::string name = c.at("schedule");
    std::string args = fmt::format("simulate --pipeline {} --network {} --schedule {} --micro-batch-size {} -n {} "
                                   "--start-time {} --json",
                                   pipe, net, name, c.at("micro_batch_size").get<int>(), iterations, start);
    if (name == "kfkb") args += fmt::format(" --k {}", c.at("k").get<int>());
    const Outcome r = cli.run(args);
    ASSERT_EQ(r.rc, 0) << args << "\n" << r.err;
    const json s = json::parse(r.out);
    EXPECT_EQ(s.at("iterations").get<int>(), iterations);
    EXPECT_EQ(s.at("mean_iteration_time_s").get<double>(), c.at("predicted_iteration_time_s").get<double>())
        << args;
    if (c.at("status") == "chosen") {
      EXPECT_EQ(s.at("mean_iteration_time_s").get<double>(),
                doc.at("chosen").at("predicted_iteration_time_s").get<double>());
    }
  }
  EXPECT_GE(evaluated, 3);
}

TEST_F(PlanCli, GptOnPreemptedNetworkMatchesSimulate) {
  const json doc = plan_json("--pipeline " + kGpt + " --network " + kPreempted + " --eval-iterations 3");
  ASSERT_TRUE(doc.contains("chosen"));
  const json& ch = doc.at("chosen");
  // The chosen plan with `simulate` directly (the brief's check), then every candidate.
  std::string args = fmt::format("simulate --pipeline {} --network {} --schedule {} --micro-batch-size {} -n 3 --json",
                                 kGpt, kPreempted, ch.at("schedule").get<std::string>(),
                                 ch.at("micro_batch_size").get<int>());
  if (ch.at("schedule") == "kfkb") args += fmt::format(" --k {}", ch.at("k").get<int>());
  const Outcome r = run(args);
  ASSERT_EQ(r.rc, 0) << r.err;
  EXPECT_EQ(json::parse(r.out).at("mean_iteration_time_s").get<double>(),
            ch.at("predicted_iteration_time_s").get<double>());
  expect_predictions_equal_simulate(*this, doc, kGpt, kPreempted, 3, 0);
}

TEST_F(PlanCli, EvalStartMatchesSimulateStartTime) {
  const json doc =
      plan_json("--pipeline " + kUnet + " --network " + kPreempted + " --eval-iterations 2 --eval-start 7.5");
  expect_predictions_equal_simulate(*this, doc, kUnet, kPreempted, 2, 7.5);
}

// --- schedule families and devices ------------------------------------------------------

const std::string kToy8 = "configs/examples/toy-8.json";
const std::string kHalfSecond = "configs/examples/toy-net-0.5s.json";

// The `simulate` options that run a candidate of a plan.
std::string schedule_args(const json& c) {
  const std::string name = c.at("schedule");
  std::string args = fmt::format("--schedule {} --virtual-stages {}", name, c.at("virtual_stages").get<int>());
  if (name == "kfkb") args += fmt::format(" --k {}", c.at("k").get<int>());
  if (c.at("split_backward").get<bool>()) args += " --split-backward";
  if (c.at("w_fill") == "dynamic") args += " --w-fill dynamic";
  if (!c.at("max_pending_w").is_null()) args += fmt::format(" --max-pending-w {}", c.at("max_pending_w").get<int>());
  return args;
}

// Every evaluated candidate of toy-8 on 4 devices is what `simulate` gives on the pipeline
// merged for its v (the chosen one's is the --pipeline-output file).
TEST_F(PlanCli, FamiliesOnDevicesMatchSimulate) {
  const fs::path merged = tmp_.path() / "merged.json";
  const json doc = plan_json("--pipeline " + kToy8 + " --network " + kHalfSecond + " --devices 4 --pipeline-output '" +
                             merged.string() + "'");
  EXPECT_EQ(doc.at("stages"), 4);
  EXPECT_EQ(doc.at("pipeline_stages"), 8);
  const sim::Pipeline p = sim::load_pipeline(kRoot / kToy8);
  std::map<int, fs::path> files;  // v -> the pipeline merged into 4 x v model stages
  for (const int v : {1, 2}) {
    files[v] = tmp_.path() / fmt::format("merged-{}.json", v);
    std::ofstream(files[v]) << planner::pipeline_file_json(planner::merge_model_stages(p, 4 * v)).dump(2);
  }
  std::set<std::string> statuses, families;
  int evaluated = 0;
  for (const auto& c : doc.at("candidates")) {
    statuses.insert(c.at("status").get<std::string>());
    families.insert(c.at("schedule").get<std::string>());
    if (c.at("predicted_iteration_time_s").is_null()) continue;
    ++evaluated;
    const fs::path& pipe = c.at("status") == "chosen" ? merged : files.at(c.at("virtual_stages").get<int>());
    const std::string args = fmt::format("simulate --pipeline '{}' --network {} {} --micro-batch-size {} --json",
                                         pipe.string(), kHalfSecond, schedule_args(c),
                                         c.at("micro_batch_size").get<int>());
    const Outcome r = run(args);
    ASSERT_EQ(r.rc, 0) << args << "\n" << r.err;
    const json sum = json::parse(r.out);
    EXPECT_EQ(sum.at("mean_iteration_time_s").get<double>(), c.at("predicted_iteration_time_s").get<double>())
        << args;
    for (std::size_t d = 0; d < 4; ++d)
      EXPECT_EQ(sum.at("per_stage")[d].at("peak_memory_bytes"), c.at("simulated_peak_memory_bytes")[d]) << args;
  }
  EXPECT_GE(evaluated, 10);
  for (const char* f : {"kfkb", "interleaved-1f1b", "looped-bfs", "interleaved-zb", "zbv", "dualpipev"})
    EXPECT_TRUE(families.count(f)) << f;
  check_plan_programs(doc);
}

// `simulate --plan` runs exactly what the plan evaluated: the chosen candidate and every
// other evaluated one (--candidate I) give the plan's predictions, on the plan's own
// inputs by default and on the merged pipeline of a --devices plan.
TEST_F(PlanCli, SimulatePlanRunsWhatThePlanEvaluated) {
  const fs::path toy_plan = tmp_.path() / "toy-plan.json";
  ASSERT_EQ(run("plan --pipeline " + kToyPipe + " --network " + kHalfSecond + " --eval-iterations 2 --eval-start 0.7 "
                "--output '" + toy_plan.string() + "'").rc, 0);
  const json toy = json::parse(clirunner::slurp(toy_plan));
  Outcome r = run("simulate --plan '" + toy_plan.string() + "' --json");
  ASSERT_EQ(r.rc, 0) << r.err;
  json sum = json::parse(r.out);
  EXPECT_EQ(sum.at("mean_iteration_time_s"), toy.at("chosen").at("predicted_iteration_time_s"));
  EXPECT_EQ(sum.at("iterations"), 2);
  EXPECT_EQ(sum.at("start_time_s"), 0.7);

  const fs::path merged = tmp_.path() / "merged.json", plan = tmp_.path() / "plan.json";
  ASSERT_EQ(run("plan --pipeline " + kToy8 + " --network " + kHalfSecond + " --devices 4 --families all " +
                "--virtual-stages 1 --pipeline-output '" + merged.string() + "' --output '" + plan.string() + "'")
                .rc,
            0);
  const json doc = json::parse(clirunner::slurp(plan));
  int checked = 0;
  for (std::size_t i = 0; i < doc.at("candidates").size(); ++i) {
    const json& c = doc.at("candidates")[i];
    if (c.at("predicted_iteration_time_s").is_null()) continue;
    r = run(fmt::format("simulate --plan '{}' --candidate {} --pipeline '{}' --json", plan.string(), i,
                        merged.string()));
    ASSERT_EQ(r.rc, 0) << i << ": " << r.err;
    sum = json::parse(r.out);
    EXPECT_EQ(sum.at("mean_iteration_time_s"), c.at("predicted_iteration_time_s")) << c.dump();
    ++checked;
  }
  EXPECT_GE(checked, 10);
  // The plan's own pipeline input (8 model stages) is merged as the planner merged it.
  r = run("simulate --plan '" + plan.string() + "' --json");
  ASSERT_EQ(r.rc, 0) << r.err;
  EXPECT_EQ(json::parse(r.out).at("mean_iteration_time_s"), doc.at("chosen").at("predicted_iteration_time_s"));
  // Bad combinations: one line, exit 2.
  for (const auto& [args, piece] : std::vector<std::pair<std::string, std::string>>{
           {"--plan '" + plan.string() + "' --pipeline configs/fidelity/pipeline-2.json --json",
            "the plan runs 4 model stages (4 stages x v = 1), the pipeline configs/fidelity/pipeline-2.json has 2"},
           {"--plan '" + plan.string() + "' --pipeline '" + merged.string() + "' --candidate 999", "--candidate: 999"},
           {"--plan '" + plan.string() + "' --schedule 1f1b", "--schedule: the plan (--plan) gives it"},
           {"--pipeline " + kToyPipe + " --network " + kHalfSecond + " --schedule 1f1b -b 1 --candidate 1",
            "--candidate: only with --plan"}}) {
    r = run("simulate " + args);
    EXPECT_EQ(r.rc, 2) << args;
    EXPECT_THAT(r.err, HasSubstr(piece)) << args;
    EXPECT_EQ(std::count(r.err.begin(), r.err.end(), '\n'), 1) << r.err;
  }
}

// A plan moved with its inputs finds them beside itself: `simulate --plan` and the
// replay resolve an input's relative path from the plan's folder when it does not
// exist from where they run.
TEST_F(PlanCli, SimulatePlanFindsItsInputsBesideIt) {
  const fs::path made = tmp_.path() / "made.json", moved = tmp_.path() / "moved";
  ASSERT_EQ(run("plan --pipeline " + kToyPipe + " --network " + kHalfSecond + " --output '" + made.string() + "'").rc,
            0);
  json doc = json::parse(clirunner::slurp(made));
  fs::create_directories(moved);
  for (json& in : doc.at("inputs")) {
    const fs::path from = in.at("path").get<std::string>();
    fs::copy_file(from.is_absolute() ? from : SOURCE_ROOT / from, moved / from.filename());
    in["path"] = from.filename().string();  // exists beside the moved plan only
  }
  std::ofstream(moved / "plan.json") << doc.dump();
  Outcome r = run("simulate --plan '" + (moved / "plan.json").string() + "' --json");
  ASSERT_EQ(r.rc, 0) << r.err;
  EXPECT_EQ(json::parse(r.out).at("mean_iteration_time_s"), doc.at("chosen").at("predicted_iteration_time_s"));
  // Missing in both places: the loader names the file.
  fs::remove(moved / fs::path(doc.at("inputs")[0].at("path").get<std::string>()));
  r = run("simulate --plan '" + (moved / "plan.json").string() + "' --json");
  EXPECT_EQ(r.rc, 2);
  EXPECT_EQ(std::count(r.err.begin(), r.err.end(), '\n'), 1) << r.err;
}

// --torch-csv writes the order the chosen plan runs (with dynamic W fill, the evaluated
// run's): `simulate` on it gives the plan's numbers.
TEST_F(PlanCli, TorchCsvImportsBackToTheSameNumbers) {
  const std::vector<std::tuple<std::string, std::string, std::string>> runs = {
      {kToyPipe, kHalfSecond, ""},
      {kToyPipe, kHalfSecond, " --families kfkb-dynamic"},
      {kToy8, kHalfSecond, " --devices 4 --families zbv,interleaved-zb,dualpipev --virtual-stages 2"},
      {kToy8, "configs/examples/toy-net-2s.json", " --devices 4"},
      {kUnet, "configs/networks/eth-25g.json", " --families all"}};
  std::set<std::string> w_fills;
  for (const auto& [pipe, net, extra] : runs) {
    SCOPED_TRACE(pipe + extra);
    const fs::path csv = tmp_.path() / "order.csv", merged = tmp_.path() / "pipe.json";
    const bool devices = extra.find("--devices") != std::string::npos;
    const json doc = plan_json("--pipeline " + pipe + " --network " + net + extra + " --torch-csv '" + csv.string() +
                               "'" + (devices ? " --pipeline-output '" + merged.string() + "'" : ""));
    const json& ch = doc.at("chosen");
    w_fills.insert(ch.at("w_fill").get<std::string>());
    const Outcome r = run(fmt::format("simulate --pipeline '{}' --network {} --schedule-file '{}' --micro-batch-size {} "
                                      "--json",
                                      devices ? merged.string() : pipe, net, csv.string(),
                                      ch.at("micro_batch_size").get<int>()));
    ASSERT_EQ(r.rc, 0) << r.err;
    const json sum = json::parse(r.out);
    EXPECT_EQ(sum.at("mean_iteration_time_s").get<double>(), ch.at("predicted_iteration_time_s").get<double>());
    for (std::size_t d = 0; d < ch.at("simulated_peak_memory_bytes").size(); ++d)
      EXPECT_EQ(sum.at("per_stage")[d].at("peak_memory_bytes"), ch.at("simulated_peak_memory_bytes")[d]);
  }
  EXPECT_EQ(w_fills, (std::set<std::string>{"dynamic", "static"}));
}

// `simulate --plan --recorded-order` runs the order of the plan's device programs in every
// iteration: the plan's --torch-csv as a schedule file, to the bit. Under constant rates
// that is what dynamic W fill does in every iteration; on a link whose rate changes the
// fill places the W ops anew in each iteration, and the fixed order runs differently.
TEST_F(PlanCli, SimulateRecordedOrderRunsThePlansPrograms) {
  const fs::path csv = tmp_.path() / "order.csv", merged = tmp_.path() / "pipe.json";
  const fs::path plan = tmp_.path() / "planned.json", stepped = tmp_.path() / "stepped.json";
  std::ofstream(stepped) << R"({"latency_s": 0, "default": {"points": [[0, 1.0], [20, 0.25]], "repeat_s": 40}})";
  for (const std::string& net : {std::string("configs/examples/toy-net-2s.json"), stepped.string()}) {
    SCOPED_TRACE(net);
    ASSERT_EQ(run(fmt::format("plan --pipeline {} --network '{}' --devices 4 --memory-limit 1e12 --iterations 4 "
                              "--torch-csv '{}' --pipeline-output '{}' --output '{}'",
                              kToy8, net, csv.string(), merged.string(), plan.string()))
                  .rc,
              0);
    const json doc = json::parse(clirunner::slurp(plan));
    ASSERT_EQ(doc.at("chosen").at("w_fill"), "dynamic");
    Outcome r = run("simulate --plan '" + plan.string() + "' --recorded-order --json");
    ASSERT_EQ(r.rc, 0) << r.err;
    const json recorded = json::parse(r.out);
    r = run(fmt::format("simulate --pipeline '{}' --network '{}' --schedule-file '{}' -b {} --iterations 4 --json",
                        merged.string(), net, csv.string(), doc.at("chosen").at("micro_batch_size").get<int>()));
    ASSERT_EQ(r.rc, 0) << r.err;
    EXPECT_EQ(recorded.at("iteration_times_s"), json::parse(r.out).at("iteration_times_s"));
    EXPECT_EQ(recorded.at("schedule"), "kfkb");
    EXPECT_EQ(recorded.at("k"), doc.at("chosen").at("k"));
    // The plan's deployed prediction is this run.
    EXPECT_EQ(recorded.at("mean_iteration_time_s"), doc.at("chosen").at("deployed_iteration_time_s"));
    const double dynamic = doc.at("chosen").at("predicted_iteration_time_s");
    if (net == stepped.string())
      EXPECT_NE(recorded.at("mean_iteration_time_s").get<double>(), dynamic);
    else
      EXPECT_EQ(recorded.at("mean_iteration_time_s").get<double>(), dynamic);
  }
  // Every other candidate runs the programs the plan would hold for it: its own order, or
  // with dynamic W fill the deployed one. Without a plan there is nothing recorded.
  const json doc = json::parse(clirunner::slurp(plan));
  int dynamic_others = 0;
  for (std::size_t i = 0; i < doc.at("candidates").size(); ++i) {
    const json& c = doc.at("candidates")[i];
    if (c.at("predicted_iteration_time_s").is_null()) continue;
    SCOPED_TRACE(c.dump());
    const Outcome r = run(fmt::format("simulate --plan '{}' --candidate {} --recorded-order --json", plan.string(), i));
    ASSERT_EQ(r.rc, 0) << r.err;
    const bool dynamic = c.contains("deployed_iteration_time_s");
    dynamic_others += dynamic && c.at("status") != "chosen";
    EXPECT_EQ(json::parse(r.out).at("mean_iteration_time_s"),
              c.at(dynamic ? "deployed_iteration_time_s" : "predicted_iteration_time_s"));
  }
  EXPECT_GT(dynamic_others, 8);
  expect_bad("simulate --pipeline " + kToyPipe + " --network " + kHalfSecond + " --schedule 1f1b -b 1 --recorded-order",
             {"--recorded-order: only with --plan"});
  // Programs that do not list every op once, or an entry that is no op, name the field.
  json edited = doc;
  edited["devices"][0]["program"][0]["op"] = "jump";
  const fs::path bad = tmp_.path() / "edited.json";
  std::ofstream(bad) << edited.dump();
  expect_bad("simulate --plan '" + bad.string() + "' --recorded-order", {"devices[0].program[0].op", "jump"});
  // Without the flag the programs are not read: the candidate's schedule runs.
  EXPECT_EQ(run("simulate --plan '" + bad.string() + "' --json").rc, 0);
  edited = doc;
  auto& program = edited["devices"][0]["program"];
  for (std::size_t i = 0; i < program.size(); ++i)
    if (program[i].at("op") == "forward") {
      program.erase(program.begin() + static_cast<std::ptrdiff_t>(i));
      break;
    }
  std::ofstream(bad) << edited.dump();
  expect_bad("simulate --plan '" + bad.string() + "' --recorded-order", {bad.string() + ": devices", "F0"});
}

// A plan made with --comm-profile evaluated its candidates on the measured rates: the
// order it would record for a dynamic candidate it did not choose is made on them too,
// whatever network the recorded order then runs on. Here the input link steps from 1 to
// 0.25 bytes/s and every channel was measured at a constant 0.25 (toy-net-2s.json), where
// the fill puts the W ops elsewhere.
TEST_F(PlanCli, RecordedOrderOfAProfiledPlanIsMadeOnTheMeasuredRates) {
  std::string samples = "channel,time_s,bytes,duration_s\n";
  for (const char* ch : {"0->1", "1->2", "2->3", "1->0", "2->1", "3->2"})
    for (int t = 0; t < 10; ++t) samples += fmt::format("{},{},0.5,2.0\n", ch, t);
  const fs::path csv = tmp_.path() / "samples.csv", plan = tmp_.path() / "profiled.json";
  const fs::path order = tmp_.path() / "order.csv";
  std::ofstream(csv) << samples;
  ASSERT_EQ(run(fmt::format("plan --pipeline {} --network configs/examples/toy-net-stepped.json --devices 4 "
                            "--memory-limit 1e12 --iterations 4 --comm-profile '{}' --output '{}'",
                            kToy8, csv.string(), plan.string()))
                .rc,
            0);
  const json doc = json::parse(clirunner::slurp(plan));
  int others = 0;
  for (std::size_t i = 0; i < doc.at("candidates").size(); ++i) {
    const json& c = doc.at("candidates")[i];
    if (!c.contains("deployed_iteration_time_s") || c.at("status") == "chosen") continue;
    SCOPED_TRACE(c.dump());
    ++others;
    std::vector<std::string> orders;
    for (const std::string net : {"", " --network configs/examples/toy-net-2s.json"}) {
      const Outcome r = run(fmt::format("simulate --plan '{}' --candidate {} --recorded-order --json --export-schedule "
                                        "'{}'{}",
                                        plan.string(), i, order.string(), net));
      ASSERT_EQ(r.rc, 0) << r.err;
      orders.push_back(clirunner::slurp(order));
      // On the measured rates themselves the order runs the plan's deployed time.
      if (!net.empty()) {
        EXPECT_EQ(json::parse(r.out).at("mean_iteration_time_s"), c.at("deployed_iteration_time_s"));
      }
    }
    EXPECT_EQ(orders[0], orders[1]);
  }
  EXPECT_GT(others, 8);
  // Without the plan's network input a dynamic candidate's order cannot be made; a static
  // candidate's is its own, and runs on the network given.
  json moved = doc;
  for (json& in : moved.at("inputs"))
    if (in.at("role") == "network") in["path"] = "gone/net.json";
  const fs::path moved_path = tmp_.path() / "moved.json";
  std::ofstream(moved_path) << moved.dump();
  int statics = 0, dynamics = 0;
  for (std::size_t i = 0; i < doc.at("candidates").size(); ++i) {
    const json& c = doc.at("candidates")[i];
    if (c.at("status") == "chosen" || c.at("predicted_iteration_time_s").is_null()) continue;
    const std::string args = fmt::format("simulate --plan '{}' --candidate {} --recorded-order --network "
                                         "configs/examples/toy-net-2s.json",
                                         moved_path.string(), i);
    if (c.at("w_fill") == "dynamic") {
      if (dynamics++ == 0) expect_bad(args, {moved_path.string(), "inputs: the network gone/net.json is not there"});
    } else if (statics++ == 0) {
      EXPECT_EQ(run(args).rc, 0) << args;
    }
  }
  EXPECT_GT(statics * dynamics, 0);
  // The measured rates are read like any other field.
  for (const auto& [field, value] : {std::pair{"to", json(0)}, std::pair{"from", json(9)},
                                      std::pair{"rate_bytes_per_s", json(-1.0)}}) {
    json edited = doc;
    edited["comm_profile"]["channels"][0][field] = value;
    const fs::path bad = tmp_.path() / "bad.json";
    std::ofstream(bad) << edited.dump();
    expect_bad("simulate --plan '" + bad.string() + "' --candidate 12 --recorded-order",
               {bad.string(), "comm_profile.channels[0]." + std::string(field)});
  }
}

// Every dynamic candidate carries its deployed time (over one iteration the fill's own);
// --rank-by deployed chooses by it, and each ranking names the other's choice.
TEST_F(PlanCli, RankByDeployedRanksDynamicFillByTheOrderItsProgramsFix) {
  const fs::path stepped = tmp_.path() / "stepped.json", plan = tmp_.path() / "planned.json";
  std::ofstream(stepped) << R"({"latency_s": 0, "default": {"points": [[0, 1.0], [20, 0.25]], "repeat_s": 40}})";
  const std::string base = fmt::format("plan --pipeline {} --network '{}' --devices 4 --memory-limit 1e12 ", kToy8,
                                       stepped.string());
  std::map<std::string, json> docs;
  for (const std::string rank_by : {"predicted", "deployed"})
    for (const int n : {1, 4}) {
      const std::string args = fmt::format("{}--iterations {} --rank-by {} --json", base, n, rank_by);
      SCOPED_TRACE(args);
      const Outcome r = run(args);
      ASSERT_EQ(r.rc, 0) << r.err;
      const json doc = json::parse(r.out);
      EXPECT_EQ(doc.at("evaluation").at("rank_by"), rank_by);
      double best = 1e300;
      for (const json& c : doc.at("candidates")) {
        if (c.at("predicted_iteration_time_s").is_null()) continue;
        const bool dynamic = c.at("w_fill") == "dynamic";
        ASSERT_EQ(c.contains("deployed_iteration_time_s"), dynamic) << c.dump();
        if (dynamic && n == 1) {
          EXPECT_EQ(c.at("deployed_iteration_time_s"), c.at("predicted_iteration_time_s"));
        }
        const json& t = dynamic && rank_by == "deployed" ? c.at("deployed_iteration_time_s")
                                                         : c.at("predicted_iteration_time_s");
        best = std::min(best, t.get<double>());
      }
      const json& chosen = doc.at("chosen");
      const json& t = rank_by == "deployed" ? chosen.at("deployed_iteration_time_s")
                                            : chosen.at("predicted_iteration_time_s");
      EXPECT_EQ(t.get<double>(), best);
      docs[fmt::format("{} {}", rank_by, n)] = doc;
    }
  // Over one iteration the rankings agree; over four on the stepped link they do not.
  EXPECT_EQ(docs["predicted 1"].at("chosen").at("order"), docs["deployed 1"].at("chosen").at("order"));
  EXPECT_EQ(docs["deployed 1"].at("chosen").at("reason"), "fastest feasible as deployed");
  EXPECT_NE(docs["predicted 4"].at("chosen").at("k"), docs["deployed 4"].at("chosen").at("k"));
  Outcome r = run(base + "--iterations 4");
  ASSERT_EQ(r.rc, 0) << r.err;
  EXPECT_NE(r.out.find("a runtime that executes them runs"), std::string::npos) << r.out;
  EXPECT_NE(r.out.find("--rank-by deployed would choose"), std::string::npos) << r.out;
  // The deployed choice's own programs run what it was ranked by.
  ASSERT_EQ(run(base + "--iterations 4 --rank-by deployed --output '" + plan.string() + "'").rc, 0);
  r = run("simulate --plan '" + plan.string() + "' --recorded-order --json");
  ASSERT_EQ(r.rc, 0) << r.err;
  EXPECT_EQ(json::parse(r.out).at("mean_iteration_time_s"), docs["deployed 4"].at("chosen").at("deployed_iteration_time_s"));
  expect_bad(base + "--rank-by fastest", {"--rank-by", "predicted or deployed", "fastest"});
}

TEST_F(PlanCli, FamiliesWithBadCombinationsAreOneLineErrors) {
  const std::string p = "--pipeline " + kToy8, n = "--network " + kHalfSecond;
  expect_bad("plan " + p + " " + n + " --devices 3", {"--devices", kToy8, "8 model stages", "3"});
  expect_bad("plan " + p + " " + n + " --devices 0", {"--devices"});
  expect_bad("plan " + p + " " + n + " --families zbv,warp", {"--families", "warp"});
  expect_bad("plan " + p + " " + n + " --devices 4 --virtual-stages 3", {"--virtual-stages", "3"});
  expect_bad("plan " + p + " " + n + " --devices 4 --virtual-stages x", {"--virtual-stages"});
  expect_bad("plan " + p + " " + n + " --pipeline-output x.json", {"--pipeline-output"});
  expect_bad("plan --model configs/models/sd-unet.json --stages 4 --devices 2 --network configs/networks/eth-25g.json",
             {"--devices"});
}

// From a model: each v cuts the layers into S x v model stages planned on S devices.
TEST_F(PlanCli, ModelWithFamiliesCutsForEveryVirtualStageCount) {
  const json doc = plan_json("--model configs/models/sd-unet.json --stages 4 --network configs/networks/eth-25g.json "
                             "--families all");
  EXPECT_EQ(doc.at("stages"), 4);
  std::set<int> vs;
  for (const auto& t : doc.at("partition").at("trials")) vs.insert(t.at("virtual_stages").get<int>());
  EXPECT_EQ(vs, (std::set<int>{1, 2}));
  const int v = doc.at("chosen").at("virtual_stages");
  EXPECT_EQ(doc.at("pipeline_stages").get<int>() % 4, 0);
  EXPECT_LE(v, doc.at("pipeline_stages").get<int>() / 4);
  check_plan_programs(doc);
}

}  // namespace
}  // namespace plantest
