// libFuzzer target for the calibration harness's transfer samples (time_s,bytes,duration_s,
// with an optional FROM->TO channel column), read row by row.
#include <cstddef>
#include <cstdint>

#include "fuzz_util.h"
#include "traces.h"

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
  adagrouper::fuzz::refused_cleanly([&] {
    (void)adagrouper::traces::parse_transfer_samples(adagrouper::fuzz::text_of(data, size), "fuzz.csv");
  });
  return 0;
}
