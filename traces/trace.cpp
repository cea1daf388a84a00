// Trace, TraceBuilder and the operations on traces: windows (slice, repeat) and transforms.
#include "trace.h"

#include <algorithm>
#include <cmath>
#include <stdexcept>
#include <string>
#include <utility>

#include <fmt/format.h>

namespace adagrouper::traces {

void TraceBuilder::add(double t, double value) {
  if (!std::isfinite(t)) throw std::invalid_argument("time is not a finite number");
  if (!std::isfinite(value)) throw std::invalid_argument("value is not a finite number");
  if (value < 0) throw std::invalid_argument(fmt::format("value must be >= 0, got {}", value));
  if (times_.empty()) {
    if (t != 0.0) throw std::invalid_argument(fmt::format("the first time must be 0, got {}", t));
  } else {
    if (t < times_.back())
      throw std::invalid_argument(fmt::format("time {} goes backwards (after {})", t, times_.back()));
    if (t == times_.back()) {  // the previous piece had zero length
      times_.pop_back();
      values_.pop_back();
    }
  }
  if (!values_.empty() && values_.back() == value) return;
  if (times_.size() >= kMaxPoints)
    throw std::length_error(fmt::format("more than {} points", kMaxPoints));
  times_.push_back(t);
  values_.push_back(value);
}

Trace TraceBuilder::finish(double span_s, double repeat_s) {
  if (times_.empty()) throw std::invalid_argument("empty trace");
  if (repeat_s > 0) {
    while (times_.size() > 1 && times_.back() >= repeat_s) {
      times_.pop_back();
      values_.pop_back();
    }
    span_s = repeat_s;
  } else {
    span_s = std::max(span_s, times_.back());
  }
  Trace out;
  out.rate = sim::RateTrace::piecewise(std::move(times_), std::move(values_), repeat_s);
  out.span_s = span_s;
  times_.clear();
  values_.clear();
  return out;
}

Trace canonical(const sim::RateTrace& rate, std::optional<double> span_s) {
  TraceBuilder b;
  b.reserve(rate.size());
  for (std::size_t i = 0; i < rate.size(); ++i) b.add(rate.times()[i], rate.values()[i]);
  const double span = span_s ? *span_s : (rate.repeat_s() > 0 ? rate.repeat_s() : rate.times().back());
  return b.finish(span, rate.repeat_s());
}

namespace {

void check_window(double from, std::optional<double> to) {
  if (!std::isfinite(from) || from < 0) throw std::invalid_argument(fmt::format("start {} must be >= 0", from));
  if (to && (!std::isfinite(*to) || !(*to > from)))
    throw std::invalid_argument(fmt::format("end {} must be larger than the start {}", *to, from));
}

// Adds the pieces of [from, to) to b, moved by offset - from.
void add_window(TraceBuilder& b, const sim::RateTrace& rate, double from, double to, double offset) {
  for_each_piece(rate, from, to, [&](double t0, double, double v) { b.add(offset + (t0 - from), v); });
}

// Point-wise minimum of two non-repeating traces, into b.
void merge_min(TraceBuilder& b, const sim::RateTrace& x, const sim::RateTrace& y) {
  const auto &xt = x.times(), &xv = x.values(), &yt = y.times(), &yv = y.values();
  std::size_t i = 0, j = 0;  // pieces in force
  b.reserve(xt.size() + yt.size());
  double t = 0.0;
  for (;;) {
    b.add(t, std::min(xv[i], yv[j]));
    const double nx = i + 1 < xt.size() ? xt[i + 1] : sim::kNever;
    const double ny = j + 1 < yt.size() ? yt[j + 1] : sim::kNever;
    t = std::min(nx, ny);
    if (t == sim::kNever) break;
    if (nx == t) ++i;
    if (ny == t) ++j;
  }
}

}  // namespace

Trace slice(const Trace& trace, double from, std::optional<double> to) {
  check_window(from, to);
  if (!to && trace.repeats())
    throw std::invalid_argument("a window of a repeating trace needs an end");
  TraceBuilder b;
  add_window(b, trace.rate, from, to ? *to : sim::kNever, 0.0);
  return b.finish(to ? *to - from : std::max(trace.span_s - from, 0.0));
}

Trace repeat(const Trace& trace, double period_s) {
  check_window(0.0, period_s);
  TraceBuilder b;
  add_window(b, trace.rate, 0.0, period_s, 0.0);
  return b.finish(period_s, period_s);
}

Trace scale(const Trace& trace, double factor) {
  if (!std::isfinite(factor) || factor < 0)
    throw std::invalid_argument(fmt::format("factor must be >= 0, got {}", factor));
  TraceBuilder b;
  const auto& r = trace.rate;
  for (std::size_t i = 0; i < r.size(); ++i) b.add(r.times()[i], r.values()[i] * factor);
  return b.finish(trace.span_s, r.repeat_s());
}

Trace clip(const Trace& trace, std::optional<double> lo, std::optional<double> hi) {
  if (lo && hi && *lo > *hi) throw std::invalid_argument(fmt::format("min {} is larger than max {}", *lo, *hi));
  TraceBuilder b;
  const auto& r = trace.rate;
  for (std::size_t i = 0; i < r.size(); ++i) {
    double v = r.values()[i];
    if (lo) v = std::max(v, *lo);
    if (hi) v = std::min(v, *hi);
    b.add(r.times()[i], v);
  }
  return b.finish(trace.span_s, r.repeat_s());
}

Trace shift(const Trace& trace, double by_s, std::optional<double> fill) {
  if (!std::isfinite(by_s)) throw std::invalid_argument("shift must be a finite number");
  if (const std::string e = sim::time_error(std::fabs(by_s)); !e.empty()) throw std::invalid_argument("shift: " + e);
  const auto& r = trace.rate;
  if (trace.repeats()) {
    const double period = r.repeat_s();
    double start = std::fmod(-by_s, period);
    if (start < 0) start += period;
    if (start >= period) start = 0.0;
    TraceBuilder b;
    add_window(b, r, start, start + period, 0.0);
    return b.finish(period, period);
  }
  if (by_s < 0) return slice(trace, -by_s, std::nullopt);
  TraceBuilder b;
  b.reserve(r.size() + 1);
  b.add(0.0, fill ? *fill : r.values()[0]);
  for (std::size_t i = 0; i < r.size(); ++i) b.add(r.times()[i] + by_s, r.values()[i]);
  return b.finish(trace.span_s + by_s);
}

Trace concat(const std::vector<Trace>& parts, const std::vector<double>& durations_s, bool repeat_all) {
  if (parts.empty()) throw std::invalid_argument("needs at least one part");
  if (parts.size() != durations_s.size()) throw std::invalid_argument("parts and durations differ in number");
  TraceBuilder b;
  double offset = 0.0;
  for (std::size_t i = 0; i < parts.size(); ++i) {
    const double d = durations_s[i];
    if (!std::isfinite(d) || !(d > 0)) throw std::invalid_argument(fmt::format("duration must be > 0, got {}", d));
    if (const std::string e = sim::period_error(d); !e.empty()) throw std::invalid_argument("duration: " + e);
    add_window(b, parts[i].rate, 0.0, d, offset);
    offset += d;
  }
  return b.finish(offset, repeat_all ? offset : 0.0);
}

std::optional<Trace> min_exact(const Trace& a, const Trace& b) {
  if (!a.repeats() && !b.repeats()) {
    TraceBuilder out;
    merge_min(out, a.rate, b.rate);
    return out.finish(std::max(a.span_s, b.span_s));
  }
  // A constant repeats with any period.
  const bool a_const = !a.repeats() && a.size() == 1, b_const = !b.repeats() && b.size() == 1;
  if (a_const && b.repeats()) return min_window(a, b, b.rate.repeat_s(), true);
  if (b_const && a.repeats()) return min_window(a, b, a.rate.repeat_s(), true);
  if (!a.repeats() || !b.repeats()) return std::nullopt;
  const double pa = a.rate.repeat_s(), pb = b.rate.repeat_s();
  // Smallest n with n * pa a whole multiple of pb (to a relative 1e-9).
  double common = 0;
  for (int n = 1; n <= 10000; ++n) {
    const double q = n * pa / pb;
    const double m = std::round(q);
    if (m >= 1 && m <= 10000 && std::fabs(q - m) <= 1e-9 * q) {
      common = n * pa;
      break;
    }
  }
  if (common == 0) return std::nullopt;
  const double pieces = common / pa * static_cast<double>(a.size()) + common / pb * static_cast<double>(b.size());
  if (pieces > static_cast<double>(kMaxPoints))
    throw std::length_error(fmt::format("the common period {} s would need more than {} points", common, kMaxPoints));
  return min_window(a, b, common, true);
}

Trace min_window(const Trace& a, const Trace& b, double window_s, bool repeat_all) {
  check_window(0.0, window_s);
  const Trace sa = slice(a, 0.0, window_s), sb = slice(b, 0.0, window_s);
  TraceBuilder out;
  merge_min(out, sa.rate, sb.rate);
  return out.finish(window_s, repeat_all ? window_s : 0.0);
}

}  // namespace adagrouper::traces
