// `adagrouper trace`: synthesize, import, summarize and cut rate traces (the traces
// library, traces/traces.h; formats in docs/formats.md, "Trace files and patterns").
#include <array>
#include <cmath>
#include <cstdint>
#include <iostream>
#include <optional>
#include <sstream>
#include <string>
#include <string_view>
#include <typeinfo>
#include <vector>

#include <boost/program_options.hpp>
#include <fmt/format.h>
#include <nlohmann/json.hpp>

#include "cli_util.h"
#include "commands.h"
#include "sim.h"
#include "traces.h"

namespace adagrouper::cli {

namespace po = boost::program_options;
namespace tr = adagrouper::traces;

namespace {

constexpr const char* kTraceUsage = R"(Usage: adagrouper trace COMMAND [OPTIONS]   (adagrouper trace COMMAND --help for details)

Rate traces: the bandwidth of a channel (bytes/s) or the speed of a stage over time.
A network file uses them as {"file": PATH} or {"pattern": NAME, ...} (docs/formats.md,
"Trace files and patterns").

Commands:
)";

constexpr const char* kTraceExamples = R"(
Examples:
  adagrouper trace synth periodic --high 2.8e9 --low 0.35e9 --period-s 10 \
      --low-fraction 0.5 --output periodic.json
  adagrouper trace import iperf3-run.json --output link.csv
  adagrouper trace stats link.csv --threshold 1e9
  adagrouper trace slice link.csv --start-time 60 --end-time 120 --output minute.csv
  adagrouper trace import-kineto rank0.json rank1.json --micro-batch-size 2 --output measured.json
)";

constexpr const char* kSynthUsage = R"(Usage: adagrouper trace synth PATTERN [PATTERN OPTIONS] [--output FILE]
                              [--output-format csv|json] [--end-time T]
       adagrouper trace synth --spec JSON [--output FILE] [--output-format csv|json]

Writes a synthetic rate pattern. Random patterns are deterministic for a given --seed
(the same file with any compiler). The pattern options are the keys of the pattern's
JSON form (docs/formats.md, "Synthetic patterns"), with '-' for '_'; lists as 1,2,3.
Rates and times are plain numbers (bytes/s, seconds) or numbers with units (--high
25Gbit/s, --period-s 500ms, --durations-s 1min,30s; docs/formats.md, "Units"):

)";

constexpr const char* kSynthDetails = R"(
The output is the pattern's exact trace: a periodic pattern is one period with
"repeat_s" in JSON (CSV holds one period and says so in a comment). --end-time T writes
[0, T) instead, as a trace that does not repeat. The output format is --output-format,
else the extension of --output (.json: JSON), else CSV.

Examples:
  adagrouper trace synth periodic --high 2.8e9 --low 0.35e9 --period-s 10 \
      --low-fraction 0.4 --output preempted.json
  adagrouper trace synth onoff --high 2.8e9 --low 0.2e9 --mean-high-s 8 --mean-low-s 2 \
      --distribution lognormal --sigma 1 --seed 7 --duration-s 3600 --output bursty.csv
  adagrouper trace synth --spec '{"pattern": "min", "of": [
      {"pattern": "periodic", "high": 2.8e9, "low": 0.35e9, "period_s": 10, "low_fraction": 0.5},
      {"constant": 2e9}]}' --output-format json

Options)";

// The patterns of the table (traces::patterns()), or its transforms ------------------

std::vector<tr::Pattern> patterns_of_kind(bool transforms) {
  std::vector<tr::Pattern> out;
  for (const tr::Pattern& p : tr::patterns())
    if (p.transform == transforms) out.push_back(p);
  return out;
}

// "high, low_fraction" -> "--high --low-fraction".
std::string as_options(std::string_view keys) {
  std::string out = "--";
  for (std::size_t i = 0; i < keys.size(); ++i) {
    if (keys.substr(i, 2) == ", ") {
      out += " --";
      ++i;
    } else {
      out += keys[i] == '_' ? '-' : keys[i];
    }
  }
  return out;
}

// One help row per pattern (or transform): its help, and under it its keys (or the
// trace synth options that give them).
std::string pattern_rows(bool transforms, bool options) {
  struct Row {
    std::string_view name;
    std::string help;
  };
  std::vector<Row> rows;
  for (const tr::Pattern& p : patterns_of_kind(transforms)) {
    const std::string keys = options ? as_options(p.keys) : fmt::format("keys: {}", p.keys);
    rows.push_back({p.name, fmt::format("{}\n{}", p.help, keys)});
  }
  return help_table(rows, 11);
}

std::string synth_help() {
  std::string help = kSynthUsage;
  help += pattern_rows(false, true);
  help += fmt::format("\nTransforms ({}) nest other rates: give them with --spec.\n",
                      join_names(patterns_of_kind(true), ", "));
  help += kSynthDetails;
  return help;
}

constexpr const char* kImportHelp = R"(Usage: adagrouper trace import INPUT [--input-format F] [--latency-s L] [--rebase]
                               [--output FILE] [--output-format csv|json]

Reads a trace file and writes it as the project's JSON or as CSV. The input format is
detected from the content unless --input-format says it:
  csv      time_s,value rows (optional header, # comments, blank lines)
  json     {"unit": "bytes_per_s", "points": [[t, v], ...], "repeat_s": P}, or any
           rate form (constant, pattern, ...)
  iperf3   iperf3 --json output: intervals[].sum bits_per_second -> bytes/s, omitted
           intervals skipped, times relative to the first kept interval
  simgrid  SimGrid profile: "date value" lines, PERIODICITY / LOOPAFTER, # and % comments
  samples  time_s,bytes,duration_s rows of measured transfers: rate = bytes /
           (duration_s - latency), latency from --latency-s
Consecutive equal values are merged. The output format is --output-format, else the
extension of --output (.json: JSON), else CSV.

Examples:
  adagrouper trace import iperf3-run.json --output link.json
  adagrouper trace import calib-samples.csv --input-format samples --latency-s 30e-6 --output link.csv
  adagrouper trace import epoch-times.csv --rebase --output link.csv

Options)";

constexpr const char* kStatsHelp = R"(Usage: adagrouper trace stats INPUT|--spec JSON [--start-time A] [--end-time B]
                              [--threshold R | --threshold-fraction F] [--json]

Time-weighted statistics of a trace over the window [A, B) (default: the trace's
length: its period if it repeats, else up to its last point or the end of the
recording): duration, mean, min, max, p5/p50/p95, the share of time below a threshold,
and the preemption episodes (maximal stretches below the threshold): how many, and
their mean length. The threshold is R, else F x max (default F = 0.5).

Examples:
  adagrouper trace stats traces/data/periodic-50pct-10s.json
  adagrouper trace stats link.csv --start-time 0 --end-time 600 --threshold 1e9 --json
  adagrouper trace stats --spec '{"pattern": "onoff", "high": 1, "low": 0, "mean_high_s": 8,
      "mean_low_s": 2, "seed": 1, "duration_s": 1e5}'

Options)";

constexpr const char* kSliceHelp = R"(Usage: adagrouper trace slice INPUT|--spec JSON --start-time A [--end-time B]
                              [--repeat] [--output FILE] [--output-format csv|json]

Cuts the window [A, B) out of a trace and moves it to start at 0. Without --end-time the
window runs to the end of a trace that does not repeat (its last value then holds as
before). --repeat makes the slice repeat with period B - A. The output format is
--output-format, else the extension of --output (.json: JSON), else CSV.

Examples:
  adagrouper trace slice link.csv --start-time 60 --end-time 120 --output minute.csv
  adagrouper trace slice traces/data/day-drift-25g.json --start-time 28800 --end-time 32400 \
      --repeat --output morning-hour.json

Options)";

// Common options -----------------------------------------------------------------

// The old spellings of the trace commands' options (README, "Options").
constexpr OptionAlias kTraceAliases[] = {{"--format", "--input-format"}, {"--to", "--output-format"},
                                         {"--start-s", "--start-time"},  {"--end-s", "--end-time"},
                                         {"--until-s", "--end-time"}};

void add_input_options(po::options_description& o) {
  // clang-format off
  o.add_options()
    ("input", po::value<std::string>()->value_name("FILE"), "trace file (or the first positional argument)")
    ("spec", po::value<std::string>()->value_name("JSON"), "a rate form given inline instead of a file")
    ("input-format", po::value<std::string>()->value_name("F"), "input format: csv, json, iperf3, simgrid, samples "
                                                          "(default: detected)")
    ("latency-s", po::value<TimeArg>()->value_name("L"),
       with_units("samples: latency subtracted from each duration", Quantity::time).c_str())
    ("rebase", po::bool_switch(), "csv, simgrid: make times relative to the first row");
  // clang-format on
}

void add_output_options(po::options_description& o) {
  // clang-format off
  o.add_options()
    ("output,o", po::value<std::string>()->value_name("FILE"),
       "write here (complete or not at all, never over the input); default, or -: stdout")
    ("output-format", po::value<std::string>()->value_name("csv|json"),
       "output format (default: from --output's extension)");
  // clang-format on
}

struct Input {
  tr::Trace trace;
  std::string source;
  std::string format;  // the format it was read in, or "spec"
};

// --spec JSON as a document.
nlohmann::json spec_option(const po::variables_map& vm) {
  try {
    return nlohmann::json::parse(vm["spec"].as<std::string>());
  } catch (const nlohmann::json::exception& e) {
    throw InputError(fmt::format("--spec: invalid JSON: {}", e.what()));
  }
}

tr::LoadOptions load_options(const po::variables_map& vm) {
  tr::LoadOptions opt;
  if (vm.count("input-format")) {
    const std::string f = vm["input-format"].as<std::string>();
    opt.format = tr::format_from_name(f);
    if (!opt.format)
      throw InputError(fmt::format("--input-format: unknown format \"{}\" ({})", f, tr::format_names()));
  }
  if (vm.count("latency-s")) {
    opt.latency_s = vm["latency-s"].as<TimeArg>().value;
    if (!(opt.latency_s >= 0) || !std::isfinite(opt.latency_s))
      throw InputError(fmt::format("--latency-s: must be >= 0, got {}", opt.latency_s));
  }
  opt.rebase = vm["rebase"].as<bool>();
  return opt;
}

Input read_input(const po::variables_map& vm) {
  const bool has_file = vm.count("input") > 0, has_spec = vm.count("spec") > 0;
  if (has_file == has_spec) throw InputError("give either an input FILE or --spec JSON (one of them)");
  if (has_spec) {
    if (vm.count("input-format") || vm.count("latency-s") || vm["rebase"].as<bool>())
      throw InputError("--input-format, --latency-s and --rebase apply to an input file, not to --spec");
    return {tr::parse_rate_spec(spec_option(vm), "--spec"), "--spec", "spec"};
  }
  const tr::LoadOptions opt = load_options(vm);
  const std::string path = vm["input"].as<std::string>();
  tr::Loaded l = tr::load_trace_file(path, opt);
  return {std::move(l.trace), path, std::string(tr::format_name(l.format))};
}

// "3 points, repeats every 10 s" / "1 point, 0 s long".
std::string shape(const tr::Trace& t) {
  return fmt::format("{} point{}, {}", t.size(), t.size() == 1 ? "" : "s",
                     t.repeats() ? fmt::format("repeats every {} s", t.rate.repeat_s())
                                 : fmt::format("{} s long", t.span_s));
}

// Writes the trace to --output (stdout without it, or with -) in --output-format's format; `source`
// is the input file, which the output may not be.
void write_output(const po::variables_map& vm, const tr::Trace& t, const std::string& source = "") {
  std::string to;
  const std::string out = vm.count("output") ? vm["output"].as<std::string>() : "-";
  if (vm.count("output-format")) {
    to = vm["output-format"].as<std::string>();
    if (to != "csv" && to != "json") throw InputError(fmt::format("--output-format: must be csv or json, got \"{}\"", to));
  } else {
    to = out.size() >= 5 && out.compare(out.size() - 5, 5, ".json") == 0 ? "json" : "csv";
  }
  OutputSet outputs;
  if (!source.empty()) outputs.input("--input", source);
  const std::size_t file = outputs.add("--output", out);
  outputs.write(file, to == "json" ? tr::to_json_text(t) : tr::to_csv(t));
  outputs.commit();
  if (!outputs.has_stdout()) std::cout << fmt::format("wrote {} ({}, {})\n", out, to, shape(t));
}

// Window errors of the library (std::invalid_argument) as input errors on `options`,
// the options that set the window.
template <class F>
auto window_guard(std::string_view options, F&& f) {
  try {
    return f();
  } catch (const std::invalid_argument& e) {
    throw InputError(fmt::format("{}: {}", options, e.what()));
  } catch (const std::length_error&) {
    throw InputError(fmt::format("{}: the window holds more than {} pieces of the trace; narrow it", options,
                                 tr::kMaxPoints));
  }
}

// A window end (--end-time): after `from`, and at most a trace file's length
// (sim::kMaxTime) past it when `bounded` (the result is written as a trace).
double window_end_option(const po::variables_map& vm, const char* name, double from, bool bounded) {
  const double to = time_option(vm, name);
  if (!(to > from)) throw InputError(fmt::format("--{}: must be after the window's start {} s, got {}", name, from, to));
  if (bounded && to - from > sim::kMaxTime)
    throw InputError(fmt::format("--{}: the window would be {} s long, more than the {} s a trace may span", name,
                                 to - from, sim::kMaxTime));
  return to;
}

// synth ----------------------------------------------------------------------------

void add_synth_options(po::options_description& o) {
  // clang-format off
  o.add_options()
    ("help,h", "show this help")
    ("pattern", po::value<std::string>()->value_name("NAME"), "one of the patterns above "
                                                              "(or the first positional argument)")
    ("spec", po::value<std::string>()->value_name("JSON"), "any pattern or transform as JSON, instead of PATTERN")
    ("end-time", po::value<TimeArg>()->value_name("T"),
       with_units("write [0, T) as a trace that does not repeat", Quantity::time).c_str())
    ("high", po::value<RateArg>()->value_name("R"),
       with_units("periodic, onoff: the unpreempted rate", Quantity::rate).c_str())
    ("low", po::value<RateArg>()->value_name("R"),
       with_units("periodic, onoff: the preempted rate (<= high)", Quantity::rate).c_str())
    ("period-s", po::value<TimeArg>()->value_name("P"),
       with_units("periodic: period", Quantity::time).c_str())
    ("low-fraction", po::value<double>()->value_name("F"), "periodic: share of each period at low, in [0, 1]")
    ("phase-s", po::value<TimeArg>()->value_name("D"),
       with_units("periodic: delay of the whole pattern (default 0)", Quantity::time).c_str())
    ("mean-high-s", po::value<TimeArg>()->value_name("S"),
       with_units("onoff: mean stay at high", Quantity::time).c_str())
    ("mean-low-s", po::value<TimeArg>()->value_name("S"),
       with_units("onoff: mean stay at low", Quantity::time).c_str())
    ("distribution", po::value<std::string>()->value_name("D"), "onoff: exponential (default) or lognormal")
    ("sigma", po::value<double>()->value_name("S"), "onoff, lognormal: shape (default 1)")
    ("start", po::value<std::string>()->value_name("high|low"), "onoff: the first state (default high)")
    ("levels", po::value<std::string>()->value_name("L1,L2,..."), "steps: the levels")
    ("durations-s", po::value<std::string>()->value_name("D1,D2,..."), "steps: how long each level lasts")
    ("base", po::value<RateArg>()->value_name("R"),
       with_units("contention: the link's rate with no background flow", Quantity::rate).c_str())
    ("flows", po::value<int>()->value_name("N"), "contention: number of background flows")
    ("mean-active-s", po::value<TimeArg>()->value_name("S"),
       with_units("contention: mean stay of a flow while active", Quantity::time).c_str())
    ("mean-idle-s", po::value<TimeArg>()->value_name("S"),
       with_units("contention: mean stay of a flow while idle", Quantity::time).c_str())
    ("duration-s", po::value<TimeArg>()->value_name("D"),
       with_units("onoff, contention: length generated", Quantity::time).c_str())
    ("seed", po::value<std::uint64_t>()->value_name("N"), "onoff, contention: random seed (default 0)")
    ("repeat", po::value<std::string>()->value_name("true|false"),
       "onoff, contention (default true), steps (default false): repeat past the end");
  // clang-format on
}

// --levels 3,1,2 as [3, 1, 2]; each item a number or a number with a unit of `q`
// ("--levels 25Gbit/s,5Gbit/s", "--durations-s 1min,30s").
nlohmann::json number_list(const std::string& opt, const std::string& text, Quantity q) {
  nlohmann::json list = nlohmann::json::array();
  std::stringstream in(text);
  std::string item;
  while (std::getline(in, item, ',')) {
    try {
      list.push_back(parse_quantity(item, q));
    } catch (const QuantityError& e) {
      throw InputError(fmt::format("--{}: {}", opt, e.what()));
    }
  }
  return list;
}

// The JSON value of a pattern option: its number, true / false for --repeat, a list for
// --levels and --durations-s, else its string.
nlohmann::json option_json(const std::string& opt, const po::variable_value& value) {
  const std::type_info& type = value.value().type();
  if (const std::optional<double> v = option_number(value.value())) return *v + 0.0;  // -0 is 0
  if (type == typeid(int)) return value.as<int>();
  if (type == typeid(std::uint64_t)) return value.as<std::uint64_t>();
  if (opt == "repeat") {
    const std::string b = value.as<std::string>();
    if (b != "true" && b != "false") throw InputError(fmt::format("--repeat: must be true or false, got \"{}\"", b));
    return b == "true";
  }
  if (opt == "levels") return number_list(opt, value.as<std::string>(), Quantity::rate);
  if (opt == "durations-s") return number_list(opt, value.as<std::string>(), Quantity::time);
  return value.as<std::string>();
}

// trace synth PATTERN --KEY VALUE ...: the pattern's JSON form.
nlohmann::json spec_from_options(const po::variables_map& vm) {
  if (!vm.count("pattern"))
    throw InputError(fmt::format("missing PATTERN ({}) or --spec (see adagrouper trace synth --help)",
                                 join_names(patterns_of_kind(false), ", ")));
  const std::string name = vm["pattern"].as<std::string>();
  if (const tr::Pattern* p = tr::find_pattern(name); p && p->transform)
    throw InputError(fmt::format("{} transforms other rates: give it with --spec '{{\"pattern\": \"{}\", ...}}'",
                                 name, name));
  nlohmann::json spec = {{"pattern", name}};
  for (const auto& [opt, value] : vm) {
    if (opt == "pattern" || opt == "end-time" || opt == "output" || opt == "output-format") continue;
    std::string key = opt;
    for (char& c : key)
      if (c == '-') c = '_';
    spec[key] = option_json(opt, value);
  }
  return spec;
}

// trace synth --spec JSON: the document, with no pattern options beside it.
nlohmann::json spec_from_json(const po::variables_map& vm) {
  if (vm.count("pattern")) throw InputError("give either PATTERN with its options or --spec JSON, not both");
  for (const auto& [name, value] : vm)
    if (!value.defaulted() && name != "spec" && name != "end-time" && name != "output" && name != "output-format")
      throw InputError(fmt::format("--{}: with --spec, the pattern's fields go inside the JSON", name));
  return spec_option(vm);
}

int cmd_synth(int argc, char** argv) {
  po::options_description opts(synth_help());
  add_synth_options(opts);
  add_output_options(opts);
  const auto vm = parse_options(argc, argv, opts, "pattern", kTraceAliases);
  if (!vm) return 0;
  const bool inline_spec = vm->count("spec") > 0;
  tr::Trace t = inline_spec ? tr::parse_rate_spec(spec_from_json(*vm), "--spec")
                            : tr::parse_rate_spec(spec_from_options(*vm), "trace synth");
  if (vm->count("end-time")) {
    const double until = window_end_option(*vm, "end-time", 0.0, true);
    t = window_guard("--end-time", [&] { return tr::slice(t, 0.0, until); });
  }
  write_output(*vm, t);
  return 0;
}

// import ---------------------------------------------------------------------------

int cmd_import(int argc, char** argv) {
  po::options_description opts(kImportHelp);
  opts.add_options()("help,h", "show this help");
  add_input_options(opts);
  add_output_options(opts);
  const auto vm = parse_options(argc, argv, opts, "input", kTraceAliases);
  if (!vm) return 0;
  if (vm->count("spec")) throw InputError("import reads a file: give INPUT (use `trace synth --spec` for a rate form)");
  const Input in = read_input(*vm);
  write_output(*vm, in.trace, in.source);
  return 0;
}

// stats ----------------------------------------------------------------------------

void add_stats_options(po::options_description& o) {
  // clang-format off
  o.add_options()
    ("help,h", "show this help")
    ("start-time", po::value<TimeArg>()->default_value(TimeArg{0.0})->value_name("A"),
       with_units("window start", Quantity::time).c_str())
    ("end-time", po::value<TimeArg>()->value_name("B"),
       with_units("window end (default: the trace's length)", Quantity::time).c_str())
    ("threshold", po::value<RateArg>()->value_name("R"),
       with_units("a rate below R counts as preempted", Quantity::rate).c_str())
    ("threshold-fraction", po::value<double>()->default_value(0.5)->value_name("F"),
       "without --threshold: F x the window's max")
    ("json", po::bool_switch(), "print JSON instead of text");
  // clang-format on
}

// --end-time, else the trace's length.
double window_end(const po::variables_map& vm, const Input& in, double from) {
  if (vm.count("end-time")) return window_end_option(vm, "end-time", from, false);
  const double to = in.trace.span_s;
  if (!(to > from))
    throw InputError(fmt::format("--end-time: the trace is {} s long (a single point): give the window's end", to));
  return to;
}

std::optional<double> threshold_option(const po::variables_map& vm) {
  if (!vm.count("threshold")) return std::nullopt;
  const double threshold = vm["threshold"].as<RateArg>().value + 0.0;  // -0 is 0
  if (!std::isfinite(threshold)) throw InputError(fmt::format("--threshold: must be a finite number, got {}", threshold));
  if (!vm["threshold-fraction"].defaulted()) throw InputError("give --threshold or --threshold-fraction, not both");
  return threshold;
}

// Values of a trace with their unit: "2.8e+09 B/s (22.4 Gbit/s)", or a bare multiplier.
std::string values_text(const tr::Trace& t, std::initializer_list<double> values) {
  std::string plain, human;
  for (const double v : values) {
    plain += fmt::format("{}{:.6g}", plain.empty() ? "" : " / ", v);
    human += fmt::format("{}{}", human.empty() ? "" : " / ", format_quantity(v, Quantity::rate));
  }
  return t.factor ? plain + " (factor)" : fmt::format("{} B/s ({})", plain, human);
}

std::string stats_text(const Input& in, const tr::TraceStats& s) {
  std::string out;
  out += fmt::format("trace            {} ({}, {})\n", in.source, in.format, shape(in.trace));
  out += fmt::format("window           [{}, {}) s: {} s, {} pieces\n", s.start_s, s.end_s, s.duration_s, s.pieces);
  out += fmt::format("mean             {}\n", values_text(in.trace, {s.mean}));
  out += fmt::format("min / max        {}\n", values_text(in.trace, {s.min, s.max}));
  out += fmt::format("p5 / p50 / p95   {}\n", values_text(in.trace, {s.p5, s.p50, s.p95}));
  out += fmt::format("below threshold  {:.2f}% of the time, threshold {}\n", 100.0 * s.fraction_below,
                     values_text(in.trace, {s.threshold}));
  out += fmt::format("episodes         {} (mean {:.6g} s)\n", s.episodes, s.mean_episode_s);
  return out;
}

// Statistics are printed only when every one is a number.
void check_finite(const tr::TraceStats& s) {
  for (double v : {s.duration_s, s.mean, s.min, s.max, s.p5, s.p50, s.p95, s.threshold, s.fraction_below,
                   s.mean_episode_s})
    if (!std::isfinite(v))
      throw InputError(fmt::format("--start-time / --end-time: over [{}, {}) s the statistics are not finite numbers; "
                                   "narrow the window",
                                   s.start_s, s.end_s));
}

int cmd_stats(int argc, char** argv) {
  po::options_description opts(kStatsHelp);
  add_stats_options(opts);
  add_input_options(opts);
  const auto parsed = parse_options(argc, argv, opts, "input", kTraceAliases);
  if (!parsed) return 0;
  const po::variables_map& vm = *parsed;
  const double from = time_option(vm, "start-time");
  const std::optional<double> threshold = threshold_option(vm);
  const double fraction = finite_option(vm, "threshold-fraction", 0);
  const Input in = read_input(vm);
  const double to = window_end(vm, in, from);
  const tr::TraceStats s =
      window_guard("--start-time / --end-time",
                   [&] { return tr::compute_stats(in.trace, from, to, threshold, fraction); });
  check_finite(s);
  if (vm["json"].as<bool>()) {
    std::cout << tr::stats_json(in.source, in.format, in.trace, s).dump(2) << '\n';
  } else {
    std::cout << stats_text(in, s);
  }
  return 0;
}

// slice ----------------------------------------------------------------------------

int cmd_slice(int argc, char** argv) {
  po::options_description opts(kSliceHelp);
  // clang-format off
  opts.add_options()
    ("help,h", "show this help")
    ("start-time", po::value<TimeArg>()->value_name("A"),
       with_units("window start (required)", Quantity::time).c_str())
    ("end-time", po::value<TimeArg>()->value_name("B"),
       with_units("window end (default: the end of a trace that does not repeat)", Quantity::time).c_str())
    ("repeat", po::bool_switch(), "make the slice repeat with period B - A");
  // clang-format on
  add_input_options(opts);
  add_output_options(opts);
  const auto parsed = parse_options(argc, argv, opts, "input", kTraceAliases);
  if (!parsed) return 0;
  const po::variables_map& vm = *parsed;
  if (!vm.count("start-time")) throw InputError("--start-time: missing (see adagrouper trace slice --help)");
  const double from = time_option(vm, "start-time");
  std::optional<double> to;
  if (vm.count("end-time")) to = window_end_option(vm, "end-time", from, true);
  const Input in = read_input(vm);
  if (!to && in.trace.repeats())
    throw InputError(fmt::format("--end-time: {} repeats forever: give the window's end", in.source));
  if (vm["repeat"].as<bool>() && !to) throw InputError("--repeat needs --end-time");
  tr::Trace t = window_guard("--start-time / --end-time", [&] { return tr::slice(in.trace, from, to); });
  if (vm["repeat"].as<bool>()) t = window_guard("--end-time", [&] { return tr::repeat(t, *to - from); });
  write_output(vm, t, in.format == "spec" ? "" : in.source);
  return 0;
}

// The subcommands: what runs each, and the list in --help.
struct Subcommand {
  std::string_view name;
  std::string_view help;
  int (*run)(int argc, char** argv);
};
// clang-format off
constexpr std::array<Subcommand, 5> kSubcommands{{
  {"synth", "write a synthetic pattern (one of those below, or any pattern or\n"
            "transform given as JSON) to CSV or JSON", cmd_synth},
  {"import", "read a trace file (CSV, the project's JSON, iperf3 --json, SimGrid\n"
             "profile, transfer samples) and write it as CSV or JSON", cmd_import},
  {"stats", "duration, mean, min, max, p5/p50/p95, time below a threshold, number and\n"
            "mean length of preemption episodes", cmd_stats},
  {"slice", "cut a time window out of a trace", cmd_slice},
  {"import-kineto", "a pipeline file (median F, B, I, W per stage), a stage timing trace\n"
                    "and NCCL transfer samples from PyTorch profiler traces (PP:2F0 ranges)",
   cmd_trace_import_kineto},
}};
// clang-format on

std::string trace_help() {
  std::string help = kTraceUsage;
  help += help_table(kSubcommands, 14);
  help += "\nPatterns ({\"pattern\": NAME, KEY: VALUE, ...}; docs/formats.md, \"Synthetic patterns\"):\n";
  help += pattern_rows(false, false);
  help += "Transforms (of the rates in \"of\"; docs/formats.md, \"Transforms\"):\n";
  help += pattern_rows(true, false);
  help += kTraceExamples;
  return help;
}

}  // namespace

int cmd_trace(int argc, char** argv) {
  if (argc < 2) {
    std::cerr << trace_help();
    return 2;
  }
  const std::string_view sub = argv[1];
  if (sub == "--help" || sub == "-h" || sub == "help") {
    std::cout << trace_help();
    return 0;
  }
  for (const Subcommand& c : kSubcommands)
    if (c.name == sub) return c.run(argc - 1, argv + 1);
  throw InputError(fmt::format("unknown command '{}' ({}; see adagrouper trace --help)", sub,
                               join_names(kSubcommands, ", ")));
}

}  // namespace adagrouper::cli
