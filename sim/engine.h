// The discrete-event engine: stages (compute streams) and channels (FIFO links with
// latency, bandwidth trace and capacity) exchanging messages, driven by one event
// list ordered by (time, sequence). See docs/model.md.
#pragma once

#include <optional>
#include <string>
#include <vector>

#include "network.h"
#include "pipeline.h"
#include "result.h"
#include "schedule.h"

namespace adagrouper::sim {

// Everything one simulation needs, already validated.
// One measured op duration from a stage timing trace: the op takes `duration_s`
// (nominal, still stretched by the stage's speed trace) instead of the profile's.
struct OpTiming {
  int iteration = 0;
  int stage = 0;
  int micro_batch = 0;
  Phase phase = Phase::Forward;
  double duration_s = 0;
  int line = 0;  // where it came from, for error messages (0: not from a file)
};

struct Scenario {
  std::string pipeline_name;
  std::vector<StageParams> stages;
  Network network;
  Schedule schedule;
  int micro_batch_size = 1;
  int global_batch_size = 1;   // M = global_batch_size / micro_batch_size
  int iterations = 1;
  // Absolute time at which iteration 0 starts: traces are functions of absolute time,
  // so this selects the window of the network traces the run sees.
  double start_time_s = 0.0;
  std::optional<double> memory_limit_bytes;
  // Measured durations that replace the profile's for the ops they name (empty: none).
  // Set with set_op_timings, which validates them.
  std::vector<OpTiming> op_timings;

  int num_stages() const { return static_cast<int>(stages.size()); }
  int micro_batches() const { return global_batch_size / micro_batch_size; }
};

// Builds a scenario from a pipeline, a network and a schedule, checking that they
// agree (stage counts, b divides B and lies in every profile, the order is complete).
Scenario make_scenario(const Pipeline& pipeline, Network network, Schedule schedule,
                       int micro_batch_size, int iterations);

// Validates and installs measured op durations: stage, micro-batch and phase must exist
// and each op of an iteration may be listed once; iterations beyond the run are
// ignored. Errors name `source` and the entry's line.
void set_op_timings(Scenario& scenario, std::vector<OpTiming> timings, const std::string& source);

// How simulate() computes the times (docs/model.md, "Two evaluators"). Both give the
// same numbers to the last bit; the event engine is the reference, the dataflow
// evaluator is faster.
enum class Evaluator {
  Auto,      // dataflow, except with a timeline (only the event engine records one)
  Events,    // the event engine: one event list ordered by (time, sequence)
  Dataflow,  // stage by stage as far as inputs allow; the event engine reports errors
};

struct SimOptions {
  bool timeline = false;  // record every op, transfer and counter change
  Evaluator evaluator = Evaluator::Auto;
};

// Runs the scenario. Throws SimError when it cannot finish: a deadlock (naming, per
// stuck stage, the op it waits for and what that op waits for) or a rate or speed
// that stays 0 forever (naming the channel or stage).
SimResult simulate(const Scenario& scenario, const SimOptions& options = {});

// A dependency cycle in the scenario's ops and messages, as readable steps
// ("stage 0 F1", "message 1 on 0->1", ...); empty when there is none. Built on
// Boost.Graph: ops, messages, order edges, FIFO edges and capacity edges.
std::vector<std::string> find_dependency_cycle(const Scenario& scenario);

}  // namespace adagrouper::sim
