// Peaks of a stage's levels from its count changes, and when memory sums are exact.
#include "accounting.h"

#include <bit>
#include <cmath>
#include <limits>
#include <tuple>

namespace adagrouper::sim {

bool sums_exact_in_any_order(double static_bytes, const double* bytes, std::size_t n, double most) {
  int e = std::numeric_limits<int>::max();  // the exponent of the smallest unit
  double total = static_bytes;
  for (std::size_t x = 0; x <= n; ++x) {
    const double v = x < n ? bytes[x] : static_bytes;
    if (!std::isfinite(v) || !(v >= 0)) return false;
    if (x < n) total += v * most;
    if (v == 0) continue;
    int exp;
    const double f = std::frexp(v, &exp);  // v = f 2^exp, f in [0.5, 1): f 2^53 is a whole number
    e = std::min(e, exp - 53 + std::countr_zero(static_cast<std::uint64_t>(std::ldexp(f, 53))));
  }
  return e == std::numeric_limits<int>::max() || (std::isfinite(total) && total < std::ldexp(1.0, 52 + e));
}

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
