// Tests of PyTorch profiler (Kineto) trace import (traces/kineto.h) and of
// `adagrouper trace import-kineto`, on the fixtures in tests/traces/data/kineto.
#include <algorithm>
#include <fstream>
#include <map>
#include <regex>
#include <sstream>
#include <string>
#include <vector>

#include <zlib.h>

#include "../common/cli_runner.h"

#include <gmock/gmock.h>
#include <gtest/gtest.h>
#include <fmt/format.h>
#include <nlohmann/json.hpp>

#include "helpers.h"
#include "pipeline.h"

namespace tracestest {
namespace {

using sim_phase = adagrouper::sim::Phase;
using testing::HasSubstr;
using testing::StartsWith;

fs::path kineto(const std::string& name) { return fixture("kineto/" + name); }

std::vector<tr::KinetoRank> load(const std::vector<std::string>& names,
                                 const tr::ActionPattern& p = tr::torch_action_pattern()) {
  std::vector<tr::KinetoRank> ranks;
  for (const std::string& n : names) ranks.push_back(tr::load_kineto(kineto(n), p));
  return ranks;
}

const std::vector<std::string> kCpu{"cpu-rank0.json", "cpu-rank1.json"};
const std::vector<std::string> kCuda{"cuda-rank0.json", "cuda-rank1.json"};

// The message of the InputError `f` throws ("" when none).
template <class F>
std::string error_of(F&& f) {
  try {
    f();
  } catch (const InputError& e) {
    return e.what();
  }
  return "";
}

// A trace of one rank whose events are `events` (JSON text of the array's elements).
std::string trace_text(const std::string& events) {
  return R"({"schemaVersion": 1, "deviceProperties": [], "traceEvents": [)" + events + "]}";
}

std::string x_event(const std::string& name, double ts, double dur, const std::string& cat = "user_annotation") {
  return nlohmann::json{{"ph", "X"}, {"cat", cat}, {"name", name}, {"pid", 1}, {"tid", 1}, {"ts", ts}, {"dur", dur}}
      .dump();
}

// ---- the library ----

TEST(Kineto, CpuFixtureGivesExactMedians) {
  const auto ranks = load(kCpu);
  ASSERT_EQ(ranks.size(), 2u);
  for (const auto& r : ranks) {
    EXPECT_FALSE(r.gpu);
    EXPECT_EQ(r.ops.size(), 8u);      // F and B of 2 micro-batches in 2 profiler steps
    EXPECT_EQ(r.skipped, 8u);         // SEND_F, RECV_B / RECV_F, SEND_B
    EXPECT_TRUE(r.transfers.empty());
  }
  const tr::KinetoStages st = tr::collect_stages(ranks);
  ASSERT_EQ(st.stages.size(), 2u);
  EXPECT_EQ(st.micro_batches, 2);
  const auto doc = tr::kineto_pipeline(st, {.micro_batch_size = 2, .global_batch_size = 0, .name = {}});
  EXPECT_EQ(doc["global_batch_size"], 4);
  const auto& s0 = doc["stages"][0]["profile"][0];
  const auto& s1 = doc["stages"][1]["profile"][0];
  EXPECT_DOUBLE_EQ(s0["forward_s"].get<double>(), 0.00115);   // 1000 1100 | 1200 1300 us
  EXPECT_DOUBLE_EQ(s0["backward_s"].get<double>(), 0.0022);   // 2000 2100 | 2300 2500
  EXPECT_DOUBLE_EQ(s1["forward_s"].get<double>(), 0.00155);   // 1400 1500 | 1600 1800
  EXPECT_DOUBLE_EQ(s1["backward_s"].get<double>(), 0.00305);  // 2900 3000 | 3100 3500.25
  EXPECT_EQ(s0["micro_batch_size"], 2);
  EXPECT_EQ(s0["activation_bytes"], 0);
  EXPECT_EQ(s0["output_bytes"], 0);
  EXPECT_FALSE(s1.contains("output_bytes"));
  EXPECT_FALSE(s0.contains("backward_input_s"));
  const std::string d1 = doc["stages"][1]["description"];
  EXPECT_THAT(d1, HasSubstr("cpu-rank1.json"));
  EXPECT_THAT(d1, HasSubstr("F 4 x, median 1.55 ms (1.4 to 1.8 ms)"));
  EXPECT_THAT(d1, HasSubstr("B 4 x, median 3.05 ms (2.9 to 3.50025 ms)"));
  EXPECT_THAT(doc["description"].get<std::string>(), HasSubstr("0"));
}

TEST(Kineto, WrittenPipelineLoads) {
  const tr::KinetoStages st = tr::collect_stages(load(kCuda));
  const auto doc = tr::kineto_pipeline(st, {.micro_batch_size = 4, .global_batch_size = 48, .name = "zb"});
  const auto p = adagrouper::sim::parse_pipeline(nlohmann::json::parse(doc.dump()), "zb.json");
  EXPECT_EQ(p.name, "zb");
  EXPECT_EQ(p.global_batch_size, 48);
  ASSERT_EQ(p.num_stages(), 2);
  const auto params = p.at(4);
  EXPECT_DOUBLE_EQ(params[0].fwd, 0.00085);
  EXPECT_DOUBLE_EQ(params[0].bwd_input, 0.00072);
  EXPECT_DOUBLE_EQ(params[0].bwd_weight, 0.00051);
  EXPECT_DOUBLE_EQ(params[0].bwd, 0.00072 + 0.00051);
  EXPECT_EQ(params[0].act, 0);
  EXPECT_EQ(params[0].out, 0);
}

TEST(Kineto, CudaFixturePrefersGpuRangesAndMergesStreams) {
  const auto ranks = load(kCuda);
  EXPECT_TRUE(ranks[0].gpu);
  EXPECT_TRUE(ranks[1].gpu);
  EXPECT_EQ(ranks[0].ops.size(), 9u);  // F, I, W of 3 micro-batches (CPU ranges ignored)
  EXPECT_EQ(ranks[1].ops.size(), 9u);  // PP:1I2 on two streams counts once
  const tr::KinetoStages st = tr::collect_stages(ranks);
  EXPECT_EQ(st.micro_batches, 3);
  const auto doc = tr::kineto_pipeline(st, {.micro_batch_size = 1, .global_batch_size = 0, .name = {}});
  EXPECT_EQ(doc["global_batch_size"], 3);
  const auto& s0 = doc["stages"][0]["profile"][0];
  const auto& s1 = doc["stages"][1]["profile"][0];
  EXPECT_DOUBLE_EQ(s0["forward_s"].get<double>(), 0.00085);  // GPU 800 900 850 (CPU ~300)
  EXPECT_DOUBLE_EQ(s0["backward_input_s"].get<double>(), 0.00072);
  EXPECT_DOUBLE_EQ(s0["backward_weight_s"].get<double>(), 0.00051);
  EXPECT_EQ(s0["backward_s"].get<double>(), s0["backward_input_s"].get<double>() + s0["backward_weight_s"].get<double>());
  EXPECT_DOUBLE_EQ(s1["forward_s"].get<double>(), 0.00105);
  EXPECT_DOUBLE_EQ(s1["backward_input_s"].get<double>(), 0.00095);  // 900 950 and 1I2 merged to 1100
  EXPECT_DOUBLE_EQ(s1["backward_weight_s"].get<double>(), 0.00062);
  EXPECT_THAT(doc["stages"][1]["description"].get<std::string>(), HasSubstr("I 3 x, median 0.95 ms (0.9 to 1.1 ms)"));
}

TEST(Kineto, GzipEqualsPlain) {
  const auto plain = load({"cpu-rank1.json"});
  const auto gz = load({"cpu-rank1.json.gz"});
  ASSERT_EQ(plain[0].ops.size(), gz[0].ops.size());
  for (std::size_t i = 0; i < plain[0].ops.size(); ++i) {
    EXPECT_EQ(plain[0].ops[i].duration_us, gz[0].ops[i].duration_us);
    EXPECT_EQ(plain[0].ops[i].start_us, gz[0].ops[i].start_us);
  }
  EXPECT_EQ(tr::kineto_stage_trace(plain), tr::kineto_stage_trace(gz));
}

TEST(Kineto, CorruptOrTruncatedGzipIsOneError) {
  std::string gz = clirunner::slurp(kineto("cpu-rank1.json.gz"));
  EXPECT_THAT(error_of([&] { tr::parse_kineto(gz.substr(0, gz.size() / 2), "r.json.gz", tr::torch_action_pattern()); }),
              StartsWith("r.json.gz: gzip: truncated data"));
  gz[gz.size() / 2] ^= 0x55;
  EXPECT_THAT(error_of([&] { tr::parse_kineto(gz, "r.json.gz", tr::torch_action_pattern()); }),
              StartsWith("r.json.gz: gzip: "));
  EXPECT_THAT(error_of([] { tr::parse_kineto("\x1f\x8b", "x.gz", tr::torch_action_pattern()); }),
              StartsWith("x.gz: gzip: "));
}

TEST(Kineto, StageTraceCountsIterations) {
  const std::string csv = tr::kineto_stage_trace(load(kCpu));
  EXPECT_THAT(csv, StartsWith("iteration,stage,micro_batch,phase,duration_s\n0,0,0,F,0.001\n0,0,1,F,0.0012\n"));
  EXPECT_THAT(csv, HasSubstr("\n1,0,1,F,0.0013\n"));
  EXPECT_THAT(csv, HasSubstr("\n1,1,1,B,0.00350025\n"));
  EXPECT_EQ(std::count(csv.begin(), csv.end(), '\n'), 17);
  const auto timings = tr::parse_stage_trace(csv, "ops.csv");
  EXPECT_EQ(timings.size(), 16u);
  const std::string zb = tr::kineto_stage_trace(load(kCuda));
  EXPECT_THAT(zb, HasSubstr("\n0,1,2,I,0.0011\n"));
  EXPECT_THAT(zb, HasSubstr("\n0,0,2,W,0.00051\n"));
}

TEST(Kineto, ReplicatedStageTakenFromFirstFile) {
  const auto ranks = load({"cpu-rank0.json", "cpu-rank1.json", "cpu-rank0.json"});
  const std::string csv = tr::kineto_stage_trace(ranks);
  EXPECT_EQ(std::count(csv.begin(), csv.end(), '\n'), 17);
  EXPECT_EQ(tr::collect_stages(ranks).stages[0].of(sim_phase::Forward).size(), 8u);  // medians use every file
}

TEST(Kineto, TransferSamplesFromNcclKernels) {
  const auto ranks = load(kCuda);
  ASSERT_EQ(ranks[0].transfers.size(), 2u);
  ASSERT_EQ(ranks[1].transfers.size(), 1u);
  EXPECT_EQ(ranks[0].transfers[0].bytes, 2097152.0);  // 1048576 BFloat16
  EXPECT_EQ(ranks[1].transfers[0].bytes, 1048576.0);  // 262144 Float
  const std::string csv = tr::kineto_transfer_samples(ranks);
  const auto samples = tr::parse_transfer_samples(csv, "s.csv");
  ASSERT_EQ(samples.size(), 3u);
  EXPECT_EQ(samples[0].time_s, 0.0);
  EXPECT_DOUBLE_EQ(samples[0].duration_s, 150e-6);
  EXPECT_THAT(error_of([] { tr::kineto_transfer_samples(load(kCpu)); }), HasSubstr("no NCCL send/recv kernels"));
  const std::string no_bytes = trace_text(x_event("PP:0F0", 0, 5) + "," +
                                          x_event("ncclDevKernel_SendRecv(ncclDevComm*)", 10, 5, "kernel"));
  const auto r = tr::parse_kineto(no_bytes, "r0.json", tr::torch_action_pattern());
  EXPECT_EQ(error_of([&] { tr::kineto_transfer_samples({r}); }).rfind("r0.json: traceEvents[1]: ", 0), 0u);
  const std::string with_bytes = trace_text(
      x_event("PP:0F0", 0, 5) + R"(, {"ph": "X", "cat": "kernel", "name": "ncclKernel_SendRecv_RING", "ts": 9,
      "dur": 2, "args": {"bytes": 64}})");
  EXPECT_EQ(tr::parse_kineto(with_bytes, "r0.json", tr::torch_action_pattern()).transfers.at(0).bytes, 64.0);
}

TEST(Kineto, RegexWithNamedGroupsInAnyOrder) {
  const auto named = tr::parse_action_pattern(R"(^PP:(?<stage>\d+)(?<type>[A-Z_]+)(?<microbatch>\d*)$)", "--action-regex");
  EXPECT_EQ(tr::kineto_stage_trace(load(kCpu, named)), tr::kineto_stage_trace(load(kCpu)));
  const std::string text = trace_text(x_event("mb0-s0-fwd", 0, 10) + "," + x_event("mb0-s0-bwd", 20, 30) + "," +
                                      x_event("mb1-s0-fwd", 60, 14) + "," + x_event("mb1-s0-bwd", 80, 34) + "," +
                                      x_event("mb1-s0-optim", 120, 34));
  const auto p = tr::parse_action_pattern(R"(^mb(?P<microbatch>\d+)-s(?<stage>\d+)-(?<type>\w+)$)", "--action-regex");
  const auto r = tr::parse_kineto(text, "m.json", p);
  EXPECT_EQ(r.skipped, 1u);  // optim
  const auto doc = tr::kineto_pipeline(tr::collect_stages({r}), {.micro_batch_size = 1, .global_batch_size = 0, .name = {}});
  EXPECT_DOUBLE_EQ(doc["stages"][0]["profile"][0]["forward_s"].get<double>(), 12e-6);
  EXPECT_DOUBLE_EQ(doc["stages"][0]["profile"][0]["backward_s"].get<double>(), 32e-6);
  // Unnamed: stage, type, microbatch in that order; (?:...) does not count.
  const auto unnamed = tr::parse_action_pattern(R"(^(?:PP):(\d+)([A-Z_]+)(\d*)$)", "--action-regex");
  EXPECT_EQ(tr::kineto_stage_trace(load(kCpu, unnamed)), tr::kineto_stage_trace(load(kCpu)));
}

TEST(Kineto, BadRegexes) {
  EXPECT_THAT(error_of([] { tr::parse_action_pattern("PP:(\\d+", "--action-regex"); }),
              StartsWith("--action-regex: invalid regular expression"));
  EXPECT_THAT(error_of([] { tr::parse_action_pattern("PP:(\\d+)(F)", "--action-regex"); }),
              HasSubstr("has 2 capture groups"));
  EXPECT_THAT(error_of([] { tr::parse_action_pattern("(?<stage>\\d+)(?<kind>F)(?<microbatch>\\d+)", "--action-regex"); }),
              HasSubstr("(?<type>...)"));
  const auto p = tr::parse_action_pattern(R"(^(\w+)-(F)-(\d+)$)", "--action-regex");
  EXPECT_EQ(error_of([&] { tr::parse_kineto(trace_text(x_event("ab-F-0", 0, 1)), "r.json", p); }),
            "r.json: traceEvents[0].name: stage \"ab\" of the action is not a number");
}

// DualPipeV's OVERLAP_F_B ranges: split into their parts in proportion to the medians of
// the same ops run on their own in the file; the parts go into the stage trace and the
// micro-batch count, not into the medians. A container of non-compute parts is skipped.
TEST(Kineto, OverlapFBRangesAreSplitByTheMedians) {
  const std::string text = trace_text(
      x_event("PP:0F0", 0, 1000) + "," + x_event("PP:1F0", 1000, 1000) + "," + x_event("PP:1B0", 2000, 3000) + "," +
      x_event("PP:0B0", 5000, 2000) + "," + x_event("PP:(0F1;1B2)OVERLAP_F_B", 7000, 2000) + "," +
      x_event("PP:(0SEND_F1;1B2)OVERLAP_F_B", 9000, 100));
  const tr::KinetoRank r = tr::parse_kineto(text, "dualpipev.json", tr::torch_action_pattern());
  EXPECT_EQ(r.overlapped, 1u);
  EXPECT_EQ(r.skipped, 1u);
  ASSERT_EQ(r.ops.size(), 6u);
  // 0F has a median of 1000 us, 1B of 3000 us: the 2000 us range splits 500 / 1500.
  const tr::KinetoOp& f = r.ops[4];
  const tr::KinetoOp& b = r.ops[5];
  EXPECT_TRUE(f.overlapped && b.overlapped);
  EXPECT_EQ(f.stage, 0);
  EXPECT_EQ(f.micro_batch, 1);
  EXPECT_EQ(f.phase, sim_phase::Forward);
  EXPECT_DOUBLE_EQ(f.start_us, 7000);
  EXPECT_DOUBLE_EQ(f.duration_us, 500);
  EXPECT_EQ(b.stage, 1);
  EXPECT_EQ(b.micro_batch, 2);
  EXPECT_DOUBLE_EQ(b.start_us, 7500);
  EXPECT_DOUBLE_EQ(b.duration_us, 1500);
  const tr::KinetoStages st = tr::collect_stages({r});
  EXPECT_EQ(st.micro_batches, 3);
  EXPECT_EQ(st.stages[0].of(sim_phase::Forward).size(), 1u);  // the overlapped part is not a sample
  const std::string csv = tr::kineto_stage_trace({r});
  EXPECT_THAT(csv, HasSubstr("0,0,1,F,0.0005\n"));
  EXPECT_THAT(csv, HasSubstr("0,1,2,B,0.0015\n"));
  // A stage whose F ranges all lie inside OVERLAP_F_B ranges has no F of its own.
  const std::string only = trace_text(x_event("PP:0B0", 0, 1000) + "," + x_event("PP:(0F1;0B2)OVERLAP_F_B", 1000, 10));
  EXPECT_THAT(error_of([&] { tr::collect_stages({tr::parse_kineto(only, "o.json", tr::torch_action_pattern())}); }),
              HasSubstr("stage 0: no F ranges of its own, outside OVERLAP_F_B ranges"));
}

// Traces written by a real torch.profiler run (tests/traces/data/kineto/
// make_torch_fixture.py: Debian's PyTorch 1.13 on the CPU, 2 processes, 1F1B over 4
// micro-batches for 2 steps, every action in record_function("PP:...")). That build has
// no Kineto, so the files are the legacy profiler's: a bare array, no "cat": the ranges
// are matched by name. The medians are those of the files' own PP:sF and PP:sB events.
TEST(Kineto, RealTorchProfilerTraces) {
  const auto ranks = load({"torch-rank0.json", "torch-rank1.json"});
  std::map<std::pair<int, char>, std::vector<double>> expected;  // (stage, F|B) -> seconds
  const std::regex action(R"(PP:(\d+)([FB])(\d+))");
  for (int r = 0; r < 2; ++r) {
    EXPECT_FALSE(ranks[r].gpu);
    EXPECT_EQ(ranks[r].ops.size(), 16u);     // F and B of 4 micro-batches in 2 steps
    EXPECT_EQ(ranks[r].skipped, 16u);        // their SEND_* and RECV_*
    std::ifstream in(kineto(fmt::format("torch-rank{}.json", r)));
    const nlohmann::json doc = nlohmann::json::parse(in);
    ASSERT_TRUE(doc.is_array());
    for (const auto& ev : doc) {
      std::smatch m;
      const std::string name = ev.value("name", "");
      if (ev.value("ph", "") == "X" && std::regex_match(name, m, action))
        expected[std::pair(std::stoi(m[1].str()), m[2].str()[0])].push_back(ev["dur"].get<double>() / 1e6);
    }
  }
  const tr::KinetoStages st = tr::collect_stages(ranks);
  ASSERT_EQ(st.stages.size(), 2u);
  EXPECT_EQ(st.micro_batches, 4);
  for (int s = 0; s < 2; ++s) {
    const std::vector<double>& f = expected[std::pair(s, 'F')];
    const std::vector<double>& b = expected[std::pair(s, 'B')];
    ASSERT_EQ(f.size(), 8u);
    ASSERT_EQ(b.size(), 8u);
    EXPECT_DOUBLE_EQ(tr::median(st.stages[s].of(sim_phase::Forward)), tr::median(f)) << s;
    EXPECT_DOUBLE_EQ(tr::median(st.stages[s].of(sim_phase::Backward)), tr::median(b)) << s;
  }
  const auto doc = tr::kineto_pipeline(st, {.micro_batch_size = 64, .global_batch_size = 0, .name = {}});
  EXPECT_EQ(doc["global_batch_size"], 256);
}

TEST(Kineto, OldTracesWithoutCatMatchByName) {
  const std::string text = R"({"traceEvents": [
    {"ph": "X", "name": "PP:0F0", "pid": 1, "tid": 1, "ts": 0, "dur": 4},
    {"ph": "X", "name": "PP:0B0", "pid": 1, "tid": 1, "ts": 5, "dur": 8},
    {"ph": "X", "cat": "cpu_op", "name": "PP:0F1", "pid": 1, "tid": 1, "ts": 5, "dur": 8}]})";
  const auto r = tr::parse_kineto(text, "old.json", tr::torch_action_pattern());
  EXPECT_EQ(r.ops.size(), 2u);
}

TEST(Kineto, BadEventsNameFileAndIndex) {
  const auto pattern = tr::torch_action_pattern();
  auto err = [&](const std::string& text) { return error_of([&] { tr::parse_kineto(text, "rank1.json", pattern); }); };
  const std::string ok = x_event("PP:0F0", 0, 5) + ",";
  EXPECT_EQ(err(trace_text(ok + R"({"ph": "X", "cat": "user_annotation", "name": "PP:0B0", "ts": 7})")),
            "rank1.json: traceEvents[1].dur: missing field");
  EXPECT_EQ(err(trace_text(ok + x_event("PP:0B0", 7, -3))), "rank1.json: traceEvents[1].dur: must be >= 0, got -3");
  EXPECT_EQ(err(trace_text(ok + R"({"ph": "X", "cat": "user_annotation", "name": "PP:0B0", "ts": 7, "dur": "5"})")),
            "rank1.json: traceEvents[1].dur: must be a number, got \"5\"");
  EXPECT_EQ(err(trace_text(ok + R"({"ph": "X", "cat": "user_annotation", "name": "PP:0B0", "ts": null, "dur": 5})")),
            "rank1.json: traceEvents[1].ts: must be a number, got null");
  EXPECT_EQ(err(trace_text(ok + "7")), "rank1.json: traceEvents[1]: must be an object, got 7");
  EXPECT_EQ(err(trace_text(x_event("PP:99999999999F0", 0, 5))),
            "rank1.json: traceEvents[0].name: stage \"99999999999\" of the action is not a number");
  EXPECT_THAT(err(trace_text(x_event("PP:5000F0", 0, 5))), HasSubstr("stage 5000 of the action is too large"));
  EXPECT_THAT(err(trace_text(x_event("ProfilerStep#1", 0, 5))), StartsWith("rank1.json: no compute ranges"));
  EXPECT_THAT(err(trace_text(x_event("PP:0SEND_F0", 0, 5))), StartsWith("rank1.json: no compute ranges"));
  EXPECT_THAT(err(R"({"schemaVersion": 1, "traceEvents": [)" + ok), StartsWith("rank1.json: line 1, column "));
  EXPECT_EQ(err(R"({"schemaVersion": 1})"), "rank1.json: traceEvents: missing field");
  EXPECT_EQ(err(R"({"traceEvents": {}})"), "rank1.json: traceEvents: must be an array, got {}");
  EXPECT_THAT(err("42"), StartsWith("rank1.json: must be a Chrome trace"));
  EXPECT_THAT(err(""), StartsWith("rank1.json: "));
  // Noise events are not checked: a cpu_op without dur is fine.
  EXPECT_EQ(err(trace_text(ok + R"({"ph": "X", "cat": "cpu_op", "name": "aten::mm", "ts": 1})")), "");
}

TEST(Kineto, MissingStagesAndHalves) {
  const auto pattern = tr::torch_action_pattern();
  auto rank = [&](const std::string& events) { return tr::parse_kineto(trace_text(events), "r.json", pattern); };
  const auto gap = rank(x_event("PP:0F0", 0, 1) + "," + x_event("PP:0B0", 1, 1) + "," + x_event("PP:2F0", 2, 1) +
                        "," + x_event("PP:2B0", 3, 1));
  EXPECT_THAT(error_of([&] { tr::collect_stages({gap}); }), StartsWith("r.json: stage 1: no F ranges"));
  const auto half = rank(x_event("PP:0F0", 0, 1) + "," + x_event("PP:0I0", 1, 1));
  EXPECT_THAT(error_of([&] { tr::collect_stages({half}); }), HasSubstr("stage 0: I ranges without W"));
  const auto fwd = rank(x_event("PP:0F0", 0, 1));
  EXPECT_THAT(error_of([&] { tr::collect_stages({fwd}); }), HasSubstr("stage 0: no backward ranges"));
}

TEST(Kineto, HugeValuesAreRefusedNotWritten) {
  const auto pattern = tr::torch_action_pattern();
  auto rank = [&](const std::string& events) { return tr::parse_kineto(trace_text(events), "r.json", pattern); };
  EXPECT_THAT(error_of([&] { rank(x_event("PP:0F0", 2e18, 1)); }),
              StartsWith("r.json: traceEvents[0].ts: must be <= 1e+18"));
  EXPECT_THAT(error_of([&] { rank(x_event("PP:0F0", 0, 1e13)); }),
              StartsWith("r.json: traceEvents[0].dur: 1e+13 us is too long: 10000000 s is beyond"));
  const double d = 4e12;  // us: each within the limit, I + W beyond it
  const auto big = rank(x_event("PP:0F0", 0, 1) + "," + x_event("PP:0I0", 1, d) + "," + x_event("PP:0W0", 2 * d, d));
  EXPECT_THAT(error_of([&] { tr::collect_stages({big}); }), HasSubstr("the medians of I and W add up to more than"));
}

// Several gzip members in one file (as `cat a.gz b.gz` makes) are one stream of text.
TEST(Kineto, GzipMembersAreConcatenated) {
  auto gzip = [](const std::string& text) {
    z_stream z{};
    EXPECT_EQ(deflateInit2(&z, 6, Z_DEFLATED, 16 + MAX_WBITS, 8, Z_DEFAULT_STRATEGY), Z_OK);
    std::string out(deflateBound(&z, text.size()) + 32, '\0');
    z.next_in = reinterpret_cast<Bytef*>(const_cast<char*>(text.data()));
    z.avail_in = static_cast<uInt>(text.size());
    z.next_out = reinterpret_cast<Bytef*>(out.data());
    z.avail_out = static_cast<uInt>(out.size());
    EXPECT_EQ(deflate(&z, Z_FINISH), Z_STREAM_END);
    out.resize(z.total_out);
    deflateEnd(&z);
    return out;
  };
  const std::string text = clirunner::slurp(kineto("cpu-rank0.json"));
  const std::string two = gzip(text.substr(0, 5000)) + gzip(text.substr(5000));
  EXPECT_EQ(tr::maybe_gunzip(two, "two.gz"), text);
  EXPECT_EQ(tr::parse_kineto(two, "two.gz", tr::torch_action_pattern()).ops.size(), 8u);
}

TEST(Kineto, Median) {
  EXPECT_EQ(tr::median({3}), 3);
  EXPECT_EQ(tr::median({4, 1, 3}), 3);
  EXPECT_EQ(tr::median({4, 1, 3, 2}), 2.5);
}

// ---- the command line ----

class KinetoCli : public ::testing::Test {
 protected:
  clirunner::Outcome run(const std::string& args) { return clirunner::run_adagrouper(args, dir_.path()); }
  std::string path(const std::string& name) { return (dir_.path() / name).string(); }
  static std::string files(const std::vector<std::string>& names) {
    std::string out;
    for (const auto& n : names) out += " '" + kineto(n).string() + "'";
    return out;
  }
  // Exit 2, one line on stderr holding `piece`, no output left behind.
  void expect_bad(const std::string& args, const std::string& piece) {
    const clirunner::Outcome r = run("trace import-kineto " + args + " --output '" + path("out.json") + "'");
    EXPECT_EQ(r.rc, 2) << args << "\n" << r.err;
    EXPECT_EQ(std::count(r.err.begin(), r.err.end(), '\n'), 1) << r.err;
    EXPECT_THAT(r.err, HasSubstr(piece)) << args;
    EXPECT_FALSE(fs::exists(path("out.json"))) << args;
    for (const auto& e : fs::directory_iterator(dir_.path()))
      EXPECT_EQ(e.path().string().find(".tmp."), std::string::npos) << "temporary left: " << e.path();
  }
  TempDir dir_;
};

TEST_F(KinetoCli, HelpListsTheCommand) {
  const auto top = run("trace --help");
  EXPECT_EQ(top.rc, 0);
  EXPECT_THAT(top.out, HasSubstr("  import-kineto "));
  const auto sub = run("trace import-kineto --help");
  EXPECT_EQ(sub.rc, 0);
  EXPECT_THAT(sub.out, StartsWith("Usage: adagrouper trace import-kineto"));
  EXPECT_THAT(sub.out, HasSubstr("Examples:"));
}

TEST_F(KinetoCli, ImportsAndSimulatesTheRoundTrip) {
  const auto r = run("trace import-kineto" + files(kCpu) + " --micro-batch-size 2 --output '" + path("p.json") +
                     "' --stage-trace '" + path("ops.csv") + "'");
  ASSERT_EQ(r.rc, 0) << r.err;
  EXPECT_THAT(r.out, HasSubstr("cpu-rank0.json: 8 CPU ranges, 8 other actions skipped"));
  EXPECT_THAT(r.out, HasSubstr("2 stages, 2 micro-batches seen, b = 2, B = 4"));
  EXPECT_THAT(r.out, HasSubstr("    0      8       1.15        2.2          -          -\n"));
  EXPECT_THAT(r.out, HasSubstr("    1      8       1.55       3.05          -          -\n"));
  const auto p = adagrouper::sim::load_pipeline(path("p.json"));
  EXPECT_EQ(p.name, "p");
  EXPECT_EQ(p.global_batch_size, 4);
  EXPECT_EQ(tr::load_stage_trace(path("ops.csv")).size(), 16u);
  const std::string sim = "simulate --pipeline '" + path("p.json") +
                          "' --network configs/examples/toy-net-free.json --schedule 1f1b -b 2 --iterations 2 --json";
  const auto plain = run(sim);
  ASSERT_EQ(plain.rc, 0) << plain.err;
  // Medians: F 1.15 / 1.55 ms, B 2.2 / 3.05 ms; 1F1B on 2 stages with 2 micro-batches.
  const auto j = nlohmann::json::parse(plain.out);
  EXPECT_NEAR(j["iteration_times_s"][0].get<double>(), 1.15e-3 + 1.55e-3 + 3.05e-3 + 1.55e-3 + 3.05e-3 + 2.2e-3, 1e-12);
  // Measured durations: iteration 0 replays step 1, iteration 1 step 2 (hand-computed
  // 1F1B timelines of the fixture).
  const auto replay = run(sim + " --stage-trace '" + path("ops.csv") + "'");
  ASSERT_EQ(replay.rc, 0) << replay.err;
  const auto k = nlohmann::json::parse(replay.out);
  EXPECT_NEAR(k["iteration_times_s"][0].get<double>(), 12.5e-3, 1e-12);
  EXPECT_NEAR(k["iteration_times_s"][1].get<double>(), 13.20025e-3, 1e-12);
}

TEST_F(KinetoCli, GzipAndSamplesAndGlobalBatch) {
  const auto r = run("trace import-kineto" + files({"cpu-rank0.json", "cpu-rank1.json.gz"}) +
                     " --micro-batch-size 2 --global-batch-size 16 --name measured --output '" + path("p.json") + "'");
  ASSERT_EQ(r.rc, 0) << r.err;
  const auto p = adagrouper::sim::load_pipeline(path("p.json"));
  EXPECT_EQ(p.name, "measured");
  EXPECT_EQ(p.global_batch_size, 16);
  const auto s = run("trace import-kineto" + files(kCuda) + " -b 1 --output '" + path("z.json") +
                     "' --samples-output '" + path("s.csv") + "'");
  ASSERT_EQ(s.rc, 0) << s.err;
  EXPECT_THAT(s.out, HasSubstr("cuda-rank0.json: 9 GPU ranges"));
  EXPECT_THAT(s.out, HasSubstr("2 NCCL send/recv kernels"));
  EXPECT_EQ(tr::load_transfer_samples(path("s.csv")).size(), 3u);
  EXPECT_EQ(tr::load_trace_file(path("s.csv")).format, tr::Format::samples);
  const auto zb = run("simulate --pipeline '" + path("z.json") +
                      "' --network configs/examples/toy-net-free.json --schedule interleaved-zb --micro-batch-size 1");
  EXPECT_EQ(zb.rc, 0) << zb.err;
}

TEST_F(KinetoCli, BadInputIsOneLineAndStatus2) {
  const std::string mb = " --micro-batch-size 2";
  std::ofstream(path("trunc.json")) << clirunner::slurp(kineto("cpu-rank1.json")).substr(0, 3000);
  expect_bad(files({"cpu-rank0.json"}) + " '" + path("trunc.json") + "'" + mb, path("trunc.json") + ": line ");
  std::ofstream(path("rank1.json")) << trace_text(x_event("PP:1F0", 0, 5) + "," +
                                                   R"({"ph": "X", "cat": "user_annotation", "name": "PP:1B0", "ts": 7})");
  expect_bad(files({"cpu-rank0.json"}) + " '" + path("rank1.json") + "'" + mb,
             path("rank1.json") + ": traceEvents[1].dur: missing field");
  std::ofstream(path("rank1.json")) << trace_text(x_event("PP:1F0", 0, 5) + "," + x_event("PP:1B0", 7, -1));
  expect_bad(files({"cpu-rank0.json"}) + " '" + path("rank1.json") + "'" + mb,
             path("rank1.json") + ": traceEvents[1].dur: must be >= 0, got -1");
  std::ofstream(path("none.json")) << trace_text(x_event("ProfilerStep#0", 0, 5));
  expect_bad("'" + path("none.json") + "'" + mb, path("none.json") + ": no compute ranges");
  expect_bad(files({"cpu-rank1.json"}) + mb, "stage 0: no F ranges");
  expect_bad(files(kCpu) + mb + " --samples-output '" + path("s.csv") + "'", "no NCCL send/recv kernels");
  EXPECT_FALSE(fs::exists(path("s.csv")));
  expect_bad(files(kCpu), "--micro-batch-size: missing");
  expect_bad(files(kCpu) + " --micro-batch-size 0", "--micro-batch-size: must be in 1..");
  expect_bad(files(kCpu) + mb + " --global-batch-size 5", "--global-batch-size: 5 is not a multiple of");
  expect_bad(files(kCpu) + mb + " --action-regex '('", "--action-regex: invalid regular expression");
  expect_bad("'" + path("absent.json") + "'" + mb, path("absent.json") + ": cannot open file");
  expect_bad(mb, "give the ranks' trace files");
}

}  // namespace
}  // namespace tracestest
