// What every evaluator accumulates per stage and channel, and the filling of a
// SimResult from it. Internal to sim/.
#pragma once

#include <vector>

#include "../result.h"
#include "program.h"

namespace adagrouper::sim::eval {

struct StageTotals {
  double busy_s = 0;
  double peak_inflight = 0;
  double peak_memory_bytes = 0;
};
struct ChannelTotals {
  double busy_s = 0;
  double peak_queue_depth = 0;
};

// Fills everything in r but the iteration times, the op and transfer counts and the
// timeline: what was run, the total time, and the per-stage and per-channel results.
void fill_result(const Scenario& sc, const Program& prog, double total_s, const std::vector<StageTotals>& stages,
                 const std::vector<ChannelTotals>& channels, SimResult& r);

}  // namespace adagrouper::sim::eval
