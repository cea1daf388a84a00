// `adagrouper simulate`: one schedule on one pipeline and network (docs/model.md).
#include <algorithm>
#include <array>
#include <cmath>
#include <iostream>
#include <optional>
#include <string>
#include <utility>
#include <vector>

#include <boost/program_options.hpp>
#include <fmt/format.h>

#include "cli_util.h"
#include "commands.h"
#include "json_util.h"
#include "planner.h"
#include "schedule_options.h"
#include "sim.h"
#include "traces.h"

namespace adagrouper::cli {

namespace po = boost::program_options;
using namespace adagrouper::sim;

namespace {

constexpr const char* kSimulateIntro = R"(
Simulates pipeline-parallel training under the execution model of docs/model.md:
every stage runs its forward (F) and backward (B) ops in the schedule's order;
activations and gradients travel over FIFO channels whose bandwidth follows the
network file's traces; iterations run back to back.

Inputs (docs/formats.md):
  pipeline file  JSON: global_batch_size, memory_limit_bytes, and per stage
                 static_bytes, optimizer_s, op_overhead_s (what the host adds to
                 every op, measured) and a profile of measured micro-batch sizes
                 (forward_s, backward_s, activation_bytes, output_bytes,
                 grad_output_bytes); sizes in between are interpolated linearly.
                 With split backward: backward_input_s, backward_weight_s (default:
                 half of backward_s each) and weight_grad_bytes (default:
                 activation_bytes). With v model stages per stage, the pipeline's
                 stages are model stages: stage s runs v of them (docs/model.md §14).
  network file   JSON: latency_s, burst_bytes, a default rate, per-channel rate /
                 latency_s / capacity / burst_bytes (from, to: any two stages),
                 per-stage speed; burst_bytes puts a token bucket before a channel's
                 rate (docs/model.md, "Shaped links"). A rate (bytes/s) is
                 {"constant": R}, {"points": [[t, R], ...], "repeat_s": P}, a trace
                 file {"file": PATH} (CSV, JSON, iperf3 --json, SimGrid profile, transfer
                 samples), or a pattern or transform {"pattern": NAME, ...} (adagrouper
                 trace --help lists them).
  schedule file  JSON: {"stages": [["F0", "F1", "B0", ...], ...]}, one complete op
                 order per stage; or PyTorch's compute-only schedule CSV (one row per
                 stage, actions such as 2F0, 2I0, 2W0; placement read from it), as
                 adagrouper schedule --format torch-csv and --export-schedule write.

Schedules (--schedule NAME; docs/model.md, sections 2 and 14), each with
--split-backward (B becomes I then W) where it lists whole backwards, and
--w-fill dynamic (W ops fill idle time) where it has W ops; kfkb --split-backward
--w-fill dynamic is Ada-Grouper's grouping with zero-bubble W fill:
)";

constexpr const char* kEvaluatorsIntro = R"(
Evaluators (--evaluator NAME; docs/model.md, "Two evaluators"): every one gives the
same numbers to the last bit; they differ in speed and in what they record.
)";

constexpr const char* kSimulateOutput = R"(
Output: a short human summary on stdout; with --json the summary JSON instead. Output
files are written completely or not at all, and only once the run has succeeded: each
to a temporary file beside it, renamed over it at the end (keeping its mode; a symlink
writes its target); a device or FIFO is written directly, and - is stdout (then the
summary is not printed). An output may not be one of the inputs.
Exit status: 0 ok, 2 bad input (one line on stderr naming the file and field), 1 other
failures (an output that cannot be written, stdout included).

Example:
  adagrouper simulate --pipeline configs/examples/toy-4.json \
      --network configs/examples/toy-net-0.5s.json --schedule kfkb --k 2 \
      --micro-batch-size 1 --timeline toy.trace.json

Options)";

struct Choice {
  std::string_view name, help;
};

std::string simulate_help() {
  const Choice custom{"custom", "a per-stage op order from --schedule-file FILE, checked for deadlocks"};
  std::size_t name_width = custom.name.size();
  for (const ScheduleFamily& f : schedule_families()) name_width = std::max(name_width, f.name.size());
  std::string help = fmt::format(
      "Usage: adagrouper simulate --pipeline P --network N --schedule NAME [--k K]\n"
      "       adagrouper simulate --plan PLAN.json [--candidate I] [--recorded-order]\n"
      "                           [--pipeline P] [--network N] ...\n"
      "                           [--virtual-stages v] [--split-backward]\n"
      "                           [--w-fill static|dynamic] [--max-pending-w P]\n"
      "                           --micro-batch-size b [--iterations n] [--start-time T]\n"
      "                           [--stage-trace FILE] [--message-trace FILE] [--evaluator {}]\n"
      "                           [--json] [--output FILE] [--timeline FILE [--timeline-limit BYTES]]\n"
      "                           [--export-schedule FILE]\n",
      join_names(evaluator_choices(), "|"));
  help += kSimulateIntro;
  help += help_table(schedule_families(), name_width);
  help += help_table(std::array{custom}, name_width);
  help += kEvaluatorsIntro;
  help += help_table(evaluator_choices(), 10);
  help += kSimulateOutput;
  return help;
}

void add_simulate_options(po::options_description& o) {
  // clang-format off
  o.add_options()
    ("help,h", "show this help")
    ("pipeline", po::value<std::string>()->value_name("FILE"), "pipeline file (required)")
    ("network", po::value<std::string>()->value_name("FILE"), "network file (required)")
    ("schedule-file", po::value<std::string>()->value_name("FILE"),
       "custom per-stage op order, JSON or PyTorch CSV (implies --schedule custom); checked for deadlocks")
    ("micro-batch-size,b", po::value<int>()->value_name("b"),
       "micro-batch size b (required); must divide the global batch and lie in every profile")
    ("iterations,n", po::value<int>()->default_value(1)->value_name("n"), "iterations to run back to back")
    ("start-time", po::value<TimeArg>()->default_value(TimeArg{0.0})->value_name("T"),
       with_units("absolute time (s) at which iteration 0 starts, i.e. where in the traces the run begins",
                  Quantity::time).c_str())
    ("json", po::bool_switch(), "print the summary JSON on stdout instead of the human summary")
    ("output,o", po::value<std::string>()->value_name("FILE"), "write the summary JSON to FILE (-: stdout)")
    ("stage-trace", po::value<std::string>()->value_name("FILE"),
       "replay measured op durations: CSV iteration,stage,micro_batch,phase,duration_s (stage: the model "
       "stage; phase F, B, I or W); listed ops take the recorded duration (still stretched by the stage's "
       "speed), others the profile's")
    ("message-trace", po::value<std::string>()->value_name("FILE"),
       "replay measured message latencies: CSV iteration,stage,micro_batch,phase,latency_s (stage: the "
       "model stage that sends it; phase F: its activation message, B: its gradient message); listed messages "
       "wait latency_s before their bytes move instead of their channel's latency")
    ("export-schedule", po::value<std::string>()->value_name("FILE"),
       "write the order each stage ran (with dynamic W fill, where the W ops went) as PyTorch's "
       "compute-only schedule CSV, for PyTorch's _PipelineScheduleRuntime")
    ("timeline", po::value<std::string>()->value_name("FILE"),
       "write a Chrome trace / Perfetto JSON timeline to FILE (open it in ui.perfetto.dev); about 750 bytes "
       "per op, said on stderr above 1 GiB")
    ("timeline-limit", po::value<SizeArg>()->value_name("BYTES"),
       with_units("refuse, before running, a timeline estimated larger than BYTES", Quantity::size).c_str())
    ("evaluator", po::value<std::string>()->default_value("auto")->value_name("NAME"),
       "an evaluator above; the numbers are the same")
    ("plan", po::value<std::string>()->value_name("FILE"),
       "run what a plan (adagrouper plan --output) chose: its schedule, k, virtual stages, W fill, b, B and "
       "evaluation iterations and start; --pipeline and --network default to the plan's inputs (beside the "
       "plan where their relative paths do not exist from here)")
    ("candidate", po::value<int>()->value_name("I"), "with --plan: its candidates[I] instead of the chosen one")
    ("recorded-order", po::bool_switch(),
       "with --plan: run the compute order of the candidate's device programs in every iteration, as a "
       "runtime that executes them does (the chosen one's are the plan's devices; another's those it would "
       "hold): with dynamic W fill the W ops stay where the first iteration of the plan's evaluation put "
       "them, on the plan's own pipeline and network, instead of filling each iteration's idle time anew "
       "(the plan's deployed_iteration_time_s)");
  // clang-format on
  add_schedule_options(o);
}

// The schedule the options name, or the custom order --schedule-file gives (then
// `source` is that file), for the pipeline's model stages and M micro-batches.
Schedule schedule_option(const po::variables_map& vm, const Pipeline& pipeline, int M, std::string& source) {
  if (vm.count("schedule-file")) {
    source = vm["schedule-file"].as<std::string>();
    if (vm.count("schedule") && vm["schedule"].as<std::string>() != "custom")
      throw InputError("--schedule: give either a named schedule or --schedule-file, not both");
    for (const char* name : {"k", "virtual-stages", "max-pending-w"})
      if (vm.count(name)) throw InputError(fmt::format("--{}: a schedule file (--schedule-file) says it itself", name));
    if (vm["split-backward"].as<bool>()) throw InputError("--split-backward: a schedule file lists its own ops");
    if (vm["w-fill"].as<std::string>() != "static") throw InputError("--w-fill: a schedule file lists its own W ops");
    return load_schedule_file(source, pipeline.num_stages(), M);
  }
  if (vm.count("schedule") && vm["schedule"].as<std::string>() == "custom")
    throw InputError("--schedule: custom needs --schedule-file FILE");
  const ScheduleSpec spec = schedule_spec_option(vm, "simulate");
  return make_schedule(spec, stages_for(pipeline.num_stages(), spec.virtual_stages, pipeline.source), M);
}

// A custom order that deadlocks is bad input: names the dependency cycle and where the
// run gets stuck.
void check_custom_order(const Scenario& scenario, const std::string& source) {
  const auto cycle = find_dependency_cycle(scenario);
  if (cycle.empty()) return;
  std::string path;
  for (const auto& step : cycle) path += (path.empty() ? "" : " -> ") + step;
  std::string stuck;
  try {
    simulate(scenario);
  } catch (const SimError& e) {
    stuck = e.what();
  }
  throw InputError(fmt::format("{}: stages: the order deadlocks; dependency cycle: {}. {}", source, path, stuck));
}

// `simulate --plan FILE [--candidate I]`: the plan's candidate replaces the options of the
// schedule and the sizes, which may therefore not be given.
std::optional<PlannedRun> plan_option(const po::variables_map& vm) {
  if (!vm.count("plan")) {
    if (vm.count("candidate")) throw InputError("--candidate: only with --plan FILE");
    if (vm["recorded-order"].as<bool>()) throw InputError("--recorded-order: only with --plan FILE");
    return std::nullopt;
  }
  for (const char* name : {"schedule", "k", "virtual-stages", "max-pending-w", "schedule-file", "micro-batch-size"})
    if (vm.count(name)) throw InputError(fmt::format("--{}: the plan (--plan) gives it; drop one of them", name));
  if (vm["split-backward"].as<bool>() || vm["w-fill"].as<std::string>() != "static")
    throw InputError("--split-backward, --w-fill: the plan (--plan) gives them; drop one of them");
  std::optional<int> candidate;
  if (vm.count("candidate")) candidate = vm["candidate"].as<int>();
  return load_planned_run(vm["plan"].as<std::string>(), candidate);
}

// The pipeline of a planned run: B is the plan's, and its model stages those the plan
// ran. A pipeline with more (a plan made with --devices) is merged as the planner merged
// it (planner::merge_model_stages); one with fewer, or not a multiple, is refused.
void fit_to_plan(Pipeline& pipeline, const PlannedRun& run) {
  pipeline.global_batch_size = run.global_batch_size;
  const int wanted = run.stages * run.spec.virtual_stages;
  if (pipeline.num_stages() < wanted || pipeline.num_stages() % wanted != 0)
    throw InputError(fmt::format("--plan: the plan runs {} model stages ({} stages x v = {}), the pipeline {} has {}, "
                                 "not a multiple of them: give the pipeline the plan was made from",
                                 wanted, run.stages, run.spec.virtual_stages, pipeline.source, pipeline.num_stages()));
  if (pipeline.num_stages() != wanted) {
    const int global_batch_size = pipeline.global_batch_size;
    pipeline = planner::merge_model_stages(pipeline, wanted);
    pipeline.global_batch_size = global_batch_size;
  }
}

// `simulate --plan FILE --recorded-order`: what a runtime that executes the candidate's
// programs runs, a static order. The chosen candidate's are the plan's `devices` (`source`
// names them for the checks of a custom order); another's are those the plan would hold
// were it chosen (planner::planned_order: its own order, or with dynamic W fill the order
// of the first iteration of the plan's evaluation, on the pipeline and network the plan
// evaluated, whatever --pipeline and --network time the run).
Schedule recorded_schedule(const PlannedRun& run, const Scenario& scenario, const std::string& plan_path,
                           std::string& source) {
  if (!run.chosen && scenario.schedule.spec.w_fill != WFill::Dynamic) return scenario.schedule;  // needs no plan
  const nlohmann::json doc = read_json_file(plan_path);
  const Field root(doc, plan_path);
  if (!run.chosen)
    return planner::planned_order(run, root, load_planned_network(run, plan_path, traces::TraceRates()),
                                  scenario.schedule);
  if (!root.has("devices"))
    throw InputError(fmt::format("--recorded-order: {} holds no device programs (devices)", plan_path));
  const int model_stages = run.stages * run.spec.virtual_stages;
  std::vector<std::vector<Op>> order(static_cast<std::size_t>(run.stages));
  for (const planner::DeviceProgram& program : planner::read_device_programs(root.at("devices"), run.stages, model_stages))
    for (const planner::ProgramEntry& e : program.entries)
      if (const auto op = planner::compute_op(e)) order[static_cast<std::size_t>(program.stage)].push_back(*op);
  source = plan_path + ": devices";
  return fixed_order_schedule(run.spec, run.stages, scenario.micro_batches(), std::move(order), source);
}

// The run the options describe; `schedule_source` is the --schedule-file, or the plan
// whose recorded programs run, if one is given. The network is bound to the schedule's stages.
Scenario scenario_option(const po::variables_map& vm, const Pipeline& pipeline, const NetworkSpec& network, int b,
                         int iterations, const std::optional<PlannedRun>& planned, std::string& schedule_source) {
  const int M = pipeline.global_batch_size / b;
  Schedule schedule = planned ? make_schedule(planned->spec, planned->stages, M)
                              : schedule_option(vm, pipeline, M, schedule_source);
  Network bound = network.bind(schedule.num_stages());
  Scenario scenario = make_scenario(pipeline, std::move(bound), std::move(schedule), b, iterations);
  scenario.start_time_s = time_option(vm, "start-time");
  if (planned) {
    if (!(planned->start_time_s <= kMaxAbsoluteTime))
      throw InputError(fmt::format("--plan: evaluation.start_time_s {} is past the latest start time {:.0f} s",
                                   planned->start_time_s, kMaxAbsoluteTime));
    if (vm["start-time"].defaulted()) scenario.start_time_s = planned->start_time_s;
    if (vm["recorded-order"].as<bool>())
      scenario.schedule =
          recorded_schedule(*planned, scenario, vm["plan"].as<std::string>(), schedule_source);
  }
  if (vm.count("stage-trace")) {
    const std::string path = vm["stage-trace"].as<std::string>();
    set_op_timings(scenario, traces::load_stage_trace(path), path);
  }
  if (vm.count("message-trace")) {
    const std::string path = vm["message-trace"].as<std::string>();
    set_message_timings(scenario, traces::load_message_trace(path), path);
  }
  if (!schedule_source.empty()) check_custom_order(scenario, schedule_source);
  return scenario;
}

// The order the run executed, as PyTorch's CSV: iteration 0's (said on stderr when later
// iterations ran another, which dynamic W fill can do).
std::string executed_csv(const Scenario& scenario, const SimResult& result) {
  Schedule ran = scenario.schedule;
  ran.stages = result.executed.front();
  for (std::size_t it = 1; it < result.executed.size(); ++it)
    if (result.executed[it] != ran.stages) {
      std::cerr << fmt::format("adagrouper simulate: --export-schedule: iteration {} ran another order than "
                               "iteration 0; the file holds iteration 0's\n",
                               it);
      break;
    }
  return torch_csv(ran);
}

SimOptions sim_options(const po::variables_map& vm) {
  SimOptions options{.timeline = vm.count("timeline") > 0,
                     .record_order = vm.count("export-schedule") > 0,
                     .evaluator = parse_evaluator(vm["evaluator"].as<std::string>())};
  if (options.evaluator == Evaluator::Dataflow && options.timeline)
    throw InputError("--evaluator: dataflow records no timeline; drop --timeline or use auto or events");
  return options;
}

// Bytes of timeline JSON per op a run executes (its compute slice, its transfer's send
// and receive slices and flow arrow, the counters it moves): measured on the shipped
// examples at 530 to 700, rounded up.
constexpr double kTimelineBytesPerOp = 750;
// Above this estimate, --timeline says on stderr how large the file will be.
constexpr double kTimelineWarnBytes = 1024.0 * 1024 * 1024;

// Before the run: the timeline's estimated size against --timeline-limit (refused above
// it), and a warning on stderr above kTimelineWarnBytes.
// The compute ops of one iteration.
double ops_per_iteration(const Scenario& scenario) {
  double ops = 0;
  for (const auto& order : scenario.schedule.stages) ops += static_cast<double>(order.size());
  if (scenario.schedule.spec.w_fill == WFill::Dynamic)  // the orders list no W ops; the run places them
    ops += static_cast<double>(scenario.micro_batches()) * scenario.num_model_stages();
  return ops;
}

// Before a run whose ops take more than kTimelineWarnBytes of memory: how much, on stderr
// (one that would take more than a run may hold was refused when b was read).
void note_run_size(const Scenario& scenario) {
  const double ops = ops_per_iteration(scenario), bytes = ops * kBytesPerOp;
  if (bytes > kTimelineWarnBytes)
    std::cerr << fmt::format("adagrouper simulate: note: {:.0f} ops an iteration take about {:.1f} GiB of memory "
                             "({:.0f} bytes an op)\n",
                             ops, bytes / (1 << 30), kBytesPerOp);
}

void check_timeline_size(const po::variables_map& vm, const Scenario& scenario) {
  if (!vm.count("timeline")) {
    if (vm.count("timeline-limit")) throw InputError("--timeline-limit: only with --timeline FILE");
    return;
  }
  const double ops = ops_per_iteration(scenario) * scenario.iterations;
  const double bytes = ops * kTimelineBytesPerOp;
  const std::string size = fmt::format("about {:.3g} GB ({:.0f} ops x {:.0f} bytes)", bytes / 1e9, ops,
                                       kTimelineBytesPerOp);
  if (vm.count("timeline-limit")) {
    const double limit = finite_option(vm, "timeline-limit", 0);
    if (bytes > limit)
      throw InputError(fmt::format("--timeline-limit: the timeline would be {}, above the limit of {:.0f} bytes; "
                                   "run fewer iterations or raise the limit",
                                   size, limit));
  } else if (bytes > kTimelineWarnBytes) {
    std::cerr << fmt::format("adagrouper simulate: warning: --timeline: the file will be {} (--timeline-limit "
                             "BYTES refuses a larger one)\n",
                             size);
  }
}

// The outputs the options name, registered with the inputs they may not be.
struct Outputs {
  OutputSet set;
  std::optional<std::size_t> summary, timeline, exported;
};

void add_outputs(const po::variables_map& vm, Outputs& o) {
  input_options(o.set, vm, {"pipeline", "network", "schedule-file", "stage-trace", "message-trace"});
  o.summary = output_option(o.set, vm, "output");
  o.timeline = output_option(o.set, vm, "timeline");
  o.exported = output_option(o.set, vm, "export-schedule");
  check_json_stdout(o.set, vm);
}

}  // namespace

int cmd_simulate(int argc, char** argv) {
  po::options_description opts(simulate_help());
  add_simulate_options(opts);
  const auto parsed = parse_options(argc, argv, opts);
  if (!parsed) return 0;
  const po::variables_map& vm = *parsed;
  const std::optional<PlannedRun> planned = plan_option(vm);
  const std::string pipeline_path = planned && !vm.count("pipeline") && !planned->pipeline_path.empty()
                                        ? planned->pipeline_path
                                        : required(vm, "pipeline", "simulate");
  const std::string network_path = planned && !vm.count("network") && !planned->network_path.empty()
                                       ? planned->network_path
                                       : required(vm, "network", "simulate");
  const int b = planned ? planned->micro_batch_size : required<int>(vm, "micro-batch-size", "simulate");
  const int iterations = planned && vm["iterations"].defaulted() ? planned->iterations
                                                                  : int_option(vm, "iterations", 1, kMaxIterations);
  Outputs out;
  if (planned) out.set.input("--plan", vm["plan"].as<std::string>());
  add_outputs(vm, out);

  Pipeline pipeline = load_pipeline(pipeline_path);
  if (planned) fit_to_plan(pipeline, *planned);
  const NetworkSpec network = load_network_spec(network_path, traces::TraceRates());
  pipeline.at(b);  // validates b before M is used
  std::string schedule_source;
  const Scenario scenario = scenario_option(vm, pipeline, network, b, iterations, planned, schedule_source);
  const SimOptions options = sim_options(vm);
  check_timeline_size(vm, scenario);
  note_run_size(scenario);

  const SimResult result = simulate(scenario, options);
  const auto summary = summary_json(result);
  if (out.summary) out.set.write(*out.summary, summary.dump(2) + "\n");
  if (out.timeline) out.set.write(*out.timeline, timeline_json(result));
  if (out.exported) out.set.write(*out.exported, executed_csv(scenario, result));
  out.set.commit();
  if (out.set.has_stdout()) return 0;
  if (vm["json"].as<bool>()) {
    std::cout << summary.dump(2) << '\n';
  } else {
    std::cout << summary_text(result);
  }
  return 0;
}

}  // namespace adagrouper::cli
