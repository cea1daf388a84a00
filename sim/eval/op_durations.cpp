// Durations from the stage timing trace, per iteration.
#include "op_durations.h"

namespace adagrouper::sim::eval {

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

}  // namespace adagrouper::sim::eval
