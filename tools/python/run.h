// One simulation as the Python module describes it: the keyword arguments of
// adagrouper.simulate (or the keys of a sweep configuration), turned into a scenario and
// run exactly as `adagrouper simulate` runs its options, with its error messages.
#pragma once

#include <optional>
#include <string>

#include <nlohmann/json.hpp>
#include <pybind11/pybind11.h>

#include "sim.h"

namespace adagrouper::python {

namespace py = pybind11;

// The options of one run; the defaults are simulate's.
struct RunOptions {
  std::optional<std::string> schedule;  // a family, or "custom" with schedule_file; none: 1f1b
  std::optional<int> k;
  std::optional<int> micro_batch_size;  // required
  int iterations = 1;
  double start_time_s = 0;
  std::optional<int> virtual_stages;
  bool split_backward = false;
  std::string w_fill = "static";
  std::optional<int> max_pending_w;
  std::optional<std::string> schedule_file;
  std::optional<std::string> stage_trace;
  std::optional<std::string> message_trace;
  std::string evaluator = "auto";
  bool timeline = false;
};

// Sets the option named `key` (simulate's keyword) from a Python value; false when no
// option has that name. TypeError when the value has the wrong type.
bool set_run_option(RunOptions& options, const std::string& key, py::handle value);
// The names set_run_option takes, for messages: "schedule, k, micro_batch_size, ...".
std::string run_option_names();

// The scenario the options describe, checked as the command line checks its options
// (same InputError messages). Needs no GIL.
sim::Scenario build_scenario(const sim::Pipeline& pipeline, const sim::NetworkSpec& network,
                             const RunOptions& options);

// What a run gives back: the summary JSON, and the timeline JSON text when asked for.
struct RunOutput {
  nlohmann::ordered_json summary;
  std::string timeline;
};
// Builds and simulates. Needs no GIL; throws the libraries' errors.
RunOutput run_simulation(const sim::Pipeline& pipeline, const sim::NetworkSpec& network, const RunOptions& options);

}  // namespace adagrouper::python
