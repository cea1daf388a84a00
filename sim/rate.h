// Rates in time: piecewise-constant traces of a bandwidth (bytes/s) or a compute
// speed (nominal seconds per second), and the one query the simulator needs from
// them: "work started at t0, when is it done?".
//
// A RateTrace is a plain value. A RateCursor walks one trace for one component (a
// channel or a stage) whose queries come with non-decreasing start times; each query
// is then amortized O(1): the cursor only moves forward over the segments that time
// really crosses, and whole periods of a repeating trace are skipped arithmetically.
#pragma once

#include <cstddef>
#include <cstdint>
#include <limits>
#include <string>
#include <vector>

namespace adagrouper::sim {

inline constexpr double kNever = std::numeric_limits<double>::infinity();

// The scale of the model's inputs. Up to 2^22 s (48.5 days) a double tells apart two
// times 1 ns apart, so inputs give times in [0, kMaxTime], periods and gaps between a
// trace's points of at least kTimeResolution, and rates and speeds of 0 or in
// [kMinRate, kMaxRate] (so that bytes / rate and rate x time stay finite).
inline constexpr double kTimeResolution = 1e-9;
inline constexpr double kMaxTime = 4194304.0;  // 2^22 s
inline constexpr double kMinRate = 1e-9;
inline constexpr double kMaxRate = 1e18;

// Why a value cannot be one of an input's times, periods, rates (empty when it can):
// for messages that name the file and the field or line.
std::string time_error(double t);                 // a time or length in [0, kMaxTime]
std::string period_error(double p);               // a period or duration in [kTimeResolution, kMaxTime]
std::string gap_error(double previous, double t);  // t at least kTimeResolution after previous
std::string rate_error(double v);                 // 0, or in [kMinRate, kMaxRate]

class RateTrace {
 public:
  // The constant rate 1 (the default stage speed).
  RateTrace() = default;

  static RateTrace constant(double rate);
  // times[0] must be 0 and times strictly increasing; values >= 0 and finite;
  // repeat_s == 0 means no repetition, else repeat_s > times.back() and [0, repeat_s)
  // repeats forever. Throws std::invalid_argument with a short reason otherwise
  // (loaders turn it into an InputError naming the file and field).
  static RateTrace piecewise(std::vector<double> times, std::vector<double> values,
                             double repeat_s = 0.0);

  const std::vector<double>& times() const { return times_; }
  const std::vector<double>& values() const { return values_; }
  double repeat_s() const { return repeat_s_; }
  std::size_t size() const { return times_.size(); }
  bool is_constant() const { return times_.size() == 1; }

  // Rate in force at absolute time t >= 0.
  double value_at(double t) const;
  // Integral of the rate over [t0, t1], t0 <= t1 (kNever allowed for t1).
  double integral(double t0, double t1) const;
  // First t1 >= t0 with integral(t0, t1) == work; kNever if the rate never supplies
  // it (it stays 0). O(log n) and stateless; RateCursor is the fast path.
  double finish(double t0, double work) const;
  // Whether the rate is 0 from some time on forever (and from when).
  bool zero_forever_after(double* from) const;
  // Why this trace breaks the input scale above (its times, period or values; not the
  // gaps, which generated traces may make finer), or empty.
  std::string scale_error() const;

 private:
  friend class RateCursor;
  std::vector<double> times_{0.0};
  std::vector<double> values_{1.0};
  std::vector<double> prefix_{0.0};  // prefix_[i] = integral over [0, times_[i]]
  double repeat_s_ = 0.0;
  double period_integral_ = 0.0;  // integral over one period (repeating traces)
};

class RateCursor {
 public:
  RateCursor() = default;
  explicit RateCursor(const RateTrace& trace) : trace_(&trace) { cache(); }

  // Same contract as RateTrace::finish. Fast when t0 does not decrease between
  // calls; correct (with a binary search) when it does. The common case, a query that
  // starts and ends inside the cursor's current segment, is answered inline; it needs no
  // test of the rate or the work: with no work t0 + 0 / rate is t0, with rate 0 the work
  // takes forever (done is +inf: past a finite segment's end, and in a last segment that
  // never ends, kNever, finish_slow's answer), and 0 / 0 is NaN, which no comparison passes.
  double finish(double t0, double work) {
    if (t0 >= seg_start_) {
      const double done = t0 + work / rate_;
      if (done <= seg_end_) return done;
    }
    return finish_slow(t0, work);
  }

 private:
  double finish_slow(double t0, double work);
  bool next_segment(double t0, double work);
  void prefetch_ahead() const;
  void seek(double t0);
  void place(double t0);  // on the segment that contains t0; forward moves are amortized
  void cache();  // refresh seg_start_, seg_end_, rate_ from (base_, seg_)

  const RateTrace* trace_ = nullptr;
  std::size_t seg_ = 0;   // segment index within one period
  double base_ = 0.0;     // absolute start of the current period (0 without repeat)
  // The current segment in absolute time, and its rate; an empty interval until the
  // first query.
  double seg_start_ = kNever, seg_end_ = 0.0, rate_ = 0.0;
};

}  // namespace adagrouper::sim
