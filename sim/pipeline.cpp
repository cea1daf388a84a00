#include "pipeline.h"

#include <algorithm>
#include <string_view>

#include <fmt/format.h>

#include "json_util.h"
#include "rate_forms.h"

namespace adagrouper::sim {

namespace {

// A size in bytes, or with a unit ("40GiB").
double read_bytes(const Field& f) {
  return f.number_in(Quantity::size, 0, kMaxBytes, "the largest byte count an input may give");
}

// backward_input_s, backward_weight_s and weight_grad_bytes of one profile entry
// (docs/model.md §14): each at most what it may be.
void read_split_backward(const Field& e, ProfilePoint& pt) {
  for (const char* key : {"backward_input_s", "backward_weight_s"}) {
    if (!e.has(key)) continue;
    const double v = read_time(e.at(key));
    if (v > pt.backward_s && !(e.has("backward_input_s") && e.has("backward_weight_s")))
      e.at(key).fail(fmt::format("must be <= backward_s {} (the other half is backward_s minus it)", pt.backward_s));
    (std::string_view(key) == "backward_input_s" ? pt.backward_input_s : pt.backward_weight_s) = v;
  }
  if (e.has("weight_grad_bytes")) {
    pt.weight_grad_bytes = read_bytes(e.at("weight_grad_bytes"));
    if (*pt.weight_grad_bytes > pt.activation_bytes)
      e.at("weight_grad_bytes")
          .fail(fmt::format("must be <= activation_bytes {} (W keeps a part of the activations)",
                            pt.activation_bytes));
  }
}

ProfilePoint read_point(const Field& e, bool last) {
  e.require_object();
  e.check_keys({"micro_batch_size", "forward_s", "backward_s", "activation_bytes", "output_bytes",
                "grad_output_bytes", "backward_input_s", "backward_weight_s", "weight_grad_bytes"},
               "a profile entry");
  ProfilePoint pt;
  pt.micro_batch_size = e.at("micro_batch_size").int_in(1, kMaxBatchSize);
  pt.forward_s = read_time(e.at("forward_s"));
  pt.backward_s = read_time(e.at("backward_s"));
  pt.activation_bytes = read_bytes(e.at("activation_bytes"));
  pt.output_bytes = e.has("output_bytes") ? read_bytes(e.at("output_bytes")) : 0.0;
  if (!last && !e.has("output_bytes")) e.at("output_bytes");  // required: reports the field
  if (e.has("grad_output_bytes")) pt.grad_output_bytes = read_bytes(e.at("grad_output_bytes"));
  read_split_backward(e, pt);
  return pt;
}

StageSpec read_stage(const Field& st, bool last) {
  st.require_object();
  // layers and layer_names: what `partition` cut into the stage (informational).
  st.check_keys({"static_bytes", "optimizer_s", "op_overhead_s", "profile", "layers", "layer_names"}, "a stage");
  StageSpec spec;
  if (st.has("static_bytes")) spec.static_bytes = read_bytes(st.at("static_bytes"));
  if (st.has("optimizer_s")) spec.optimizer_s = read_time(st.at("optimizer_s"));
  if (st.has("op_overhead_s")) spec.op_overhead_s = read_time(st.at("op_overhead_s"));
  Field prof = st.at("profile");
  if (prof.size() == 0) prof.fail("empty profile: list at least one micro-batch size");
  std::size_t with_grad = 0;
  for (std::size_t i = 0; i < prof.size(); ++i) {
    const Field e = prof.at(i);
    const ProfilePoint pt = read_point(e, last);
    with_grad += pt.grad_output_bytes.has_value();
    if (!spec.profile.empty() && pt.micro_batch_size <= spec.profile.back().micro_batch_size)
      e.at("micro_batch_size").fail("profile entries must have strictly increasing micro_batch_size");
    spec.profile.push_back(pt);
  }
  if (with_grad != 0 && with_grad != spec.profile.size())
    prof.fail("grad_output_bytes must be given on every entry or on none");
  return spec;
}

}  // namespace

double ProfilePoint::input_s() const {
  if (backward_input_s) return *backward_input_s;
  return backward_weight_s ? backward_s - *backward_weight_s : backward_s / 2;
}

double ProfilePoint::weight_s() const {
  if (backward_weight_s) return *backward_weight_s;
  return backward_input_s ? backward_s - *backward_input_s : backward_s / 2;
}

Pipeline load_pipeline(const std::filesystem::path& path) {
  return parse_pipeline(read_json_file(path), path.string());
}

Pipeline parse_pipeline(const nlohmann::json& doc, const std::string& source) {
  Field root(doc, source);
  root.require_object();
  // partition: how `partition` cut the model (informational).
  root.check_keys({"name", "global_batch_size", "memory_limit_bytes", "stages", "partition"}, "a pipeline");
  Pipeline p;
  p.source = source;
  p.name = utf8_safe(root.has("name") ? root.at("name").string() : std::filesystem::path(source).stem().string());
  p.global_batch_size = root.at("global_batch_size").int_in(1, kMaxBatchSize);
  if (root.has("memory_limit_bytes")) {
    p.memory_limit_bytes = read_bytes(root.at("memory_limit_bytes"));
    if (!(*p.memory_limit_bytes > 0)) root.at("memory_limit_bytes").positive(Quantity::size);  // reports "must be > 0"
  }
  Field stages = root.at("stages");
  if (stages.size() == 0) stages.fail("must list at least one stage");
  if (stages.size() > static_cast<std::size_t>(kMaxStages))
    stages.fail(fmt::format("lists {} stages, more than the {} a pipeline may have", stages.size(), kMaxStages));
  for (std::size_t s = 0; s < stages.size(); ++s) p.stages.push_back(read_stage(stages.at(s), s + 1 == stages.size()));
  return p;
}

int Pipeline::min_micro_batch_size() const {
  int lo = 0;
  for (const auto& s : stages) lo = std::max(lo, s.profile.front().micro_batch_size);
  return lo;
}

int Pipeline::max_micro_batch_size() const {
  int hi = stages.empty() ? 0 : stages[0].profile.back().micro_batch_size;
  for (const auto& s : stages) hi = std::min(hi, s.profile.back().micro_batch_size);
  return hi;
}

Pipeline Pipeline::without_op_overhead() const {
  Pipeline p = *this;
  for (StageSpec& st : p.stages) st.op_overhead_s = 0;
  return p;
}

namespace {
struct Interp {
  const ProfilePoint* lo;
  const ProfilePoint* hi;
  double w;  // weight of hi
  double operator()(double ProfilePoint::*field) const { return lo->*field + w * (hi->*field - lo->*field); }
  double of(double (ProfilePoint::*value)() const) const {
    return (lo->*value)() + w * ((hi->*value)() - (lo->*value)());
  }
};

Interp locate(const StageSpec& spec, int b) {
  const auto& pr = spec.profile;
  auto it = std::lower_bound(pr.begin(), pr.end(), b,
                             [](const ProfilePoint& p, int v) { return p.micro_batch_size < v; });
  if (it->micro_batch_size == b) return {&*it, &*it, 0.0};
  const ProfilePoint* hi = &*it;
  const ProfilePoint* lo = &*(it - 1);
  double w = double(b - lo->micro_batch_size) / double(hi->micro_batch_size - lo->micro_batch_size);
  return {lo, hi, w};
}
}  // namespace

std::vector<StageParams> Pipeline::at(int b, const std::string& what) const {
  if (b < 1) throw InputError(fmt::format("{}: micro-batch size must be >= 1, got {}", what, b));
  if (global_batch_size % b != 0)
    throw InputError(fmt::format("{}: micro-batch size {} does not divide global_batch_size {} of {}",
                                 what, b, global_batch_size, source));
  const int S = num_stages();
  const long long M = global_batch_size / b, ops = 2 * M * S;
  if (ops > kMaxOps)
    throw InputError(fmt::format("{}: micro-batch size {} gives M = {} micro-batches on {} stages, {} ops an iteration, "
                                 "about {:.1f} GiB of memory at {:.0f} bytes an op: more than the {} ops a run may "
                                 "hold",
                                 what, b, M, S, ops, ops * kBytesPerOp / (1 << 30), kBytesPerOp, kMaxOps));
  std::vector<StageParams> out(S);
  for (int s = 0; s < S; ++s) {
    const auto& pr = stages[s].profile;
    if (b < pr.front().micro_batch_size || b > pr.back().micro_batch_size)
      throw InputError(fmt::format(
          "{}: micro-batch size {} is outside the profile of stage {} in {} (stages[{}].profile covers {}..{})",
          what, b, s, source, s, pr.front().micro_batch_size, pr.back().micro_batch_size));
    Interp in = locate(stages[s], b);
    StageParams& p = out[s];
    p.fwd = in(&ProfilePoint::forward_s);
    p.bwd = in(&ProfilePoint::backward_s);
    p.act = in(&ProfilePoint::activation_bytes);
    p.bwd_input = in.of(&ProfilePoint::input_s);
    p.bwd_weight = in.of(&ProfilePoint::weight_s);
    const double o = stages[s].op_overhead_s;  // every op pays it, each half of a split backward too
    p.fwd += o;
    p.bwd += o;
    p.bwd_input += o;
    p.bwd_weight += o;
    p.wgrad = std::min(in.of(&ProfilePoint::weight_bytes), p.act);
    p.out = s + 1 < S ? in(&ProfilePoint::output_bytes) : 0.0;
    p.static_bytes = stages[s].static_bytes;
    p.opt = stages[s].optimizer_s;
    if (s > 0) {
      if (in.lo->grad_output_bytes) {
        p.gout = *in.lo->grad_output_bytes + in.w * (*in.hi->grad_output_bytes - *in.lo->grad_output_bytes);
      } else {
        p.gout = out[s - 1].out;  // default: what the previous stage sent forward
      }
    }
  }
  return out;
}

nlohmann::ordered_json profile_point_json(const ProfilePoint& pt, bool with_output) {
  nlohmann::ordered_json e;
  e["micro_batch_size"] = pt.micro_batch_size;
  e["forward_s"] = pt.forward_s;
  e["backward_s"] = pt.backward_s;
  e["activation_bytes"] = pt.activation_bytes;
  if (with_output) e["output_bytes"] = pt.output_bytes;
  if (pt.grad_output_bytes) e["grad_output_bytes"] = *pt.grad_output_bytes;
  if (pt.backward_input_s) e["backward_input_s"] = *pt.backward_input_s;
  if (pt.backward_weight_s) e["backward_weight_s"] = *pt.backward_weight_s;
  if (pt.weight_grad_bytes) e["weight_grad_bytes"] = *pt.weight_grad_bytes;
  return e;
}

}  // namespace adagrouper::sim
