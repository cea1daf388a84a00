// The parts of the Python module, each adding its classes and functions to it.
#pragma once

#include <pybind11/pybind11.h>

namespace adagrouper::python {

void bind_sim(pybind11::module_& m);     // Pipeline, Network, simulate, schedule, tables
void bind_plan(pybind11::module_& m);    // plan
void bind_traces(pybind11::module_& m);  // Trace, trace, load_trace, patterns
void bind_sweep(pybind11::module_& m);   // sweep, run_study

}  // namespace adagrouper::python
