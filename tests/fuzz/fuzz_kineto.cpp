// libFuzzer target for PyTorch profiler traces (trace import-kineto): traces::parse_kineto
// (gzip or not), then the pipeline file and stage timing trace it writes must read back.
#include <cstddef>
#include <cstdint>
#include <string>

#include <nlohmann/json.hpp>

#include "fuzz_util.h"
#include "pipeline.h"
#include "traces.h"

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
  namespace tr = adagrouper::traces;
  adagrouper::fuzz::refused_cleanly([&] {
    const tr::KinetoRank rank =
        tr::parse_kineto(std::string(adagrouper::fuzz::text_of(data, size)), "fuzz.json", tr::torch_action_pattern());
    const tr::KinetoStages stages = tr::collect_stages({rank});
    const auto doc = tr::kineto_pipeline(stages, {.micro_batch_size = 1, .global_batch_size = 0, .name = {}});
    try {
      (void)adagrouper::sim::parse_pipeline(nlohmann::json::parse(doc.dump()), "written.json");
      (void)tr::parse_stage_trace(tr::kineto_stage_trace({rank}), "written.csv");
    } catch (const adagrouper::InputError& e) {
      adagrouper::fuzz::violated(std::string("a written file does not read back: ") + e.what());
    }
  });
  return 0;
}
