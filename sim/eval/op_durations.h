// The durations of one iteration's ops: the profile's, except where the scenario's
// stage timing trace lists the op. Internal to sim/.
#pragma once

#include <cstdint>
#include <vector>

#include "program.h"

namespace adagrouper::sim::eval {

// `load(it)` must be called for iterations in increasing order; `has()` tells whether
// this iteration has any listed op (else use the classes' nominal durations), `at(i)` the
// duration of op i (index into Program::ops). A timed op the schedule does not run (an I
// of a schedule that runs B) keeps its nominal duration.
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
  static constexpr std::uint32_t kUnlisted = 0xffffffffu;
  std::vector<double> duration_;
  std::vector<std::uint32_t> index_;  // [(j M + m) 4 + phase]: the op's index in Program::ops, or kUnlisted
};

}  // namespace adagrouper::sim::eval
