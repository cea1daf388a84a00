// `adagrouper plan`: the Ada-Grouper planner (SPEC section 5 and 6).
#include <algorithm>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <map>
#include <optional>
#include <fstream>
#include <iostream>
#include <sstream>
#include <string>
#include <utility>
#include <vector>

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
                       [--comm-profile [FROM-TO=]FILE ... [--window N]]
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

struct ChannelProfile {
  int from = 0, to = 0;
  std::size_t used = 0;  // samples in the window
  double rate = 0;       // bytes / s over the window
};

// Replaces the rate of every channel that has transfer samples with the moving average
// of its last `window` samples: sum of bytes over sum of (duration - latency), so that
// a transfer of the average size takes the average measured time.
std::vector<ChannelProfile> apply_comm_profile(sim::Network& net, const std::vector<std::string>& specs, int window,
                                               std::vector<planner::InputFile>& inputs) {
  if (window < 1) throw InputError(fmt::format("--window: must be >= 1, got {}", window));
  const int S = net.num_stages();
  std::map<std::pair<int, int>, std::vector<traces::TransferSample>> per;
  std::map<std::pair<int, int>, std::string> source;
  for (const std::string& spec : specs) {
    std::optional<std::pair<int, int>> named;
    std::string path = spec;
    const auto eq = spec.find('=');
    if (eq != std::string::npos) {
      int from = -1, to = -1;
      char dash = 0;
      int used = 0;
      const std::string head = spec.substr(0, eq);
      if (std::sscanf(head.c_str(), "%d%c%d%n", &from, &dash, &to, &used) != 3 || dash != '-' ||
          used != static_cast<int>(head.size()))
        throw InputError(fmt::format("--comm-profile: '{}' is not FROM-TO=FILE (e.g. 0-1=samples.csv)", spec));
      named = std::pair{from, to};
      path = spec.substr(eq + 1);
    }
    const auto samples = traces::load_transfer_samples(path);
    inputs.push_back({"comm-profile", path, sha256_of(path)});
    for (const auto& x : samples) {
      if (named && x.channel)
        throw InputError(fmt::format("{}:{}: channel: the file names its channels; give it without {}-{}=", path,
                                     x.line, named->first, named->second));
      if (!named && !x.channel)
        throw InputError(fmt::format("{}:{}: no channel column; give the file as FROM-TO={} or add a first column "
                                     "\"FROM->TO\"",
                                     path, x.line, path));
      const auto ch = named ? *named : *x.channel;
      if (ch.first < 0 || ch.first >= S || ch.second < 0 || ch.second >= S || std::abs(ch.first - ch.second) != 1)
        throw InputError(fmt::format("{}:{}: channel {} -> {} is not a channel of this {}-stage pipeline", path,
                                     x.line, ch.first, ch.second, S));
      per[ch].push_back(x);
      source[ch] = path;
    }
  }
  std::vector<ChannelProfile> out;
  for (auto& [ch, samples] : per) {
    std::stable_sort(samples.begin(), samples.end(),
                     [](const auto& a, const auto& b) { return a.time_s < b.time_s; });
    sim::ChannelSpec& spec = ch.second == ch.first + 1 ? net.forward[ch.first] : net.backward[ch.second];
    const std::size_t first = samples.size() > static_cast<std::size_t>(window) ? samples.size() - window : 0;
    double bytes = 0, seconds = 0;
    for (std::size_t i = first; i < samples.size(); ++i) {
      const auto& x = samples[i];
      if (!(x.duration_s > spec.latency_s))
        throw InputError(fmt::format("{}:{}: duration_s {} is not longer than the channel's latency {} s",
                                     source[ch], x.line, x.duration_s, spec.latency_s));
      bytes += x.bytes;
      seconds += x.duration_s - spec.latency_s;
    }
    const double rate = bytes / seconds;
    if (!(rate > 0) || !std::isfinite(rate))
      throw InputError(fmt::format("{}: channel {} -> {}: the last {} samples move no bytes; no rate to plan with",
                                   source[ch], ch.first, ch.second, samples.size() - first));
    spec.unlimited = false;
    spec.rate = sim::RateTrace::constant(rate);
    out.push_back({ch.first, ch.second, samples.size() - first, rate});
  }
  return out;
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
    ("comm-profile", po::value<std::vector<std::string>>()->value_name("[FROM-TO=]FILE"),
       "measured transfer samples (CSV time_s,bytes,duration_s, as the calibration harness writes them; "
       "repeat per channel as FROM-TO=FILE, or one FILE with a leading channel column \"FROM->TO\"): "
       "these channels use the moving average of their last --window samples instead of the network's rate")
    ("window", po::value<int>()->default_value(10)->value_name("N"),
       "samples in the moving average of --comm-profile (Ada-Grouper's profiling window)")
    ("output,o", po::value<std::string>()->value_name("FILE"), "write the plan JSON to FILE")
    ("json", po::bool_switch(), "print the plan JSON on stdout instead of the table");
  // clang-format on
  const auto parsed = parse_options(argc, argv, opts);
  if (!parsed) return 0;
  const po::variables_map& vm = *parsed;
  const std::string pipeline_path = required(vm, "pipeline", "plan");
  const std::string network_path = required(vm, "network", "plan");
  const sim::Pipeline pipeline = sim::load_pipeline(pipeline_path);
  sim::Network network = sim::load_network(network_path, pipeline.num_stages(), traces::rate_resolver());
  std::vector<planner::InputFile> inputs = {{"pipeline", pipeline_path, sha256_of(pipeline_path)},
                                            {"network", network_path, sha256_of(network_path)}};
  std::vector<ChannelProfile> profiled;
  if (vm.count("comm-profile"))
    profiled = apply_comm_profile(network, vm["comm-profile"].as<std::vector<std::string>>(), vm["window"].as<int>(),
                                  inputs);

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
  auto doc = planner::plan_json(plan, inputs);
  if (!profiled.empty()) {
    auto& cp = doc["comm_profile"] = {{"window", vm["window"].as<int>()}, {"channels", nlohmann::ordered_json::array()}};
    for (const auto& c : profiled)
      cp["channels"].push_back({{"from", c.from}, {"to", c.to}, {"samples", c.used}, {"rate_bytes_per_s", c.rate}});
  }
  if (vm.count("output")) write_file_atomic(vm["output"].as<std::string>(), doc.dump(2) + "\n");
  if (vm["json"].as<bool>()) {
    std::cout << doc.dump(2) << '\n';
  } else {
    std::cout << planner::plan_text(plan);
  }
  return 0;
}

}  // namespace adagrouper::cli
