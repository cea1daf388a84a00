// libFuzzer target for compare's inputs: a summary JSON read as `adagrouper compare`
// reads it, then compared with itself, ranked and printed.
#include <cstddef>
#include <cstdint>
#include <vector>

#include "fuzz_util.h"
#include "json_util.h"
#include "sim.h"

namespace fz = adagrouper::fuzz;
namespace sim = adagrouper::sim;

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
  return fz::on_temp_file(data, size, [](const std::filesystem::path& path) {
    const sim::Summary s = sim::parse_summary(adagrouper::read_json_file(path), path.string());
    const std::vector<sim::Comparison> both = {sim::compare(s, s), sim::compare(s, s)};
    const sim::Ranking r = sim::rank_agreement(both, 0);
    (void)sim::comparison_json(both, r);
    (void)sim::comparison_text(both, r);
  });
}
