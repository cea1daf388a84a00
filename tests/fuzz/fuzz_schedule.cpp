// libFuzzer target for custom schedule files; FUZZ_FORM selects the form: "json" reads a
// temporary file through load_schedule_file (which also tells CSV by its look), "csv"
// gives the text to PyTorch's CSV reader. Each input is read for a few pipeline shapes.
#include <cstddef>
#include <cstdint>
#include <string_view>

#include "fuzz_util.h"
#include "sim.h"

namespace fz = adagrouper::fuzz;
namespace sim = adagrouper::sim;

namespace {

// Model stages and micro-batches to read each input for: those of the seeds (toy-4:
// 4 x 8; PyTorch's artifacts: 4 x 8 and 8 x 10) and small ones.
constexpr int kModelStages[] = {1, 2, 3, 4, 8};
constexpr int kMicroBatches[] = {1, 2, 4, 8, 10};

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
  const std::string_view form = FUZZ_FORM;
  const std::string_view text = fz::text_of(data, size);
  const auto path = form == "json" ? fz::write_temp(text, ".json") : std::filesystem::path();
  for (const int stages : kModelStages) {
    for (const int micro_batches : kMicroBatches) {
      fz::refused_cleanly([&] {
        if (form == "json") {
          (void)sim::load_schedule_file(path, stages, micro_batches);
        } else {
          (void)sim::parse_torch_csv(text, "fuzz.csv", stages, micro_batches);
        }
      });
    }
  }
  return 0;
}
