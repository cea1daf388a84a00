// make_plan: checks the options and runs its steps; what a candidate is and how one is evaluated.
//
// The steps (plan_steps.h): the memory-limit curve, the baselines and the selection
// (Ada-Grouper, "memory-limit curve"; docs/model.md section 11).
#include <algorithm>
#include <utility>

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
    case Status::Refused: return "refused";
  }
  return "?";
}

double Candidate::peak_model_memory() const {
  return model_memory.empty() ? 0.0 : *std::max_element(model_memory.begin(), model_memory.end());
}

int Candidate::peak_stage() const {
  return static_cast<int>(std::max_element(model_memory.begin(), model_memory.end()) - model_memory.begin());
}

double Candidate::ranked_time_s(RankBy rank_by) const {
  return rank_by == RankBy::Deployed ? deployed_iteration_time_s.value_or(predicted_iteration_time_s)
                                     : predicted_iteration_time_s;
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
  const sim::Schedule sch = sim::make_schedule(spec, cx.devices, c.micro_batches);
  c.k = sch.k;
  c.baseline = baseline;
  c.model_memory = memory_model(cx.pipeline_for(spec.virtual_stages).at(b), sch, cx.network);
  return c;
}

bool fits(const PlanContext& cx, const Candidate& c) {
  return c.peak_model_memory() <= cx.options.memory_limit_bytes;
}

namespace {

sim::Schedule fixed_first_order(const sim::ScheduleSpec& spec, int D, int M, std::vector<std::vector<sim::Op>> order) {
  return sim::fixed_order_schedule(spec, D, M, std::move(order), "the order dynamic W fill executed");
}

sim::SimResult simulate_schedule(const PlanContext& cx, const Candidate& c, sim::Schedule schedule,
                                 const sim::SimOptions& options) {
  return sim::simulate(candidate_scenario(cx, c, std::move(schedule)), options);
}

}  // namespace

sim::Scenario candidate_scenario(const PlanContext& cx, const Candidate& c, sim::Schedule schedule) {
  sim::Scenario sc = sim::make_scenario(cx.pipeline_for(c.virtual_stages()), cx.network, std::move(schedule),
                                        c.micro_batch_size, cx.options.eval_iterations);
  sc.start_time_s = cx.options.eval_start_s;
  return sc;
}

sim::SimResult simulate_candidate(const PlanContext& cx, const Candidate& c, const sim::SimOptions& options) {
  return simulate_schedule(cx, c, sim::make_schedule(c.spec, cx.devices, c.micro_batches), options);
}

void evaluate(const PlanContext& cx, Candidate& c) {
  const bool dynamic = c.spec.w_fill == sim::WFill::Dynamic;
  sim::SimResult r = simulate_candidate(cx, c, {.record_order = dynamic});
  c.evaluated = true;
  c.predicted_iteration_time_s = r.mean_iteration_time_s();
  c.throughput_samples_per_s = r.throughput_samples_per_s();
  c.simulated_memory.clear();
  for (const auto& st : r.stages) c.simulated_memory.push_back(st.peak_memory_bytes);
  if (!dynamic) return;
  // Where every iteration ran the first one's order, the fixed order is the same run.
  const auto& runs = r.executed;
  if (std::all_of(runs.begin() + 1, runs.end(), [&](const auto& order) { return order == runs.front(); })) {
    c.deployed_iteration_time_s = c.predicted_iteration_time_s;
    return;
  }
  sim::Schedule deployed = fixed_first_order(c.spec, cx.devices, c.micro_batches, std::move(r.executed.front()));
  c.deployed_iteration_time_s = simulate_schedule(cx, c, std::move(deployed), {}).mean_iteration_time_s();
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
  // The smallest size has the most micro-batches: refuse a run too large to hold before
  // evaluating any candidate (as Pipeline::at would, only later).
  sim::Pipeline at_b = pipeline;
  at_b.global_batch_size = B;
  (void)at_b.at(sizes.front(), fmt::format("--global-batch-size {}", B));
  return sizes;
}

}  // namespace

namespace {

// D, and the v considered with the pipeline merged for each.
void place(plan_steps::PlanContext& cx, const sim::Network& network) {
  const sim::Pipeline& p = cx.pipeline;
  const int J = p.num_stages(), D = cx.options.devices > 0 ? cx.options.devices : J;
  if (cx.options.devices < 0 || J % D != 0)
    throw InputError(fmt::format("--devices: {} has {} model stages, which is not a multiple of {} devices", p.source,
                                 J, cx.options.devices));
  if (network.num_stages() != D)
    throw InputError(fmt::format("{}: describes {} stages, the plan runs on {}", network.source,
                                 network.num_stages(), D));
  cx.devices = D;
  const int v_max = J / D;
  if (cx.options.virtual_stages.empty()) {
    for (int v = 1; v <= v_max; ++v)
      if (v_max % v == 0) cx.virtual_stages.push_back(v);
  } else {
    cx.virtual_stages = cx.options.virtual_stages;
  }
  for (const int v : cx.virtual_stages) {
    if (v < 1 || v_max % v != 0)
      throw InputError(fmt::format("--virtual-stages: {} model stages per device do not divide the {} that {} has "
                                   "on {} devices",
                                   v, v_max, p.source, D));
    cx.merged.emplace(v, merge_model_stages(p, D * v));
  }
  // The memory-limit curve and the baselines run one model stage per stage.
  if (!cx.merged.count(1)) cx.merged.emplace(1, merge_model_stages(p, D));
}

// The chosen candidate's orders as its devices run them: under dynamic W fill, where the
// evaluated run put the W ops in its first iteration.
sim::Schedule chosen_orders(const plan_steps::PlanContext& cx, const Candidate& win) {
  sim::Schedule sch = sim::make_schedule(win.spec, cx.devices, win.micro_batches);
  if (win.spec.w_fill == sim::WFill::Dynamic)
    sch.stages = deployed_schedule(plan_steps::candidate_scenario(cx, win, sch)).stages;
  return sch;
}

}  // namespace

sim::Schedule deployed_schedule(const sim::Scenario& evaluation) {
  const sim::Schedule& sch = evaluation.schedule;
  if (sch.spec.w_fill != sim::WFill::Dynamic) return sch;
  sim::SimResult r = sim::simulate(evaluation, {.record_order = true});
  return plan_steps::fixed_first_order(sch.spec, sch.num_stages(), evaluation.micro_batches(), std::move(r.executed.front()));
}

PlanResult make_plan(const sim::Pipeline& pipeline, const sim::Network& network, const PlanOptions& options) {
  check_options(pipeline, options);
  PlanResult res;
  res.pipeline = pipeline;
  res.pipeline.global_batch_size = options.global_batch_size;
  res.pipeline.memory_limit_bytes = options.memory_limit_bytes;
  res.network = network;
  res.options = options;
  plan_steps::PlanContext cx{res.pipeline, res.network, res.options,
                             micro_batch_sizes(pipeline, options.global_batch_size), 0, {}, {}};
  place(cx, network);
  res.devices = cx.devices;
  plan_steps::add_curve(cx, res.candidates);
  plan_steps::add_baselines(cx, res.candidates);
  plan_steps::add_families(cx, res.candidates);
  plan_steps::choose(cx, res);
  const Candidate& win = res.candidates[res.chosen];
  res.chosen_schedule = chosen_orders(cx, win);
  res.chosen_pipeline = cx.pipeline_for(win.virtual_stages());
  res.chosen_stages = res.chosen_pipeline.at(win.micro_batch_size);
  return res;
}

}  // namespace adagrouper::planner
