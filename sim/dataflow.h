// The dataflow evaluator (dataflow.cpp): the same numbers as the event engine, computed
// stage by stage as far as inputs allow instead of in time order. Internal to sim/;
// simulate() chooses it (SimOptions::evaluator).
#pragma once

#include <optional>

#include "engine.h"

namespace adagrouper::sim {

// The result of the run, or nothing when it cannot finish (a dependency cycle, or a
// rate or speed that stays 0 forever): the event engine then reports why. Never records
// a timeline.
std::optional<SimResult> simulate_dataflow(const Scenario& scenario);

}  // namespace adagrouper::sim
