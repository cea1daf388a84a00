// The durations of one iteration's ops: the profile's, except where the scenario's
// stage timing trace lists the op; and when an op ends. Internal to sim/.
#pragma once

#include <cstdint>
#include <vector>

#include "../rate.h"
#include "program.h"

namespace adagrouper::sim::eval {

// `load(it)` must be called for iterations in increasing order; `of(i, c)` is then the
// duration of op i (index into Program::ops) of class c in that iteration: the trace's
// where it lists the op, else the class's nominal one. A timed op the schedule does not
// run (an I of a schedule that runs B) keeps its nominal duration. `lists(it)`, before
// `load(it)`, says whether the trace has the iteration; `load(it, true)` makes every
// duration an array entry even where it has not, so that an evaluator that runs the
// iteration timed for another trace's sake can read `of<true>`.
class OpDurations {
 public:
  OpDurations(const Scenario& sc, const Program& prog);
  bool lists(int iteration);
  void load(int iteration, bool materialize = false);
  double of(std::uint32_t i, const OpClass& c) const { return has_ ? duration_[i] : c.nominal; }
  // Whether this iteration has durations from the trace; `of<timed()>` is `of` without
  // the test, for a loop compiled once for each answer.
  bool timed() const { return has_; }
  template <bool kTimed>
  double of(std::uint32_t i, const OpClass& c) const { return kTimed ? duration_[i] : c.nominal; }

 private:
  const Scenario& sc_;
  const Program& prog_;
  std::size_t cursor_ = 0;
  bool has_ = false;
  static constexpr std::uint32_t kUnlisted = 0xffffffffu;
  std::vector<double> duration_;
  std::vector<std::uint32_t> index_;  // [(j M + m) 4 + phase]: the op's index in Program::ops, or kUnlisted
};

// Moves `cursor` past the entries of `list` (sorted by iteration) of iterations before
// `it`; whether the entry it then points at is of `it`. Both timing traces' lists.
template <class Entry>
bool lists_iteration(const std::vector<Entry>& list, std::size_t& cursor, int it) {
  while (cursor < list.size() && list[cursor].iteration < it) ++cursor;
  return cursor < list.size() && list[cursor].iteration == it;
}

// When an op of stage ps that starts at `start` and takes `duration` at nominal speed
// ends (kNever when the stage's speed stays 0 from then on).
inline double op_end(const ProgramStage& ps, RateCursor& speed, double start, double duration) {
  return ps.unit_speed ? start + duration : speed.finish(start, duration);
}

}  // namespace adagrouper::sim::eval
