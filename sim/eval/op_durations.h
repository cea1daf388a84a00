// The durations of one iteration's ops: the profile's, except where the scenario's
// stage timing trace lists the op. Internal to sim/.
#pragma once

#include <cstdint>
#include <vector>

#include "program.h"

namespace adagrouper::sim::eval {

// `load(it)` must be called for iterations in increasing order; `has()` tells whether
// this iteration has any listed op (else use the stage's fwd/bwd), `at(i)` the duration
// of op i (index into Program::ops).
class OpDurations {
 public:
  OpDurations(const Scenario& sc, const Program& prog);
  void load(int iteration);
  bool has() const { return has_; }
  double at(std::uint32_t i) const { return duration_[i]; }

 private:
  const Scenario& sc_;
  const Program& prog_;
  std::size_t cursor_ = 0;
  bool has_ = false;
  std::vector<double> duration_;
  std::vector<std::vector<std::uint32_t>> position_;  // [stage][2m + phase]: index in the stage's order
};

}  // namespace adagrouper::sim::eval
