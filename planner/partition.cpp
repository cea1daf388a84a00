// partition(): the DP's cuts, their refinement with the simulator, and the pipeline of a cut.
//
// docs/model.md section 12.
#include <algorithm>
#include <optional>
#include <set>
#include <string>
#include <utility>

#include <fmt/format.h>

#include "partition.h"
#include "partition_internal.h"

namespace adagrouper::planner {

using partition_parts::kGiB;
using partition_parts::kInf;

sim::Pipeline pipeline_of(const Model& model, const std::vector<int>& bounds, int global_batch_size,
                          double memory_limit_bytes) {
  sim::Pipeline p;
  const int S = static_cast<int>(bounds.size()) - 1;
  p.name = fmt::format("{}-{}stage", model.name, S);
  p.source = fmt::format("{} cut into {} stages", model.source_file, S);
  p.global_batch_size = global_batch_size;
  p.memory_limit_bytes = memory_limit_bytes;
  const std::vector<int> sizes = model.micro_batch_sizes();
  const double ratio = 1.0 + model.optimizer_bytes_per_parameter_byte;
  for (int s = 0; s < S; ++s) {
    const int lo = bounds[s], hi = bounds[s + 1];
    sim::StageSpec st;
    st.static_bytes = model.device.reserved_bytes;
    for (int l = lo; l < hi; ++l) {
      st.static_bytes += model.layers[l].parameter_bytes * ratio;
      st.optimizer_s += model.layers[l].optimizer_s;
    }
    for (int b : sizes) {
      sim::ProfilePoint pt;
      pt.micro_batch_size = b;
      for (int l = lo; l < hi; ++l) {
        const LayerAt v = layer_at(model, l, b);
        pt.forward_s += v.fwd;
        pt.backward_s += v.bwd;
        pt.activation_bytes += v.act;
      }
      if (s + 1 < S) pt.output_bytes = layer_at(model, hi - 1, b).out;
      if (s > 0) pt.grad_output_bytes = layer_at(model, lo - 1, b).gout;
      st.profile.push_back(pt);
    }
    p.stages.push_back(std::move(st));
  }
  return p;
}

namespace {

void check_options(const PartitionOptions& o) {
  if (o.refine < 0) throw InputError(fmt::format("--refine: must be >= 0, got {}", o.refine));
  if (o.eval_iterations < 1)
    throw InputError(fmt::format("--eval-iterations: must be >= 1, got {}", o.eval_iterations));
}

// Nothing fits: names the smallest need of the tightest stage (every stage holds at
// least one layer: stage 0 starts with layer 0, the last stage ends with layer L-1, a
// middle stage can do no better than one of the layers it could hold).
[[noreturn]] void throw_no_cut_fits(const PartitionProblem& problem, const Model& model, const PartitionOptions& o) {
  const int S = problem.num_stages(), L = problem.num_layers();
  double worst = 0;
  int worst_stage = 0, worst_layer = 0;
  for (int s = 0; s < S; ++s) {
    double best = kInf;
    int best_layer = s;
    const int lo = s == 0 ? 0 : (s == S - 1 ? L - 1 : s), hi = s == 0 ? 0 : L - S + s;
    for (int l = lo; l <= hi; ++l) {
      const double m = problem.stage_memory(s, l, l + 1);
      if (m < best) best = m, best_layer = l;
    }
    if (best > worst) worst = best, worst_stage = s, worst_layer = best_layer;
  }
  std::string why =
      worst > o.memory_limit_bytes
          ? fmt::format("stage {} needs at least {:.2f} GiB even holding only layer {} ('{}')", worst_stage,
                        worst / kGiB, worst_layer, model.layers[worst_layer].name)
          : std::string("every stage could hold some layer, but no contiguous cut fits all of them at once");
  throw InputError(fmt::format(
      "{}: no cut into {} stages fits the memory limit of {:.2f} GiB per stage with {} at micro-batch size {} "
      "(M = {}): {}; use more stages, a smaller micro-batch size or another schedule",
      model.source_file, S, o.memory_limit_bytes / kGiB, o.schedule.family, o.micro_batch_size,
      problem.micro_batches(), why));
}

// The cuts worth scoring: the DP optimum, the other Pareto-optimal cuts, and the optimum
// with one cut moved by up to two layers; those that fit, by the latency model.
std::vector<CutScore> candidate_cuts(const PartitionProblem& problem, const std::vector<std::vector<int>>& front) {
  std::vector<CutScore> cands;
  std::set<std::vector<int>> seen;
  auto add = [&](const std::vector<int>& b, std::string origin) {
    if (!seen.insert(b).second) return;
    CutScore c = problem.evaluate(b);
    if (!c.fits) return;
    c.origin = std::move(origin);
    cands.push_back(std::move(c));
  };
  add(front[0], "dp optimum");
  for (std::size_t i = 1; i < front.size(); ++i) add(front[i], "pareto (bottleneck vs transfers)");
  for (int t = 1; t < problem.num_stages(); ++t)
    for (int delta : {-2, -1, 1, 2}) {
      std::vector<int> b = front[0];
      b[t] += delta;
      if (b[t] <= b[t - 1] || b[t] >= b[t + 1]) continue;
      add(b, fmt::format("cut {} moved by {:+d}", t, delta));
    }
  std::stable_sort(cands.begin(), cands.end(), [](const CutScore& x, const CutScore& y) {
    if (x.predicted_s != y.predicted_s) return x.predicted_s < y.predicted_s;
    return x.bounds < y.bounds;
  });
  return cands;
}

// Simulates the best o.refine cuts by the latency model; puts the simulated ones first
// (fastest first; ties keep the better model score), then the rest by the latency model.
void refine(std::vector<CutScore>& cands, const PartitionProblem& problem, const Model& model,
            const sim::Network& network, const PartitionOptions& o) {
  const std::size_t n_sim = std::min<std::size_t>(static_cast<std::size_t>(o.refine), cands.size());
  std::optional<sim::CompiledScenario> compiled;  // the schedule compiled once, for every cut
  for (std::size_t i = 0; i < n_sim; ++i) {
    CutScore& c = cands[i];
    const sim::Pipeline p = pipeline_of(model, c.bounds, o.global_batch_size, o.memory_limit_bytes);
    if (compiled) {
      compiled->set_model_stages(p.at(o.micro_batch_size));
    } else {
      sim::Scenario sc = sim::make_scenario(p, network, problem.schedule(), o.micro_batch_size, o.eval_iterations);
      sc.start_time_s = o.eval_start_s;
      compiled.emplace(std::move(sc));
    }
    c.simulated_s = compiled->simulate().mean_iteration_time_s();
  }
  if (n_sim > 0) {
    std::stable_sort(cands.begin(), cands.begin() + static_cast<std::ptrdiff_t>(n_sim),
                     [](const CutScore& x, const CutScore& y) { return *x.simulated_s < *y.simulated_s; });
  }
}

}  // namespace

PartitionResult partition(const Model& model, const sim::Network& network, const PartitionOptions& o) {
  check_options(o);
  const PartitionProblem problem(model, network, o);
  const std::vector<std::vector<int>> front = problem.solve();
  if (front.empty()) throw_no_cut_fits(problem, model, o);
  std::vector<CutScore> cands = candidate_cuts(problem, front);

  PartitionResult r;
  r.options = o;
  r.model_name = model.name;
  for (const Layer& l : model.layers) r.layer_names.push_back(l.name);
  refine(cands, problem, model, network, o);
  for (std::size_t i = 0; i < cands.size(); ++i)
    if (cands[i].bounds == front[0]) r.dp_index = i;  // the DP optimum
  r.candidates = std::move(cands);
  r.chosen = r.candidates.front();
  r.pipeline = pipeline_of(model, r.chosen.bounds, o.global_batch_size, o.memory_limit_bytes);
  r.stages = r.pipeline.at(o.micro_batch_size);
  // Report memory with the planner's own model on the pipeline (the DP used the same
  // coefficients; this is what `plan` will check).
  r.chosen.memory_bytes = memory_model(r.stages, problem.schedule(), network);
  return r;
}

}  // namespace adagrouper::planner
