// `adagrouper schedule`: the stage orders of a named schedule, without simulating.
#include <iostream>
#include <string>

#include <boost/program_options.hpp>
#include <fmt/format.h>
#include <nlohmann/json.hpp>

#include "cli_util.h"
#include "commands.h"
#include "schedule_options.h"
#include "sim.h"

namespace adagrouper::cli {

namespace po = boost::program_options;

namespace {

constexpr const char* kScheduleIntro = R"(Usage: adagrouper schedule NAME --stages D --micro-batches M [--virtual-stages v]
                           [--k K] [--split-backward] [--w-fill static|dynamic]
                           [--max-pending-w P] [--output-format grid|torch-csv|json] [--output FILE]

Prints the op order of every stage of a named schedule (docs/model.md, sections 2 and
14): by default a step-by-stage grid, as PyTorch's _format_pipeline_order prints it;
torch-csv is PyTorch's compute-only schedule CSV (one row per stage, actions such as
"2F0" = model stage 2, forward, micro-batch 0; F, B, I, W), which simulate
--schedule-file and PyTorch's _PipelineScheduleRuntime read; json lists the orders and
where each model stage runs. With dynamic W fill the W ops are placed by the run, so
the orders list none: use simulate --export-schedule to see where they went.

Schedules:
)";

constexpr const char* kScheduleExample = R"(
Example:
  adagrouper schedule zbv --stages 4 --micro-batches 8
  adagrouper schedule interleaved-1f1b --stages 4 --virtual-stages 2 --micro-batches 8 \
      --output-format torch-csv --output interleaved.csv

Options)";

std::string schedule_help() {
  std::size_t width = 0;
  for (const sim::ScheduleFamily& f : sim::schedule_families()) width = std::max(width, f.name.size());
  return kScheduleIntro + help_table(sim::schedule_families(), width) + kScheduleExample;
}

void add_options(po::options_description& o) {
  // clang-format off
  o.add_options()
    ("help,h", "show this help")
    ("stages", po::value<int>()->value_name("D"), "number of stages (devices, pipeline ranks); required")
    ("micro-batches", po::value<int>()->value_name("M"), "micro-batches per iteration; required")
    ("output-format", po::value<std::string>()->default_value("grid")->value_name("F"), "grid, torch-csv or json")
    ("output,o", po::value<std::string>()->value_name("FILE"), "write to FILE instead of stdout (-: stdout)");
  // clang-format on
  add_schedule_options(o);
}

}  // namespace

int cmd_schedule(int argc, char** argv) {
  po::options_description opts(schedule_help());
  add_options(opts);
  const auto parsed = parse_options(argc, argv, opts, "schedule", kFormatAliases);
  if (!parsed) return 0;
  const po::variables_map& vm = *parsed;
  required<int>(vm, "stages", "schedule");
  required<int>(vm, "micro-batches", "schedule");
  const int D = int_option(vm, "stages", 1, sim::kMaxStages);
  const int M = int_option(vm, "micro-batches", 1, sim::kMaxBatchSize);
  const std::string format = vm["output-format"].as<std::string>();
  if (format != "grid" && format != "torch-csv" && format != "json")
    throw InputError(fmt::format("--output-format: grid, torch-csv or json, got '{}'", format));
  OutputSet outputs;
  const auto out = output_option(outputs, vm, "output");
  const sim::ScheduleSpec spec = schedule_spec_option(vm, "schedule");
  check_op_count(spec, D, M);
  const sim::Schedule s = sim::make_schedule(spec, D, M);
  std::string text = format == "grid"        ? sim::schedule_grid(s)
                     : format == "torch-csv" ? sim::torch_csv(s)
                                             : sim::schedule_json(s, M).dump(2) + "\n";
  if (out) {
    outputs.write(*out, text);
    outputs.commit();
  } else {
    std::cout << text;
  }
  return 0;
}

}  // namespace adagrouper::cli
