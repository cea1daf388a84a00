// The command line of adagrouper-calib: `adagrouper-calib MODE [OPTIONS]`, launched like
// nccl-tests under mpirun. parse_options() does no MPI and no I/O besides printing the
// help, so it is unit-tested on its own.
#pragma once

#include <cstdint>
#include <filesystem>
#include <iosfwd>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "backend.h"

namespace adagrouper::calib {

enum class Mode { stages, p2p, bandwidth };
std::string_view mode_name(Mode m);

// --contention ON_S,OFF_S[,BYTES]: background transfers of BYTES (default: the largest
// recorded message) back to back for ON_S seconds, then nothing for OFF_S, repeating.
struct Contention {
  double on_s = 0, off_s = 0;
  std::uint64_t bytes = 0;  // 0: the largest message of the recording
};

struct Options {
  Mode mode = Mode::stages;
  BackendKind backend = BackendKind::cpu;
  std::filesystem::path output_dir = "calib-out";
  double timeout_s = 300;
  int warmup = 2;
  int repeat = 10;
  std::uint64_t seed = 1;

  // stages
  std::filesystem::path stages_file;
  std::vector<int> micro_batch_sizes;  // -b/-e/-f

  // p2p
  std::filesystem::path pipeline_file;       // message sizes from a pipeline file, or
  std::vector<int> p2p_micro_batch_sizes;    //   at these sizes (empty: every profiled one)
  std::vector<std::uint64_t> message_bytes;  // --bytes
  double duration_s = 10, interval_s = 0.1;
  int count = 0;  // transfers per channel: ceil(duration / interval)
  bool forward = true, backward = true;  // --direction both|forward|backward
  std::optional<Contention> contention;

  // bandwidth
  std::vector<std::uint64_t> sizes;  // -b/-e/-f in bytes
  int iters = 20;
};

// Parses `args` (args[0] is the mode). Returns nullopt when --help was given (the help
// went to `help`). Throws InputError "--OPTION: what is wrong" for bad options.
std::optional<Options> parse_options(const std::vector<std::string>& args, std::ostream& help);

// The overview printed by `adagrouper-calib --help`.
std::string usage();

// "64M" -> 67108864: an integer with an optional K, M, G or T suffix (powers of 1024,
// as nccl-tests reads them), or a whole number of bytes with any size unit of
// docs/formats.md ("64MB", "64MiB", "1.5KiB"). Throws InputError naming `option`.
std::uint64_t parse_size(std::string_view text, std::string_view option);

// min, min*f, min*f^2, ... <= max (nccl-tests' -b/-e/-f). Throws InputError naming
// `option` when min < 1, max < min, or factor < 2 while max > min.
std::vector<std::uint64_t> size_series(std::uint64_t min, std::uint64_t max, std::uint64_t factor,
                                       std::string_view option);

}  // namespace adagrouper::calib
