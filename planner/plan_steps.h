// The steps of make_plan, internal to planner/.
//
// Describing and evaluating one candidate (planner.cpp), the memory-limit curve and the
// baselines (curve.cpp), the extra families (families.cpp), and the choice among the
// evaluated candidates (selection.cpp).
#pragma once

#include <map>
#include <string>
#include <vector>

#include "planner.h"

namespace adagrouper::planner::plan_steps {

// What every step reads.
struct PlanContext {
  const sim::Pipeline& pipeline;  // with the options' B and memory limit
  const sim::Network& network;    // of D stages
  const PlanOptions& options;
  std::vector<int> sizes;  // micro-batch sizes that divide B, inside every profile, increasing
  int devices = 0;                       // D
  std::vector<int> virtual_stages;       // v considered, increasing
  std::map<int, sim::Pipeline> merged;   // per v considered: the pipeline as D x v model stages

  const sim::Pipeline& pipeline_for(int v) const { return merged.at(v); }
};

// The candidate that runs `spec` at micro-batch size b, with its memory model; not
// evaluated yet. Throws InputError when the family refuses (D, v, M).
Candidate describe(const PlanContext& cx, const sim::ScheduleSpec& spec, int b, bool baseline);

// Whether the candidate's memory model fits the limit on every stage.
bool fits(const PlanContext& cx, const Candidate& c);

// The scenario evaluate simulates for the candidate, running `schedule`.
sim::Scenario candidate_scenario(const PlanContext& cx, const Candidate& c, sim::Schedule schedule);

// Simulates the candidate as evaluate does, with these options.
sim::SimResult simulate_candidate(const PlanContext& cx, const Candidate& c, const sim::SimOptions& options);

// Simulates the candidate: its predicted iteration time, throughput and measured memory.
void evaluate(const PlanContext& cx, Candidate& c);

// Appends the memory-limit curve: for k = 1, 2, ... the largest b whose kFkB plan fits
// (evaluated), the next larger b (infeasible) and the smaller ones (pruned), until no b
// fits. Its first point is 1F1B (kFkB with k = 1).
void add_curve(const PlanContext& cx, std::vector<Candidate>& out);

// Appends the baselines other than 1F1B (dapple-b, gpipe), each at its own largest
// feasible b (evaluated), or its smallest b (infeasible) when none fits.
void add_baselines(const PlanContext& cx, std::vector<Candidate>& out);

// Appends the extra families of the options at the micro-batch sizes of the curve's
// points (`out` holds the curve): kfkb-dynamic for each point's k (P unlimited and P = k),
// the others for each v considered. Each is evaluated when it fits, infeasible when it
// does not, and refused, with the family's reason, when it does not run (D, v, M).
void add_families(const PlanContext& cx, std::vector<Candidate>& out);

// Chooses the fastest evaluated candidate (ties: less peak memory, then smaller k, then
// fewer virtual stages), finds
// the evaluated 1F1B, and sets every evaluated candidate's status and reason. Throws
// InputError naming the smallest memory need when no candidate was evaluated.
void choose(const PlanContext& cx, PlanResult& result);

// "23.73 GiB".
std::string gib_text(double bytes);

}  // namespace adagrouper::planner::plan_steps
