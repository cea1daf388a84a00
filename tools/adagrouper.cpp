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
             with per-device programs

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
