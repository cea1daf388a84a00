// Stage descriptions (calib/description.h): reading and checking them, and their layers' shapes.
#include "description.h"


#include <fmt/format.h>
#include <nlohmann/json.hpp>

#include "error.h"
#include "json_util.h"
#include "pipeline.h"

namespace adagrouper::calib {

std::string_view dtype_name(Dtype d) { return d == Dtype::fp16 ? "fp16" : "fp32"; }
std::size_t dtype_bytes(Dtype d) { return d == Dtype::fp16 ? 2 : 4; }

std::string_view layer_kind_name(LayerKind k) {
  switch (k) {
    case LayerKind::embedding: return "embedding";
    case LayerKind::transformer: return "transformer";
    case LayerKind::head: return "head";
  }
  return "?";
}

std::vector<LayerDesc> StageDescription::layers_of(int stage) const {
  std::vector<LayerDesc> out;
  int index = 0;
  for (int s = 0; s < num_stages(); ++s) {
    const Stage& st = stages[static_cast<std::size_t>(s)];
    auto add = [&](LayerKind k) {
      if (s == stage) out.push_back({index, s, k});
      ++index;
    };
    if (st.embedding) add(LayerKind::embedding);
    for (int i = 0; i < st.layers; ++i) add(LayerKind::transformer);
    if (st.head) add(LayerKind::head);
  }
  return out;
}

int StageDescription::num_layers() const {
  int n = 0;
  for (const Stage& st : stages) n += st.layers + (st.embedding ? 1 : 0) + (st.head ? 1 : 0);
  return n;
}

namespace {

constexpr std::int64_t kMaxDim = 1 << 20;

// A size in bytes, or with a unit ("40GiB").
double read_bytes(const Field& f) {
  return f.number_in(Quantity::size, 0, sim::kMaxBytes, "the largest byte count an input may give");
}

int dimension(const Field& f, std::int64_t min = 1) {
  const std::int64_t v = f.integer_at_least(min);
  if (v > kMaxDim) f.fail(fmt::format("must be at most {}, got {}", kMaxDim, v));
  return static_cast<int>(v);
}

}  // namespace

StageDescription parse_stage_description(const nlohmann::json& doc, const std::string& source) {
  const Field root(doc, source);
  root.require_object();
  root.check_keys({"name", "dtype", "hidden", "heads", "sequence_length", "ffn_hidden", "vocabulary",
                   "global_batch_size", "memory_limit_bytes", "static_overhead_bytes", "stages"},
                  "a stage description");
  StageDescription d;
  d.source = source;
  d.name = utf8_safe(root.has("name") ? root.at("name").string() : std::filesystem::path(source).stem().string());
  if (root.has("dtype")) {
    const std::string t = root.at("dtype").string();
    if (t == "fp16") {
      d.dtype = Dtype::fp16;
    } else if (t == "fp32") {
      d.dtype = Dtype::fp32;
    } else {
      root.at("dtype").fail(fmt::format("must be \"fp16\" or \"fp32\", got \"{}\"", t));
    }
  }
  d.hidden = dimension(root.at("hidden"));
  d.heads = dimension(root.at("heads"));
  if (d.hidden % d.heads != 0)
    root.at("heads").fail(fmt::format("must divide hidden ({}), got {}", d.hidden, d.heads));
  d.sequence_length = dimension(root.at("sequence_length"));
  d.ffn_hidden = root.has("ffn_hidden") ? dimension(root.at("ffn_hidden")) : 4 * d.hidden;
  if (root.has("vocabulary")) d.vocabulary = dimension(root.at("vocabulary"), 2);
  if (root.has("global_batch_size")) d.global_batch_size = root.at("global_batch_size").int_in(1, sim::kMaxBatchSize);
  if (root.has("memory_limit_bytes")) {
    d.memory_limit_bytes = root.at("memory_limit_bytes").positive(Quantity::size);
    read_bytes(root.at("memory_limit_bytes"));
  }
  if (root.has("static_overhead_bytes")) d.static_overhead_bytes = read_bytes(root.at("static_overhead_bytes"));

  const Field stages = root.at("stages");
  stages.require_array();
  if (stages.size() == 0) stages.fail("must list at least one stage");
  if (stages.size() > static_cast<std::size_t>(sim::kMaxStages))
    stages.fail(fmt::format("at most {} stages, got {}", sim::kMaxStages, stages.size()));
  for (std::size_t i = 0; i < stages.size(); ++i) {
    const Field st = stages.at(i);
    st.require_object();
    st.check_keys({"embedding", "layers", "head"}, "a stage");
    StageDescription::Stage s;
    s.layers = st.has("layers") ? st.at("layers").int_in(0, 100000) : 0;
    s.embedding = st.has("embedding") && st.at("embedding").boolean();
    s.head = st.has("head") && st.at("head").boolean();
    if (s.embedding && i != 0) st.at("embedding").fail("only the first stage can hold the embedding");
    if (s.head && i + 1 != stages.size()) st.at("head").fail("only the last stage can hold the head");
    if (s.layers == 0 && !s.embedding && !s.head) st.fail("a stage needs at least one layer, an embedding or a head");
    if ((s.embedding || s.head) && d.vocabulary == 0)
      root.fail(fmt::format("vocabulary: missing (stages[{}] has an {})", i, s.embedding ? "embedding" : "head"));
    d.stages.push_back(s);
  }
  return d;
}

StageDescription load_stage_description(const std::filesystem::path& path) {
  return parse_stage_description(read_json_file(path), path.string());
}

LayerShape layer_shape(const StageDescription& d, LayerKind kind, int micro_batch_size) {
  const std::uint64_t h = static_cast<std::uint64_t>(d.hidden), f = static_cast<std::uint64_t>(d.ffn_hidden);
  const std::uint64_t s = static_cast<std::uint64_t>(d.sequence_length), V = static_cast<std::uint64_t>(d.vocabulary);
  const std::uint64_t tokens = static_cast<std::uint64_t>(micro_batch_size) * s;
  const std::uint64_t e = dtype_bytes(d.dtype);
  LayerShape out;
  switch (kind) {
    case LayerKind::embedding:
      out.parameters = V * h + s * h;
      out.output_bytes = tokens * h * e;
      break;
    case LayerKind::transformer:
      // QKV (h x 3h + 3h), output projection (h x h + h), MLP (h x f + f, f x h + h),
      // two LayerNorms (2h each).
      out.parameters = 3 * h * h + 3 * h + h * h + h + h * f + f + f * h + h + 4 * h;
      out.output_bytes = tokens * h * e;
      break;
    case LayerKind::head:
      out.parameters = 2 * h + h * V;  // final LayerNorm, LM head (no bias)
      out.output_bytes = 0;           // the loss stays on the device
      break;
  }
  return out;
}

}  // namespace adagrouper::calib
