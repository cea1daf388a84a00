// libFuzzer target for plan files as `adagrouper-calib replay` reads them: the chosen
// candidate with the plan's device programs, and another candidate whose programs the
// planner makes. The pipeline named in the plan's inputs is found from the current
// directory (tests/fuzz/run.sh runs the targets from the repository root).
#include <cstddef>
#include <cstdint>

#include "fuzz_util.h"
#include "replay.h"

namespace fz = adagrouper::fuzz;
namespace cal = adagrouper::calib;

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
  const std::string path = fz::write_temp(fz::text_of(data, size)).string();
  fz::refused_cleanly([&] { (void)cal::load_replay_plan(path, {}); });
  // The candidate's index comes from the input's length, so that mutations reach them all.
  fz::refused_cleanly([&] { (void)cal::load_replay_plan(path, {.candidate = static_cast<int>(size % 16)}); });
  return 0;
}
