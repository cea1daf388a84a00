// Tests of layer-level models (planner/model.h).
//
// The generator's closed forms (transformer FLOPs and activations), the file format and
// its errors, the merge of calibration measurements, and `adagrouper model` end to end.
#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <fmt/format.h>

#include <cmath>
#include <string>
#include <vector>

#include "helpers.h"

namespace plantest {
namespace {

using testutil::input_error;

planner::Arch small_gpt(const std::string& recompute = "selective") {
  planner::Arch a;
  a.arch = "gpt";
  a.name = "small";
  a.layers = 3, a.hidden = 256, a.heads = 4, a.seq_len = 128, a.vocab = 1000;
  a.recompute = recompute;
  a.global_batch_size = 16;
  return a;
}

// The documented estimate of one transformer layer's forward time (docs/model.md,
// "Stage partitioning"): GEMMs at peak x efficiency x n/(n + half) with n = b s rows,
// never faster than reading the weights; elementwise traffic at the achieved
// bandwidth; 12 kernels.
double expected_forward(const planner::Device& d, double b, double s, double h, double a) {
  const double eff = d.gemm_efficiency * (b * s) / (b * s + d.gemm_half_rows);
  const double bw = d.memory_bandwidth * d.memory_efficiency;
  const double dense = std::max(24 * b * s * h * h / (d.peak_flops * eff), (12 * h * h + 13 * h) * 2 / bw);
  const double core = 4 * b * s * s * h / (d.peak_flops * eff);
  const double elem = b * (46 * s * h + 9 * a * s * s) / bw;
  return dense + core + elem + 12 * d.kernel_overhead_s;
}

TEST(ModelGenerator, GptLayerFlopsMatchTheClosedForm) {
  // 24 b s h^2 + 4 b s^2 h per forward (Narayanan et al. 2021), on a small model and on
  // GPT-2 XL and GPT-3 6.7B.
  for (const std::string preset : {"", "gpt2-xl", "gpt3-6.7b"}) {
    const planner::Arch a = preset.empty() ? small_gpt() : planner::arch_preset(preset);
    const planner::Device dev = planner::device_preset("v100-32gb");
    const planner::Model m = planner::generate_model(a, dev, {1, 2, 8});
    ASSERT_EQ(m.num_layers(), a.layers + 2) << preset;
    const double s = a.seq_len, h = a.hidden;
    for (int l = 1; l <= a.layers; ++l) {
      const auto& layer = m.layers[l];
      EXPECT_EQ(layer.kind, "decoder");
      EXPECT_EQ(layer.parameter_bytes, 2 * (12 * h * h + 13 * h));
      for (const auto& p : layer.profile) {
        const double b = p.micro_batch_size;
        ASSERT_TRUE(p.forward_flops.has_value());
        EXPECT_EQ(*p.forward_flops, 24 * b * s * h * h + 4 * b * s * s * h) << preset << " b=" << b;
        EXPECT_EQ(*p.forward_flops, planner::transformer_layer_forward_flops(b, s, h));
        EXPECT_NEAR(p.forward_s, expected_forward(dev, b, s, h, a.heads), 1e-5 * p.forward_s) << preset << " b=" << b;
        // Selective recomputation: backward = 2x forward GEMMs + the attention core again.
        EXPECT_GT(p.backward_s, 2 * p.forward_s - 12 * dev.kernel_overhead_s);
        EXPECT_EQ(p.output_bytes, 2 * b * s * h);
      }
    }
  }
  EXPECT_EQ(planner::transformer_layer_forward_flops(8, 1024, 1600), 24.0 * 8 * 1024 * 1600 * 1600 + 4.0 * 8 * 1024 * 1024 * 1600);
}

TEST(ModelGenerator, ActivationsFollowKorthikanti) {
  // Per layer, 2-byte elements: 34 s b h + 5 a s^2 b without recomputation, 34 s b h with
  // selective recomputation, 2 s b h with full recomputation.
  const double s = 128, h = 256, a = 4;
  for (const std::string mode : {"none", "selective", "full"}) {
    const planner::Model m = planner::generate_model(small_gpt(mode), planner::device_preset("a100-80gb"), {1, 3});
    for (const auto& p : m.layers[2].profile) {
      const double b = p.micro_batch_size;
      const double want = mode == "none" ? 34 * s * b * h + 5 * a * s * s * b : mode == "selective" ? 34 * s * b * h : 2 * s * b * h;
      EXPECT_EQ(p.activation_bytes, want) << mode << " b=" << b;
    }
  }
  // fp32: 4-byte tensors, 1-byte masks.
  EXPECT_EQ(planner::transformer_layer_activation_bytes(1, s, h, a, 4, "none"), 66 * s * h + 9 * a * s * s);
  // Full recomputation keeps less and recomputes more.
  const auto none = planner::generate_model(small_gpt("none"), planner::device_preset("v100-32gb"), {2});
  const auto full = planner::generate_model(small_gpt("full"), planner::device_preset("v100-32gb"), {2});
  EXPECT_GT(full.layers[1].profile[0].backward_s, none.layers[1].profile[0].backward_s);
  EXPECT_EQ(full.layers[1].profile[0].forward_s, none.layers[1].profile[0].forward_s);
}

TEST(ModelGenerator, ShapesOfTheOtherArchitectures) {
  const planner::Device dev = planner::device_preset("v100-32gb");
  // BERT-48: 48 encoder layers of BERT-Large width, about 640M parameters with the heads.
  const planner::Model bert = planner::generate_model(planner::arch_preset("bert-48"), dev, {1, 2});
  EXPECT_EQ(bert.num_layers(), 50);
  EXPECT_NEAR(bert.total_parameter_bytes() / 2, 640e6, 0.05 * 640e6);
  // Stable Diffusion U-Net: 860M parameters; a cut inside the down path carries the skips.
  const planner::Model unet = planner::generate_model(planner::arch_preset("sd-unet"), dev, {1, 2});
  EXPECT_NEAR(unet.total_parameter_bytes() / 2, 860e6, 0.02 * 860e6);
  int down = -1;
  for (int l = 0; l < unet.num_layers(); ++l)
    if (unet.layers[l].name == "down1.downsample") down = l;
  ASSERT_GE(down, 0);
  const auto& after = unet.layers[down].profile[0];
  // Skips pushed before it: conv_in (320x64x64), two 320x64x64 and two 640x32x32 transformer
  // outputs, the 320x64x64 downsample and its own 640x16x16 output: more than the hidden state.
  EXPECT_GT(after.output_bytes, 2 * 640 * 16 * 16 * 4);
  ASSERT_TRUE(after.grad_output_bytes.has_value());
  EXPECT_EQ(after.output_bytes - *after.grad_output_bytes, 2.0 * 77 * 768);  // the text context, forward only
  EXPECT_EQ(unet.layers.back().name, "out");
  // GNMT-16: embeddings, 8 + 8 LSTM layers, classifier; the encoder output crosses every
  // cut until the attention (decoder 0) has used it.
  const planner::Model gnmt = planner::generate_model(planner::arch_preset("gnmt-16"), dev, {16, 32});
  ASSERT_EQ(gnmt.num_layers(), 19);
  EXPECT_EQ(gnmt.layers[9].name, "decoder embedding");
  EXPECT_EQ(gnmt.layers[9].profile[0].output_bytes, 16.0 * 2 * 50 * 1024 * 2);
  EXPECT_EQ(gnmt.layers[10].profile[0].output_bytes, 16.0 * 2 * 50 * 1024 * 2);
  EXPECT_EQ(gnmt.layers[1].kind, "lstm (bidirectional)");
}

TEST(ModelGenerator, RejectsBadHyperparameters) {
  const planner::Device dev = planner::device_preset("v100-32gb");
  planner::Arch a = small_gpt();
  a.heads = 3;
  EXPECT_THAT(input_error([&] { planner::generate_model(a, dev, {1}); }), HasSubstr("--heads"));
  a = small_gpt();
  EXPECT_THAT(input_error([&] { planner::generate_model(a, dev, {2, 1}); }), HasSubstr("--micro-batch-sizes"));
  a.recompute = "some";
  EXPECT_THAT(input_error([&] { planner::generate_model(a, dev, {1}); }), HasSubstr("--recompute"));
  planner::Device slow = dev;
  slow.gemm_efficiency = 1.5;
  EXPECT_THAT(input_error([&] { planner::generate_model(small_gpt(), slow, {1}); }), HasSubstr("--gemm-efficiency"));
  EXPECT_THAT(input_error([&] { planner::arch_preset("gpt5"); }), HasSubstr("unknown model preset 'gpt5'"));
  EXPECT_THAT(input_error([&] { planner::device_preset("tpu"); }), HasSubstr("--device: unknown device 'tpu'"));
}

TEST(ModelFile, RoundTripsAndInterpolates) {
  planner::Model m = planner::generate_model(small_gpt(), planner::device_preset("h100-80gb"), {1, 4});
  const auto j = planner::model_json(m);
  const planner::Model back = planner::parse_model(json::parse(planner::dump_compact(j)), "m.json");
  EXPECT_EQ(json::parse(planner::model_json(back).dump()), json::parse(j.dump()));
  EXPECT_EQ(back.micro_batch_sizes(), (std::vector<int>{1, 4}));
  // b = 2 lies a third of the way from 1 to 4.
  const auto& p = back.layers[1].profile;
  const planner::LayerAt v = planner::layer_at(back, 1, 2);
  EXPECT_DOUBLE_EQ(v.fwd, p[0].forward_s + (p[1].forward_s - p[0].forward_s) / 3);
  EXPECT_DOUBLE_EQ(v.act, p[0].activation_bytes + (p[1].activation_bytes - p[0].activation_bytes) / 3);
  EXPECT_EQ(v.gout, v.out);  // no grad_output_bytes: the output's size
  EXPECT_THAT(input_error([&] { planner::layer_at(back, 1, 5); }), HasSubstr("outside the profile of layer 1"));
}

json tiny_model() {
  return json::parse(R"({
    "name": "tiny", "global_batch_size": 8, "optimizer_bytes_per_parameter_byte": 7,
    "device": {"memory_bytes": 1e10},
    "layers": [
      {"name": "a", "parameter_bytes": 100, "profile": [
        {"micro_batch_size": 1, "forward_s": 1, "backward_s": 2, "activation_bytes": 10, "output_bytes": 5},
        {"micro_batch_size": 4, "forward_s": 3, "backward_s": 6, "activation_bytes": 40, "output_bytes": 20}]},
      {"name": "b", "parameter_bytes": 200, "profile": [
        {"micro_batch_size": 2, "forward_s": 1, "backward_s": 2, "activation_bytes": 10}]}
    ]})");
}

TEST(ModelFile, ErrorsNameTheFileAndField) {
  EXPECT_NO_THROW(planner::parse_model(tiny_model(), "t.json"));
  EXPECT_EQ(planner::parse_model(tiny_model(), "t.json").micro_batch_sizes(), (std::vector<int>{2}));
  struct Case {
    std::function<void(json&)> edit;
    std::string want;
  };
  const std::vector<Case> cases = {
      {[](json& j) { j.erase("optimizer_bytes_per_parameter_byte"); },
       "t.json: optimizer_bytes_per_parameter_byte: missing field"},
      {[](json& j) { j["device"].erase("memory_bytes"); }, "t.json: device.memory_bytes: missing field"},
      {[](json& j) { j["layers"] = json::array(); }, "t.json: layers: must list at least one layer"},
      {[](json& j) { j["layers"][0]["profile"][1]["micro_batch_size"] = 1; },
       "t.json: layers[0].profile[1].micro_batch_size: profile entries must have strictly increasing"},
      {[](json& j) { j["layers"][0]["profile"][0].erase("output_bytes"); },
       "t.json: layers[0].profile[0].output_bytes: missing field"},
      {[](json& j) { j["layers"][1]["profile"][0]["forward_s"] = -1; },
       "t.json: layers[1].profile[0].forward_s: must be >= 0"},
      {[](json& j) { j["layers"][1]["profile"][0]["micro_batch_size"] = 8; },
       "t.json: layers[].profile: no micro-batch size is covered by every layer"},
      {[](json& j) { j["schema"] = "adagrouper.plan/1"; }, "t.json: schema: must be \"adagrouper.model/1\""},
      {[](json& j) { j["device"]["gemm_efficiency"] = 2; }, "t.json: device.gemm_efficiency: must be a fraction"},
  };
  for (const Case& c : cases) {
    json j = tiny_model();
    c.edit(j);
    EXPECT_THAT(input_error([&] { planner::parse_model(j, "t.json"); }), HasSubstr(c.want)) << c.want;
  }
}

TEST(ModelFile, MeasuredLayersReplaceEstimates) {
  TempDir tmp;
  planner::Model m = planner::parse_model(tiny_model(), "t.json");
  const auto path = tmp.write("calib.jsonl",
                              "{\"type\": \"meta\", \"stages\": 2}\n"
                              "\n"
                              "{\"type\":\"layer\",\"layer\":0,\"name\":\"a\",\"micro_batch_size\":1,\"forward_s\":1.5,"
                              "\"backward_s\":2.5,\"activation_bytes\":11,\"output_bytes\":6,\"parameter_bytes\":101}\n"
                              "{\"type\":\"layer\",\"layer\":0,\"name\":\"a\",\"micro_batch_size\":2,\"forward_s\":2,"
                              "\"backward_s\":4}\n"
                              "{\"type\":\"layer\",\"layer\":1,\"name\":\"block1\",\"micro_batch_size\":4,\"forward_s\":2,"
                              "\"backward_s\":4,\"activation_bytes\":20,\"output_bytes\":0}\n"
                              "{\"type\":\"transfer\",\"bytes\":5}\n");
  const auto warnings = planner::merge_measured(m, path);
  ASSERT_EQ(warnings.size(), 1u);
  EXPECT_THAT(warnings[0], HasSubstr("calib.jsonl:5: layer 1 is 'block1' in the measurement and 'b' in the model"));
  const auto& a = m.layers[0];
  EXPECT_EQ(a.parameter_bytes, 101);
  ASSERT_EQ(a.profile.size(), 3u);  // b = 2 inserted between 1 and 4
  EXPECT_TRUE(a.profile[0].measured);
  EXPECT_EQ(a.profile[0].forward_s, 1.5);
  EXPECT_EQ(a.profile[0].activation_bytes, 11);
  EXPECT_EQ(a.profile[1].micro_batch_size, 2);
  EXPECT_EQ(a.profile[1].forward_s, 2);
  EXPECT_EQ(a.profile[1].activation_bytes, 20);  // not measured: interpolated from the estimates (10 .. 40)
  EXPECT_FALSE(a.profile[2].measured);
  EXPECT_EQ(m.layers[1].profile.size(), 2u);  // b = 4 added beyond the estimate, every field given
  EXPECT_EQ(m.micro_batch_sizes(), (std::vector<int>{2, 4}));
  EXPECT_EQ(m.measured_files, (std::vector<std::string>{path.string()}));

  struct Bad {
    std::string text, want;
  };
  const std::vector<Bad> bad = {
      {"{\"type\":\"meta\"}\n{oops\n", "bad.jsonl: line 2, column "},
      {"{\"type\":\"layer\",\"layer\":7,\"micro_batch_size\":1,\"forward_s\":1,\"backward_s\":1}\n",
       "bad.jsonl:1: layer: the model t.json has 2 layers (0..1), got layer 7"},
      {"{\"type\":\"layer\",\"layer\":0,\"micro_batch_size\":1,\"backward_s\":1}\n", "bad.jsonl:1: forward_s: missing field"},
      {"{\"type\":\"layer\",\"layer\":0,\"micro_batch_size\":1,\"forward_s\":1,\"backward_s\":1}\n"
       "{\"type\":\"layer\",\"layer\":0,\"micro_batch_size\":1,\"forward_s\":1,\"backward_s\":1}\n",
       "bad.jsonl:2: layer 0 at micro_batch_size 1 is measured twice (lines 1 and 2)"},
      {"{\"type\":\"layer\",\"layer\":1,\"micro_batch_size\":9,\"forward_s\":1,\"backward_s\":1}\n",
       "bad.jsonl:1: activation_bytes: missing field"},
      {"{\"type\":\"stage\"}\n", "bad.jsonl: no line with \"type\": \"layer\""},
      {"[1, 2]\n", "bad.jsonl:1: must be an object"},
  };
  for (const Bad& c : bad) {
    planner::Model fresh = planner::parse_model(tiny_model(), "t.json");
    const auto p = tmp.write("bad.jsonl", c.text);
    EXPECT_THAT(input_error([&] { planner::merge_measured(fresh, p); }), HasSubstr(c.want)) << c.text;
  }
}

class ModelCli : public ::testing::Test {
 public:
  Outcome run(const std::string& args) { return run_cli(args, tmp_.path()); }
  TempDir tmp_;
};

TEST_F(ModelCli, WritesLoadableFilesAndMergesMeasurements) {
  const fs::path out = tmp_.path() / "m.json";
  Outcome r = run(fmt::format("model --arch gpt --layers 4 --hidden 512 --heads 8 --seq-len 256 --vocab 5000 "
                              "--global-batch-size 32 --device a100-40gb --gemm-efficiency 0.7 --output '{}'",
                              out.string()));
  ASSERT_EQ(r.rc, 0) << r.err;
  EXPECT_THAT(r.out, HasSubstr("gpt: 6 layers"));
  const planner::Model m = planner::load_model(out);
  EXPECT_EQ(m.device.gemm_efficiency, 0.7);
  EXPECT_EQ(m.device.name, "A100-SXM4-40GB");
  EXPECT_THAT(m.generated_by, HasSubstr("adagrouper model --arch gpt --layers 4"));
  EXPECT_EQ(m.micro_batch_sizes(), (std::vector<int>{1, 2, 4, 8}));

  const auto calib = tmp_.write("c.jsonl", "{\"type\":\"layer\",\"layer\":2,\"name\":\"layer 1\",\"micro_batch_size\":2,"
                                           "\"forward_s\":0.5,\"backward_s\":1}\n");
  const fs::path merged = tmp_.path() / "merged.json";
  r = run(fmt::format("model --from '{}' --measured '{}' --output '{}'", out.string(), calib.string(), merged.string()));
  ASSERT_EQ(r.rc, 0) << r.err;
  EXPECT_EQ(r.err, "");
  const planner::Model mm = planner::load_model(merged);
  EXPECT_EQ(planner::layer_at(mm, 2, 2).fwd, 0.5);
  EXPECT_TRUE(mm.layers[2].profile[1].measured);

  // Stdout without --output is the model JSON.
  r = run("model --preset gnmt-16 --micro-batch-sizes 16,32");
  ASSERT_EQ(r.rc, 0) << r.err;
  EXPECT_EQ(json::parse(r.out)["schema"], "adagrouper.model/1");

  // Bad input: exit 2, one line.
  for (const auto& [args, want] : std::vector<std::pair<std::string, std::string>>{
           {"model --preset gpt9", "--preset: unknown model preset 'gpt9'"},
           {"model --layers 4", "--arch: missing"},
           {"model --preset gpt2-xl --arch bert", "--arch: the preset gpt2-xl is a gpt model, not bert"},
           {"model --preset gpt2-xl --micro-batch-sizes 1,x", "--micro-batch-sizes: '1,x' is not"},
           {fmt::format("model --from '{}'", out.string()), "--from: give --measured"},
           {fmt::format("model --from '{}' --measured x --layers 3", out.string()), "--layers: not allowed with --from"},
       }) {
    r = run(args + fmt::format(" --output '{}'", (tmp_.path() / "never.json").string()));
    EXPECT_EQ(r.rc, 2) << args;
    EXPECT_THAT(r.err, HasSubstr(want)) << args;
    EXPECT_EQ(std::count(r.err.begin(), r.err.end(), '\n'), 1) << r.err;
    EXPECT_FALSE(fs::exists(tmp_.path() / "never.json"));
  }
  r = run("model --help");
  EXPECT_EQ(r.rc, 0);
  EXPECT_THAT(r.out, HasSubstr("34sbh + 5as^2b"));
  EXPECT_THAT(r.out, HasSubstr("--measured"));
}

}  // namespace
}  // namespace plantest
