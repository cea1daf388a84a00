// The synthetic patterns: periodic, random on/off, steps and background-flow contention.
#include "patterns.h"

#include <algorithm>
#include <cmath>
#include <string>
#include <utility>

#include <fmt/format.h>

#include "random.h"

namespace adagrouper::traces {

namespace {

void require(bool ok, const char* field, const std::string& what) {
  if (!ok) throw ParamError(field, what);
}

void rate_param(double v, const char* field) {
  require(std::isfinite(v) && v >= 0, field, fmt::format("must be a finite number >= 0, got {}", v));
  const std::string e = sim::rate_error(v);
  require(e.empty(), field, e);
}

// A period, a duration or a mean stay: > 0, and on the model's time scale.
void positive_param(double v, const char* field) {
  require(std::isfinite(v) && v > 0, field, fmt::format("must be > 0, got {}", v));
  const std::string e = sim::period_error(v);
  require(e.empty(), field, e);
}

void high_low(double high, double low) {
  rate_param(high, "high");
  rate_param(low, "low");
  require(low <= high, "low", fmt::format("low {} is larger than high {}", low, high));
}

// Turns the generators' std::length_error into a ParamError on the field that sets
// the length.
template <class F>
Trace bounded(const char* field, F&& f) {
  try {
    return f();
  } catch (const std::length_error&) {
    throw ParamError(field, fmt::format("the pattern would have more than {} points; shorten {} or lengthen "
                                        "the stays",
                                        kMaxPoints, field));
  }
}

}  // namespace

Trace make_periodic(const Periodic& p) {
  high_low(p.high, p.low);
  positive_param(p.period_s, "period_s");
  require(std::isfinite(p.low_fraction) && p.low_fraction >= 0 && p.low_fraction <= 1, "low_fraction",
          fmt::format("must be in [0, 1], got {}", p.low_fraction));
  require(std::isfinite(p.phase_s), "phase_s", "must be a finite number");
  const std::string phase_error = sim::time_error(std::fabs(p.phase_s));
  require(phase_error.empty(), "phase_s", phase_error);
  const double P = p.period_s;
  TraceBuilder b;
  b.add(0.0, p.low_fraction < 1 ? p.high : p.low);
  if (p.low_fraction > 0 && p.low_fraction < 1) b.add(P - p.low_fraction * P, p.low);
  const Trace base = b.finish(P, P);
  return p.phase_s == 0 ? base : shift(base, p.phase_s);
}

Trace make_onoff(const OnOff& p) {
  high_low(p.high, p.low);
  positive_param(p.mean_high_s, "mean_high_s");
  positive_param(p.mean_low_s, "mean_low_s");
  positive_param(p.duration_s, "duration_s");
  if (p.distribution == Dwell::lognormal)
    require(std::isfinite(p.sigma) && p.sigma > 0 && p.sigma <= 10, "sigma",
            fmt::format("must be in (0, 10], got {}", p.sigma));
  // Expected stays: duration / mean cycle * 2.
  require(p.duration_s / (p.mean_high_s + p.mean_low_s) * 2 < static_cast<double>(kMaxPoints), "duration_s",
          fmt::format("the pattern would have about {:.3g} points, more than {}; shorten duration_s or lengthen "
                      "the stays",
                      p.duration_s / (p.mean_high_s + p.mean_low_s) * 2, kMaxPoints));
  return bounded("duration_s", [&] {
    Rng rng(p.seed);
    TraceBuilder b;
    bool high = p.start_high;
    double t = 0.0;
    std::size_t draws = 0;
    while (t < p.duration_s) {
      // Stays too short to move t (a tiny draw at a large t) still count.
      if (++draws > 4 * kMaxPoints) throw std::length_error("too many stays");
      b.add(t, high ? p.high : p.low);
      const double mean = high ? p.mean_high_s : p.mean_low_s;
      t += p.distribution == Dwell::exponential ? rng.exponential(mean) : rng.lognormal(mean, p.sigma);
      high = !high;
    }
    return b.finish(p.duration_s, p.repeat ? p.duration_s : 0.0);
  });
}

Trace make_steps(const Steps& p) {
  require(!p.levels.empty(), "levels", "must list at least one level");
  require(p.levels.size() == p.durations_s.size(), "durations_s",
          fmt::format("must have one duration per level ({} levels, {} durations)", p.levels.size(),
                      p.durations_s.size()));
  TraceBuilder b;
  double t = 0.0;
  for (std::size_t i = 0; i < p.levels.size(); ++i) {
    const double v = p.levels[i], d = p.durations_s[i];
    require(std::isfinite(v) && v >= 0, "levels", fmt::format("levels[{}]: must be a finite number >= 0, got {}", i, v));
    require(std::isfinite(d) && d > 0, "durations_s", fmt::format("durations_s[{}]: must be > 0, got {}", i, d));
    const std::string level_error = sim::rate_error(v), duration_error = sim::period_error(d);
    require(level_error.empty(), "levels", fmt::format("levels[{}]: {}", i, level_error));
    require(duration_error.empty(), "durations_s", fmt::format("durations_s[{}]: {}", i, duration_error));
    b.add(t, v);
    t += d;
  }
  return b.finish(t, p.repeat ? t : 0.0);
}

Trace make_contention(const Contention& p) {
  rate_param(p.base, "base");
  require(p.flows >= 0 && p.flows <= 100000, "flows", fmt::format("must be in [0, 100000], got {}", p.flows));
  positive_param(p.mean_active_s, "mean_active_s");
  positive_param(p.mean_idle_s, "mean_idle_s");
  positive_param(p.duration_s, "duration_s");
  const double expected = 2.0 * p.flows * p.duration_s / (p.mean_active_s + p.mean_idle_s);
  require(expected < static_cast<double>(kMaxPoints), "duration_s",
          fmt::format("the pattern would have about {:.3g} points, more than {}; shorten duration_s, use fewer "
                      "flows or longer stays",
                      expected, kMaxPoints));
  return bounded("duration_s", [&] {
    Rng rng(p.seed);
    const double p_active = p.mean_active_s / (p.mean_active_s + p.mean_idle_s);
    // Every flow's changes, as (time, +1 / -1); flows are drawn one after the other.
    std::vector<std::pair<double, int>> changes;
    changes.reserve(static_cast<std::size_t>(expected * 1.2) + 16);
    int active = 0;
    for (int f = 0; f < p.flows; ++f) {
      bool on = rng.chance(p_active);
      if (on) ++active;
      // Stays are memoryless, so the residual stay at t = 0 has the same law.
      double t = rng.exponential(on ? p.mean_active_s : p.mean_idle_s);
      while (t < p.duration_s) {
        on = !on;
        changes.emplace_back(t, on ? +1 : -1);
        if (changes.size() > kMaxPoints) throw std::length_error("too many changes");
        t += rng.exponential(on ? p.mean_active_s : p.mean_idle_s);
      }
    }
    std::sort(changes.begin(), changes.end());
    TraceBuilder b;
    b.reserve(changes.size() + 1);
    b.add(0.0, p.base / (1 + active));
    for (const auto& [t, d] : changes) {
      active += d;
      b.add(t, p.base / (1 + active));  // changes at equal times: the last one wins
    }
    return b.finish(p.duration_s, p.repeat ? p.duration_s : 0.0);
  });
}

}  // namespace adagrouper::traces
