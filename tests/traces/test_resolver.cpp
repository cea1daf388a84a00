// Network files that use trace files and patterns (traces::TraceRates with
// sim::load_network), and the errors that name the network file, the field, or the
// trace file and line.
#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <string>

#include "helpers.h"
#include "sim.h"

namespace tracestest {
namespace {

namespace sim = adagrouper::sim;
using testing::HasSubstr;
using testing::StartsWith;

sim::Network load(const fs::path& net, int stages = 3) { return sim::load_network(net, stages, tr::TraceRates()); }

TEST(Resolver, FilesRelativeToTheNetworkFileAndPatterns) {
  TempDir dir;
  dir.write("traces/link.csv", "time_s,value\n0,100\n2,25\n");
  dir.write("speed.profile", "PERIODICITY 4\n0 1\n3 0.5\n");
  const fs::path net = dir.write("nets/net.json", R"({
    "default": {"file": "../traces/link.csv"},
    "channels": [
      {"from": 0, "to": 1, "rate": {"pattern": "periodic", "high": 8, "low": 2, "period_s": 10, "low_fraction": 0.5}},
      {"from": 2, "to": 1, "rate": {"file": "../traces/link.csv", "repeat_s": 3}}
    ],
    "stages": [{"stage": 1, "speed": {"file": "../speed.profile", "format": "simgrid"}}]
  })");
  const sim::Network n = load(net);
  EXPECT_EQ(n.channel(0, 1).rate->times(), (std::vector<double>{0, 5}));
  EXPECT_EQ(n.channel(0, 1).rate->repeat_s(), 10);
  EXPECT_EQ(n.channel(1, 2).rate->values(), (std::vector<double>{100, 25}));  // the default
  EXPECT_EQ(n.channel(2, 1).rate->repeat_s(), 3);                          // 2 -> 1
  EXPECT_EQ(n.speed(1).values(), (std::vector<double>{1, 0.5}));
  EXPECT_EQ(n.speed(1).repeat_s(), 4);
  EXPECT_EQ(n.speed(0).values(), (std::vector<double>{1}));
}

TEST(Resolver, PatternGivesTheSameSimulationAsItsPoints) {
  TempDir dir;
  const nlohmann::json pipe = nlohmann::json::parse(R"({"name": "toy", "global_batch_size": 8, "stages": [
      {"profile": [{"micro_batch_size": 1, "forward_s": 1, "backward_s": 2, "activation_bytes": 0, "output_bytes": 1}]},
      {"profile": [{"micro_batch_size": 1, "forward_s": 1, "backward_s": 2, "activation_bytes": 0, "output_bytes": 1}]},
      {"profile": [{"micro_batch_size": 1, "forward_s": 1, "backward_s": 2, "activation_bytes": 0}]}]})");
  const sim::Pipeline p = sim::parse_pipeline(pipe, "toy.json");
  const fs::path a = dir.write("a.json", R"({"default": {"pattern": "periodic", "high": 2, "low": 0.25,
      "period_s": 7, "low_fraction": 0.5, "phase_s": 1}})");
  const fs::path b = dir.write("b.json", R"({"default": {"points": [[0, 0.25], [1, 2], [4.5, 0.25]], "repeat_s": 7}})");
  const auto run = [&](const fs::path& net) {
    return sim::simulate(sim::make_scenario(p, load(net), sim::make_named("kfkb", 3, 8, 2), 1, 3));
  };
  const sim::SimResult ra = run(a), rb = run(b);
  EXPECT_EQ(ra.iteration_times_s, rb.iteration_times_s);
  EXPECT_GT(ra.total_time_s, 3 * 30.0);  // slower than with free transfers
}

TEST(Resolver, ErrorsNameTheNetworkFileAndField) {
  TempDir dir;
  const auto err = [&](const std::string& rate) {
    const fs::path net = dir.write("net.json", R"({"channels": [{"from": 0, "to": 1, "rate": )" + rate + "}]}");
    return input_error([&] { load(net); });
  };
  const std::string net = (dir.path() / "net.json").string();
  EXPECT_EQ(err(R"({"file": "nope.csv"})"),
            net + ": channels[0].rate.file: cannot open trace file \"nope.csv\" (looked for " +
                (dir.path() / "nope.csv").string() + ")");
  EXPECT_EQ(err(R"({"file": "x.csv", "format": "pcap"})"),
            net + ": channels[0].rate.format: unknown format \"pcap\" (csv, json, iperf3, simgrid, samples)");
  EXPECT_EQ(err(R"({"file": "x.csv", "scale": 2})"),
            net + ": line 1: channels[0].rate: unknown key \"scale\" for a trace file (known keys: file, format, "
                  "latency_s, rebase, repeat, repeat_s)");
  EXPECT_EQ(err(R"({"pattern": "periodic", "high": 1, "low": 2, "period_s": 1, "low_fraction": 0.5})"),
            net + ": channels[0].rate.low: low 2 is larger than high 1");
  EXPECT_EQ(err(R"({"speed": 3})"),
            net + ": channels[0].rate: unknown rate form: expected {\"constant\": R}, {\"points\": [[t, R], ...]}, "
                  "{\"file\": PATH} or {\"pattern\": NAME, ...}");
  // An error inside a trace file names the trace file and its line.
  const fs::path bad = dir.write("bad.csv", "0,1\n1,-5\n");
  EXPECT_EQ(err(R"({"file": "bad.csv"})"), bad.string() + ":2: value: must be >= 0, got -5");
  // A file that refers to itself stops.
  dir.write("self.json", R"({"file": "self.json"})");
  EXPECT_THAT(err(R"({"file": "self.json"})"), HasSubstr("nest more than 16 levels deep"));
  // "repeat": true needs a length.
  dir.write("one.csv", "0,5\n");
  EXPECT_EQ(err(R"({"file": "one.csv", "repeat": true})"),
            net + ": channels[0].rate.repeat: one.csv has no length to repeat (a single point); use \"repeat_s\"");
}

TEST(Resolver, RepeatTrueLoopsARecording) {
  TempDir dir;
  dir.write("rec.csv", "0,5\n1,2\n3,5\n");  // [0,1) 5, [1,3) 2, recording ends at 3
  const fs::path net = dir.write("net.json", R"({"default": {"file": "rec.csv", "repeat": true}})");
  const sim::Network n = load(net, 2);
  EXPECT_EQ(n.channel(0, 1).rate->times(), (std::vector<double>{0, 1}));
  EXPECT_EQ(n.channel(0, 1).rate->repeat_s(), 3);
  EXPECT_EQ(n.channel(0, 1).rate->value_at(3.5), 5);
}

TEST(Resolver, ShippedTracesAndNetworksLoad) {
  const fs::path root = SOURCE_ROOT;
  int traces = 0;
  for (const auto& e : fs::directory_iterator(root / "traces" / "data")) {
    if (e.path().extension() == ".md") continue;
    const tr::Loaded l = tr::load_trace_file(e.path());
    EXPECT_GT(l.trace.span_s, 0) << e.path();
    ++traces;
  }
  EXPECT_GE(traces, 6);
  for (const char* net : {"bursty-25g.json", "contention-25g.json", "periodic-pattern-25g.json"}) {
    const sim::Network n = load(root / "configs" / "networks" / net, 8);
    EXPECT_FALSE(n.channel(0, 1).unlimited()) << net;
  }
}

TEST(Resolver, SpeedsRefuseRatesWithUnitsEvenWhenARateIsTheSameForm) {
  TempDir dir;
  // The default is read (and kept) first; the speed with the same JSON is still refused.
  const fs::path net = dir.write("net.json", R"({"default": {"constant": "2GB/s"},
    "stages": [{"stage": 1, "speed": {"constant": "2GB/s"}}]})");
  EXPECT_EQ(input_error([&] { load(net); }),
            net.string() + ": stages[0].speed.constant: must be a plain number (a speed is a multiplier, not a rate), "
                           "got \"2GB/s\"");
  const fs::path ok = dir.write("ok.json", R"({"default": {"pattern": "periodic", "high": "25Gbit/s", "low": "1Gbit/s",
      "period_s": "10s", "low_fraction": 0.5}, "stages": [{"stage": 1, "speed": {"pattern": "steps", "levels": [1, 0.5],
      "durations_s": ["1min", "30s"], "repeat": true}}]})");
  const sim::Network n = load(ok);
  EXPECT_EQ(n.channel(0, 1).rate->values(), (std::vector<double>{3.125e9, 1.25e8}));
  EXPECT_EQ(n.speed(1).times(), (std::vector<double>{0, 60}));
}

}  // namespace
}  // namespace tracestest
