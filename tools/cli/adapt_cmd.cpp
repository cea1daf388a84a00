// `adagrouper adapt`: adaptive re-planning on a long network trace.
//
// Compared with static plans and a hindsight oracle (docs/model.md section 13).
#include <chrono>
#include <cmath>
#include <cstdio>
#include <filesystem>
#include <iostream>
#include <optional>
#include <string>
#include <vector>

#include <boost/program_options.hpp>
#include <fmt/format.h>

#include "cli_util.h"
#include "commands.h"
#include "planner.h"
#include "sim.h"
#include "traces.h"

namespace adagrouper::cli {

namespace po = boost::program_options;

namespace {

constexpr const char* kAdaptHelp = R"(Usage: adagrouper adapt --pipeline P --network N [--iterations N] [--replan-every R]
                        [--window W] [--threshold X] [--switch-pause S] [--horizon H]
                        [--memory-limit BYTES] [--global-batch-size B] [--families LIST]
                        [--rows FILE [--rows-format csv|jsonl]] [--json] [--output FILE]

Simulates Ada-Grouper's runtime re-planning on a long network trace. The controller
sees only what a real runtime sees: the transfer times of the iterations it ran, per
channel. Every R iterations it takes the moving average of the last W transfer samples
of each channel (sum of bytes over sum of (duration - latency), the estimator of
`plan --comm-profile`), re-evaluates the planner's candidates (every (k, b) on the
memory-limit curve and the baselines that fit, and with --families LIST the schedule
families of `plan --families` at the curve's sizes; M = B / b follows b) by simulating them
on that estimated network, and switches to the planner's choice when the predicted gain
exceeds the threshold and the predicted saving over the next H iterations (default: the
rest of the run) exceeds the switch pause; the pause (re-planning, communicator set-up)
is charged before the first iteration of the new plan. It starts with the plan chosen
on a launch profile: 1F1B run for just enough iterations to fill the window, at time
0, not charged.

On the same trace, over the same N iterations, it compares (docs/model.md, "Adaptive
re-planning"):
  1f1b          static 1F1B at its largest feasible micro-batch size
  dapple-b      static DAPPLE policy B at its largest feasible micro-batch size
  first-window  the plan chosen on the launch profile, never re-planned
  best-static   the candidate with the smallest total time, in hindsight
  adaptive      the controller above
  oracle        the best plan per period of R iterations in hindsight: the optimal
                sequence of plans, switching at the controller's decision points and
                paying the same pause per change
Every policy's first plan is free; each change of plan costs --switch-pause.

Inputs: the pipeline and network files of `adagrouper simulate` (docs/formats.md).
Outputs (docs/formats.md, "Adaptive run"): a table on stdout (total time, mean
iteration time, speedup over 1F1B, switches, pause); with --json the summary JSON
(schema adagrouper.adapt/1: candidates, launch profile, policies, every decision of the
controller with its estimated rates) instead; --output writes that JSON to a file.
--rows writes one row per iteration and policy (policy, iteration, start_s, schedule,
k, micro_batch_size, micro_batches, pause_s, iteration_time_s) as CSV or JSON Lines,
streamed to a temporary file beside FILE (FILE.tmp.PID, written row by row, so it can be
followed) and renamed to FILE when the run completes (- streams them to stdout).
Outputs are written only when the whole run succeeds; an output may not be an input.
Progress goes to stderr for runs longer than a few seconds.
Exit status: 0 ok, 2 bad input (one line naming the file and field), 1 other failures.

Example (U-Net on 25 GbE preempted for minutes at a time, about an hour of training):
  adagrouper adapt --pipeline configs/pipelines/unet-4stage-v100.json \
      --network configs/networks/bursty-minutes-25g.json --iterations 1000 \
      --replan-every 10 --window 64 --rows adapt.csv --output adapt.json

Options)";

// Progress lines on stderr, at most every 2 s, only once a run has taken 2 s.
class Progress {
 public:
  void operator()(std::string_view phase, long done, long total) {
    const auto now = std::chrono::steady_clock::now();
    if (now - last_ < std::chrono::seconds(2)) return;
    last_ = now;
    const double elapsed = std::chrono::duration<double>(now - start_).count();
    std::cerr << fmt::format("adapt: {} {}/{} iterations simulated ({:.0f}%), {:.0f} s\n", phase, done, total,
                             total > 0 ? 100.0 * done / total : 100.0, elapsed);
  }

 private:
  std::chrono::steady_clock::time_point start_ = std::chrono::steady_clock::now(), last_ = start_;
};

po::options_description adapt_options() {
  po::options_description opts(kAdaptHelp);
  const planner::AdaptOptions defaults;
  // clang-format off
  opts.add_options()
    ("help,h", "show this help")
    ("pipeline", po::value<std::string>()->value_name("FILE"), "pipeline file (required)")
    ("network", po::value<std::string>()->value_name("FILE"), "network file (required); its traces are the run's network")
    ("iterations,n", po::value<int>()->default_value(defaults.iterations)->value_name("N"),
       "training iterations simulated per policy, back to back from time 0")
    ("replan-every,R", po::value<int>()->default_value(defaults.replan_every)->value_name("R"),
       "the controller decides before iterations R, 2R, ...; also the oracle's period")
    ("window,W", po::value<int>()->default_value(defaults.window)->value_name("W"),
       "transfer samples per channel in the moving average (one per message; M per iteration)")
    ("threshold", po::value<double>()->default_value(defaults.threshold)->value_name("X"),
       "switch only when the predicted gain 1 - t_best / t_current exceeds X (0.02 = 2%)")
    ("switch-pause", po::value<TimeArg>()->default_value(TimeArg{defaults.switch_pause_s})->value_name("S"),
       with_units("seconds a change of plan costs, charged before the new plan's first iteration", Quantity::time)
           .c_str())
    ("horizon", po::value<int>()->default_value(defaults.horizon)->value_name("H"),
       "switch only if the predicted saving over the next H iterations exceeds the pause (0: the rest of the run)")
    ("memory-limit", po::value<SizeArg>()->value_name("BYTES"),
       with_units("per-stage memory limit (default: the pipeline's memory_limit_bytes); only plans that fit are "
                  "candidates", Quantity::size).c_str())
    ("global-batch-size", po::value<int>()->value_name("B"),
       "global batch size (default: the pipeline's global_batch_size)")
    ("families", po::value<std::string>()->value_name("LIST"),
       "also consider these schedule families, as `plan --families` (kfkb-dynamic, interleaved-1f1b, ...; all)")
    ("rows", po::value<std::string>()->value_name("FILE"), "write one row per iteration and policy (-: stdout)")
    ("rows-format", po::value<std::string>()->value_name("csv|jsonl"),
       "format of --rows (default: jsonl for a .jsonl or .json file, else csv)")
    ("json", po::bool_switch(), "print the summary JSON on stdout instead of the table")
    ("output,o", po::value<std::string>()->value_name("FILE"), "write the summary JSON to FILE (-: stdout)")
    ("quiet,q", po::bool_switch(), "no progress lines on stderr");
  // clang-format on
  return opts;
}

planner::AdaptOptions adapt_settings(const po::variables_map& vm, const sim::Pipeline& pipeline) {
  planner::AdaptOptions options;
  options.global_batch_size = vm.count("global-batch-size")
                                  ? int_option(vm, "global-batch-size", 1, sim::kMaxBatchSize)
                                  : pipeline.global_batch_size;
  options.memory_limit_bytes = memory_limit_option(vm, pipeline.memory_limit_bytes);
  options.iterations = vm["iterations"].as<int>();
  options.replan_every = vm["replan-every"].as<int>();
  options.window = vm["window"].as<int>();
  options.threshold = vm["threshold"].as<double>() + 0.0;  // -0 is 0
  options.switch_pause_s = vm["switch-pause"].as<TimeArg>().value + 0.0;
  options.horizon = vm["horizon"].as<int>();
  if (vm.count("families")) options.families = planner::parse_families(vm["families"].as<std::string>());
  return options;
}

// --rows FILE and whether it is JSON Lines (--rows-format, else the extension).
struct RowsSpec {
  std::string path;
  bool jsonl = false;
};

std::optional<RowsSpec> rows_spec(const po::variables_map& vm) {
  if (!vm.count("rows")) {
    if (vm.count("rows-format")) throw InputError("--rows-format: only with --rows FILE");
    return std::nullopt;
  }
  RowsSpec r{vm["rows"].as<std::string>()};
  if (vm.count("rows-format")) {
    const std::string f = vm["rows-format"].as<std::string>();
    if (f != "csv" && f != "jsonl") throw InputError(fmt::format("--rows-format: must be csv or jsonl, got '{}'", f));
    r.jsonl = f == "jsonl";
  } else {
    const std::string ext = std::filesystem::path(r.path).extension().string();
    r.jsonl = ext == ".jsonl" || ext == ".json";
  }
  return r;
}

}  // namespace

int cmd_adapt(int argc, char** argv) {
  const auto parsed = parse_options(argc, argv, adapt_options());
  if (!parsed) return 0;
  const po::variables_map& vm = *parsed;
  const std::string pipeline_path = required(vm, "pipeline", "adapt");
  const std::string network_path = required(vm, "network", "adapt");
  OutputSet outputs;
  input_options(outputs, vm, {"pipeline", "network"});
  const std::optional<RowsSpec> rows_format = rows_spec(vm);
  const auto rows = output_option(outputs, vm, "rows");
  const auto out = output_option(outputs, vm, "output");
  check_json_stdout(outputs, vm);
  const sim::Pipeline pipeline = sim::load_pipeline(pipeline_path);
  const sim::Network network = sim::load_network(network_path, pipeline.num_stages(), traces::TraceRates());

  planner::AdaptOptions options = adapt_settings(vm, pipeline);
  Progress progress;
  if (!vm["quiet"].as<bool>())
    options.progress = [&](std::string_view phase, long done, long total) { progress(phase, done, total); };
  planner::RowSink sink;
  if (rows) {
    const bool jsonl = rows_format->jsonl;
    if (!jsonl) outputs.write(*rows, planner::rows_csv_header());
    sink = [&, jsonl](const std::string& policy, const planner::IterationRow& row, const planner::Candidate& plan) {
      outputs.write(*rows, jsonl ? planner::row_jsonl(policy, row, plan) : planner::row_csv(policy, row, plan));
      outputs.flush(*rows);
    };
  }
  const planner::AdaptResult result = planner::run_adapt(pipeline, network, options, sink);

  const auto doc = planner::adapt_json(
      result, {{"pipeline", pipeline_path, sha256_of(pipeline_path)}, {"network", network_path, sha256_of(network_path)}});
  if (out) outputs.write(*out, doc.dump(2) + "\n");
  outputs.commit();
  if (outputs.has_stdout()) return 0;
  if (vm["json"].as<bool>()) {
    std::cout << doc.dump(2) << '\n';
  } else {
    std::cout << planner::adapt_text(result);
  }
  return 0;
}

}  // namespace adagrouper::cli
