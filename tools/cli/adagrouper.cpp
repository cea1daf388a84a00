// adagrouper: simulator and planner for pipeline-parallel training on preempted networks.
#include <array>
#include <cerrno>
#include <cstring>
#include <exception>
#include <iostream>
#include <string>
#include <string_view>
#include <vector>

#include <boost/program_options/errors.hpp>

#include "allocator.h"
#include "cli_util.h"
#include "commands.h"
#include "sim.h"

namespace {

namespace cli = adagrouper::cli;

constexpr const char* kUsage = R"(Usage: adagrouper COMMAND [OPTIONS]   (adagrouper help COMMAND for details)

Simulates and plans pipeline-parallel DNN training (GPipe, 1F1B, DAPPLE, kFkB) on
networks that other jobs preempt. Inputs and outputs: docs/formats.md; the execution
model: docs/model.md.

Commands:
)";

constexpr const char* kExitStatus = R"(
Outputs are written completely or not at all, and only when the command succeeds; a
symlink writes its target, a device or FIFO is written directly, - is stdout, and an
output may not be one of the command's inputs.
Exit status: 0 success, 2 bad input (one line on stderr naming the file and field),
1 any other failure (an output or stdout that cannot be written included).
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

// `adagrouper help COMMAND [SUBCOMMAND]`: exactly `adagrouper COMMAND [SUBCOMMAND] --help`.
int help_of(int argc, char** argv) {
  std::vector<std::string> args(argv + 2, argv + argc);
  args.emplace_back("--help");
  std::vector<char*> ptrs;
  for (std::string& a : args) ptrs.push_back(a.data());
  ptrs.push_back(nullptr);
  return run(args.front(), static_cast<int>(args.size()), ptrs.data());
}

// Runs the command line; exceptions become exit statuses and one line on stderr.
int dispatch(std::string_view cmd, int argc, char** argv) {
  try {
    if (cmd == "help") return help_of(argc, argv);
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

// `status`, unless what went to stdout could not be written (a full disk, a closed
// pipe): then 1, said in one line (a command that failed has said why already).
int checked_stdout(std::string_view cmd, int status) {
  errno = 0;
  std::cout.flush();
  if (std::cout || status != 0) return status;
  const int err = errno;
  std::cerr << "adagrouper" << (cmd.empty() ? "" : " ") << cmd << ": stdout: cannot write"
            << (err != 0 ? std::string(": ") + std::strerror(err) : std::string()) << '\n';
  return 1;
}

}  // namespace

int main(int argc, char** argv) {
  adagrouper::cli::keep_freed_memory();
  const std::string_view first = argc < 2 ? std::string_view() : std::string_view(argv[1]);
  if (argc < 2 || first == "--help" || first == "-h" || (first == "help" && argc == 2)) {
    std::cout << usage();
    return checked_stdout("", argc < 2 ? 2 : 0);
  }
  if (first == "--version") {
    std::cout << "adagrouper 0.1.0\n";
    return checked_stdout("", 0);
  }
  return checked_stdout(first, dispatch(first, argc, argv));
}
