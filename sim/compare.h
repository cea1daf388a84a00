// Comparing a prediction with a measurement: two summary JSON files (what `adagrouper
// simulate --output` writes, and what `adagrouper-calib replay` writes for a real run)
// give per-iteration errors, the mean absolute percentage error, per-stage busy and
// bubble differences; several (predicted, measured) pairs of different candidates give
// whether the predicted ranking holds (Kendall tau, pairwise agreement, best vs best).
//
//   Summary p = load_summary("sim.json"), m = load_summary("run.json");
//   Comparison c = compare(p, m);
//   Ranking r = rank_agreement({c1, c2, c3});
//   comparison_json({c1, c2, c3}, r), comparison_text(...)
//
// Errors are signed as (predicted - measured) / measured: positive when the simulator
// is slower than reality. docs/formats.md describes the output.
#pragma once

#include <optional>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "network.h"
#include "schedule.h"

namespace adagrouper {
class Field;
}

namespace adagrouper::sim {

// The fields of a summary JSON that a comparison reads.
struct Summary {
  std::string source;  // the file it came from (for messages and the output)
  std::string pipeline;
  std::string schedule;
  int k = 0;
  int micro_batch_size = 0;
  int micro_batches = 0;
  int stages = 0;
  int virtual_stages = 1;  // model stages per stage (absent in summaries of older versions: 1)
  // How the backward ran, where an option set it (absent otherwise: a family's own).
  bool backward_given = false;  // the summary gives the three fields
  bool split_backward = false;
  WFill w_fill = WFill::Static;
  std::optional<int> max_pending_w;
  int iterations = 0;
  std::vector<double> iteration_times_s;
  double total_time_s = 0;
  double bubble_fraction = 0;
  struct Stage {
    double busy_s = 0;
    double bubble_s = 0;
  };
  std::vector<Stage> per_stage;

  // "kfkb k=2 b=4", "1f1b b=8", "interleaved-1f1b v=2 b=2",
  // "kfkb k=5 split-backward w-fill=dynamic b=2": names a candidate.
  std::string label() const;
};

// Reads a summary JSON; throws InputError naming the file and the field. Only the
// keys summary_json writes are allowed.
Summary load_summary(const std::string& path);
Summary parse_summary(const nlohmann::json& doc, const std::string& source);

// The chosen candidate of a plan file (compare --plan).
struct PlanChoice {
  std::string schedule;
  int k = 0;
  int micro_batch_size = 0;
};
// Reads a plan file (adagrouper.plan/1, checked with check_plan_keys) for its choice.
PlanChoice load_plan_choice(const std::string& path);
// A candidate of a plan file (adagrouper.plan/1 or /2) as `simulate --plan` runs it: its
// schedule, sizes and evaluation, and the files the plan was made from.
struct PlannedRun {
  ScheduleSpec spec;
  int micro_batch_size = 0, global_batch_size = 0;
  int stages = 0;          // devices
  int iterations = 1;      // the plan's evaluation
  double start_time_s = 0;
  std::optional<double> predicted_iteration_time_s;
  std::string pipeline_path, network_path;  // inputs by role ("" when the plan has none)
  // Whether it is the plan's chosen candidate, the one whose device programs the plan
  // records (`devices`: with dynamic W fill, where the W ops went in the run the planner
  // evaluated).
  bool chosen = false;
  // The channels `plan --comm-profile` measured (`comm_profile.channels`; empty without
  // it): the plan evaluated its candidates on the network input with these rates.
  std::vector<Network::MeasuredRate> measured_rates;
};
// The chosen candidate, or candidates[*candidate]; InputError naming the file and field,
// or --candidate for an index out of range.
PlannedRun load_planned_run(const std::string& path, std::optional<int> candidate);

// The network a plan evaluated its candidates on, as a file: its network input (found as
// plan_input_path finds it), to be bound and given run.measured_rates. InputError when
// the plan names none or it is not there.
NetworkSpec load_planned_network(const PlannedRun& run, const std::string& plan_path, const RateParser& rates);

// The path of a plan's input of `role` ("pipeline", "network", "model"; its `inputs`):
// as written where that exists from here or is absolute, else beside the plan file when
// it exists there; "" when the plan has none. A path found in neither place is returned
// as written, or with `required` refused: InputError naming the field and the option
// that gives the file instead.
std::string plan_input_path(const Field& plan, std::string_view role, bool required = false);

// Whether `candidate` (an element of a plan's `candidates`) is its `chosen` one: the same
// schedule and micro-batch size.
bool is_chosen_candidate(const Field& plan, const Field& candidate);

// The schedule of a plan's candidate (an element of `candidates`, or `chosen`): its
// family, k where the family takes one, and the settings of plan/2 (absent in plan/1:
// their defaults). InputError naming the field for an unknown family or value.
ScheduleSpec planned_spec(const Field& candidate);

// Every object of a plan document has only the keys `plan` writes; InputError naming the
// file, the line and the field otherwise.
void check_plan_keys(const Field& root);

struct IterationError {
  int iteration = 0;
  double predicted_s = 0, measured_s = 0;
  double error_s = 0;    // predicted - measured
  double error_pct = 0;  // 100 x error_s / measured_s
};

// Per stage, per iteration (busy_s and bubble_s divided by the file's iterations), so
// that runs of different lengths compare.
struct StageDiff {
  int stage = 0;
  double busy_predicted_s = 0, busy_measured_s = 0, busy_diff_s = 0, busy_error_pct = 0;
  double bubble_predicted_s = 0, bubble_measured_s = 0, bubble_diff_s = 0;
};

struct Comparison {
  std::string label;
  std::string predicted_source, measured_source;
  std::string schedule;
  int k = 0, micro_batch_size = 0, micro_batches = 0, stages = 0, virtual_stages = 1;
  int iterations_predicted = 0, iterations_measured = 0;
  std::vector<IterationError> iterations;  // the first min(both) iterations
  double mean_predicted_s = 0, mean_measured_s = 0;  // over the compared iterations
  double mean_error_pct = 0;   // error of the mean iteration time
  double mape_pct = 0;         // mean over iterations of |error_pct|
  double max_abs_error_pct = 0;
  double median_abs_error_pct = 0;   // robust to a few disturbed iterations
  double bubble_fraction_predicted = 0, bubble_fraction_measured = 0;
  std::vector<StageDiff> per_stage;
};

// Compares two summaries of the same run (same schedule, k, b, M and stage count; an
// InputError naming both files and the field otherwise). Iterations are compared in
// order over the shorter of the two runs.
Comparison compare(const Summary& predicted, const Summary& measured);

// Whether the predicted order of several candidates (their mean iteration times) is
// the measured order.
struct Ranking {
  int candidates = 0;
  int pairs = 0;                         // n (n - 1) / 2
  int concordant = 0, discordant = 0;    // pairs ordered alike / oppositely
  int tied = 0;                          // pairs tied in the prediction or the measurement
  double kendall_tau = 0;                // tau-b in [-1, 1]; 1 when n < 2 or nothing can be ordered
  double pairwise_agreement = 0;         // concordant / (concordant + discordant); 1 when none
  int predicted_best = 0, measured_best = 0;   // indices (first on ties)
  bool best_holds = false;               // the predicted-best's measured time is the measured minimum
  double regret_pct = 0;                 // measured time of the predicted best over the measured best, - 1, in %
  std::optional<int> chosen;             // the planner's pick, when given
  bool chosen_is_fastest_measured = false;
  double chosen_regret_pct = 0;
};

// Ranks the comparisons. `chosen` (an index into them) is the planner's pick.
Ranking rank_agreement(const std::vector<Comparison>& comparisons, std::optional<int> chosen = std::nullopt);

// The compare JSON (schema adagrouper.compare/1): every comparison, the overall MAPE,
// and the ranking when there are at least two comparisons. Field order is fixed.
nlohmann::ordered_json comparison_json(const std::vector<Comparison>& comparisons, const std::optional<Ranking>& ranking);

// The human table `adagrouper compare` prints.
std::string comparison_text(const std::vector<Comparison>& comparisons, const std::optional<Ranking>& ranking);

}  // namespace adagrouper::sim
