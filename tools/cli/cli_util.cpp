// The out-of-line part of cli_util.h: option values, input and output files, and the
// sha256 of an input file, recorded in results.
#include "cli_util.h"

#include <fstream>
#include <sstream>
#include <stdexcept>
#include <vector>

#include <openssl/evp.h>

namespace adagrouper::cli {

namespace po = boost::program_options;

double number_option(const po::variables_map& vm, const char* name) {
  const std::optional<double> v = option_number(vm[name].value());
  if (!v) throw std::logic_error(fmt::format("--{}: not a number option", name));
  return *v;
}

double memory_limit_option(const po::variables_map& vm, std::optional<double> pipeline_limit) {
  if (!vm.count("memory-limit")) return pipeline_limit.value_or(0.0);
  const double limit = number_option(vm, "memory-limit");
  if (!(limit > 0) || !std::isfinite(limit))
    throw InputError(fmt::format("--memory-limit: must be a positive number of bytes, got {}", limit));
  return limit;
}

int int_option(const po::variables_map& vm, const char* name, int lo, int hi) {
  const int v = vm[name].as<int>();
  if (v < lo || v > hi) throw InputError(fmt::format("--{}: must be in {}..{}, got {}", name, lo, hi, v));
  return v;
}

double finite_option(const po::variables_map& vm, const char* name, double lo) {
  const double v = number_option(vm, name) + 0.0;
  if (!(v >= lo) || !std::isfinite(v))
    throw InputError(fmt::format("--{}: must be a finite number >= {}, got {}", name, lo, v));
  return v;
}

double time_option(const po::variables_map& vm, const char* name) {
  const double t = number_option(vm, name) + 0.0;
  if (!(t >= 0) || !(t <= kMaxAbsoluteTime))
    throw InputError(fmt::format("--{}: must be a time in [0, {:.0f}] s (a double resolves 1 us up to there), got {}",
                                 name, kMaxAbsoluteTime, t));
  return t;
}

void input_options(OutputSet& outputs, const po::variables_map& vm, std::initializer_list<const char*> names) {
  for (const char* name : names) {
    if (!vm.count(name)) continue;
    const std::string option = fmt::format("--{}", name);
    if (const auto* many = boost::any_cast<std::vector<std::string>>(&vm[name].value())) {
      for (const std::string& path : *many) outputs.input(option, path);
    } else {
      outputs.input(option, vm[name].as<std::string>());
    }
  }
}

std::optional<std::size_t> output_option(OutputSet& outputs, const po::variables_map& vm, const char* name) {
  if (!vm.count(name)) return std::nullopt;
  return outputs.add(fmt::format("--{}", name), vm[name].as<std::string>());
}

void check_json_stdout(const OutputSet& outputs, const po::variables_map& vm) {
  if (vm.count("json") && vm["json"].as<bool>() && outputs.has_stdout())
    throw InputError(fmt::format("--json: {} - already writes to stdout; give one of them", outputs.stdout_option()));
}

std::string sha256_of(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  if (!in) throw InputError(fmt::format("{}: cannot open file", path));
  std::ostringstream buf;
  buf << in.rdbuf();
  const std::string data = buf.str();
  unsigned char md[EVP_MAX_MD_SIZE];
  unsigned int len = 0;
  if (EVP_Digest(data.data(), data.size(), md, &len, EVP_sha256(), nullptr) != 1)
    throw std::runtime_error(fmt::format("{}: sha256 failed", path));
  std::string hex;
  for (unsigned int i = 0; i < len; ++i) hex += fmt::format("{:02x}", md[i]);
  return hex;
}

}  // namespace adagrouper::cli
