// Layer-level model files, their analytic generator and the merge of calibration
// measurements (see model.h and docs/formats.md, "Model file").
#include "model.h"

#include <algorithm>
#include <cmath>
#include <fstream>
#include <map>
#include <set>
#include <string>
#include <utility>

#include <fmt/format.h>
#include <fmt/ranges.h>

#include "error.h"
#include "json_util.h"

namespace adagrouper::planner {

// --- devices -------------------------------------------------------------------------

Device device_preset(std::string_view name, const std::string& what) {
  Device d;
  if (name == "v100-32gb") {
    d.name = "V100-SXM2-32GB";
    d.memory_bytes = 32.0 * (1ull << 30);
    d.peak_flops = 125e12;
    d.memory_bandwidth = 900e9;
    d.gemm_efficiency = 0.48;
    d.gemm_half_rows = 256;
    d.attention_efficiency = 0.25;
    d.memory_efficiency = 0.78;
    d.kernel_overhead_s = 4e-6;
    d.reserved_bytes = 1e9;
    d.source =
        "NVIDIA V100 datasheet: 125 TFLOP/s fp16 tensor core, 900 GB/s HBM2, 32 GB. Efficiencies as in "
        "configs/pipelines/derive_gpt.py and derive_unet.py: large fp16 GEMMs reach 48% of peak (falling as "
        "n/(n+256) with the rows n), fused attention 25%, elementwise kernels 700 GB/s (78%); 4 us per kernel "
        "launch; 1e9 bytes of CUDA context and workspaces";
  } else if (name == "a100-40gb" || name == "a100-80gb") {
    const bool big = name == "a100-80gb";
    d.name = big ? "A100-SXM4-80GB" : "A100-SXM4-40GB";
    d.memory_bytes = (big ? 80.0 : 40.0) * (1ull << 30);
    d.peak_flops = 312e12;
    d.memory_bandwidth = big ? 2039e9 : 1555e9;
    d.gemm_efficiency = 0.65;
    d.gemm_half_rows = 512;
    d.attention_efficiency = 0.35;
    d.memory_efficiency = 0.8;
    d.kernel_overhead_s = 3e-6;
    d.reserved_bytes = 1.5e9;
    d.source = fmt::format(
        "NVIDIA A100 datasheet: 312 TFLOP/s dense fp16/bf16 tensor core, {} GB/s HBM, {} GB. GEMM efficiency "
        "0.65 assumed from Narayanan et al. 2021 (163 TFLOP/s per GPU, 52% of peak, end to end on GPT-3 175B "
        "including communication and bubbles); attention 35%, memory 80%, 3 us per kernel: assumptions, "
        "override them with measured values",
        big ? 2039 : 1555, big ? 80 : 40);
  } else if (name == "h100-80gb") {
    d.name = "H100-SXM5-80GB";
    d.memory_bytes = 80.0 * (1ull << 30);
    d.peak_flops = 989e12;
    d.memory_bandwidth = 3350e9;
    d.gemm_efficiency = 0.55;
    d.gemm_half_rows = 1024;
    d.attention_efficiency = 0.35;
    d.memory_efficiency = 0.8;
    d.kernel_overhead_s = 2.5e-6;
    d.reserved_bytes = 2e9;
    d.source =
        "NVIDIA H100 SXM5 datasheet: 989 TFLOP/s dense fp16/bf16 tensor core, 3.35 TB/s HBM3, 80 GB. "
        "Efficiencies (GEMM 55% of peak, reached at larger GEMMs than on A100; attention 35%; memory 80%; "
        "2.5 us per kernel) are assumptions, not measurements: override them with measured values";
  } else {
    throw InputError(fmt::format("{}: unknown device '{}' (presets: {})", what, name, kDevicePresets));
  }
  return d;
}

// --- the model file ------------------------------------------------------------------

std::vector<int> Model::micro_batch_sizes() const {
  if (layers.empty()) return {};
  int lo = 0, hi = 1 << 30;
  for (const Layer& l : layers) {
    lo = std::max(lo, l.profile.front().micro_batch_size);
    hi = std::min(hi, l.profile.back().micro_batch_size);
  }
  if (lo > hi)
    throw InputError(fmt::format(
        "{}: layers[].profile: no micro-batch size is covered by every layer (the largest first size is {}, the "
        "smallest last size {})",
        source_file, lo, hi));
  std::set<int> sizes;
  for (const Layer& l : layers)
    for (const LayerPoint& p : l.profile)
      if (p.micro_batch_size >= lo && p.micro_batch_size <= hi) sizes.insert(p.micro_batch_size);
  return {sizes.begin(), sizes.end()};
}

double Model::total_parameter_bytes() const {
  double t = 0;
  for (const Layer& l : layers) t += l.parameter_bytes;
  return t;
}

LayerAt layer_at(const Model& model, int layer, int b, const std::string& what) {
  const Layer& l = model.layers.at(static_cast<std::size_t>(layer));
  const auto& pr = l.profile;
  if (b < pr.front().micro_batch_size || b > pr.back().micro_batch_size)
    throw InputError(fmt::format(
        "{}: micro-batch size {} is outside the profile of layer {} ('{}') in {} (layers[{}].profile covers {}..{})",
        what, b, layer, l.name, model.source_file, layer, pr.front().micro_batch_size, pr.back().micro_batch_size));
  auto it = std::lower_bound(pr.begin(), pr.end(), b,
                             [](const LayerPoint& p, int v) { return p.micro_batch_size < v; });
  const LayerPoint& hi = *it;
  const LayerPoint& lo = it->micro_batch_size == b ? *it : *(it - 1);
  const double w = it->micro_batch_size == b
                       ? 0.0
                       : double(b - lo.micro_batch_size) / double(hi.micro_batch_size - lo.micro_batch_size);
  auto mix = [w](double x, double y) { return w == 0.0 ? x : x + w * (y - x); };
  LayerAt r;
  r.fwd = mix(lo.forward_s, hi.forward_s);
  r.bwd = mix(lo.backward_s, hi.backward_s);
  r.act = mix(lo.activation_bytes, hi.activation_bytes);
  r.out = mix(lo.output_bytes, hi.output_bytes);
  r.gout = mix(lo.grad_output_bytes.value_or(lo.output_bytes), hi.grad_output_bytes.value_or(hi.output_bytes));
  return r;
}

namespace {

std::string opt_string(const Field& root, std::string_view key) {
  return root.has(key) ? root.at(key).string() : std::string();
}

double positive_or(const Field& f, std::string_view key, double fallback) {
  return f.has(key) ? f.at(key).positive() : fallback;
}

}  // namespace

Model load_model(const std::filesystem::path& path) { return parse_model(read_json_file(path), path.string()); }

Model parse_model(const nlohmann::json& doc, const std::string& source) {
  Field root(doc, source);
  root.require_object();
  Model m;
  m.source_file = source;
  if (root.has("schema") && root.at("schema").string() != "adagrouper.model/1")
    root.at("schema").fail(fmt::format("must be \"adagrouper.model/1\", got {}", describe_json(root.at("schema").json())));
  m.name = root.has("name") ? root.at("name").string() : std::filesystem::path(source).stem().string();
  m.description = opt_string(root, "description");
  m.source = opt_string(root, "source");
  m.generated_by = opt_string(root, "generated_by");
  if (root.has("architecture")) {
    root.at("architecture").require_object();
    m.architecture = nlohmann::ordered_json(root.at("architecture").json());
  }
  if (root.has("global_batch_size"))
    m.global_batch_size = static_cast<int>(std::min<std::int64_t>(root.at("global_batch_size").integer_at_least(1), 1 << 30));
  m.optimizer_bytes_per_parameter_byte = root.at("optimizer_bytes_per_parameter_byte").non_negative();
  if (root.has("measured_files")) {
    const Field mf = root.at("measured_files");
    for (std::size_t i = 0; i < mf.size(); ++i) m.measured_files.push_back(mf.at(i).string());
  }

  const Field dev = root.at("device");
  dev.require_object();
  Device& d = m.device;
  d.name = opt_string(dev, "name");
  d.source = opt_string(dev, "source");
  d.memory_bytes = dev.at("memory_bytes").positive();
  d.peak_flops = positive_or(dev, "peak_flops", 0);
  d.memory_bandwidth = positive_or(dev, "memory_bandwidth_bytes_per_s", 0);
  d.gemm_efficiency = positive_or(dev, "gemm_efficiency", 0);
  d.gemm_half_rows = dev.non_negative_or("gemm_half_rows", 0);
  d.attention_efficiency = positive_or(dev, "attention_efficiency", 0);
  d.memory_efficiency = positive_or(dev, "memory_efficiency", 0);
  d.kernel_overhead_s = dev.non_negative_or("kernel_overhead_s", 0);
  d.reserved_bytes = dev.non_negative_or("reserved_bytes", 0);
  for (const char* frac : {"gemm_efficiency", "attention_efficiency", "memory_efficiency"})
    if (dev.has(frac) && dev.at(frac).number() > 1) dev.at(frac).fail("must be a fraction of peak, <= 1");

  const Field layers = root.at("layers");
  if (layers.size() == 0) layers.fail("must list at least one layer");
  for (std::size_t i = 0; i < layers.size(); ++i) {
    const Field lf = layers.at(i);
    lf.require_object();
    Layer l;
    l.name = lf.has("name") ? lf.at("name").string() : fmt::format("layer {}", i);
    l.kind = opt_string(lf, "kind");
    l.parameter_bytes = lf.at("parameter_bytes").non_negative();
    l.optimizer_s = lf.non_negative_or("optimizer_s", 0.0);
    const Field prof = lf.at("profile");
    if (prof.size() == 0) prof.fail("empty profile: list at least one micro-batch size");
    const bool last = i + 1 == layers.size();
    for (std::size_t j = 0; j < prof.size(); ++j) {
      const Field e = prof.at(j);
      e.require_object();
      LayerPoint p;
      p.micro_batch_size = static_cast<int>(std::min<std::int64_t>(e.at("micro_batch_size").integer_at_least(1), 1 << 30));
      p.forward_s = e.at("forward_s").non_negative();
      p.backward_s = e.at("backward_s").non_negative();
      p.activation_bytes = e.at("activation_bytes").non_negative();
      if (!last || e.has("output_bytes")) p.output_bytes = e.at("output_bytes").non_negative();
      if (e.has("grad_output_bytes")) p.grad_output_bytes = e.at("grad_output_bytes").non_negative();
      if (e.has("forward_flops")) p.forward_flops = e.at("forward_flops").non_negative();
      if (e.has("measured")) p.measured = e.at("measured").boolean();
      if (!l.profile.empty() && p.micro_batch_size <= l.profile.back().micro_batch_size)
        e.at("micro_batch_size").fail("profile entries must have strictly increasing micro_batch_size");
      l.profile.push_back(p);
    }
    m.layers.push_back(std::move(l));
  }
  m.micro_batch_sizes();  // the layers' ranges must overlap
  return m;
}

nlohmann::ordered_json model_json(const Model& m) {
  nlohmann::ordered_json j;
  j["schema"] = "adagrouper.model/1";
  j["name"] = m.name;
  if (!m.description.empty()) j["description"] = m.description;
  if (!m.source.empty()) j["source"] = m.source;
  if (!m.generated_by.empty()) j["generated_by"] = m.generated_by;
  if (!m.measured_files.empty()) j["measured_files"] = m.measured_files;
  if (!m.architecture.empty()) j["architecture"] = m.architecture;
  if (m.global_batch_size) j["global_batch_size"] = *m.global_batch_size;
  j["optimizer_bytes_per_parameter_byte"] = m.optimizer_bytes_per_parameter_byte;
  j["parameter_bytes"] = m.total_parameter_bytes();
  nlohmann::ordered_json d;
  const Device& dv = m.device;
  if (!dv.name.empty()) d["name"] = dv.name;
  d["memory_bytes"] = dv.memory_bytes;
  if (dv.peak_flops > 0) d["peak_flops"] = dv.peak_flops;
  if (dv.memory_bandwidth > 0) d["memory_bandwidth_bytes_per_s"] = dv.memory_bandwidth;
  if (dv.gemm_efficiency > 0) d["gemm_efficiency"] = dv.gemm_efficiency;
  if (dv.gemm_half_rows > 0) d["gemm_half_rows"] = dv.gemm_half_rows;
  if (dv.attention_efficiency > 0) d["attention_efficiency"] = dv.attention_efficiency;
  if (dv.memory_efficiency > 0) d["memory_efficiency"] = dv.memory_efficiency;
  if (dv.kernel_overhead_s > 0) d["kernel_overhead_s"] = dv.kernel_overhead_s;
  d["reserved_bytes"] = dv.reserved_bytes;
  if (!dv.source.empty()) d["source"] = dv.source;
  j["device"] = std::move(d);
  auto& ls = j["layers"] = nlohmann::ordered_json::array();
  for (std::size_t i = 0; i < m.layers.size(); ++i) {
    const Layer& l = m.layers[i];
    nlohmann::ordered_json lj;
    lj["name"] = l.name;
    if (!l.kind.empty()) lj["kind"] = l.kind;
    lj["parameter_bytes"] = l.parameter_bytes;
    lj["optimizer_s"] = l.optimizer_s;
    auto& pr = lj["profile"] = nlohmann::ordered_json::array();
    for (const LayerPoint& p : l.profile) {
      nlohmann::ordered_json e;
      e["micro_batch_size"] = p.micro_batch_size;
      e["forward_s"] = p.forward_s;
      e["backward_s"] = p.backward_s;
      e["activation_bytes"] = p.activation_bytes;
      e["output_bytes"] = p.output_bytes;
      if (p.grad_output_bytes) e["grad_output_bytes"] = *p.grad_output_bytes;
      if (p.forward_flops) e["forward_flops"] = *p.forward_flops;
      if (p.measured) e["measured"] = true;
      pr.push_back(std::move(e));
    }
    ls.push_back(std::move(lj));
  }
  return j;
}

namespace {
// One line, with a space after every comma and colon.
std::string dump_flat(const nlohmann::ordered_json& v) {
  if (!v.is_object() && !v.is_array()) return v.dump();
  std::string out = v.is_object() ? "{" : "[";
  bool first = true;
  if (v.is_object()) {
    for (const auto& [k, x] : v.items()) {
      out += (first ? "" : ", ") + nlohmann::ordered_json(k).dump() + ": " + dump_flat(x);
      first = false;
    }
  } else {
    for (const auto& x : v) {
      out += (first ? "" : ", ") + dump_flat(x);
      first = false;
    }
  }
  return out + (v.is_object() ? "}" : "]");
}
}  // namespace

std::string dump_compact(const nlohmann::ordered_json& v, int width, int indent) {
  const std::string flat = dump_flat(v);
  if (static_cast<int>(flat.size()) + indent <= width || !(v.is_object() || v.is_array())) return flat;
  const std::string pad(static_cast<std::size_t>(indent) + 2, ' ');
  std::string out = v.is_object() ? "{\n" : "[\n";
  bool first = true;
  if (v.is_object()) {
    for (const auto& [k, x] : v.items()) {
      out += (first ? "" : ",\n") + pad + nlohmann::ordered_json(k).dump() + ": " + dump_compact(x, width, indent + 2);
      first = false;
    }
  } else {
    for (const auto& x : v) {
      out += (first ? "" : ",\n") + pad + dump_compact(x, width, indent + 2);
      first = false;
    }
  }
  out += "\n" + std::string(static_cast<std::size_t>(indent), ' ') + (v.is_object() ? "}" : "]");
  return out;
}

// --- measurements ----------------------------------------------------------------------

std::vector<std::string> merge_measured(Model& model, const std::filesystem::path& path) {
  std::ifstream in(path, std::ios::binary);
  if (!in) throw InputError(fmt::format("{}: cannot open file", path.string()));
  const std::string file = path.string();
  std::vector<std::string> warnings;
  std::map<std::pair<int, int>, int> seen;  // (layer, b) -> line
  const Model estimates = model;             // fields a line leaves out come from here, whatever the order
  std::string text;
  int line = 0, used = 0;
  const int L = model.num_layers();
  while (std::getline(in, text)) {
    ++line;
    if (!text.empty() && text.back() == '\r') text.pop_back();
    if (text.find_first_not_of(" \t") == std::string::npos) continue;
    nlohmann::json doc;
    try {
      doc = nlohmann::json::parse(text);
    } catch (const nlohmann::json::exception& e) {
      std::string what = e.what();
      const auto colon = what.find(": ", what.find("parse error"));
      throw InputError(fmt::format("{}:{}: invalid JSON: {}", file, line,
                                   colon == std::string::npos ? what : what.substr(colon + 2)));
    }
    const Field f(doc, fmt::format("{}:{}", file, line));
    f.require_object();
    if (!f.has("type") || !f.at("type").json().is_string() || f.at("type").json().get<std::string>() != "layer")
      continue;
    const std::int64_t idx = f.at("layer").integer_at_least(0);
    if (idx >= L)
      f.at("layer").fail(fmt::format("the model {} has {} layers (0..{}), got layer {}", model.source_file, L, L - 1, idx));
    const int b = static_cast<int>(std::min<std::int64_t>(f.at("micro_batch_size").integer_at_least(1), 1 << 30));
    const int li = static_cast<int>(idx);
    if (auto [it, fresh] = seen.emplace(std::pair{li, b}, line); !fresh)
      f.fail(fmt::format("layer {} at micro_batch_size {} is measured twice (lines {} and {})", li, b, it->second, line));
    Layer& layer = model.layers[static_cast<std::size_t>(li)];
    if (f.has("name")) {
      const std::string name = f.at("name").string();
      if (name != layer.name)
        warnings.push_back(fmt::format("{}:{}: layer {} is '{}' in the measurement and '{}' in the model {}", file, line,
                                       li, name, layer.name, model.source_file));
    }
    LayerPoint p;
    p.micro_batch_size = b;
    p.forward_s = f.at("forward_s").non_negative();
    p.backward_s = f.at("backward_s").non_negative();
    p.measured = true;
    const auto& est = estimates.layers[static_cast<std::size_t>(li)].profile;
    auto pos = std::lower_bound(layer.profile.begin(), layer.profile.end(), b,
                                [](const LayerPoint& q, int v) { return q.micro_batch_size < v; });
    const bool exists = pos != layer.profile.end() && pos->micro_batch_size == b;
    const bool inside = b >= est.front().micro_batch_size && b <= est.back().micro_batch_size;
    std::optional<LayerAt> estimate;
    if (exists) {
      p.activation_bytes = pos->activation_bytes;
      p.output_bytes = pos->output_bytes;
      p.grad_output_bytes = pos->grad_output_bytes;
      p.forward_flops = pos->forward_flops;
    } else if (inside) {
      estimate = layer_at(estimates, li, b);
      p.activation_bytes = estimate->act;
      p.output_bytes = estimate->out;
      if (estimate->gout != estimate->out) p.grad_output_bytes = estimate->gout;
    }
    // A size outside the layer's profile has no estimate to keep: then the bytes are required.
    if (f.has("activation_bytes") || (!exists && !inside)) p.activation_bytes = f.at("activation_bytes").non_negative();
    if (f.has("output_bytes") || (!exists && !inside)) p.output_bytes = f.at("output_bytes").non_negative();
    if (f.has("parameter_bytes")) layer.parameter_bytes = f.at("parameter_bytes").non_negative();
    if (exists) {
      *pos = p;
    } else {
      layer.profile.insert(pos, p);
    }
    ++used;
  }
  if (used == 0)
    throw InputError(fmt::format("{}: no line with \"type\": \"layer\" (expected the calibration harness's per-layer "
                                 "summary lines)",
                                 file));
  model.measured_files.push_back(file);
  model.micro_batch_sizes();  // still overlapping
  return warnings;
}

// --- the generator ---------------------------------------------------------------------

double transformer_layer_forward_flops(double b, double s, double h) { return 24 * b * s * h * h + 4 * b * s * s * h; }

double transformer_layer_activation_bytes(double b, double s, double h, double a, int d, std::string_view recompute) {
  // Korthikanti et al. 2022, "Reducing Activation Recomputation in Large Transformer
  // Models", section 4.1: per layer, in elements of d bytes, attention 5sbh + 2as^2b
  // (QKV input, Q and K, V, projection input; softmax output and its dropout output),
  // MLP 9sbh, two LayerNorm inputs 2sbh; and 1-byte dropout masks sbh (attention
  // output), as^2b (attention probabilities), sbh (MLP output).
  if (recompute == "full") return d * s * b * h;  // only the layer's input
  const double no_scores = d * 16 * s * b * h + 2 * s * b * h;
  if (recompute == "selective") return no_scores;  // the as^2b terms are recomputed
  return no_scores + d * 2 * a * s * s * b + a * s * s * b;
}

Arch arch_preset(std::string_view name, const std::string& what) {
  Arch a;
  a.name = std::string(name);
  if (name == "gpt2-xl") {
    a.arch = "gpt";
    a.layers = 48, a.hidden = 1600, a.heads = 25, a.seq_len = 1024, a.vocab = 50257;
    a.global_batch_size = 64;
    a.source =
        "GPT-2 XL (Radford et al. 2019, 'Language Models are Unsupervised Multitask Learners', table 2): 48 "
        "layers, d_model 1600, 1.5B parameters; 25 heads of 64, context 1024 and the 50257-token BPE vocabulary "
        "from the released GPT-2 configuration";
  } else if (name == "gpt3-2.7b" || name == "gpt3-6.7b") {
    const bool big = name == "gpt3-6.7b";
    a.arch = "gpt";
    a.layers = 32, a.hidden = big ? 4096 : 2560, a.heads = 32, a.seq_len = 2048, a.vocab = 50257;
    a.global_batch_size = 64;
    a.source = fmt::format(
        "GPT-3 {} (Brown et al. 2020, 'Language Models are Few-Shot Learners', table 2.1): 32 layers, d_model {}, "
        "32 heads of {}, context 2048; GPT-2 BPE vocabulary (50257)",
        big ? "6.7B" : "2.7B", big ? 4096 : 2560, big ? 128 : 80);
  } else if (name == "bert-48") {
    a.arch = "bert";
    a.layers = 48, a.hidden = 1024, a.heads = 16, a.seq_len = 512, a.vocab = 30522;
    a.global_batch_size = 64;
    a.source =
        "BERT-48, one of DAPPLE's benchmarks (Fan et al. 2021, 'DAPPLE: A Pipelined Data Parallel Approach for "
        "Training Large Models'): BERT-Large (Devlin et al. 2019: hidden 1024, 16 heads, 30522-token WordPiece "
        "vocabulary) with 48 instead of 24 encoder layers; sequence length 512 (BERT's maximum) is our choice; "
        "pre-training heads (masked LM over every position, next-sentence prediction)";
  } else if (name == "sd-unet") {
    a.arch = "unet";
    a.latent = 64, a.in_channels = 4, a.channels = {320, 640, 1280, 1280}, a.attention = {1, 1, 1, 0};
    a.layers_per_block = 2, a.heads = 8, a.context_len = 77, a.context_dim = 768, a.time_embed_dim = 1280;
    a.global_batch_size = 128;
    a.source =
        "Stable Diffusion v1 U-Net (Rombach et al. 2022; the UNet2DConditionModel configuration of "
        "CompVis/stable-diffusion-v1-4): 64x64x4 latents (512x512 images), channels 320/640/1280/1280, 2 ResNet "
        "blocks per level, transformer blocks with 8 heads and cross-attention to the 77x768 CLIP text context on "
        "the first three levels, 860M parameters; the VAE and text encoder are frozen and precomputed";
  } else if (name == "gnmt-16") {
    a.arch = "gnmt";
    a.encoder_layers = 8, a.decoder_layers = 8, a.hidden = 1024, a.vocab = 32320, a.seq_len = 50, a.target_len = 50;
    a.global_batch_size = 256;
    a.source =
        "GNMT-16, the 16-LSTM-layer configuration of PipeDream (Narayanan et al. 2019) and DAPPLE (Fan et al. "
        "2021) after Wu et al. 2016 ('Google's Neural Machine Translation System'): 8 encoder layers (the first "
        "bidirectional), 8 decoder layers with additive attention computed from the first decoder layer and fed "
        "to the others, hidden 1024, residual connections from the third layer on; a shared 32320-token BPE "
        "vocabulary and 50-token source and target sentences (WMT16 En-De as in the MLPerf GNMT reference) are "
        "our choices";
  } else {
    throw InputError(fmt::format("{}: unknown model preset '{}' (presets: {})", what, name, kArchPresets));
  }
  return a;
}

namespace {

// The analytic device model for one generated layer.
struct Estimator {
  const Device& dev;
  double d;  // bytes per element

  double eff(double rows) const {
    return dev.gemm_efficiency * (rows / (rows + dev.gemm_half_rows));
  }
  // A GEMM (or convolution) of `flops` over `rows` rows that must read `weight_bytes`.
  double gemm(double flops, double rows, double weight_bytes) const {
    if (flops <= 0) return 0;
    return std::max(flops / (dev.peak_flops * eff(rows)), weight_bytes / (dev.memory_bandwidth * dev.memory_efficiency));
  }
  double attention(double flops) const { return flops / (dev.peak_flops * dev.attention_efficiency); }
  double memory(double bytes) const { return bytes / (dev.memory_bandwidth * dev.memory_efficiency); }
  double launches(double kernels) const { return kernels * dev.kernel_overhead_s; }
};

double round_sig(double x, int digits) {
  if (x == 0 || !std::isfinite(x)) return x;
  const double scale = std::pow(10.0, digits - 1 - static_cast<int>(std::floor(std::log10(std::fabs(x)))));
  return std::round(x * scale) / scale;
}

// What a generated layer needs at one micro-batch size.
struct Costs {
  double fwd = 0, bwd = 0, act = 0, out = 0;
  std::optional<double> gout;
  double flops = 0;
};

LayerPoint point(int b, const Costs& c) {
  LayerPoint p;
  p.micro_batch_size = b;
  p.forward_s = round_sig(c.fwd, 6);
  p.backward_s = round_sig(c.bwd, 6);
  p.activation_bytes = std::round(c.act);
  p.output_bytes = std::round(c.out);
  if (c.gout) p.grad_output_bytes = std::round(*c.gout);
  if (c.flops > 0) p.forward_flops = c.flops;
  return p;
}

void require_positive(int v, const char* option, const std::string& arch) {
  if (v < 1) throw InputError(fmt::format("--{}: must be >= 1 for --arch {}, got {}", option, arch, v));
}

// Per-parameter-byte constants of mixed-precision Adam (fp16/bf16 weights: fp16
// gradient 2 + fp32 master 4 + m 4 + v 4 bytes per 2-byte parameter; the step reads and
// writes them, 38 bytes of traffic) and of fp32 Adam (gradient 4 + m 4 + v 4 per 4-byte
// parameter; 28 bytes of traffic). `ema` adds an fp32 exponential moving average of the
// weights (diffusion training): 4 more bytes and 12 more bytes of traffic per parameter.
struct OptimizerBytes {
  double state_per_param_byte;
  double traffic_per_param_byte;
};
OptimizerBytes optimizer_bytes(int d, bool ema) {
  const double state = d == 2 ? 14.0 : 12.0, traffic = d == 2 ? 38.0 : 28.0;
  return {(state + (ema ? 4.0 : 0.0)) / d, (traffic + (ema ? 12.0 : 0.0)) / d};
}

// --- transformers (gpt, bert) ---

void gen_transformer(Model& m, const Arch& a, const Estimator& est, const std::vector<int>& sizes, double opt_traffic) {
  const double h = a.hidden, s = a.seq_len, V = a.vocab, heads = a.heads, d = a.bytes_per_element;
  const bool bert = a.arch == "bert";
  auto add = [&](std::string name, std::string kind, double params, auto costs_at) {
    Layer l;
    l.name = std::move(name);
    l.kind = std::move(kind);
    l.parameter_bytes = params * d;
    l.optimizer_s = round_sig(est.memory(l.parameter_bytes * opt_traffic), 6);
    for (int b : sizes) l.profile.push_back(point(b, costs_at(static_cast<double>(b))));
    m.layers.push_back(std::move(l));
  };
  const double hidden_msg = d * s * h;  // [b, s, h] per sample

  // Embedding: word + learned position (+ token type and LayerNorm for BERT), dropout.
  const double emb_params = (V + s) * h + (bert ? 2 * h + 2 * h : 0);
  add("embedding", "embedding", emb_params, [&](double b) {
    Costs c;
    const double elem = b * d * (bert ? 6 : 4) * s * h;  // gather, add(s), (LayerNorm,) dropout
    c.fwd = est.memory(elem) + est.launches(bert ? 6 : 4);
    // The dense word-embedding gradient is zeroed and accumulated every backward.
    c.bwd = est.memory(elem + 2 * d * V * h) + est.launches(bert ? 8 : 6);
    c.act = b * s * h + (bert ? b * d * s * h : 0);  // dropout mask (1 byte), LayerNorm input
    c.out = b * hidden_msg;
    return c;
  });

  // Transformer layers.
  const double layer_params = 12 * h * h + 13 * h;
  const double weights = layer_params * d;
  for (int i = 0; i < a.layers; ++i) {
    add(fmt::format("layer {}", i), bert ? "encoder" : "decoder", layer_params, [&](double b) {
      Costs c;
      const double rows = b * s;
      const double dense = 24 * b * s * h * h, core = 4 * b * s * s * h;
      c.flops = transformer_layer_forward_flops(b, s, h);
      // LayerNorm, GeLU, dropout, residual adds (46 s h), softmax and its dropout (9 a s^2),
      // in bytes for 2-byte elements (configs/pipelines/derive_gpt.py).
      const double elem = b * (d / 2) * (46 * s * h + 9 * heads * s * s);
      const double softmax = b * (d / 2) * 9 * heads * s * s;
      const double kernels = 12;
      c.fwd = est.gemm(dense, rows, weights) + est.gemm(core, rows, 0) + est.memory(elem) + est.launches(kernels);
      double bdense = 2 * dense, bcore = 2 * core, belem = 2 * elem, bkernels = 2 * kernels;
      if (a.recompute == "selective") {
        bcore += core;  // QK^T, softmax, dropout and AV are recomputed
        belem += softmax;
        bkernels += 5;
      } else if (a.recompute == "full") {
        bdense += dense;
        bcore += core;
        belem += elem;
        bkernels += kernels;
      }
      c.bwd = est.gemm(bdense, rows, 3 * weights) + est.gemm(bcore, rows, 0) + est.memory(belem) + est.launches(bkernels);
      c.act = transformer_layer_activation_bytes(b, s, h, heads, a.bytes_per_element, a.recompute);
      c.out = b * hidden_msg;
      return c;
    });
  }

  // Head and loss.
  if (bert) {
    // MLM transform (dense h x h, GeLU, LayerNorm), decoder to the vocabulary over every
    // position, pooler and next-sentence classifier.
    const double params = h * h + h + 2 * h + V * h + V + h * h + h + 2 * h + 2;
    add("head", "head", params, [&](double b) {
      Costs c;
      const double rows = b * s;
      const double dense = 2 * b * s * h * h, vocab = 2 * b * s * h * V, pooler = 2 * b * h * h;
      c.flops = dense + vocab + pooler;
      const double elem_f = b * ((d / 2) * 12 * s * h + 20 * s * V), elem_b = b * ((d / 2) * 16 * s * h + 8 * s * V);
      c.fwd = est.gemm(dense, rows, d * h * h) + est.gemm(vocab, rows, d * V * h) + est.gemm(pooler, b, d * h * h) +
              est.memory(elem_f) + est.launches(10);
      c.bwd = est.gemm(2 * dense, rows, 3 * d * h * h) + est.gemm(2 * vocab, rows, 3 * d * V * h) +
              est.gemm(2 * pooler, b, 3 * d * h * h) + est.memory(elem_b) + est.launches(20);
      c.act = b * (3 * d * s * h + 4 * s * V);  // transform inputs; fp32 logits for the loss
      c.out = 0;
      return c;
    });
  } else {
    // Final LayerNorm, LM head (untied: the last stage holds its own copy), fp32 cross-entropy.
    const double params = 2 * h + V * h;
    add("head", "head", params, [&](double b) {
      Costs c;
      const double rows = b * s;
      const double vocab = 2 * b * s * h * V;
      c.flops = vocab;
      const double elem_f = b * ((d / 2) * 4 * s * h + 20 * s * V), elem_b = b * ((d / 2) * 8 * s * h + 8 * s * V);
      c.fwd = est.gemm(vocab, rows, d * V * h) + est.memory(elem_f) + est.launches(6);
      c.bwd = est.gemm(2 * vocab, rows, 3 * d * V * h) + est.memory(elem_b) + est.launches(10);
      c.act = b * (2 * d * s * h + 4 * s * V);  // Korthikanti et al.: 4sbh(1 + V/h) for d = 2
      c.out = 0;
      return c;
    });
  }
}

// --- U-Net (after configs/pipelines/derive_unet.py) ---

struct Unit {
  std::string name, kind;
  double hw = 0, params = 0, gemm_flops = 0, attn_flops = 0, elem_bytes = 0, act_bytes = 0, kernels = 0;
  double out_ch = 0, out_res = 0;
  bool push = false, pop = false;
};

double conv_params(double cin, double cout, double k) { return k * k * cin * cout + cout; }

Unit resnet(const Arch& a, std::string name, double cin, double cout, double res, bool pop, bool push) {
  const double hw = res * res, T = a.time_embed_dim;
  Unit u;
  u.name = std::move(name);
  u.kind = "resnet";
  u.hw = hw;
  u.params = 2 * cin + conv_params(cin, cout, 3) + T * cout + cout + 2 * cout + conv_params(cout, cout, 3) +
             (cin != cout ? conv_params(cin, cout, 1) : 0);
  u.gemm_flops = 2 * hw * (9 * cin * cout + 9 * cout * cout + (cin != cout ? cin * cout : 0));
  // GroupNorm + SiLU on cin and cout, time-embedding add, residual add; up blocks copy the concatenation.
  u.elem_bytes = hw * (8 * cin + 8 * cout + 4 * cout + 6 * cout + (pop ? 4 * cin : 0));
  u.act_bytes = hw * (6 * cin + 6 * cout);
  u.kernels = 14;
  u.out_ch = cout;
  u.out_res = res;
  u.push = push;
  u.pop = pop;
  return u;
}

Unit unet_transformer(const Arch& a, std::string name, double c, double res, bool push) {
  const double n = res * res, L = a.context_len, D = a.context_dim;
  Unit u;
  u.name = std::move(name);
  u.kind = "transformer";
  u.hw = n;
  u.params = (2 * c + (c * c + c)) + (2 * c + 3 * c * c + c * c + c) + (2 * c + c * c + 2 * D * c + c * c + c) +
             (2 * c + c * 8 * c + 8 * c + 4 * c * c + c) + (c * c + c);
  u.gemm_flops = 2 * n * c * c * (1 + 4 + 2 + 12 + 1) + 2 * 2 * L * D * c;
  u.attn_flops = 4 * n * n * c + 4 * n * L * c;
  u.elem_bytes = 72 * n * c;
  u.act_bytes = 58 * n * c + 4 * L * c;
  u.kernels = 40;
  u.out_ch = c;
  u.out_res = res;
  u.push = push;
  return u;
}

Unit sampler(std::string name, double c, double res_in, double res_out, bool push) {
  const double hw_out = res_out * res_out;
  Unit u;
  u.name = std::move(name);
  u.kind = res_out > res_in ? "upsample" : "downsample";
  u.hw = hw_out;
  u.params = conv_params(c, c, 3);
  u.gemm_flops = 2 * hw_out * 9 * c * c;
  u.elem_bytes = 2 * c * (res_in * res_in + hw_out) * (res_out > res_in ? 2 : 1);
  u.act_bytes = 2 * c * std::max(res_in, res_out) * std::max(res_in, res_out);
  u.kernels = 3;
  u.out_ch = c;
  u.out_res = res_out;
  u.push = push;
  return u;
}

std::vector<Unit> unet_units(const Arch& a) {
  std::vector<Unit> u;
  const double c0 = a.channels.front(), T = a.time_embed_dim;
  Unit temb;
  temb.name = "time embedding";
  temb.kind = "embedding";
  temb.hw = 1;
  temb.params = (c0 * T + T) + (T * T + T);
  temb.kernels = 6;
  temb.out_ch = a.in_channels;
  temb.out_res = a.latent;
  u.push_back(temb);
  const double hw = static_cast<double>(a.latent) * a.latent;
  Unit in;
  in.name = "conv_in";
  in.kind = "conv";
  in.hw = hw;
  in.params = conv_params(a.in_channels, c0, 3);
  in.gemm_flops = 2 * hw * 9 * a.in_channels * c0;
  in.elem_bytes = 2 * hw * (a.in_channels + c0);
  in.act_bytes = 2 * hw * a.in_channels;
  in.kernels = 1;
  in.out_ch = c0;
  in.out_res = a.latent;
  in.push = true;
  u.push_back(in);
  double res = a.latent, c = c0;
  const std::size_t levels = a.channels.size();
  for (std::size_t lvl = 0; lvl < levels; ++lvl) {
    const double cl = a.channels[lvl];
    const bool attn = a.attention[lvl] != 0;
    for (int j = 0; j < a.layers_per_block; ++j) {
      u.push_back(resnet(a, fmt::format("down{}.resnet{}", lvl, j), c, cl, res, false, !attn));
      c = cl;
      if (attn) u.push_back(unet_transformer(a, fmt::format("down{}.attn{}", lvl, j), c, res, true));
    }
    if (lvl + 1 < levels) {
      u.push_back(sampler(fmt::format("down{}.downsample", lvl), c, res, res / 2, true));
      res /= 2;
    }
  }
  u.push_back(resnet(a, "mid.resnet0", c, c, res, false, false));
  u.push_back(unet_transformer(a, "mid.attn", c, res, false));
  u.push_back(resnet(a, "mid.resnet1", c, c, res, false, false));
  std::vector<double> skips;
  for (const Unit& x : u)
    if (x.push) skips.push_back(x.out_ch);
  for (std::size_t lvl = levels; lvl-- > 0;) {
    const double cl = a.channels[lvl];
    for (int j = 0; j <= a.layers_per_block; ++j) {
      const double cs = skips.back();
      skips.pop_back();
      u.push_back(resnet(a, fmt::format("up{}.resnet{}", lvl, j), c + cs, cl, res, true, false));
      c = cl;
      if (a.attention[lvl]) u.push_back(unet_transformer(a, fmt::format("up{}.attn{}", lvl, j), c, res, false));
    }
    if (lvl > 0) {
      u.push_back(sampler(fmt::format("up{}.upsample", lvl), c, res, res * 2, false));
      res *= 2;
    }
  }
  Unit out;
  out.name = "out";
  out.kind = "head";
  out.hw = hw;
  out.params = 2 * c + conv_params(c, a.in_channels, 3);
  out.gemm_flops = 2 * hw * 9 * c * a.in_channels;
  out.elem_bytes = hw * (8 * c + 2 * a.in_channels * 4);
  out.act_bytes = hw * 6 * c;
  out.kernels = 5;
  out.out_ch = a.in_channels;
  out.out_res = a.latent;
  u.push_back(out);
  return u;
}

void gen_unet(Model& m, const Arch& a, const Estimator& est, const std::vector<int>& sizes, double opt_traffic) {
  const std::vector<Unit> units = unet_units(a);
  const double d = a.bytes_per_element, sc = d / 2;  // the unit tables are in 2-byte elements
  // Bytes per sample crossing a cut after unit i: the hidden state, every live skip
  // tensor, the time embedding and the text context forward; the same without the
  // context backward (it belongs to the frozen text encoder).
  std::vector<double> live;
  for (std::size_t i = 0; i < units.size(); ++i) {
    const Unit& x = units[i];
    if (x.pop) live.pop_back();
    if (x.push) live.push_back(2 * x.out_ch * x.out_res * x.out_res);
    const bool last = i + 1 == units.size();
    double grad = (x.push ? 0 : 2 * x.out_ch * x.out_res * x.out_res) + 2 * a.time_embed_dim;
    for (double v : live) grad += v;
    const double fwd_msg = last ? 0 : sc * (grad + 2.0 * a.context_len * a.context_dim);
    const double bwd_msg = last ? 0 : sc * grad;
    Layer l;
    l.name = x.name;
    l.kind = x.kind;
    l.parameter_bytes = x.params * d;
    l.optimizer_s = round_sig(est.memory(l.parameter_bytes * opt_traffic), 6);
    for (int bi : sizes) {
      const double b = bi;
      Costs c;
      const double rows = b * x.hw;
      c.flops = b * (x.gemm_flops + x.attn_flops);
      c.fwd = est.gemm(b * x.gemm_flops, rows, d * x.params) + (x.attn_flops > 0 ? est.attention(b * x.attn_flops) : 0) +
              est.memory(b * sc * x.elem_bytes) + est.launches(x.kernels);
      // Backward: 2x the GEMMs (reading weights, writing and accumulating gradients),
      // 2.5x attention (the scores are recomputed), 2x elementwise and kernels.
      c.bwd = est.gemm(2 * b * x.gemm_flops, rows, 3 * d * x.params) +
              (x.attn_flops > 0 ? est.attention(2.5 * b * x.attn_flops) : 0) + est.memory(2 * b * sc * x.elem_bytes) +
              est.launches(2 * x.kernels);
      // time embedding: only the tiny MLP; its weights are read once per op
      if (x.gemm_flops == 0) {
        c.fwd += est.memory(d * x.params);
        c.bwd += est.memory(3 * d * x.params);
      }
      c.act = b * sc * x.act_bytes;
      c.out = b * fwd_msg;
      if (bwd_msg != fwd_msg) c.gout = b * bwd_msg;
      l.profile.push_back(point(bi, c));
    }
    m.layers.push_back(std::move(l));
  }
}

// --- GNMT (LSTM seq2seq with attention) ---

void gen_gnmt(Model& m, const Arch& a, const Estimator& est, const std::vector<int>& sizes, double opt_traffic) {
  const double h = a.hidden, V = a.vocab, S = a.seq_len, T = a.target_len, d = a.bytes_per_element;
  auto add = [&](std::string name, std::string kind, double params, auto costs_at) {
    Layer l;
    l.name = std::move(name);
    l.kind = std::move(kind);
    l.parameter_bytes = params * d;
    l.optimizer_s = round_sig(est.memory(l.parameter_bytes * opt_traffic), 6);
    for (int b : sizes) l.profile.push_back(point(b, costs_at(static_cast<double>(b))));
    m.layers.push_back(std::move(l));
  };
  // One LSTM direction over `steps` tokens with input width `in`: the input GEMM runs for
  // all steps at once, the recurrent GEMM one step at a time (b rows, weights read every
  // step); gates and cell updates are memory-bound.
  struct Lstm {
    double flops, fwd, bwd, act;
  };
  auto lstm = [&](double b, double in, double steps) {
    Lstm r;
    const double wi = 4 * h * in * d, wh = 4 * h * h * d;
    const double fin = 2 * b * steps * in * 4 * h, fstep = 2 * b * h * 4 * h;
    const double elem = b * steps * h * d * 10;
    r.flops = fin + steps * fstep;
    r.fwd = est.gemm(fin, b * steps, wi) + steps * est.gemm(fstep, b, wh) + est.memory(elem) + est.launches(2 * steps + 2);
    r.bwd = est.gemm(2 * fin, b * steps, 3 * wi) + steps * est.gemm(2 * fstep, b, 3 * wh) + est.memory(2 * elem) +
            est.launches(4 * steps + 4);
    r.act = b * steps * (in + 6 * h) * d;  // input, 4 gates, cell state and its tanh
    return r;
  };
  auto lstm_params = [&](double in) { return 4 * h * (in + h) + 8 * h; };
  auto embedding = [&](double steps, double msg) {
    return [&, steps, msg](double b) {
      Costs c;
      const double elem = b * d * 2 * steps * h;
      c.fwd = est.memory(elem) + est.launches(2);
      c.bwd = est.memory(elem + 2 * d * V * h) + est.launches(4);
      c.out = b * msg;
      return c;
    };
  };
  const double enc_out = d * S * h, dec_state = d * T * h;
  // Cuts inside the encoder carry its hidden state (the target tokens, 4 bytes each, too).
  add("encoder embedding", "embedding", V * h, embedding(S, enc_out + 4 * T));
  for (int i = 0; i < a.encoder_layers; ++i) {
    const bool bidir = i == 0;
    const double in = i == 1 ? 2 * h : h;
    const double params = lstm_params(in) * (bidir ? 2 : 1);
    add(fmt::format("encoder {}", i), bidir ? "lstm (bidirectional)" : "lstm", params, [&, bidir, in](double b) {
      const Lstm l = lstm(b, in, S);
      const double k = bidir ? 2 : 1;
      Costs c;
      c.flops = k * l.flops;
      c.fwd = k * l.fwd, c.bwd = k * l.bwd, c.act = k * l.act;
      c.out = b * ((bidir ? 2 : 1) * enc_out + 4 * T);
      return c;
    });
  }
  // From here on, cuts carry the encoder output until the attention has used it.
  add("decoder embedding", "embedding", V * h, embedding(T, enc_out + dec_state));
  for (int i = 0; i < a.decoder_layers; ++i) {
    const bool attn = i == 0;
    const double in = attn ? h : 2 * h;  // later layers also take the attention context
    const double params = lstm_params(in) + (attn ? 2 * h * h + 2 * h + 1 : 0);
    add(fmt::format("decoder {}", i), attn ? "lstm + attention" : "lstm", params, [&, attn, in](double b) {
      const Lstm l = lstm(b, in, T);
      Costs c;
      c.flops = l.flops;
      c.fwd = l.fwd, c.bwd = l.bwd, c.act = l.act;
      if (attn) {
        // Normalised additive attention: key and query projections, tanh(q + k) scores
        // over every (target, source) pair, softmax, context = weights x encoder output.
        const double keys = 2 * b * S * h * h, queries = 2 * b * T * h * h, context = 2 * b * T * S * h;
        const double scores = 3 * d * b * T * S * h;
        c.flops += keys + queries + context + b * T * S * h * 2;
        c.fwd += est.gemm(keys, b * S, d * h * h) + est.gemm(queries, b * T, d * h * h) + est.gemm(context, T, 0) +
                 est.memory(scores) + est.launches(8);
        c.bwd += est.gemm(2 * keys, b * S, 3 * d * h * h) + est.gemm(2 * queries, b * T, 3 * d * h * h) +
                 est.gemm(2 * context, T, 0) + est.memory(2 * scores) + est.launches(16);
        c.act += d * b * T * S * h + d * b * S * h;  // tanh(q + k), keys
      }
      c.out = b * 2 * dec_state;  // hidden state and attention context
      return c;
    });
  }
  add("classifier", "head", V * h + V, [&](double b) {
    Costs c;
    const double vocab = 2 * b * T * h * V;
    c.flops = vocab;
    c.fwd = est.gemm(vocab, b * T, d * V * h) + est.memory(b * 20 * T * V) + est.launches(6);
    c.bwd = est.gemm(2 * vocab, b * T, 3 * d * V * h) + est.memory(b * 8 * T * V) + est.launches(10);
    c.act = b * (d * T * h + 4 * T * V);
    c.out = 0;
    return c;
  });
}

void check_device(const Device& d) {
  auto need = [](double v, const char* option, bool fraction) {
    if (!(v > 0) || !std::isfinite(v) || (fraction && v > 1))
      throw InputError(fmt::format("--{}: must be {}, got {}", option, fraction ? "in (0, 1]" : "> 0", v));
  };
  need(d.memory_bytes, "memory-bytes", false);
  need(d.peak_flops, "peak-flops", false);
  need(d.memory_bandwidth, "memory-bandwidth", false);
  need(d.gemm_efficiency, "gemm-efficiency", true);
  need(d.attention_efficiency, "attention-efficiency", true);
  need(d.memory_efficiency, "memory-efficiency", true);
  if (!(d.gemm_half_rows >= 0) || !std::isfinite(d.gemm_half_rows))
    throw InputError(fmt::format("--gemm-half-rows: must be >= 0, got {}", d.gemm_half_rows));
  if (!(d.kernel_overhead_s >= 0) || !std::isfinite(d.kernel_overhead_s))
    throw InputError(fmt::format("--kernel-overhead: must be >= 0, got {}", d.kernel_overhead_s));
  if (!(d.reserved_bytes >= 0) || !std::isfinite(d.reserved_bytes))
    throw InputError(fmt::format("--reserved-bytes: must be >= 0, got {}", d.reserved_bytes));
}

}  // namespace

Model generate_model(const Arch& a, const Device& device, const std::vector<int>& sizes) {
  check_device(device);
  if (sizes.empty()) throw InputError("--micro-batch-sizes: give at least one size");
  for (std::size_t i = 0; i < sizes.size(); ++i)
    if (sizes[i] < 1 || (i > 0 && sizes[i] <= sizes[i - 1]))
      throw InputError(fmt::format("--micro-batch-sizes: sizes must be >= 1 and strictly increasing, got {} after {}",
                                   sizes[i], i > 0 ? sizes[i - 1] : 0));
  if (a.bytes_per_element != 2 && a.bytes_per_element != 4)
    throw InputError(fmt::format("--dtype: element size must be 2 or 4 bytes, got {}", a.bytes_per_element));
  if (a.recompute != "none" && a.recompute != "selective" && a.recompute != "full")
    throw InputError(fmt::format("--recompute: must be none, selective or full, got '{}'", a.recompute));
  if (a.global_batch_size < 0)
    throw InputError(fmt::format("--global-batch-size: must be >= 1, got {}", a.global_batch_size));

  Model m;
  m.name = a.name.empty() ? a.arch : a.name;
  m.source_file = "(generated)";
  m.source = a.source;
  m.device = device;
  if (a.global_batch_size > 0) m.global_batch_size = a.global_batch_size;
  const Estimator est{device, static_cast<double>(a.bytes_per_element)};
  const bool ema = a.arch == "unet";
  const OptimizerBytes ob = optimizer_bytes(a.bytes_per_element, ema);
  m.optimizer_bytes_per_parameter_byte = ob.state_per_param_byte;
  auto& arch = m.architecture;
  arch["arch"] = a.arch;
  const char* dtype = a.bytes_per_element == 2 ? "fp16/bf16" : "fp32";

  if (a.arch == "gpt" || a.arch == "bert") {
    require_positive(a.layers, "layers", a.arch);
    require_positive(a.hidden, "hidden", a.arch);
    require_positive(a.heads, "heads", a.arch);
    require_positive(a.seq_len, "seq-len", a.arch);
    require_positive(a.vocab, "vocab", a.arch);
    if (a.hidden % a.heads != 0)
      throw InputError(fmt::format("--heads: {} heads do not divide the hidden size {}", a.heads, a.hidden));
    arch["layers"] = a.layers, arch["hidden"] = a.hidden, arch["heads"] = a.heads, arch["seq_len"] = a.seq_len;
    arch["vocab"] = a.vocab, arch["dtype"] = dtype, arch["recompute"] = a.recompute;
    gen_transformer(m, a, est, sizes, ob.traffic_per_param_byte);
    m.description = fmt::format(
        "{} {} layers, hidden {}, {} heads, sequence {}, vocabulary {}, {} activations, '{}' activation "
        "recomputation; {} layers: embedding, {} transformer layers, head. Analytic estimates on {} "
        "(docs/formats.md, 'Model file'): forward FLOPs per transformer layer 24bsh^2 + 4bs^2h (Narayanan et al. "
        "2021); activations per layer from Korthikanti et al. 2022 (34sbh + 5as^2b bytes for 2-byte elements "
        "without recomputation, 34sbh with selective, 2sbh with full recomputation).",
        a.arch == "gpt" ? "Transformer decoder (GPT):" : "Transformer encoder (BERT):", a.layers, a.hidden, a.heads,
        a.seq_len, a.vocab, dtype, a.recompute, a.layers + 2, a.layers, device.name);
  } else if (a.arch == "unet") {
    require_positive(a.latent, "latent", a.arch);
    require_positive(a.in_channels, "in-channels", a.arch);
    require_positive(a.layers_per_block, "layers-per-block", a.arch);
    require_positive(a.heads, "heads", a.arch);
    require_positive(a.context_len, "context-len", a.arch);
    require_positive(a.context_dim, "context-dim", a.arch);
    require_positive(a.time_embed_dim, "time-embed-dim", a.arch);
    if (a.channels.empty()) throw InputError("--channels: give the channels of every level (e.g. 320,640,1280,1280)");
    for (int c : a.channels) require_positive(c, "channels", a.arch);
    if (a.attention.size() != a.channels.size())
      throw InputError(fmt::format("--attention-levels: give one 0/1 per level ({} levels), got {}", a.channels.size(),
                                   a.attention.size()));
    if (a.latent % (1 << (a.channels.size() - 1)) != 0)
      throw InputError(fmt::format("--latent: {} cannot be halved {} times", a.latent, a.channels.size() - 1));
    arch["latent"] = a.latent, arch["in_channels"] = a.in_channels, arch["channels"] = a.channels;
    arch["attention_levels"] = a.attention, arch["layers_per_block"] = a.layers_per_block, arch["heads"] = a.heads;
    arch["context_len"] = a.context_len, arch["context_dim"] = a.context_dim;
    arch["time_embed_dim"] = a.time_embed_dim, arch["dtype"] = dtype;
    gen_unet(m, a, est, sizes, ob.traffic_per_param_byte);
    m.description = fmt::format(
        "U-Net diffusion model: {}x{}x{} latents, channels {}, {} ResNet blocks per level, text cross-attention "
        "({}x{} context); {} layers (ResNet blocks, transformer blocks, samplers). Analytic estimates on {} "
        "after configs/pipelines/derive_unet.py: convolutions 2*H*W*9*cin*cout FLOPs, transformer GEMMs, fused "
        "attention cores 4*N^2*C + 4*N*77*C; a cut carries the hidden state, every live skip connection, the time "
        "embedding and (forward only) the text context; fp32 EMA of the weights.",
        a.latent, a.latent, a.in_channels, fmt::join(a.channels, "/"), a.layers_per_block, a.context_len,
        a.context_dim, m.layers.size(), device.name);
  } else if (a.arch == "gnmt") {
    require_positive(a.encoder_layers, "encoder-layers", a.arch);
    require_positive(a.decoder_layers, "decoder-layers", a.arch);
    require_positive(a.hidden, "hidden", a.arch);
    require_positive(a.vocab, "vocab", a.arch);
    require_positive(a.seq_len, "seq-len", a.arch);
    require_positive(a.target_len, "target-len", a.arch);
    arch["encoder_layers"] = a.encoder_layers, arch["decoder_layers"] = a.decoder_layers, arch["hidden"] = a.hidden;
    arch["vocab"] = a.vocab, arch["seq_len"] = a.seq_len, arch["target_len"] = a.target_len, arch["dtype"] = dtype;
    gen_gnmt(m, a, est, sizes, ob.traffic_per_param_byte);
    m.description = fmt::format(
        "LSTM sequence-to-sequence model (GNMT): {} encoder layers (the first bidirectional), {} decoder layers "
        "with additive attention, hidden {}, vocabulary {}, {} source and {} target tokens. Analytic estimates on "
        "{}: input GEMMs over all steps at once, recurrent GEMMs one step at a time (b rows, weights read every "
        "step); a cut carries the hidden state, and the encoder output until the attention has used it.",
        a.encoder_layers, a.decoder_layers, a.hidden, a.vocab, a.seq_len, a.target_len, device.name);
  } else {
    throw InputError(fmt::format("--arch: must be gpt, bert, unet or gnmt, got '{}'", a.arch));
  }
  m.description += fmt::format(
      " Static memory: parameters x (1 + {}) (gradients and optimizer state) plus {:.3g} bytes reserved per device.",
      m.optimizer_bytes_per_parameter_byte, device.reserved_bytes);
  return m;
}

}  // namespace adagrouper::planner
