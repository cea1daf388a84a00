// Simulate's options from Python values, and the scenario they describe, checked with
// the command line's messages (tools/cli/simulate_cmd.cpp and schedule_options.cpp).
#include "run.h"

#include <cmath>
#include <functional>
#include <map>
#include <utility>

#include <fmt/format.h>

#include "convert.h"
#include "traces.h"

namespace adagrouper::python {

namespace {

std::string string_value(py::handle value, const std::string& key) {
  if (!py::isinstance<py::str>(value))
    throw py::type_error(fmt::format("{}: a string, got {}", key, py::repr(value).cast<std::string>()));
  return value.cast<std::string>();
}

std::optional<std::string> optional_string(py::handle value, const std::string& key) {
  if (value.is_none()) return std::nullopt;
  return string_value(value, key);
}

std::optional<std::string> optional_path(py::handle value, const std::string& key) {
  if (value.is_none()) return std::nullopt;
  if (!is_path(value))
    throw py::type_error(fmt::format("{}: a path or None, got {}", key, py::repr(value).cast<std::string>()));
  return as_path(value).string();
}

bool bool_value(py::handle value, const std::string& key) {
  if (!py::isinstance<py::bool_>(value))
    throw py::type_error(fmt::format("{}: True or False, got {}", key, py::repr(value).cast<std::string>()));
  return value.cast<bool>();
}

int int_value(py::handle value, const std::string& key) {
  const std::optional<int> v = optional_int(value, key.c_str());
  if (!v) throw py::type_error(fmt::format("{}: an integer, got None", key));
  return *v;
}

double float_value(py::handle value, const std::string& key) {
  if (py::isinstance<py::bool_>(value) || !(py::isinstance<py::float_>(value) || py::hasattr(value, "__float__")))
    throw py::type_error(fmt::format("{}: a number, got {}", key, py::repr(value).cast<std::string>()));
  return py::float_(py::reinterpret_borrow<py::object>(value)).cast<double>();
}

using Setter = std::function<void(RunOptions&, py::handle, const std::string&)>;

const std::map<std::string, Setter>& setters() {
  static const std::map<std::string, Setter> table = {
      {"schedule", [](RunOptions& o, py::handle v, const std::string& k) { o.schedule = optional_string(v, k); }},
      {"k", [](RunOptions& o, py::handle v, const std::string& k) { o.k = optional_int(v, k.c_str()); }},
      {"micro_batch_size",
       [](RunOptions& o, py::handle v, const std::string& k) { o.micro_batch_size = optional_int(v, k.c_str()); }},
      {"iterations", [](RunOptions& o, py::handle v, const std::string& k) { o.iterations = int_value(v, k); }},
      {"start_time", [](RunOptions& o, py::handle v, const std::string& k) { o.start_time_s = float_value(v, k); }},
      {"virtual_stages",
       [](RunOptions& o, py::handle v, const std::string& k) { o.virtual_stages = optional_int(v, k.c_str()); }},
      {"split_backward",
       [](RunOptions& o, py::handle v, const std::string& k) { o.split_backward = bool_value(v, k); }},
      {"w_fill", [](RunOptions& o, py::handle v, const std::string& k) { o.w_fill = string_value(v, k); }},
      {"max_pending_w",
       [](RunOptions& o, py::handle v, const std::string& k) { o.max_pending_w = optional_int(v, k.c_str()); }},
      {"schedule_file",
       [](RunOptions& o, py::handle v, const std::string& k) { o.schedule_file = optional_path(v, k); }},
      {"stage_trace", [](RunOptions& o, py::handle v, const std::string& k) { o.stage_trace = optional_path(v, k); }},
      {"message_trace",
       [](RunOptions& o, py::handle v, const std::string& k) { o.message_trace = optional_path(v, k); }},
      {"evaluator", [](RunOptions& o, py::handle v, const std::string& k) { o.evaluator = string_value(v, k); }},
      {"timeline", [](RunOptions& o, py::handle v, const std::string& k) { o.timeline = bool_value(v, k); }},
  };
  return table;
}

// The schedule the options name, as simulate's schedule_option builds it.
sim::Schedule make_run_schedule(const sim::Pipeline& pipeline, const RunOptions& o, int M) {
  if (o.schedule_file) {
    if (o.schedule && *o.schedule != "custom")
      throw InputError("--schedule: give either a named schedule or --schedule-file, not both");
    if (o.k) throw InputError("--k: a schedule file (--schedule-file) says it itself");
    if (o.virtual_stages) throw InputError("--virtual-stages: a schedule file (--schedule-file) says it itself");
    if (o.max_pending_w) throw InputError("--max-pending-w: a schedule file (--schedule-file) says it itself");
    if (o.split_backward) throw InputError("--split-backward: a schedule file lists its own ops");
    if (o.w_fill != "static") throw InputError("--w-fill: a schedule file lists its own W ops");
    return sim::load_schedule_file(*o.schedule_file, pipeline.num_stages(), M);
  }
  const std::string name = o.schedule.value_or("1f1b");
  if (name == "custom") throw InputError("--schedule: custom needs --schedule-file FILE");
  sim::ScheduleSpec spec = sim::ScheduleSpec::named(name, o.k);
  if (o.virtual_stages) spec.virtual_stages = *o.virtual_stages;
  spec.split_backward = o.split_backward;
  if (o.w_fill != "static" && o.w_fill != "dynamic")
    throw InputError(fmt::format("--w-fill: static or dynamic, got '{}'", o.w_fill));
  spec.w_fill = o.w_fill == "dynamic" ? sim::WFill::Dynamic : sim::WFill::Static;
  spec.max_pending_w = o.max_pending_w;
  const int v = spec.virtual_stages;
  if (v < 1) throw InputError(fmt::format("--virtual-stages: must be >= 1, got {}", v));
  if (pipeline.num_stages() % v != 0)
    throw InputError(fmt::format("--virtual-stages: {} has {} model stages, not a multiple of v = {}",
                                 pipeline.source, pipeline.num_stages(), v));
  return sim::make_schedule(spec, pipeline.num_stages() / v, M);
}

// A custom order that deadlocks is bad input: names the dependency cycle and where the
// run gets stuck.
void check_custom_order(const sim::Scenario& scenario, const std::string& source) {
  const auto cycle = sim::find_dependency_cycle(scenario);
  if (cycle.empty()) return;
  std::string path;
  for (const auto& step : cycle) path += (path.empty() ? "" : " -> ") + step;
  std::string stuck;
  try {
    sim::simulate(scenario);
  } catch (const SimError& e) {
    stuck = e.what();
  }
  throw InputError(fmt::format("{}: stages: the order deadlocks; dependency cycle: {}. {}", source, path, stuck));
}

}  // namespace

bool set_run_option(RunOptions& options, const std::string& key, py::handle value) {
  const auto it = setters().find(key);
  if (it == setters().end()) return false;
  it->second(options, value, key);
  return true;
}

std::string run_option_names() {
  std::string names;
  for (const auto& [key, setter] : setters()) names += (names.empty() ? "" : ", ") + key;
  return names;
}

sim::Scenario build_scenario(const sim::Pipeline& pipeline, const sim::NetworkSpec& network,
                             const RunOptions& o) {
  if (!o.micro_batch_size) throw InputError("--micro-batch-size: missing (micro_batch_size=b)");
  const int b = *o.micro_batch_size;
  pipeline.at(b);  // validates b before M is used
  const int M = pipeline.global_batch_size / b;
  sim::Schedule schedule = make_run_schedule(pipeline, o, M);
  sim::Network bound = network.bind(schedule.num_stages());
  sim::Scenario scenario = sim::make_scenario(pipeline, std::move(bound), std::move(schedule), b, o.iterations);
  scenario.start_time_s = o.start_time_s;
  if (o.stage_trace) sim::set_op_timings(scenario, traces::load_stage_trace(*o.stage_trace), *o.stage_trace);
  if (o.message_trace)
    sim::set_message_timings(scenario, traces::load_message_trace(*o.message_trace), *o.message_trace);
  if (!(scenario.start_time_s >= 0) || !std::isfinite(scenario.start_time_s))
    throw InputError(fmt::format("--start-time: must be a finite time >= 0, got {}", scenario.start_time_s));
  if (o.schedule_file) check_custom_order(scenario, *o.schedule_file);
  return scenario;
}

RunOutput run_simulation(const sim::Pipeline& pipeline, const sim::NetworkSpec& network, const RunOptions& o) {
  const sim::Scenario scenario = build_scenario(pipeline, network, o);
  const sim::SimOptions options{.timeline = o.timeline, .evaluator = sim::parse_evaluator(o.evaluator)};
  if (options.evaluator == sim::Evaluator::Dataflow && options.timeline)
    throw InputError("--evaluator: dataflow records no timeline; drop --timeline or use auto or events");
  const sim::SimResult result = sim::simulate(scenario, options);
  RunOutput out{sim::summary_json(result), {}};
  if (o.timeline) out.timeline = sim::timeline_json(result);
  return out;
}

}  // namespace adagrouper::python
