// Rate forms: trace files {"file": ...} and the table of patterns and transforms
// {"pattern": ...} (docs/formats.md, "Trace files and patterns").
#include "resolver.h"

#include <array>
#include <cstdint>
#include <optional>
#include <stdexcept>
#include <string>
#include <vector>

#include <fmt/format.h>
#include <nlohmann/json.hpp>

#include "detail.h"
#include "error.h"
#include "formats.h"
#include "patterns.h"

namespace adagrouper::traces {

namespace fs = std::filesystem;

namespace {

// Whether `list` (", " between items) holds `key`.
bool lists(std::string_view list, std::string_view key) {
  while (!list.empty()) {
    const std::size_t comma = list.find(", ");
    if (list.substr(0, comma) == key) return true;
    if (comma == std::string_view::npos) break;
    list.remove_prefix(comma + 2);
  }
  return false;
}

// Every key of `f` must be one of `allowed` (", " between them) or "description".
void check_keys(const Field& f, std::string_view what, std::string_view allowed) {
  for (const auto& item : f.json().items()) {
    const std::string& key = item.key();
    if (key == "description" || lists(allowed, key)) continue;
    f.at(key).fail(fmt::format("unknown field for {} (it takes {})", what, allowed));
  }
}

double number_or(const Field& f, std::string_view key, double fallback) {
  return f.has(key) ? f.at(key).number() : fallback;
}

std::uint64_t seed_of(const Field& f) {
  return f.has("seed") ? static_cast<std::uint64_t>(f.at("seed").integer_at_least(0)) : 0;
}

bool bool_or(const Field& f, std::string_view key, bool fallback) {
  return f.has(key) ? f.at(key).boolean() : fallback;
}

std::vector<double> numbers(const Field& f) {
  std::vector<double> out(f.size());
  for (std::size_t i = 0; i < out.size(); ++i) out[i] = f.at(i).number();
  return out;
}

// Runs a generator or transform, turning its exceptions into InputErrors on `f`.
template <class G>
Trace guarded(const Field& f, G&& g) {
  try {
    return g();
  } catch (const ParamError& e) {
    if (f.has(e.field())) f.at(e.field()).fail(e.what());
    f.fail(fmt::format("{}: {}", e.field(), e.what()));
  } catch (const std::length_error&) {
    f.fail(fmt::format("the result would have more than {} points", kMaxPoints));
  } catch (const std::invalid_argument& e) {
    f.fail(e.what());
  }
}

Trace resolve_file(const Field& f, const fs::path& base_dir, int depth) {
  check_keys(f, "a trace file", "file, format, latency_s, rebase, repeat, repeat_s");
  const Field file = f.at("file");
  const std::string name = file.string();
  if (name.empty()) file.fail("must name a trace file");
  const fs::path path = fs::path(name).is_absolute() ? fs::path(name) : base_dir / name;
  LoadOptions opt;
  if (f.has("format")) {
    const std::string fmt_name = f.at("format").string();
    opt.format = format_from_name(fmt_name);
    if (!opt.format) f.at("format").fail(fmt::format("unknown format \"{}\" ({})", fmt_name, format_names()));
  }
  if (f.has("latency_s")) opt.latency_s = f.at("latency_s").non_negative();
  opt.rebase = bool_or(f, "rebase", false);
  std::error_code ec;
  if (!fs::exists(path, ec))
    file.fail(fmt::format("cannot open trace file \"{}\" (looked for {})", name, path.string()));
  Trace t = detail::load_file(path, opt, depth + 1).trace;
  if (f.has("repeat_s") && f.has("repeat")) f.fail("give either \"repeat\" or \"repeat_s\", not both");
  if (f.has("repeat_s")) {
    const double p = f.at("repeat_s").positive();
    return guarded(f, [&] { return repeat(t, p); });
  }
  if (bool_or(f, "repeat", false)) {
    if (!(t.span_s > 0))
      f.at("repeat").fail(fmt::format("{} has no length to repeat (a single point); use \"repeat_s\"", name));
    return guarded(f, [&] { return repeat(t, t.span_s); });
  }
  return t;
}

// --- the patterns: one parse function each, then the table -------------------------

Trace parse_periodic(const Field& f, const RateContext&) {
  Periodic p;
  p.high = f.at("high").number();
  p.low = f.at("low").number();
  p.period_s = f.at("period_s").number();
  p.low_fraction = f.at("low_fraction").number();
  p.phase_s = number_or(f, "phase_s", 0.0);
  return guarded(f, [&] { return make_periodic(p); });
}

Dwell dwell_of(const Field& f) {
  const std::string d = f.string();
  if (d == "exponential") return Dwell::exponential;
  if (d == "lognormal") return Dwell::lognormal;
  f.fail(fmt::format("unknown distribution \"{}\" (exponential or lognormal)", d));
}

bool starts_high(const Field& f) {
  const std::string s = f.string();
  if (s != "high" && s != "low") f.fail(fmt::format("must be \"high\" or \"low\", got \"{}\"", s));
  return s == "high";
}

Trace parse_onoff(const Field& f, const RateContext&) {
  OnOff p;
  p.high = f.at("high").number();
  p.low = f.at("low").number();
  p.mean_high_s = f.at("mean_high_s").number();
  p.mean_low_s = f.at("mean_low_s").number();
  p.duration_s = f.at("duration_s").number();
  if (f.has("distribution")) p.distribution = dwell_of(f.at("distribution"));
  if (f.has("sigma")) {
    if (p.distribution != Dwell::lognormal) f.at("sigma").fail("applies to \"distribution\": \"lognormal\" only");
    p.sigma = f.at("sigma").number();
  }
  p.seed = seed_of(f);
  if (f.has("start")) p.start_high = starts_high(f.at("start"));
  p.repeat = bool_or(f, "repeat", true);
  return guarded(f, [&] { return make_onoff(p); });
}

Trace parse_steps(const Field& f, const RateContext&) {
  Steps p;
  p.levels = numbers(f.at("levels"));
  p.durations_s = numbers(f.at("durations_s"));
  p.repeat = bool_or(f, "repeat", false);
  return guarded(f, [&] { return make_steps(p); });
}

Trace parse_contention(const Field& f, const RateContext&) {
  Contention p;
  p.base = f.at("base").number();
  const auto flows = f.at("flows").integer_at_least(0);
  if (flows > 100000) f.at("flows").fail(fmt::format("must be <= 100000, got {}", flows));
  p.flows = static_cast<int>(flows);
  p.mean_active_s = f.at("mean_active_s").number();
  p.mean_idle_s = f.at("mean_idle_s").number();
  p.duration_s = f.at("duration_s").number();
  p.seed = seed_of(f);
  p.repeat = bool_or(f, "repeat", true);
  return guarded(f, [&] { return make_contention(p); });
}

Trace parse_scale(const Field& f, const RateContext& at) {
  const double factor = f.at("factor").non_negative();
  const Trace of = at.nested(f.at("of"));
  return guarded(f, [&] { return scale(of, factor); });
}

Trace parse_clip(const Field& f, const RateContext& at) {
  std::optional<double> lo, hi;
  if (f.has("min")) lo = f.at("min").non_negative();
  if (f.has("max")) hi = f.at("max").non_negative();
  if (!lo && !hi) f.fail("clip needs \"min\", \"max\" or both");
  if (lo && hi && *lo > *hi) f.at("min").fail(fmt::format("min {} is larger than max {}", *lo, *hi));
  const Trace of = at.nested(f.at("of"));
  return guarded(f, [&] { return clip(of, lo, hi); });
}

Trace parse_shift(const Field& f, const RateContext& at) {
  const double by = f.at("by_s").number();
  std::optional<double> fill;
  if (f.has("fill")) fill = f.at("fill").non_negative();
  const Trace of = at.nested(f.at("of"));
  return guarded(f, [&] { return shift(of, by, fill); });
}

Trace parse_concat(const Field& f, const RateContext& at) {
  const Field parts = f.at("parts");
  if (parts.size() == 0) parts.fail("must list at least one part");
  std::vector<Trace> traces;
  std::vector<double> durations;
  for (std::size_t i = 0; i < parts.size(); ++i) {
    const Field part = parts.at(i);
    part.require_object();
    check_keys(part, "a concat part", "of, duration_s");
    durations.push_back(part.at("duration_s").positive());
    traces.push_back(at.nested(part.at("of")));
  }
  const bool rep = bool_or(f, "repeat", false);
  return guarded(f, [&] { return concat(traces, durations, rep); });
}

Trace parse_min(const Field& f, const RateContext& at) {
  const Field of = f.at("of");
  if (of.size() < 2) of.fail("must list at least two rates");
  std::optional<double> window;
  if (f.has("duration_s")) window = f.at("duration_s").positive();
  if (f.has("repeat") && !window) f.at("repeat").fail("applies with \"duration_s\" only");
  const bool rep = bool_or(f, "repeat", true);
  Trace acc = at.nested(of.at(std::size_t{0}));
  for (std::size_t i = 1; i < of.size(); ++i) {
    const Trace next = at.nested(of.at(i));
    acc = guarded(f, [&] {
      if (window) return min_window(acc, next, *window, rep);
      auto exact = min_exact(acc, next);
      if (!exact)
        throw std::invalid_argument(
            "the minimum of these rates does not repeat from t = 0 (one repeats and another does not, or their "
            "periods have no common multiple within 10,000 periods); give \"duration_s\" to compute it over "
            "[0, duration_s) and repeat that");
      return std::move(*exact);
    });
  }
  return acc;
}

// The shapes and their meaning: docs/formats.md, "Synthetic patterns" and "Transforms".
// clang-format off
constexpr std::array<Pattern, 9> kPatterns{{
  {"periodic", "high, low, period_s, low_fraction, phase_s",
   "high, then low for low_fraction of every period_s; delayed by phase_s", false, parse_periodic},
  {"onoff", "high, low, mean_high_s, mean_low_s, distribution, sigma, seed, duration_s, start, repeat",
   "random stays at high and at low with the given means, over duration_s", false, parse_onoff},
  {"steps", "levels, durations_s, repeat",
   "levels[i] for durations_s[i], one after the other", false, parse_steps},
  {"contention", "base, flows, mean_active_s, mean_idle_s, seed, duration_s, repeat",
   "base / (1 + active background flows); each flow on and off at random", false, parse_contention},
  {"scale", "of, factor", "every value of the rate `of` x factor", true, parse_scale},
  {"clip", "of, min, max", "every value of `of` clamped to [min, max]", true, parse_clip},
  {"concat", "parts, repeat", "parts [{\"of\": RATE, \"duration_s\": D}, ...] one after the other", true, parse_concat},
  {"shift", "of, by_s, fill", "`of` delayed by by_s (fill before it; negative: advanced)", true, parse_shift},
  {"min", "of, duration_s, repeat", "the point-wise minimum of the rates listed in `of`", true, parse_min},
}};
// clang-format on

Trace resolve_pattern(const Field& f, const RateContext& at) {
  const Field name_field = f.at("pattern");
  const std::string name = name_field.string();
  const Pattern* p = find_pattern(name);
  if (!p) name_field.fail(fmt::format("unknown pattern \"{}\" ({})", name, pattern_names()));
  check_keys(f, p->name, fmt::format("pattern, {}", p->keys));
  return p->parse(f, at);
}

}  // namespace

namespace detail {

Trace resolve(const Field& rate, const fs::path& base_dir, int depth) {
  if (depth > kMaxDepth)
    rate.fail(fmt::format("rate forms nest more than {} levels deep (does a trace file refer to itself?)", kMaxDepth));
  rate.require_object();
  if (rate.has("constant") || rate.has("points")) {
    const sim::RateTrace r = *sim::parse_basic_rate(rate);
    return guarded(rate, [&] { return canonical(r); });
  }
  if (rate.has("file")) return resolve_file(rate, base_dir, depth);
  if (rate.has("pattern")) return resolve_pattern(rate, RateContext{base_dir, depth});
  rate.fail(
      "unknown rate form: expected {\"constant\": R}, {\"points\": [[t, R], ...]}, {\"file\": PATH} or "
      "{\"pattern\": NAME, ...}");
}

}  // namespace detail

sim::RateTrace TraceRates::parse(const Field& rate, const fs::path& base_dir) const {
  if (auto basic = sim::parse_basic_rate(rate)) return std::move(*basic);
  return detail::resolve(rate, base_dir, 0).rate;
}

Trace resolve_rate(const Field& rate, const fs::path& base_dir) { return detail::resolve(rate, base_dir, 0); }

Trace parse_rate_spec(const nlohmann::json& spec, const std::string& source, const fs::path& base_dir) {
  return detail::resolve(Field(spec, source), base_dir, 0);
}

Trace RateContext::nested(const Field& rate) const { return detail::resolve(rate, base_dir, depth + 1); }

std::span<const Pattern> patterns() { return kPatterns; }

const Pattern* find_pattern(std::string_view name) {
  for (const Pattern& p : kPatterns)
    if (p.name == name) return &p;
  return nullptr;
}

std::string pattern_names() {
  std::string out;
  for (const Pattern& p : kPatterns) out += fmt::format("{}{}", out.empty() ? "" : ", ", p.name);
  return out;
}

}  // namespace adagrouper::traces
