// What every adagrouper subcommand does with its options: parse them, print --help,
// fetch required ones with an error that names the option, check their values, and
// register the files they name as inputs and outputs of an OutputSet (sim/io.h).
#pragma once

#include <cmath>
#include <cstddef>
#include <initializer_list>
#include <iostream>
#include <optional>
#include <span>
#include <string>
#include <string_view>

#include <boost/program_options.hpp>
#include <fmt/format.h>

#include "error.h"
#include "pipeline.h"  // sim::kMaxIterations
#include "io.h"
#include "option_aliases.h"  // OptionAlias, with_aliases
#include "unit_options.h"    // TimeArg, SizeArg, RateArg

namespace adagrouper::cli {

namespace detail {
// Stores what `parser` parses; prints the help and returns nullopt when --help was given.
inline std::optional<boost::program_options::variables_map> store_options(
    boost::program_options::command_line_parser& parser, const boost::program_options::options_description& opts) {
  namespace po = boost::program_options;
  po::variables_map vm;
  po::store(parser.run(), vm);
  po::notify(vm);
  if (vm.count("help")) {
    std::cout << opts << '\n';
    return std::nullopt;
  }
  return vm;
}
}  // namespace detail

// Parses the options, old spellings in `aliases` taken as their names (option_aliases.h);
// prints the help and returns nullopt when --help was given.
inline std::optional<boost::program_options::variables_map> parse_options(
    int argc, char** argv, const boost::program_options::options_description& opts,
    std::span<const OptionAlias> aliases = {}) {
  boost::program_options::command_line_parser parser(with_aliases(argc, argv, aliases));
  parser.options(opts);
  return detail::store_options(parser, opts);
}

// The same, where the first bare argument is the value of the option `positional`
// ("trace import FILE" for --input FILE).
inline std::optional<boost::program_options::variables_map> parse_options(
    int argc, char** argv, const boost::program_options::options_description& opts, const char* positional,
    std::span<const OptionAlias> aliases = {}) {
  boost::program_options::positional_options_description pos;
  pos.add(positional, 1);
  boost::program_options::command_line_parser parser(with_aliases(argc, argv, aliases));
  parser.options(opts).positional(pos);
  return detail::store_options(parser, opts);
}

// For programs with a main of their own (the benchmarks): parses into vm and returns -1
// to go on; prints the help and returns 0 for --help; prints "PROGRAM: MESSAGE" and
// returns 2 for a bad command line. Use: if (int rc = ...; rc >= 0) return rc;
inline int parse_main_options(int argc, char** argv, const boost::program_options::options_description& opts,
                              const char* program, boost::program_options::variables_map& vm) {
  try {
    auto parsed = parse_options(argc, argv, opts);
    if (!parsed) return 0;
    vm = std::move(*parsed);
  } catch (const boost::program_options::error& e) {
    std::cerr << program << ": " << e.what() << '\n';
    return 2;
  }
  return -1;
}

// The old spellings of the evaluation options of plan and partition (README, "Options").
inline constexpr OptionAlias kEvaluationAliases[] = {{"--eval-iterations", "--iterations"},
                                                     {"--eval-start", "--start-time"}};

// The old spelling of --output-format (sweep, schedule).
inline constexpr OptionAlias kFormatAliases[] = {{"--format", "--output-format"}};

// Columns of --help texts.
inline constexpr std::size_t kHelpWidth = 88;

namespace detail {
// `text` with each line longer than `width` broken at its last blank that fits, and the
// lines after the first indented by `indent` spaces.
inline std::string wrap(std::string_view text, std::size_t width, std::size_t indent) {
  std::string out;
  while (true) {
    std::size_t end = text.find('\n');
    std::string_view line = text.substr(0, end);
    if (line.size() > width) {
      const std::size_t blank = line.rfind(' ', width);
      if (blank != std::string_view::npos && blank > 0) line = line.substr(0, end = blank);
    }
    out += line;
    if (end == std::string_view::npos) return out;
    text.remove_prefix(end + 1);
    out += '\n';
    out.append(indent, ' ');
  }
}
}  // namespace detail

// The rows of a command or choice list in a --help text: "  NAME  HELP" per row, NAME
// padded to `name_width`, HELP's lines (its own line breaks, and more where it would not
// fit in kHelpWidth) under its first. Rows are anything with `name` and `help`.
template <class Rows>
std::string help_table(const Rows& rows, std::size_t name_width) {
  const std::size_t indent = name_width + 3;
  std::string out;
  for (const auto& row : rows)
    out += fmt::format("  {:<{}} {}\n", row.name, name_width, detail::wrap(row.help, kHelpWidth - indent, indent));
  return out;
}

// The `name` of each row, `separator` between them: "synth, import, stats, slice".
template <class Rows>
std::string join_names(const Rows& rows, std::string_view separator) {
  std::string out;
  for (const auto& row : rows) out += fmt::format("{}{}", out.empty() ? "" : separator, row.name);
  return out;
}

// The value of a required option, or an InputError "--NAME: missing (see adagrouper
// COMMAND --help)".
template <typename T = std::string>
T required(const boost::program_options::variables_map& vm, const char* name, const char* command) {
  if (!vm.count(name)) throw InputError(fmt::format("--{}: missing (see adagrouper {} --help)", name, command));
  return vm[name].as<T>();
}

// --memory-limit BYTES (a SizeArg) if given (a positive finite number), else the
// pipeline file's memory_limit_bytes, else 0 (no limit given).
double memory_limit_option(const boost::program_options::variables_map& vm, std::optional<double> pipeline_limit);

// --- values -----------------------------------------------------------------------------

using sim::kMaxIterations;  // most iterations one run may simulate

// The latest absolute time a run may start at (--start-time, --eval-start) and the
// latest end of a trace window: 2^33 s less 10^6 s (about 272 years). Up to 2^33 s a
// double resolves times 1 us apart, so a run of up to 10^6 s from there still is.
inline constexpr double kMaxAbsoluteTime = 8'589'934'592.0 - 1e6;

// The int option --NAME, checked to lie in [lo, hi]: InputError "--NAME: must be in
// LO..HI, got V" otherwise. (Text that is no int at all, or outside int's range, is
// refused by the parser.)
int int_option(const boost::program_options::variables_map& vm, const char* name, int lo, int hi);

// The number the option --NAME holds: a double, a TimeArg, a SizeArg or a RateArg.
double number_option(const boost::program_options::variables_map& vm, const char* name);

// Help text of an option that takes units: "TEXT (units accepted: 40GiB)".
inline std::string with_units(std::string_view text, Quantity q) {
  return fmt::format("{} (units accepted: {})", text, unit_example(q));
}

// The number option --NAME (-0 read as 0), checked to be finite and >= lo.
double finite_option(const boost::program_options::variables_map& vm, const char* name, double lo);

// The time option --NAME (a TimeArg) in seconds: finite, in [0, kMaxAbsoluteTime] (-0
// read as 0).
double time_option(const boost::program_options::variables_map& vm, const char* name);

// --- files ------------------------------------------------------------------------------

// Registers the given options among `names` as input files of `outputs`.
void input_options(OutputSet& outputs, const boost::program_options::variables_map& vm,
                   std::initializer_list<const char*> names);

// Adds --NAME FILE as an output of `outputs` if it is given; its handle.
std::optional<std::size_t> output_option(OutputSet& outputs, const boost::program_options::variables_map& vm,
                                         const char* name);

// Refuses --json when an output already goes to stdout ("-").
void check_json_stdout(const OutputSet& outputs, const boost::program_options::variables_map& vm);

// The sha256 of a file's bytes, in hex: recorded next to each input of a plan or an
// adaptive run, so that a result names exactly what it was computed from.
std::string sha256_of(const std::string& path);

}  // namespace adagrouper::cli
