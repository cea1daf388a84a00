// The subcommands of the adagrouper command line. Each parses its own options and
// throws InputError / SimError for bad input; main() turns those into exit status 2.
#pragma once

namespace adagrouper::cli {

int cmd_simulate(int argc, char** argv);
int cmd_schedule(int argc, char** argv);
int cmd_trace(int argc, char** argv);
int cmd_trace_import_kineto(int argc, char** argv);  // kineto_cmd.cpp, a subcommand of trace
int cmd_plan(int argc, char** argv);
int cmd_model(int argc, char** argv);
int cmd_partition(int argc, char** argv);
int cmd_sweep(int argc, char** argv);
int cmd_compare(int argc, char** argv);
int cmd_adapt(int argc, char** argv);

}  // namespace adagrouper::cli
