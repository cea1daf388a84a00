#include "pipeline.h"

#include <algorithm>
#include <string_view>

#include <fmt/format.h>

#include "json_util.h"

namespace adagrouper::sim {

namespace {

// backward_input_s, backward_weight_s and weight_grad_bytes of one profile entry
// (docs/model.md §14): each at most what it may be.
void read_split_backward(const Field& e, ProfilePoint& pt) {
  for (const char* key : {"backward_input_s", "backward_weight_s"}) {
    if (!e.has(key)) continue;
    const double v = e.at(key).non_negative();
    if (v > pt.backward_s && !(e.has("backward_input_s") && e.has("backward_weight_s")))
      e.at(key).fail(fmt::format("must be <= backward_s {} (the other half is backward_s minus it)", pt.backward_s));
    (std::string_view(key) == "backward_input_s" ? pt.backward_input_s : pt.backward_weight_s) = v;
  }
  if (e.has("weight_grad_bytes")) {
    pt.weight_grad_bytes = e.at("weight_grad_bytes").non_negative();
    if (*pt.weight_grad_bytes > pt.activation_bytes)
      e.at("weight_grad_bytes")
          .fail(fmt::format("must be <= activation_bytes {} (W keeps a part of the activations)",
                            pt.activation_bytes));
  }
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
  Pipeline p;
  p.source = source;
  p.name = root.has("name") ? root.at("name").string()
                            : std::filesystem::path(source).stem().string();
  p.global_batch_size = static_cast<int>(root.at("global_batch_size").integer_at_least(1));
  if (root.has("memory_limit_bytes")) p.memory_limit_bytes = root.at("memory_limit_bytes").positive();

  Field stages = root.at("stages");
  if (stages.size() == 0) stages.fail("must list at least one stage");
  for (std::size_t s = 0; s < stages.size(); ++s) {
    Field st = stages.at(s);
    st.require_object();
    StageSpec spec;
    spec.static_bytes = st.non_negative_or("static_bytes", 0.0);
    spec.optimizer_s = st.non_negative_or("optimizer_s", 0.0);
    Field prof = st.at("profile");
    if (prof.size() == 0) prof.fail("empty profile: list at least one micro-batch size");
    std::size_t with_grad = 0;
    for (std::size_t i = 0; i < prof.size(); ++i) {
      Field e = prof.at(i);
      e.require_object();
      ProfilePoint pt;
      pt.micro_batch_size = static_cast<int>(e.at("micro_batch_size").integer_at_least(1));
      pt.forward_s = e.at("forward_s").non_negative();
      pt.backward_s = e.at("backward_s").non_negative();
      pt.activation_bytes = e.at("activation_bytes").non_negative();
      const bool last = s + 1 == stages.size();
      pt.output_bytes = e.has("output_bytes") ? e.at("output_bytes").non_negative() : 0.0;
      if (!last && !e.has("output_bytes")) e.at("output_bytes");  // required: reports the field
      if (e.has("grad_output_bytes")) {
        pt.grad_output_bytes = e.at("grad_output_bytes").non_negative();
        ++with_grad;
      }
      read_split_backward(e, pt);
      if (!spec.profile.empty() && pt.micro_batch_size <= spec.profile.back().micro_batch_size)
        e.at("micro_batch_size").fail("profile entries must have strictly increasing micro_batch_size");
      spec.profile.push_back(pt);
    }
    if (with_grad != 0 && with_grad != spec.profile.size())
      prof.fail("grad_output_bytes must be given on every entry or on none");
    p.stages.push_back(std::move(spec));
  }
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

}  // namespace adagrouper::sim
