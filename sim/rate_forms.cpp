// The two rate forms the simulator core reads itself, and the reads of the input scale.
#include "rate_forms.h"

#include <stdexcept>
#include <vector>

#include <fmt/format.h>

#include "json_util.h"

namespace adagrouper::sim {

double read_time(const Field& f) {
  const double v = f.non_negative(Quantity::time);
  if (const std::string e = time_error(v); !e.empty()) f.fail(e);
  return v;
}

double read_period(const Field& f) {
  const double v = f.positive(Quantity::time);
  if (const std::string e = period_error(v); !e.empty()) f.fail(e);
  return v;
}

double read_rate(const Field& f) {
  const double v = f.non_negative(Quantity::rate);
  if (const std::string e = rate_error(v); !e.empty()) f.fail(e);
  return v;
}

namespace {

RateTrace parse_points(const Field& rate) {
  rate.check_keys({"points", "repeat_s"}, "a points rate");
  Field pts = rate.at("points");
  if (pts.size() == 0) pts.fail("must list at least one [time, value] point");
  std::vector<double> times, values;
  times.reserve(pts.size());
  values.reserve(pts.size());
  for (std::size_t i = 0; i < pts.size(); ++i) {
    Field p = pts.at(i);
    if (!p.is_array() || p.size() != 2) p.fail("must be a [time, value] pair");
    const double t = read_time(p.at(std::size_t{0}));
    const double v = read_rate(p.at(std::size_t{1}));
    if (i == 0 && t != 0) p.fail(fmt::format("trace times must start at 0, got {}", t));
    if (i > 0 && !(t > times.back()))
      p.fail(fmt::format("trace times must be strictly increasing ({} after {})", t, times.back()));
    if (i > 0)
      if (const std::string e = gap_error(times.back(), t); !e.empty()) p.fail(e);
    times.push_back(t);
    values.push_back(v);
  }
  double repeat = 0;
  if (rate.has("repeat_s")) {
    repeat = read_period(rate.at("repeat_s"));
    if (!(repeat > times.back()))
      rate.at("repeat_s").fail(fmt::format("must be larger than the last point's time {}", times.back()));
    if (const std::string e = gap_error(times.back(), repeat); !e.empty()) rate.at("repeat_s").fail(e);
  }
  try {
    return RateTrace::piecewise(std::move(times), std::move(values), repeat);
  } catch (const std::invalid_argument& e) {
    rate.fail(e.what());
  }
}

}  // namespace

std::optional<RateTrace> parse_basic_rate(const Field& rate) {
  rate.require_object();
  if (rate.has("constant")) {
    rate.check_keys({"constant"}, "a constant rate");
    return RateTrace::constant(read_rate(rate.at("constant")));
  }
  if (rate.has("points")) return parse_points(rate);
  return std::nullopt;
}

RateTrace BasicRates::parse(const Field& rate, const std::filesystem::path&) const {
  if (auto r = parse_basic_rate(rate)) return std::move(*r);
  if (rate.has("file")) rate.fail("rate files need the traces library, which this build does not link");
  rate.fail("unknown rate form: expected {\"constant\": R} or {\"points\": [[t, R], ...]}");
}

}  // namespace adagrouper::sim
