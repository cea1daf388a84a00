// libFuzzer target for measured-layer files (`adagrouper model --measured`, calibration
// JSONL): merged into the GPT-2 XL model the generator makes, which must stay usable.
#include <cstddef>
#include <cstdint>

#include "fuzz_util.h"
#include "model.h"

namespace fz = adagrouper::fuzz;
namespace pl = adagrouper::planner;

namespace {

const pl::Model& base_model() {
  static const pl::Model m =
      pl::generate_model(pl::arch_preset("gpt2-xl"), pl::device_preset("v100-32gb"), {1, 2, 4});
  return m;
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
  return fz::on_temp_file(data, size, ".jsonl", [](const std::filesystem::path& path) {
    pl::Model m = base_model();
    (void)pl::merge_measured(m, path);
    for (const int b : m.micro_batch_sizes()) {
      for (int layer = 0; layer < m.num_layers(); ++layer) (void)pl::layer_at(m, layer, b);
    }
  });
}
