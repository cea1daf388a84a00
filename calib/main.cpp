// adagrouper-calib: measures stages, point-to-point transfers and bandwidth on the
// devices and network training will use, and writes the files adagrouper reads.
// Launched like nccl-tests: mpirun -np N adagrouper-calib MODE [OPTIONS].
#include <cstring>
#include <exception>
#include <iostream>
#include <sstream>
#include <string_view>

#include "calib.h"
#include "replay.h"  // replay_main
#include "error.h"

int main(int argc, char** argv) {
  using namespace adagrouper::calib;
  if (argc < 2 || std::string_view(argv[1]) == "--help" || std::string_view(argv[1]) == "-h" ||
      std::string_view(argv[1]) == "help") {
    std::cout << usage();
    return argc < 2 ? 2 : 0;
  }
  const std::string mode = argv[1];
  std::unique_ptr<Mpi> mpi;
  try {
    mpi = std::make_unique<Mpi>(argc, argv);
  } catch (const std::exception& e) {
    std::cerr << "adagrouper-calib " << mode << ": " << e.what() << '\n';
    return 1;
  }
  if (mode == "replay") return replay_main(*mpi, argc - 1, argv + 1);  // docs/fidelity.md
  // Options: every rank parses the same arguments, so every rank fails the same way; rank
  // 0 speaks for all.
  Options options;
  try {
    std::ostringstream help;
    const auto parsed = parse_options(std::vector<std::string>(argv + 1, argv + argc), help);
    if (!parsed) {
      if (mpi->rank() == 0) std::cout << help.str();
      return 0;
    }
    options = *parsed;
  } catch (const adagrouper::InputError& e) {
    if (mpi->rank() == 0) std::cerr << "adagrouper-calib " << mode << ": " << e.what() << '\n';
    return 2;
  }
  try {
    Watchdog watchdog(*mpi, options.timeout_s);
    switch (options.mode) {
      case Mode::stages: return run_stages(options, *mpi, watchdog);
      case Mode::p2p: return run_p2p(options, *mpi, watchdog);
      case Mode::bandwidth: return run_bandwidth(options, *mpi, watchdog);
    }
  } catch (const adagrouper::InputError& e) {
    std::cerr << "adagrouper-calib " << mode << ": rank " << mpi->rank() << ": " << e.what() << std::endl;
    mpi->abort(2);
  } catch (const std::exception& e) {
    // A failed call or a broken peer in the middle of the work: the other ranks may be
    // waiting for this one, so the whole job ends here.
    std::cerr << "adagrouper-calib " << mode << ": " << e.what() << std::endl;
    mpi->abort(1);
  }
  return 1;
}
