// Compiling a scenario into a Program.
#include "program.h"

namespace adagrouper::sim::eval {

Program build_program(const Scenario& sc) {
  const int S = sc.num_stages();
  const int M = sc.micro_batches();
  Program p;

  // Position of F(s,m) / B(s,m) in stage s's order.
  std::vector<std::uint32_t> pos(static_cast<std::size_t>(S) * M * 2);
  auto at = [&](int s, Phase ph, int m) -> std::uint32_t& {
    return pos[(static_cast<std::size_t>(s) * M + m) * 2 + (ph == Phase::Backward)];
  };
  for (int s = 0; s < S; ++s) {
    const auto& order = sc.schedule.stages[s];
    for (std::size_t i = 0; i < order.size(); ++i)
      at(s, order[i].phase, order[i].micro_batch) = static_cast<std::uint32_t>(i);
  }

  // Channels and their messages, in each receiver's consumption order.
  const int nch = 2 * (S - 1);
  p.channels.resize(nch);
  p.producer.reserve(static_cast<std::size_t>(nch) * M);
  for (int c = 0; c < nch; ++c) {
    const bool fwd = c < S - 1;
    const int s = fwd ? c : c - (S - 1);
    ProgramChannel& ch = p.channels[c];
    ch.sender = static_cast<std::uint32_t>(fwd ? s : s + 1);
    ch.receiver = static_cast<std::uint32_t>(fwd ? s + 1 : s);
    ch.spec = &sc.network.channel(static_cast<int>(ch.sender), static_cast<int>(ch.receiver));
    ch.bytes = fwd ? sc.model_stages[s].out : sc.model_stages[s + 1].gout;
    ch.latency_s = ch.spec->latency_s;
    ch.capacity = static_cast<std::uint32_t>(ch.spec->capacity);
    ch.unlimited = ch.spec->unlimited() || ch.bytes == 0;
    ch.first = static_cast<std::uint32_t>(p.producer.size());
    ch.count = static_cast<std::uint32_t>(M);
    const Phase ph = fwd ? Phase::Forward : Phase::Backward;
    for (const Op& op : sc.schedule.stages[ch.receiver])
      if (op.phase == ph) p.producer.push_back(at(static_cast<int>(ch.sender), ph, op.micro_batch));
  }

  p.stages.resize(S);
  p.ops.reserve(static_cast<std::size_t>(S) * 2 * M);
  for (int s = 0; s < S; ++s) {
    ProgramStage& ps = p.stages[s];
    ps.begin = static_cast<std::uint32_t>(p.ops.size());
    ps.nominal[0] = sc.model_stages[s].fwd;
    ps.nominal[1] = sc.model_stages[s].bwd;
    ps.memory.static_bytes = sc.model_stages[s].static_bytes;
    const RateTrace& speed = sc.network.speed(s);
    ps.unit_speed = speed.is_constant() && speed.values()[0] == 1.0;
    ps.memory.act = sc.model_stages[s].act;
    ps.in[0] = s > 0 ? static_cast<std::uint32_t>(s - 1) : kNoChannel;
    ps.out[0] = s + 1 < S ? static_cast<std::uint32_t>(s) : kNoChannel;
    ps.in[1] = s + 1 < S ? static_cast<std::uint32_t>((S - 1) + s) : kNoChannel;
    ps.out[1] = s > 0 ? static_cast<std::uint32_t>((S - 1) + (s - 1)) : kNoChannel;
    for (int d = 0; d < 2; ++d) ps.memory.in_bytes[d] = ps.in[d] == kNoChannel ? 0.0 : p.channels[ps.in[d]].bytes;
    std::uint32_t nf = 0, nb = 0;
    for (const Op& op : sc.schedule.stages[s]) {
      ProgramOp o{};
      o.micro_batch = op.micro_batch;
      if (op.phase == Phase::Forward) {
        o.backward = 0;
        o.dep_index = nf++;
      } else {
        o.backward = 1;
        o.dep_index = s + 1 < S ? nb : at(s, Phase::Forward, op.micro_batch);
        ++nb;
      }
      p.ops.push_back(o);
    }
    ps.end = static_cast<std::uint32_t>(p.ops.size());
  }
  return p;
}

}  // namespace adagrouper::sim::eval
