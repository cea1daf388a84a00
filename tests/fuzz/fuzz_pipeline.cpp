// libFuzzer target for the pipeline file: the JSON read as every command reads it, the
// pipeline parsed, and its parameters taken at every micro-batch size it allows.
#include <algorithm>
#include <cstddef>
#include <cstdint>

#include "fuzz_util.h"
#include "json_util.h"
#include "sim.h"

namespace fz = adagrouper::fuzz;
namespace sim = adagrouper::sim;

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
  return fz::on_temp_file(data, size, [](const std::filesystem::path& path) {
    const sim::Pipeline p = sim::parse_pipeline(adagrouper::read_json_file(path), path.string());
    // At most 64 sizes, so that a profile up to b = 1e9 stays fast.
    const int lo = p.min_micro_batch_size(), hi = std::min(p.max_micro_batch_size(), lo + 63);
    for (int b = lo; b <= hi; ++b) fz::refused_cleanly([&] { (void)p.at(b); });
  });
}
