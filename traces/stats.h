// Summary statistics of a trace over a window, time-weighted (`adagrouper trace stats`).
#pragma once

#include <cstddef>
#include <optional>
#include <utility>
#include <string_view>
#include <vector>

#include <nlohmann/json.hpp>

#include "trace.h"

namespace adagrouper::traces {

struct TraceStats {
  double start_s = 0, end_s = 0, duration_s = 0;
  std::size_t pieces = 0;  // constant pieces inside the window
  double mean = 0, min = 0, max = 0;
  double p5 = 0, p50 = 0, p95 = 0;  // time-weighted percentiles
  double threshold = 0;             // a rate strictly below it counts as preempted
  double fraction_below = 0;        // share of the window's time below the threshold
  std::size_t episodes = 0;         // maximal stretches below the threshold
  double mean_episode_s = 0;        // their mean length (0 when there is none)
};

// Statistics over [from, to). The threshold is `threshold` if given, else
// threshold_fraction x max. Throws std::invalid_argument for an empty window and
// std::length_error when the window holds more than kMaxPoints pieces.
TraceStats compute_stats(const Trace& trace, double from, double to, std::optional<double> threshold = std::nullopt,
                         double threshold_fraction = 0.5);

// The summary `adagrouper trace stats --json` prints: where the trace came from (its
// source and format), its points, span and period, then the statistics.
nlohmann::json stats_json(std::string_view source, std::string_view format, const Trace& trace, const TraceStats& s);

// The time-weighted p-quantile (0 <= p <= 1) of pieces given as (value, length): the
// smallest value v such that the pieces with values <= v cover at least p of the time.
double weighted_quantile(std::vector<std::pair<double, double>>& sorted_pieces, double total, double p);

}  // namespace adagrouper::traces
