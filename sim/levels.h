// What the engine and the dataflow evaluator share beyond the program: the levels whose
// peaks a run reports, the memory formula, the stage timing trace's durations, and the
// filling of a SimResult. Internal to sim/.
#pragma once

#include <algorithm>
#include <cstdint>
#include <vector>

#include "program.h"
#include "result.h"

namespace adagrouper::sim {

// A level (memory bytes, micro-batches in flight, queue depth) whose peak follows the
// SPEC's rule "at equal times, releases happen before allocations": only the value
// that settles at each instant can be a peak, so the peak is taken when time moves on.
// The peak is therefore the same whatever order changes at one instant arrive in.
struct Level {
  double cur = 0, peak = 0, last_t = 0;
  // Sets the value at time t. Returns true when time moved on, i.e. `cur` settled at
  // `last_t` before this change.
  bool set(double t, double value) {
    bool moved = false;
    if (t > last_t) {
      if (cur > peak) peak = cur;
      moved = true;
    }
    last_t = t;
    cur = value;
    return moved;
  }
  // For integer-valued levels (counts), where the sum is exact in any order.
  bool change(double t, double delta) { return set(t, cur + delta); }
  double final_peak() const { return std::max(peak, cur); }
};

// Memory of a stage from its counts, always summed in the same order, so that the value
// at an instant does not depend on the order in which the changes reached it (and the
// event engine and the dataflow evaluator agree to the last bit): static bytes +
// activations of the micro-batches in flight + the messages waiting in its receive
// buffers (forward input, then backward input).
inline double stage_memory(const ProgramStage& ps, double inflight, double fwd_depth, double bwd_depth) {
  return ps.static_bytes + ps.act * inflight + ps.in_bytes[0] * fwd_depth + ps.in_bytes[1] * bwd_depth;
}

// Durations of one iteration's ops: the profile's, except where the scenario's stage
// timing trace lists the op. `load(it)` must be called for iterations in increasing
// order; `has()` tells whether this iteration has any listed op (else use the stage's
// fwd/bwd), `at(i)` the duration of op i (index into Program::ops).
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

// Per stage and channel, what a run accumulated.
struct StageTotals {
  double busy_s = 0;
  double peak_inflight = 0;
  double peak_memory_bytes = 0;
};
struct ChannelTotals {
  double busy_s = 0;
  double peak_queue_depth = 0;
};

// Fills everything in r but the iteration times, the op and transfer counts and the
// timeline: what was run, the total time, and the per-stage and per-channel results.
void fill_result(const Scenario& sc, const Program& prog, double total_s, const std::vector<StageTotals>& stages,
                 const std::vector<ChannelTotals>& channels, SimResult& r);

}  // namespace adagrouper::sim
