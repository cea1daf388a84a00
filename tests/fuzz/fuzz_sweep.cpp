// libFuzzer target for sweep specs: read as `adagrouper sweep` reads them, expanded, and
// the inputs of the first runs resolved into scenarios. The spec poses as
// configs/sweeps/fuzz.json, so that the seeds' relative pipeline and network paths resolve
// from the repository root (tests/fuzz/run.sh runs the targets there).
#include <algorithm>
#include <cstddef>
#include <cstdint>
#include <numeric>
#include <vector>

#include "fuzz_util.h"
#include "json_util.h"
#include "sweep.h"

namespace fz = adagrouper::fuzz;
namespace sw = adagrouper::sweep;

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
  return fz::on_temp_file(data, size, [](const std::filesystem::path& path) {
    const sw::Study study = sw::parse_study(adagrouper::read_json_file(path), "configs/sweeps/fuzz.json");
    std::vector<std::size_t> first(std::min<std::size_t>(study.runs.size(), 4));
    std::iota(first.begin(), first.end(), std::size_t{0});
    const sw::Inputs inputs(study, first);
    for (const std::size_t i : first) fz::refused_cleanly([&] { (void)inputs.scenario(study.runs[i]); });
    (void)sw::columns(study);
  });
}
