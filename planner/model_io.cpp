// Model files: reading and writing adagrouper.model/1, and a layer's values at a micro-batch size.
//
// docs/formats.md, "Model file".
#include <algorithm>
#include <set>
#include <string>
#include <utility>
#include <vector>

#include <fmt/format.h>
#include <fmt/ranges.h>

#include "error.h"
#include "json_util.h"
#include "model.h"
#include "pipeline.h"
#include "rate_forms.h"

namespace adagrouper::planner {

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

// A size in bytes, or with a unit ("40GiB").
double read_bytes(const Field& f) {
  return f.number_in(Quantity::size, 0, sim::kMaxBytes, "the largest byte count an input may give");
}

// Most layers a model may have (the partition's tables grow with layers x stages).
constexpr std::size_t kMaxLayers = 100000;

Device parse_device(const Field& dev) {
  dev.require_object();
  dev.check_keys({"name", "source", "memory_bytes", "peak_flops", "memory_bandwidth_bytes_per_s", "gemm_efficiency",
                  "gemm_half_rows", "attention_efficiency", "memory_efficiency", "kernel_overhead_s",
                  "reserved_bytes"},
                 "a device");
  Device d;
  d.name = opt_string(dev, "name");
  d.source = opt_string(dev, "source");
  d.memory_bytes = dev.at("memory_bytes").positive(Quantity::size);
  read_bytes(dev.at("memory_bytes"));
  d.peak_flops = positive_or(dev, "peak_flops", 0);
  d.memory_bandwidth =
      dev.has("memory_bandwidth_bytes_per_s") ? dev.at("memory_bandwidth_bytes_per_s").positive(Quantity::rate) : 0;
  d.gemm_efficiency = positive_or(dev, "gemm_efficiency", 0);
  d.gemm_half_rows = dev.non_negative_or("gemm_half_rows", 0);
  d.attention_efficiency = positive_or(dev, "attention_efficiency", 0);
  d.memory_efficiency = positive_or(dev, "memory_efficiency", 0);
  d.kernel_overhead_s = dev.has("kernel_overhead_s") ? sim::read_time(dev.at("kernel_overhead_s")) : 0.0;
  d.reserved_bytes = dev.has("reserved_bytes") ? read_bytes(dev.at("reserved_bytes")) : 0.0;
  for (const char* frac : {"gemm_efficiency", "attention_efficiency", "memory_efficiency"})
    if (dev.has(frac) && dev.at(frac).number() > 1) dev.at(frac).fail("must be a fraction of peak, <= 1");
  return d;
}

// One profile entry; `last`: of the last layer, whose output_bytes may be left out.
LayerPoint parse_point(const Field& e, bool last) {
  e.require_object();
  e.check_keys({"micro_batch_size", "forward_s", "backward_s", "activation_bytes", "output_bytes",
                "grad_output_bytes", "forward_flops", "measured"},
               "a profile entry");
  LayerPoint p;
  p.micro_batch_size = e.at("micro_batch_size").int_in(1, sim::kMaxBatchSize);
  p.forward_s = sim::read_time(e.at("forward_s"));
  p.backward_s = sim::read_time(e.at("backward_s"));
  p.activation_bytes = read_bytes(e.at("activation_bytes"));
  if (!last || e.has("output_bytes")) p.output_bytes = read_bytes(e.at("output_bytes"));
  if (e.has("grad_output_bytes")) p.grad_output_bytes = read_bytes(e.at("grad_output_bytes"));
  if (e.has("forward_flops")) p.forward_flops = e.at("forward_flops").non_negative();
  if (e.has("measured")) p.measured = e.at("measured").boolean();
  return p;
}

Layer parse_layer(const Field& lf, std::size_t i, bool last) {
  lf.require_object();
  lf.check_keys({"name", "kind", "parameter_bytes", "optimizer_s", "profile"}, "a layer");
  Layer l;
  l.name = lf.has("name") ? lf.at("name").string() : fmt::format("layer {}", i);
  l.kind = opt_string(lf, "kind");
  l.parameter_bytes = read_bytes(lf.at("parameter_bytes"));
  l.optimizer_s = lf.has("optimizer_s") ? sim::read_time(lf.at("optimizer_s")) : 0.0;
  const Field prof = lf.at("profile");
  if (prof.size() == 0) prof.fail("empty profile: list at least one micro-batch size");
  for (std::size_t j = 0; j < prof.size(); ++j) {
    const Field e = prof.at(j);
    LayerPoint p = parse_point(e, last);
    if (!l.profile.empty() && p.micro_batch_size <= l.profile.back().micro_batch_size)
      e.at("micro_batch_size").fail("profile entries must have strictly increasing micro_batch_size");
    l.profile.push_back(p);
  }
  return l;
}

}  // namespace

Model load_model(const std::filesystem::path& path) { return parse_model(read_json_file(path), path.string()); }

Model parse_model(const nlohmann::json& doc, const std::string& source) {
  Field root(doc, source);
  root.require_object();
  // parameter_bytes: the sum over layers, written for information.
  root.check_keys({"schema", "name", "source", "generated_by", "architecture", "global_batch_size",
                   "optimizer_bytes_per_parameter_byte", "measured_files", "device", "layers", "parameter_bytes"},
                  "a model");
  Model m;
  m.source_file = source;
  if (root.has("schema") && root.at("schema").string() != "adagrouper.model/1")
    root.at("schema").fail(
        fmt::format("must be \"adagrouper.model/1\", got {}", describe_json(root.at("schema").json())));
  m.name = utf8_safe(root.has("name") ? root.at("name").string() : std::filesystem::path(source).stem().string());
  m.description = opt_string(root, "description");
  m.source = opt_string(root, "source");
  m.generated_by = opt_string(root, "generated_by");
  if (root.has("architecture")) {
    root.at("architecture").require_object();  // free-form: the hyperparameters, for information
    m.architecture = nlohmann::ordered_json(root.at("architecture").json());
  }
  if (root.has("global_batch_size")) m.global_batch_size = root.at("global_batch_size").int_in(1, sim::kMaxBatchSize);
  m.optimizer_bytes_per_parameter_byte =
      root.at("optimizer_bytes_per_parameter_byte").number_in(0, 1e6, "bytes of state per parameter byte");
  if (root.has("measured_files")) {
    const Field mf = root.at("measured_files");
    for (std::size_t i = 0; i < mf.size(); ++i) m.measured_files.push_back(mf.at(i).string());
  }
  m.device = parse_device(root.at("device"));
  const Field layers = root.at("layers");
  if (layers.size() == 0) layers.fail("must list at least one layer");
  if (layers.size() > kMaxLayers)
    layers.fail(fmt::format("lists {} layers, more than the {} a model may have", layers.size(), kMaxLayers));
  for (std::size_t i = 0; i < layers.size(); ++i)
    m.layers.push_back(parse_layer(layers.at(i), i, i + 1 == layers.size()));
  m.micro_batch_sizes();  // the layers' ranges must overlap
  return m;
}

namespace {

nlohmann::ordered_json device_json(const Device& dv) {
  nlohmann::ordered_json d;
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
  return d;
}

nlohmann::ordered_json layer_json(const Layer& l) {
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
  return lj;
}

}  // namespace

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
  j["device"] = device_json(m.device);
  auto& ls = j["layers"] = nlohmann::ordered_json::array();
  for (const Layer& l : m.layers) ls.push_back(layer_json(l));
  return j;
}

namespace {

// The members ("\"key\": " and the dumped value) or elements of an object or array.
template <typename Dump>
std::vector<std::string> dumped_children(const nlohmann::ordered_json& v, Dump dump) {
  std::vector<std::string> out;
  if (v.is_object()) {
    for (const auto& [k, x] : v.items()) out.push_back(nlohmann::ordered_json(k).dump() + ": " + dump(x));
  } else {
    for (const auto& x : v) out.push_back(dump(x));
  }
  return out;
}

// One line, with a space after every comma and colon.
std::string dump_flat(const nlohmann::ordered_json& v) {
  if (!v.is_object() && !v.is_array()) return v.dump();
  return fmt::format("{}{}{}", v.is_object() ? "{" : "[", fmt::join(dumped_children(v, dump_flat), ", "),
                     v.is_object() ? "}" : "]");
}

}  // namespace

std::string dump_compact(const nlohmann::ordered_json& v, int width, int indent) {
  const std::string flat = dump_flat(v);
  if (static_cast<int>(flat.size()) + indent <= width || !(v.is_object() || v.is_array())) return flat;
  const std::string pad(static_cast<std::size_t>(indent) + 2, ' ');
  const auto items =
      dumped_children(v, [&](const nlohmann::ordered_json& x) { return dump_compact(x, width, indent + 2); });
  std::string out = v.is_object() ? "{\n" : "[\n";
  for (std::size_t i = 0; i < items.size(); ++i) {
    if (i > 0) out += ",\n";
    out += pad;
    out += items[i];
  }
  out += '\n';
  out.append(static_cast<std::size_t>(indent), ' ');
  out += v.is_object() ? '}' : ']';
  return out;
}

}  // namespace adagrouper::planner
