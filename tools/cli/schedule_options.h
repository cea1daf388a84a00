// The options that name a schedule, shared by simulate, schedule and plan: --schedule,
// --k, --virtual-stages, --split-backward, --w-fill, --max-pending-w.
#pragma once

#include <boost/program_options.hpp>

#include "schedule.h"

namespace adagrouper::cli {

// Adds the options (not --schedule-file, which only some commands take).
void add_schedule_options(boost::program_options::options_description& opts);

// The spec they name; `command` names the subcommand in a missing-option message.
sim::ScheduleSpec schedule_spec_option(const boost::program_options::variables_map& vm, const char* command);

// Refuses a schedule of more ops per iteration than sim::kMaxOps, before it is built.
void check_op_count(const sim::ScheduleSpec& spec, int stages, int micro_batches);

// The number of stages when the pipeline's model stages run v per stage; InputError when
// v does not divide them.
int stages_for(int model_stages, int virtual_stages, const std::string& pipeline_source);

}  // namespace adagrouper::cli
