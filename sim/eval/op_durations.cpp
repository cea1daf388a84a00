// Durations from the stage timing trace, per iteration.
#include "op_durations.h"

namespace adagrouper::sim::eval {

OpDurations::OpDurations(const Scenario& sc, const Program& prog) : sc_(sc), prog_(prog) {
  if (sc.op_timings.empty()) return;
  const int J = static_cast<int>(sc.model_stages.size()), M = sc.micro_batches();
  index_.assign(static_cast<std::size_t>(J) * M * 4, kUnlisted);
  for (std::uint32_t s = 0; s < prog.stages.size(); ++s) {
    const ProgramStage& ps = prog.stages[s];
    for (std::uint32_t i = ps.begin; i < ps.w_end; ++i) {
      const Op op = prog.op_of(s, prog.ops[i]);
      index_[(static_cast<std::size_t>(op.model_stage) * M + op.micro_batch) * 4 + static_cast<int>(op.phase)] = i;
    }
  }
}

bool OpDurations::lists(int it) { return lists_iteration(sc_.op_timings, cursor_, it); }

void OpDurations::load(int it, bool materialize) {
  has_ = false;
  if (!lists(it) && !materialize) return;
  const auto& list = sc_.op_timings;
  if (duration_.empty()) duration_.resize(prog_.ops.size());
  for (const ProgramStage& ps : prog_.stages)
    for (std::uint32_t i = ps.begin; i < ps.w_end; ++i) duration_[i] = ps.cls(prog_.classes, prog_.ops[i]).nominal;
  const std::size_t M = static_cast<std::size_t>(sc_.micro_batches());
  for (; cursor_ < list.size() && list[cursor_].iteration == it; ++cursor_) {
    const OpTiming& t = list[cursor_];
    const std::uint32_t i = index_[(static_cast<std::size_t>(t.stage) * M + t.micro_batch) * 4 + static_cast<int>(t.phase)];
    if (i != kUnlisted) duration_[i] = t.duration_s;
  }
  has_ = true;
}

}  // namespace adagrouper::sim::eval
