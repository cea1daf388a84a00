// Channel profiling: the moving-average rate of a window of measured transfers.
#include "profiling.h"

#include <cmath>

namespace adagrouper::planner {

std::optional<double> WindowRate::rate() const {
  if (!(bytes > 0) || !(seconds > 0)) return std::nullopt;
  const double r = bytes / seconds;
  if (!std::isfinite(r)) return std::nullopt;
  return r;
}

WindowRate window_rate(std::span<const CommSample> samples, std::size_t window, double latency_s) {
  WindowRate w;
  w.first = samples.size() > window ? samples.size() - window : 0;
  w.used = samples.size() - w.first;
  for (std::size_t i = w.first; i < samples.size(); ++i) {
    const CommSample& x = samples[i];
    if (!w.not_longer_than_latency && !(x.duration_s > latency_s)) w.not_longer_than_latency = i;
    w.bytes += x.bytes;
    w.seconds += x.duration_s - latency_s;
  }
  return w;
}

}  // namespace adagrouper::planner
