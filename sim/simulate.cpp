// simulate(): compiles the scenario and hands it to an evaluator.
#include "simulate.h"

#include <array>

#include <fmt/format.h>

#include "error.h"
#include "eval/evaluator.h"

namespace adagrouper::sim {

namespace {
// clang-format off
constexpr std::array<EvaluatorChoice, 3> kChoices{{
  {Evaluator::Auto, "auto", "dataflow, or the event engine when a timeline is asked for (the default)"},
  {Evaluator::Events, "events", "the event engine: the run in time order from one event list (the reference)"},
  {Evaluator::Dataflow, "dataflow", "stage by stage as far as inputs allow, about 3x faster; records no timeline; token buckets (burst_bytes) run on the event engine"},
}};
// clang-format on
}  // namespace

std::span<const EvaluatorChoice> evaluator_choices() { return kChoices; }

std::string evaluator_names() {
  std::string out;
  for (std::size_t i = 0; i < kChoices.size(); ++i)
    out += fmt::format("{}{}", i == 0 ? "" : i + 1 == kChoices.size() ? " or " : ", ", kChoices[i].name);
  return out;
}

Evaluator parse_evaluator(std::string_view name, std::string_view option) {
  for (const EvaluatorChoice& c : kChoices)
    if (c.name == name) return c.id;
  throw InputError(fmt::format("{}: {}, got '{}'", option, evaluator_names(), name));
}

namespace {

void check_options(const SimOptions& options) {
  if (options.evaluator == Evaluator::Dataflow && options.timeline)
    throw InputError("the dataflow evaluator records no timeline; use the event engine (or auto) with a timeline");
}

// The evaluator the options choose.
SimResult run(const Scenario& scenario, const eval::Program& program, const SimOptions& options) {
  if (options.evaluator != Evaluator::Events && !options.timeline) {
    if (auto r = eval::run_dataflow(scenario, program, options)) return std::move(*r);
    // It could not finish: the event engine finds where and says why (and throws).
  }
  return *eval::run_event_engine(scenario, program, options);
}

}  // namespace

SimResult simulate(const Scenario& scenario, const SimOptions& options) {
  check_options(options);
  return run(scenario, eval::build_program(scenario), options);
}

CompiledScenario::CompiledScenario(Scenario scenario)
    : scenario_(std::move(scenario)), program_(std::make_unique<eval::Program>(eval::build_program(scenario_))) {}

CompiledScenario::CompiledScenario(CompiledScenario&& other)
    : scenario_(std::move(other.scenario_)), program_(std::move(other.program_)) {
  if (program_) eval::bind_parameters(scenario_, *program_);  // it points into the scenario's network
}

CompiledScenario::~CompiledScenario() = default;

void CompiledScenario::set_model_stages(std::vector<StageParams> model_stages) {
  if (model_stages.size() != scenario_.model_stages.size())
    throw InputError(fmt::format("{} model stages given, the compiled scenario has {}", model_stages.size(),
                                 scenario_.model_stages.size()));
  scenario_.model_stages = std::move(model_stages);
  eval::bind_parameters(scenario_, *program_);
}

SimResult CompiledScenario::simulate(const SimOptions& options) const {
  check_options(options);
  return run(scenario_, *program_, options);
}

}  // namespace adagrouper::sim
