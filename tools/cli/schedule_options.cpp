// The options that name a schedule.
#include "schedule_options.h"

#include <algorithm>

#include <fmt/format.h>

#include "cli_util.h"
#include "error.h"
#include "pipeline.h"

namespace adagrouper::cli {

namespace po = boost::program_options;

void add_schedule_options(po::options_description& opts) {
  // clang-format off
  opts.add_options()
    ("schedule", po::value<std::string>()->value_name("NAME"), "a schedule family (listed above)")
    ("k", po::value<int>()->value_name("K"), "group size of the families that take one (kfkb), 1 <= K <= M")
    ("virtual-stages,v", po::value<int>()->value_name("v"),
       "model stages per stage (default: 1, or the family's only v, 2 for zbv and dualpipev)")
    ("split-backward", po::bool_switch(), "run every backward B as I (input gradient) then W (weight gradient)")
    ("w-fill", po::value<std::string>()->default_value("static")->value_name("static|dynamic"),
       "static: W ops run where the order lists them; dynamic: they fill the stage's idle time, oldest first")
    ("max-pending-w", po::value<int>()->value_name("P"),
       "dynamic W fill: run a W as soon as P are pending (default: unlimited; 0: each right after its I)");
  // clang-format on
}

sim::ScheduleSpec schedule_spec_option(const po::variables_map& vm, const char* command) {
  const std::string name = required(vm, "schedule", command);
  sim::ScheduleSpec spec = sim::ScheduleSpec::named(
      name, vm.count("k") ? std::optional<int>(int_option(vm, "k", 1, sim::kMaxBatchSize)) : std::nullopt);
  if (vm.count("virtual-stages")) spec.virtual_stages = int_option(vm, "virtual-stages", 1, sim::kMaxStages);
  spec.split_backward = vm["split-backward"].as<bool>();
  const std::string fill = vm["w-fill"].as<std::string>();
  if (fill != "static" && fill != "dynamic")
    throw InputError(fmt::format("--w-fill: static or dynamic, got '{}'", fill));
  spec.w_fill = fill == "dynamic" ? sim::WFill::Dynamic : sim::WFill::Static;
  if (vm.count("max-pending-w")) spec.max_pending_w = int_option(vm, "max-pending-w", 0, sim::kMaxBatchSize);
  return spec;
}

void check_op_count(const sim::ScheduleSpec& spec, int stages, int micro_batches) {
  // A family that runs with one v gets it by default.
  const sim::ScheduleFamily* family = sim::find_schedule_family(spec.family);
  const long long v = std::max(spec.virtual_stages, family ? family->virtual_stages : 1);
  const long long ops = 2LL * stages * v * micro_batches;  // as sim::kMaxOps counts them
  if (ops > sim::kMaxOps)
    throw InputError(fmt::format("--micro-batches: {} stages x {} micro-batches make {} ops per iteration, more "
                                 "than the {} a schedule may have",
                                 stages, micro_batches, ops, sim::kMaxOps));
}

int stages_for(int model_stages, int v, const std::string& pipeline_source) {
  if (v < 1) throw InputError(fmt::format("--virtual-stages: must be >= 1, got {}", v));
  if (model_stages % v != 0)
    throw InputError(fmt::format("--virtual-stages: {} has {} model stages, not a multiple of v = {}",
                                 pipeline_source, model_stages, v));
  return model_stages / v;
}

}  // namespace adagrouper::cli
