// adagrouper: simulator and planner for pipeline-parallel training on preempted networks.
#include <cstring>
#include <exception>
#include <iostream>
#include <string_view>

#include <boost/program_options/errors.hpp>

#include "commands.h"
#include "sim.h"

namespace {

constexpr const char* kUsage = R"(Usage: adagrouper COMMAND [OPTIONS]   (adagrouper COMMAND --help for details)

Simulates and plans pipeline-parallel DNN training (GPipe, 1F1B, DAPPLE, kFkB) on
networks that other jobs preempt. Inputs and outputs: docs/formats.md; the execution
model: docs/model.md.

Commands:
  simulate   run one schedule on a pipeline and network, event by event; print a
             summary, write summary JSON and a Perfetto timeline
  trace      synthesize, import, summarize and cut bandwidth / speed traces
             (synth, import, stats, slice)
  plan       choose the fastest kFkB plan (k, micro-batch size) that fits the memory
             limit, evaluating candidates with the simulator; write the plan JSON
             with per-device programs (from a pipeline file, or from a model file
             with --model and --stages S|auto)
  model      write a layer-level model file from architecture hyperparameters (GPT,
             BERT, U-Net, GNMT) with an analytic device model; merge measured layers
  partition  cut a model's layers into S pipeline stages (DP under the memory
             limit, refined with the simulator); write the pipeline file
  sweep      run a grid of simulations from a JSON spec on parallel threads (or MPI
             ranks), streaming one CSV/JSONL row per run; resumable, shardable
  compare    prediction vs measurement: per-iteration error, MAPE, per-stage busy
             and bubble differences, and whether the candidates' ranking holds
  adapt      adaptive re-planning over a long network trace: a controller that
             re-profiles its transfers every R iterations and switches plan, against
             static plans and a hindsight oracle; per-iteration rows and a summary

Exit status: 0 success, 2 bad input (one line on stderr naming the file and field),
1 any other failure.
)";

}  // namespace

int main(int argc, char** argv) {
  if (argc < 2 || std::string_view(argv[1]) == "--help" || std::string_view(argv[1]) == "-h" ||
      std::string_view(argv[1]) == "help") {
    std::cout << kUsage;
    return argc < 2 ? 2 : 0;
  }
  const std::string_view cmd = argv[1];
  if (cmd == "--version") {
    std::cout << "adagrouper 0.1.0\n";
    return 0;
  }
  try {
    if (cmd == "simulate") return adagrouper::cli::cmd_simulate(argc - 1, argv + 1);
    if (cmd == "trace") return adagrouper::cli::cmd_trace(argc - 1, argv + 1);
    if (cmd == "plan") return adagrouper::cli::cmd_plan(argc - 1, argv + 1);
    if (cmd == "model") return adagrouper::cli::cmd_model(argc - 1, argv + 1);
    if (cmd == "partition") return adagrouper::cli::cmd_partition(argc - 1, argv + 1);
    if (cmd == "sweep") return adagrouper::cli::cmd_sweep(argc - 1, argv + 1);
    if (cmd == "compare") return adagrouper::cli::cmd_compare(argc - 1, argv + 1);
    if (cmd == "adapt") return adagrouper::cli::cmd_adapt(argc - 1, argv + 1);
    std::cerr << "adagrouper: unknown command '" << cmd << "' (try adagrouper --help)\n";
    return 2;
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
