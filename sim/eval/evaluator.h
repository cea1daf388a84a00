// The evaluators behind simulate(), one internal signature for all. Internal to sim/.
//
//   evaluator      per op                       timeline  when it cannot finish
//   event engine   two leaf-to-root replays of  yes       throws SimError naming the
//                  a tournament tree (log C)              stuck ops or the zero rate
//   dataflow       amortized O(1): no event     no        returns nullopt (simulate()
//                  list, levels replayed per              then runs the event engine,
//                  stage; about 3x faster                 which words the error); also
//                                                         for token buckets, which the
//                                                         event engine alone models
//
// C is the number of components (stages and channels). To add an evaluator: implement
// the signature below in its own file, add it to evaluator_choices() (simulate.cpp)
// and to the dispatch in simulate(); the property tests compare it with the event
// engine field by field.
#pragma once

#include <optional>

#include "../simulate.h"
#include "program.h"

namespace adagrouper::sim::eval {

// The run of a compiled scenario, or nullopt when this evaluator cannot finish it
// (an evaluator that reports why throws SimError instead).
using Run = std::optional<SimResult> (*)(const Scenario& scenario, const Program& program, const SimOptions& options);

std::optional<SimResult> run_event_engine(const Scenario& scenario, const Program& program, const SimOptions& options);
std::optional<SimResult> run_dataflow(const Scenario& scenario, const Program& program, const SimOptions& options);

}  // namespace adagrouper::sim::eval
