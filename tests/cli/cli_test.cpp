// End-to-end tests of the adagrouper command line on the files in configs/.
#include <sys/wait.h>

#include <unistd.h>

#include <algorithm>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <sstream>
#include <string>
#include <vector>

#include "../common/cli_fixture.h"

#include <gmock/gmock.h>
#include <gtest/gtest.h>
#include <fmt/format.h>
#include <nlohmann/json.hpp>

namespace fs = std::filesystem;
using ::testing::HasSubstr;

namespace {


using clirunner::Outcome;
using clirunner::slurp;

class Cli : public clirunner::DirTest {
 protected:
  Cli() : DirTest("adagrouper-cli-") {}

  fs::path write(const std::string& name, const std::string& text) {
    const fs::path p = dir_ / name;
    std::ofstream(p) << text;
    return p;
  }

  // A bad-input run: exit 2, one line on stderr containing every expected piece, and
  // no output file left behind.
  void expect_bad(const std::string& args, const std::vector<std::string>& pieces) {
    expect_refused_without_output(args, pieces, "summary.json");
    expect_no_temporaries();
  }
};

const std::string kToy = "simulate --pipeline configs/examples/toy-4.json ";

std::string toy_pipeline(const std::string& stage0_profile_entry, const std::string& extra = "") {
  const std::string entry =
      R"({"micro_batch_size": 1, "forward_s": 1, "backward_s": 2, "activation_bytes": 10, "output_bytes": 0.5})";
  return R"({"global_batch_size": 8)" + extra + R"(, "stages": [{"profile": [)" + stage0_profile_entry +
         "]}, {\"profile\": [" + entry + "]}]}";
}

}  // namespace

TEST_F(Cli, HelpTeachesEveryOptionAndFormat) {
  Outcome top = run("--help");
  EXPECT_EQ(top.rc, 0);
  EXPECT_THAT(top.out, HasSubstr("simulate"));
  Outcome r = run("simulate --help");
  EXPECT_EQ(r.rc, 0);
  for (const char* s : {"--pipeline", "--network", "--schedule", "--k", "--schedule-file", "--micro-batch-size",
                        "--iterations", "--json", "--output", "--timeline", "pipeline file", "network file",
                        "schedule file", "kfkb", "1f1b", "gpipe", "dapple-b"})
    EXPECT_THAT(r.out, HasSubstr(s));
  EXPECT_EQ(run("frobnicate").rc, 2);
  EXPECT_EQ(run("").rc, 2);
}

TEST_F(Cli, WorkedExamplesOfTheSpec) {
  struct Row {
    const char* schedule;
    double t05, t0, t2;
    std::vector<int> inflight;
  };
  const std::vector<Row> rows = {{"1f1b", 41, 33, 65, {4, 3, 2, 1}},
                                 {"kfkb --k 2", 36, 33, 49, {8, 6, 4, 2}},
                                 {"kfkb --k 4", 36, 33, 48, {8, 8, 8, 4}},
                                 {"gpipe", 36, 33, 52, {8, 8, 8, 8}},
                                 {"dapple-b", 36, 33, 48, {7, 5, 3, 1}}};
  for (const auto& row : rows) {
    for (auto [net, expected] : {std::pair{"toy-net-0.5s", row.t05}, {"toy-net-free", row.t0}, {"toy-net-2s", row.t2}}) {
      const Outcome r = run(kToy + "--network configs/examples/" + net + ".json --schedule " + row.schedule +
                        " --micro-batch-size 1 --json");
      ASSERT_EQ(r.rc, 0) << r.err;
      const auto j = nlohmann::json::parse(r.out);
      EXPECT_DOUBLE_EQ(j["mean_iteration_time_s"].get<double>(), expected) << row.schedule << " " << net;
      std::vector<int> inflight;
      for (const auto& s : j["per_stage"]) inflight.push_back(s["peak_inflight"].get<int>());
      EXPECT_EQ(inflight, row.inflight) << row.schedule;
    }
  }
}

TEST_F(Cli, SummaryJsonHasTheSpecFields) {
  const Outcome r = run(kToy + "--network configs/examples/toy-net-0.5s.json --schedule kfkb --k 2 -b 1 --json");
  ASSERT_EQ(r.rc, 0) << r.err;
  const auto j = nlohmann::json::parse(r.out);
  EXPECT_EQ(j["schedule"], "kfkb");
  EXPECT_EQ(j["k"], 2);
  EXPECT_EQ(j["micro_batch_size"], 1);
  EXPECT_EQ(j["micro_batches"], 8);
  EXPECT_EQ(j["stages"], 4);
  EXPECT_EQ(j["iterations"], 1);
  EXPECT_EQ(j["iteration_times_s"], nlohmann::json::array({36.0}));
  EXPECT_NEAR(j["throughput_samples_per_s"].get<double>(), 8.0 / 36.0, 1e-12);
  EXPECT_NEAR(j["bubble_fraction"].get<double>(), 1.0 - 96.0 / 144.0, 1e-12);
  ASSERT_EQ(j["per_stage"].size(), 4u);
  EXPECT_EQ(j["per_stage"][0]["busy_s"], 24.0);
  EXPECT_EQ(j["per_stage"][0]["peak_memory_bytes"], 2.0e9 + 8 * 1.0e8);  // no gradient waits during F7
  EXPECT_EQ(j["channels"].size(), 6u);
}

TEST_F(Cli, OutputFileEqualsStdoutJsonAndRunsAreByteIdentical) {
  const fs::path out = dir_ / "s.json", t1 = dir_ / "t1.json", t2 = dir_ / "t2.json";
  const std::string args =
      "simulate --pipeline configs/pipelines/unet-4stage-v100.json --network configs/networks/preempted-25g.json "
      "--schedule kfkb --k 2 -b 2 -n 3 --json";
  const Outcome a = run(args + " --output '" + out.string() + "' --timeline '" + t1.string() + "'");
  const Outcome b = run(args + " --timeline '" + t2.string() + "'");
  ASSERT_EQ(a.rc, 0) << a.err;
  ASSERT_EQ(b.rc, 0) << b.err;
  EXPECT_EQ(a.out, b.out);
  EXPECT_EQ(slurp(out), a.out);
  EXPECT_EQ(slurp(t1), slurp(t2));
}

// Both evaluators print the same summary, byte for byte, on a shipped preempted network.
TEST_F(Cli, EvaluatorsAgree) {
  const std::string args =
      "simulate --pipeline configs/pipelines/gpt-8stage-v100.json --network configs/networks/preempted-25g.json "
      "--schedule kfkb --k 4 -b 2 -n 3 --json --evaluator ";
  const Outcome events = run(args + "events"), dataflow = run(args + "dataflow"), automatic = run(args + "auto");
  ASSERT_EQ(events.rc, 0) << events.err;
  ASSERT_EQ(dataflow.rc, 0) << dataflow.err;
  EXPECT_EQ(events.out, dataflow.out);
  EXPECT_EQ(events.out, automatic.out);
  expect_bad(args + "fastest", {"--evaluator", "fastest"});
  expect_bad(args + "dataflow --timeline t.json", {"--evaluator", "timeline"});
}

TEST_F(Cli, TimelineIsAPerfettoTrace) {
  const fs::path tl = dir_ / "tl.json";
  const Outcome r = run(kToy + "--network configs/examples/toy-net-0.5s.json --schedule 1f1b -b 1 -n 2 --timeline '" +
                    tl.string() + "'");
  ASSERT_EQ(r.rc, 0) << r.err;
  const auto j = nlohmann::json::parse(slurp(tl));
  int ops = 0, sends = 0, recvs = 0, counters = 0, names = 0;
  for (const auto& e : j["traceEvents"]) {
    const std::string ph = e["ph"];
    if (ph == "M" && e["name"] == "process_name") ++names;
    if (ph == "X" && e["tid"] == 1) ++ops;
    if (ph == "X" && e.contains("flow_out")) ++sends;
    if (ph == "X" && e.contains("flow_in")) ++recvs;
    if (ph == "C") ++counters;
  }
  EXPECT_EQ(names, 4);
  EXPECT_EQ(ops, 2 * 4 * 8 * 2);
  EXPECT_EQ(sends, 2 * 3 * 8 * 2);
  EXPECT_EQ(recvs, sends);
  EXPECT_GT(counters, 0);
}

TEST_F(Cli, HumanSummary) {
  const Outcome r = run(kToy + "--network configs/examples/toy-net-0.5s.json --schedule kfkb --k 2 -b 1");
  ASSERT_EQ(r.rc, 0) << r.err;
  for (const char* s : {"iteration time", "36", "throughput", "bubble fraction", "33.3%", "peak memory", "busy%"})
    EXPECT_THAT(r.out, HasSubstr(s));
}

TEST_F(Cli, CustomOrderRunsAndDeadlockIsReported) {
  const Outcome ok = run(kToy + "--network configs/examples/toy-net-0.5s.json --schedule-file "
                            "configs/schedules/toy-4-custom.json -b 1 --json");
  ASSERT_EQ(ok.rc, 0) << ok.err;
  EXPECT_EQ(nlohmann::json::parse(ok.out)["schedule"], "custom");
  expect_bad(kToy + "--network configs/examples/toy-net-0.5s.json --schedule-file "
                    "configs/schedules/toy-4-deadlock.json -b 1",
             {"toy-4-deadlock.json", "deadlock", "cycle", "stage 1 waits for"});
}

TEST_F(Cli, ShippedPipelinesRunOnEveryShippedNetwork) {
  for (const char* pipe : {"gpt-8stage-v100", "unet-4stage-v100"}) {
    for (const char* net : {"eth-25g", "roce-100g", "preempted-25g"}) {
      for (const char* sched : {"1f1b", "dapple-b", "gpipe", "kfkb --k 2"}) {
        const Outcome r = run(std::string("simulate --pipeline configs/pipelines/") + pipe + ".json --network configs/networks/" +
                          net + ".json --schedule " + sched + " -b 2 -n 2 --json");
        ASSERT_EQ(r.rc, 0) << pipe << " " << net << " " << sched << ": " << r.err;
        const auto j = nlohmann::json::parse(r.out);
        EXPECT_GT(j["mean_iteration_time_s"].get<double>(), 0.0);
      }
    }
  }
}

TEST_F(Cli, FilesWithUnitsGiveTheSameSummaryAsPlainNumbers) {
  // The shipped network written with units, on a shipped pipeline.
  const std::string gpt = "simulate --pipeline configs/pipelines/gpt-8stage-v100.json --schedule kfkb --k 2 -b 2 -n 3 "
                          "--start-time 4 --json --network configs/networks/";
  const Outcome plain = run(gpt + "preempted-25g.json"), units = run(gpt + "preempted-25g-units.json");
  ASSERT_EQ(plain.rc, 0) << plain.err;
  ASSERT_EQ(units.rc, 0) << units.err;
  EXPECT_EQ(plain.out, units.out);
  // A pipeline and a network with patterns, a speed and per-channel latencies, both ways.
  const std::string pipe_plain = R"({"name": "u", "global_batch_size": 8, "memory_limit_bytes": 34359738368,
    "stages": [{"static_bytes": 6e9, "optimizer_s": 0.2, "profile": [{"micro_batch_size": 1, "forward_s": 0.0125,
      "backward_s": 0.025, "activation_bytes": 1073741824, "output_bytes": 25165824}]},
     {"static_bytes": 4.5e9, "profile": [{"micro_batch_size": 1, "forward_s": 0.0123, "backward_s": 0.0246,
      "activation_bytes": 5e8, "output_bytes": 25165824, "grad_output_bytes": 25165824}]},
     {"static_bytes": 4.5e9, "profile": [{"micro_batch_size": 1, "forward_s": 0.011, "backward_s": 0.022,
      "activation_bytes": 5e8, "grad_output_bytes": 12582912}]}]})";
  const std::string pipe_units = R"({"name": "u", "global_batch_size": 8, "memory_limit_bytes": "32GiB",
    "stages": [{"static_bytes": "6GB", "optimizer_s": "200ms", "profile": [{"micro_batch_size": 1,
      "forward_s": "12.5ms", "backward_s": "25ms", "activation_bytes": "1GiB", "output_bytes": "24MiB"}]},
     {"static_bytes": "4.5 GB", "profile": [{"micro_batch_size": 1, "forward_s": "12300us", "backward_s": "24.6ms",
      "activation_bytes": "500MB", "output_bytes": "24MiB", "grad_output_bytes": "24MiB"}]},
     {"static_bytes": "4.5GB", "profile": [{"micro_batch_size": 1, "forward_s": "11ms", "backward_s": "0.022s",
      "activation_bytes": "0.5GB", "grad_output_bytes": "12MiB"}]}]})";
  const std::string net_plain = R"({"latency_s": 3e-5, "default": {"constant": 1.25e9},
    "channels": [{"from": 1, "to": 2, "latency_s": 1e-4, "rate": {"pattern": "periodic", "high": 3.125e9,
      "low": 3.125e8, "period_s": 0.05, "low_fraction": 0.4, "phase_s": 0.01}}],
    "stages": [{"stage": 2, "speed": {"points": [[0, 1.0], [0.075, 0.5]], "repeat_s": 0.15}}]})";
  const std::string net_units = R"({"latency_s": "30us", "default": {"constant": "10Gbit/s"},
    "channels": [{"from": 1, "to": 2, "latency_s": "0.1ms", "rate": {"pattern": "periodic", "high": "25 Gbps",
      "low": "2.5Gbit/s", "period_s": "50ms", "low_fraction": 0.4, "phase_s": "10ms"}}],
    "stages": [{"stage": 2, "speed": {"points": [["0s", 1.0], ["75ms", 0.5]], "repeat_s": "150ms"}}]})";
  write("p-plain.json", pipe_plain);
  write("p-units.json", pipe_units);
  write("n-plain.json", net_plain);
  write("n-units.json", net_units);
  const auto sim = [&](const char* pipe, const char* net) {
    return run(fmt::format("simulate --pipeline '{}' --network '{}' --schedule kfkb --k 2 -b 1 -n 4 --json",
                           (dir_ / pipe).string(), (dir_ / net).string()));
  };
  const Outcome a = sim("p-plain.json", "n-plain.json"), b = sim("p-units.json", "n-units.json");
  ASSERT_EQ(a.rc, 0) << a.err;
  ASSERT_EQ(b.rc, 0) << b.err;
  EXPECT_EQ(a.out, b.out);
  // A unit of the wrong kind: one line naming the file and the field.
  write("n-bad.json", R"({"latency_s": "30 Mbit"})");
  expect_bad(kToy + "--network '" + (dir_ / "n-bad.json").string() + "' --schedule 1f1b -b 1",
             {"n-bad.json: latency_s: \"30 Mbit\": \"Mbit\" is a size unit, not a time unit (ns, us,"});
}

TEST_F(Cli, BadCommandLine) {
  const std::string net = "--network configs/examples/toy-net-0.5s.json ";
  expect_bad(kToy + net + "--schedule kfkb -b 1", {"--k"});
  expect_bad(kToy + net + "--schedule kfkb --k 0 -b 1", {"--k", "0"});
  expect_bad(kToy + net + "--schedule kfkb --k 9 -b 1", {"--k", "9"});
  expect_bad(kToy + net + "--schedule zigzag -b 1", {"--schedule", "zigzag"});
  expect_bad(kToy + net + "--schedule 1f1b -b 3", {"--micro-batch-size", "does not divide"});
  expect_bad(kToy + net + "--schedule 1f1b -b 2", {"--micro-batch-size", "outside the profile"});
  expect_bad(kToy + net + "--schedule 1f1b", {"--micro-batch-size"});
  expect_bad(kToy + "--schedule 1f1b -b 1", {"--network"});
  expect_bad(kToy + net + "--schedule 1f1b -b 1 --iterations 0", {"--iterations"});
  expect_bad(kToy + "--network configs/nowhere.json --schedule 1f1b -b 1", {"configs/nowhere.json", "cannot open"});
}

TEST_F(Cli, BadPipelineFiles) {
  const std::string tail = " --network configs/examples/toy-net-0.5s.json --schedule 1f1b -b 1";
  auto bad = [&](const std::string& text, const std::vector<std::string>& pieces) {
    const fs::path p = write("pipe.json", text);
    std::vector<std::string> all = pieces;
    all.push_back("pipe.json");
    expect_bad("simulate --pipeline '" + p.string() + "'" + tail, all);
  };
  // toy-net files describe 4 stages; these pipelines have 2, so use a 2-stage network.
  const fs::path net2 = write("net2.json", R"({"default": {"constant": 1}})");
  const std::string tail2 = " --network '" + net2.string() + "' --schedule 1f1b -b 1";
  auto bad2 = [&](const std::string& text, const std::vector<std::string>& pieces) {
    const fs::path p = write("pipe.json", text);
    std::vector<std::string> all = pieces;
    all.push_back("pipe.json");
    expect_bad("simulate --pipeline '" + p.string() + "'" + tail2, all);
  };
  bad(R"({"stages": []})", {"global_batch_size", "missing"});
  bad(R"({"global_batch_size": "eight", "stages": []})", {"global_batch_size", "integer"});
  bad(R"({"global_batch_size": 8, "stages": []})", {"stages"});
  bad2(toy_pipeline(R"({"micro_batch_size": 1, "forward_s": -1, "backward_s": 2, "activation_bytes": 1, "output_bytes": 1})"),
       {"stages[0].profile[0].forward_s", ">= 0"});
  bad2(toy_pipeline(R"({"micro_batch_size": 1, "forward_s": 1, "backward_s": 2, "activation_bytes": -5, "output_bytes": 1})"),
       {"stages[0].profile[0].activation_bytes"});
  bad2(toy_pipeline(R"({"micro_batch_size": 1, "backward_s": 2, "activation_bytes": 1, "output_bytes": 1})"),
       {"stages[0].profile[0].forward_s", "missing"});
  bad2(toy_pipeline(""), {"stages[0].profile", "empty profile"});
  bad2("{\"global_batch_size\": 8,\n \"stages\": [\n  {\"profile\": [}\n]}", {"line 3", "invalid JSON"});
}

TEST_F(Cli, BadNetworkFiles) {
  const std::string head = kToy + "--schedule 1f1b -b 1 --network ";
  auto bad = [&](const std::string& text, const std::vector<std::string>& pieces) {
    const fs::path p = write("net.json", text);
    std::vector<std::string> all = pieces;
    all.push_back("net.json");
    expect_bad(head + "'" + p.string() + "'", all);
  };
  bad(R"({"default": {"constant": -1}})", {"default.constant", ">= 0"});
  bad(R"({"default": {"points": [[1, 1.0]]}})", {"default.points[0]", "start at 0"});
  bad(R"({"default": {"points": [[0, 1.0], [5, 2], [5, 1]]}})", {"default.points[2]", "increasing"});
  bad(R"({"default": {"speed": 3}})", {"default", "unknown rate form"});
  bad(R"({"channels": [{"from": 2, "to": 2, "rate": {"constant": 1}}]})", {"channels[0]", "joins a stage to itself"});
  bad(R"({"channels": [{"from": 3, "to": 4, "rate": {"constant": 1}}]})", {"channels[0].to", "does not exist"});
  bad(R"({"channels": [{"from": 0, "to": 1}, {"from": 0, "to": 1}]})", {"channels[1]", "twice"});
  bad(R"({"stages": [{"stage": 7, "speed": {"constant": 1}}]})", {"stages[0].stage", "does not exist"});
  bad(R"({"latency_s": -0.1})", {"latency_s"});
  bad(R"({"default": {"constant": 1e999}})", {"invalid JSON", "number overflow"});
  bad(R"({"channels": [{"from": 1, "to": 2, "rate": {"points": [[0, 1.0], [3, 0]]}}]})",
      {"channel 1 -> 2", "stays 0 forever"});
  bad(R"({"stages": [{"stage": 2, "speed": {"constant": 0}}]})", {"stage 2", "stays 0 forever"});
}

TEST_F(Cli, BadScheduleFiles) {
  const std::string head = kToy + "--network configs/examples/toy-net-0.5s.json -b 1 --schedule-file ";
  auto order = [](const std::string& stage1) {
    const std::string full = R"(["F0","F1","F2","F3","F4","F5","F6","F7","B0","B1","B2","B3","B4","B5","B6","B7"])";
    return "{\"stages\": [" + full + "," + stage1 + "," + full + "," + full + "]}";
  };
  auto bad = [&](const std::string& text, const std::vector<std::string>& pieces) {
    const fs::path p = write("order.json", text);
    std::vector<std::string> all = pieces;
    all.push_back("order.json");
    expect_bad(head + "'" + p.string() + "'", all);
  };
  bad(order(R"(["F0","F1","F2","F3","F4","F5","F6","F7","B0","B1","B2","B3","B4","B5","B6"])"),
      {"stages[1]", "misses B7"});
  bad(order(R"(["F0","F1","F2","F3","F4","F5","F6","F7","B0","B1","B2","B3","B4","B5","B6","B6"])"),
      {"stages[1][15]", "B6 is repeated"});
  bad(order(R"(["F0","F1","F2","F3","F4","F5","F6","F7","B0","B1","B2","B3","B4","B5","B6","X7"])"),
      {"stages[1][15]", "X7"});
  bad(R"({"stages": [[], []]})", {"stages", "2 stages"});
}

TEST_F(Cli, PlanAndSimulateAcceptTraceFilesAndPatterns) {
  for (const char* net : {"bursty-25g", "contention-25g", "periodic-pattern-25g"}) {
    const Outcome p = run(std::string("plan --pipeline configs/pipelines/gpt-8stage-v100.json --network configs/networks/") +
                          net + ".json --eval-iterations 2 --json");
    ASSERT_EQ(p.rc, 0) << net << ": " << p.err;
    const auto plan = nlohmann::json::parse(p.out);
    const auto& c = plan["chosen"];
    std::string sched = c["schedule"].get<std::string>();
    if (sched == "kfkb") sched += " --k " + std::to_string(c["k"].get<int>());
    const Outcome s = run(std::string("simulate --pipeline configs/pipelines/gpt-8stage-v100.json --network "
                                      "configs/networks/") +
                          net + ".json --schedule " + sched + " -b " +
                          std::to_string(c["micro_batch_size"].get<int>()) + " -n 2 --json");
    ASSERT_EQ(s.rc, 0) << s.err;
    EXPECT_EQ(nlohmann::json::parse(s.out)["mean_iteration_time_s"], c["predicted_iteration_time_s"]) << net;
  }
}

TEST_F(Cli, StageTraceReplaysMeasuredDurations) {
  // 1f1b with free communication takes 33 s; B3 on stage 1 measured at 5 s instead of
  // 2 s delays stage 1 and then stage 0's B3 by 3 s.
  const fs::path st = write("st.csv", "iteration,stage,micro_batch,phase,duration_s\n0,1,3,B,5.0\n");
  const Outcome r = run(kToy + "--network configs/examples/toy-net-free.json --schedule 1f1b -b 1 --json --stage-trace '" +
                        st.string() + "'");
  ASSERT_EQ(r.rc, 0) << r.err;
  const auto j = nlohmann::json::parse(r.out);
  EXPECT_DOUBLE_EQ(j["mean_iteration_time_s"].get<double>(), 36.0);
  EXPECT_DOUBLE_EQ(j["per_stage"][1]["busy_s"].get<double>(), 27.0);
  expect_bad(kToy + "--network configs/examples/toy-net-free.json --schedule 1f1b -b 1 --stage-trace '" +
                 write("bad.csv", "0,9,3,B,5.0\n").string() + "'",
             {"bad.csv:1", "stage 9 does not exist"});
}

TEST_F(Cli, MessageTraceReplaysMeasuredLatencies) {
  // On the free network, every message listed at 0.5 s is the 0.5 s network: 41 s (the
  // SPEC's worked example), with either evaluator; a message the last stage would send
  // forward does not exist.
  std::string rows = "iteration,stage,micro_batch,phase,latency_s\n";
  for (int s = 0; s < 4; ++s)
    for (int m = 0; m < 8; ++m) {
      if (s < 3) rows += fmt::format("0,{},{},F,0.5\n", s, m);
      if (s > 0) rows += fmt::format("0,{},{},backward,0.5\n", s, m);
    }
  const fs::path mt = write("mt.csv", rows);
  for (const char* evaluator : {"events", "dataflow"}) {
    const Outcome r = run(kToy + "--network configs/examples/toy-net-free.json --schedule 1f1b -b 1 --json --evaluator " +
                          evaluator + " --message-trace '" + mt.string() + "'");
    ASSERT_EQ(r.rc, 0) << r.err;
    EXPECT_DOUBLE_EQ(nlohmann::json::parse(r.out)["mean_iteration_time_s"].get<double>(), 41.0) << evaluator;
  }
  expect_bad(kToy + "--network configs/examples/toy-net-free.json --schedule 1f1b -b 1 --message-trace '" +
                 write("bad.csv", "0,1,0,F,0.5\n0,3,2,F,0.5\n").string() + "'",
             {"bad.csv:2", "stage 3 is the last and sends no activation message"});
}

TEST_F(Cli, PlanWithMeasuredTransferSamples) {
  // Every toy channel measured at 2 s per 0.5-byte message (0.25 B/s), on a network
  // file that says transfers are free: the plan must be the one for 2 s messages.
  std::string all = "channel,time_s,bytes,duration_s\n";
  for (const char* ch : {"0->1", "1->2", "2->3", "1->0", "2->1", "3->2"})
    for (int t = 0; t < 12; ++t) all += fmt::format("{},{},0.5,{}\n", ch, t, t < 2 ? 0.1 : 2.0);
  const fs::path samples = write("samples.csv", all);
  const Outcome r = run("plan --pipeline configs/examples/toy-4.json --network configs/examples/toy-net-free.json "
                        "--json --window 10 --comm-profile '" + samples.string() + "'");
  ASSERT_EQ(r.rc, 0) << r.err;
  const auto j = nlohmann::json::parse(r.out);
  const Outcome slow = run("plan --pipeline configs/examples/toy-4.json --network configs/examples/toy-net-2s.json --json");
  ASSERT_EQ(slow.rc, 0) << slow.err;
  const auto k = nlohmann::json::parse(slow.out);
  EXPECT_EQ(j["chosen"]["schedule"], k["chosen"]["schedule"]);
  EXPECT_EQ(j["chosen"]["k"], k["chosen"]["k"]);
  EXPECT_DOUBLE_EQ(j["chosen"]["predicted_iteration_time_s"].get<double>(),
                   k["chosen"]["predicted_iteration_time_s"].get<double>());
  ASSERT_EQ(j["comm_profile"]["channels"].size(), 6u);
  EXPECT_EQ(j["comm_profile"]["channels"][0]["samples"], 10);  // the two fast early samples fall out
  EXPECT_DOUBLE_EQ(j["comm_profile"]["channels"][0]["rate_bytes_per_s"].get<double>(), 0.25);
  EXPECT_EQ(j["inputs"][2]["role"], "comm-profile");
  expect_bad("plan --pipeline configs/examples/toy-4.json --network configs/examples/toy-net-free.json --comm-profile 0-2='" +
                 samples.string() + "'",
             {"samples.csv", "channel"});
  expect_bad("plan --pipeline configs/examples/toy-4.json --network configs/examples/toy-net-free.json --comm-profile '" +
                 write("plain.csv", "0,1,1\n").string() + "'",
             {"plain.csv:1", "no channel column"});
}
