// End-to-end tests of `adagrouper trace` (synth, import, stats, slice) and of
// `adagrouper simulate` on networks that use trace files and patterns.
#include <sys/wait.h>

#include <unistd.h>

#include <algorithm>
#include <cstdio>
#include <fstream>
#include <sstream>
#include <string>
#include <vector>

#include "../common/cli_runner.h"

#include <gmock/gmock.h>
#include <gtest/gtest.h>
#include <nlohmann/json.hpp>

#include "helpers.h"

namespace tracestest {
namespace {

using testing::HasSubstr;
using testing::StartsWith;


using clirunner::Outcome;
using clirunner::slurp;

class TraceCli : public ::testing::Test {
 protected:
  // Runs `adagrouper ARGS` from the source root.
  Outcome run(const std::string& args) { return clirunner::run_adagrouper(args, dir_.path()); }

  std::string path(const std::string& name) { return (dir_.path() / name).string(); }

  // A bad-input run: exit 2, one line on stderr containing every piece, no output file.
  void expect_bad(const std::string& args, const std::vector<std::string>& pieces) {
    const std::string out = path("out.json");
    const Outcome r = run(args + " --output '" + out + "'");
    EXPECT_EQ(r.rc, 2) << args << "\n" << r.err;
    EXPECT_EQ(std::count(r.err.begin(), r.err.end(), '\n'), 1) << r.err;
    for (const auto& p : pieces) EXPECT_THAT(r.err, HasSubstr(p)) << args;
    EXPECT_FALSE(fs::exists(out)) << args;
    for (const auto& e : fs::directory_iterator(dir_.path()))
      EXPECT_EQ(e.path().string().find(".tmp."), std::string::npos) << "temporary left: " << e.path();
  }

  TempDir dir_;
};

TEST_F(TraceCli, HelpOfEveryCommandHasExamples) {
  for (const char* sub : {"", " synth", " import", " stats", " slice"}) {
    const Outcome r = run(std::string("trace") + sub + " --help");
    EXPECT_EQ(r.rc, 0) << sub;
    EXPECT_THAT(r.out, HasSubstr("Examples:")) << sub;
    EXPECT_THAT(r.out, StartsWith("Usage: adagrouper trace")) << sub;
  }
  const Outcome top = run("--help");
  EXPECT_THAT(top.out, HasSubstr("  trace "));
}

TEST_F(TraceCli, SynthPeriodicToJsonAndCsv) {
  const Outcome r = run("trace synth periodic --high 2.8e9 --low 0.35e9 --period-s 10 --low-fraction 0.4 --output '" +
                        path("p.json") + "'");
  ASSERT_EQ(r.rc, 0) << r.err;
  EXPECT_THAT(r.out, HasSubstr("repeats every 10 s"));
  const auto doc = nlohmann::json::parse(slurp(path("p.json")));
  EXPECT_EQ(doc["points"], nlohmann::json::parse("[[0.0, 2.8e9], [6.0, 3.5e8]]"));
  EXPECT_EQ(doc["repeat_s"], 10.0);
  EXPECT_EQ(doc["unit"], "bytes_per_s");
  const Outcome csv = run("trace synth periodic --high 2 --low 1 --period-s 4 --low-fraction 0.25 --until-s 9");
  ASSERT_EQ(csv.rc, 0) << csv.err;
  EXPECT_EQ(csv.out, "time_s,value\n0,2\n3,1\n4,2\n7,1\n8,2\n9,2\n");
}

TEST_F(TraceCli, SynthIsDeterministic) {
  const std::string args =
      "trace synth onoff --high 2.8e9 --low 0.2e9 --mean-high-s 8 --mean-low-s 2 --distribution lognormal "
      "--sigma 1 --seed 7 --duration-s 600";
  const Outcome a = run(args), b = run(args), c = run(args + " --seed 8");
  ASSERT_EQ(a.rc, 0) << a.err;
  EXPECT_EQ(a.out, b.out);
  EXPECT_NE(a.out, c.out);
  // And it reads back as the same trace as the JSON form gives.
  const tr::Trace t = parse(a.out, "a.csv");
  const tr::Trace s = spec(R"({"pattern": "onoff", "high": 2.8e9, "low": 0.2e9, "mean_high_s": 8, "mean_low_s": 2,
      "distribution": "lognormal", "sigma": 1, "seed": 7, "duration_s": 600})");
  expect_same(tr::repeat(t, t.span_s), s);
}

TEST_F(TraceCli, SynthStepsContentionAndSpec) {
  const Outcome st = run("trace synth steps --levels 3,1,2 --durations-s 5,2,3 --repeat true --to json");
  ASSERT_EQ(st.rc, 0) << st.err;
  EXPECT_EQ(nlohmann::json::parse(st.out)["repeat_s"], 10.0);
  const Outcome co = run(
      "trace synth contention --base 1e9 --flows 4 --mean-active-s 2 --mean-idle-s 6 --seed 3 --duration-s 100");
  ASSERT_EQ(co.rc, 0) << co.err;
  EXPECT_GT(std::count(co.out.begin(), co.out.end(), '\n'), 10);
  const Outcome sp = run(R"(trace synth --spec '{"pattern": "scale", "factor": 2, "of": {"constant": 3}}')");
  ASSERT_EQ(sp.rc, 0) << sp.err;
  EXPECT_EQ(sp.out, "time_s,value\n0,6\n");
}

TEST_F(TraceCli, ImportEveryFormat) {
  const fs::path data = fs::path(FIXTURES);
  const Outcome i = run("trace import '" + (data / "iperf3-tcp.json").string() + "' --output '" + path("i.json") + "'");
  ASSERT_EQ(i.rc, 0) << i.err;
  const tr::Trace t = tr::load_trace_file(path("i.json")).trace;
  expect_same(t, tr::load_trace_file(data / "iperf3-tcp.json").trace);
  const Outcome s = run("trace import '" + (data / "samples.csv").string() +
                        "' --format samples --latency-s 0.004 --to json");
  ASSERT_EQ(s.rc, 0) << s.err;
  EXPECT_EQ(nlohmann::json::parse(s.out)["points"][0][1], 67108864 / 0.02);
  const Outcome g = run("trace import '" + (data / "link-periodic.profile").string() + "' --output '" + path("g.csv") + "'");
  ASSERT_EQ(g.rc, 0) << g.err;
  EXPECT_THAT(slurp(path("g.csv")), HasSubstr("repeats every 8 s"));
  // Round trip through the command line: CSV -> JSON -> CSV is byte-identical.
  ASSERT_EQ(run("trace import '" + (data / "link.csv").string() + "' --output '" + path("l.json") + "'").rc, 0);
  ASSERT_EQ(run("trace import '" + path("l.json") + "' --output '" + path("l.csv") + "'").rc, 0);
  ASSERT_EQ(run("trace import '" + path("l.csv") + "' --output '" + path("l2.json") + "'").rc, 0);
  EXPECT_EQ(slurp(path("l.json")), slurp(path("l2.json")));
}

TEST_F(TraceCli, StatsTextAndJson) {
  const Outcome r = run(R"(trace stats --spec '{"pattern": "periodic", "high": 4, "low": 1, "period_s": 10, "low_fraction": 0.3}' --end-s 1000 --json)");
  ASSERT_EQ(r.rc, 0) << r.err;
  const auto j = nlohmann::json::parse(r.out);
  EXPECT_NEAR(j["fraction_below"].get<double>(), 0.3, 1e-12);
  EXPECT_EQ(j["episodes"], 100);
  EXPECT_NEAR(j["mean_episode_s"].get<double>(), 3.0, 1e-9);
  EXPECT_NEAR(j["mean"].get<double>(), 0.7 * 4 + 0.3 * 1, 1e-12);
  EXPECT_EQ(j["p5"], 1.0);
  EXPECT_EQ(j["p95"], 4.0);
  EXPECT_EQ(j["threshold"], 2.0);
  const Outcome t = run("trace stats '" + (fs::path(FIXTURES) / "link.csv").string() + "' --threshold 1e9");
  ASSERT_EQ(t.rc, 0) << t.err;
  EXPECT_THAT(t.out, HasSubstr("(csv, 4 points, 4 s long)"));
  EXPECT_THAT(t.out, HasSubstr("episodes         1 (mean 0.75 s)"));
  // Values name their unit: bytes/s with the bit rate links are sold by; a trace of
  // multipliers ("unit": "factor") says so.
  EXPECT_THAT(t.out, HasSubstr("threshold 1e+09 B/s (8 Gbit/s)"));
  const fs::path factor = dir_.write("speed.json", R"({"unit": "factor", "points": [[0, 1], [1, 0.5]], "repeat_s": 2})");
  const Outcome f = run("trace stats '" + factor.string() + "'");
  ASSERT_EQ(f.rc, 0) << f.err;
  EXPECT_THAT(f.out, HasSubstr("min / max        0.5 / 1 (factor)"));
}

TEST_F(TraceCli, Slice) {
  const Outcome r = run("trace slice '" + (fs::path(FIXTURES) / "link.csv").string() + "' --start-s 1 --end-s 3");
  ASSERT_EQ(r.rc, 0) << r.err;
  EXPECT_EQ(r.out, "time_s,value\n0,2800000000\n0.5,350000000\n1.25,1400000000\n2,1400000000\n");
  const Outcome rep = run("trace slice '" + (fs::path(FIXTURES) / "link.csv").string() +
                          "' --start-s 1 --end-s 3 --repeat --to json");
  ASSERT_EQ(rep.rc, 0) << rep.err;
  EXPECT_EQ(nlohmann::json::parse(rep.out)["repeat_s"], 2.0);
}

TEST_F(TraceCli, BadInputIsOneLineAndExit2) {
  const std::string csv = (fs::path(FIXTURES) / "link.csv").string();
  expect_bad("trace synth periodic --high 1 --low 2 --period-s 1 --low-fraction 0.5", {"trace synth: low: low 2 is larger than high 1"});
  expect_bad("trace synth periodic --high 2 --low 1 --period-s 1 --low-fraction 1.5", {"low_fraction: must be in [0, 1], got 1.5"});
  expect_bad("trace synth periodic --high 2 --low 1 --period-s -1 --low-fraction 0.5", {"period_s: must be > 0, got -1"});
  expect_bad("trace synth sawtooth", {"unknown pattern \"sawtooth\""});
  expect_bad("trace synth periodic --high 2 --low 1 --period-s 1 --low-fraction 0.5 --seed 3",
             {"unknown key \"seed\" for periodic"});
  expect_bad("trace synth periodic --high abc", {"--high"});
  expect_bad("trace synth min", {"give it with --spec"});
  expect_bad("trace synth --spec '{\"pattern\": '", {"--spec: invalid JSON"});
  expect_bad("trace import '" + (fs::path(FIXTURES) / "iperf3-error.json").string() + "'",
             {"iperf3 reported an error", "Connection refused"});
  const std::string bad = path("bad.csv");
  std::ofstream(bad) << "time_s,value\n0,1\n1,nan\n";
  expect_bad("trace import '" + bad + "'", {bad + ":3: value: NaN is not allowed"});
  std::ofstream(path("back.csv")) << "0,1\n5,1\n4,2\n";
  expect_bad("trace import '" + path("back.csv") + "'", {"back.csv:3: time_s: 4 goes backwards"});
  std::ofstream(path("empty.csv")) << "# nothing\n";
  expect_bad("trace import '" + path("empty.csv") + "' --format csv", {"the trace is empty"});
  expect_bad("trace import '" + csv + "' --format pcap", {"--input-format: unknown format \"pcap\""});
  expect_bad("trace import '" + csv + "' --to xml", {"--output-format: must be csv or json"});
  expect_bad("trace slice '" + csv + "' --start-s 3 --end-s 2", {"--end-time: must be after the window's start 3 s, got 2"});
  expect_bad("trace slice '" + csv + "'", {"--start-time: missing"});
  expect_bad("trace nonsense", {"unknown command 'nonsense'"});
  expect_bad("trace import /nonexistent/x.csv", {"/nonexistent/x.csv: cannot open file"});
}

TEST_F(TraceCli, SimulateOnShippedPatternNetworks) {
  for (const char* net : {"periodic-pattern-25g", "bursty-25g", "contention-25g"}) {
    const Outcome r = run(std::string("simulate --pipeline configs/pipelines/gpt-8stage-v100.json --network "
                                      "configs/networks/") +
                          net + ".json --schedule kfkb --k 2 -b 1 --iterations 2 --json");
    ASSERT_EQ(r.rc, 0) << net << ": " << r.err;
    EXPECT_GT(nlohmann::json::parse(r.out)["mean_iteration_time_s"].get<double>(), 0) << net;
  }
  // The inline periodic pattern is the points form of preempted-25g.json, so both
  // simulate the same.
  const std::string tail = " --schedule kfkb --k 2 -b 1 --iterations 3 --json";
  const Outcome a = run("simulate --pipeline configs/pipelines/gpt-8stage-v100.json --network "
                        "configs/networks/periodic-pattern-25g.json" + tail);
  const Outcome b = run("simulate --pipeline configs/pipelines/gpt-8stage-v100.json --network "
                        "configs/networks/preempted-25g.json" + tail);
  ASSERT_EQ(a.rc, 0) << a.err;
  EXPECT_EQ(nlohmann::json::parse(a.out)["iteration_times_s"], nlohmann::json::parse(b.out)["iteration_times_s"]);
}

TEST_F(TraceCli, SimulateReportsATraceFileErrorInOneLine) {
  std::ofstream(path("bad.csv")) << "0,1\n1,-2\n";
  std::ofstream(path("net.json")) << R"({"default": {"file": "bad.csv"}})";
  const Outcome r = run("simulate --pipeline configs/examples/toy-4.json --network '" + path("net.json") +
                        "' --schedule 1f1b -b 1");
  EXPECT_EQ(r.rc, 2);
  EXPECT_EQ(r.err, "adagrouper simulate: " + path("bad.csv") + ":2: value: must be >= 0, got -2\n");
}

}  // namespace
}  // namespace tracestest
