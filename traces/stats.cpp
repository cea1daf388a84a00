// Time-weighted statistics of a trace over a window, and its preemption episodes.
#include "stats.h"

#include <algorithm>
#include <cmath>
#include <stdexcept>
#include <utility>
#include <vector>

#include <fmt/format.h>

namespace adagrouper::traces {

double weighted_quantile(std::vector<std::pair<double, double>>& sorted_pieces, double total, double p) {
  const double target = p * total;
  double acc = 0.0;
  for (const auto& [v, len] : sorted_pieces) {
    acc += len;
    // A relative tolerance keeps a quantile that falls exactly on a boundary (a 50/50
    // periodic trace's median) on the lower value despite rounding in the sums.
    if (acc >= target * (1 - 1e-12)) return v;
  }
  return sorted_pieces.back().first;
}

TraceStats compute_stats(const Trace& trace, double from, double to, std::optional<double> threshold,
                         double threshold_fraction) {
  if (!std::isfinite(from) || from < 0) throw std::invalid_argument(fmt::format("start {} must be >= 0", from));
  if (!std::isfinite(to) || !(to > from))
    throw std::invalid_argument(fmt::format("the window [{}, {}) is empty", from, to));
  std::vector<std::pair<double, double>> pieces;  // (value, length), in time order
  for_each_piece(trace.rate, from, to, [&](double a, double b, double v) { pieces.emplace_back(v, b - a); });
  TraceStats s;
  s.start_s = from;
  s.end_s = to;
  s.duration_s = to - from;
  s.pieces = pieces.size();
  double total = 0.0, integral = 0.0;
  s.min = pieces.front().first;
  s.max = pieces.front().first;
  for (const auto& [v, len] : pieces) {
    total += len;
    integral += v * len;
    s.min = std::min(s.min, v);
    s.max = std::max(s.max, v);
  }
  s.mean = integral / total;
  s.threshold = threshold ? *threshold : threshold_fraction * s.max;
  double below = 0.0;
  bool in_episode = false;
  for (const auto& [v, len] : pieces) {
    const bool low = v < s.threshold;
    if (low) {
      below += len;
      if (!in_episode) ++s.episodes;
    }
    in_episode = low;
  }
  s.fraction_below = below / total;
  s.mean_episode_s = s.episodes ? below / static_cast<double>(s.episodes) : 0.0;
  std::sort(pieces.begin(), pieces.end());
  s.p5 = weighted_quantile(pieces, total, 0.05);
  s.p50 = weighted_quantile(pieces, total, 0.50);
  s.p95 = weighted_quantile(pieces, total, 0.95);
  return s;
}

nlohmann::json stats_json(std::string_view source, std::string_view format, const Trace& trace, const TraceStats& s) {
  return {
      {"source", source},
      {"format", format},
      {"points", trace.size()},
      {"span_s", trace.span_s},
      {"repeat_s", trace.repeats() ? nlohmann::json(trace.rate.repeat_s()) : nlohmann::json(nullptr)},
      {"start_s", s.start_s},
      {"end_s", s.end_s},
      {"duration_s", s.duration_s},
      {"mean", s.mean},
      {"min", s.min},
      {"max", s.max},
      {"p5", s.p5},
      {"p50", s.p50},
      {"p95", s.p95},
      {"threshold", s.threshold},
      {"fraction_below", s.fraction_below},
      {"episodes", s.episodes},
      {"mean_episode_s", s.mean_episode_s},
  };
}

}  // namespace adagrouper::traces
