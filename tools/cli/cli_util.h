// What every adagrouper subcommand does with its options: parse them, print --help,
// and fetch required ones with an error that names the option.
#pragma once

#include <cmath>
#include <iostream>
#include <optional>
#include <string>

#include <boost/program_options.hpp>
#include <fmt/format.h>

#include "error.h"

namespace adagrouper::cli {

// Parses the options; prints the help and returns nullopt when --help was given.
inline std::optional<boost::program_options::variables_map> parse_options(
    int argc, char** argv, const boost::program_options::options_description& opts) {
  namespace po = boost::program_options;
  po::variables_map vm;
  po::store(po::command_line_parser(argc, argv).options(opts).run(), vm);
  po::notify(vm);
  if (vm.count("help")) {
    std::cout << opts << '\n';
    return std::nullopt;
  }
  return vm;
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

// The value of a required option, or an InputError "--NAME: missing (see adagrouper
// COMMAND --help)".
template <typename T = std::string>
T required(const boost::program_options::variables_map& vm, const char* name, const char* command) {
  if (!vm.count(name)) throw InputError(fmt::format("--{}: missing (see adagrouper {} --help)", name, command));
  return vm[name].as<T>();
}

// --memory-limit BYTES if given (a positive finite number), else the pipeline file's
// memory_limit_bytes, else 0 (no limit given).
inline double memory_limit_option(const boost::program_options::variables_map& vm,
                                  std::optional<double> pipeline_limit) {
  if (!vm.count("memory-limit")) return pipeline_limit.value_or(0.0);
  const double limit = vm["memory-limit"].as<double>();
  if (!(limit > 0) || !std::isfinite(limit))
    throw InputError(fmt::format("--memory-limit: must be a positive number of bytes, got {}", limit));
  return limit;
}

// The sha256 of a file's bytes, in hex: recorded next to each input of a plan or an
// adaptive run, so that a result names exactly what it was computed from.
std::string sha256_of(const std::string& path);

}  // namespace adagrouper::cli
