#include "rate.h"

#include <algorithm>
#include <cmath>
#include <stdexcept>
#include <string>

#include <fmt/format.h>

#include "error.h"

namespace adagrouper::sim {

std::string time_error(double t) {
  if (!(t >= 0)) return fmt::format("{} is negative", t);
  if (t > kMaxTime)
    return fmt::format("{} s is beyond the {} s (2^22 s, 48.5 days) that the model resolves to 1 ns", t, kMaxTime);
  return {};
}

std::string period_error(double p) {
  if (p < kTimeResolution)
    return fmt::format("{} s is shorter than the model's time resolution of 1 ns", p);
  return time_error(p);
}

std::string gap_error(double previous, double t) {
  // Half the resolution: times written to 1 ns (%.9f) are 1 ns apart to within rounding.
  if (t - previous < 0.5 * kTimeResolution)
    return fmt::format("{} is closer than the model's time resolution of 1 ns to the previous time {}", t, previous);
  return {};
}

std::string rate_error(double v) {
  if (!(v >= 0)) return fmt::format("{} is negative", v);
  if (v > 0 && v < kMinRate) return fmt::format("{} is below {}, the smallest rate other than 0", v, kMinRate);
  if (v > kMaxRate) return fmt::format("{} is above {}, the largest rate", v, kMaxRate);
  return {};
}

std::string RateTrace::scale_error() const {
  if (repeat_s_ > 0)
    if (std::string e = period_error(repeat_s_); !e.empty()) return "period " + e;
  if (std::string e = time_error(times_.back()); !e.empty()) return "time " + e;
  for (const double v : values_)
    if (std::string e = rate_error(v); !e.empty()) return "value " + e;
  return {};
}

RateTrace RateTrace::constant(double rate) { return piecewise({0.0}, {rate}, 0.0); }

RateTrace RateTrace::piecewise(std::vector<double> times, std::vector<double> values,
                               double repeat_s) {
  if (times.empty()) throw std::invalid_argument("needs at least one point");
  if (times.size() != values.size()) throw std::invalid_argument("times and values differ in length");
  if (times[0] != 0.0) throw std::invalid_argument("first time must be 0");
  for (std::size_t i = 0; i < times.size(); ++i) {
    if (!std::isfinite(times[i])) throw std::invalid_argument("time is not finite");
    if (i > 0 && !(times[i] > times[i - 1]))
      throw std::invalid_argument("times must be strictly increasing (point " + std::to_string(i) + ")");
    if (!std::isfinite(values[i]) || values[i] < 0)
      throw std::invalid_argument("value must be finite and >= 0 (point " + std::to_string(i) + ")");
  }
  if (!std::isfinite(repeat_s) || repeat_s < 0) throw std::invalid_argument("repeat_s must be >= 0");
  if (repeat_s > 0 && !(repeat_s > times.back()))
    throw std::invalid_argument("repeat_s must be larger than the last time");

  RateTrace t;
  t.times_ = std::move(times);
  t.values_ = std::move(values);
  t.repeat_s_ = repeat_s;
  t.prefix_.resize(t.times_.size());
  t.prefix_[0] = 0.0;
  for (std::size_t i = 1; i < t.times_.size(); ++i)
    t.prefix_[i] = t.prefix_[i - 1] + t.values_[i - 1] * (t.times_[i] - t.times_[i - 1]);
  if (repeat_s > 0)
    t.period_integral_ = t.prefix_.back() + t.values_.back() * (repeat_s - t.times_.back());
  return t;
}

double RateTrace::value_at(double t) const {
  if (repeat_s_ > 0) t -= std::floor(t / repeat_s_) * repeat_s_;
  auto it = std::upper_bound(times_.begin(), times_.end(), t);
  std::size_t i = it == times_.begin() ? 0 : static_cast<std::size_t>(it - times_.begin()) - 1;
  return values_[i];
}

namespace {
// Integral over [0, t] within one period (or the whole line without repeat).
double local_integral(const std::vector<double>& times, const std::vector<double>& values,
                      const std::vector<double>& prefix, double t) {
  auto it = std::upper_bound(times.begin(), times.end(), t);
  std::size_t i = it == times.begin() ? 0 : static_cast<std::size_t>(it - times.begin()) - 1;
  return prefix[i] + values[i] * (t - times[i]);
}
}  // namespace

double RateTrace::integral(double t0, double t1) const {
  auto upto = [&](double t) {
    if (t == kNever) {
      return kNever;
    }
    if (repeat_s_ > 0) {
      double k = std::floor(t / repeat_s_);
      return k * period_integral_ + local_integral(times_, values_, prefix_, t - k * repeat_s_);
    }
    return local_integral(times_, values_, prefix_, t);
  };
  if (t1 == kNever) {
    double from = 0;
    if (!zero_forever_after(&from)) return kNever;
    return t0 >= from ? 0.0 : upto(from) - upto(t0);
  }
  return upto(t1) - upto(t0);
}

bool RateTrace::zero_forever_after(double* from) const {
  if (repeat_s_ > 0) {
    if (period_integral_ > 0) return false;
    *from = 0.0;
    return true;
  }
  if (values_.back() > 0) return false;
  std::size_t i = values_.size() - 1;
  while (i > 0 && values_[i - 1] == 0) --i;
  *from = times_[i];
  return true;
}

double RateTrace::finish(double t0, double work) const {
  RateCursor c(*this);
  return c.finish(t0, work);
}

void RateCursor::seek(double t0) {
  const RateTrace& tr = *trace_;
  double local = t0;
  base_ = 0.0;
  if (tr.repeat_s_ > 0) {
    base_ = std::floor(t0 / tr.repeat_s_) * tr.repeat_s_;
    local = t0 - base_;
    if (local >= tr.repeat_s_) {  // rounding at a period boundary
      base_ += tr.repeat_s_;
      local = 0.0;
    }
  }
  auto it = std::upper_bound(tr.times_.begin(), tr.times_.end(), local);
  seg_ = it == tr.times_.begin() ? 0 : static_cast<std::size_t>(it - tr.times_.begin()) - 1;
}

// The common way out of the current segment: the query starts in the next one and ends
// there. Moves the cursor there and returns true in that case (the loop of finish_slow
// would compute the same t0 + work / rate there, after the same moves); else changes nothing.
[[gnu::always_inline]] inline bool RateCursor::next_segment(double t0, double work) {
  const RateTrace& tr = *trace_;
  const std::size_t next = seg_ + 1;
  if (next >= tr.times_.size() || t0 < seg_end_) return false;
  const double end = next + 1 < tr.times_.size() ? base_ + tr.times_[next + 1]
                     : tr.repeat_s_ > 0       ? base_ + tr.repeat_s_
                                              : kNever;
  const double v = tr.values_[next];
  if (!(t0 < end && v > 0 && t0 + work / v <= end)) return false;
  seg_ = next;
  seg_start_ = seg_end_;
  seg_end_ = end;
  rate_ = v;
  prefetch_ahead();
  return true;
}

// A cursor that moved to a new segment will move on into the next ones: the cache line
// after its own (8 times and 8 values ahead) is asked for now, so that the move that
// reaches it does not wait for memory. A pipeline's channels walk their traces
// together, far apart in memory (10,000-point traces on 126 channels: 30 MB); in
// `sim_bench` the moves are one transfer in three.
[[gnu::always_inline]] inline void RateCursor::prefetch_ahead() const {
  const RateTrace& tr = *trace_;
  const std::size_t ahead = std::min(seg_ + 8, tr.times_.size() - 1);
  __builtin_prefetch(&tr.times_[ahead]);
  __builtin_prefetch(&tr.values_[ahead]);
}

void RateCursor::cache() {
  const RateTrace& tr = *trace_;
  seg_start_ = base_ + tr.times_[seg_];
  if (seg_ + 1 < tr.times_.size()) {
    seg_end_ = base_ + tr.times_[seg_ + 1];
  } else {
    seg_end_ = tr.repeat_s_ > 0 ? base_ + tr.repeat_s_ : kNever;
  }
  rate_ = tr.values_[seg_];
}

[[gnu::always_inline]] inline void RateCursor::place(double t0) {
  const RateTrace& tr = *trace_;
  const double period = tr.repeat_s_;
  if (t0 < base_ + tr.times_[seg_]) {
    seek(t0);
  } else if (period > 0 && t0 >= base_ + period) {
    if (t0 >= base_ + 2 * period) {
      seek(t0);
    } else {
      base_ += period;
      seg_ = 0;
    }
  }
  while (seg_ + 1 < tr.times_.size() && t0 >= base_ + tr.times_[seg_ + 1]) ++seg_;
}

double RateCursor::finish_slow(double t0, double work) {
  if (!(work > 0)) return t0;
  const RateTrace& tr = *trace_;
  const std::size_t n = tr.times_.size();
  if (next_segment(t0, work)) return t0 + work / rate_;
  if (n == 1 && tr.repeat_s_ == 0) {  // constant rate
    const double v = tr.values_[0];
    return v > 0 ? t0 + work / v : kNever;
  }
  const double period = tr.repeat_s_;
  place(t0);

  // Skip whole periods: every window of length P holds the same integral.
  if (period > 0) {
    if (tr.period_integral_ <= 0) {
      cache();
      return kNever;
    }
    if (work > tr.period_integral_) {
      double k = std::floor(work / tr.period_integral_);
      if (k * tr.period_integral_ >= work) k -= 1;
      if (k > 0) {
        work -= k * tr.period_integral_;
        t0 += k * period;
        base_ += k * period;
      }
    }
  }

  // After the skip, at most about two periods are left; rounding that swallows a period
  // (a tiny period at a late time) would loop forever instead.
  const std::size_t max_steps = 4 * n + 16;
  double t = t0;
  for (std::size_t step = 0;; ++step) {
    if (step > max_steps)
      throw SimError(fmt::format("a rate trace cannot be followed at t = {} s: rounding swallows its segments "
                                 "(period {} s; past {} s, times resolve less than 1 ns)",
                                 t, period, kMaxTime));
    const double v = tr.values_[seg_];
    double end;
    if (seg_ + 1 < n) {
      end = base_ + tr.times_[seg_ + 1];
    } else if (period > 0) {
      end = base_ + period;
    } else {
      end = kNever;
    }
    if (v > 0) {
      const double done = t + work / v;
      if (done <= end) {  // what cache() would set, from what is at hand
        seg_start_ = base_ + tr.times_[seg_];
        seg_end_ = end;
        rate_ = v;
        prefetch_ahead();
        return done;
      }
      work -= v * (end - t);
    } else if (end == kNever) {
      cache();
      return kNever;
    }
    t = end;
    if (seg_ + 1 < n) {
      ++seg_;
    } else {  // wrap to the next period
      base_ += period;
      seg_ = 0;
    }
  }
}

}  // namespace adagrouper::sim
