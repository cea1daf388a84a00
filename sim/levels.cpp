#include "levels.h"

namespace adagrouper::sim {

OpDurations::OpDurations(const Scenario& sc, const Program& prog) : sc_(sc), prog_(prog) {
  if (sc.op_timings.empty()) return;
  const int S = sc.num_stages();
  position_.resize(S);
  for (int s = 0; s < S; ++s) {
    const auto& order = sc.schedule.stages[s];
    position_[s].resize(order.size());
    for (std::size_t i = 0; i < order.size(); ++i)
      position_[s][2 * order[i].micro_batch + (order[i].phase == Phase::Backward)] = static_cast<std::uint32_t>(i);
  }
}

void OpDurations::load(int it) {
  has_ = false;
  const auto& list = sc_.op_timings;
  while (cursor_ < list.size() && list[cursor_].iteration < it) ++cursor_;
  if (cursor_ == list.size() || list[cursor_].iteration != it) return;
  if (duration_.empty()) duration_.resize(prog_.ops.size());
  for (const ProgramStage& ps : prog_.stages)
    for (std::uint32_t i = ps.begin; i < ps.end; ++i) duration_[i] = ps.duration(prog_.ops[i]);
  for (; cursor_ < list.size() && list[cursor_].iteration == it; ++cursor_) {
    const OpTiming& t = list[cursor_];
    duration_[prog_.stages[t.stage].begin + position_[t.stage][2 * t.micro_batch + (t.phase == Phase::Backward)]] =
        t.duration_s;
  }
  has_ = true;
}

void fill_result(const Scenario& sc, const Program& prog, double total, const std::vector<StageTotals>& stages,
                 const std::vector<ChannelTotals>& channels, SimResult& r) {
  const int S = sc.num_stages();
  r.pipeline = sc.pipeline_name;
  r.schedule = sc.schedule.name;
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
    out.optimizer_s = sc.stages[s].opt * sc.iterations;
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

}  // namespace adagrouper::sim
