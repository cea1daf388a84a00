// `adagrouper trace`: synthesize, import, summarize and cut rate traces (the traces
// library, traces/traces.h; formats in docs/formats.md, "Trace files and patterns").
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

#include "commands.h"
#include "sim.h"
#include "traces.h"

namespace adagrouper::cli {

namespace po = boost::program_options;
namespace tr = adagrouper::traces;

namespace {

constexpr const char* kTraceHelp = R"(Usage: adagrouper trace COMMAND [OPTIONS]   (adagrouper trace COMMAND --help for details)

Rate traces: the bandwidth of a channel (bytes/s) or the speed of a stage over time.
A network file uses them as {"file": PATH} or {"pattern": NAME, ...} (docs/formats.md,
"Trace files and patterns").

Commands:
  synth    write a synthetic pattern (periodic, onoff, steps, contention, or any
           pattern / transform given as JSON) to CSV or JSON
  import   read a trace file (CSV, the project's JSON, iperf3 --json, SimGrid
           profile, transfer samples) and write it as CSV or JSON
  stats    duration, mean, min, max, p5/p50/p95, time below a threshold, number and
           mean length of preemption episodes
  slice    cut a time window out of a trace

Examples:
  adagrouper trace synth periodic --high 2.8e9 --low 0.35e9 --period-s 10 \
      --low-fraction 0.5 --output periodic.json
  adagrouper trace import iperf3-run.json --output link.csv
  adagrouper trace stats link.csv --threshold 1e9
  adagrouper trace slice link.csv --start-s 60 --end-s 120 --output minute.csv
)";

constexpr const char* kSynthHelp = R"(Usage: adagrouper trace synth PATTERN [PATTERN OPTIONS] [--output FILE] [--to csv|json]
       adagrouper trace synth --spec JSON [--output FILE] [--to csv|json]

Writes a synthetic rate pattern. Random patterns are deterministic for a given --seed
(the same file with any compiler). The pattern options are the fields of the pattern's
JSON form (docs/formats.md), with '-' for '_':

  periodic    --high --low --period-s --low-fraction [--phase-s]
              high for (1 - f) x period, then low for f x period, delayed by phase
  onoff       --high --low --mean-high-s --mean-low-s --duration-s [--distribution
              exponential|lognormal] [--sigma S] [--seed N] [--start high|low]
              [--repeat true|false]: random stays with the given means
  steps       --levels L1,L2,... --durations-s D1,D2,... [--repeat true|false]
  contention  --base --flows N --mean-active-s --mean-idle-s --duration-s [--seed N]
              [--repeat true|false]: base / (1 + active background flows)

Transforms (scale, clip, concat, shift, min) nest other rates: give them with --spec.

The output is the pattern's exact trace: a periodic pattern is one period with
"repeat_s" in JSON (CSV holds one period and says so in a comment). --until-s T writes
[0, T) instead, as a trace that does not repeat. The output format is --to, else the
extension of --output (.json: JSON), else CSV.

Examples:
  adagrouper trace synth periodic --high 2.8e9 --low 0.35e9 --period-s 10 \
      --low-fraction 0.4 --output preempted.json
  adagrouper trace synth onoff --high 2.8e9 --low 0.2e9 --mean-high-s 8 --mean-low-s 2 \
      --distribution lognormal --sigma 1 --seed 7 --duration-s 3600 --output bursty.csv
  adagrouper trace synth --spec '{"pattern": "min", "of": [
      {"pattern": "periodic", "high": 2.8e9, "low": 0.35e9, "period_s": 10, "low_fraction": 0.5},
      {"constant": 2e9}]}' --to json

Options)";

constexpr const char* kImportHelp = R"(Usage: adagrouper trace import INPUT [--format F] [--latency-s L] [--rebase]
                               [--output FILE] [--to csv|json]

Reads a trace file and writes it as the project's JSON or as CSV. The input format is
detected from the content unless --format says it:
  csv      time_s,value rows (optional header, # comments, blank lines)
  json     {"unit": "bytes_per_s", "points": [[t, v], ...], "repeat_s": P}, or any
           rate form (constant, pattern, ...)
  iperf3   iperf3 --json output: intervals[].sum bits_per_second -> bytes/s, omitted
           intervals skipped, times relative to the first kept interval
  simgrid  SimGrid profile: "date value" lines, PERIODICITY / LOOPAFTER, # and % comments
  samples  time_s,bytes,duration_s rows of measured transfers: rate = bytes /
           (duration_s - latency), latency from --latency-s
Consecutive equal values are merged. The output format is --to, else the extension of
--output (.json: JSON), else CSV.

Examples:
  adagrouper trace import iperf3-run.json --output link.json
  adagrouper trace import calib-samples.csv --format samples --latency-s 30e-6 --output link.csv
  adagrouper trace import epoch-times.csv --rebase --output link.csv

Options)";

constexpr const char* kStatsHelp = R"(Usage: adagrouper trace stats INPUT|--spec JSON [--start-s A] [--end-s B]
                              [--threshold R | --threshold-fraction F] [--json]

Time-weighted statistics of a trace over the window [A, B) (default: the trace's
length: its period if it repeats, else up to its last point or the end of the
recording): duration, mean, min, max, p5/p50/p95, the share of time below a threshold,
and the preemption episodes (maximal stretches below the threshold): how many, and
their mean length. The threshold is R, else F x max (default F = 0.5).

Examples:
  adagrouper trace stats traces/data/periodic-50pct-10s.json
  adagrouper trace stats link.csv --start-s 0 --end-s 600 --threshold 1e9 --json
  adagrouper trace stats --spec '{"pattern": "onoff", "high": 1, "low": 0, "mean_high_s": 8,
      "mean_low_s": 2, "seed": 1, "duration_s": 1e5}'

Options)";

constexpr const char* kSliceHelp = R"(Usage: adagrouper trace slice INPUT|--spec JSON --start-s A [--end-s B] [--repeat]
                              [--output FILE] [--to csv|json]

Cuts the window [A, B) out of a trace and moves it to start at 0. Without --end-s the
window runs to the end of a trace that does not repeat (its last value then holds as
before). --repeat makes the slice repeat with period B - A. The output format is --to,
else the extension of --output (.json: JSON), else CSV.

Examples:
  adagrouper trace slice link.csv --start-s 60 --end-s 120 --output minute.csv
  adagrouper trace slice traces/data/day-drift-25g.json --start-s 28800 --end-s 32400 \
      --repeat --output morning-hour.json

Options)";

// Common options -----------------------------------------------------------------

void add_input_options(po::options_description& o) {
  // clang-format off
  o.add_options()
    ("input", po::value<std::string>()->value_name("FILE"), "trace file (or the first positional argument)")
    ("spec", po::value<std::string>()->value_name("JSON"), "a rate form given inline instead of a file")
    ("format", po::value<std::string>()->value_name("F"), "input format: csv, json, iperf3, simgrid, samples "
                                                          "(default: detected)")
    ("latency-s", po::value<double>()->value_name("L"), "samples: latency subtracted from each duration")
    ("rebase", po::bool_switch(), "csv, simgrid: make times relative to the first row");
  // clang-format on
}

void add_output_options(po::options_description& o) {
  // clang-format off
  o.add_options()
    ("output,o", po::value<std::string>()->value_name("FILE"), "write here (complete or not at all); default stdout")
    ("to", po::value<std::string>()->value_name("csv|json"), "output format (default: from --output's extension)");
  // clang-format on
}

struct Input {
  tr::Trace trace;
  std::string source;
  std::string format;  // the format it was read in, or "spec"
};

Input read_input(const po::variables_map& vm) {
  const bool has_file = vm.count("input") > 0, has_spec = vm.count("spec") > 0;
  if (has_file == has_spec) throw InputError("give either an input FILE or --spec JSON (one of them)");
  if (has_spec) {
    if (vm.count("format") || vm.count("latency-s") || vm["rebase"].as<bool>())
      throw InputError("--format, --latency-s and --rebase apply to an input file, not to --spec");
    nlohmann::json doc;
    try {
      doc = nlohmann::json::parse(vm["spec"].as<std::string>());
    } catch (const nlohmann::json::exception& e) {
      throw InputError(fmt::format("--spec: invalid JSON: {}", e.what()));
    }
    return {tr::parse_rate_spec(doc, "--spec"), "--spec", "spec"};
  }
  tr::LoadOptions opt;
  if (vm.count("format")) {
    const std::string f = vm["format"].as<std::string>();
    opt.format = tr::format_from_name(f);
    if (!opt.format) throw InputError(fmt::format("--format: unknown format \"{}\" ({})", f, tr::format_names()));
  }
  if (vm.count("latency-s")) {
    opt.latency_s = vm["latency-s"].as<double>();
    if (!(opt.latency_s >= 0) || !std::isfinite(opt.latency_s))
      throw InputError(fmt::format("--latency-s: must be >= 0, got {}", opt.latency_s));
  }
  opt.rebase = vm["rebase"].as<bool>();
  const std::string path = vm["input"].as<std::string>();
  tr::Loaded l = tr::load_trace_file(path, opt);
  return {std::move(l.trace), path, std::string(tr::format_name(l.format))};
}

void write_output(const po::variables_map& vm, const tr::Trace& t) {
  std::string to;
  const std::string out = vm.count("output") ? vm["output"].as<std::string>() : "";
  if (vm.count("to")) {
    to = vm["to"].as<std::string>();
    if (to != "csv" && to != "json") throw InputError(fmt::format("--to: must be csv or json, got \"{}\"", to));
  } else {
    to = out.size() >= 5 && out.compare(out.size() - 5, 5, ".json") == 0 ? "json" : "csv";
  }
  const std::string text = to == "json" ? tr::to_json_text(t) : tr::to_csv(t);
  if (out.empty()) {
    std::cout << text;
    return;
  }
  write_file_atomic(out, text);
  std::cout << fmt::format("wrote {} ({}, {} point{}, {})\n", out, to, t.size(), t.size() == 1 ? "" : "s",
                           t.repeats() ? fmt::format("repeats every {} s", t.rate.repeat_s())
                                       : fmt::format("{} s long", t.span_s));
}

// Parses argv with the positional INPUT; prints help and returns false on --help.
bool parse(int argc, char** argv, po::options_description& opts, po::variables_map& vm, const char* positional) {
  po::positional_options_description pos;
  if (positional) pos.add(positional, 1);
  po::store(po::command_line_parser(argc, argv).options(opts).positional(pos).run(), vm);
  po::notify(vm);
  if (vm.count("help")) {
    std::cout << opts << '\n';
    return false;
  }
  return true;
}

// Window errors of the library (std::invalid_argument) as input errors on the options.
template <class F>
auto window_guard(F&& f) {
  try {
    return f();
  } catch (const std::invalid_argument& e) {
    throw InputError(fmt::format("--start-s / --end-s: {}", e.what()));
  } catch (const std::length_error&) {
    throw InputError(fmt::format("--start-s / --end-s: the window holds more than {} pieces of the trace; narrow it",
                                 tr::kMaxPoints));
  }
}

// synth ----------------------------------------------------------------------------

int cmd_synth(int argc, char** argv) {
  po::options_description opts(kSynthHelp);
  // clang-format off
  opts.add_options()
    ("help,h", "show this help")
    ("pattern", po::value<std::string>()->value_name("NAME"), "periodic, onoff, steps or contention "
                                                              "(or the first positional argument)")
    ("spec", po::value<std::string>()->value_name("JSON"), "any pattern or transform as JSON, instead of PATTERN")
    ("until-s", po::value<double>()->value_name("T"), "write [0, T) as a trace that does not repeat")
    ("high", po::value<double>()->value_name("R"), "periodic, onoff: the unpreempted rate")
    ("low", po::value<double>()->value_name("R"), "periodic, onoff: the preempted rate (<= high)")
    ("period-s", po::value<double>()->value_name("P"), "periodic: period")
    ("low-fraction", po::value<double>()->value_name("F"), "periodic: share of each period at low, in [0, 1]")
    ("phase-s", po::value<double>()->value_name("D"), "periodic: delay of the whole pattern (default 0)")
    ("mean-high-s", po::value<double>()->value_name("S"), "onoff: mean stay at high")
    ("mean-low-s", po::value<double>()->value_name("S"), "onoff: mean stay at low")
    ("distribution", po::value<std::string>()->value_name("D"), "onoff: exponential (default) or lognormal")
    ("sigma", po::value<double>()->value_name("S"), "onoff, lognormal: shape (default 1)")
    ("start", po::value<std::string>()->value_name("high|low"), "onoff: the first state (default high)")
    ("levels", po::value<std::string>()->value_name("L1,L2,..."), "steps: the levels")
    ("durations-s", po::value<std::string>()->value_name("D1,D2,..."), "steps: how long each level lasts")
    ("base", po::value<double>()->value_name("R"), "contention: the link's rate with no background flow")
    ("flows", po::value<int>()->value_name("N"), "contention: number of background flows")
    ("mean-active-s", po::value<double>()->value_name("S"), "contention: mean stay of a flow while active")
    ("mean-idle-s", po::value<double>()->value_name("S"), "contention: mean stay of a flow while idle")
    ("duration-s", po::value<double>()->value_name("D"), "onoff, contention: length generated")
    ("seed", po::value<std::uint64_t>()->value_name("N"), "onoff, contention: random seed (default 0)")
    ("repeat", po::value<std::string>()->value_name("true|false"),
       "onoff, contention (default true), steps (default false): repeat past the end");
  // clang-format on
  add_output_options(opts);
  po::variables_map vm;
  if (!parse(argc, argv, opts, vm, "pattern")) return 0;

  nlohmann::json spec;
  std::string source;
  if (vm.count("spec")) {
    if (vm.count("pattern")) throw InputError("give either PATTERN with its options or --spec JSON, not both");
    for (const auto& [name, value] : vm)
      if (!value.defaulted() && name != "spec" && name != "until-s" && name != "output" && name != "to")
        throw InputError(fmt::format("--{}: with --spec, the pattern's fields go inside the JSON", name));
    try {
      spec = nlohmann::json::parse(vm["spec"].as<std::string>());
    } catch (const nlohmann::json::exception& e) {
      throw InputError(fmt::format("--spec: invalid JSON: {}", e.what()));
    }
    source = "--spec";
  } else {
    if (!vm.count("pattern"))
      throw InputError("missing PATTERN (periodic, onoff, steps, contention) or --spec (see adagrouper trace synth --help)");
    const std::string name = vm["pattern"].as<std::string>();
    if (name == "scale" || name == "clip" || name == "concat" || name == "shift" || name == "min")
      throw InputError(fmt::format("{} transforms other rates: give it with --spec '{{\"pattern\": \"{}\", ...}}'",
                                   name, name));
    spec = {{"pattern", name}};
    for (const auto& [opt, value] : vm) {
      if (opt == "pattern" || opt == "until-s" || opt == "output" || opt == "to") continue;
      std::string key = opt;
      for (char& c : key)
        if (c == '-') c = '_';
      const auto& v = value.value();
      if (v.type() == typeid(double)) {
        spec[key] = value.as<double>();
      } else if (v.type() == typeid(int)) {
        spec[key] = value.as<int>();
      } else if (v.type() == typeid(std::uint64_t)) {
        spec[key] = value.as<std::uint64_t>();
      } else if (opt == "repeat") {
        const std::string b = value.as<std::string>();
        if (b != "true" && b != "false") throw InputError(fmt::format("--repeat: must be true or false, got \"{}\"", b));
        spec[key] = b == "true";
      } else if (opt == "levels" || opt == "durations-s") {
        nlohmann::json list = nlohmann::json::array();
        std::stringstream in(value.as<std::string>());
        std::string item;
        while (std::getline(in, item, ',')) {
          try {
            std::size_t used = 0;
            const double d = std::stod(item, &used);
            if (item.find_first_not_of(" \t", used) != std::string::npos) throw std::invalid_argument(item);
            list.push_back(d);
          } catch (const std::exception&) {
            throw InputError(fmt::format("--{}: not a number: \"{}\"", opt, item));
          }
        }
        spec[key] = std::move(list);
      } else {
        spec[key] = value.as<std::string>();
      }
    }
    source = "trace synth";
  }
  tr::Trace t = tr::parse_rate_spec(spec, source);
  if (vm.count("until-s")) {
    const double until = vm["until-s"].as<double>();
    if (!(until > 0) || !std::isfinite(until)) throw InputError(fmt::format("--until-s: must be > 0, got {}", until));
    t = window_guard([&] { return tr::slice(t, 0.0, until); });
  }
  write_output(vm, t);
  return 0;
}

// import ---------------------------------------------------------------------------

int cmd_import(int argc, char** argv) {
  po::options_description opts(kImportHelp);
  opts.add_options()("help,h", "show this help");
  add_input_options(opts);
  add_output_options(opts);
  po::variables_map vm;
  if (!parse(argc, argv, opts, vm, "input")) return 0;
  if (vm.count("spec")) throw InputError("import reads a file: give INPUT (use `trace synth --spec` for a rate form)");
  const Input in = read_input(vm);
  write_output(vm, in.trace);
  return 0;
}

// stats ----------------------------------------------------------------------------

std::string describe(const Input& in) {
  const auto& t = in.trace;
  return fmt::format("{} ({}, {} point{}, {})", in.source, in.format, t.size(), t.size() == 1 ? "" : "s",
                     t.repeats() ? fmt::format("repeats every {} s", t.rate.repeat_s())
                                 : fmt::format("{} s long", t.span_s));
}

int cmd_stats(int argc, char** argv) {
  po::options_description opts(kStatsHelp);
  // clang-format off
  opts.add_options()
    ("help,h", "show this help")
    ("start-s", po::value<double>()->default_value(0.0)->value_name("A"), "window start")
    ("end-s", po::value<double>()->value_name("B"), "window end (default: the trace's length)")
    ("threshold", po::value<double>()->value_name("R"), "a rate below R counts as preempted")
    ("threshold-fraction", po::value<double>()->default_value(0.5)->value_name("F"),
       "without --threshold: F x the window's max")
    ("json", po::bool_switch(), "print JSON instead of text");
  // clang-format on
  add_input_options(opts);
  po::variables_map vm;
  if (!parse(argc, argv, opts, vm, "input")) return 0;
  const Input in = read_input(vm);
  const double from = vm["start-s"].as<double>();
  double to = 0;
  if (vm.count("end-s")) {
    to = vm["end-s"].as<double>();
  } else {
    to = in.trace.span_s;
    if (!(to > from))
      throw InputError(fmt::format("--end-s: the trace is {} s long (a single point): give the window's end", to));
  }
  std::optional<double> threshold;
  if (vm.count("threshold")) {
    threshold = vm["threshold"].as<double>();
    if (!std::isfinite(*threshold)) throw InputError("--threshold: must be a finite number");
    if (vm["threshold-fraction"].defaulted() == false)
      throw InputError("give --threshold or --threshold-fraction, not both");
  }
  const double fraction = vm["threshold-fraction"].as<double>();
  if (!(fraction >= 0) || !std::isfinite(fraction))
    throw InputError(fmt::format("--threshold-fraction: must be >= 0, got {}", fraction));
  const tr::TraceStats s = window_guard([&] { return tr::compute_stats(in.trace, from, to, threshold, fraction); });

  if (vm["json"].as<bool>()) {
    nlohmann::json j = {
        {"source", in.source},
        {"format", in.format},
        {"points", in.trace.size()},
        {"span_s", in.trace.span_s},
        {"repeat_s", in.trace.repeats() ? nlohmann::json(in.trace.rate.repeat_s()) : nlohmann::json(nullptr)},
        {"start_s", s.start_s},
        {"end_s", s.end_s},
        {"duration_s", s.duration_s},
        {"mean", s.mean},
        {"min", s.min},
        {"max", s.max},
        {"p5", s.p5},
        {"p50", s.p50},
        {"p95", s.p95},
        {"threshold", s.threshold},
        {"fraction_below", s.fraction_below},
        {"episodes", s.episodes},
        {"mean_episode_s", s.mean_episode_s},
    };
    std::cout << j.dump(2) << '\n';
    return 0;
  }
  std::cout << fmt::format("trace            {}\n", describe(in));
  std::cout << fmt::format("window           [{}, {}) s: {} s, {} pieces\n", s.start_s, s.end_s, s.duration_s, s.pieces);
  std::cout << fmt::format("mean             {:.6g}\n", s.mean);
  std::cout << fmt::format("min / max        {:.6g} / {:.6g}\n", s.min, s.max);
  std::cout << fmt::format("p5 / p50 / p95   {:.6g} / {:.6g} / {:.6g}\n", s.p5, s.p50, s.p95);
  std::cout << fmt::format("below {:<10.6g} {:.2f}% of the time\n", s.threshold, 100.0 * s.fraction_below);
  std::cout << fmt::format("episodes         {} (mean {:.6g} s)\n", s.episodes, s.mean_episode_s);
  return 0;
}

// slice ----------------------------------------------------------------------------

int cmd_slice(int argc, char** argv) {
  po::options_description opts(kSliceHelp);
  // clang-format off
  opts.add_options()
    ("help,h", "show this help")
    ("start-s", po::value<double>()->value_name("A"), "window start (required)")
    ("end-s", po::value<double>()->value_name("B"), "window end (default: the end of a trace that does not repeat)")
    ("repeat", po::bool_switch(), "make the slice repeat with period B - A");
  // clang-format on
  add_input_options(opts);
  add_output_options(opts);
  po::variables_map vm;
  if (!parse(argc, argv, opts, vm, "input")) return 0;
  const Input in = read_input(vm);
  if (!vm.count("start-s")) throw InputError("--start-s: missing (see adagrouper trace slice --help)");
  const double from = vm["start-s"].as<double>();
  std::optional<double> to;
  if (vm.count("end-s")) to = vm["end-s"].as<double>();
  if (!to && in.trace.repeats())
    throw InputError(fmt::format("--end-s: {} repeats forever: give the window's end", in.source));
  if (vm["repeat"].as<bool>() && !to) throw InputError("--repeat needs --end-s");
  tr::Trace t = window_guard([&] { return tr::slice(in.trace, from, to); });
  if (vm["repeat"].as<bool>()) t = window_guard([&] { return tr::repeat(t, *to - from); });
  write_output(vm, t);
  return 0;
}

}  // namespace

int cmd_trace(int argc, char** argv) {
  if (argc < 2) {
    std::cerr << kTraceHelp;
    return 2;
  }
  const std::string_view sub = argv[1];
  if (sub == "--help" || sub == "-h" || sub == "help") {
    std::cout << kTraceHelp;
    return 0;
  }
  if (sub == "synth") return cmd_synth(argc - 1, argv + 1);
  if (sub == "import") return cmd_import(argc - 1, argv + 1);
  if (sub == "stats") return cmd_stats(argc - 1, argv + 1);
  if (sub == "slice") return cmd_slice(argc - 1, argv + 1);
  throw InputError(fmt::format("unknown command '{}' (synth, import, stats, slice; see adagrouper trace --help)", sub));
}

}  // namespace adagrouper::cli
