// adagrouper: simulator and planner for pipeline-parallel training on preempted networks.
#include <array>
#include <exception>
#include <iostream>
#include <string>
#include <string_view>

#include <boost/program_options/errors.hpp>

#include "cli_util.h"
#include "commands.h"
#include "sim.h"

namespace {

namespace cli = adagrouper::cli;

constexpr const char* kUsage = R"(Usage: adagrouper COMMAND [OPTIONS]   (adagrouper COMMAND --help for details)

Simulates and plans pipeline-parallel DNN training (GPipe, 1F1B, DAPPLE, kFkB) on
networks that other jobs preempt. Inputs and outputs: docs/formats.md; the execution
model: docs/model.md.

Commands:
)";

constexpr const char* kExitStatus = R"(
Exit status: 0 success, 2 bad input (one line on stderr naming the file and field),
1 any other failure.
)";

struct Command {
  std::string_view name;
  std::string_view help;  // for the list in --help
  int (*run)(int argc, char** argv);
};

// clang-format off
constexpr std::array<Command, 9> kCommands{{
  {"simulate", "run one schedule on a pipeline and network whose links follow rate\n"
               "traces; print a summary, write summary JSON and a Perfetto timeline",
   cli::cmd_simulate},
  {"schedule", "print the stage orders of a schedule (a step grid, PyTorch's schedule\n"
               "CSV or JSON) without simulating",
   cli::cmd_schedule},
  {"trace", "synthesize, import, summarize and cut bandwidth / speed traces\n"
            "(synth, import, stats, slice)",
   cli::cmd_trace},
  {"plan", "choose the fastest kFkB plan (k, micro-batch size) that fits the memory\n"
           "limit, evaluating candidates with the simulator; write the plan JSON\n"
           "with per-device programs (from a pipeline file, or from a model file\n"
           "with --model and --stages S|auto)",
   cli::cmd_plan},
  {"model", "write a layer-level model file from architecture hyperparameters (GPT,\n"
            "BERT, U-Net, GNMT) with an analytic device model; merge measured layers",
   cli::cmd_model},
  {"partition", "cut a model's layers into S pipeline stages (DP under the memory\n"
                "limit, refined with the simulator); write the pipeline file",
   cli::cmd_partition},
  {"sweep", "run a grid of simulations from a JSON spec on parallel threads (or MPI\n"
            "ranks), streaming one CSV/JSONL row per run; resumable, shardable",
   cli::cmd_sweep},
  {"compare", "prediction vs measurement: per-iteration error, MAPE, per-stage busy\n"
              "and bubble differences, and whether the candidates' ranking holds",
   cli::cmd_compare},
  {"adapt", "adaptive re-planning over a long network trace: a controller that\n"
            "re-profiles its transfers every R iterations and switches plan, against\n"
            "static plans and a hindsight oracle; per-iteration rows and a summary",
   cli::cmd_adapt},
}};
// clang-format on

std::string usage() {
  std::string text = kUsage;
  text += cli::help_table(kCommands, 10);
  text += kExitStatus;
  return text;
}

// Runs the command; exceptions go to main.
int run(std::string_view cmd, int argc, char** argv) {
  for (const Command& c : kCommands)
    if (c.name == cmd) return c.run(argc, argv);
  std::cerr << "adagrouper: unknown command '" << cmd << "' (try adagrouper --help)\n";
  return 2;
}

}  // namespace

int main(int argc, char** argv) {
  if (argc < 2 || std::string_view(argv[1]) == "--help" || std::string_view(argv[1]) == "-h" ||
      std::string_view(argv[1]) == "help") {
    std::cout << usage();
    return argc < 2 ? 2 : 0;
  }
  const std::string_view cmd = argv[1];
  if (cmd == "--version") {
    std::cout << "adagrouper 0.1.0\n";
    return 0;
  }
  try {
    return run(cmd, argc - 1, argv + 1);
  } catch (const adagrouper::InputError& e) {
    std::cerr << "adagrouper " << cmd << ": " << e.what() << '\n';
    return 2;
  } catch (const adagrouper::SimError& e) {
    std::cerr << "adagrouper " << cmd << ": " << e.what() << '\n';
    return 2;
  } catch (const boost::program_options::error& e) {
    std::cerr << "adagrouper " << cmd << ": " << e.what() << " (see adagrouper " << cmd << " --help)\n";
    return 2;
  } catch (const std::exception& e) {
    std::cerr << "adagrouper " << cmd << ": " << e.what() << '\n';
    return 1;
  }
}
