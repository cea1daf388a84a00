// libFuzzer target for the layer-level model file: read as `plan --model` and `partition`
// read it, every layer taken at every micro-batch size, and written back: what
// model_json writes must read back to the same document.
#include <cstddef>
#include <cstdint>

#include "fuzz_util.h"
#include "json_util.h"
#include "model.h"

namespace fz = adagrouper::fuzz;
namespace pl = adagrouper::planner;

namespace {

// The model's file as `adagrouper model` writes it reads back to the same model.
void check_round_trip(const pl::Model& m) {
  const std::string text = pl::dump_compact(pl::model_json(m));
  try {
    const pl::Model back = pl::parse_model(nlohmann::json::parse(text), m.source_file);
    if (pl::dump_compact(pl::model_json(back)) != text) fz::violated("model_json does not read back the same");
  } catch (const adagrouper::InputError& e) {
    fz::violated(std::string("model_json wrote a model that does not read back: ") + e.what());
  }
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
  return fz::on_temp_file(data, size, [](const std::filesystem::path& path) {
    const pl::Model m = pl::load_model(path);
    for (const int b : m.micro_batch_sizes()) {
      for (int layer = 0; layer < m.num_layers(); ++layer) (void)pl::layer_at(m, layer, b);
    }
    (void)m.total_parameter_bytes();
    check_round_trip(m);
  });
}
