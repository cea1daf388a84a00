// The Python module `adagrouper`: the simulator, planner, traces and sweeps of the C++
// libraries, called in-process (docs/python.md).
#include <pybind11/pybind11.h>

#include "bindings.h"
#include "convert.h"

#ifndef ADAGROUPER_VERSION
#define ADAGROUPER_VERSION "unknown"
#endif

PYBIND11_MODULE(adagrouper, m) {
  m.doc() = R"(adagrouper: simulate and plan pipeline-parallel DNN training on preempted networks.

The C++ simulator, planner, trace library and sweep runner, in-process:

    import adagrouper as ag
    p = ag.Pipeline("configs/pipelines/gpt-8stage-v100.json")
    s = ag.simulate(p, "configs/networks/preempted-25g.json", schedule="kfkb", k=2,
                    micro_batch_size=2)
    s["mean_iteration_time_s"]

Functions take pipelines and networks as objects, dicts or paths, return the JSON
documents of the command line as dicts, and raise InputError / SimError with the
command line's messages. The GIL is released while C++ runs; sweep() runs on threads.
Guide: docs/python.md.)";
  m.attr("__version__") = ADAGROUPER_VERSION;
  adagrouper::python::register_errors(m);
  adagrouper::python::bind_sim(m);
  adagrouper::python::bind_plan(m);
  adagrouper::python::bind_traces(m);
  adagrouper::python::bind_sweep(m);
}
