// The two rate forms the simulator core reads itself.
#include "rate_forms.h"

#include <stdexcept>
#include <vector>

#include <fmt/format.h>

#include "json_util.h"

namespace adagrouper::sim {

namespace {

RateTrace parse_points(const Field& rate) {
  Field pts = rate.at("points");
  if (pts.size() == 0) pts.fail("must list at least one [time, value] point");
  std::vector<double> times, values;
  times.reserve(pts.size());
  values.reserve(pts.size());
  for (std::size_t i = 0; i < pts.size(); ++i) {
    Field p = pts.at(i);
    if (!p.is_array() || p.size() != 2) p.fail("must be a [time, value] pair");
    double t = p.at(std::size_t{0}).non_negative();
    double v = p.at(std::size_t{1}).non_negative();
    if (i == 0 && t != 0) p.fail(fmt::format("trace times must start at 0, got {}", t));
    if (i > 0 && !(t > times.back()))
      p.fail(fmt::format("trace times must be strictly increasing ({} after {})", t, times.back()));
    times.push_back(t);
    values.push_back(v);
  }
  double repeat = 0;
  if (rate.has("repeat_s")) {
    repeat = rate.at("repeat_s").positive();
    if (!(repeat > times.back()))
      rate.at("repeat_s").fail(fmt::format("must be larger than the last point's time {}", times.back()));
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
    if (rate.json().size() != 1) rate.fail("a constant rate has only the field \"constant\"");
    return RateTrace::constant(rate.at("constant").non_negative());
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
