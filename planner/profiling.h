// Channel profiling: the rate that explains a window of measured transfers.
//
// Ada-Grouper measures end-to-end transfer times and averages them; `plan --comm-profile`
// estimates channel rates from measured samples with window_rate, and `adapt`'s
// controller from the transfers of the iterations it ran (docs/model.md section 13).
#pragma once

#include <cstddef>
#include <optional>
#include <span>

namespace adagrouper::planner {

// One measured transfer on a channel: it started at time_s, moved `bytes` and took
// duration_s (latency included).
struct CommSample {
  double time_s = 0, bytes = 0, duration_s = 0;
};

// The moving average over a profiling window: over the last `window` samples,
// sum(bytes) over sum(duration - latency), so that a transfer of the window's average
// size takes the window's average time. Samples must be in time order.
struct WindowRate {
  std::size_t first = 0;   // index of the window's first sample
  std::size_t used = 0;    // samples in the window (min(window, samples))
  double bytes = 0;        // sum of their bytes
  double seconds = 0;      // sum of their durations minus the latency
  // Index of the first sample in the window whose duration is not longer than the
  // latency (no rate explains it alone); measured files reject it, simulated
  // observations of zero-byte messages or latency-only channels have it by nature.
  std::optional<std::size_t> not_longer_than_latency;
  // bytes / seconds: the rate that explains the window; nullopt when the window moved
  // no bytes or took no time beyond the latency (nothing to estimate a rate from).
  std::optional<double> rate() const;
};
WindowRate window_rate(std::span<const CommSample> samples, std::size_t window, double latency_s);

}  // namespace adagrouper::planner
