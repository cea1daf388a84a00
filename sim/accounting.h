// Accounting of levels (docs/model.md §5): memory, micro-batches in flight and receive
// buffer depths, their peaks under the rule "at equal times, releases before
// allocations", and the one memory formula. The evaluators use it, and so does the
// calibration harness when it turns a real run's records into a result.
#pragma once

#include <algorithm>
#include <cstddef>
#include <cstdint>
#include <utility>
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

// Whether every sum that stage_memory can form from these bytes, with counts of magnitude
// up to `most`, is exact, and so the same in any order and as a running total: the static
// bytes and the terms are finite, non-negative multiples of one power of two 2^e, and
// static + (sum of the terms) x most stays below 2^52 of it. Bytes are whole numbers in
// practice, so e >= 0 and the bound is about 4.5e15 bytes.
bool sums_exact_in_any_order(double static_bytes, const double* bytes, std::size_t n, double most);

// A change of one of a stage's counts (+1 or -1) at a time.
struct CountChange {
  double time;
  std::uint32_t count;  // index into the stage's counts (StageCounts)
  int delta;
};

// What a stage's counts weigh. Counts [0, bytes.size()) are its memory terms, in the
// order of stage_memory's terms, a unit of count i weighing bytes[i]; the counts after
// them hold no memory (micro-batches in flight, the messages waiting on each input).
struct StageCounts {
  double static_bytes = 0;  // always resident
  std::vector<double> bytes;
  std::size_t counts = 0;   // all counts, the memory terms included
};

// A stage's levels replayed from its count changes: the peaks, and where asked, the
// value each level settled at whenever it changed, as (time, value).
struct StageLevels {
  double peak_memory = 0;
  std::vector<double> peak;  // per count
  std::vector<std::pair<double, double>> memory_samples;
  std::vector<std::vector<std::pair<double, double>>> count_samples;  // per count
};

// The levels of a stage from all its count changes (in any order; they are sorted here,
// releases first at equal times, so the peaks are those of the rule above). Memory is
// stage_memory of the counts; with `samples`, the settled values are recorded too.
StageLevels replay_counts(std::vector<CountChange>& changes, const StageCounts& counts, bool samples);

}  // namespace adagrouper::sim
