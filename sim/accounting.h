// Accounting of levels (docs/model.md §5): memory, micro-batches in flight and receive
// buffer depths, their peaks under the rule "at equal times, releases before
// allocations", and the one memory formula. The evaluators use it, and so does the
// calibration harness when it turns a real run's records into a result.
#pragma once

#include <algorithm>
#include <cstddef>
#include <cstdint>
#include <vector>

namespace adagrouper::sim {

// What a timeline counter sample measures.
enum class Counter : std::int32_t {
  Memory = 0,      // bytes held by a stage
  QueueDepth = 1,  // messages arrived on one channel and not yet consumed
};

// A level whose peak follows the rule "at equal times, releases happen before
// allocations": only the value that settles at each instant can be a peak, so the
// peak is taken when time moves on. The peak is therefore the same whatever order
// changes at one instant arrive in.
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

// Memory of a stage from its counts: static bytes + the sum over its terms of (bytes per
// unit) x (count), always in the order of the terms, so that the value at an instant does
// not depend on the order in which the changes reached it, and every evaluator agrees to
// the last bit. The terms of a stage are, per model stage, its activations (x
// micro-batches in flight before their backward) and the part W still needs (x after I),
// then per input the bytes of one waiting message (x messages waiting).
inline double stage_memory(double static_bytes, const double* bytes, const double* counts, std::size_t n) {
  double m = static_bytes;
  for (std::size_t i = 0; i < n; ++i) m += bytes[i] * counts[i];
  return m;
}

// The bytes a stage holds per unit of each count, with one model stage and no split
// backward (the form the calibration harness records).
struct MemoryTerms {
  double static_bytes = 0;  // always resident
  double act = 0;           // per micro-batch in flight
  double in_bytes[2] = {};  // per message waiting in the forward / backward receive buffer
};

// The same for those counts: activations of the micro-batches in flight, then the
// messages waiting in the forward and the backward receive buffer.
inline double stage_memory(const MemoryTerms& m, double inflight, double fwd_depth, double bwd_depth) {
  const double bytes[3] = {m.act, m.in_bytes[0], m.in_bytes[1]};
  const double counts[3] = {inflight, fwd_depth, bwd_depth};
  return stage_memory(m.static_bytes, bytes, counts, 3);
}

// The counts of one stage, changed by events in any order.
enum class Count : std::uint8_t { Inflight, ForwardDepth, BackwardDepth };
struct CountChange {
  double time;
  Count count;
  int delta;  // +1 or -1
};

struct StagePeaks {
  double memory = 0, inflight = 0, forward_depth = 0, backward_depth = 0;
};

// The peaks of a stage's levels from all its count changes (in any order; they are
// sorted here, releases first at equal times). `memory_samples`, when given, receives
// the memory value that settles at each instant where it changed, as (time, bytes).
StagePeaks replay_counts(std::vector<CountChange>& changes, const MemoryTerms& terms,
                         std::vector<std::pair<double, double>>* memory_samples = nullptr);

}  // namespace adagrouper::sim
