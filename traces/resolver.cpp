// Rate forms: trace files {"file": ...} and the table of patterns and transforms
// {"pattern": ...} (docs/formats.md, "Trace files and patterns").
#include "resolver.h"

#include <array>
#include <cstdint>
#include <memory>
#include <mutex>
#include <optional>
#include <stdexcept>
#include <string>
#include <system_error>
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

// A time in seconds, or with a unit ("500ms").
double seconds_or(const Field& f, std::string_view key, double fallback) {
  return f.has(key) ? f.at(key).seconds() : fallback;
}

std::uint64_t seed_of(const Field& f) {
  return f.has("seed") ? static_cast<std::uint64_t>(f.at("seed").integer_at_least(0)) : 0;
}

bool bool_or(const Field& f, std::string_view key, bool fallback) {
  return f.has(key) ? f.at(key).boolean() : fallback;
}

// An array of times or rates, each a number or a string with a unit.
std::vector<double> quantities(const Field& f, Quantity q) {
  std::vector<double> out(f.size());
  for (std::size_t i = 0; i < out.size(); ++i) out[i] = f.at(i).quantity(q);
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

// The trace a {"file": ...} form reads, before any repeat; through the cache when there
// is one.
std::shared_ptr<const Trace> file_trace(const Field& f, const fs::path& base_dir, int depth,
                                        detail::TraceCache* cache) {
  f.check_key_list("file, format, latency_s, rebase, repeat, repeat_s", "a trace file");
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
  if (f.has("latency_s")) opt.latency_s = sim::read_time(f.at("latency_s"));
  opt.rebase = bool_or(f, "rebase", false);
  if (f.has("repeat_s") && f.has("repeat")) f.fail("give either \"repeat\" or \"repeat_s\", not both");
  if (f.has("repeat_s")) sim::read_period(f.at("repeat_s"));
  std::error_code ec;
  if (!fs::exists(path, ec))
    file.fail(fmt::format("cannot open trace file \"{}\" (looked for {})", name, path.string()));
  if (cache) return cache->file(path, opt, depth + 1);
  return std::make_shared<const Trace>(detail::load_file(path, opt, depth + 1).trace);
}

// A {"file": ...} form without "repeat" or "repeat_s": its trace is the file's as read.
bool plain_file(const Field& f) {
  return f.is_object() && f.has("file") && !f.has("constant") && !f.has("points") && !f.has("repeat") &&
         !f.has("repeat_s");
}

Trace resolve_file(const Field& f, const fs::path& base_dir, int depth, detail::TraceCache* cache) {
  const std::shared_ptr<const Trace> loaded = file_trace(f, base_dir, depth, cache);
  const Trace& t = *loaded;
  if (f.has("repeat_s")) return guarded(f, [&] { return repeat(t, f.at("repeat_s").seconds()); });
  if (bool_or(f, "repeat", false)) {
    const std::string name = f.at("file").string();
    if (!(t.span_s > 0))
      f.at("repeat").fail(fmt::format("{} has no length to repeat (a single point); use \"repeat_s\"", name));
    if (const std::string e = sim::period_error(t.span_s); !e.empty())
      f.at("repeat").fail(fmt::format("{}: its length {}", name, e));
    return guarded(f, [&] { return repeat(t, t.span_s); });
  }
  return t;
}

// --- the patterns: one parse function each, then the table -------------------------

Trace parse_periodic(const Field& f, const RateContext&) {
  Periodic p;
  p.high = f.at("high").rate();
  p.low = f.at("low").rate();
  p.period_s = f.at("period_s").seconds();
  p.low_fraction = f.at("low_fraction").number();
  p.phase_s = seconds_or(f, "phase_s", 0.0);
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
  p.high = f.at("high").rate();
  p.low = f.at("low").rate();
  p.mean_high_s = f.at("mean_high_s").seconds();
  p.mean_low_s = f.at("mean_low_s").seconds();
  p.duration_s = f.at("duration_s").seconds();
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
  p.levels = quantities(f.at("levels"), Quantity::rate);
  p.durations_s = quantities(f.at("durations_s"), Quantity::time);
  p.repeat = bool_or(f, "repeat", false);
  return guarded(f, [&] { return make_steps(p); });
}

Trace parse_contention(const Field& f, const RateContext&) {
  Contention p;
  p.base = f.at("base").rate();
  const auto flows = f.at("flows").integer_at_least(0);
  if (flows > 100000) f.at("flows").fail(fmt::format("must be <= 100000, got {}", flows));
  p.flows = static_cast<int>(flows);
  p.mean_active_s = f.at("mean_active_s").seconds();
  p.mean_idle_s = f.at("mean_idle_s").seconds();
  p.duration_s = f.at("duration_s").seconds();
  p.seed = seed_of(f);
  p.repeat = bool_or(f, "repeat", true);
  return guarded(f, [&] { return make_contention(p); });
}

Trace parse_scale(const Field& f, const RateContext& at) {
  const double factor = f.at("factor").non_negative();  // the scaled trace is checked as a whole
  const Trace of = at.nested(f.at("of"));
  return guarded(f, [&] { return scale(of, factor); });
}

Trace parse_clip(const Field& f, const RateContext& at) {
  std::optional<double> lo, hi;
  if (f.has("min")) lo = sim::read_rate(f.at("min"));
  if (f.has("max")) hi = sim::read_rate(f.at("max"));
  if (!lo && !hi) f.fail("clip needs \"min\", \"max\" or both");
  if (lo && hi && *lo > *hi) f.at("min").fail(fmt::format("min {} is larger than max {}", *lo, *hi));
  const Trace of = at.nested(f.at("of"));
  return guarded(f, [&] { return clip(of, lo, hi); });
}

Trace parse_shift(const Field& f, const RateContext& at) {
  const double by = f.at("by_s").seconds();
  std::optional<double> fill;
  if (f.has("fill")) fill = sim::read_rate(f.at("fill"));
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
    part.check_key_list("of, duration_s", "a concat part");
    durations.push_back(sim::read_period(part.at("duration_s")));
    traces.push_back(at.nested(part.at("of")));
  }
  const bool rep = bool_or(f, "repeat", false);
  return guarded(f, [&] { return concat(traces, durations, rep); });
}

Trace parse_min(const Field& f, const RateContext& at) {
  const Field of = f.at("of");
  if (of.size() < 2) of.fail("must list at least two rates");
  std::optional<double> window;
  if (f.has("duration_s")) window = sim::read_period(f.at("duration_s"));
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
  f.check_key_list(fmt::format("pattern, {}", p->keys), p->name);
  return p->parse(f, at);
}

// The trace as a whole on the model's scale (rate.h): what the parts' checks cannot see
// (a scale factor that overflows, parts that add up past the longest time).
Trace on_scale(const Field& rate, Trace t) {
  if (const std::string e = t.rate.scale_error(); !e.empty()) rate.fail(e);
  return t;
}

}  // namespace

namespace detail {

Trace resolve(const Field& rate, const fs::path& base_dir, int depth, TraceCache* cache) {
  if (depth > kMaxDepth)
    rate.fail(fmt::format("rate forms nest more than {} levels deep (does a trace file refer to itself?)", kMaxDepth));
  rate.require_object();
  if (rate.has("constant") || rate.has("points")) {
    const sim::RateTrace r = *sim::parse_basic_rate(rate);
    return guarded(rate, [&] { return canonical(r); });
  }
  if (rate.has("file")) return resolve_file(rate, base_dir, depth, cache);
  if (rate.has("pattern")) return resolve_pattern(rate, RateContext{base_dir, depth, cache});
  rate.fail(
      "unknown rate form: expected {\"constant\": R}, {\"points\": [[t, R], ...]}, {\"file\": PATH} or "
      "{\"pattern\": NAME, ...}");
}

std::shared_ptr<const Trace> TraceCache::file(const fs::path& path, const LoadOptions& options, int depth) {
  std::error_code ec;
  const fs::path canon = fs::weakly_canonical(path, ec);
  const std::string key = fmt::format("{}\n{}\n{}\n{}", ec ? path.string() : canon.string(),
                                      options.format ? format_name(*options.format) : "auto", options.latency_s,
                                      options.rebase);
  {
    const std::lock_guard<std::mutex> lock(mutex_);
    if (auto it = files_.find(key); it != files_.end()) return it->second;
  }
  auto loaded = std::make_shared<const Trace>(load_file(path, options, depth, this).trace);
  const std::lock_guard<std::mutex> lock(mutex_);
  return files_.emplace(key, std::move(loaded)).first->second;
}

sim::RatePtr TraceCache::form(const std::string& key, const std::function<sim::RatePtr()>& make) {
  {
    const std::lock_guard<std::mutex> lock(mutex_);
    if (auto it = forms_.find(key); it != forms_.end()) return it->second;
  }
  sim::RatePtr made = make();
  const std::lock_guard<std::mutex> lock(mutex_);
  return forms_.emplace(key, std::move(made)).first->second;
}

}  // namespace detail

TraceRates::TraceRates() : cache_(std::make_shared<detail::TraceCache>()) {}

sim::RateTrace TraceRates::parse(const Field& rate, const fs::path& base_dir) const {
  if (auto basic = sim::parse_basic_rate(rate)) return std::move(*basic);
  return on_scale(rate, detail::resolve(rate, base_dir, 0, cache_.get())).rate;
}

sim::RatePtr TraceRates::parse_shared(const Field& rate, const fs::path& base_dir) const {
  // A speed and a rate with the same form are one trace, unless units make them differ.
  const std::string key = fmt::format("{}\n{}\n{}", base_dir.string(), rate.plain_rates_why(),
                                      rate.json().dump(-1, ' ', false, nlohmann::json::error_handler_t::replace));
  return cache_->form(key, [&]() -> sim::RatePtr {
    if (!plain_file(rate)) return std::make_shared<const sim::RateTrace>(parse(rate, base_dir));
    // The file's trace itself, not a copy: the cache and every channel share it.
    const std::shared_ptr<const Trace> t = file_trace(rate, base_dir, 0, cache_.get());
    if (const std::string e = t->rate.scale_error(); !e.empty()) rate.fail(e);
    return sim::RatePtr(t, &t->rate);
  });
}

Trace resolve_rate(const Field& rate, const fs::path& base_dir) { return on_scale(rate, detail::resolve(rate, base_dir, 0)); }

Trace parse_rate_spec(const nlohmann::json& spec, const std::string& source, const fs::path& base_dir) {
  const Field rate(spec, source);
  return on_scale(rate, detail::resolve(rate, base_dir, 0));
}

Trace RateContext::nested(const Field& rate) const { return detail::resolve(rate, base_dir, depth + 1, cache); }

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
