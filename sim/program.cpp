#include "program.h"

namespace adagrouper::sim {

Program build_program(const Scenario& sc) {
  const int S = sc.num_stages();
  const int M = sc.micro_batches();
  Program p;
  p.stage_begin.resize(S + 1);

  // Position of F(s,m) / B(s,m) in stage s's order.
  std::vector<std::uint32_t> pos(static_cast<std::size_t>(S) * M * 2);
  auto at = [&](int s, Phase ph, int m) -> std::uint32_t& {
    return pos[(static_cast<std::size_t>(s) * M + m) * 2 + (ph == Phase::Backward)];
  };
  for (int s = 0; s < S; ++s) {
    const auto& order = sc.schedule.stages[s];
    for (std::size_t i = 0; i < order.size(); ++i) at(s, order[i].phase, order[i].micro_batch) = static_cast<std::uint32_t>(i);
  }

  // Channels and their messages, in each receiver's consumption order.
  const int nch = 2 * (S - 1);
  p.channels.resize(nch);
  for (int c = 0; c < nch; ++c) {
    const bool fwd = c < S - 1;
    const int s = fwd ? c : c - (S - 1);
    ProgramChannel& ch = p.channels[c];
    ch.sender = static_cast<std::uint32_t>(fwd ? s : s + 1);
    ch.receiver = static_cast<std::uint32_t>(fwd ? s + 1 : s);
    ch.spec = fwd ? &sc.network.forward[s] : &sc.network.backward[s];
    ch.bytes = fwd ? sc.stages[s].out : sc.stages[s + 1].gout;
    ch.first = static_cast<std::uint32_t>(p.messages.size());
    ch.count = static_cast<std::uint32_t>(M);
    const Phase ph = fwd ? Phase::Forward : Phase::Backward;
    for (const Op& op : sc.schedule.stages[ch.receiver])
      if (op.phase == ph) p.messages.push_back({at(static_cast<int>(ch.sender), ph, op.micro_batch), op.micro_batch});
  }

  p.consumes.assign(static_cast<std::size_t>(S) * 2 * M, -1);
  for (int s = 0; s < S; ++s) {
    p.stage_begin[s] = static_cast<std::uint32_t>(p.ops.size());
    std::uint32_t nf = 0, nb = 0;
    for (const Op& op : sc.schedule.stages[s]) {
      ProgramOp o{};
      o.phase = op.phase;
      o.micro_batch = op.micro_batch;
      o.act = sc.stages[s].act;
      o.out_channel = -1;
      if (op.phase == Phase::Forward) {
        o.duration = sc.stages[s].fwd;
        if (s + 1 < S) o.out_channel = s;
        if (s > 0) {
          o.dep = Dep::Message;
          o.dep_channel = static_cast<std::uint32_t>(s - 1);
          o.dep_index = nf;
        } else {
          o.dep = Dep::None;
        }
        ++nf;
      } else {
        o.duration = sc.stages[s].bwd;
        if (s > 0) o.out_channel = (S - 1) + (s - 1);
        if (s + 1 < S) {
          o.dep = Dep::Message;
          o.dep_channel = static_cast<std::uint32_t>((S - 1) + s);
          o.dep_index = nb;
        } else {
          o.dep = Dep::Local;
          o.dep_index = at(s, Phase::Forward, op.micro_batch);
        }
        ++nb;
      }
      if (o.dep == Dep::Message)
        p.consumes[p.ops.size()] = p.channels[o.dep_channel].first + o.dep_index;
      p.ops.push_back(o);
    }
  }
  p.stage_begin[S] = static_cast<std::uint32_t>(p.ops.size());
  return p;
}

}  // namespace adagrouper::sim
