// Simulator inputs that more than one suite builds: random rate traces and profile entries.
#pragma once

#include <algorithm>
#include <optional>
#include <vector>

#include "test_util.h"
#include "pipeline.h"
#include "rate.h"

namespace testutil {

// A bandwidth or speed trace of multiples of 1/denom in [lo_units, hi_units]: constant, or
// piecewise (zero segments allowed) with a repeat at probability `repeat_chance`; never
// zero forever.
inline adagrouper::sim::RateTrace random_trace(Rng& rng, int lo_units, int hi_units, double denom,
                                               double repeat_chance) {
  using adagrouper::sim::RateTrace;
  if (rng.chance(0.3)) return RateTrace::constant(rng.dyadic(lo_units, hi_units, denom));
  const int n = rng.range(1, 5);
  std::vector<double> times{0.0}, values;
  for (int i = 1; i < n; ++i) times.push_back(times.back() + rng.dyadic(1, 12, 4));
  for (int i = 0; i < n; ++i) values.push_back(rng.chance(0.3) ? 0.0 : rng.dyadic(lo_units, hi_units, denom));
  double repeat = 0;
  if (rng.chance(repeat_chance)) repeat = times.back() + rng.dyadic(1, 8, 4);
  if (repeat == 0 && values.back() == 0) values.back() = rng.dyadic(lo_units, hi_units, denom);
  if (repeat > 0 && std::all_of(values.begin(), values.end(), [](double v) { return v == 0; }))
    values[0] = rng.dyadic(lo_units, hi_units, denom);
  return RateTrace::piecewise(times, values, repeat);
}

// A profile entry at micro-batch size b: F and B durations, the bytes F keeps, F sends
// and B sends (no split backward).
inline adagrouper::sim::ProfilePoint profile_point(int b, double fwd, double bwd, double act, double out,
                                                   double gout) {
  return {b, fwd, bwd, act, out, gout, std::nullopt, std::nullopt, std::nullopt};
}

}  // namespace testutil
