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

SimResult simulate(const Scenario& scenario, const SimOptions& options) {
  if (options.evaluator == Evaluator::Dataflow && options.timeline)
    throw InputError("the dataflow evaluator records no timeline; use the event engine (or auto) with a timeline");
  const eval::Program program = eval::build_program(scenario);
  if (options.evaluator != Evaluator::Events && !options.timeline) {
    if (auto r = eval::run_dataflow(scenario, program, options)) return std::move(*r);
    // It could not finish: the event engine finds where and says why (and throws).
  }
  return *eval::run_event_engine(scenario, program, options);
}

}  // namespace adagrouper::sim
