// `adagrouper plan`: the Ada-Grouper planner (SPEC section 5 and 6).
#include <cmath>
#include <fstream>
#include <iostream>
#include <sstream>
#include <string>

#include <boost/program_options.hpp>
#include <fmt/format.h>
#include <openssl/evp.h>

#include "cli_util.h"
#include "commands.h"
#include "planner.h"
#include "sim.h"
#include "traces.h"

namespace adagrouper::cli {

namespace po = boost::program_options;

namespace {

constexpr const char* kPlanHelp = R"(Usage: adagrouper plan --pipeline P --network N [--memory-limit BYTES]
                       [--global-batch-size B] [--eval-iterations n] [--eval-start T]
                       [--output FILE] [--json]

The Ada-Grouper planner. With the global batch B fixed, each micro-batch size b that
divides B (inside every stage's profile) gives M = B / b micro-batches. For k = 1, 2, ...
it finds the largest b whose kFkB plan fits the memory limit on every stage (the
memory-limit curve; smaller b for the same k are pruned, larger ones are infeasible)
and stops when no b fits. Each curve point, and the baselines 1f1b, dapple-b and gpipe
at their own largest feasible b, is simulated on the network; the fastest feasible one
is chosen (ties: less memory, then smaller k). Memory is the planner's model: static +
activations in flight + messages that can wait in receive buffers (docs/model.md); it
is never below what the simulator measures.

The plan (schema adagrouper.plan/1, docs/formats.md) holds the inputs and their sha256,
the chosen schedule with its predicted iteration time (exactly what `adagrouper
simulate` reports for the same schedule, k, b, iterations and start time), every
candidate with why it won, lost, was pruned or is infeasible, and per device the
program: compute ops, and sends and recvs on their own streams with peer, bytes, tag
and communicator (one per pair and direction).

Inputs are the files of `adagrouper simulate` (docs/formats.md). Exit status: 0 ok,
2 bad input or nothing fits the memory limit (one line naming the file and field),
1 other failures.

Example:
  adagrouper plan --pipeline configs/pipelines/gpt-8stage-v100.json \
      --network configs/networks/preempted-25g.json --eval-iterations 3 --output plan.json

Options)";

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

}  // namespace

int cmd_plan(int argc, char** argv) {
  po::options_description opts(kPlanHelp);
  // clang-format off
  opts.add_options()
    ("help,h", "show this help")
    ("pipeline", po::value<std::string>()->value_name("FILE"), "pipeline file (required)")
    ("network", po::value<std::string>()->value_name("FILE"), "network file (required)")
    ("memory-limit", po::value<double>()->value_name("BYTES"),
       "per-stage memory limit (default: the pipeline's memory_limit_bytes)")
    ("global-batch-size", po::value<int>()->value_name("B"),
       "global batch size (default: the pipeline's global_batch_size)")
    ("eval-iterations", po::value<int>()->default_value(1)->value_name("n"),
       "iterations simulated per candidate; the prediction is their mean (use several with traces)")
    ("eval-start", po::value<double>()->default_value(0.0)->value_name("T"),
       "absolute time (s) at which the evaluated iterations start in the traces")
    ("output,o", po::value<std::string>()->value_name("FILE"), "write the plan JSON to FILE")
    ("json", po::bool_switch(), "print the plan JSON on stdout instead of the table");
  // clang-format on
  const auto parsed = parse_options(argc, argv, opts);
  if (!parsed) return 0;
  const po::variables_map& vm = *parsed;
  const std::string pipeline_path = required(vm, "pipeline", "plan");
  const std::string network_path = required(vm, "network", "plan");
  const sim::Pipeline pipeline = sim::load_pipeline(pipeline_path);
  const sim::Network network = sim::load_network(network_path, pipeline.num_stages(), traces::rate_resolver());

  planner::PlanOptions options;
  options.global_batch_size =
      vm.count("global-batch-size") ? vm["global-batch-size"].as<int>() : pipeline.global_batch_size;
  if (vm.count("memory-limit")) {
    options.memory_limit_bytes = vm["memory-limit"].as<double>();
    if (!(options.memory_limit_bytes > 0) || !std::isfinite(options.memory_limit_bytes))
      throw InputError(fmt::format("--memory-limit: must be a positive number of bytes, got {}",
                                   options.memory_limit_bytes));
  } else if (pipeline.memory_limit_bytes) {
    options.memory_limit_bytes = *pipeline.memory_limit_bytes;
  }
  options.eval_iterations = vm["eval-iterations"].as<int>();
  options.eval_start_s = vm["eval-start"].as<double>();
  if (!(options.eval_start_s >= 0) || !std::isfinite(options.eval_start_s))
    throw InputError(fmt::format("--eval-start: must be a finite time >= 0, got {}", options.eval_start_s));

  const planner::PlanResult plan = planner::make_plan(pipeline, network, options);
  const auto doc = planner::plan_json(plan, {{"pipeline", pipeline_path, sha256_of(pipeline_path)},
                                             {"network", network_path, sha256_of(network_path)}});
  if (vm.count("output")) write_file_atomic(vm["output"].as<std::string>(), doc.dump(2) + "\n");
  if (vm["json"].as<bool>()) {
    std::cout << doc.dump(2) << '\n';
  } else {
    std::cout << planner::plan_text(plan);
  }
  return 0;
}

}  // namespace adagrouper::cli
