// Compiling a scenario into a Program: classes, channels, messages and ops.
#include "program.h"

#include <algorithm>

#include <fmt/format.h>

#include "../accounting.h"
#include "../error.h"

namespace adagrouper::sim::eval {

namespace {

constexpr std::uint32_t kMaxIndex = 1u << 24;  // ProgramOp::dep

// Where model stages run and where each op sits in its stage's order.
struct Layout {
  int S = 0, J = 0, M = 0;
  std::vector<int> stage_of;             // per model stage
  std::vector<int> local_of;             // per model stage: l, its rank among its stage's
  std::vector<std::vector<int>> locals;  // per stage: its model stages, in model order
  std::vector<std::int32_t> pos;         // [(j M + m) 4 + phase]: position in the stage's order, or -1

  std::int32_t& at(int j, int m, Phase ph) { return pos[(static_cast<std::size_t>(j) * M + m) * 4 + static_cast<int>(ph)]; }
  // The position of the op of (j, m) that sends its gradient on: B, or I when split.
  std::int32_t backward(int j, int m) {
    const std::int32_t b = at(j, m, Phase::Backward);
    return b >= 0 ? b : at(j, m, Phase::BackwardInput);
  }
};

Layout layout_of(const Scenario& sc) {
  Layout L;
  L.S = sc.num_stages();
  L.J = static_cast<int>(sc.model_stages.size());
  L.M = sc.micro_batches();
  L.stage_of.resize(L.J);
  L.local_of.resize(L.J);
  L.locals.resize(L.S);
  for (int j = 0; j < L.J; ++j) {
    L.stage_of[j] = sc.schedule.stage_of(j);
    auto& mine = L.locals[L.stage_of[j]];
    L.local_of[j] = static_cast<int>(mine.size());
    mine.push_back(j);
  }
  L.pos.assign(static_cast<std::size_t>(L.J) * L.M * 4, -1);
  for (int s = 0; s < L.S; ++s) {
    const auto& order = sc.schedule.stages[s];
    if (order.size() >= kMaxIndex)
      throw InputError(fmt::format("stage {} runs {} ops per iteration; the simulator takes fewer than {}", s,
                                   order.size(), kMaxIndex));
    for (std::size_t i = 0; i < order.size(); ++i)
      L.at(order[i].model_stage, order[i].micro_batch, order[i].phase) = static_cast<std::int32_t>(i);
  }
  return L;
}

// Numbers the channels that carry messages: forward ones in model-stage order, then
// backward ones.
std::vector<std::uint32_t> number_channels(const Layout& L, Program& p) {
  std::vector<std::uint32_t> id(static_cast<std::size_t>(L.S) * L.S, kNoChannel);
  auto add = [&](int from, int to) {
    auto& c = id[static_cast<std::size_t>(from) * L.S + to];
    if (from == to || c != kNoChannel) return;
    c = static_cast<std::uint32_t>(p.channels.size());
    ProgramChannel ch{};
    ch.sender = static_cast<std::uint32_t>(from);
    ch.receiver = static_cast<std::uint32_t>(to);
    p.channels.push_back(ch);
  };
  for (int j = 0; j + 1 < L.J; ++j) add(L.stage_of[j], L.stage_of[j + 1]);
  for (int j = 0; j + 1 < L.J; ++j) add(L.stage_of[j + 1], L.stage_of[j]);
  return id;
}

// The classes of stage s, its memory terms and input channels.
void build_stage(const Layout& L, const std::vector<std::uint32_t>& channel_id, int s, Program& p) {
  auto chan = [&](int from, int to) { return channel_id[static_cast<std::size_t>(from) * L.S + to]; };
  ProgramStage& ps = p.stages[s];
  const auto& mine = L.locals[s];
  const int v = static_cast<int>(mine.size());
  ps.classes = static_cast<std::uint32_t>(p.classes.size());
  ps.locals = static_cast<std::uint32_t>(v);
  ps.terms = static_cast<std::uint32_t>(p.terms.size());
  auto term = [&](int j, TermSource::Field field) {
    p.terms.push_back(0);  // bind_parameters sets it
    p.term_source.push_back({static_cast<std::uint32_t>(j), field});
    return static_cast<std::uint16_t>(p.terms.size() - 1 - ps.terms);
  };
  for (int j : mine) {
    term(j, TermSource::Field::Act);
    term(j, TermSource::Field::Wgrad);
  }
  for (int l = 0; l < v; ++l) {
    const int j = mine[l];
    // Inputs: F from j-1 (none for j = 0), B and I from j+1 (F(j, m) itself for the last).
    std::uint32_t in_f = kNoChannel, in_b = kLocal;
    std::uint16_t slot_f = 0, slot_b = 0;
    if (j > 0 && L.stage_of[j - 1] == s) in_f = kLocal;
    if (j > 0 && L.stage_of[j - 1] != s)
      in_f = chan(L.stage_of[j - 1], s), slot_f = term(j - 1, TermSource::Field::Out);
    if (j + 1 < L.J && L.stage_of[j + 1] != s)
      in_b = chan(L.stage_of[j + 1], s), slot_b = term(j + 1, TermSource::Field::Gout);
    // Outputs: F to j+1, B and I to j-1, where those run elsewhere; W sends nothing.
    const std::uint32_t out_f = j + 1 < L.J && L.stage_of[j + 1] != s ? chan(s, L.stage_of[j + 1]) : kNoChannel;
    const std::uint32_t out_b = j > 0 && L.stage_of[j - 1] != s ? chan(s, L.stage_of[j - 1]) : kNoChannel;
    const std::uint32_t in[4] = {in_f, in_b, in_b, kLocal}, out[4] = {out_f, out_b, out_b, kNoChannel};
    const std::uint16_t slots[4] = {slot_f, slot_b, slot_b, 0};
    for (int ph = 0; ph < 4; ++ph)  // nominal: bind_parameters sets it
      p.classes.push_back({0.0, in[ph], out[ph], static_cast<std::uint16_t>(2 * l), slots[ph],
                           static_cast<std::uint16_t>(j), static_cast<Phase>(ph), 0});
  }
  ps.nterms = static_cast<std::uint32_t>(p.terms.size()) - ps.terms;
  ps.inputs = static_cast<std::uint32_t>(p.inputs.size());
  for (std::uint32_t c = 0; c < p.channels.size(); ++c)
    if (p.channels[c].receiver == static_cast<std::uint32_t>(s)) p.inputs.push_back(c);
  ps.ninputs = static_cast<std::uint32_t>(p.inputs.size()) - ps.inputs;
  for (std::uint32_t k = ps.classes; k < p.classes.size(); ++k)
    for (std::uint32_t i = 0; i < ps.ninputs; ++i)
      if (p.classes[k].in == p.inputs[ps.inputs + i]) p.classes[k].input = static_cast<std::uint8_t>(i);
}

// The position, in its stage's order, of the op whose output `op` (on stage s) waits for
// locally; -1 when that op is not listed (the order cannot run).
std::int32_t local_producer(Layout& L, const Op& op) {
  const int j = op.model_stage, m = op.micro_batch;
  switch (op.phase) {
    case Phase::Forward: return L.at(j - 1, m, Phase::Forward);
    case Phase::BackwardWeight: return L.at(j, m, Phase::BackwardInput);
    default: return j + 1 == L.J ? L.at(j, m, Phase::Forward) : L.backward(j + 1, m);
  }
}

// The listed ops of stage s with their dependencies, counting the messages each channel
// carries (a consumed message is numbered in the receiver's order); then the W region
// under dynamic fill. `next` is where the stage's ops go in p.ops.
void build_ops(const Scenario& sc, Layout& L, int s, std::vector<std::uint32_t>& messages, Program& p,
               std::size_t& next) {
  ProgramStage& ps = p.stages[s];
  ps.begin = static_cast<std::uint32_t>(next);
  for (const Op& op : sc.schedule.stages[s]) {
    const std::uint32_t cls = 4 * static_cast<std::uint32_t>(L.local_of[op.model_stage]) + static_cast<int>(op.phase);
    const OpClass& c = p.classes[ps.classes + cls];
    std::uint32_t dep = 0;
    if (c.in == kLocal) {
      const std::int32_t producer = local_producer(L, op);
      dep = producer < 0 ? kMaxIndex - 1 : static_cast<std::uint32_t>(producer);
    } else if (c.in != kNoChannel) {
      dep = messages[c.in]++;
      if (dep + 1 >= kMaxIndex)
        throw InputError(fmt::format("channel {} -> {} carries more than {} messages per iteration",
                                     p.channels[c.in].sender, s, kMaxIndex - 1));
    }
    p.ops[next++] = {op.micro_batch, dep, cls};
  }
  ps.end = static_cast<std::uint32_t>(next);
  ps.w_begin = ps.w_end = ps.end;
  if (!p.dynamic_w) return;
  for (std::uint32_t l = 0; l < ps.locals; ++l)
    for (int m = 0; m < L.M; ++m) {
      const std::int32_t i = L.at(L.locals[s][l], m, Phase::BackwardInput);
      p.ops[next++] = {m, i < 0 ? 0u : static_cast<std::uint32_t>(i), 4 * l + 3};
    }
  ps.w_end = static_cast<std::uint32_t>(next);
}

// Each channel's messages (`count` of them): producer positions and waiting terms, in
// the receiver's order, from the consuming ops' message numbers.
void build_messages(const Scenario& sc, Layout& L, const std::vector<std::uint32_t>& count, Program& p) {
  std::uint32_t total = 0;
  for (std::uint32_t c = 0; c < p.channels.size(); ++c) {
    p.channels[c].first = total;
    p.channels[c].count = count[c];
    total += count[c];
  }
  p.producer.resize(total);
  p.msg_bytes.resize(total);
  p.msg_term.resize(total);
  for (std::uint32_t s = 0; s < p.stages.size(); ++s) {
    const ProgramStage& rx = p.stages[s];
    const auto& order = sc.schedule.stages[s];
    for (std::uint32_t at = 0; at < order.size(); ++at) {
      const OpClass& cls = rx.cls(p.classes, p.ops[rx.begin + at]);
      if (cls.in >= kLocal) continue;
      const Op& op = order[at];
      const std::int32_t prod = op.phase == Phase::Forward ? L.at(op.model_stage - 1, op.micro_batch, Phase::Forward)
                                                           : L.backward(op.model_stage + 1, op.micro_batch);
      const std::uint32_t n = p.channels[cls.in].first + p.ops[rx.begin + at].dep;
      p.producer[n] = prod < 0 ? kMaxIndex - 1 : static_cast<std::uint32_t>(prod);
      p.msg_term[n] = cls.slot_term;
    }
  }
}

// Stage s's nominal durations, static bytes, optimizer step and speed.
void bind_stage(const Scenario& sc, std::uint32_t s, Program& p) {
  ProgramStage& ps = p.stages[s];
  ps.static_bytes = 0;
  ps.opt = 0;
  for (std::uint32_t l = 0; l < ps.locals; ++l) {  // in model order, as the sums always ran
    const StageParams& mp = sc.model_stages[p.classes[ps.classes + 4 * l].model_stage];
    ps.static_bytes += mp.static_bytes;
    ps.opt += mp.opt;
    const double nominal[4] = {mp.fwd, mp.bwd, mp.bwd_input, mp.bwd_weight};
    for (std::uint32_t ph = 0; ph < 4; ++ph) p.classes[ps.classes + 4 * l + ph].nominal = nominal[ph];
  }
  const RateTrace& speed = sc.network.speed(static_cast<int>(s));
  ps.unit_speed = speed.is_constant() && speed.values()[0] == 1.0;
}

double term_bytes(const StageParams& mp, TermSource::Field field) {
  switch (field) {
    case TermSource::Field::Act: return mp.act;
    case TermSource::Field::Wgrad: return mp.wgrad;
    case TermSource::Field::Out: return mp.out;
    case TermSource::Field::Gout: return mp.gout;
  }
  return 0;
}

// A channel's spec, its messages' bytes, and how its transfers take their time.
void bind_channel(const Scenario& sc, ProgramChannel& ch, Program& p) {
  ch.spec = &sc.network.channel(static_cast<int>(ch.sender), static_cast<int>(ch.receiver));
  ch.latency_s = ch.spec->latency_s;
  ch.capacity = static_cast<std::uint32_t>(ch.spec->capacity);
  const double* terms = &p.terms[p.stages[ch.receiver].terms];
  double* b = p.msg_bytes.data() + ch.first;
  for (std::uint32_t n = 0; n < ch.count; ++n) b[n] = terms[p.msg_term[ch.first + n]];
  const bool no_bytes = std::all_of(b, b + ch.count, [](double x) { return x == 0; });
  ch.transfer = ch.spec->unlimited() || no_bytes ? Transfer::LatencyOnly
                : ch.spec->burst_bytes > 0       ? Transfer::Bucket
                                                 : Transfer::Rate;
  ch.uniform = ch.count > 0 && std::all_of(b, b + ch.count, [&](double x) { return x == b[0]; });
  ch.bytes = ch.uniform ? b[0] : 0.0;
}

}  // namespace

void bind_parameters(const Scenario& sc, Program& p) {
  for (std::uint32_t s = 0; s < p.stages.size(); ++s) bind_stage(sc, s, p);
  for (std::size_t t = 0; t < p.terms.size(); ++t)
    p.terms[t] = term_bytes(sc.model_stages[p.term_source[t].model_stage], p.term_source[t].field);
  for (ProgramChannel& ch : p.channels) bind_channel(sc, ch, p);
}

bool Program::memory_sums_exact(std::uint32_t s) const {
  const ProgramStage& ps = stages[s];
  // A count never exceeds the stage's ops and the messages it receives.
  double most = ps.end - ps.begin + (ps.w_end - ps.w_begin);
  for (std::uint32_t k = 0; k < ps.ninputs; ++k) most += channels[inputs[ps.inputs + k]].count;
  return sums_exact_in_any_order(ps.static_bytes, &terms[ps.terms], ps.nterms, most);
}

Op Program::op_of(std::uint32_t stage, const ProgramOp& op) const {
  const OpClass& c = stages[stage].cls(classes, op);
  return {c.phase, op.micro_batch, c.model_stage};
}

Program build_program(const Scenario& sc) {
  Layout L = layout_of(sc);
  Program p;
  p.micro_batches = L.M;
  p.dynamic_w = sc.schedule.spec.w_fill == WFill::Dynamic;
  p.max_pending_w = sc.schedule.spec.max_pending_w ? static_cast<std::uint32_t>(*sc.schedule.spec.max_pending_w)
                                                   : 0xffffffffu;
  if (L.J > 65535) throw InputError(fmt::format("{} model stages; the simulator takes at most 65535", L.J));
  for (const auto& mine : L.locals)
    if (mine.size() > 64)
      throw InputError(fmt::format("a stage runs {} model stages; the simulator takes at most 64", mine.size()));
  const std::vector<std::uint32_t> channel_id = number_channels(L, p);
  p.stages.resize(L.S);
  for (int s = 0; s < L.S; ++s) build_stage(L, channel_id, s, p);
  std::size_t listed = 0;
  for (const auto& order : sc.schedule.stages) listed += order.size();
  p.ops.resize(listed + (p.dynamic_w ? static_cast<std::size_t>(L.J) * L.M : 0));
  std::vector<std::uint32_t> messages(p.channels.size(), 0);
  std::size_t next = 0;
  for (int s = 0; s < L.S; ++s) build_ops(sc, L, s, messages, p, next);
  build_messages(sc, L, messages, p);
  bind_parameters(sc, p);
  return p;
}

}  // namespace adagrouper::sim::eval
