// adagrouper.Trace, trace(), load_trace() and patterns(): the traces library (rate
// forms, trace files, statistics, CSV and JSON), as `adagrouper trace` uses it.
#include <cmath>
#include <optional>
#include <stdexcept>
#include <string>
#include <utility>

#include <fmt/format.h>
#include <pybind11/stl.h>

#include "bindings.h"
#include "convert.h"
#include "traces.h"

namespace adagrouper::python {

namespace tr = adagrouper::traces;

namespace {

// A trace with where it came from (a file and its format, or a rate form: "spec").
struct PyTrace {
  tr::Trace trace;
  std::string source;
  std::string format;
};

// Window errors of the library as input errors, with `adagrouper trace`'s messages.
template <class F>
auto window_guard(F&& f) {
  try {
    return f();
  } catch (const std::invalid_argument& e) {
    throw InputError(fmt::format("--start-time / --end-time: {}", e.what()));
  } catch (const std::length_error&) {
    throw InputError(fmt::format("--start-time / --end-time: the window holds more than {} pieces of the trace; narrow it",
                                 tr::kMaxPoints));
  }
}

// The document `adagrouper trace stats --json` prints.
nlohmann::json stats_document(const PyTrace& t, std::optional<double> end_s, double start_s,
                              std::optional<double> threshold, double fraction) {
  double to = 0;
  if (end_s) {
    to = *end_s;
  } else {
    to = t.trace.span_s;
    if (!(to > start_s))
      throw InputError(fmt::format("--end-time: the trace is {} s long (a single point): give the window's end", to));
  }
  if (threshold && !std::isfinite(*threshold)) throw InputError("--threshold: must be a finite number");
  if (!(fraction >= 0) || !std::isfinite(fraction))
    throw InputError(fmt::format("--threshold-fraction: must be >= 0, got {}", fraction));
  const tr::TraceStats s = window_guard([&] { return tr::compute_stats(t.trace, start_s, to, threshold, fraction); });
  return tr::stats_json(t.source, t.format, t.trace, s);
}

PyTrace sliced(const PyTrace& t, double start_s, std::optional<double> end_s, bool repeat) {
  if (!end_s && t.trace.repeats())
    throw InputError(fmt::format("--end-time: {} repeats forever: give the window's end", t.source));
  if (repeat && !end_s) throw InputError("--repeat needs --end-time");
  tr::Trace out = window_guard([&] { return tr::slice(t.trace, start_s, end_s); });
  if (repeat) out = window_guard([&] { return tr::repeat(out, *end_s - start_s); });
  return {std::move(out), t.source, t.format};
}

void bind_trace_class(py::module_& m) {
  py::class_<PyTrace>(m, "Trace", R"(A piecewise-constant rate over time (bytes/s, or a stage's speed) with its
natural length: from trace(spec), load_trace(path) or Trace methods.)")
      .def_property_readonly("times", [](const PyTrace& t) { return t.trace.rate.times(); })
      .def_property_readonly("values", [](const PyTrace& t) { return t.trace.rate.values(); })
      .def_property_readonly("span_s", [](const PyTrace& t) { return t.trace.span_s; })
      .def_property_readonly("repeat_s",
                             [](const PyTrace& t) {
                               return t.trace.repeats() ? std::optional<double>(t.trace.rate.repeat_s()) : std::nullopt;
                             })
      .def_property_readonly("repeats", [](const PyTrace& t) { return t.trace.repeats(); })
      .def_readonly("source", &PyTrace::source)
      .def_readonly("format", &PyTrace::format)
      .def("__len__", [](const PyTrace& t) { return t.trace.size(); })
      .def("value_at", [](const PyTrace& t, double time) { return t.trace.rate.value_at(time); }, py::arg("t"),
           "The rate in force at absolute time t >= 0.")
      .def(
          "stats",
          [](const PyTrace& t, double start_s, std::optional<double> end_s, std::optional<double> threshold,
             double fraction) { return to_python(stats_document(t, end_s, start_s, threshold, fraction)); },
          py::kw_only(), py::arg("start_s") = 0.0, py::arg("end_s") = py::none(), py::arg("threshold") = py::none(),
          py::arg("threshold_fraction") = 0.5,
          "Time-weighted statistics over [start_s, end_s) as `adagrouper trace stats --json` prints them.")
      .def("to_csv", [](const PyTrace& t) { return tr::to_csv(t.trace); }, "The trace as CSV text (time_s,value).")
      .def("to_json", [](const PyTrace& t) { return to_python(tr::to_json(t.trace)); },
           "The trace as the project's JSON document.")
      .def("slice", &sliced, py::arg("start_s"), py::arg("end_s") = py::none(), py::kw_only(),
           py::arg("repeat") = false, "The window [start_s, end_s) moved to start at 0 (repeat: repeated).")
      .def(
          "scale", [](const PyTrace& t, double f) { return PyTrace{tr::scale(t.trace, f), t.source, t.format}; },
          py::arg("factor"), "Every value times factor.")
      .def("__repr__", [](const PyTrace& t) {
        return fmt::format("<adagrouper.Trace from {} ({}): {} points, {}>", t.source, t.format, t.trace.size(),
                           t.trace.repeats() ? fmt::format("repeats every {} s", t.trace.rate.repeat_s())
                                             : fmt::format("{} s long", t.trace.span_s));
      });
}

void bind_trace_functions(py::module_& m) {
  m.def(
      "trace",
      [](py::object spec, const std::string& source, std::optional<std::string> base_dir) {
        const nlohmann::json doc = to_json(spec, "spec");
        py::gil_scoped_release release;
        return PyTrace{tr::parse_rate_spec(doc, source, base_dir.value_or("")), source, "spec"};
      },
      py::arg("spec"), py::kw_only(), py::arg("source") = "<spec>", py::arg("base_dir") = py::none(),
      R"(The trace a rate form describes: {"constant": R}, {"points": [[t, R], ...], "repeat_s": P},
{"file": PATH} or a pattern or transform {"pattern": NAME, ...} (adagrouper.patterns()).)");
  m.def(
      "load_trace",
      [](py::object path, std::optional<std::string> format, double latency_s, bool rebase) {
        tr::LoadOptions options;
        if (format) {
          options.format = tr::format_from_name(*format);
          if (!options.format)
            throw InputError(fmt::format("--format: unknown format \"{}\" ({})", *format, tr::format_names()));
        }
        if (!(latency_s >= 0) || !std::isfinite(latency_s))
          throw InputError(fmt::format("--latency-s: must be >= 0, got {}", latency_s));
        options.latency_s = latency_s;
        options.rebase = rebase;
        const std::string file = as_path(path).string();
        py::gil_scoped_release release;
        tr::Loaded l = tr::load_trace_file(file, options);
        return PyTrace{std::move(l.trace), file, std::string(tr::format_name(l.format))};
      },
      py::arg("path"), py::kw_only(), py::arg("format") = py::none(), py::arg("latency_s") = 0.0,
      py::arg("rebase") = false,
      "Reads a trace file: CSV, the project's JSON, iperf3 --json, a SimGrid profile or transfer samples "
      "(format: detected unless given).");
  m.def(
      "patterns",
      [] {
        py::list out;
        for (const tr::Pattern& p : tr::patterns()) {
          py::dict d;
          d["name"] = std::string(p.name);
          d["keys"] = std::string(p.keys);
          d["help"] = std::string(p.help);
          d["transform"] = p.transform;
          out.append(d);
        }
        return out;
      },
      "The synthetic patterns and transforms of {\"pattern\": NAME, ...} rate forms, one dict each.");
}

}  // namespace

void bind_traces(py::module_& m) {
  bind_trace_class(m);
  bind_trace_functions(m);
}

}  // namespace adagrouper::python
