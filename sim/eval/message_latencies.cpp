// Latencies from the message timing trace, per iteration.
#include "message_latencies.h"

namespace adagrouper::sim::eval {

MessageLatencies::MessageLatencies(const Scenario& sc, const Program& prog) : sc_(sc), prog_(prog) {
  if (sc.message_timings.empty()) return;
  const std::size_t M = static_cast<std::size_t>(sc.micro_batches());
  index_.assign(static_cast<std::size_t>(sc.num_model_stages()) * M * 2, kUnlisted);
  for (const ProgramChannel& pc : prog.channels)
    for (std::uint32_t n = 0; n < pc.count; ++n) {
      const Op op = prog.op_of(pc.sender, prog.ops[prog.stages[pc.sender].begin + prog.producer[pc.first + n]]);
      const std::size_t gradient = op.phase == Phase::Forward ? 0 : 1;
      index_[(static_cast<std::size_t>(op.model_stage) * M + static_cast<std::size_t>(op.micro_batch)) * 2 + gradient] =
          pc.first + n;
    }
}

bool MessageLatencies::lists(int it) { return lists_iteration(sc_.message_timings, cursor_, it); }

void MessageLatencies::load(int it, bool materialize) {
  has_ = false;
  if (!lists(it) && !materialize) return;
  const auto& list = sc_.message_timings;
  if (latency_.empty()) latency_.resize(prog_.producer.size());
  for (const ProgramChannel& pc : prog_.channels)
    for (std::uint32_t n = 0; n < pc.count; ++n) latency_[pc.first + n] = pc.latency_s;
  const std::size_t M = static_cast<std::size_t>(sc_.micro_batches());
  for (; cursor_ < list.size() && list[cursor_].iteration == it; ++cursor_) {
    const MessageTiming& t = list[cursor_];
    const std::size_t gradient = t.phase == Phase::Forward ? 0 : 1;
    const std::size_t key = (static_cast<std::size_t>(t.stage) * M + static_cast<std::size_t>(t.micro_batch)) * 2;
    const std::uint32_t i = index_[key + gradient];
    if (i != kUnlisted) latency_[i] = t.latency_s;
  }
  has_ = true;
}

}  // namespace adagrouper::sim::eval
