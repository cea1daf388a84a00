// `adagrouper plan`: the Ada-Grouper planner on a pipeline file or a model.
//
// docs/model.md sections 11 and 12.
#include <algorithm>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <map>
#include <functional>
#include <iostream>
#include <optional>
#include <string>
#include <utility>
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

constexpr const char* kPlanHelp = R"(Usage: adagrouper plan --pipeline P --network N [--memory-limit BYTES]
       adagrouper plan --model M --stages S|auto --network N [--pipeline-output FILE] ...
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

From a model: --model M.json (a layer-level model file, `adagrouper model`) with
--stages S first partitions the layers into S stages (`adagrouper partition`, cut with
1f1b at every listed micro-batch size that divides B, each distinct cut planned, the
fastest kept), then plans as above; --stages auto tries S = 2, 4, 8, ... (up to the
number of layers, at most 64) and keeps the S with the most samples per second per
device (data-parallel gradient exchange is not modelled, so this favours the fewest
stages that fit). B defaults to the model's global_batch_size and the limit to its
device memory. The plan gets a "partition" record (every cut tried), and
--pipeline-output writes the chosen cut's pipeline file.

Inputs are the files of `adagrouper simulate` (docs/formats.md). Exit status: 0 ok,
2 bad input or nothing fits the memory limit (one line naming the file and field),
1 other failures.

Example:
  adagrouper plan --pipeline configs/pipelines/gpt-8stage-v100.json \
      --network configs/networks/preempted-25g.json --eval-iterations 3 --output plan.json
  adagrouper plan --model configs/models/gpt2-xl.json --stages auto \
      --network configs/networks/preempted-25g.json

Options)";

struct ChannelProfile {
  int from = 0, to = 0;
  std::size_t used = 0;  // samples in the window
  double rate = 0;       // bytes / s over the window
};

using Channel = std::pair<int, int>;  // (from, to)

// The measured transfer samples of --comm-profile, per channel in time order, and the
// file each channel's samples come from.
struct MeasuredTransfers {
  std::map<Channel, std::vector<traces::TransferSample>> samples;
  std::map<Channel, std::string> source;
};

// "FROM-TO=FILE" -> ({FROM, TO}, FILE); "FILE" -> (nullopt, FILE).
std::pair<std::optional<Channel>, std::string> parse_profile_spec(const std::string& spec) {
  const auto eq = spec.find('=');
  if (eq == std::string::npos) return {std::nullopt, spec};
  int from = -1, to = -1;
  char dash = 0;
  int used = 0;
  const std::string head = spec.substr(0, eq);
  if (std::sscanf(head.c_str(), "%d%c%d%n", &from, &dash, &to, &used) != 3 || dash != '-' ||
      used != static_cast<int>(head.size()))
    throw InputError(fmt::format("--comm-profile: '{}' is not FROM-TO=FILE (e.g. 0-1=samples.csv)", spec));
  return {Channel{from, to}, spec.substr(eq + 1)};
}

// Reads every --comm-profile file (recording it in `inputs`) and sorts its samples by
// channel; checks that each channel exists among S stages.
MeasuredTransfers read_comm_profile(const std::vector<std::string>& specs, int S,
                                    std::vector<planner::InputFile>& inputs) {
  MeasuredTransfers m;
  for (const std::string& spec : specs) {
    const auto [named, path] = parse_profile_spec(spec);
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
      const Channel ch = named ? *named : *x.channel;
      if (ch.first < 0 || ch.first >= S || ch.second < 0 || ch.second >= S || std::abs(ch.first - ch.second) != 1)
        throw InputError(fmt::format("{}:{}: channel {} -> {} is not a channel of this {}-stage pipeline", path,
                                     x.line, ch.first, ch.second, S));
      m.samples[ch].push_back(x);
      m.source[ch] = path;
    }
  }
  for (auto& [ch, samples] : m.samples)
    std::stable_sort(samples.begin(), samples.end(), [](const auto& a, const auto& b) { return a.time_s < b.time_s; });
  return m;
}

// The moving average of a channel's last `window` samples (planner::window_rate).
ChannelProfile profile_channel(const MeasuredTransfers& m, const Channel& ch, const sim::ChannelSpec& spec,
                               int window) {
  const auto& samples = m.samples.at(ch);
  std::vector<planner::CommSample> xs;
  xs.reserve(samples.size());
  for (const auto& x : samples) xs.push_back({x.time_s, x.bytes, x.duration_s});
  const planner::WindowRate w = planner::window_rate(xs, static_cast<std::size_t>(window), spec.latency_s);
  if (w.not_longer_than_latency) {
    const auto& x = samples[*w.not_longer_than_latency];
    throw InputError(fmt::format("{}:{}: duration_s {} is not longer than the channel's latency {} s", m.source.at(ch),
                                 x.line, x.duration_s, spec.latency_s));
  }
  const std::optional<double> rate = w.rate();
  if (!rate)
    throw InputError(fmt::format("{}: channel {} -> {}: the last {} samples move no bytes; no rate to plan with",
                                 m.source.at(ch), ch.first, ch.second, w.used));
  return {ch.first, ch.second, w.used, *rate};
}

// Replaces the rate of every channel that has transfer samples with the moving average
// of its last `window` samples: sum of bytes over sum of (duration - latency), so that
// a transfer of the average size takes the average measured time (planner::window_rate,
// the estimator `adagrouper adapt`'s controller uses too).
std::vector<ChannelProfile> apply_comm_profile(sim::Network& net, const std::vector<std::string>& specs, int window,
                                               std::vector<planner::InputFile>& inputs) {
  if (window < 1) throw InputError(fmt::format("--window: must be >= 1, got {}", window));
  const MeasuredTransfers m = read_comm_profile(specs, net.num_stages(), inputs);
  std::vector<ChannelProfile> out;
  std::map<Channel, double> measured;
  for (const auto& [ch, samples] : m.samples) {
    out.push_back(profile_channel(m, ch, net.channel(ch.first, ch.second), window));
    measured[ch] = out.back().rate;
  }
  net.rewrite_channels([&](sim::ChannelSpec& c) {
    if (const auto it = measured.find({c.from, c.to}); it != measured.end())
      c.set_rate(sim::RateTrace::constant(it->second));
  });
  return out;
}

// `plan --model`: the model, its chosen partition and plan (planner::plan_model).
struct FromModel {
  std::string path;
  planner::Model model;
  planner::ModelPlan plan;
};

FromModel plan_from_model(const po::variables_map& vm, const std::function<sim::Network(int)>& network_for) {
  FromModel fm;
  fm.path = vm["model"].as<std::string>();
  fm.model = planner::load_model(fm.path);
  if (!vm.count("stages")) throw InputError("--stages: missing; with --model give --stages S or --stages auto");
  planner::ModelPlanOptions mo;
  mo.stage_counts = planner::parse_stage_counts(vm["stages"].as<std::string>(), fm.model.num_layers());
  if (vm.count("global-batch-size")) {
    mo.plan.global_batch_size = vm["global-batch-size"].as<int>();
  } else if (fm.model.global_batch_size) {
    mo.plan.global_batch_size = *fm.model.global_batch_size;
  } else {
    throw InputError(fmt::format("--global-batch-size: missing; {} has no global_batch_size", fm.path));
  }
  mo.plan.memory_limit_bytes =
      vm.count("memory-limit") ? vm["memory-limit"].as<double>() : fm.model.device.memory_bytes;
  if (!(mo.plan.memory_limit_bytes > 0) || !std::isfinite(mo.plan.memory_limit_bytes))
    throw InputError(fmt::format("--memory-limit: must be a positive number of bytes, got {}",
                                 mo.plan.memory_limit_bytes));
  mo.plan.eval_iterations = vm["eval-iterations"].as<int>();
  mo.plan.eval_start_s = vm["eval-start"].as<double>();
  if (mo.plan.eval_iterations < 1)
    throw InputError(fmt::format("--eval-iterations: must be >= 1, got {}", mo.plan.eval_iterations));
  if (!(mo.plan.eval_start_s >= 0) || !std::isfinite(mo.plan.eval_start_s))
    throw InputError(fmt::format("--eval-start: must be a finite time >= 0, got {}", mo.plan.eval_start_s));
  fm.plan = planner::plan_model(fm.model, network_for, mo);
  return fm;
}

po::options_description plan_options() {
  po::options_description opts(kPlanHelp);
  // clang-format off
  opts.add_options()
    ("help,h", "show this help")
    ("pipeline", po::value<std::string>()->value_name("FILE"), "pipeline file (required unless --model)")
    ("model", po::value<std::string>()->value_name("FILE"), "layer-level model file to partition first (with --stages)")
    ("stages", po::value<std::string>()->value_name("S|auto"), "with --model: number of stages, or auto")
    ("pipeline-output", po::value<std::string>()->value_name("FILE"),
       "with --model: write the chosen partition's pipeline file")
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
  return opts;
}

// What `plan` plans: the pipeline (from --pipeline, or --model partitioned) and the
// network with --comm-profile applied, and the input files the plan records.
struct PlanInputs {
  std::optional<FromModel> from_model;
  sim::Pipeline pipeline;
  sim::Network network;
  std::vector<planner::InputFile> files;
  std::vector<ChannelProfile> profiled;
};

PlanInputs load_inputs(const po::variables_map& vm) {
  const std::string network_path = required(vm, "network", "plan");
  PlanInputs in;
  if (vm.count("model")) {
    if (vm.count("pipeline")) throw InputError("--model: give either --pipeline or --model, not both");
    in.from_model = plan_from_model(vm, [&](int S) {
      sim::Network n = sim::load_network(network_path, S, traces::TraceRates());
      std::vector<planner::InputFile> scratch;
      if (vm.count("comm-profile"))
        apply_comm_profile(n, vm["comm-profile"].as<std::vector<std::string>>(), vm["window"].as<int>(), scratch);
      return n;
    });
    in.pipeline = in.from_model->plan.plan.pipeline;
    in.files.push_back({"model", in.from_model->path, sha256_of(in.from_model->path)});
  } else {
    for (const char* o : {"stages", "pipeline-output"})
      if (vm.count(o)) throw InputError(fmt::format("--{}: only with --model (a pipeline file fixes its stages)", o));
    const std::string pipeline_path = required(vm, "pipeline", "plan");
    in.pipeline = sim::load_pipeline(pipeline_path);
    in.files.push_back({"pipeline", pipeline_path, sha256_of(pipeline_path)});
  }
  in.network = sim::load_network(network_path, in.pipeline.num_stages(), traces::TraceRates());
  in.files.push_back({"network", network_path, sha256_of(network_path)});
  if (vm.count("comm-profile"))
    in.profiled = apply_comm_profile(in.network, vm["comm-profile"].as<std::vector<std::string>>(),
                                     vm["window"].as<int>(), in.files);
  return in;
}

planner::PlanOptions plan_settings(const po::variables_map& vm, const sim::Pipeline& pipeline) {
  planner::PlanOptions options;
  options.global_batch_size =
      vm.count("global-batch-size") ? vm["global-batch-size"].as<int>() : pipeline.global_batch_size;
  options.memory_limit_bytes = memory_limit_option(vm, pipeline.memory_limit_bytes);
  options.eval_iterations = vm["eval-iterations"].as<int>();
  options.eval_start_s = vm["eval-start"].as<double>();
  if (!(options.eval_start_s >= 0) || !std::isfinite(options.eval_start_s))
    throw InputError(fmt::format("--eval-start: must be a finite time >= 0, got {}", options.eval_start_s));
  return options;
}

// The plan JSON with the --comm-profile record and the --model partition record.
nlohmann::ordered_json plan_document(const po::variables_map& vm, const PlanInputs& in,
                                     const planner::PlanResult& plan) {
  auto doc = planner::plan_json(plan, in.files);
  if (!in.profiled.empty()) {
    auto& cp = doc["comm_profile"] = {{"window", vm["window"].as<int>()}, {"channels", nlohmann::ordered_json::array()}};
    for (const auto& c : in.profiled)
      cp["channels"].push_back({{"from", c.from}, {"to", c.to}, {"samples", c.used}, {"rate_bytes_per_s", c.rate}});
  }
  if (in.from_model) doc["partition"] = planner::model_plan_json(in.from_model->plan, in.from_model->path);
  return doc;
}

}  // namespace

int cmd_plan(int argc, char** argv) {
  const auto parsed = parse_options(argc, argv, plan_options());
  if (!parsed) return 0;
  const po::variables_map& vm = *parsed;
  const PlanInputs in = load_inputs(vm);
  const planner::PlanResult plan = planner::make_plan(in.pipeline, in.network, plan_settings(vm, in.pipeline));
  const auto doc = plan_document(vm, in, plan);
  const auto& from_model = in.from_model;
  if (from_model && vm.count("pipeline-output"))
    write_file_atomic(vm["pipeline-output"].as<std::string>(),
                      planner::dump_compact(planner::pipeline_json(from_model->plan.partition, from_model->model)) + "\n");
  if (vm.count("output")) write_file_atomic(vm["output"].as<std::string>(), doc.dump(2) + "\n");
  if (vm["json"].as<bool>()) {
    std::cout << doc.dump(2) << '\n';
  } else {
    if (from_model) std::cout << planner::model_plan_text(from_model->plan) << '\n';
    std::cout << planner::plan_text(plan);
  }
  return 0;
}

}  // namespace adagrouper::cli
