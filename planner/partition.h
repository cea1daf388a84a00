// Stage partitioning: cutting a model's layers into pipeline stages, and model -> plan.
//
// Cut the L layers of a model into S contiguous stages for one micro-batch size and
// schedule, minimising the pipeline latency model under the memory limit with a dynamic
// program over layer ranges (as DAPPLE and PipeDream do), then refining the best few
// cuts with the simulator (docs/model.md section 12). The result is a pipeline file
// (docs/formats.md, "Pipeline file").
//
//   PartitionResult r = partition(model, network, {.stages = 8, .micro_batch_size = 2, ...});
//   r.pipeline  ->  pipeline_json(r)  ->  adagrouper plan / simulate
#pragma once

#include <functional>
#include <optional>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "model.h"
#include "planner.h"
#include "sim.h"

namespace adagrouper::planner {

struct PartitionOptions {
  int stages = 0;                  // S
  int micro_batch_size = 0;        // b
  int global_batch_size = 0;       // B (b must divide it; M = B / b)
  sim::ScheduleSpec schedule;      // 1f1b (default), kfkb with k, gpipe, dapple-b: the micro-batches in flight
  double memory_limit_bytes = 0;   // per stage
  int refine = 8;                  // cuts simulated after the DP (0: take the DP's optimum)
  int eval_iterations = 1;         // iterations simulated per refined cut
  double eval_start_s = 0;         // absolute time at which they start
};

// One way to cut the model: stage s holds layers [bounds[s], bounds[s+1]).
struct CutScore {
  std::vector<int> bounds;               // S + 1 entries, 0 first, L last
  bool fits = false;                     // every stage within the memory limit
  double predicted_s = 0;                // the latency model (below)
  double bottleneck_s = 0;               // slowest stage (fwd + bwd) or channel
  double transfer_s = 0;                 // sum over boundaries of forward + backward message times
  std::vector<double> memory_bytes;      // per stage: the planner's memory model
  std::optional<double> simulated_s;     // mean simulated iteration time (refined cuts)
  std::string origin;                    // "dp optimum", "pareto", "moved cut ..."
};

// Everything the DP needs, at one micro-batch size: prefix sums over the layers, the
// schedule's memory coefficients per stage, and per-channel transfer costs.
//
// Latency model of a cut (the pipeline's fill and drain plus M - 1 rounds of its
// slowest resource):
//   T = sum over layers (fwd + bwd) + sum over boundaries (t_f + t_b)
//       + (M - 1) x max(max over stages (fwd_s + bwd_s), max over boundaries max(t_f, t_b))
// with t = latency + message bytes / mean rate of the channel. The optimizer steps are
// left out (small next to an iteration; the simulated refinement counts them). Memory of stage s is the
// planner's memory model (planner.h): static + max over the stage's ops of
//   act x (in flight) + out[s-1] x (activations waiting) + gout[s+1] x (gradients waiting),
// the coefficients fixed by the schedule (and the channel capacities).
class PartitionProblem {
 public:
  PartitionProblem(const Model& model, const sim::Network& network, const PartitionOptions& options);

  int num_layers() const { return L_; }
  int num_stages() const { return S_; }
  int micro_batches() const { return M_; }
  const sim::Schedule& schedule() const { return schedule_; }

  // Scores one cut (bounds as in CutScore). Throws std::invalid_argument for bounds
  // that are not 0 < ... < L with S + 1 entries.
  CutScore evaluate(const std::vector<int>& bounds) const;

  // The DP: the cut that minimises the latency model among those that fit, then the
  // other cuts on the last state's (bottleneck, transfer sum) Pareto front that the
  // bound of the first pass kept, best first. Empty when no cut fits.
  std::vector<std::vector<int>> solve() const;

  // Memory of stage s holding layers [i, j) (the planner's memory model).
  double stage_memory(int s, int i, int j) const;
  // Transfer time of the activation (forward) and gradient (backward) message across a
  // cut after layer cut-1 between stages boundary and boundary + 1.
  double transfer_fwd(int boundary, int cut) const;
  double transfer_bwd(int boundary, int cut) const;

 private:
  struct Term {  // memory = static + act * a + in_fwd * f + in_bwd * g
    double a, f, g;
  };
  class Dp;  // the dynamic program of solve() (partition_dp.cpp)

  // The constructor's parts (partition_problem.cpp).
  void sum_layers(const Model& model, int b);
  void derive_memory_terms(const sim::Network& network);
  void derive_channel_costs(const sim::Network& network, double t0);

  int L_ = 0, S_ = 0, M_ = 0;
  double limit_ = 0;
  sim::Schedule schedule_;
  double reserved_ = 0;
  std::vector<double> time_, act_, static_;   // prefix sums, L + 1 entries
  std::vector<double> out_, gout_;            // per layer: what crosses a cut after it
  std::vector<std::vector<Term>> terms_;      // per stage, non-dominated
  std::vector<double> max_a_;                 // per stage: largest act coefficient
  std::vector<double> lat_f_, lat_b_, rate_f_, rate_b_;  // per boundary (infinite rate: unlimited)
};

struct PartitionResult {
  PartitionOptions options;
  std::string model_name;
  std::vector<std::string> layer_names;
  CutScore chosen;
  std::vector<CutScore> candidates;  // scored (and, up to options.refine, simulated), best first
  std::size_t dp_index = 0;          // the DP optimum's index in candidates
  sim::Pipeline pipeline;            // of the chosen cut, every micro-batch size the model covers
  std::vector<sim::StageParams> stages;  // the chosen cut at options.micro_batch_size
};

// Partitions the model. Throws InputError for bad options or when no cut fits the
// memory limit (naming the smallest memory the tightest stage needs).
PartitionResult partition(const Model& model, const sim::Network& network, const PartitionOptions& options);

// The pipeline of a cut: per stage, sums of the layers' times, activations, parameter
// and optimizer bytes (static = reserved + parameters x (1 + optimizer bytes per
// parameter byte)), at every micro-batch size the model covers; messages from the
// layer at the cut.
sim::Pipeline pipeline_of(const Model& model, const std::vector<int>& bounds, int global_batch_size,
                          double memory_limit_bytes);

// The pipeline file (docs/formats.md, "Pipeline file") with a "partition" record of how
// it was made.
nlohmann::ordered_json pipeline_json(const PartitionResult& r, const Model& model);
// The partition report (`partition --json`).
nlohmann::ordered_json partition_json(const PartitionResult& r);
// The table of stage boundaries, times, memory and messages.
std::string partition_text(const PartitionResult& r);

// --- model -> plan ------------------------------------------------------------------

struct ModelPlanOptions {
  std::vector<int> stage_counts;   // S to try (one, or several with --stages auto)
  // v to try: each cuts the layers into S x v model stages, planned on S devices with v
  // model stages per device (PlanOptions::virtual_stages {v}).
  std::vector<int> virtual_stages{1};
  PlanOptions plan;                // B, memory limit, evaluation, families
  int refine = 8;
};

struct ModelPlanTrial {
  int stages = 0;                  // devices
  int virtual_stages = 1;          // model stages per device: the cut has stages x v
  int micro_batch_size = 0;        // the size the cut was made at
  std::vector<int> bounds;         // empty when nothing fits
  bool planned = false;
  double predicted_iteration_time_s = 0;
  double ranked_time_s = 0;          // the chosen candidate's time as its plan ranked it (--rank-by)
  double throughput_per_device = 0;  // samples / s / device, at ranked_time_s
  std::string note;
};

struct ModelPlan {
  PlanResult plan;
  PartitionResult partition;
  sim::Network network;
  std::vector<ModelPlanTrial> trials;
  std::size_t chosen_trial = 0;
};

// For each S and v, partitions into S x v model stages at every micro-batch size that
// divides B (memory checked with 1F1B, the schedule with the fewest micro-batches in
// flight), plans each distinct cut with make_plan on S devices, and keeps the fastest;
// across several S, the highest throughput per device. `network_for(S)` loads the
// network for S stages (with several S, an S whose network does not load is skipped;
// the cut into S x v model stages uses the network for S x v). Throws InputError when
// nothing can be planned.
ModelPlan plan_model(const Model& model, const std::function<sim::Network(int)>& network_for,
                     const ModelPlanOptions& options);

// The stage counts of `--stages S` (one) or `--stages auto` (2, 4, 8, ... up to the
// number of layers, at most 64). Throws InputError naming --stages.
std::vector<int> parse_stage_counts(const std::string& spec, int num_layers);

nlohmann::ordered_json model_plan_json(const ModelPlan& mp, const std::string& model_path);
std::string model_plan_text(const ModelPlan& mp);

}  // namespace adagrouper::planner
