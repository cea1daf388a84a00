// adagrouper.Pipeline, adagrouper.Network, simulate(), schedule() and the tables of
// schedule families and evaluators.
#include <memory>
#include <string>
#include <utility>

#include <fmt/format.h>
#include <pybind11/stl.h>

#include "bindings.h"
#include "convert.h"
#include "run.h"

namespace adagrouper::python {

namespace {

py::dict stage_params_dict(const sim::StageParams& s) {
  py::dict d;
  d["forward_s"] = s.fwd;
  d["backward_s"] = s.bwd;
  d["backward_input_s"] = s.bwd_input;
  d["backward_weight_s"] = s.bwd_weight;
  d["weight_grad_bytes"] = s.wgrad;
  d["activation_bytes"] = s.act;
  d["output_bytes"] = s.out;
  d["grad_output_bytes"] = s.gout;
  d["static_bytes"] = s.static_bytes;
  d["optimizer_s"] = s.opt;
  return d;
}

void bind_pipeline(py::module_& m) {
  py::class_<sim::Pipeline, std::shared_ptr<sim::Pipeline>>(m, "Pipeline", R"(A pipeline file (docs/formats.md):
stages with measured per-micro-batch-size profiles.

Pipeline(path) reads a file; Pipeline(dict, source="<dict>") takes the document itself,
`source` naming it in error messages.)")
      .def(py::init([](py::object doc, const std::string& source) {
             return std::const_pointer_cast<sim::Pipeline>(pipeline_arg(doc, source));
           }),
           py::arg("doc"), py::arg("source") = "<dict>")
      .def_readonly("name", &sim::Pipeline::name)
      .def_readonly("source", &sim::Pipeline::source)
      .def_readonly("global_batch_size", &sim::Pipeline::global_batch_size)
      .def_readonly("memory_limit_bytes", &sim::Pipeline::memory_limit_bytes)
      .def_property_readonly("num_stages", &sim::Pipeline::num_stages)
      .def_property_readonly("min_micro_batch_size", &sim::Pipeline::min_micro_batch_size)
      .def_property_readonly("max_micro_batch_size", &sim::Pipeline::max_micro_batch_size)
      .def(
          "stage_params",
          [](const sim::Pipeline& p, int b) {
            py::list out;
            for (const sim::StageParams& s : p.at(b, "micro_batch_size")) out.append(stage_params_dict(s));
            return out;
          },
          py::arg("micro_batch_size"),
          "Per-stage parameters at micro-batch size b (interpolated between measured sizes; each op's\n"
          "duration includes its stage's op_overhead_s).")
      .def("__repr__", [](const sim::Pipeline& p) {
        return fmt::format("<adagrouper.Pipeline '{}': {} stages, B={}, from {}>", p.name, p.num_stages(),
                           p.global_batch_size, p.source);
      });
}

void bind_network(py::module_& m) {
  py::class_<sim::NetworkSpec, std::shared_ptr<sim::NetworkSpec>>(m, "Network", R"(A network file (docs/formats.md):
latency, a default rate, per-channel rates and per-stage speeds; rates are any rate form
({"constant"}, {"points"}, {"file"}, {"pattern"}).

Network(path) reads a file; Network(dict, source="<dict>") takes the document, resolving
relative trace paths against the directory of `source` (the current one by default).)")
      .def(py::init([](py::object doc, const std::string& source) {
             return std::const_pointer_cast<sim::NetworkSpec>(network_arg(doc, source));
           }),
           py::arg("doc"), py::arg("source") = "<dict>")
      .def_readonly("source", &sim::NetworkSpec::source)
      .def_readonly("latency_s", &sim::NetworkSpec::latency_s)
      .def_readonly("burst_bytes", &sim::NetworkSpec::burst_bytes)
      .def("__repr__", [](const sim::NetworkSpec& n) {
        return fmt::format("<adagrouper.Network from {}: latency {} s, {} channel entries>", n.source, n.latency_s,
                           n.channels.size());
      });
  m.def(
      "load_pipeline", [](py::object path) { return std::const_pointer_cast<sim::Pipeline>(pipeline_arg(path)); },
      py::arg("path"), "Reads a pipeline file: the same as Pipeline(path).");
  m.def(
      "load_network", [](py::object path) { return std::const_pointer_cast<sim::NetworkSpec>(network_arg(path)); },
      py::arg("path"), "Reads a network file: the same as Network(path).");
}

constexpr const char* kSimulateDoc = R"(Simulates one schedule on a pipeline and a network, as
`adagrouper simulate --json` does, and returns its summary JSON as a dict
(docs/formats.md, "Summary JSON").

pipeline: a Pipeline, a pipeline dict or a path; network: a Network, a dict or a path.
schedule: a family (adagrouper.schedule_families()); None means 1f1b, or the
schedule_file's order. k: the group size of kfkb. micro_batch_size: b (required).
iterations, start_time: run n iterations from absolute time T in the traces.
virtual_stages, split_backward, w_fill ("static" or "dynamic"), max_pending_w: as the
command line's options of the same names. schedule_file: a custom order (JSON or
PyTorch CSV); stage_trace: measured op durations (CSV); message_trace: measured
message latencies (CSV). evaluator: "auto", "events" or
"dataflow" (the same numbers). timeline=True returns (summary, timeline), the timeline
as the Chrome trace / Perfetto dict `--timeline` writes.

Raises InputError (bad input, with the command line's message) or SimError.)";

void bind_simulate(py::module_& m) {
  m.def(
      "simulate",
      [](py::object pipeline, py::object network, py::object micro_batch_size, py::object schedule, py::object k,
         py::object iterations, py::object start_time, py::object virtual_stages, py::object split_backward,
         py::object w_fill, py::object max_pending_w, py::object schedule_file, py::object stage_trace,
         py::object message_trace, py::object evaluator, py::object timeline) -> py::object {
        RunOptions o;
        const std::pair<const char*, py::object> args[] = {
            {"schedule", schedule},           {"k", k},
            {"micro_batch_size", micro_batch_size}, {"iterations", iterations},
            {"start_time", start_time},       {"virtual_stages", virtual_stages},
            {"split_backward", split_backward}, {"w_fill", w_fill},
            {"max_pending_w", max_pending_w}, {"schedule_file", schedule_file},
            {"stage_trace", stage_trace},     {"message_trace", message_trace},
            {"evaluator", evaluator},
            {"timeline", timeline}};
        for (const auto& [key, value] : args) set_run_option(o, key, value);
        const auto p = pipeline_arg(pipeline);
        const auto n = network_arg(network);
        RunOutput out;
        {
          py::gil_scoped_release release;
          out = run_simulation(*p, *n, o);
        }
        py::object summary = to_python(out.summary);
        if (!o.timeline) return summary;
        return py::make_tuple(summary, parse_json_text(out.timeline));
      },
      kSimulateDoc, py::arg("pipeline"), py::arg("network"), py::kw_only(), py::arg("micro_batch_size"),
      py::arg("schedule") = py::none(), py::arg("k") = py::none(), py::arg("iterations") = 1, py::arg("start_time") = 0.0,
      py::arg("virtual_stages") = py::none(), py::arg("split_backward") = false, py::arg("w_fill") = "static",
      py::arg("max_pending_w") = py::none(), py::arg("schedule_file") = py::none(),
      py::arg("stage_trace") = py::none(), py::arg("message_trace") = py::none(), py::arg("evaluator") = "auto", py::arg("timeline") = false);
}

constexpr const char* kScheduleDoc = R"(The stage orders of a named schedule, without simulating,
as `adagrouper schedule --format json` prints them: a dict with the label, family,
stages, virtual_stages, model_stages, micro_batches, placement (the stage of each model
stage) and orders (per stage, actions such as "2F0": model stage 2, forward,
micro-batch 0). format="grid" or "torch-csv" returns the text of those formats instead.)";

void bind_schedule(py::module_& m) {
  m.def(
      "schedule",
      [](const std::string& name, int stages, int micro_batches, std::optional<int> k,
         std::optional<int> virtual_stages, bool split_backward, const std::string& w_fill,
         std::optional<int> max_pending_w, const std::string& format) -> py::object {
        if (stages < 1) throw InputError(fmt::format("--stages: must be >= 1, got {}", stages));
        if (micro_batches < 1) throw InputError(fmt::format("--micro-batches: must be >= 1, got {}", micro_batches));
        if (format != "dict" && format != "grid" && format != "torch-csv")
          throw InputError(fmt::format("--format: dict, grid or torch-csv, got '{}'", format));
        if (w_fill != "static" && w_fill != "dynamic")
          throw InputError(fmt::format("--w-fill: static or dynamic, got '{}'", w_fill));
        sim::ScheduleSpec spec = sim::ScheduleSpec::named(name, k);
        if (virtual_stages) spec.virtual_stages = *virtual_stages;
        spec.split_backward = split_backward;
        spec.w_fill = w_fill == "dynamic" ? sim::WFill::Dynamic : sim::WFill::Static;
        spec.max_pending_w = max_pending_w;
        const sim::Schedule s = sim::make_schedule(spec, stages, micro_batches);
        if (format == "grid") return py::str(sim::schedule_grid(s));
        if (format == "torch-csv") return py::str(sim::torch_csv(s));
        return to_python(sim::schedule_json(s, micro_batches));
      },
      kScheduleDoc, py::arg("name"), py::arg("stages"), py::arg("micro_batches"), py::kw_only(),
      py::arg("k") = py::none(), py::arg("virtual_stages") = py::none(), py::arg("split_backward") = false,
      py::arg("w_fill") = "static", py::arg("max_pending_w") = py::none(), py::arg("format") = "dict");
}

const char* backward_name(sim::Backward b) {
  switch (b) {
    case sim::Backward::Whole: return "whole";
    case sim::Backward::Split: return "split";
    case sim::Backward::Mixed: return "mixed";
  }
  return "?";
}

void bind_tables(py::module_& m) {
  m.def(
      "schedule_families",
      [] {
        py::list out;
        for (const sim::ScheduleFamily& f : sim::schedule_families()) {
          py::dict d;
          d["name"] = std::string(f.name);
          d["help"] = std::string(f.help);
          d["takes_k"] = f.takes_k;
          d["placement"] = f.placement == sim::Placement::V ? "V" : "loop";
          d["virtual_stages"] = f.virtual_stages;
          d["backward"] = backward_name(f.backward);
          out.append(d);
        }
        return out;
      },
      "The schedule families simulate() and schedule() take, one dict each (name, help, takes_k, ...).");
  m.def(
      "evaluators",
      [] {
        py::list out;
        for (const sim::EvaluatorChoice& e : sim::evaluator_choices())
          out.append(py::make_tuple(std::string(e.name), std::string(e.help)));
        return out;
      },
      "The evaluators simulate() takes, as (name, help) pairs; all give the same numbers.");
}

}  // namespace

void bind_sim(py::module_& m) {
  bind_pipeline(m);
  bind_network(m);
  bind_simulate(m);
  bind_schedule(m);
  bind_tables(m);
}

}  // namespace adagrouper::python
