// Peaks of a stage's levels from its count changes.
#include "accounting.h"

#include <tuple>

namespace adagrouper::sim {

StageLevels replay_counts(std::vector<CountChange>& changes, const StageCounts& sc, bool samples) {
  std::sort(changes.begin(), changes.end(), [](const CountChange& a, const CountChange& b) {
    return std::tie(a.time, a.delta) < std::tie(b.time, b.delta);
  });
  std::vector<double> counts(sc.counts, 0.0), settled(sc.counts, 0.0);
  StageLevels out;
  out.peak.assign(sc.counts, 0.0);
  if (samples) out.count_samples.resize(sc.counts);
  const std::size_t nterms = sc.bytes.size();
  double last_memory = stage_memory(sc.static_bytes, sc.bytes.data(), counts.data(), nterms);
  out.peak_memory = last_memory;
  for (std::size_t i = 0; i < changes.size(); ++i) {
    counts.at(changes[i].count) += changes[i].delta;
    if (i + 1 < changes.size() && changes[i + 1].time == changes[i].time) continue;  // not settled yet
    const double t = changes[i].time;
    const double memory = stage_memory(sc.static_bytes, sc.bytes.data(), counts.data(), nterms);
    out.peak_memory = std::max(out.peak_memory, memory);
    if (samples && memory != last_memory) out.memory_samples.emplace_back(t, memory);
    last_memory = memory;
    for (std::size_t c = 0; c < sc.counts; ++c) {
      out.peak[c] = std::max(out.peak[c], counts[c]);
      if (samples && counts[c] != settled[c]) out.count_samples[c].emplace_back(t, counts[c]);
      settled[c] = counts[c];
    }
  }
  return out;
}

}  // namespace adagrouper::sim
