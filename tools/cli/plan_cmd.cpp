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

constexpr const char* kPlanHelp = R"(Usage: adagrouper plan --pipeline P --network N [--memory-limit BYTES] [--devices D]
       adagrouper plan --model M --stages S|auto --network N [--pipeline-output FILE] ...
                       [--global-batch-size B] [--iterations n] [--start-time T]
                       [--families LIST] [--virtual-stages LIST] [--rank-by predicted|deployed]
                       [--comm-profile [FROM-TO=]FILE ... [--window N]]
                       [--output FILE] [--json] [--torch-csv FILE]

The Ada-Grouper planner. With the global batch B fixed, each micro-batch size b that
divides B (inside every stage's profile) gives M = B / b micro-batches. For k = 1, 2, ...
it finds the largest b whose kFkB plan fits the memory limit on every stage (the
memory-limit curve; smaller b for the same k are pruned, larger ones are infeasible)
and stops when no b fits. Each curve point, and the baselines 1f1b, dapple-b and gpipe
at their own largest feasible b, is simulated on the network; the fastest feasible one
is chosen (ties: less memory, then smaller k, then fewer virtual stages). Memory is the
planner's model: static + activations in flight + messages that can wait in receive
buffers (docs/model.md); it is never below what the simulator measures.

Schedule families (docs/model.md section 14): --families LIST adds, at each micro-batch
size on the curve, kfkb-dynamic (kFkB with --split-backward and --w-fill dynamic at
each curve point's k, with --max-pending-w unlimited and P = k) and the schedules of
today's runtimes (interleaved-1f1b, looped-bfs, interleaved-zb for each v considered;
zbv and dualpipev with v = 2); "all" names every one. A family that does not run the
(D, v, M) is listed as refused with its reason. --devices D runs the pipeline's J model
stages (J a multiple of D) on D devices: v = J / D model stages per device at most,
and every v that divides it (--virtual-stages LIST picks some), each by merging
consecutive model stages (times and bytes add, the message between them disappears);
--devices alone considers every family. Without --devices, D = J and v = 1; without
--devices and --families, exactly the curve and the baselines.

The plan (schema adagrouper.plan/2, docs/formats.md) holds the inputs and their sha256,
the chosen schedule with its predicted iteration time (exactly what `adagrouper
simulate` reports for the same schedule, k, v, backward options, b, iterations and
start time, on the --pipeline-output file when model stages were merged), every
candidate with why it won, lost, was pruned, is infeasible or was refused, and per
device the program: compute ops with their model stage, and sends and recvs on their
own streams with peer, bytes, tag and communicator (one per ordered pair of devices).
--torch-csv writes the chosen order as PyTorch's compute-only schedule CSV (with
dynamic W fill, where the evaluated run put the W ops).

Dynamic W fill, deployed: the fill's prediction assumes a runtime that places each W op
as it goes. The plan's programs and CSV fix the W ops where the first evaluated
iteration put them, and a runtime that executes them (calibration replay, PyTorch's
_PipelineScheduleRuntime) runs that order in every iteration: with --iterations n > 1
on a changing network it can be slower. Each dynamic candidate therefore also gets
deployed_iteration_time_s, that order simulated over the same iterations (`simulate
--plan PLAN --recorded-order` reproduces the chosen one's). --rank-by deployed ranks
candidates by it, for plans that such a runtime will execute; the default, predicted,
ranks by the fill's own prediction.

From a model: --model M.json (a layer-level model file, `adagrouper model`) with
--stages S first partitions the layers into S stages (`adagrouper partition`, cut with
1f1b at every listed micro-batch size that divides B, each distinct cut planned, the
fastest kept), then plans as above; --stages auto tries S = 2, 4, 8, ... (up to the
number of layers, at most 64) and keeps the S with the most samples per second per
device (data-parallel gradient exchange is not modelled, so this favours the fewest
stages that fit). With --families or --virtual-stages (default 1,2 then), each v cuts
the layers into S x v model stages, planned on S devices with that v. B defaults to the
model's global_batch_size and the limit to its device memory. The plan gets a
"partition" record (every cut tried), and --pipeline-output writes the chosen cut's
pipeline file.

Inputs are the files of `adagrouper simulate` (docs/formats.md). Exit status: 0 ok,
2 bad input or nothing fits the memory limit (one line naming the file and field),
1 other failures.

Example:
  adagrouper plan --pipeline configs/pipelines/gpt-8stage-v100.json \
      --network configs/networks/preempted-25g.json --iterations 3 --output plan.json
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
  const MeasuredTransfers m = read_comm_profile(specs, net.num_stages(), inputs);
  std::vector<ChannelProfile> out;
  std::vector<sim::Network::MeasuredRate> measured;
  for (const auto& [ch, samples] : m.samples) {
    out.push_back(profile_channel(m, ch, net.channel(ch.first, ch.second), window));
    measured.push_back({ch.first, ch.second, out.back().rate});
  }
  net.set_measured_rates(measured);
  return out;
}

// --devices D: a positive divisor of the pipeline's model stages; without it, one device
// per model stage.
int devices_option(const po::variables_map& vm, const sim::Pipeline& pipeline) {
  if (!vm.count("devices")) return pipeline.num_stages();
  const int D = vm["devices"].as<int>();
  if (D < 1 || pipeline.num_stages() % D != 0)
    throw InputError(fmt::format("--devices: {} has {} model stages, which is not a multiple of {} devices",
                                 pipeline.source, pipeline.num_stages(), D));
  return D;
}

// The families, virtual stages and devices of the options: with --devices, every family
// unless --families names some; without, only those --families names.
void family_settings(const po::variables_map& vm, planner::PlanOptions& options) {
  if (vm.count("families")) {
    options.families = planner::parse_families(vm["families"].as<std::string>());
  } else if (vm.count("devices")) {
    options.families = planner::extra_families();
  }
  if (vm.count("virtual-stages"))
    options.virtual_stages = planner::parse_virtual_stages(vm["virtual-stages"].as<std::string>());
  if (vm.count("devices")) options.devices = vm["devices"].as<int>();
  options.rank_by = planner::parse_rank_by(vm["rank-by"].as<std::string>());
}

// Most samples --window may average (as `adapt --window`).
constexpr int kMaxWindow = 1'000'000;

int window_option(const po::variables_map& vm) { return int_option(vm, "window", 1, kMaxWindow); }

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
    mo.plan.global_batch_size = int_option(vm, "global-batch-size", 1, sim::kMaxBatchSize);
  } else if (fm.model.global_batch_size) {
    mo.plan.global_batch_size = *fm.model.global_batch_size;
  } else {
    throw InputError(fmt::format("--global-batch-size: missing; {} has no global_batch_size", fm.path));
  }
  mo.plan.memory_limit_bytes =
      vm.count("memory-limit") ? vm["memory-limit"].as<SizeArg>().value : fm.model.device.memory_bytes;
  if (!(mo.plan.memory_limit_bytes > 0) || !std::isfinite(mo.plan.memory_limit_bytes))
    throw InputError(fmt::format("--memory-limit: must be a positive number of bytes, got {}",
                                 mo.plan.memory_limit_bytes));
  if (vm.count("devices")) throw InputError("--devices: only with --pipeline (with --model, --stages S is the devices)");
  family_settings(vm, mo.plan);
  mo.virtual_stages = mo.plan.virtual_stages;
  if (mo.virtual_stages.empty()) mo.virtual_stages = mo.plan.families.empty() ? std::vector<int>{1} : std::vector<int>{1, 2};
  mo.plan.virtual_stages.clear();
  mo.plan.eval_iterations = int_option(vm, "iterations", 1, kMaxIterations);
  mo.plan.eval_start_s = time_option(vm, "start-time");
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
       "with --model: write the chosen partition's pipeline file; with --devices: the chosen plan's pipeline "
       "(its model stages merged), on which `simulate` gives the prediction")
    ("network", po::value<std::string>()->value_name("FILE"), "network file (required)")
    ("memory-limit", po::value<SizeArg>()->value_name("BYTES"),
       with_units("per-stage memory limit (default: the pipeline's memory_limit_bytes)", Quantity::size).c_str())
    ("devices", po::value<int>()->value_name("D"),
       "with --pipeline: devices the model stages run on (default: one per model stage)")
    ("families", po::value<std::string>()->value_name("LIST"),
       "schedule families considered beyond the curve and the baselines: all, or a comma-separated list of "
       "kfkb-dynamic, interleaved-1f1b, looped-bfs, interleaved-zb, zbv, dualpipev (default: all with --devices, "
       "none without)")
    ("virtual-stages", po::value<std::string>()->value_name("LIST"),
       "model stages per device considered, comma-separated (default: every divisor of J / D; with --model, 1,2 "
       "when families are considered, else 1)")
    ("rank-by", po::value<std::string>()->default_value("predicted")->value_name("WHAT"),
       "rank candidates by their predicted iteration time (predicted), or dynamic W fill's by the order its "
       "programs fix (deployed: deployed_iteration_time_s)")
    ("global-batch-size", po::value<int>()->value_name("B"),
       "global batch size (default: the pipeline's global_batch_size)")
    ("iterations", po::value<int>()->default_value(1)->value_name("n"),
       "iterations simulated per candidate; the prediction is their mean (use several with traces)")
    ("start-time", po::value<TimeArg>()->default_value(TimeArg{0.0})->value_name("T"),
       with_units("absolute time (s) at which the evaluated iterations start in the traces", Quantity::time).c_str())
    ("comm-profile", po::value<std::vector<std::string>>()->value_name("[FROM-TO=]FILE"),
       "measured transfer samples (CSV time_s,bytes,duration_s, as the calibration harness writes them; "
       "repeat per channel as FROM-TO=FILE, or one FILE with a leading channel column \"FROM->TO\"): "
       "these channels use the moving average of their last --window samples instead of the network's rate")
    ("window", po::value<int>()->default_value(10)->value_name("N"),
       "samples in the moving average of --comm-profile (Ada-Grouper's profiling window)")
    ("output,o", po::value<std::string>()->value_name("FILE"), "write the plan JSON to FILE (-: stdout)")
    ("torch-csv", po::value<std::string>()->value_name("FILE"),
       "write the chosen order as PyTorch's compute-only schedule CSV")
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
        apply_comm_profile(n, vm["comm-profile"].as<std::vector<std::string>>(), window_option(vm), scratch);
      return n;
    });
    in.pipeline = in.from_model->plan.plan.pipeline;
    in.files.push_back({"model", in.from_model->path, sha256_of(in.from_model->path)});
  } else {
    if (vm.count("stages")) throw InputError("--stages: only with --model (a pipeline file fixes its stages)");
    if (vm.count("pipeline-output") && !vm.count("devices"))
      throw InputError("--pipeline-output: only with --model or --devices (otherwise it is the --pipeline file)");
    const std::string pipeline_path = required(vm, "pipeline", "plan");
    in.pipeline = sim::load_pipeline(pipeline_path);
    in.files.push_back({"pipeline", pipeline_path, sha256_of(pipeline_path)});
  }
  const int devices = in.from_model ? in.from_model->plan.plan.devices : devices_option(vm, in.pipeline);
  in.network = sim::load_network(network_path, devices, traces::TraceRates());
  in.files.push_back({"network", network_path, sha256_of(network_path)});
  if (vm.count("comm-profile"))
    in.profiled = apply_comm_profile(in.network, vm["comm-profile"].as<std::vector<std::string>>(),
                                     window_option(vm), in.files);
  return in;
}

planner::PlanOptions plan_settings(const po::variables_map& vm, const sim::Pipeline& pipeline) {
  planner::PlanOptions options;
  family_settings(vm, options);
  options.global_batch_size = vm.count("global-batch-size")
                                  ? int_option(vm, "global-batch-size", 1, sim::kMaxBatchSize)
                                  : pipeline.global_batch_size;
  options.memory_limit_bytes = memory_limit_option(vm, pipeline.memory_limit_bytes);
  options.eval_iterations = int_option(vm, "iterations", 1, kMaxIterations);
  options.eval_start_s = time_option(vm, "start-time");
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

// The plan's outputs, registered with the inputs they may not be.
struct Outputs {
  OutputSet set;
  std::optional<std::size_t> plan, pipeline, torch_csv;
};

void add_outputs(const po::variables_map& vm, Outputs& o) {
  input_options(o.set, vm, {"pipeline", "network", "model"});
  if (vm.count("comm-profile"))
    for (const std::string& spec : vm["comm-profile"].as<std::vector<std::string>>())
      o.set.input("--comm-profile", parse_profile_spec(spec).second);
  o.plan = output_option(o.set, vm, "output");
  o.pipeline = output_option(o.set, vm, "pipeline-output");
  o.torch_csv = output_option(o.set, vm, "torch-csv");
  check_json_stdout(o.set, vm);
}

// The pipeline file --pipeline-output writes: the chosen partition's (--model), or the
// chosen plan's pipeline with its model stages merged (--devices).
std::string pipeline_output(const PlanInputs& in, const planner::PlanResult& plan) {
  if (in.from_model)
    return planner::dump_compact(planner::pipeline_json(in.from_model->plan.partition, in.from_model->model)) + "\n";
  return planner::dump_compact(planner::pipeline_file_json(plan.chosen_pipeline)) + "\n";
}

}  // namespace

int cmd_plan(int argc, char** argv) {
  const auto parsed = parse_options(argc, argv, plan_options(), kEvaluationAliases);
  if (!parsed) return 0;
  const po::variables_map& vm = *parsed;
  Outputs out;
  add_outputs(vm, out);
  const PlanInputs in = load_inputs(vm);
  const auto& from_model = in.from_model;
  // From a model: the plan of the chosen cut, made while partitioning (on its devices).
  const planner::PlanResult plan = from_model ? from_model->plan.plan
                                              : planner::make_plan(in.pipeline, in.network, plan_settings(vm, in.pipeline));
  const auto doc = plan_document(vm, in, plan);
  if (out.pipeline) out.set.write(*out.pipeline, pipeline_output(in, plan));
  if (out.torch_csv) out.set.write(*out.torch_csv, sim::torch_csv(plan.chosen_schedule));
  if (out.plan) out.set.write(*out.plan, doc.dump(2) + "\n");
  out.set.commit();
  if (out.set.has_stdout()) return 0;
  if (vm["json"].as<bool>()) {
    std::cout << doc.dump(2) << '\n';
  } else {
    if (from_model) std::cout << planner::model_plan_text(from_model->plan) << '\n';
    std::cout << planner::plan_text(plan);
  }
  return 0;
}

}  // namespace adagrouper::cli
