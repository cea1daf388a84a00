// `adagrouper compare`: how far a prediction is from a measurement (sim/compare.h).
#include <filesystem>
#include <fstream>
#include <iostream>
#include <optional>
#include <sstream>
#include <string>
#include <utility>
#include <vector>

#include <boost/program_options.hpp>
#include <fmt/format.h>

#include "cli_util.h"
#include "commands.h"
#include "compare.h"
#include "json_util.h"
#include "sim.h"

namespace adagrouper::cli {

namespace po = boost::program_options;

namespace {

constexpr const char* kCompareHelp = R"(Usage: adagrouper compare --predicted SIM.json --measured RUN.json
                          [--pair SIM.json=RUN.json ...] [--pairs LIST]
                          [--chosen INDEX | --plan PLAN.json] [--fail-above PCT]
                          [--json] [--output FILE]

Compares what the simulator predicted with what a real run measured. Both files are
summary JSON: `adagrouper simulate --output` writes the prediction and
`adagrouper-calib replay` the measurement, with the same fields. For each (predicted,
measured) pair of the same run (same schedule, k, micro-batch size, M and stages) it
reports the error of every iteration, (predicted - measured) / measured, so positive
means the simulator is slower than reality; the mean absolute percentage error
(MAPE) over the iterations; the error of the mean iteration time; and per stage the
busy and bubble time per iteration, predicted and measured.

Given two or more pairs (one per candidate plan, replayed under the same conditions),
it also says whether the predicted ranking holds: Kendall tau-b and pairwise agreement
of the mean iteration times, whether the predicted-best candidate is the fastest
measured (and by how much it is slower if not), and the same for the planner's pick
(--chosen, or --plan to find the plan's chosen candidate among the pairs).

Inputs:
  summary JSON   docs/formats.md "Summary JSON"
  LIST           one pair a line: PREDICTED MEASURED (paths relative to the list's
                 directory); blank lines and # comments are skipped
Output: a table on stdout, or with --json the compare JSON (schema
adagrouper.compare/1, docs/formats.md "Compare JSON"); --output writes the JSON.
Exit status: 0 ok, 2 bad input, 1 when --fail-above is exceeded or on other failures.

Examples:
  adagrouper compare --predicted sim.json --measured run.json
  adagrouper compare --pair p0.json=m0.json --pair p1.json=m1.json --plan plan.json --json

Options)";

std::pair<std::string, std::string> split_pair(const std::string& spec) {
  const auto eq = spec.find('=');
  if (eq == std::string::npos || eq == 0 || eq + 1 == spec.size() || spec.find('=', eq + 1) != std::string::npos)
    throw InputError(fmt::format("--pair: '{}' is not PREDICTED=MEASURED", spec));
  return {spec.substr(0, eq), spec.substr(eq + 1)};
}

std::vector<std::pair<std::string, std::string>> read_list(const std::string& path) {
  std::ifstream in(path);
  if (!in) throw InputError(fmt::format("{}: cannot open file", path));
  const std::filesystem::path dir = std::filesystem::path(path).parent_path();
  std::vector<std::pair<std::string, std::string>> out;
  std::string line;
  int lineno = 0;
  while (std::getline(in, line)) {
    ++lineno;
    if (!line.empty() && line.back() == '\r') line.pop_back();
    const auto first = line.find_first_not_of(" \t");
    if (first == std::string::npos || line[first] == '#') continue;
    std::istringstream fields(line);
    std::string p, m, extra;
    fields >> p >> m;
    if (m.empty() || (fields >> extra))
      throw InputError(fmt::format("{}:{}: expected two paths, PREDICTED MEASURED", path, lineno));
    auto resolve = [&](const std::string& x) {
      return std::filesystem::path(x).is_absolute() ? x : (dir / x).string();
    };
    out.emplace_back(resolve(p), resolve(m));
  }
  if (out.empty()) throw InputError(fmt::format("{}: no pairs", path));
  return out;
}

// The index of the pair whose candidate is the plan's chosen one.
int chosen_from_plan(const std::string& path, const std::vector<sim::Comparison>& cs) {
  const nlohmann::json doc = read_json_file(path);
  const Field chosen = Field(doc, path).at("chosen");
  const std::string schedule = chosen.at("schedule").string();
  const auto k = chosen.at("k").integer();
  const auto b = chosen.at("micro_batch_size").integer();
  const auto v = chosen.has("virtual_stages") ? chosen.at("virtual_stages").integer() : 1;
  for (std::size_t i = 0; i < cs.size(); ++i)
    if (cs[i].schedule == schedule && cs[i].k == k && cs[i].micro_batch_size == b && cs[i].virtual_stages == v)
      return static_cast<int>(i);
  throw InputError(fmt::format("{}: chosen: {} k={} v={} b={} is none of the compared pairs", path, schedule, k, v, b));
}

void add_compare_options(po::options_description& opts) {
  // clang-format off
  opts.add_options()
    ("help,h", "show this help")
    ("predicted", po::value<std::string>()->value_name("FILE"), "summary JSON of the simulation (with --measured)")
    ("measured", po::value<std::string>()->value_name("FILE"), "summary JSON of the real run (with --predicted)")
    ("pair", po::value<std::vector<std::string>>()->value_name("PRED=MEAS"),
       "one more (predicted, measured) pair; repeat for several candidates")
    ("pairs", po::value<std::string>()->value_name("LIST"), "file of pairs, one 'PREDICTED MEASURED' a line")
    ("chosen", po::value<int>()->value_name("INDEX"), "index (from 0, in the order given) of the planner's pick")
    ("plan", po::value<std::string>()->value_name("FILE"),
       "plan JSON: its chosen candidate (schedule, k, virtual stages, b) marks the planner's pick among the pairs")
    ("fail-above", po::value<double>()->value_name("PCT"),
       "exit with status 1 if any pair's MAPE is above PCT percent (default: never)")
    ("json", po::bool_switch(), "print the compare JSON on stdout instead of the table")
    ("output,o", po::value<std::string>()->value_name("FILE"), "write the compare JSON to FILE (-: stdout)");
  // clang-format on
}

// Every (predicted, measured) pair the options give.
std::vector<std::pair<std::string, std::string>> pairs_option(const po::variables_map& vm) {
  std::vector<std::pair<std::string, std::string>> pairs;
  if (vm.count("predicted") != vm.count("measured"))
    throw InputError(vm.count("predicted") ? "--measured: missing (--predicted needs it)"
                                           : "--predicted: missing (--measured needs it)");
  if (vm.count("predicted")) pairs.emplace_back(vm["predicted"].as<std::string>(), vm["measured"].as<std::string>());
  if (vm.count("pair"))
    for (const auto& spec : vm["pair"].as<std::vector<std::string>>()) pairs.push_back(split_pair(spec));
  if (vm.count("pairs"))
    for (auto& p : read_list(vm["pairs"].as<std::string>())) pairs.push_back(std::move(p));
  if (pairs.empty())
    throw InputError("--predicted/--measured: missing; give a pair, --pair or --pairs (see adagrouper compare --help)");
  return pairs;
}

}  // namespace

int cmd_compare(int argc, char** argv) {
  po::options_description opts(kCompareHelp);
  add_compare_options(opts);
  const auto parsed = parse_options(argc, argv, opts);
  if (!parsed) return 0;
  const po::variables_map& vm = *parsed;

  std::optional<double> fail_above;
  if (vm.count("fail-above")) fail_above = finite_option(vm, "fail-above", 0);
  const std::vector<std::pair<std::string, std::string>> pairs = pairs_option(vm);
  if (vm.count("chosen") && vm.count("plan")) throw InputError("--chosen: give either --chosen or --plan, not both");
  OutputSet outputs;
  input_options(outputs, vm, {"pairs", "plan"});
  for (const auto& [p, m] : pairs) {
    outputs.input("--predicted", p);
    outputs.input("--measured", m);
  }
  const auto out = output_option(outputs, vm, "output");
  check_json_stdout(outputs, vm);

  std::vector<sim::Comparison> cs;
  for (const auto& [p, m] : pairs) cs.push_back(sim::compare(sim::load_summary(p), sim::load_summary(m)));

  std::optional<int> chosen;
  if (vm.count("chosen")) chosen = vm["chosen"].as<int>();
  if (vm.count("plan")) chosen = chosen_from_plan(vm["plan"].as<std::string>(), cs);
  std::optional<sim::Ranking> ranking;
  if (cs.size() >= 2 || chosen) ranking = sim::rank_agreement(cs, chosen);

  const auto doc = sim::comparison_json(cs, ranking);
  if (out) outputs.write(*out, doc.dump(2) + "\n");
  outputs.commit();
  if (!outputs.has_stdout()) {
    if (vm["json"].as<bool>()) {
      std::cout << doc.dump(2) << '\n';
    } else {
      std::cout << sim::comparison_text(cs, ranking);
    }
  }
  if (fail_above) {
    for (const auto& c : cs) {
      if (c.mape_pct > *fail_above) {
        std::cerr << fmt::format("adagrouper compare: {}: MAPE {:.2f}% is above --fail-above {}%\n", c.label,
                                 c.mape_pct, *fail_above);
        return 1;
      }
    }
  }
  return 0;
}

}  // namespace adagrouper::cli
