// Filling a SimResult from what an evaluator accumulated.
#include "totals.h"

namespace adagrouper::sim::eval {

void fill_result(const Scenario& sc, const Program& prog, double total, const std::vector<StageTotals>& stages,
                 const std::vector<ChannelTotals>& channels, SimResult& r) {
  const int S = sc.num_stages();
  r.pipeline = sc.pipeline_name;
  r.spec = sc.schedule.spec;
  r.k = sc.schedule.k;
  r.micro_batch_size = sc.micro_batch_size;
  r.micro_batches = sc.micro_batches();
  r.global_batch_size = sc.global_batch_size;
  r.num_stages = S;
  r.iterations = sc.iterations;
  r.start_time_s = sc.start_time_s;
  r.memory_limit_bytes = sc.memory_limit_bytes;
  r.total_time_s = total;
  r.stages.resize(S);
  for (int s = 0; s < S; ++s) {
    auto& out = r.stages[s];
    out.stage = s;
    out.busy_s = stages[s].busy_s;
    out.bubble_s = total - stages[s].busy_s;
    out.optimizer_s = sc.model_stages[s].opt * sc.iterations;
    out.peak_inflight = static_cast<int>(stages[s].peak_inflight);
    out.peak_memory_bytes = stages[s].peak_memory_bytes;
  }
  r.channels.resize(channels.size());
  for (std::size_t c = 0; c < channels.size(); ++c) {
    const auto& pc = prog.channels[c];
    auto& out = r.channels[c];
    out.from = static_cast<int>(pc.sender);
    out.to = static_cast<int>(pc.receiver);
    out.busy_s = channels[c].busy_s;
    out.peak_queue_depth = static_cast<int>(channels[c].peak_queue_depth);
    out.messages = static_cast<std::uint64_t>(pc.count) * sc.iterations;
    out.bytes = pc.bytes * pc.count * sc.iterations;
  }
}

}  // namespace adagrouper::sim::eval
