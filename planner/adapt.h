// Adaptive re-planning: the simulated Ada-Grouper runtime and the policies it is compared with.
//
// A controller that profiles its own transfers, re-evaluates the planner's candidates
// every R iterations on the network it measured, and switches plan when the predicted
// gain is worth the pause; compared on the same trace with static plans and a hindsight
// oracle (docs/model.md section 13).
//
//   AdaptResult r = run_adapt(pipeline, network, options);
//   adapt_json(r, inputs), adapt_text(r)   (docs/formats.md, "Adaptive run")
//
// The controller estimates rates with window_rate (profiling.h), the estimator of
// `plan --comm-profile`.
#pragma once

#include <cstddef>
#include <functional>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include <nlohmann/json.hpp>

#include "planner.h"
#include "profiling.h"
#include "sim.h"

namespace adagrouper::planner {

struct AdaptOptions {
  double memory_limit_bytes = 0;  // per stage
  int global_batch_size = 0;      // B (fixed; M = B / b follows the plan's b)
  int iterations = 100;           // N, iterations of training simulated per policy
  int replan_every = 10;          // R: decisions at iterations R, 2R, ...; also the oracle's period
  int window = 64;                // W: transfer samples per channel in the moving average
  double threshold = 0.02;        // switch only if the predicted gain exceeds this fraction
  double switch_pause_s = 2.0;    // time a change of plan costs (re-planning, communicators)
  // ... and only if the predicted saving over the next `horizon` iterations (0: the rest
  // of the run) exceeds the pause.
  int horizon = 0;
  // Schedule families considered beyond the memory-limit curve and the baselines
  // (PlanOptions::families; parse_families).
  std::vector<std::string> families;
  // Progress for long runs: phase ("static", "adaptive", "oracle"), work done and total
  // (iterations simulated). Called from the calling thread, often; may be empty.
  std::function<void(std::string_view phase, long done, long total)> progress;
};

// One iteration of one policy. `plan` indexes AdaptResult::candidates.
struct IterationRow {
  int iteration = 0;
  double start_s = 0;   // absolute time at which the iteration started
  int plan = 0;
  double pause_s = 0;   // switch pause charged just before this iteration
  double time_s = 0;    // the iteration's time (end minus start)
};

// What the controller estimated for one channel.
struct ChannelEstimate {
  int from = 0, to = 0;
  std::size_t samples = 0;
  std::optional<double> rate;  // bytes/s; nullopt: no rate (latency-only transfers)
};

struct Decision {
  int iteration = 0;            // the decision is taken before this iteration starts
  double time_s = 0;            // when (absolute)
  std::vector<ChannelEstimate> channels;
  int current = 0, best = 0;    // candidates
  double current_predicted_s = 0, best_predicted_s = 0;  // on the estimated network
  double gain = 0;              // 1 - best / current
  bool switched = false;
  std::string reason;
};

struct PolicyRun {
  std::string name;         // 1f1b, dapple-b, first-window, best-static, adaptive, oracle
  std::string description;
  bool available = true;    // false: the baseline fits the memory limit at no b
  std::vector<IterationRow> rows;
  double total_time_s = 0;  // end of the last iteration: iteration times plus pauses
  int switches = 0;
  double pause_s = 0;       // total switch pause

  double mean_iteration_time_s() const;
};

struct AdaptResult {
  std::string pipeline;
  int num_stages = 0;
  AdaptOptions options;
  // The plans every policy chooses from: the planner's evaluated candidates (the
  // memory-limit curve and the baselines that fit). Which candidates fit depends on
  // memory and channel capacities only, never on rates, so the set is fixed.
  std::vector<Candidate> candidates;
  std::vector<double> static_total_s;  // per candidate: its whole run as a static plan
  int profile_plan = 0;                // the plan of the launch profile
  int profile_iterations = 0;          // iterations it ran: enough to fill the window
  std::vector<ChannelEstimate> launch_estimate;
  int launch_plan = 0;                 // chosen on the launch profile
  std::vector<Decision> decisions;     // the adaptive controller's, in order
  std::vector<PolicyRun> policies;     // in the order of the summary table

  const PolicyRun& policy(std::string_view name) const;
  // total(1f1b) / total(policy); nullopt when 1F1B fits at no b.
  std::optional<double> speedup_over_1f1b(const PolicyRun& p) const;
};

// Row callback: the policy's name, one of its rows and the row's plan, streamed in the
// order of computation (1f1b, dapple-b, first-window, adaptive, best-static, oracle).
using RowSink = std::function<void(const std::string& policy, const IterationRow& row, const Candidate& plan)>;

// Runs every policy over options.iterations iterations of the network's traces.
// Throws InputError for bad options (naming the option) or when nothing fits the
// memory limit, SimError when the network cannot carry a message.
AdaptResult run_adapt(const sim::Pipeline& pipeline, const sim::Network& network, const AdaptOptions& options,
                      const RowSink& sink = {});

// Rows file: CSV header and row, or a JSON Lines object (docs/formats.md).
std::string rows_csv_header();
std::string row_csv(const std::string& policy, const IterationRow& row, const Candidate& plan);
std::string row_jsonl(const std::string& policy, const IterationRow& row, const Candidate& plan);

// The adagrouper.adapt/1 summary document, and the table `adapt` prints.
nlohmann::ordered_json adapt_json(const AdaptResult& r, const std::vector<InputFile>& inputs);
std::string adapt_text(const AdaptResult& r);

}  // namespace adagrouper::planner
