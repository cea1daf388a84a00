// libFuzzer target for the stage and message timing traces (--stage-trace and
// --message-trace: iteration,stage,micro_batch,phase,seconds), each read from the same
// bytes and then installed in a toy scenario as simulate does.
#include <cstddef>
#include <cstdint>

#include "fuzz_util.h"
#include "sim.h"
#include "traces.h"

namespace sim = adagrouper::sim;

namespace {

// The worked example: 4 stages, 8 micro-batches of size 1, 2 iterations.
const sim::Scenario& toy_scenario() {
  static const sim::Scenario scenario = [] {
    sim::Scenario sc;
    sc.pipeline_name = "toy-4";
    sc.model_stages.assign(4, sim::StageParams{.fwd = 1, .bwd = 2, .bwd_input = 1, .bwd_weight = 1});
    sc.network = sim::Network::uniform(4, std::nullopt, 2.0);
    sc.schedule = sim::make_schedule(sim::ScheduleSpec::named("1f1b"), 4, 8);
    sc.global_batch_size = 8;
    sc.iterations = 2;
    return sc;
  }();
  return scenario;
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
  adagrouper::fuzz::refused_cleanly([&] {
    auto timings = adagrouper::traces::parse_stage_trace(adagrouper::fuzz::text_of(data, size), "fuzz.csv");
    sim::Scenario sc = toy_scenario();
    sim::set_op_timings(sc, std::move(timings), "fuzz.csv");
  });
  adagrouper::fuzz::refused_cleanly([&] {
    auto timings = adagrouper::traces::parse_message_trace(adagrouper::fuzz::text_of(data, size), "fuzz.csv");
    sim::Scenario sc = toy_scenario();
    sim::set_message_timings(sc, std::move(timings), "fuzz.csv");
  });
  return 0;
}
