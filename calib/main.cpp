// adagrouper-calib: measures stages, point-to-point transfers and bandwidth on the
// devices and network training will use, and writes the files adagrouper reads.
// Launched like nccl-tests: mpirun -np N adagrouper-calib MODE [OPTIONS].
#include <unistd.h>

#include <cerrno>
#include <cstring>
#include <exception>
#include <filesystem>
#include <iostream>
#include <sstream>
#include <string_view>
#include <system_error>
#include <vector>

#include <fmt/format.h>

#include "calib.h"
#include "replay.h"  // replay_main
#include "error.h"

namespace {

using namespace adagrouper::calib;
namespace fs = std::filesystem;

// Creates --output-dir (and raw/, where the mode writes each rank's lines) on every rank
// before any device work. Returns 0, or the exit status when some rank cannot (rank 0
// has said why, in one line): 2 for a path that is no directory, 1 for one that cannot
// be created or written.
int prepare_output_dir(const Options& options, const Mpi& mpi) {
  const fs::path& dir = options.output_dir;
  std::string error;
  int status = 1;
  std::error_code ec;
  if (fs::exists(dir, ec) && !fs::is_directory(dir, ec)) {
    error = fmt::format("--output-dir: {}: not a directory", dir.string());
    status = 2;
  } else if (fs::create_directories(options.mode == Mode::bandwidth ? dir : dir / "raw", ec); ec) {
    error = fmt::format("--output-dir: {}: cannot create: {}", dir.string(), ec.message());
  } else if (::access(dir.c_str(), W_OK) != 0) {
    error = fmt::format("--output-dir: {}: cannot write: {}", dir.string(), std::strerror(errno));
  }
  return stop_on_error(mpi, options, error) ? status : 0;
}

// The directories of --output-dir that this run creates: removed again (when still
// empty) after a refusal of bad input, so that it leaves nothing behind.
class CreatedDirs {
 public:
  explicit CreatedDirs(const Options& options) {
    std::error_code ec;
    const fs::path& dir = options.output_dir;
    if (options.mode != Mode::bandwidth && !fs::exists(dir / "raw", ec)) paths_.push_back(dir / "raw");
    if (!fs::exists(dir, ec)) paths_.push_back(dir);
  }
  void remove_if_empty() const {
    std::error_code ec;  // another rank may have removed it, or it holds files: keep going
    for (const fs::path& p : paths_)
      if (fs::is_directory(p, ec) && fs::is_empty(p, ec)) fs::remove(p, ec);
  }

 private:
  std::vector<fs::path> paths_;  // innermost first
};

// Runs the mode. A failure in the middle of the work ends the job: by this process's
// exit status when it is the only rank, else by MPI_Abort (the other ranks may be
// waiting for this one).
int run_mode(const Options& options, const Mpi& mpi) {
  const std::string_view mode = mode_name(options.mode);
  int status = 1;
  try {
    Watchdog watchdog(mpi, options.timeout_s);
    switch (options.mode) {
      case Mode::stages: return run_stages(options, mpi, watchdog);
      case Mode::p2p: return run_p2p(options, mpi, watchdog);
      case Mode::bandwidth: return run_bandwidth(options, mpi, watchdog);
    }
  } catch (const adagrouper::InputError& e) {
    std::cerr << "adagrouper-calib " << mode << ": " << (mpi.size() > 1 ? fmt::format("rank {}: ", mpi.rank()) : "")
              << e.what() << std::endl;
    status = 2;
  } catch (const std::exception& e) {
    std::cerr << "adagrouper-calib " << mode << ": " << e.what() << std::endl;
  }
  if (mpi.size() > 1) mpi.abort(status);
  return status;
}

}  // namespace

int main(int argc, char** argv) {
  if (argc < 2 || std::string_view(argv[1]) == "--help" || std::string_view(argv[1]) == "-h" ||
      std::string_view(argv[1]) == "help") {
    std::cout << usage();
    return argc < 2 ? 2 : 0;
  }
  if (std::string_view(argv[1]) == "--version") {
    std::cout << "adagrouper-calib 0.1.0\n";
    return 0;
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
  const CreatedDirs created(options);
  if (const int status = prepare_output_dir(options, *mpi)) return status;
  const int status = run_mode(options, *mpi);
  if (status == 2) created.remove_if_empty();  // bad input leaves no trace
  return status;
}
