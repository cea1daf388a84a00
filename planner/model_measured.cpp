// merge_measured: calibration measurements of layers replacing a model's estimates.
//
// The JSONL "layer" lines of docs/formats.md, "Measured layers".
#include <algorithm>
#include <map>
#include <string>
#include <utility>

#include <fmt/format.h>

#include "error.h"
#include "json_util.h"
#include "model.h"
#include "pipeline.h"
#include "rate_forms.h"

namespace adagrouper::planner {

namespace {

bool is_layer_line(const Field& f) {
  return f.has("type") && f.at("type").json().is_string() && f.at("type").json().get<std::string>() == "layer";
}

// A size in bytes, or with a unit ("40GiB").
double read_bytes(const Field& f) {
  return f.number_in(Quantity::size, 0, sim::kMaxBytes, "the largest byte count an input may give");
}

// The point a line gives for layer li at size b: the measured times; the bytes it leaves
// out come from the layer's entry at b (`existing`), else from the estimates
// interpolated, else (b outside the estimated profile) the line must give them.
LayerPoint measured_point(const Field& f, const Model& estimates, int li, int b, const LayerPoint* existing) {
  LayerPoint p;
  p.micro_batch_size = b;
  p.forward_s = sim::read_time(f.at("forward_s"));
  p.backward_s = sim::read_time(f.at("backward_s"));
  p.measured = true;
  const auto& est = estimates.layers[static_cast<std::size_t>(li)].profile;
  const bool inside = b >= est.front().micro_batch_size && b <= est.back().micro_batch_size;
  if (existing) {
    p.activation_bytes = existing->activation_bytes;
    p.output_bytes = existing->output_bytes;
    p.grad_output_bytes = existing->grad_output_bytes;
    p.forward_flops = existing->forward_flops;
  } else if (inside) {
    const LayerAt estimate = layer_at(estimates, li, b);
    p.activation_bytes = estimate.act;
    p.output_bytes = estimate.out;
    if (estimate.gout != estimate.out) p.grad_output_bytes = estimate.gout;
  }
  const bool required = !existing && !inside;
  if (f.has("activation_bytes") || required) p.activation_bytes = read_bytes(f.at("activation_bytes"));
  if (f.has("output_bytes") || required) p.output_bytes = read_bytes(f.at("output_bytes"));
  return p;
}

// Merges the lines of one file into a model.
class Merge {
 public:
  Merge(Model& model, std::string file) : model_(model), estimates_(model), file_(std::move(file)) {}

  // Merges one line if it is a "layer" line; returns whether it was.
  bool line(const Field& f, int line) {
    f.require_object();
    if (!is_layer_line(f)) return false;
    f.check_keys({"type", "layer", "name", "micro_batch_size", "forward_s", "backward_s", "activation_bytes",
                  "output_bytes", "parameter_bytes"},
                 "a layer line");
    const int L = model_.num_layers();
    const std::int64_t idx = f.at("layer").integer_at_least(0);
    if (idx >= L)
      f.at("layer").fail(
          fmt::format("the model {} has {} layers (0..{}), got layer {}", model_.source_file, L, L - 1, idx));
    const int b = f.at("micro_batch_size").int_in(1, sim::kMaxBatchSize);
    const int li = static_cast<int>(idx);
    if (auto [it, fresh] = seen_.emplace(std::pair{li, b}, line); !fresh)
      f.fail(fmt::format("layer {} at micro_batch_size {} is measured twice (lines {} and {})", li, b, it->second,
                         line));
    Layer& layer = model_.layers[static_cast<std::size_t>(li)];
    if (f.has("name")) check_name(f.at("name").string(), layer, li, line);
    auto pos = std::lower_bound(layer.profile.begin(), layer.profile.end(), b,
                                [](const LayerPoint& q, int v) { return q.micro_batch_size < v; });
    const bool exists = pos != layer.profile.end() && pos->micro_batch_size == b;
    const LayerPoint p = measured_point(f, estimates_, li, b, exists ? &*pos : nullptr);
    if (f.has("parameter_bytes")) layer.parameter_bytes = read_bytes(f.at("parameter_bytes"));
    if (exists) {
      *pos = p;
    } else {
      layer.profile.insert(pos, p);
    }
    return true;
  }

  std::vector<std::string>& warnings() { return warnings_; }

 private:
  void check_name(const std::string& name, const Layer& layer, int li, int line) {
    if (name != layer.name)
      warnings_.push_back(fmt::format("{}:{}: layer {} is '{}' in the measurement and '{}' in the model {}", file_,
                                      line, li, name, layer.name, model_.source_file));
  }

  Model& model_;
  const Model estimates_;  // fields a line leaves out come from here, whatever the order
  const std::string file_;
  std::map<std::pair<int, int>, int> seen_;  // (layer, b) -> line
  std::vector<std::string> warnings_;
};

}  // namespace

std::vector<std::string> merge_measured(Model& model, const std::filesystem::path& path) {
  const std::string file = path.string();
  const std::string content = read_text_file(path);
  Merge merge(model, file);
  std::string_view rest = content;
  int line = 0, used = 0;
  while (!rest.empty()) {
    const std::size_t end = rest.find('\n');
    std::string_view text = rest.substr(0, end);
    rest.remove_prefix(end == std::string_view::npos ? rest.size() : end + 1);
    ++line;
    if (!text.empty() && text.back() == '\r') text.remove_suffix(1);
    if (text.find_first_not_of(" \t") == std::string_view::npos) continue;
    const nlohmann::json doc = parse_json_text(text, file, static_cast<std::size_t>(line));
    used += merge.line(Field(doc, fmt::format("{}:{}", file, line)), line);
  }
  if (used == 0)
    throw InputError(fmt::format("{}: no line with \"type\": \"layer\" (expected the calibration harness's per-layer "
                                 "summary lines)",
                                 file));
  model.measured_files.push_back(file);
  model.micro_batch_sizes();  // still overlapping
  return std::move(merge.warnings());
}

}  // namespace adagrouper::planner
