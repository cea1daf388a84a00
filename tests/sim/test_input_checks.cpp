// The loaders of the simulator core against bad input: integers that would wrap, times
// and rates past the model's scale, typos and duplicate keys, deep nesting, sizes too
// large for memory, names that are not UTF-8, and messages that name the right file.
#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <chrono>
#include <string>

#include "helpers.h"
#include "json_util.h"

namespace {

using namespace simtest;
using adagrouper::Field;
using testutil::input_error;
using ::testing::AllOf;
using ::testing::HasSubstr;
using ::testing::Not;
using ::testing::StartsWith;
using json = nlohmann::json;

// A one-stage pipeline file whose profile entry and top level can be edited as text.
std::string pipeline_text(const std::string& top = R"("global_batch_size": 8)",
                          const std::string& entry = R"("micro_batch_size": 1)") {
  return "{" + top + R"(,
 "stages": [{"profile": [{)" + entry + R"(, "forward_s": 1, "backward_s": 2,
                          "activation_bytes": 10}]}]})";
}

std::string pipeline_error(const std::string& text) {
  TempDir dir;
  const auto path = dir.write("p.json", text);
  return input_error([&] { sim::load_pipeline(path); });
}

std::string network_error(const std::string& text) {
  TempDir dir;
  const auto path = dir.write("n.json", text);
  return input_error([&] { sim::load_network(path, 3); });
}

// --- integers ----------------------------------------------------------------------

TEST(InputChecks, IntegersNeverWrap) {
  // 4294967304 is 2^32 + 8: it used to run as B = 8; 2^62 gave 0 s iterations.
  EXPECT_THAT(pipeline_error(pipeline_text(R"("global_batch_size": 4294967304)")),
              HasSubstr("global_batch_size: must be <= 16777216, got 4294967304"));
  EXPECT_THAT(pipeline_error(pipeline_text(R"("global_batch_size": 4611686018427387904)")),
              HasSubstr("global_batch_size: must be <= 16777216"));
  EXPECT_THAT(pipeline_error(pipeline_text(R"("global_batch_size": 18446744073709551615)")),
              HasSubstr("global_batch_size: must be an integer of at most 9223372036854775807"));
  EXPECT_THAT(pipeline_error(pipeline_text(R"("global_batch_size": 8)", R"("micro_batch_size": 4294967297)")),
              HasSubstr("stages[0].profile[0].micro_batch_size: must be <= 16777216, got 4294967297"));
  EXPECT_THAT(network_error(R"({"channels": [{"from": 4294967296, "to": 1}]})"),
              HasSubstr("channels[0].from: must be <= 2147483647"));
  EXPECT_THAT(network_error(R"({"channels": [{"from": 0, "to": 1, "capacity": 4294967297}]})"),
              HasSubstr("channels[0].capacity: must be <= 2147483647"));
  TempDir dir;
  const auto order = dir.write("o.json", R"({"stages": [["F0", {"op": "forward", "micro_batch": 4294967297}]]})");
  EXPECT_THAT(input_error([&] { sim::load_schedule_file(order, 1, 2); }),
              HasSubstr("stages[0][1].micro_batch: must be <= 2147483647"));
}

TEST(InputChecks, IntInReadsTheWholeRange) {
  const json doc = json::parse(R"({"a": 7, "b": -3, "c": 2.0, "d": 2.5, "e": 2147483648})");
  const Field f(doc, "x.json");
  EXPECT_EQ(f.at("a").int_in(0, 7), 7);
  EXPECT_EQ(f.at("b").int_in(-3, 0), -3);
  EXPECT_EQ(f.at("c").int_in(1), 2);
  EXPECT_EQ(input_error([&] { f.at("d").int_in(0); }), "x.json: d: must be an integer, got 2.5");
  EXPECT_EQ(input_error([&] { f.at("e").int_in(0); }), "x.json: e: must be <= 2147483647, got 2147483648");
  EXPECT_EQ(input_error([&] { f.at("a").int_in(8); }), "x.json: a: must be >= 8, got 7");
}

// --- times and rates -----------------------------------------------------------------

TEST(InputChecks, TimesAndRatesStayOnTheModelsScale) {
  EXPECT_THAT(network_error(R"({"default": {"points": [[0, 1], [1e-10, 2]], "repeat_s": 1}})"),
              AllOf(HasSubstr("default.points[1]"), HasSubstr("time resolution of 1 ns")));
  EXPECT_THAT(network_error(R"({"default": {"points": [[0, 1]], "repeat_s": 1e-17}})"),
              AllOf(HasSubstr("default.repeat_s"), HasSubstr("shorter than the model's time resolution of 1 ns")));
  EXPECT_THAT(network_error(R"({"default": {"points": [[0, 1], [1e17, 2]]}})"),
              AllOf(HasSubstr("default.points[1][0]"), HasSubstr("4194304 s")));
  EXPECT_THAT(network_error(R"({"default": {"constant": 1e-300}})"),
              AllOf(HasSubstr("default.constant"), HasSubstr("the smallest rate other than 0")));
  EXPECT_THAT(network_error(R"({"default": {"constant": 1e300}})"),
              AllOf(HasSubstr("default.constant"), HasSubstr("the largest rate")));
  EXPECT_THAT(network_error(R"({"latency_s": 1e17})"), HasSubstr("latency_s: 1e+17 s is beyond"));
  const std::string huge = R"({"global_batch_size": 8, "stages": [{"profile": [{"micro_batch_size": 1,
      "forward_s": 1e308, "backward_s": 2, "activation_bytes": 10}]}]})";
  EXPECT_THAT(pipeline_error(huge), HasSubstr("stages[0].profile[0].forward_s: 1e+308 s is beyond the 4194304 s"));
  const std::string bytes = R"({"global_batch_size": 8, "stages": [{"profile": [{"micro_batch_size": 1,
      "forward_s": 1, "backward_s": 2, "activation_bytes": 1e300}]}]})";
  EXPECT_THAT(pipeline_error(bytes), HasSubstr("activation_bytes: must be <= 1e+18"));
}

TEST(InputChecks, ATinyPeriodNeverHangsTheCursor) {
  // repeat_s 1e-17 (which loaders now refuse) looped forever in the cursor's slow path:
  // rounding swallows the period. The loop is bounded and says why instead.
  const sim::RateTrace tr = sim::RateTrace::piecewise({0.0, 5e-18}, {1e9, 2e9}, 1e-17);
  const auto start = std::chrono::steady_clock::now();
  EXPECT_THROW(
      {
        sim::RateCursor c(tr);
        const double t = c.finish(0.5, 1e6);
        c.finish(c.finish(t, 1e6) + 0.25, 1e6);
      },
      SimError);
  EXPECT_LT(std::chrono::steady_clock::now() - start, std::chrono::seconds(5));
  const sim::RateTrace fine = sim::RateTrace::piecewise({0.0, 0.5}, {1e9, 2e9}, 1.0);
  sim::RateCursor c(fine);
  EXPECT_DOUBLE_EQ(c.finish(0.25, 1.5e9), 1.25);  // a resolved period runs as before
}

TEST(InputChecks, StageTraceDurationsBlameTheStageTrace) {
  sim::Scenario sc = sim::make_scenario(uniform_pipeline(2, 4, 1.0, 2.0, 0.0), sim::Network::uniform(2, 1e9),
                                        sim::make_named("1f1b", 2, 4, std::nullopt), 1, 1);
  EXPECT_EQ(input_error([&] {
              sim::set_op_timings(sc, {sim::OpTiming{0, 1, 3, sim::Phase::Forward, 1e308, 7}}, "st.csv");
            }),
            "st.csv:7: duration_s: 1e+308 s is beyond the 4194304 s (2^22 s, 48.5 days) that the model resolves to "
            "1 ns");
  // I and W of a run whose backward is whole never run: not silently ignored.
  EXPECT_THAT(input_error([&] {
                sim::set_op_timings(sc, {sim::OpTiming{0, 1, 3, sim::Phase::BackwardInput, 1.0, 4}}, "st.csv");
              }),
              HasSubstr("st.csv:4: I3 of stage 1 does not run in this schedule (its backward is B)"));
}

// --- unknown and duplicate keys ---------------------------------------------------------

TEST(InputChecks, TyposNameTheLineAndTheNearestKey) {
  const std::string typo_in_profile = "{\"global_batch_size\": 8,\n\"stages\": [{\"profile\": [\n"
                                      "  {\"micro_batch_size\": 1, \"forwad_s\": 1, \"backward_s\": 2,\n"
                                      "   \"activation_bytes\": 10}]}]}";
  EXPECT_THAT(pipeline_error(typo_in_profile),
              HasSubstr("p.json: line 3: stages[0].profile[0]: unknown key \"forwad_s\" for a profile entry (did you "
                        "mean \"forward_s\"?)"));
  EXPECT_THAT(pipeline_error("{\"global_batch_size\": 8, \"stages\": [{\"optimiser_s\": 1, \"profile\": []}]}"),
              HasSubstr("p.json: line 1: stages[0]: unknown key \"optimiser_s\" for a stage (did you mean "
                        "\"optimizer_s\"?)"));
  // A misspelt default used to leave every channel unlimited.
  EXPECT_THAT(network_error("{\"latency_s\": 0,\n \"defualt\": {\"constant\": 1e9}}"),
              HasSubstr("n.json: line 2: unknown key \"defualt\" for a network (did you mean \"default\"?)"));
  EXPECT_THAT(network_error(R"({"channels": [{"from": 0, "to": 1, "rat": {"constant": 1}}]})"),
              HasSubstr("channels[0]: unknown key \"rat\" for a channel (did you mean \"rate\"?)"));
  EXPECT_THAT(network_error(R"({"stages": [{"stage": 0, "sped": {"constant": 1}}]})"),
              HasSubstr("stages[0]: unknown key \"sped\" for a stage (did you mean \"speed\"?)"));
  EXPECT_THAT(network_error(R"({"default": {"points": [[0, 1]], "repeats": 3}})"),
              HasSubstr("default: unknown key \"repeats\" for a points rate (did you mean \"repeat_s\"?)"));
  EXPECT_THAT(network_error(R"({"default": {"constant": 1, "points": [[0, 1]]}})"),
              HasSubstr("default: unknown key \"points\" for a constant rate (known keys: constant)"));
  EXPECT_THAT(network_error(R"({"colour": 1})"),
              HasSubstr("unknown key \"colour\" for a network (known keys: latency_s, burst_bytes, default, channels, stages)"));
  TempDir dir;
  const auto order = dir.write("o.json", R"({"stages": [["F0", {"op": "forward", "micro_bach": 1}]]})");
  EXPECT_THAT(input_error([&] { sim::load_schedule_file(order, 1, 2); }),
              HasSubstr("stages[0][1]: unknown key \"micro_bach\" for an op (did you mean \"micro_batch\"?)"));
  // Free text is allowed by name, everywhere.
  EXPECT_NO_THROW(sim::parse_network_spec(
      json::parse(R"({"description": "d", "comment": "c", "channels": [{"from": 0, "to": 1, "comment": "x"}]})"),
      "n.json"));
  EXPECT_NO_THROW(sim::parse_pipeline(json::parse(pipeline_text(R"("name": "p", "description": "d", "comment": 1,
                                                                   "global_batch_size": 8)")),
                                      "p.json"));
}

TEST(InputChecks, EditDistanceCountsATranspositionOnce) {
  EXPECT_EQ(adagrouper::edit_distance("forward_s", "forward_s"), 0u);
  EXPECT_EQ(adagrouper::edit_distance("forwad_s", "forward_s"), 1u);
  EXPECT_EQ(adagrouper::edit_distance("defualt", "default"), 1u);
  EXPECT_EQ(adagrouper::edit_distance("optimiser_s", "optimizer_s"), 1u);
  EXPECT_EQ(adagrouper::edit_distance("", "abc"), 3u);
  EXPECT_GT(adagrouper::edit_distance("colour", "latency_s"), 2u);
}

TEST(InputChecks, SummariesAndPlansTakeOnlyTheKeysTheirWritersWrite) {
  const auto summary = json::parse(R"({"pipeline": "p", "schedule": "1f1b", "k": 1, "micro_batch_size": 1,
      "micro_batches": 2, "stages": 1, "iterations": 1, "iteration_times_s": [3], "bubble_fraction": 0,
      "per_stage": [{"stage": 0, "busy_s": 3, "bubble_s": 0, "peak_inflight": 1}], "channels": [],
      "virtual_stages": 1, "model_stages": 1})");
  EXPECT_NO_THROW(sim::parse_summary(summary, "s.json"));
  json typo = summary;
  typo["bubble_fractoin"] = 0;
  EXPECT_THAT(input_error([&] { sim::parse_summary(typo, "s.json"); }),
              HasSubstr("unknown key \"bubble_fractoin\" for a summary (did you mean \"bubble_fraction\"?)"));
  typo = summary;
  typo["per_stage"][0]["busy"] = 1;
  EXPECT_THAT(input_error([&] { sim::parse_summary(typo, "s.json"); }),
              HasSubstr("per_stage[0]: unknown key \"busy\" (did you mean \"busy_s\"?)"));
  typo = summary;
  typo["k"] = 4294967297;
  EXPECT_THAT(input_error([&] { sim::parse_summary(typo, "s.json"); }), HasSubstr("k: must be <= 16777216"));
  typo = summary;
  typo["iteration_times_s"][0] = 1e308;
  EXPECT_THAT(input_error([&] { sim::parse_summary(typo, "s.json"); }), HasSubstr("iteration_times_s[0]: 1e+308 s"));

  TempDir dir;
  const auto plan = dir.write("plan.json", R"({"schema": "adagrouper.plan/1", "chosen": {"schedule": "kfkb", "k": 2,
      "micro_batch_size": 4}, "devices": [{"stage": 0, "program": [{"op": "forward", "micro_bacth": 0}]}]})");
  EXPECT_THAT(input_error([&] { sim::load_plan_choice(plan.string()); }),
              HasSubstr("devices[0].program[0]: unknown key \"micro_bacth\" for a plan (did you mean "
                        "\"micro_batch\"?)"));
  const auto good = dir.write("good.json", R"({"schema": "adagrouper.plan/1", "chosen": {"schedule": "kfkb", "k": 2,
      "micro_batch_size": 4, "order": [["F0"]]}, "partition": {"trials": [{"note": "x"}]}})");
  const sim::PlanChoice c = sim::load_plan_choice(good.string());
  EXPECT_EQ(c.schedule, "kfkb");
  EXPECT_EQ(c.k, 2);
  EXPECT_EQ(c.micro_batch_size, 4);
}

// --- depth --------------------------------------------------------------------------

TEST(InputChecks, DeepNestingIsRefusedNotACrash) {
  const std::string deep = std::string(100000, '[') + std::string(100000, ']');
  EXPECT_EQ(input_error([&] { adagrouper::parse_json_text(deep, "deep.json"); }),
            "deep.json: line 1: nested more than 128 levels");
  const std::string ok = std::string(128, '[') + std::string(128, ']');
  EXPECT_NO_THROW(adagrouper::parse_json_text(ok, "ok.json"));
  EXPECT_EQ(input_error([&] { adagrouper::parse_json_text("{\n\"a\": " + deep + "}", "deep.json"); }),
            "deep.json: line 2: nested more than 128 levels");
  // A deep value built in memory: its description reads a bounded part of it.
  json v = json::array();
  for (int i = 0; i < 100000; ++i) v = json::array({std::move(v)});
  const std::string d = adagrouper::describe_json(v);
  EXPECT_LE(d.size(), 40u);
  EXPECT_THAT(d, StartsWith("[[[["));
  EXPECT_EQ(adagrouper::describe_json(json::parse(R"({"a":1,"b":[1,2]})")), R"({"a":1,"b":[1,2]})");
}

TEST(InputChecks, SyntaxErrorsNameLineAndColumn) {
  EXPECT_THAT(input_error([] { adagrouper::parse_json_text("{\n  \"a\": }", "x.json"); }),
              StartsWith("x.json: line 2, column 8: invalid JSON: "));
  EXPECT_THAT(input_error([] { adagrouper::parse_json_text("{\"a\": 1e999}", "x.json"); }),
              AllOf(StartsWith("x.json: line 1"), HasSubstr("invalid JSON: number overflow")));
  EXPECT_THAT(input_error([] { adagrouper::parse_json_text("{oops", "m.jsonl", 7); }), StartsWith("m.jsonl: line 7, "));
}

// --- sizes ----------------------------------------------------------------------------

TEST(InputChecks, HugeSizesAreRefusedBeforeAllocating) {
  // B = 2^24 at b = 1 on 8 stages: 2^28 ops an iteration.
  const sim::Pipeline p = uniform_pipeline(8, 1 << 24, 1.0, 2.0, 0.0);
  EXPECT_THAT(input_error([&] { p.at(1); }),
              HasSubstr("--micro-batch-size: micro-batch size 1 gives M = 16777216 micro-batches on 8 stages, "
                        "268435456 ops an iteration, about 16.0 GiB of memory at 64 bytes an op: more than the "
                        "67108864 ops a run may hold"));
  EXPECT_NO_THROW(uniform_pipeline(8, 1 << 22, 1.0, 2.0, 0.0).at(1));  // 2^26 ops: the most a run may have
  EXPECT_THAT(input_error([] { sim::Network::uniform(5000, std::nullopt); }), HasSubstr("at most 4096"));
  json many = uniform_pipeline_json(1, 8, 1.0, 2.0, 0.0);
  many["stages"] = json::array();
  for (int s = 0; s < 4097; ++s) many["stages"].push_back(uniform_pipeline_json(1, 8, 1.0, 2.0, 0.0)["stages"][0]);
  EXPECT_THAT(input_error([&] { sim::parse_pipeline(many, "p.json"); }),
              HasSubstr("stages: lists 4097 stages, more than the 4096"));
}

// --- names that are not UTF-8 ------------------------------------------------------------

TEST(InputChecks, NamesForJsonAreValidUtf8) {
  EXPECT_EQ(adagrouper::utf8_safe("plain"), "plain");
  EXPECT_EQ(adagrouper::utf8_safe("caf\xC3\xA9 \xE2\x82\xAC \xF0\x9F\x98\x80"), "caf\xC3\xA9 \xE2\x82\xAC \xF0\x9F\x98\x80");
  EXPECT_EQ(adagrouper::utf8_safe("a\xFF" "b"), "a\xEF\xBF\xBD" "b");
  EXPECT_EQ(adagrouper::utf8_safe("\xC0\xAF"), "\xEF\xBF\xBD\xEF\xBF\xBD");          // overlong
  EXPECT_EQ(adagrouper::utf8_safe("\xED\xA0\x80"), "\xEF\xBF\xBD\xEF\xBF\xBD\xEF\xBF\xBD");  // a surrogate
  EXPECT_EQ(adagrouper::utf8_safe("x\xE2\x82"), "x\xEF\xBF\xBD\xEF\xBF\xBD");        // truncated
  TempDir dir;
  const auto path = dir.write("pipe\xFF.json", pipeline_text());
  const sim::Pipeline p = sim::load_pipeline(path);
  EXPECT_NO_THROW((void)json(p.name).dump());
  EXPECT_EQ(p.name, "pipe\xEF\xBF\xBD");
}

// --- messages ---------------------------------------------------------------------------

TEST(InputChecks, ADirectoryIsNamedAsOne) {
  TempDir dir;
  const std::string d = dir.path().string();
  EXPECT_EQ(input_error([&] { adagrouper::read_json_file(dir.path()); }), d + ": is a directory");
  EXPECT_EQ(input_error([&] { sim::load_pipeline(dir.path()); }), d + ": is a directory");
  EXPECT_EQ(input_error([&] { sim::load_network(dir.path(), 2); }), d + ": is a directory");
  EXPECT_EQ(input_error([&] { sim::load_schedule_file(dir.path(), 2, 2); }), d + ": is a directory");
  std::filesystem::create_directories(dir.path() / "order.csv");
  EXPECT_EQ(input_error([&] { sim::load_schedule_file(dir.path() / "order.csv", 2, 2); }),
            (dir.path() / "order.csv").string() + ": is a directory");
  EXPECT_EQ(input_error([&] { sim::load_summary(d); }), d + ": is a directory");
}

TEST(InputChecks, DuplicateKeysAreRefusedWithTheirLine) {
  EXPECT_THAT(pipeline_error("{\"global_batch_size\": 8,\n \"global_batch_size\": 16, \"stages\": []}"),
              HasSubstr("p.json: line 2: duplicate key \"global_batch_size\""));
  EXPECT_THAT(network_error("{\"channels\": [\n {\"from\": 0, \"to\": 1},\n {\"from\": 1, \"to\": 0,\n  \"to\": 2}]}"),
              HasSubstr("n.json: line 4: channels[1]: duplicate key \"to\""));
}

}  // namespace
