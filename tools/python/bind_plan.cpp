// adagrouper.plan(): the Ada-Grouper planner (planner::make_plan) and its plan JSON, as
// `adagrouper plan --json` writes it for a pipeline file.
#include <cmath>
#include <optional>
#include <string>
#include <vector>

#include <fmt/format.h>
#include <pybind11/stl.h>

#include "bindings.h"
#include "convert.h"
#include "planner.h"
#include "traces.h"

namespace adagrouper::python {

namespace {

// The inputs record of the plan: a path as given with its file's sha256; an object read
// from a file, that file; a dict, its source name and the sha256 of its compact JSON.
planner::InputFile input_record(const std::string& role, py::handle arg, const std::string& source) {
  if (is_path(arg)) {
    const std::string path = as_path(arg).string();
    return {role, path, file_sha256(path)};
  }
  if (py::isinstance<py::dict>(arg)) {
    const std::string text = to_json(arg, role).dump();
    const py::bytes data(text);
    const std::string sha = py::module_::import("hashlib").attr("sha256")(data).attr("hexdigest")().cast<std::string>();
    return {role, source, sha};
  }
  return {role, source, file_sha256(source)};
}

planner::PlanOptions plan_options(const sim::Pipeline& pipeline, std::optional<double> memory_limit,
                                  std::optional<int> global_batch_size, int eval_iterations, double eval_start) {
  planner::PlanOptions options;
  options.global_batch_size = global_batch_size.value_or(pipeline.global_batch_size);
  if (memory_limit) {
    if (!(*memory_limit > 0) || !std::isfinite(*memory_limit))
      throw InputError(fmt::format("--memory-limit: must be a positive number of bytes, got {}", *memory_limit));
    options.memory_limit_bytes = *memory_limit;
  } else {
    options.memory_limit_bytes = pipeline.memory_limit_bytes.value_or(0.0);
  }
  if (eval_iterations < 1 || eval_iterations > sim::kMaxIterations)
    throw InputError(fmt::format("--iterations: must be in 1..{}, got {}", sim::kMaxIterations, eval_iterations));
  options.eval_iterations = eval_iterations;
  options.eval_start_s = eval_start;
  if (!(options.eval_start_s >= 0) || !std::isfinite(options.eval_start_s))
    throw InputError(fmt::format("--start-time: must be a finite time >= 0, got {}", options.eval_start_s));
  return options;
}

// A keyword argument that also has an older name (plan's eval_iterations, eval_start):
// the one given, not both; `fallback` when neither is.
template <class T>
T either(std::optional<T> value, std::optional<T> old, const char* name, const char* old_name, T fallback) {
  if (value && old) throw InputError(fmt::format("{}: give {} or its older name {}, not both", name, name, old_name));
  return value ? *value : old.value_or(fallback);
}

// devices, families, virtual_stages as `plan --devices D --families LIST --virtual-stages
// LIST`: with devices, every family unless families names some.
void family_options(const sim::Pipeline& pipeline, std::optional<int> devices, std::optional<std::string> families,
                    std::optional<std::string> virtual_stages, planner::PlanOptions& options) {
  if (devices) {
    if (*devices < 1 || pipeline.num_stages() % *devices != 0)
      throw InputError(fmt::format("--devices: {} has {} model stages, which is not a multiple of {} devices",
                                   pipeline.source, pipeline.num_stages(), *devices));
    options.devices = *devices;
  }
  if (families) {
    options.families = planner::parse_families(*families);
  } else if (devices) {
    options.families = planner::extra_families();
  }
  if (virtual_stages) options.virtual_stages = planner::parse_virtual_stages(*virtual_stages);
}

constexpr const char* kPlanDoc = R"(The Ada-Grouper planner, as `adagrouper plan --json` runs it on a
pipeline file: every (k, b) on the memory-limit curve and the baselines 1f1b, dapple-b
and gpipe, each simulated on the network; returns the plan JSON (docs/formats.md,
"Plan JSON") as a dict: "chosen", every candidate with its status and reason, and the
per-device programs.

pipeline: a Pipeline, a dict or a path; network: a Network, a dict or a path.
memory_limit: bytes per stage (default: the pipeline's memory_limit_bytes);
global_batch_size: B (default: the pipeline's); iterations, start_time: the
iterations simulated per candidate (default 1) and where in the traces they start
(default 0), as simulate's (eval_iterations and eval_start, their older names, are
accepted too).
devices: D devices for the pipeline's J model stages (J a multiple of D), with every
schedule family considered; families: a comma-separated list of them ("all",
"kfkb-dynamic", "interleaved-1f1b", "zbv", ...); virtual_stages: the v to consider, as
"1,2" (docs/model.md section 11). rank_by: "predicted" (default) or "deployed", as
`plan --rank-by` (dynamic W fill ranked by the order its programs fix). text=True
returns (plan, table), the table the command line prints.

Raises InputError when nothing fits the memory limit, naming the smallest need.)";

}  // namespace

void bind_plan(py::module_& m) {
  m.def(
      "plan",
      [](py::object pipeline, py::object network, std::optional<double> memory_limit,
         std::optional<int> global_batch_size, std::optional<int> iterations, std::optional<double> start_time,
         std::optional<int> devices, std::optional<std::string> families, std::optional<std::string> virtual_stages,
         std::string rank_by, bool text, std::optional<int> eval_iterations,
         std::optional<double> eval_start) -> py::object {
        const auto p = pipeline_arg(pipeline);
        const auto n = network_arg(network);
        const std::vector<planner::InputFile> inputs{input_record("pipeline", pipeline, p->source),
                                                     input_record("network", network, n->source)};
        planner::PlanOptions options =
            plan_options(*p, memory_limit, global_batch_size,
                         either(iterations, eval_iterations, "iterations", "eval_iterations", 1),
                         either(start_time, eval_start, "start_time", "eval_start", 0.0));
        family_options(*p, devices, families, virtual_stages, options);
        options.rank_by = planner::parse_rank_by(rank_by);
        nlohmann::ordered_json doc;
        std::string table;
        {
          py::gil_scoped_release release;
          const sim::Network bound = n->bind(devices.value_or(p->num_stages()));
          const planner::PlanResult result = planner::make_plan(*p, bound, options);
          doc = planner::plan_json(result, inputs);
          if (text) table = planner::plan_text(result);
        }
        if (!text) return to_python(doc);
        return py::make_tuple(to_python(doc), table);
      },
      kPlanDoc, py::arg("pipeline"), py::arg("network"), py::kw_only(), py::arg("memory_limit") = py::none(),
      py::arg("global_batch_size") = py::none(), py::arg("iterations") = py::none(), py::arg("start_time") = py::none(),
      py::arg("devices") = py::none(), py::arg("families") = py::none(), py::arg("virtual_stages") = py::none(),
      py::arg("rank_by") = "predicted", py::arg("text") = false, py::arg("eval_iterations") = py::none(), py::arg("eval_start") = py::none());
}

}  // namespace adagrouper::python
