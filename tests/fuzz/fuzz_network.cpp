// libFuzzer target for the network file: the JSON read as every command reads it, parsed
// with every rate form (traces, patterns), and bound to 1 to 8 stages. The file poses as
// configs/networks/fuzz.json, so that the seeds' trace files (../../traces/data/...)
// resolve from the repository root (tests/fuzz/run.sh runs the targets there).
#include <cstddef>
#include <cstdint>

#include "fuzz_util.h"
#include "json_util.h"
#include "sim.h"
#include "traces.h"

namespace fz = adagrouper::fuzz;
namespace sim = adagrouper::sim;

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
  return fz::on_temp_file(data, size, [](const std::filesystem::path& path) {
    const sim::NetworkSpec spec =
        sim::parse_network_spec(adagrouper::read_json_file(path), "configs/networks/fuzz.json",
                                adagrouper::traces::TraceRates());
    for (int stages = 1; stages <= 8; ++stages) fz::refused_cleanly([&] { (void)spec.bind(stages); });
  });
}
