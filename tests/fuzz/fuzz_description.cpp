// libFuzzer target for the calibration harness's stage descriptions: read as
// `adagrouper-calib stages` reads them, then every stage's layers and their shapes.
#include <cstddef>
#include <cstdint>

#include "description.h"
#include "fuzz_util.h"
#include "json_util.h"

namespace fz = adagrouper::fuzz;
namespace cal = adagrouper::calib;

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
  return fz::on_temp_file(data, size, [](const std::filesystem::path& path) {
    const cal::StageDescription d = cal::parse_stage_description(adagrouper::read_json_file(path), path.string());
    for (int s = 0; s < d.num_stages(); ++s) {
      for (const cal::LayerDesc& l : d.layers_of(s)) {
        for (const int b : {1, 8}) (void)cal::layer_shape(d, l.kind, b);
      }
    }
  });
}
