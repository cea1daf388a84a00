// A plan file's candidate read back: the pipeline the plan evaluated, and the order the
// plan would record for a candidate with dynamic W fill.
#include <filesystem>
#include <string_view>
#include <utility>
#include <vector>

#include <fmt/format.h>

#include "compare.h"
#include "json_util.h"
#include "partition.h"
#include "planner.h"

namespace adagrouper::planner {

sim::Pipeline planned_pipeline(const Field& plan, std::string& source, std::string_view remedy) {
  const auto input = [&](std::string_view role) {
    std::string path = sim::plan_input_path(plan, role);
    if (!path.empty() && !std::filesystem::exists(path))
      throw InputError(fmt::format("{}: inputs: the {} {} is not there (from here or beside the plan); {}", plan.file(),
                                   role, path, remedy));
    return path;
  };
  source = input("pipeline");
  if (!source.empty()) return sim::load_pipeline(source);
  const std::string model = input("model");
  if (model.empty() || !plan.has("partition"))
    plan.fail(fmt::format("has no pipeline or model among its inputs (no durations); {}", remedy));
  const int stages = plan.at("stages").int_in(1, sim::kMaxStages);
  const int global_batch_size = plan.at("global_batch_size").int_in(1, sim::kMaxBatchSize);
  double memory_limit_bytes = 0.0;
  if (plan.has("memory_limit_bytes") && !plan.at("memory_limit_bytes").json().is_null())
    memory_limit_bytes = plan.at("memory_limit_bytes").positive();
  const Field bounds_field = plan.at("partition").at("bounds");
  bounds_field.require_array();
  const Model m = load_model(model);
  if (bounds_field.size() < static_cast<std::size_t>(stages) + 1)
    bounds_field.fail(fmt::format("has {} entries, the plan's {} stages need at least {}", bounds_field.size(), stages,
                                  stages + 1));
  // 0 = b_0 < b_1 < ... < b_J = the model's layers: every model stage holds at least one layer.
  std::vector<int> bounds;
  const std::size_t last = bounds_field.size() - 1;
  for (std::size_t i = 0; i <= last; ++i) {
    const int b = bounds_field.at(i).int_in(0, m.num_layers());
    if ((i == 0 && b != 0) || (i == last && b != m.num_layers()) || (i > 0 && b <= bounds.back()))
      bounds_field.at(i).fail(fmt::format("bounds must rise from 0 to the model's {} layers", m.num_layers()));
    bounds.push_back(b);
  }
  source = fmt::format("{} cut at {}", model, bounds_field.json().dump());
  return pipeline_of(m, bounds, global_batch_size, memory_limit_bytes);
}

sim::Schedule planned_order(const sim::PlannedRun& run, const Field& plan, const sim::NetworkSpec& network_input,
                            sim::Schedule schedule) {
  if (schedule.spec.w_fill != sim::WFill::Dynamic) return schedule;
  std::string source;
  sim::Pipeline pipeline = planned_pipeline(plan, source,
                                            "the order of this candidate's W ops (dynamic W fill) is made on it: run "
                                            "from where the plan was made, or run the chosen candidate");
  pipeline.global_batch_size = run.global_batch_size;
  const int model_stages = run.stages * run.spec.virtual_stages;
  if (pipeline.num_stages() < model_stages || pipeline.num_stages() % model_stages != 0)
    throw InputError(fmt::format("{}: inputs: the pipeline {} has {} model stages, not a multiple of the {} the "
                                 "candidate runs",
                                 plan.file(), source, pipeline.num_stages(), model_stages));
  if (pipeline.num_stages() != model_stages) pipeline = merge_model_stages(pipeline, model_stages);
  sim::Network network = network_input.bind(run.stages);
  network.set_measured_rates(run.measured_rates);
  sim::Scenario evaluation =
      sim::make_scenario(pipeline, std::move(network), std::move(schedule), run.micro_batch_size, run.iterations);
  evaluation.start_time_s = run.start_time_s;
  return deployed_schedule(evaluation);
}

}  // namespace adagrouper::planner
