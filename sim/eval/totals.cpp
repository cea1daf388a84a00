// Filling a SimResult from what an evaluator accumulated.
#include "totals.h"

#include <algorithm>

namespace adagrouper::sim::eval {

namespace {

// The bytes of one iteration's messages on a channel (as bytes x count when they all have
// the same size, so that the total does not depend on how many were added up).
double channel_bytes(const Program& prog, const ProgramChannel& pc) {
  const double* b = prog.msg_bytes.data() + pc.first;
  if (std::all_of(b, b + pc.count, [&](double x) { return x == b[0]; })) return pc.count > 0 ? b[0] * pc.count : 0.0;
  double sum = 0;
  for (std::uint32_t n = 0; n < pc.count; ++n) sum += b[n];
  return sum;
}

// How the schedule placed its model stages, in words.
std::string placement_name(const Schedule& sch) {
  if (sch.placement.empty()) return "";
  const int S = sch.num_stages(), v = sch.num_model_stages() / std::max(1, S);
  if (sch.placement == place_model_stages(Placement::Loop, S, v)) return "loop";
  if (v == 2 && sch.placement == place_model_stages(Placement::V, S, v)) return "V";
  return "as listed";
}

}  // namespace

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
  r.model_stages = static_cast<int>(sc.model_stages.size());
  r.virtual_stages = S > 0 ? r.model_stages / S : 1;
  r.placement = placement_name(sc.schedule);
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
    out.optimizer_s = prog.stages[s].opt * sc.iterations;
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
    out.bytes = channel_bytes(prog, pc) * sc.iterations;
  }
}

}  // namespace adagrouper::sim::eval
