// A rate trace together with its natural length, and the operations on it that the
// patterns, the file formats and `adagrouper trace` share.
//
// The simulator only needs sim::RateTrace: a piecewise-constant function of absolute
// time whose last value holds forever, or which repeats [0, P) forever. A recorded or
// generated trace also has a length (a 60 s iperf3 run, a 3600 s synthetic pattern):
// `span_s`. Statistics, slices and exports use it; the simulator does not (past the
// span, the last value holds, or the trace repeats).
#pragma once

#include <cmath>
#include <cstddef>
#include <cstdint>
#include <limits>
#include <optional>
#include <stdexcept>
#include <vector>

#include "rate.h"

namespace adagrouper::traces {

// Most points a single trace may have (loaders and generators stop with an error past
// it, instead of exhausting memory).
inline constexpr std::size_t kMaxPoints = 20'000'000;

struct Trace {
  sim::RateTrace rate = sim::RateTrace::constant(0.0);
  // Natural length: repeat_s for a repeating trace; otherwise the end of the recording
  // or generated window (>= the last point's time; 0 for a constant).
  double span_s = 0.0;
  // Its values are multipliers (a JSON trace with "unit": "factor", a stage speed), not
  // bytes per second.
  bool factor = false;

  bool repeats() const { return rate.repeat_s() > 0; }
  std::size_t size() const { return rate.size(); }
};

// Builds a canonical trace point by point: times must not decrease; a point at the
// time of the previous one replaces it (the previous segment had zero length); a point
// whose value equals the previous value is dropped (it changes nothing). Throws
// std::invalid_argument on a decreasing time or a negative / non-finite value.
class TraceBuilder {
 public:
  void add(double t, double value);
  bool empty() const { return times_.empty(); }
  std::size_t size() const { return times_.size(); }
  double last_time() const { return times_.back(); }
  double last_value() const { return values_.back(); }
  void reserve(std::size_t n) {
    times_.reserve(n);
    values_.reserve(n);
  }
  // span_s: the trace's natural length (raised to the last time if smaller).
  // repeat_s > 0: [0, repeat_s) repeats; points at or after repeat_s are dropped.
  Trace finish(double span_s, double repeat_s = 0.0);

 private:
  std::vector<double> times_, values_;
};

// The canonical form of a trace (equal consecutive values merged); the span of a
// RateTrace without one is repeat_s or the last point's time.
Trace canonical(const sim::RateTrace& rate, std::optional<double> span_s = std::nullopt);

// Calls f(t_begin, t_end, value) for every constant piece of the trace inside
// [from, to), in time order (to may be kNever for a non-repeating trace: the last
// piece then ends at kNever). Stops with std::length_error past max_pieces.
template <class F>
void for_each_piece(const sim::RateTrace& rate, double from, double to, F&& f,
                    std::size_t max_pieces = kMaxPoints);

// The window [from, to) of a trace, moved to start at 0; a non-repeating result whose
// span is to - from. `to` may be omitted for a non-repeating trace: the window then
// runs to the end (span max(span_s - from, 0)) and the last value holds as before.
Trace slice(const Trace& trace, double from, std::optional<double> to);

// slice(trace, 0, period) repeated with that period.
Trace repeat(const Trace& trace, double period_s);

// Element-wise operations; spans and repetition as documented in docs/formats.md.
Trace scale(const Trace& trace, double factor);
Trace clip(const Trace& trace, std::optional<double> lo, std::optional<double> hi);
// new(t) = old(t - by_s). A repeating trace is rotated. A non-repeating one delayed by
// by_s > 0 takes `fill` before by_s (default: its value at 0); by_s < 0 drops the first
// -by_s seconds.
Trace shift(const Trace& trace, double by_s, std::optional<double> fill = std::nullopt);
// Parts placed one after the other, part i covering [0, durations[i]) of its trace.
Trace concat(const std::vector<Trace>& parts, const std::vector<double>& durations_s, bool repeat);
// Point-wise minimum. Exact when neither repeats, when one repeats and the other is a
// constant, or when both repeat with periods that have a common multiple (at most
// 10,000 of either period); otherwise nullopt (the caller asks for a window).
std::optional<Trace> min_exact(const Trace& a, const Trace& b);
// Point-wise minimum over [0, window_s), then repeated (repeat) or held.
Trace min_window(const Trace& a, const Trace& b, double window_s, bool repeat);

// ---------------------------------------------------------------------------------

template <class F>
void for_each_piece(const sim::RateTrace& rate, double from, double to, F&& f, std::size_t max_pieces) {
  const auto& ts = rate.times();
  const auto& vs = rate.values();
  const std::size_t n = ts.size();
  const double period = rate.repeat_s();
  if (!(to > from)) return;
  // The current period is [k * period, (k + 1) * period); base = k * period, computed
  // by multiplication so that long windows do not accumulate rounding.
  double k = 0.0, base = 0.0;
  std::size_t i = 0;
  if (period > 0) {
    k = std::floor(from / period);
    base = k * period;
    if (from - base >= period) base = ++k * period;  // rounding
  }
  {
    const double local = from - base;
    std::size_t lo = 0, hi = n;  // last index with ts[i] <= local
    while (hi - lo > 1) {
      const std::size_t mid = (lo + hi) / 2;
      if (ts[mid] <= local) lo = mid; else hi = mid;
    }
    i = lo;
  }
  // Every step counts, not only the pieces it calls f for: a period that rounding
  // swallows (a tiny one at a late time) makes steps of zero length.
  std::size_t steps = 0, pieces = 0;
  double t = from;
  while (t < to) {
    if (++steps > 2 * max_pieces + 2 * n) throw std::length_error("too many pieces");
    double end;
    if (i + 1 < n) {
      end = base + ts[i + 1];
    } else if (period > 0) {
      end = (k + 1) * period;
    } else {
      end = std::numeric_limits<double>::infinity();
    }
    const double e = end < to ? end : to;
    if (e > t) {
      if (++pieces > max_pieces) throw std::length_error("too many pieces");
      f(t, e, vs[i]);
    }
    t = e;
    if (i + 1 < n) {
      ++i;
    } else if (period > 0) {
      base = ++k * period;
      i = 0;
    } else {
      break;
    }
  }
}

}  // namespace adagrouper::traces
