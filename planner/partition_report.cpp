// The outputs of `partition`: the pipeline file of the chosen cut, the report and the table.
//
// docs/formats.md, "What `partition` and `plan --model` write".
#include <algorithm>
#include <string>
#include <vector>

#include <fmt/format.h>
#include <fmt/ranges.h>

#include "partition.h"
#include "partition_internal.h"

namespace adagrouper::planner {

using partition_parts::kGiB;

namespace {

nlohmann::ordered_json cut_json(const CutScore& c) {
  nlohmann::ordered_json j;
  j["bounds"] = c.bounds;
  std::vector<int> per;
  for (std::size_t s = 0; s + 1 < c.bounds.size(); ++s) per.push_back(c.bounds[s + 1] - c.bounds[s]);
  j["layers_per_stage"] = per;
  j["origin"] = c.origin;
  j["predicted_iteration_time_s"] = c.predicted_s;
  if (c.simulated_s) {
    j["simulated_iteration_time_s"] = *c.simulated_s;
  } else {
    j["simulated_iteration_time_s"] = nullptr;
  }
  j["bottleneck_s"] = c.bottleneck_s;
  j["transfer_s"] = c.transfer_s;
  j["peak_memory_bytes"] = c.memory_bytes;
  return j;
}

// Stage s of the pipeline file: its layers, static bytes, optimizer time and profile.
nlohmann::ordered_json pipeline_stage_json(const PartitionResult& r, int s) {
  const auto& b = r.chosen.bounds;
  const int S = static_cast<int>(b.size()) - 1;
  const sim::StageSpec& spec = r.pipeline.stages[s];
  nlohmann::ordered_json sj;
  sj["layers"] = {b[s], b[s + 1] - 1};
  sj["layer_names"] = {r.layer_names[b[s]], r.layer_names[b[s + 1] - 1]};
  sj["static_bytes"] = spec.static_bytes;
  sj["optimizer_s"] = spec.optimizer_s;
  auto& prof = sj["profile"] = nlohmann::ordered_json::array();
  for (const sim::ProfilePoint& p : spec.profile) prof.push_back(sim::profile_point_json(p, s + 1 < S));
  return sj;
}

}  // namespace

nlohmann::ordered_json pipeline_json(const PartitionResult& r, const Model& model) {
  const auto& o = r.options;
  const auto& b = r.chosen.bounds;
  const int S = static_cast<int>(b.size()) - 1;
  nlohmann::ordered_json j;
  j["name"] = r.pipeline.name;
  std::vector<std::string> parts;
  for (int s = 0; s < S; ++s)
    parts.push_back(fmt::format("stage {}: layers {}-{} ({} .. {})", s, b[s], b[s + 1] - 1, r.layer_names[b[s]],
                                r.layer_names[b[s + 1] - 1]));
  j["description"] = fmt::format(
      "{} ({}) cut into {} stages by `adagrouper partition` at micro-batch size {} for {}: {}. Per stage: sums of "
      "the layers' times and activation bytes, static = reserved {:.3g} bytes + parameter bytes x {}, messages from "
      "the layer at each cut (docs/model.md, 'Stage partitioning').",
      model.name, model.source_file, S, o.micro_batch_size, o.schedule.prose(), fmt::join(parts, "; "),
      model.device.reserved_bytes, 1.0 + model.optimizer_bytes_per_parameter_byte);
  j["global_batch_size"] = r.pipeline.global_batch_size;
  j["memory_limit_bytes"] = *r.pipeline.memory_limit_bytes;
  nlohmann::ordered_json part;
  part["model"] = model.source_file;
  part["micro_batch_size"] = o.micro_batch_size;
  part["schedule"] = o.schedule.family;
  if (o.schedule.k) part["k"] = *o.schedule.k;
  part["bounds"] = b;
  part["predicted_iteration_time_s"] = r.chosen.predicted_s;
  if (r.chosen.simulated_s) part["simulated_iteration_time_s"] = *r.chosen.simulated_s;
  j["partition"] = std::move(part);
  auto& st = j["stages"] = nlohmann::ordered_json::array();
  for (int s = 0; s < S; ++s) st.push_back(pipeline_stage_json(r, s));
  return j;
}

nlohmann::ordered_json partition_json(const PartitionResult& r) {
  const auto& o = r.options;
  nlohmann::ordered_json j;
  j["schema"] = "adagrouper.partition/1";
  j["model"] = r.model_name;
  j["layers"] = r.layer_names.size();
  j["stages"] = r.chosen.bounds.size() - 1;
  j["micro_batch_size"] = o.micro_batch_size;
  j["micro_batches"] = o.global_batch_size / o.micro_batch_size;
  j["global_batch_size"] = o.global_batch_size;
  j["schedule"] = o.schedule.family;
  j["k"] = o.schedule.k ? nlohmann::ordered_json(*o.schedule.k) : nlohmann::ordered_json(nullptr);
  j["memory_limit_bytes"] = o.memory_limit_bytes;
  j["evaluation"] = {{"iterations", o.eval_iterations}, {"start_time_s", o.eval_start_s}, {"refine", o.refine}};
  nlohmann::ordered_json chosen = cut_json(r.chosen);
  auto& st = chosen["stages"] = nlohmann::ordered_json::array();
  const auto& b = r.chosen.bounds;
  for (std::size_t s = 0; s < r.stages.size(); ++s) {
    const sim::StageParams& p = r.stages[s];
    nlohmann::ordered_json sj;
    sj["stage"] = s;
    sj["first_layer"] = b[s];
    sj["last_layer"] = b[s + 1] - 1;
    sj["first_name"] = r.layer_names[b[s]];
    sj["last_name"] = r.layer_names[b[s + 1] - 1];
    sj["forward_s"] = p.fwd;
    sj["backward_s"] = p.bwd;
    sj["activation_bytes"] = p.act;
    sj["static_bytes"] = p.static_bytes;
    sj["optimizer_s"] = p.opt;
    sj["peak_memory_bytes"] = r.chosen.memory_bytes[s];
    sj["output_bytes"] = p.out;
    sj["grad_output_bytes"] = p.gout;
    st.push_back(std::move(sj));
  }
  j["chosen"] = std::move(chosen);
  j["dp_optimum_bounds"] = r.candidates[r.dp_index].bounds;
  auto& cs = j["candidates"] = nlohmann::ordered_json::array();
  for (const auto& c : r.candidates) cs.push_back(cut_json(c));
  return j;
}

std::string partition_text(const PartitionResult& r) {
  const auto& o = r.options;
  const auto& b = r.chosen.bounds;
  const int S = static_cast<int>(b.size()) - 1;
  const int M = o.global_batch_size / o.micro_batch_size;
  std::string out = fmt::format(
      "{}: {} layers into {} stage{} at b = {} (M = {}, B = {}), {}, memory limit {:.2f} GiB per stage\n", r.model_name,
      r.layer_names.size(), S, S == 1 ? "" : "s", o.micro_batch_size, M, o.global_batch_size, o.schedule.prose(),
      o.memory_limit_bytes / kGiB);
  std::size_t name_w = 12;
  for (int s = 0; s < S; ++s)
    name_w = std::max(name_w, r.layer_names[b[s]].size() + r.layer_names[b[s + 1] - 1].size() + 4);
  out += fmt::format("  {:>5}  {:>7}  {:<{}}  {:>9}  {:>9}  {:>11}  {:>10}  {:>9}\n", "stage", "layers", "first .. last",
                     name_w, "fwd s", "bwd s", "memory", "static", "message");
  int slowest = 0;
  for (int s = 0; s < S; ++s) {
    const sim::StageParams& p = r.stages[s];
    if (p.fwd + p.bwd > r.stages[slowest].fwd + r.stages[slowest].bwd) slowest = s;
    const std::string names = fmt::format("{} .. {}", r.layer_names[b[s]], r.layer_names[b[s + 1] - 1]);
    out += fmt::format("  {:>5}  {:>7}  {:<{}}  {:>9.4g}  {:>9.4g}  {:>7.2f} GiB  {:>6.2f} GiB  {:>6.2f} MB\n", s,
                       fmt::format("{}-{}", b[s], b[s + 1] - 1), names, name_w, p.fwd, p.bwd,
                       r.chosen.memory_bytes[s] / kGiB, p.static_bytes / kGiB, (s + 1 < S ? p.out : 0.0) / 1e6);
  }
  out += fmt::format(
      "latency model: {:.6g} s per iteration (slowest stage {}: {:.4g} s per micro-batch; bottleneck {:.4g} s; "
      "transfers {:.4g} s)\n",
      r.chosen.predicted_s, slowest, r.stages[slowest].fwd + r.stages[slowest].bwd, r.chosen.bottleneck_s,
      r.chosen.transfer_s);
  const std::size_t simulated =
      std::count_if(r.candidates.begin(), r.candidates.end(), [](const CutScore& c) { return c.simulated_s.has_value(); });
  if (r.chosen.simulated_s) {
    const CutScore& dp = r.candidates[r.dp_index];
    std::string vs = r.dp_index == 0 ? std::string("the DP optimum")
                                     : fmt::format("{}; the DP optimum {} simulates {:.6g} s", r.chosen.origin,
                                                   fmt::join(dp.bounds, ","),
                                                   dp.simulated_s ? *dp.simulated_s : dp.predicted_s);
    out += fmt::format("simulated ({}, {} iteration{}): {:.6g} s per iteration; {} cut{} simulated, chosen: {}\n",
                       o.schedule.prose(), o.eval_iterations, o.eval_iterations == 1 ? "" : "s", *r.chosen.simulated_s,
                       simulated, simulated == 1 ? "" : "s", vs);
  } else {
    out += "not simulated (--refine 0): the DP optimum\n";
  }
  return out;
}

}  // namespace adagrouper::planner
