// make_plan: checks the options and runs its steps; what a candidate is and how one is evaluated.
//
// The steps (plan_steps.h): the memory-limit curve, the baselines and the selection
// (Ada-Grouper, "memory-limit curve"; docs/model.md section 11).
#include <algorithm>

#include <fmt/format.h>

#include "plan_steps.h"
#include "planner.h"

namespace adagrouper::planner {

std::string to_string(Status s) {
  switch (s) {
    case Status::Chosen: return "chosen";
    case Status::Lost: return "lost";
    case Status::Pruned: return "pruned";
    case Status::Infeasible: return "infeasible";
  }
  return "?";
}

double Candidate::peak_model_memory() const {
  return model_memory.empty() ? 0.0 : *std::max_element(model_memory.begin(), model_memory.end());
}

int Candidate::peak_stage() const {
  return static_cast<int>(std::max_element(model_memory.begin(), model_memory.end()) - model_memory.begin());
}

double PlanResult::speedup_over_1f1b() const {
  if (!one_f_one_b) return 0.0;
  return candidates[*one_f_one_b].predicted_iteration_time_s / candidates[chosen].predicted_iteration_time_s;
}

namespace plan_steps {

Candidate describe(const PlanContext& cx, const sim::ScheduleSpec& spec, int b, bool baseline) {
  Candidate c;
  c.spec = spec;
  c.micro_batch_size = b;
  c.micro_batches = cx.options.global_batch_size / b;
  const sim::Schedule sch = sim::make_schedule(spec, cx.pipeline.num_stages(), c.micro_batches);
  c.k = sch.k;
  c.baseline = baseline;
  c.model_memory = memory_model(cx.pipeline.at(b), sch, cx.network);
  return c;
}

bool fits(const PlanContext& cx, const Candidate& c) {
  return c.peak_model_memory() <= cx.options.memory_limit_bytes;
}

void evaluate(const PlanContext& cx, Candidate& c) {
  sim::Scenario sc = sim::make_scenario(cx.pipeline, cx.network,
                                        sim::make_schedule(c.spec, cx.pipeline.num_stages(), c.micro_batches),
                                        c.micro_batch_size, cx.options.eval_iterations);
  sc.start_time_s = cx.options.eval_start_s;
  const sim::SimResult r = sim::simulate(sc);
  c.evaluated = true;
  c.predicted_iteration_time_s = r.mean_iteration_time_s();
  c.throughput_samples_per_s = r.throughput_samples_per_s();
  c.simulated_memory.clear();
  for (const auto& st : r.stages) c.simulated_memory.push_back(st.peak_memory_bytes);
}

std::string gib_text(double bytes) { return fmt::format("{:.2f} GiB", bytes / (1024.0 * 1024.0 * 1024.0)); }

}  // namespace plan_steps

namespace {

void check_options(const sim::Pipeline& pipeline, const PlanOptions& options) {
  const int B = options.global_batch_size;
  if (B < 1) throw InputError(fmt::format("--global-batch-size: must be >= 1, got {}", B));
  if (!(options.memory_limit_bytes > 0))
    throw InputError(fmt::format("{}: memory_limit_bytes: missing; give it in the pipeline file or with --memory-limit",
                                 pipeline.source));
  if (options.eval_iterations < 1)
    throw InputError(fmt::format("--eval-iterations: must be >= 1, got {}", options.eval_iterations));
}

// The micro-batch sizes that divide B inside the range every stage's profile covers.
std::vector<int> micro_batch_sizes(const sim::Pipeline& pipeline, int B) {
  std::vector<int> sizes;
  for (int b = pipeline.min_micro_batch_size(); b <= pipeline.max_micro_batch_size(); ++b)
    if (B % b == 0) sizes.push_back(b);
  if (sizes.empty())
    throw InputError(fmt::format(
        "{}: stages[].profile: no micro-batch size in {}..{} (the range every stage's profile covers) divides "
        "the global batch {}",
        pipeline.source, pipeline.min_micro_batch_size(), pipeline.max_micro_batch_size(), B));
  return sizes;
}

}  // namespace

PlanResult make_plan(const sim::Pipeline& pipeline, const sim::Network& network, const PlanOptions& options) {
  check_options(pipeline, options);
  PlanResult res;
  res.pipeline = pipeline;
  res.pipeline.global_batch_size = options.global_batch_size;
  res.pipeline.memory_limit_bytes = options.memory_limit_bytes;
  res.network = network;
  res.options = options;
  const plan_steps::PlanContext cx{res.pipeline, res.network, res.options,
                                   micro_batch_sizes(pipeline, options.global_batch_size)};
  plan_steps::add_curve(cx, res.candidates);
  plan_steps::add_baselines(cx, res.candidates);
  plan_steps::choose(cx, res);
  const Candidate& win = res.candidates[res.chosen];
  res.chosen_schedule = sim::make_schedule(win.spec, pipeline.num_stages(), win.micro_batches);
  res.chosen_stages = res.pipeline.at(win.micro_batch_size);
  return res;
}

}  // namespace adagrouper::planner
