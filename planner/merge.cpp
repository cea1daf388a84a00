// Model stages merged into fewer (consecutive groups on one device), and a pipeline
// written back as a pipeline file.
//
// docs/model.md section 11, "Devices and model stages".
#include <algorithm>
#include <set>

#include <fmt/format.h>

#include "planner.h"

namespace adagrouper::planner {

namespace {

// The sizes at which a group of stages is measured: every size a part lists within the
// range all of them cover, and that range's ends.
std::vector<int> merged_sizes(const std::vector<sim::StageSpec>& parts) {
  int lo = 0, hi = parts.front().profile.back().micro_batch_size;
  for (const auto& st : parts) {
    lo = std::max(lo, st.profile.front().micro_batch_size);
    hi = std::min(hi, st.profile.back().micro_batch_size);
  }
  std::set<int> sizes{lo, hi};
  for (const auto& st : parts)
    for (const auto& pt : st.profile)
      if (pt.micro_batch_size >= lo && pt.micro_batch_size <= hi) sizes.insert(pt.micro_batch_size);
  return {sizes.begin(), sizes.end()};
}

// Stages first..last of `p` at size b, with Pipeline::at's interpolation and without op
// overhead, so that the merged values are exactly the sums of the profiles. A copy of the first part in
// front and of the last behind give the messages at the group's ends (the last part's
// output and the first part's gradient, when the file lists one).
std::vector<sim::StageParams> group_at(const sim::Pipeline& p, int first, int last, int b) {
  sim::Pipeline window;
  window.name = p.name;
  window.source = p.source;
  window.global_batch_size = b;
  window.stages.push_back(p.stages[first]);
  window.stages.insert(window.stages.end(), p.stages.begin() + first, p.stages.begin() + last + 1);
  window.stages.push_back(p.stages[last]);
  const std::vector<sim::StageParams> all = window.without_op_overhead().at(b);  // the merged stage pays it once
  return {all.begin() + 1, all.end() - 1};
}

sim::StageSpec merge_group(const sim::Pipeline& p, int first, int last) {
  const std::vector<sim::StageSpec> parts(p.stages.begin() + first, p.stages.begin() + last + 1);
  sim::StageSpec merged;
  for (const auto& st : parts) {
    merged.static_bytes += st.static_bytes;
    merged.optimizer_s += st.optimizer_s;
    merged.op_overhead_s += st.op_overhead_s / static_cast<double>(parts.size());
  }
  for (const int b : merged_sizes(parts)) {
    const std::vector<sim::StageParams> at = group_at(p, first, last, b);
    sim::ProfilePoint pt;
    pt.micro_batch_size = b;
    double input = 0, weight = 0, wgrad = 0;
    for (const sim::StageParams& x : at) {
      pt.forward_s += x.fwd;
      pt.backward_s += x.bwd;
      input += x.bwd_input;
      weight += x.bwd_weight;
      pt.activation_bytes += x.act;
      wgrad += x.wgrad;
    }
    pt.backward_input_s = input;
    pt.backward_weight_s = weight;
    pt.weight_grad_bytes = std::min(wgrad, pt.activation_bytes);
    pt.output_bytes = at.back().out;
    if (parts.front().profile.front().grad_output_bytes) pt.grad_output_bytes = at.front().gout;
    merged.profile.push_back(pt);
  }
  return merged;
}

}  // namespace

sim::Pipeline merge_model_stages(const sim::Pipeline& p, int model_stages) {
  const int J = p.num_stages();
  if (model_stages < 1 || J % model_stages != 0)
    throw InputError(fmt::format("--devices: the {} model stages of {} cannot be merged into {} model stages ({} is "
                                 "not a multiple of it)",
                                 J, p.source, model_stages, J));
  if (model_stages == J) return p;
  const int group = J / model_stages;
  sim::Pipeline merged = p;
  merged.stages.clear();
  for (int g = 0; g < model_stages; ++g) merged.stages.push_back(merge_group(p, g * group, (g + 1) * group - 1));
  return merged;
}

nlohmann::ordered_json pipeline_file_json(const sim::Pipeline& p) {
  nlohmann::ordered_json j;
  j["name"] = p.name;
  j["global_batch_size"] = p.global_batch_size;
  if (p.memory_limit_bytes) j["memory_limit_bytes"] = *p.memory_limit_bytes;
  auto& stages = j["stages"] = nlohmann::ordered_json::array();
  for (const sim::StageSpec& st : p.stages) {
    nlohmann::ordered_json sj;
    sj["static_bytes"] = st.static_bytes;
    sj["optimizer_s"] = st.optimizer_s;
    if (st.op_overhead_s > 0) sj["op_overhead_s"] = st.op_overhead_s;
    auto& prof = sj["profile"] = nlohmann::ordered_json::array();
    for (const sim::ProfilePoint& pt : st.profile) prof.push_back(sim::profile_point_json(pt));
    stages.push_back(std::move(sj));
  }
  return j;
}

}  // namespace adagrouper::planner
