// `adagrouper partition`: cut a layer-level model into pipeline stages and write the pipeline file.
//
// docs/model.md section 12.
#include <cmath>
#include <iostream>
#include <optional>
#include <string>

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

constexpr const char* kPartitionHelp = R"(Usage: adagrouper partition --model M.json --stages S --micro-batch-size b
                            [--global-batch-size B] [--schedule NAME [--k K]]
                            [--network N] [--memory-limit BYTES] [--refine N]
                            [--iterations n] [--start-time T] [--output FILE] [--json]

Cuts the L layers of a model file (docs/formats.md, "Model file"; `adagrouper model`
writes them) into S contiguous pipeline stages, as DAPPLE and PipeDream do. A dynamic
program over layer ranges finds the cut that minimises the pipeline latency model

  T = sum of all layers' fwd + bwd + sum over cuts of the two message times
      + (M - 1) x max(slowest stage's fwd + bwd, slowest message)

(optimizer steps left out; the simulation below counts them) among the cuts whose
every stage fits the memory limit. Memory is the planner's model
for the schedule (--schedule sets the micro-batches in flight per stage: 1f1b holds
S - s on stage s, kfkb k x that, gpipe all M): static + activations in flight + the
messages that can wait in the receive buffers. A message takes latency + bytes / rate,
with each channel's mean rate from --network (without it, transfers are free). Then the
best few cuts by the model (the DP optimum, the other Pareto-optimal cuts, the optimum
with one cut moved by 1 or 2 layers) are simulated with the schedule, and the fastest
is kept. docs/model.md ("Stage partitioning") explains the model and its limits.

Output: the pipeline file (docs/formats.md) to --output, with every
micro-batch size the model lists, ready for `adagrouper plan` and `simulate`; on stdout
the table of stage boundaries, times, memory and messages, or with --json the
partition report (schema adagrouper.partition/1: the chosen cut per stage and every
candidate with its predicted and simulated time).

Exit status: 0 ok, 2 bad input or no cut fits (one line naming the file and field or
the stage that cannot fit), 1 other failures.

Example:
  adagrouper partition --model configs/models/gpt2-xl.json --stages 4 \
      --micro-batch-size 2 --network configs/networks/eth-25g.json --output gpt2-xl-4.json
  adagrouper plan --pipeline gpt2-xl-4.json --network configs/networks/eth-25g.json

Options)";

po::options_description partition_options() {
  po::options_description opts(kPartitionHelp);
  // clang-format off
  opts.add_options()
    ("help,h", "show this help")
    ("model", po::value<std::string>()->value_name("FILE"), "model file (required)")
    ("stages", po::value<int>()->value_name("S"), "number of stages (required)")
    ("micro-batch-size,b", po::value<int>()->value_name("b"),
       "micro-batch size the cut is made for (required; must divide B and lie in every layer's profile)")
    ("global-batch-size", po::value<int>()->value_name("B"), "global batch (default: the model's global_batch_size)")
    ("schedule", po::value<std::string>()->default_value("1f1b")->value_name("NAME"),
       "schedule whose memory must fit and which the refinement simulates: 1f1b, kfkb, gpipe, dapple-b")
    ("k", po::value<int>()->value_name("K"), "group size of kfkb")
    ("network", po::value<std::string>()->value_name("FILE"),
       "network file for S stages (default: none; every transfer is free)")
    ("memory-limit", po::value<SizeArg>()->value_name("BYTES"),
       with_units("per-stage memory limit (default: the model's device memory_bytes)", Quantity::size).c_str())
    ("refine", po::value<int>()->default_value(8)->value_name("N"),
       "cuts simulated after the DP, best by the model first (0: keep the DP optimum)")
    ("iterations", po::value<int>()->default_value(1)->value_name("n"), "iterations simulated per refined cut")
    ("start-time", po::value<TimeArg>()->default_value(TimeArg{0.0})->value_name("T"),
       with_units("absolute time (s) at which they start; the DP's mean rates are taken from T on", Quantity::time)
           .c_str())
    ("output,o", po::value<std::string>()->value_name("FILE"), "write the pipeline file (-: stdout)")
    ("json", po::bool_switch(), "print the partition report JSON instead of the table");
  // clang-format on
  return opts;
}

planner::PartitionOptions partition_settings(const po::variables_map& vm, int stages, int b,
                                             const planner::Model& model, const std::string& model_path) {
  planner::PartitionOptions o;
  o.stages = stages;
  o.micro_batch_size = b;
  if (vm.count("global-batch-size")) {
    o.global_batch_size = int_option(vm, "global-batch-size", 1, sim::kMaxBatchSize);
  } else if (model.global_batch_size) {
    o.global_batch_size = *model.global_batch_size;
  } else {
    throw InputError(fmt::format("--global-batch-size: missing; {} has no global_batch_size", model_path));
  }
  o.schedule = sim::ScheduleSpec::named(vm["schedule"].as<std::string>(),
                                        vm.count("k") ? std::optional<int>(int_option(vm, "k", 1, sim::kMaxBatchSize))
                                                      : std::nullopt);
  o.memory_limit_bytes = vm.count("memory-limit") ? vm["memory-limit"].as<SizeArg>().value : model.device.memory_bytes;
  if (!(o.memory_limit_bytes > 0) || !std::isfinite(o.memory_limit_bytes))
    throw InputError(fmt::format("--memory-limit: must be a positive number of bytes, got {}", o.memory_limit_bytes));
  o.refine = vm["refine"].as<int>();
  o.eval_iterations = int_option(vm, "iterations", 1, kMaxIterations);
  o.eval_start_s = time_option(vm, "start-time");
  return o;
}

}  // namespace

int cmd_partition(int argc, char** argv) {
  const auto parsed = parse_options(argc, argv, partition_options(), kEvaluationAliases);
  if (!parsed) return 0;
  const po::variables_map& vm = *parsed;
  const std::string model_path = required(vm, "model", "partition");
  required<int>(vm, "stages", "partition");
  required<int>(vm, "micro-batch-size", "partition");
  const int stages = int_option(vm, "stages", 1, sim::kMaxStages);
  const int b = int_option(vm, "micro-batch-size", 1, sim::kMaxBatchSize);
  OutputSet outputs;
  input_options(outputs, vm, {"model", "network"});
  const auto out = output_option(outputs, vm, "output");
  check_json_stdout(outputs, vm);
  const planner::Model model = planner::load_model(model_path);
  const planner::PartitionOptions o = partition_settings(vm, stages, b, model, model_path);
  if (stages > model.num_layers())
    throw InputError(fmt::format("--stages: {} stages need at least {} layers; {} has {}", stages, stages, model_path,
                                 model.num_layers()));
  const sim::Network network = vm.count("network")
                                   ? sim::load_network(vm["network"].as<std::string>(), stages, traces::TraceRates())
                                   : sim::Network::uniform(stages, std::nullopt);

  const planner::PartitionResult r = planner::partition(model, network, o);
  if (out) outputs.write(*out, planner::dump_compact(planner::pipeline_json(r, model)) + "\n");
  outputs.commit();
  if (outputs.has_stdout()) return 0;
  if (vm["json"].as<bool>()) {
    std::cout << planner::partition_json(r).dump(2) << '\n';
  } else {
    std::cout << planner::partition_text(r);
    if (out) std::cout << "wrote " << vm["output"].as<std::string>() << '\n';
  }
  return 0;
}

}  // namespace adagrouper::cli
