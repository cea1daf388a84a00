// Peaks of a stage's levels from its count changes.
#include "accounting.h"

#include <tuple>

namespace adagrouper::sim {

StagePeaks replay_counts(std::vector<CountChange>& changes, const MemoryTerms& terms,
                         std::vector<std::pair<double, double>>* memory_samples) {
  std::sort(changes.begin(), changes.end(), [](const CountChange& a, const CountChange& b) {
    return std::tie(a.time, a.delta) < std::tie(b.time, b.delta);
  });
  double counts[3] = {0, 0, 0};
  StagePeaks peaks;
  double last_memory = stage_memory(terms, 0, 0, 0);
  peaks.memory = last_memory;
  for (std::size_t i = 0; i < changes.size(); ++i) {
    counts[static_cast<int>(changes[i].count)] += changes[i].delta;
    if (i + 1 < changes.size() && changes[i + 1].time == changes[i].time) continue;  // not settled yet
    const double memory = stage_memory(terms, counts[0], counts[1], counts[2]);
    peaks.memory = std::max(peaks.memory, memory);
    peaks.inflight = std::max(peaks.inflight, counts[0]);
    peaks.forward_depth = std::max(peaks.forward_depth, counts[1]);
    peaks.backward_depth = std::max(peaks.backward_depth, counts[2]);
    if (memory_samples && memory != last_memory) memory_samples->emplace_back(changes[i].time, memory);
    last_memory = memory;
  }
  return peaks;
}

}  // namespace adagrouper::sim
