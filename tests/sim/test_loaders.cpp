// Pipeline, network and schedule files (docs/formats.md): what they mean, and every
// class of bad input, each an InputError naming the file and the field.
#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <functional>
#include <string>

#include "helpers.h"

namespace simtest {
namespace {

using nlohmann::json;
using testing::AllOf;
using testing::HasSubstr;

using testutil::input_error;

// `load(path)` throws an InputError "PATH: FIELD: ..." that contains `what`.
void expect_names_field(const std::function<void(const std::filesystem::path&)>& load,
                        const std::filesystem::path& path, const char* field, const char* what) {
  EXPECT_THAT(input_error([&] { load(path); }),
              AllOf(HasSubstr(path.string() + ": " + field + ": "), HasSubstr(what)));
}

// A bad document and what the loader's message must name.
struct BadDoc {
  const char* label;
  const char* doc;
  const char* field;
  const char* what;
};

// Each case's document written to `name` in a fresh directory: `load` refuses it naming
// the file and the field (expect_names_field).
void expect_each_names_field(const std::vector<BadDoc>& cases, const std::string& name,
                             const std::function<void(const std::filesystem::path&)>& load) {
  TempDir dir;
  for (const auto& c : cases) {
    SCOPED_TRACE(c.label);
    expect_names_field(load, dir.write(name, std::string(c.doc)), c.field, c.what);
  }
}

// ---------------------------------------------------------------------------------
// Pipeline files

// Two stages, B = 12, profiles at b = 1 and b = 4.
json good_pipeline() {
  return json::parse(R"({
    "name": "two",
    "global_batch_size": 12,
    "memory_limit_bytes": 1000000,
    "stages": [
      {"static_bytes": 500, "optimizer_s": 0.25, "profile": [
        {"micro_batch_size": 1, "forward_s": 1, "backward_s": 3, "activation_bytes": 30, "output_bytes": 3},
        {"micro_batch_size": 4, "forward_s": 4, "backward_s": 9, "activation_bytes": 120, "output_bytes": 12}]},
      {"static_bytes": 700, "profile": [
        {"micro_batch_size": 1, "forward_s": 2, "backward_s": 6, "activation_bytes": 60, "output_bytes": 99},
        {"micro_batch_size": 4, "forward_s": 5, "backward_s": 12, "activation_bytes": 90, "output_bytes": 99}]}
    ]})");
}

TEST(PipelineFile, LoadsAndInterpolates) {
  TempDir dir;
  const auto path = dir.write("pipe.json", good_pipeline());
  const auto p = sim::load_pipeline(path);
  EXPECT_EQ(p.name, "two");
  EXPECT_EQ(p.source, path.string());
  EXPECT_EQ(p.global_batch_size, 12);
  ASSERT_TRUE(p.memory_limit_bytes);
  EXPECT_DOUBLE_EQ(*p.memory_limit_bytes, 1e6);
  ASSERT_EQ(p.num_stages(), 2);
  EXPECT_EQ(p.min_micro_batch_size(), 1);
  EXPECT_EQ(p.max_micro_batch_size(), 4);

  // b = 2: one third of the way from 1 to 4.
  const auto at2 = p.at(2);
  ASSERT_EQ(at2.size(), 2u);
  EXPECT_DOUBLE_EQ(at2[0].fwd, 2.0);
  EXPECT_DOUBLE_EQ(at2[0].bwd, 5.0);
  EXPECT_DOUBLE_EQ(at2[0].act, 60.0);
  EXPECT_DOUBLE_EQ(at2[0].out, 6.0);
  EXPECT_DOUBLE_EQ(at2[0].gout, 0.0);  // nothing flows back from stage 0
  EXPECT_DOUBLE_EQ(at2[0].static_bytes, 500.0);
  EXPECT_DOUBLE_EQ(at2[0].opt, 0.25);
  EXPECT_DOUBLE_EQ(at2[1].fwd, 3.0);
  EXPECT_DOUBLE_EQ(at2[1].bwd, 8.0);
  EXPECT_DOUBLE_EQ(at2[1].act, 70.0);
  EXPECT_DOUBLE_EQ(at2[1].out, 0.0);   // output_bytes is ignored on the last stage
  EXPECT_DOUBLE_EQ(at2[1].gout, 6.0);  // default: the previous stage's output at b = 2
  EXPECT_DOUBLE_EQ(at2[1].opt, 0.0);

  // b = 3 interpolates, b = 4 and b = 1 are the measured points.
  const auto at3 = p.at(3);
  EXPECT_DOUBLE_EQ(at3[0].fwd, 3.0);
  EXPECT_DOUBLE_EQ(at3[1].gout, 9.0);
  const auto at4 = p.at(4);
  EXPECT_DOUBLE_EQ(at4[0].bwd, 9.0);
  EXPECT_DOUBLE_EQ(at4[1].act, 90.0);
  EXPECT_DOUBLE_EQ(at4[1].gout, 12.0);
  const auto at1 = p.at(1);
  EXPECT_DOUBLE_EQ(at1[1].fwd, 2.0);
  EXPECT_DOUBLE_EQ(at1[1].gout, 3.0);
}

TEST(PipelineFile, GradOutputBytesGivenAndInterpolated) {
  json doc = good_pipeline();
  doc["stages"][1]["profile"][0]["grad_output_bytes"] = 30;
  doc["stages"][1]["profile"][1]["grad_output_bytes"] = 60;
  const auto p = sim::parse_pipeline(doc, "g.json");
  EXPECT_DOUBLE_EQ(p.at(1)[1].gout, 30.0);
  EXPECT_DOUBLE_EQ(p.at(2)[1].gout, 40.0);
  EXPECT_DOUBLE_EQ(p.at(4)[1].gout, 60.0);
  // grad_output_bytes on the first stage is ignored.
  doc["stages"][0]["profile"][0]["grad_output_bytes"] = 1;
  doc["stages"][0]["profile"][1]["grad_output_bytes"] = 1;
  EXPECT_DOUBLE_EQ(sim::parse_pipeline(doc, "g.json").at(2)[0].gout, 0.0);
}

TEST(PipelineFile, DefaultsAndNameFromFile) {
  json doc = good_pipeline();
  doc.erase("name");
  doc.erase("memory_limit_bytes");
  doc["stages"][1]["profile"][0].erase("output_bytes");  // optional on the last stage
  doc["stages"][1]["profile"][1].erase("output_bytes");
  const auto p = sim::parse_pipeline(doc, "dir/my-model.json");
  EXPECT_EQ(p.name, "my-model");
  EXPECT_FALSE(p.memory_limit_bytes);
  EXPECT_DOUBLE_EQ(p.stages[1].static_bytes, 700.0);
  EXPECT_DOUBLE_EQ(p.stages[1].optimizer_s, 0.0);
}

// A stage's op_overhead_s lasts every op of the stage longer: F, B, and each half of a
// split backward; the pipeline without it gives the profiles alone.
TEST(PipelineFile, OpOverheadLengthensEveryOpOfItsStage) {
  json doc = good_pipeline();
  doc["stages"][1]["op_overhead_s"] = 0.125;
  doc["stages"][1]["profile"][0]["backward_weight_s"] = 4;
  const auto p = sim::parse_pipeline(doc, "o.json");
  EXPECT_EQ(p.stages[0].op_overhead_s, 0.0);
  EXPECT_EQ(p.stages[1].op_overhead_s, 0.125);
  const auto at1 = p.at(1), bare = p.without_op_overhead().at(1);
  EXPECT_EQ(at1[0].fwd, 1.0);  // stage 0 has none
  EXPECT_EQ(at1[0].bwd, 3.0);
  EXPECT_EQ(at1[1].fwd, 2.125);
  EXPECT_EQ(at1[1].bwd, 6.125);
  EXPECT_EQ(at1[1].bwd_input, 2.125);  // backward_s - backward_weight_s, then the overhead
  EXPECT_EQ(at1[1].bwd_weight, 4.125);
  EXPECT_EQ(bare[1].fwd, 2.0);
  EXPECT_EQ(bare[1].bwd_input, 2.0);
  EXPECT_EQ(bare[1].bwd_weight, 4.0);
  EXPECT_EQ(at1[1].act, bare[1].act);
  EXPECT_EQ(p.without_op_overhead().stages[1].op_overhead_s, 0.0);
  EXPECT_EQ(p.stages[1].op_overhead_s, 0.125);  // the copy, not the pipeline, lost it
}

// A run over a pipeline with op overhead o is the run over the pipeline whose profiles
// last o longer, to the bit: unsplit (F + o, B + o) and split (I + o, W + o).
TEST(PipelineFile, OpOverheadRunsAsLongerProfiles) {
  for (const bool split : {false, true}) {
    SCOPED_TRACE(split ? "split backward" : "one backward");
    json with = good_pipeline(), longer = good_pipeline();
    for (int s = 0; s < 2; ++s) {
      const double o = s == 0 ? 0.25 : 0.5;
      with["stages"][s]["op_overhead_s"] = o;
      for (json& e : longer["stages"][s]["profile"]) {
        const double b = e["backward_s"].get<double>();
        e["forward_s"] = e["forward_s"].get<double>() + o;
        e["backward_s"] = b + o;
        if (split) {  // each half pays it: the file gives both halves
          e["backward_input_s"] = b / 2 + o;
          e["backward_weight_s"] = b / 2 + o;
        }
      }
    }
    sim::ScheduleSpec spec = sim::ScheduleSpec::named("1f1b", std::nullopt);
    spec.split_backward = split;
    // b = 1, a measured size: no interpolation to round differently.
    const sim::Schedule sch = sim::make_schedule(spec, 2, 12);
    const sim::Network net = sim::Network::uniform(2, 4.0);
    const sim::SimResult a = sim::simulate(sim::make_scenario(sim::parse_pipeline(with, "w.json"), net, sch, 1, 2));
    const sim::SimResult b = sim::simulate(sim::make_scenario(sim::parse_pipeline(longer, "l.json"), net, sch, 1, 2));
    EXPECT_EQ(a.total_time_s, b.total_time_s);
    EXPECT_GT(a.total_time_s, sim::simulate(sim::make_scenario(sim::parse_pipeline(good_pipeline(), "g.json"), net,
                                                               sch, 1, 2))
                                  .total_time_s);
    ASSERT_EQ(a.stages.size(), b.stages.size());
    for (std::size_t s = 0; s < a.stages.size(); ++s) {
      EXPECT_EQ(a.stages[s].busy_s, b.stages[s].busy_s);
      EXPECT_EQ(a.stages[s].bubble_s, b.stages[s].bubble_s);
      EXPECT_EQ(a.stages[s].peak_memory_bytes, b.stages[s].peak_memory_bytes);
    }
  }
}

TEST(PipelineFile, MicroBatchSizeChecks) {
  const auto p = sim::parse_pipeline(good_pipeline(), "pipe.json");
  // Does not divide the global batch (12).
  EXPECT_THAT(input_error([&] { p.at(5); }),
              AllOf(HasSubstr("--micro-batch-size"), HasSubstr("does not divide"), HasSubstr("pipe.json")));
  // Divides 12 but lies outside the profiles (1..4).
  EXPECT_THAT(input_error([&] { p.at(6); }),
              AllOf(HasSubstr("--micro-batch-size"), HasSubstr("outside the profile"), HasSubstr("pipe.json"),
                    HasSubstr("stages[0].profile")));
  EXPECT_THAT(input_error([&] { p.at(0); }), HasSubstr(">= 1"));
  EXPECT_THAT(input_error([&] { p.at(-2); }), HasSubstr(">= 1"));
  EXPECT_THAT(input_error([&] { p.at(12, "plan b"); }), HasSubstr("plan b"));
  // make_scenario passes b through the same checks.
  EXPECT_THROW(sim::make_scenario(p, sim::Network::uniform(2, 1.0), sim::make_named("1f1b", 2, 2, std::nullopt), 6, 1),
               InputError);

  // A stage with a narrower profile limits the range.
  json doc = good_pipeline();
  doc["stages"][1]["profile"][1]["micro_batch_size"] = 3;
  const auto narrow = sim::parse_pipeline(doc, "narrow.json");
  EXPECT_EQ(narrow.max_micro_batch_size(), 3);
  EXPECT_THAT(input_error([&] { narrow.at(4); }), HasSubstr("stages[1].profile covers 1..3"));
}

struct BadPipeline {
  const char* label;
  std::function<void(json&)> edit;
  const char* field;
  const char* what;
};

TEST(PipelineFile, BadInputNamesFileAndField) {
  const std::vector<BadPipeline> cases{
      {"missing field", [](json& d) { d["stages"][0]["profile"][0].erase("forward_s"); },
       "stages[0].profile[0].forward_s", "missing field"},
      {"mistyped field", [](json& d) { d["stages"][0]["profile"][0]["forward_s"] = "1.0"; },
       "stages[0].profile[0].forward_s", "must be a number"},
      {"negative duration", [](json& d) { d["stages"][1]["profile"][0]["backward_s"] = -1; },
       "stages[1].profile[0].backward_s", ">= 0"},
      {"negative activation size", [](json& d) { d["stages"][1]["profile"][1]["activation_bytes"] = -5; },
       "stages[1].profile[1].activation_bytes", ">= 0"},
      {"negative output size", [](json& d) { d["stages"][0]["profile"][1]["output_bytes"] = -1; },
       "stages[0].profile[1].output_bytes", ">= 0"},
      {"negative grad size",
       [](json& d) {
         d["stages"][1]["profile"][0]["grad_output_bytes"] = 1;
         d["stages"][1]["profile"][1]["grad_output_bytes"] = -1;
       },
       "stages[1].profile[1].grad_output_bytes", ">= 0"},
      {"negative static", [](json& d) { d["stages"][0]["static_bytes"] = -1; }, "stages[0].static_bytes", ">= 0"},
      {"negative optimizer", [](json& d) { d["stages"][0]["optimizer_s"] = -0.5; }, "stages[0].optimizer_s", ">= 0"},
      {"negative op overhead", [](json& d) { d["stages"][1]["op_overhead_s"] = -1e-6; }, "stages[1].op_overhead_s",
       ">= 0"},
      {"op overhead mistyped", [](json& d) { d["stages"][0]["op_overhead_s"] = true; }, "stages[0].op_overhead_s",
       "must be"},
      {"empty profile", [](json& d) { d["stages"][1]["profile"] = json::array(); }, "stages[1].profile",
       "empty profile"},
      {"profile not an array", [](json& d) { d["stages"][1]["profile"] = 3; }, "stages[1].profile",
       "must be an array"},
      {"missing profile", [](json& d) { d["stages"][1].erase("profile"); }, "stages[1].profile", "missing field"},
      {"profile sizes not increasing", [](json& d) { d["stages"][0]["profile"][1]["micro_batch_size"] = 1; },
       "stages[0].profile[1].micro_batch_size", "strictly increasing"},
      {"micro_batch_size 0", [](json& d) { d["stages"][0]["profile"][0]["micro_batch_size"] = 0; },
       "stages[0].profile[0].micro_batch_size", ">= 1"},
      {"micro_batch_size fractional", [](json& d) { d["stages"][0]["profile"][0]["micro_batch_size"] = 1.5; },
       "stages[0].profile[0].micro_batch_size", "integer"},
      {"grad_output_bytes on some entries", [](json& d) { d["stages"][1]["profile"][0]["grad_output_bytes"] = 1; },
       "stages[1].profile", "every entry or on none"},
      {"output_bytes missing before the last stage", [](json& d) { d["stages"][0]["profile"][0].erase("output_bytes"); },
       "stages[0].profile[0].output_bytes", "missing field"},
      {"missing global batch", [](json& d) { d.erase("global_batch_size"); }, "global_batch_size", "missing field"},
      {"global batch 0", [](json& d) { d["global_batch_size"] = 0; }, "global_batch_size", ">= 1"},
      {"global batch mistyped", [](json& d) { d["global_batch_size"] = "12"; }, "global_batch_size", "integer"},
      {"memory limit 0", [](json& d) { d["memory_limit_bytes"] = 0; }, "memory_limit_bytes", "> 0"},
      {"no stages", [](json& d) { d["stages"] = json::array(); }, "stages", "at least one stage"},
      {"stage not an object", [](json& d) { d["stages"][1] = 7; }, "stages[1]", "must be an object"},
      {"name not a string", [](json& d) { d["name"] = 3; }, "name", "must be a string"},
  };
  TempDir dir;
  for (const auto& c : cases) {
    SCOPED_TRACE(c.label);
    json doc = good_pipeline();
    c.edit(doc);
    expect_names_field([](const auto& path) { sim::load_pipeline(path); }, dir.write("pipe.json", doc), c.field,
                       c.what);
  }
  // The root must be an object.
  const auto path = dir.write("pipe.json", std::string("[1, 2]"));
  EXPECT_THAT(input_error([&] { sim::load_pipeline(path); }),
              AllOf(HasSubstr(path.string()), HasSubstr("must be an object")));
}

TEST(JsonFile, SyntaxErrorNamesLine) {
  TempDir dir;
  const auto path = dir.write("broken.json", std::string("{\n  \"a\": 1,\n  \"b\": ,\n  \"c\": 3\n}\n"));
  EXPECT_THAT(input_error([&] { adagrouper::read_json_file(path); }),
              AllOf(HasSubstr(path.string()), HasSubstr("line 3")));
  // The same through the loaders.
  EXPECT_THAT(input_error([&] { sim::load_pipeline(path); }), AllOf(HasSubstr(path.string()), HasSubstr("line 3")));
  EXPECT_THAT(input_error([&] { sim::load_network(path, 2); }), AllOf(HasSubstr(path.string()), HasSubstr("line 3")));
  EXPECT_THAT(input_error([&] { sim::load_schedule_file(path, 2, 2); }),
              AllOf(HasSubstr(path.string()), HasSubstr("line 3")));

  const auto trailing = dir.write("trailing.json", std::string("{\"a\": 1}\n\n\n\n}\n"));
  EXPECT_THAT(input_error([&] { adagrouper::read_json_file(trailing); }), HasSubstr("line 5"));

  EXPECT_THAT(input_error([&] { adagrouper::read_json_file(dir.path() / "absent.json"); }),
              AllOf(HasSubstr("absent.json"), HasSubstr("cannot open")));
  EXPECT_EQ(adagrouper::read_json_file(dir.write("ok.json", std::string("{\"x\": [1, 2]}")))["x"][1], 2);
}

TEST(JsonField, TypedReads) {
  const json doc = json::parse(R"({"n": 2.5, "i": 3, "f": 4.0, "neg": -1, "s": "x", "b": true, "a": [1], "z": 0})");
  adagrouper::Field root(doc, "f.json");
  EXPECT_DOUBLE_EQ(root.at("n").number(), 2.5);
  EXPECT_EQ(root.at("i").integer(), 3);
  EXPECT_EQ(root.at("f").integer(), 4);
  EXPECT_EQ(root.at("s").string(), "x");
  EXPECT_TRUE(root.at("b").boolean());
  EXPECT_EQ(root.at("a").size(), 1u);
  EXPECT_EQ(root.at("a").at(std::size_t{0}).path(), "a[0]");
  EXPECT_DOUBLE_EQ(root.non_negative_or("missing", 7.0), 7.0);
  EXPECT_THAT(input_error([&] { root.at("n").integer(); }), HasSubstr("f.json: n: must be an integer, got 2.5"));
  EXPECT_THAT(input_error([&] { root.at("neg").non_negative(); }), HasSubstr("f.json: neg: must be >= 0"));
  EXPECT_THAT(input_error([&] { root.at("z").positive(); }), HasSubstr("f.json: z: must be > 0"));
  EXPECT_THAT(input_error([&] { root.at("s").number(); }), HasSubstr("f.json: s: must be a number, got \"x\""));
  EXPECT_THAT(input_error([&] { root.at("b").string(); }), HasSubstr("must be a string"));
  EXPECT_THAT(input_error([&] { root.at("s").boolean(); }), HasSubstr("must be true or false"));
  EXPECT_THAT(input_error([&] { root.at("nope"); }), HasSubstr("f.json: nope: missing field"));
  EXPECT_THAT(input_error([&] { root.at("i").integer_at_least(4); }), HasSubstr("must be >= 4, got 3"));
}

// ---------------------------------------------------------------------------------
// Network files

// The channel from -> to of `net`, which must say that it is.
const sim::ChannelSpec& channel_checked(const sim::Network& net, int from, int to) {
  const sim::ChannelSpec& c = net.channel(from, to);
  EXPECT_EQ(c.from, from);
  EXPECT_EQ(c.to, to);
  return c;
}

TEST(NetworkFile, Loads) {
  TempDir dir;
  const auto path = dir.write("net.json", json::parse(R"({
    "latency_s": 0.25,
    "default": {"constant": 2.0},
    "channels": [
      {"from": 1, "to": 2, "rate": {"points": [[0, 1.0], [10, 0.25], [20, 1.0]]}},
      {"from": 2, "to": 1, "rate": {"points": [[0, 3], [1, 0]], "repeat_s": 2}, "capacity": 4, "latency_s": 1.5},
      {"from": 1, "to": 0, "capacity": 1}
    ],
    "stages": [
      {"stage": 0, "speed": {"points": [[0, 1.0], [5, 0.5]]}},
      {"stage": 2}
    ]})"));
  const auto net = sim::load_network(path, 3);
  EXPECT_EQ(net.source, path.string());
  EXPECT_EQ(net.num_stages(), 3);
  const auto& f01 = channel_checked(net, 0, 1);
  EXPECT_FALSE(f01.unlimited());
  EXPECT_TRUE(f01.rate->is_constant());
  EXPECT_DOUBLE_EQ(f01.rate->value_at(3), 2.0);
  EXPECT_DOUBLE_EQ(f01.latency_s, 0.25);
  EXPECT_EQ(f01.capacity, 0);

  const auto& f12 = channel_checked(net, 1, 2);
  EXPECT_EQ(f12.rate->size(), 3u);
  EXPECT_DOUBLE_EQ(f12.rate->value_at(15), 0.25);
  EXPECT_DOUBLE_EQ(f12.latency_s, 0.25);

  const auto& b21 = channel_checked(net, 2, 1);
  EXPECT_DOUBLE_EQ(b21.rate->repeat_s(), 2.0);
  EXPECT_DOUBLE_EQ(b21.rate->value_at(2.5), 3.0);
  EXPECT_EQ(b21.capacity, 4);
  EXPECT_DOUBLE_EQ(b21.latency_s, 1.5);

  const auto& b10 = channel_checked(net, 1, 0);
  EXPECT_FALSE(b10.unlimited());  // the default rate
  EXPECT_DOUBLE_EQ(b10.rate->value_at(0), 2.0);
  EXPECT_EQ(b10.capacity, 1);

  EXPECT_DOUBLE_EQ(net.speed(0).value_at(6), 0.5);
  EXPECT_TRUE(net.speed(1).is_constant());
  EXPECT_DOUBLE_EQ(net.speed(1).value_at(6), 1.0);
  EXPECT_DOUBLE_EQ(net.speed(2).value_at(6), 1.0);
}

TEST(NetworkFile, WithoutDefaultTransfersTakeOnlyTheLatency) {
  const auto net = sim::parse_network(json::parse(R"({"latency_s": 0.5})"), "n.json", 3);
  for (int s = 0; s + 1 < 3; ++s) {
    for (const auto* ch : {&net.channel(s, s + 1), &net.channel(s + 1, s)}) {
      EXPECT_TRUE(ch->unlimited());
      EXPECT_DOUBLE_EQ(ch->latency_s, 0.5);
    }
  }
  auto empty = sim::parse_network(json::object(), "n.json", 1);
  EXPECT_EQ(empty.num_stages(), 1);
  int channels = 0;
  empty.rewrite_channels([&](sim::ChannelSpec&) { ++channels; });
  EXPECT_EQ(channels, 0);
}

// A RateParser that records what it was asked and answers a constant.
class RecordingRates final : public sim::RateParser {
 public:
  mutable std::filesystem::path seen_base;
  mutable std::string seen_path;
  sim::RateTrace parse(const adagrouper::Field& rate, const std::filesystem::path& base) const override {
    seen_base = base;
    seen_path = rate.path();
    return sim::RateTrace::constant(3.0);
  }
};

TEST(NetworkFile, RateParserGetsEveryRateAndTheFileDirectory) {
  TempDir dir;
  const auto path = dir.write("sub/net.json", json::parse(R"({
    "channels": [{"from": 0, "to": 1, "rate": {"file": "../traces/link.csv"}}]})"));
  const RecordingRates rates;
  const auto net = sim::load_network(path, 2, rates);
  EXPECT_EQ(rates.seen_base, path.parent_path());
  EXPECT_EQ(rates.seen_path, "channels[0].rate");
  EXPECT_DOUBLE_EQ(net.channel(0, 1).rate->value_at(0), 3.0);

  // The core's own parser does not know the form: an error naming the field.
  EXPECT_THAT(input_error([&] { sim::load_network(path, 2); }),
              AllOf(HasSubstr(path.string()), HasSubstr("channels[0].rate")));
}

TEST(NetworkFile, ReadOnceBoundToAnyStageCountSharingItsTraces) {
  const auto spec = sim::parse_network_spec(
      json::parse(R"({"default": {"points": [[0, 2], [1, 3]]}, "channels": [{"from": 1, "to": 2, "capacity": 2}]})"),
      "n.json");
  const auto three = spec.bind(3), eight = spec.bind(8);
  EXPECT_EQ(three.channel(0, 1).rate.get(), eight.channel(6, 7).rate.get());  // one trace, shared
  EXPECT_EQ(three.channel(1, 2).capacity, 2);
  EXPECT_EQ(eight.channel(1, 2).capacity, 2);
  EXPECT_THAT(input_error([&] { spec.bind(2); }), HasSubstr("channels[0].to: stage 2 does not exist"));
}

// burst_bytes: the file's for every channel, a channel's own over it, units read.
TEST(NetworkFile, TokenBucketsPerChannelAndByDefault) {
  const auto net = sim::parse_network_spec(json::parse(R"({"default": {"constant": 1e6}, "burst_bytes": 4096,
      "channels": [{"from": 1, "to": 0, "burst_bytes": "32KiB"}, {"from": 0, "to": 1, "burst_bytes": 0}]})"),
                                           "n.json")
                       .bind(3);
  EXPECT_DOUBLE_EQ(net.channel(1, 2).burst_bytes, 4096);
  EXPECT_DOUBLE_EQ(net.channel(1, 0).burst_bytes, 32768);
  EXPECT_DOUBLE_EQ(net.channel(0, 1).burst_bytes, 0);
  EXPECT_DOUBLE_EQ(sim::Network::uniform(2, 1.0).channel(0, 1).burst_bytes, 0);  // none unless asked
}

TEST(NetworkFile, BadInputNamesFileAndField) {
  const std::vector<BadDoc> cases{
      {"negative default rate", R"({"default": {"constant": -1}})", "default.constant", ">= 0"},
      {"negative channel rate", R"({"channels": [{"from": 0, "to": 1, "rate": {"points": [[0, 1], [2, -3]]}}]})",
       "channels[0].rate.points[1][1]", ">= 0"},
      {"mistyped rate", R"({"default": {"constant": "fast"}})", "default.constant", "must be a number"},
      {"negative latency", R"({"latency_s": -0.1})", "latency_s", ">= 0"},
      {"mistyped latency", R"({"latency_s": "0.1"})", "latency_s", "must be a number"},
      {"negative channel latency", R"({"channels": [{"from": 0, "to": 1, "latency_s": -1}]})",
       "channels[0].latency_s", ">= 0"},
      {"trace not starting at 0", R"({"channels": [{"from": 0, "to": 1, "rate": {"points": [[1, 1], [2, 3]]}}]})",
       "channels[0].rate.points[0]", "start at 0"},
      {"trace times not increasing",
       R"({"channels": [{"from": 1, "to": 0, "rate": {"points": [[0, 1], [2, 3], [1, 3]]}}]})",
       "channels[0].rate.points[2]", "strictly increasing"},
      {"trace times repeated", R"({"default": {"points": [[0, 1], [2, 3], [2, 4]]}})", "default.points[2]",
       "strictly increasing"},
      {"negative trace time", R"({"default": {"points": [[0, 1], [-2, 3]]}})", "default.points[1][0]", ">= 0"},
      {"empty points", R"({"default": {"points": []}})", "default.points", "at least one"},
      {"point not a pair", R"({"default": {"points": [[0, 1, 2]]}})", "default.points[0]", "[time, value] pair"},
      {"repeat before the last point", R"({"default": {"points": [[0, 1], [5, 2]], "repeat_s": 5}})",
       "default.repeat_s", "larger than the last point"},
      {"repeat zero", R"({"default": {"points": [[0, 1]], "repeat_s": 0}})", "default.repeat_s", "> 0"},
      {"unknown rate form", R"({"default": {"bandwidth": 1}})", "default", "unknown rate form"},
      {"rate not an object", R"({"default": 5})", "default", "must be an object"},
      {"channel to itself", R"({"channels": [{"from": 1, "to": 1}]})", "channels[0]", "joins a stage to itself"},
      {"channel to a missing stage", R"({"channels": [{"from": 2, "to": 3}]})", "channels[0].to", "does not exist"},
      {"channel from a negative stage", R"({"channels": [{"from": -1, "to": 0}]})", "channels[0].from",
       "does not exist"},
      {"channel listed twice",
       R"({"channels": [{"from": 0, "to": 1}, {"from": 1, "to": 0}, {"from": 0, "to": 1, "capacity": 2}]})",
       "channels[2]", "listed twice"},
      {"channel missing to", R"({"channels": [{"from": 0}]})", "channels[0].to", "missing field"},
      {"channel stage mistyped", R"({"channels": [{"from": "0", "to": 1}]})", "channels[0].from", "integer"},
      {"capacity 0", R"({"channels": [{"from": 0, "to": 1, "capacity": 0}]})", "channels[0].capacity", ">= 1"},
      {"capacity fractional", R"({"channels": [{"from": 0, "to": 1, "capacity": 1.5}]})", "channels[0].capacity",
       "integer"},
      {"negative bucket", R"({"burst_bytes": -1})", "burst_bytes", ">= 0"},
      {"bucket in seconds", R"({"channels": [{"from": 0, "to": 1, "burst_bytes": "2ms"}]})",
       "channels[0].burst_bytes", "size"},
      {"channels not an array", R"({"channels": {"from": 0, "to": 1}})", "channels", "must be an array"},
      {"speed of a missing stage", R"({"stages": [{"stage": 3, "speed": {"constant": 1}}]})", "stages[0].stage",
       "does not exist"},
      {"speed listed twice", R"({"stages": [{"stage": 1}, {"stage": 1}]})", "stages[1].stage", "listed twice"},
      {"negative speed", R"({"stages": [{"stage": 0, "speed": {"constant": -2}}]})", "stages[0].speed.constant",
       ">= 0"},
  };
  expect_each_names_field(cases, "net.json", [](const auto& path) { sim::load_network(path, 3); });
}

// ---------------------------------------------------------------------------------
// Schedule files

TEST(ScheduleFile, LoadsStringsAndObjects) {
  TempDir dir;
  const auto path = dir.write("order.json", json::parse(R"({"stages": [
      ["F0", "F1", "B0", "B1"],
      [{"op": "forward", "micro_batch": 0}, "B0", {"op": "forward", "micro_batch": 1}, {"op": "backward", "micro_batch": 1}]
    ]})"));
  auto s = sim::load_schedule_file(path, 2, 2);
  EXPECT_EQ(s.name(), "custom");
  EXPECT_EQ(s.k, 0);
  ASSERT_EQ(s.num_stages(), 2);
  EXPECT_EQ(order_string(s.stages[0]), "F0 F1 B0 B1");
  EXPECT_EQ(order_string(s.stages[1]), "F0 B0 F1 B1");
  sim::normalize_schedule(s, 2, 2, "file");  // each op on its stage's model stage
  EXPECT_EQ(s.stages, sim::make_named("1f1b", 2, 2, std::nullopt).stages);
}

TEST(ScheduleFile, BadInputNamesFileAndField) {
  const std::vector<BadDoc> cases{
      {"missing op", R"({"stages": [["F0", "F1", "B0", "B1"], ["F0", "B0", "F1"]]})", "stages[1]", "misses B1"},
      {"repeated op", R"({"stages": [["F0", "F1", "F0", "B0", "B1"], ["F0", "B0", "F1", "B1"]]})", "stages[0][2]",
       "F0 is repeated"},
      {"malformed op", R"({"stages": [["F0", "X1", "B0", "B1"], ["F0", "B0", "F1", "B1"]]})", "stages[0][1]",
       "not of the form"},
      {"op without number", R"({"stages": [["F0", "F", "B0", "B1"], ["F0", "B0", "F1", "B1"]]})", "stages[0][1]",
       "not of the form"},
      {"op with trailing text", R"({"stages": [["F0", "F1x", "B0", "B1"], ["F0", "B0", "F1", "B1"]]})",
       "stages[0][1]", "not of the form"},
      {"negative op", R"({"stages": [["F0", "F-1", "B0", "B1"], ["F0", "B0", "F1", "B1"]]})", "stages[0][1]",
       "not of the form"},
      {"lower-case op", R"({"stages": [["F0", "f1", "B0", "B1"], ["F0", "B0", "F1", "B1"]]})", "stages[0][1]",
       "not of the form"},
      {"unknown object op", R"({"stages": [["F0", {"op": "sideways", "micro_batch": 1}, "B0", "B1"], ["F0", "B0", "F1", "B1"]]})",
       "stages[0][1].op", "forward"},
      {"object op missing micro_batch", R"({"stages": [["F0", {"op": "forward"}, "B0", "B1"], ["F0", "B0", "F1", "B1"]]})",
       "stages[0][1].micro_batch", "missing field"},
      {"op not a string or object", R"({"stages": [["F0", 1, "B0", "B1"], ["F0", "B0", "F1", "B1"]]})", "stages[0][1]",
       "must be an object"},
      {"micro-batch out of range", R"({"stages": [["F0", "F1", "B0", "B1"], ["F0", "B0", "F5", "B1"]]})",
       "stages[1][2]", "micro-batch 5 does not exist"},
      {"wrong number of stages", R"({"stages": [["F0", "F1", "B0", "B1"]]})", "stages", "lists 1 stages"},
      {"missing stages", R"({})", "stages", "missing field"},
      {"stage not an array", R"({"stages": [["F0", "F1", "B0", "B1"], "F0 B0 F1 B1"]})", "stages[1]",
       "must be an array"},
  };
  expect_each_names_field(cases, "order.json", [](const auto& path) { sim::load_schedule_file(path, 2, 2); });
}

}  // namespace
}  // namespace simtest

namespace simtest {
namespace {

// Model stages on stages send between any two stages (docs/model.md §14): a channel may
// join stages that are not neighbours, and an unlisted pair uses the default.
TEST(NetworkFile, ChannelsJoinAnyTwoStages) {
  const auto net = sim::parse_network(
      json::parse(R"({"default": {"constant": 2}, "channels": [{"from": 3, "to": 0, "rate": {"constant": 5}, "capacity": 2}]})"),
      "n.json", 4);
  EXPECT_EQ(net.channel(3, 0).rate->value_at(0), 5.0);
  EXPECT_EQ(net.channel(3, 0).capacity, 2);
  EXPECT_EQ(net.channel(0, 3).rate->value_at(0), 2.0);
  EXPECT_EQ(net.channel(1, 3).rate->value_at(0), 2.0);
  int visited = 0;
  auto copy = net;
  copy.rewrite_channels([&](sim::ChannelSpec&) { ++visited; });
  EXPECT_EQ(visited, 4 * 3);
}

}  // namespace
}  // namespace simtest
