// Running a scenario: the options of a run, the choice of evaluator, and the static
// deadlock check of custom orders.
#pragma once

#include <memory>
#include <span>
#include <string>
#include <string_view>
#include <vector>

#include "result.h"
#include "scenario.h"

namespace adagrouper::sim {

// How simulate() computes the times (docs/model.md, "Two evaluators"). Every evaluator
// gives the same numbers to the last bit; they differ in speed and in what they record.
enum class Evaluator {
  Auto,      // dataflow, except with a timeline (only the event engine records one)
  Events,    // the event engine: one event list ordered by (time, sequence)
  Dataflow,  // stage by stage as far as inputs allow; the event engine reports errors
};

struct EvaluatorChoice {
  Evaluator id;
  std::string_view name;  // as --evaluator takes it
  std::string_view help;
};
// auto, events, dataflow, with one line each for --help.
std::span<const EvaluatorChoice> evaluator_choices();
// The choice named `name`; InputError naming `option` otherwise.
Evaluator parse_evaluator(std::string_view name, std::string_view option = "--evaluator");
// "auto, events or dataflow".
std::string evaluator_names();

struct SimOptions {
  bool timeline = false;      // record every op, transfer and counter change
  bool record_order = false;  // record the order each stage ran its ops in (SimResult::executed)
  Evaluator evaluator = Evaluator::Auto;
};

// Runs the scenario. Throws SimError when it cannot finish: a deadlock (naming, per
// stuck stage, the op it waits for and what that op waits for) or a rate or speed
// that stays 0 forever (naming the channel or stage). InputError when the options
// contradict each other (a timeline from the dataflow evaluator).
SimResult simulate(const Scenario& scenario, const SimOptions& options = {});

namespace eval {
struct Program;
}

// A scenario compiled once and simulated again after its start time or its model
// stages' parameters change (durations and bytes, as Pipeline::at gives them for another
// cut of the same model): the schedule, micro-batches and network stay. Each run gives
// what simulate() gives for the scenario as it stands, without compiling the schedule
// again (the partition refinement simulates one schedule for many cuts this way, the
// adaptive study one plan at many start times). Not copied: moved, it rebinds its
// program to the scenario's new place.
class CompiledScenario {
 public:
  explicit CompiledScenario(Scenario scenario);
  CompiledScenario(CompiledScenario&& other);
  CompiledScenario& operator=(CompiledScenario&&) = delete;
  ~CompiledScenario();

  const Scenario& scenario() const { return scenario_; }
  // New parameters for the same model stages; InputError when their number differs.
  void set_model_stages(std::vector<StageParams> model_stages);
  // Where iteration 0 starts in the network's traces (Scenario::start_time_s).
  void set_start_time(double start_time_s) { scenario_.start_time_s = start_time_s; }
  SimResult simulate(const SimOptions& options = {}) const;

 private:
  Scenario scenario_;
  std::unique_ptr<eval::Program> program_;
};

// A dependency cycle in the scenario's ops and messages, as readable steps
// ("stage 0 F1", "activation of micro-batch 1 on channel 0 -> 1", ...); empty when there
// is none. Built on Boost.Graph: ops, messages, order edges, FIFO and capacity edges.
std::vector<std::string> find_dependency_cycle(const Scenario& scenario);

}  // namespace adagrouper::sim
