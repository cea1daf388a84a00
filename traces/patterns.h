// Synthetic preemption patterns. Each generator is deterministic: the random ones draw
// from traces::Rng (std::mt19937_64, sampled by hand), so a seed gives the same trace
// everywhere. The JSON shapes that select them ({"pattern": "periodic", ...}) are the
// pattern table in resolver.cpp (traces::patterns()), described in docs/formats.md.
#pragma once

#include <cstdint>
#include <stdexcept>
#include <string>
#include <utility>
#include <vector>

#include "trace.h"

namespace adagrouper::traces {

// A parameter out of range. `field` names it as in the JSON shape ("low_fraction").
class ParamError : public std::invalid_argument {
 public:
  ParamError(std::string field, const std::string& what) : std::invalid_argument(what), field_(std::move(field)) {}
  const std::string& field() const { return field_; }

 private:
  std::string field_;
};

// High for (1 - low_fraction) * period_s, then low for low_fraction * period_s, over
// and over; the whole pattern delayed by phase_s (value(t) = base(t - phase_s)).
struct Periodic {
  double high = 0, low = 0, period_s = 0, low_fraction = 0, phase_s = 0;
};
Trace make_periodic(const Periodic& p);

enum class Dwell { exponential, lognormal };

// Random alternation of high and low. Each stay (dwell) is drawn independently with the
// given mean: exponential, or log-normal with shape sigma. Covers [0, duration_s); past
// it the generated window repeats (repeat) or the last value holds.
struct OnOff {
  double high = 0, low = 0, mean_high_s = 0, mean_low_s = 0;
  Dwell distribution = Dwell::exponential;
  double sigma = 1.0;  // log-normal shape
  std::uint64_t seed = 0;
  double duration_s = 0;
  bool start_high = true;
  bool repeat = true;
};
Trace make_onoff(const OnOff& p);

// levels[i] for durations_s[i], one after the other; then the sequence repeats
// (repeat) or the last level holds.
struct Steps {
  std::vector<double> levels, durations_s;
  bool repeat = false;
};
Trace make_steps(const Steps& p);

// A link of rate `base` shared fairly with `flows` background flows, each of which
// alternates between active and idle with exponential stays (means mean_active_s,
// mean_idle_s), independently, starting from the stationary state. The trace is
// base / (1 + active flows). Covers [0, duration_s), then repeats or holds.
struct Contention {
  double base = 0;
  int flows = 0;
  double mean_active_s = 0, mean_idle_s = 0;
  std::uint64_t seed = 0;
  double duration_s = 0;
  bool repeat = true;
};
Trace make_contention(const Contention& p);

}  // namespace adagrouper::traces
