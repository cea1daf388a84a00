// The steps of make_plan, internal to planner/.
//
// Describing and evaluating one candidate (planner.cpp), the memory-limit curve and the
// baselines (curve.cpp), and the choice among the evaluated candidates (selection.cpp).
#pragma once

#include <string>
#include <vector>

#include "planner.h"

namespace adagrouper::planner::plan_steps {

// What every step reads.
struct PlanContext {
  const sim::Pipeline& pipeline;  // with the options' B and memory limit
  const sim::Network& network;
  const PlanOptions& options;
  std::vector<int> sizes;  // micro-batch sizes that divide B, inside every profile, increasing
};

// The candidate that runs `spec` at micro-batch size b, with its memory model; not
// evaluated yet.
Candidate describe(const PlanContext& cx, const sim::ScheduleSpec& spec, int b, bool baseline);

// Whether the candidate's memory model fits the limit on every stage.
bool fits(const PlanContext& cx, const Candidate& c);

// Simulates the candidate: its predicted iteration time, throughput and measured memory.
void evaluate(const PlanContext& cx, Candidate& c);

// Appends the memory-limit curve: for k = 1, 2, ... the largest b whose kFkB plan fits
// (evaluated), the next larger b (infeasible) and the smaller ones (pruned), until no b
// fits. Its first point is 1F1B (kFkB with k = 1).
void add_curve(const PlanContext& cx, std::vector<Candidate>& out);

// Appends the baselines other than 1F1B (dapple-b, gpipe), each at its own largest
// feasible b (evaluated), or its smallest b (infeasible) when none fits.
void add_baselines(const PlanContext& cx, std::vector<Candidate>& out);

// Chooses the fastest evaluated candidate (ties: less peak memory, then smaller k), finds
// the evaluated 1F1B, and sets every evaluated candidate's status and reason. Throws
// InputError naming the smallest memory need when no candidate was evaluated.
void choose(const PlanContext& cx, PlanResult& result);

// "23.73 GiB".
std::string gib_text(double bytes);

}  // namespace adagrouper::planner::plan_steps
