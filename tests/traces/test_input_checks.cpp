// The traces library against bad input: periods and gaps finer than the model resolves,
// times past its range, too many points, typos and duplicate keys in rate forms and JSON
// traces, stage traces (BOM, I and W, what they blame), directories, and one read per
// trace file for a TraceRates.
#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <chrono>
#include <string>

#include "helpers.h"
#include "json_util.h"

namespace tracestest {
namespace {

namespace sim = adagrouper::sim;
using ::testing::AllOf;
using ::testing::HasSubstr;
using json = nlohmann::json;

sim::Network load_net(const fs::path& path, int stages = 3) { return sim::load_network(path, stages, tr::TraceRates()); }

TEST(TraceInputChecks, PeriodsAndGapsBelowOneNanosecondAreRefused) {
  TempDir dir;
  dir.write("link.csv", "time_s,value\n0,1e9\n1,2e9\n");
  // repeat_s 1e-17 hung simulate, plan, adapt and sweep at 100% CPU.
  const auto net = dir.write("n.json", R"({"default": {"file": "link.csv", "repeat_s": 1e-17}})");
  EXPECT_THAT(input_error([&] { load_net(net); }),
              AllOf(HasSubstr("default.repeat_s: 1e-17 s is shorter than the model's time resolution of 1 ns")));
  EXPECT_THAT(input_error([] { parse("0,1\n1e-12,2\n"); }),
              HasSubstr("t.csv:2: time_s: 1e-12 is closer than the model's time resolution of 1 ns"));
  EXPECT_THAT(input_error([] { parse("0,1\n1e17,2\n"); }), HasSubstr("t.csv:2: time_s: 1e+17 s is beyond the"));
  EXPECT_THAT(input_error([] { parse("0,1e-300\n"); }), HasSubstr("t.csv:1: value: 1e-300 is below"));
  EXPECT_THAT(input_error([] { parse("PERIODICITY 1e-17\n0 1\n", "p.profile"); }),
              HasSubstr("p.profile:1: PERIODICITY: 1e-17 s is shorter"));
  EXPECT_THAT(input_error([] { parse(R"({"points": [[0, 1]], "repeat_s": 1e-17})", "p.json"); }),
              HasSubstr("p.json: repeat_s: 1e-17 s is shorter"));
  EXPECT_EQ(input_error([] {
              spec(R"({"pattern": "periodic", "high": 2, "low": 1, "period_s": 1e-17, "low_fraction": 0.5})");
            }),
            "spec.json: period_s: 1e-17 s is shorter than the model's time resolution of 1 ns");
  EXPECT_THAT(input_error([] { spec(R"({"pattern": "steps", "levels": [1, 2], "durations_s": [1, 1e-12]})"); }),
              HasSubstr("durations_s[1]: 1e-12 s is shorter"));
  // A scale that overflows the largest rate: the trace as a whole is checked.
  EXPECT_THAT(input_error([] { spec(R"({"pattern": "scale", "factor": 1e12, "of": {"constant": 1e9}})"); }),
              HasSubstr("spec.json: value 1e+21 is above 1e+18, the largest rate"));
}

TEST(TraceInputChecks, LoopsOverPeriodsAreBounded) {
  // Rounding swallows a 1 ns period at t = 1e9 s: the walk stops with an error.
  const sim::RateTrace r = sim::RateTrace::piecewise({0.0, 5e-10}, {1.0, 2.0}, 1e-9);
  const auto start = std::chrono::steady_clock::now();
  EXPECT_THROW(tr::for_each_piece(r, 1e9, 1e9 + 1, [](double, double, double) {}), std::length_error);
  EXPECT_LT(std::chrono::steady_clock::now() - start, std::chrono::seconds(20));
}

TEST(TraceInputChecks, TooManyPointsAreRefusedBeforeReading) {
  std::string block;
  for (int i = 0; i < 1000; ++i) block += "1\n";
  std::string rows;
  rows.reserve(2 * (tr::kMaxPoints + 2));
  for (std::size_t i = 0; i < tr::kMaxPoints / 1000; ++i) rows += block;
  rows += "1\n1\n";
  EXPECT_THAT(input_error([&] { parse(rows, "t.csv", {.format = tr::Format::csv}); }),
              HasSubstr("t.csv: 20000002 data lines, more than the 20000000 points a trace may have"));
  const std::string arrays = "{\"points\": " + std::string(tr::kMaxPoints + 20, '[');
  EXPECT_THAT(input_error([&] { parse(arrays, "p.json"); }),
              HasSubstr("p.json: 20000020 arrays, more points than the 20000000 a trace may have"));
  // A JSON input whose parsed form would not fit: refused from its size alone.
  EXPECT_THAT(input_error([] { adagrouper::parse_json_text(std::string(34'000'000, ':'), "big.json"); }),
              HasSubstr("big.json: reading these 32 MiB of JSON would take about 2.0 GiB of memory"));
}

TEST(TraceInputChecks, TyposAndDuplicatesInRateForms) {
  TempDir dir;
  dir.write("link.csv", "0,1e9\n1,2e9\n");
  const auto net = dir.write("n.json", "{\"default\": {\"file\": \"link.csv\",\n  \"repat\": true}}");
  EXPECT_THAT(input_error([&] { load_net(net); }),
              HasSubstr("n.json: line 2: default: unknown key \"repat\" for a trace file (did you mean \"repeat\"?)"));
  EXPECT_THAT(input_error([] {
                spec(R"({"pattern": "periodic", "high": 2, "low": 1, "perod_s": 1, "low_fraction": 0.5})");
              }),
              HasSubstr("spec.json: unknown key \"perod_s\" for periodic (did you mean \"period_s\"?)"));
  // In a JSON trace file: the trace file and its line, not the network file.
  dir.write("t.json", "{\"unit\": \"bytes_per_s\",\n \"points\": [[0, 1]],\n \"repeat\": 4}");
  const auto net2 = dir.write("n2.json", R"({"default": {"file": "t.json"}})");
  EXPECT_THAT(input_error([&] { load_net(net2); }),
              HasSubstr((dir.path() / "t.json").string() + ": line 3: unknown key \"repeat\" for a points rate (did "
                                                           "you mean \"repeat_s\"?)"));
  dir.write("d.json", "{\"points\": [[0, 1]],\n \"points\": [[0, 2]]}");
  const auto net3 = dir.write("n3.json", R"({"default": {"file": "d.json"}})");
  EXPECT_THAT(input_error([&] { load_net(net3); }),
              HasSubstr((dir.path() / "d.json").string() + ": line 2: duplicate key \"points\""));
}

TEST(TraceInputChecks, StageTracesTakeABomAndSplitPhasesAndBlameThemselves) {
  const auto t = tr::parse_stage_trace(
      "\xEF\xBB\xBFiteration,stage,micro_batch,phase,duration_s\n0,1,2,I,0.5\n0,1,2,W,0.25\n1,3,0,F,1\n", "st.csv");
  ASSERT_EQ(t.size(), 3u);
  EXPECT_EQ(t[0].phase, sim::Phase::BackwardInput);
  EXPECT_EQ(t[1].phase, sim::Phase::BackwardWeight);
  EXPECT_EQ(t[2].stage, 3);
  EXPECT_EQ(t[2].line, 4);
  EXPECT_EQ(input_error([] { tr::parse_stage_trace("0,0,0,X,1\n", "st.csv"); }),
            "st.csv:1: phase: must be F, B, I, W, forward or backward, got \"X\"");
  EXPECT_EQ(input_error([] { tr::parse_stage_trace("0,0,0,F,1\n0,0,1,F,1e308\n", "st.csv"); }),
            "st.csv:2: duration_s: 1e+308 s is beyond the 4194304 s (2^22 s, 48.5 days) that the model resolves to "
            "1 ns");
  const auto samples = tr::parse_transfer_samples("\xEF\xBB\xBFtime_s,bytes,duration_s\n0,10,0.5\n", "s.csv");
  ASSERT_EQ(samples.size(), 1u);
}

TEST(TraceInputChecks, MessageTracesNameTheMessageBySenderAndDirection) {
  const auto t = tr::parse_message_trace(
      "\xEF\xBB\xBFiteration,stage,micro_batch,phase,latency_s\n# a comment\n0,1,2,F,0.5\n\n2,3,0,backward,1e-4\n",
      "mt.csv");
  ASSERT_EQ(t.size(), 2u);
  EXPECT_EQ(t[0].phase, sim::Phase::Forward);
  EXPECT_EQ(t[0].micro_batch, 2);
  EXPECT_DOUBLE_EQ(t[0].latency_s, 0.5);
  EXPECT_EQ(t[0].line, 3);
  EXPECT_EQ(t[1].phase, sim::Phase::Backward);
  EXPECT_EQ(t[1].iteration, 2);
  EXPECT_EQ(t[1].line, 5);
  EXPECT_EQ(input_error([] { tr::parse_message_trace("0,0,0,I,1\n", "mt.csv"); }),
            "mt.csv:1: phase: must be F, B, forward or backward, got \"I\"");
  EXPECT_EQ(input_error([] { tr::parse_message_trace("0,0,0,F,1\n0,0,1,F,-2\n", "mt.csv"); }),
            "mt.csv:2: latency_s: must be >= 0, got -2");
  EXPECT_EQ(input_error([] { tr::parse_message_trace("0,0,0,F\n", "mt.csv"); }),
            "mt.csv:1: expected 5 columns (iteration,stage,micro_batch,phase,latency_s), got 4");
  EXPECT_EQ(input_error([] { tr::parse_message_trace("0,x,0,F,1\n", "mt.csv"); }),
            "mt.csv:1: stage: not a number: \"x\"");
  EXPECT_EQ(input_error([] { tr::parse_message_trace("iteration,stage,micro_batch,phase,latency_s\n", "mt.csv"); }),
            "mt.csv: no data rows (iteration,stage,micro_batch,phase,latency_s): the file is empty");
}

TEST(TraceInputChecks, ADirectoryIsNamedAsOne) {
  TempDir dir;
  const std::string d = dir.path().string();
  EXPECT_EQ(input_error([&] { tr::load_stage_trace(dir.path()); }), d + ": is a directory");
  EXPECT_EQ(input_error([&] { tr::load_transfer_samples(dir.path()); }), d + ": is a directory");
  EXPECT_EQ(input_error([&] { tr::load_trace_file(dir.path()); }), d + ": is a directory");
}

TEST(TraceInputChecks, ATraceFileIsReadOnceAndShared) {
  TempDir dir;
  dir.write("link.csv", "0,1e9\n1,2e9\n");
  const auto path = dir.write("n.json", R"({"default": {"file": "link.csv"},
      "channels": [{"from": 1, "to": 0, "rate": {"file": "./link.csv", "description": "the same file"}},
                   {"from": 2, "to": 1, "rate": {"file": "link.csv", "repeat": true}}]})");
  const sim::Network n = load_net(path);
  // The default, and the same file named another way: one trace in memory.
  EXPECT_EQ(n.channel(0, 1).rate.get(), n.channel(1, 0).rate.get());
  EXPECT_EQ(n.channel(0, 1).rate.get(), n.channel(1, 2).rate.get());
  EXPECT_NE(n.channel(0, 1).rate.get(), n.channel(2, 1).rate.get());  // repeated: another trace
  EXPECT_EQ(n.channel(2, 1).rate->repeat_s(), 1.0);
  // One parser: equal forms give one trace; another parser reads its own.
  const tr::TraceRates rates;
  const json form = json::parse(R"({"file": "link.csv", "repeat": true})");
  const adagrouper::Field f(form, path.string(), "default");
  EXPECT_EQ(rates.parse_shared(f, dir.path()).get(), rates.parse_shared(f, dir.path()).get());
  EXPECT_NE(rates.parse_shared(f, dir.path()).get(), tr::TraceRates().parse_shared(f, dir.path()).get());
}

}  // namespace
}  // namespace tracestest
