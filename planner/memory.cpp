// The planner's memory model: a per-stage bound on peak memory for a schedule.
//
// See planner.h and docs/model.md sections 11 and 14. At any instant stage d is either
// waiting before listed op i (with dynamic W fill, maybe running W ops meanwhile) or
// running op i. The activations held are then fixed by the order (exactly; pending W
// under dynamic fill are bounded by P, or by every I so far when P is unlimited). A
// message can be waiting in one of d's receive slots only if its producing op can have
// ended, and an op that depends, through any chain of order and message edges, on op i
// of d cannot have. For every op x the chain analysis finds L_d(x), the last position on
// stage d that x depends on; the message of x can be waiting before or during op i only
// if L_d(x) < i. Counting those messages minus the ones d consumed before i bounds the
// slot at every instant of the interval; a channel capacity Q bounds it too. Schedules
// with one model stage per stage take a one-pass form of the same analysis (memory_line.cpp).
#include <algorithm>
#include <array>
#include <cstdint>
#include <limits>

#include "memory_internal.h"

namespace adagrouper::planner {

using sim::Op;
using sim::Phase;

using memory_detail::capped;
using memory_detail::kUnlimited;
using memory_detail::PendingCaps;

namespace {

// Every listed op of a schedule by a global id (stage after stage, in order), and the
// op whose output each one consumes.
struct OpGraph {
  int S = 0, J = 0, M = 0;
  std::vector<std::uint32_t> base;   // first id of each stage; the total last
  std::vector<std::int32_t> stage;   // per id
  std::vector<std::int32_t> input;   // per id: the id of the op whose output it consumes, or -1

  explicit OpGraph(const sim::Schedule& sch) : S(sch.num_stages()), J(sch.num_model_stages()), base(S + 1, 0) {
    for (int s = 0; s < S; ++s) {
      base[s + 1] = base[s] + static_cast<std::uint32_t>(sch.stages[s].size());
      for (const Op& op : sch.stages[s]) M = std::max(M, op.micro_batch + 1);
    }
    std::vector<std::int32_t> where(static_cast<std::size_t>(J) * M * 4, -1);
    auto at = [&](int j, int m, Phase ph) -> std::int32_t& {
      return where[(static_cast<std::size_t>(j) * M + m) * 4 + static_cast<int>(ph)];
    };
    stage.resize(base[S]);
    for (int s = 0; s < S; ++s)
      for (std::size_t i = 0; i < sch.stages[s].size(); ++i) {
        const Op& op = sch.stages[s][i];
        const int j = op.model_stage < 0 ? s : op.model_stage;
        at(j, op.micro_batch, op.phase) = static_cast<std::int32_t>(base[s] + i);
        stage[base[s] + i] = s;
      }
    auto backward_sender = [&](int j, int m) {
      const std::int32_t b = at(j, m, Phase::Backward);
      return b >= 0 ? b : at(j, m, Phase::BackwardInput);
    };
    input.assign(base[S], -1);
    for (int s = 0; s < S; ++s)
      for (std::size_t i = 0; i < sch.stages[s].size(); ++i) {
        const Op& op = sch.stages[s][i];
        const int j = op.model_stage < 0 ? s : op.model_stage, m = op.micro_batch;
        std::int32_t& in = input[base[s] + i];
        if (op.phase == Phase::Forward) in = j > 0 ? at(j - 1, m, Phase::Forward) : -1;
        else if (op.phase == Phase::BackwardWeight) in = at(j, m, Phase::BackwardInput);
        else in = j + 1 < J ? backward_sender(j + 1, m) : at(j, m, Phase::Forward);
      }
  }
  std::uint32_t size() const { return base[S]; }
  std::uint32_t position(std::uint32_t id) const { return id - base[stage[id]]; }
  bool remote_input(std::uint32_t id) const { return input[id] >= 0 && stage[input[id]] != stage[id]; }
};

// A topological order of the ops: each stage's order, an op after the op it consumes.
// An op whose input can never come first (an order that deadlocks) is taken anyway;
// the analysis then ignores that dependency, which only loosens the bound.
std::vector<std::uint32_t> topological_order(const OpGraph& g) {
  std::vector<std::uint32_t> order;
  order.reserve(g.size());
  std::vector<char> done(g.size(), 0);
  std::vector<std::uint32_t> next(g.base.begin(), g.base.end() - 1);
  while (order.size() < g.size()) {
    bool progress = false;
    for (int s = 0; s < g.S; ++s)
      for (; next[s] < g.base[s + 1]; ++next[s]) {
        const std::int32_t in = g.input[next[s]];
        if (in >= 0 && !done[in] && g.stage[in] != s) break;
        done[next[s]] = 1;
        order.push_back(next[s]);
        progress = true;
      }
    if (progress) continue;
    for (int s = 0; s < g.S; ++s)
      if (next[s] < g.base[s + 1]) {
        done[next[s]] = 1;
        order.push_back(next[s]++);
        break;
      }
  }
  return order;
}

// The ops in topological order, with what the chain analysis reads of each: its stage,
// its position there, and the rank of the remote op whose output it consumes (-1: none,
// a local one, or one that comes later because the order deadlocks).
struct TopoOps {
  std::vector<std::uint32_t> id;       // by rank
  std::vector<std::int32_t> in_rank;   // by rank
  std::uint32_t longest = 0;           // most ops on one stage
};

TopoOps topo_ops(const OpGraph& g) {
  TopoOps t;
  t.id = topological_order(g);
  std::vector<std::int32_t> rank(g.size());
  for (std::uint32_t r = 0; r < t.id.size(); ++r) rank[t.id[r]] = static_cast<std::int32_t>(r);
  t.in_rank.assign(g.size(), -1);
  for (std::uint32_t r = 0; r < t.id.size(); ++r) {
    const std::uint32_t id = t.id[r];
    if (g.remote_input(id) && rank[g.input[id]] < static_cast<std::int32_t>(r)) t.in_rank[r] = rank[g.input[id]];
  }
  for (int s = 0; s < g.S; ++s) t.longest = std::max(t.longest, g.base[s + 1] - g.base[s]);
  return t;
}

// last_dep[id]: L_d(x) for the op x that produces the input of op `id`, d the stage of
// `id` (only for ops with a remote input; -1 elsewhere). Each op carries, for a block of
// target stages at a time, the last position there it depends on: the running maximum
// of its stage, merged with its remote input's. Positions as Lane (16-bit lanes halve the
// passes when every stage has fewer than 2^15 ops).
template <typename Lane>
std::vector<std::int32_t> last_dependencies(const OpGraph& g, const TopoOps& t) {
  constexpr int kBlock = 32 / sizeof(Lane);
  using Vec = std::array<Lane, kBlock>;
  Vec none;
  none.fill(-1);
  std::vector<std::int32_t> last_dep(g.size(), -1);
  std::vector<Vec> at(t.id.size());  // by rank
  std::vector<Vec> running(g.S);
  for (int t0 = 0; t0 < g.S; t0 += kBlock) {
    std::fill(running.begin(), running.end(), none);
    for (std::uint32_t r = 0; r < t.id.size(); ++r) {
      const std::uint32_t id = t.id[r];
      const int s = g.stage[id];
      Vec v = running[s];
      if (const std::int32_t in = t.in_rank[r]; in >= 0) {
        const Vec& w = at[in];
        if (s >= t0 && s < t0 + kBlock) last_dep[id] = w[s - t0];
        for (int k = 0; k < kBlock; ++k) v[k] = std::max(v[k], w[k]);
      }
      if (s >= t0 && s < t0 + kBlock) v[s - t0] = static_cast<Lane>(g.position(id));
      running[s] = at[r] = v;
    }
  }
  return last_dep;
}

std::vector<std::int32_t> last_dependencies(const OpGraph& g) {
  const TopoOps t = topo_ops(g);
  if (t.longest < 0x7fff) return last_dependencies<std::int16_t>(g, t);
  return last_dependencies<std::int32_t>(g, t);
}

// One receive slot of a stage: the messages of one (model stage, direction) from another stage.
struct Slot {
  double bytes = 0;
  std::int64_t capacity = kUnlimited;
  std::vector<std::int64_t> arrivable;  // [i]: messages whose producer may have ended before op i ends
};

// What stage d holds per model stage and receive slot, with the index of each.
struct StageLayout {
  std::vector<int> locals;           // its model stages, in model order
  std::vector<int> local_of;         // per model stage of the schedule: its index in locals, or -1
  std::vector<Slot> slots;           // per local: forward slot, backward slot (where remote)
  std::vector<int> slot_of;          // per (local, direction): index into slots, or -1
};

StageLayout stage_layout(const sim::Schedule& sch, const std::vector<sim::StageParams>& params,
                         const sim::Network& net, int d) {
  const int J = sch.num_model_stages();
  StageLayout L;
  L.local_of.assign(J, -1);
  for (int j = 0; j < J; ++j)
    if (sch.stage_of(j) == d) {
      L.local_of[j] = static_cast<int>(L.locals.size());
      L.locals.push_back(j);
    }
  L.slot_of.assign(2 * L.locals.size(), -1);
  for (std::size_t l = 0; l < L.locals.size(); ++l) {
    const int j = L.locals[l];
    for (int dir = 0; dir < 2; ++dir) {
      const int peer = dir == 0 ? j - 1 : j + 1;
      if (peer < 0 || peer >= J || sch.stage_of(peer) == d) continue;
      Slot slot;
      slot.bytes = dir == 0 ? params[j - 1].out : params[j + 1].gout;
      const int cap = net.channel(sch.stage_of(peer), d).capacity;
      if (cap > 0) slot.capacity = cap;
      L.slot_of[2 * l + dir] = static_cast<int>(L.slots.size());
      L.slots.push_back(std::move(slot));
    }
  }
  return L;
}

// The slot an op's input waits in, or -1 (no input, or a local one).
int slot_of_op(const StageLayout& L, const Op& op, int own_stage) {
  const int j = op.model_stage < 0 ? own_stage : op.model_stage;
  if (op.phase == Phase::BackwardWeight) return -1;
  return L.slot_of[2 * L.local_of[j] + (op.phase == Phase::Forward ? 0 : 1)];
}

// Fills every slot's `arrivable` counts from the chain analysis.
void count_arrivable(StageLayout& L, const OpGraph& g, const std::vector<std::int32_t>& last_dep,
                     const std::vector<Op>& order, int d) {
  const std::size_t n = order.size();
  for (Slot& slot : L.slots) slot.arrivable.assign(n + 1, 0);
  for (std::size_t i = 0; i < n; ++i) {
    const std::uint32_t id = g.base[d] + static_cast<std::uint32_t>(i);
    if (!g.remote_input(id)) continue;
    const int slot = slot_of_op(L, order[i], d);
    // Not arrivable before op last_dep + 1 (it depends on op last_dep of this stage).
    L.slots[slot].arrivable[static_cast<std::size_t>(last_dep[id] + 1)] += 1;
  }
  for (Slot& slot : L.slots)
    for (std::size_t i = 1; i <= n; ++i) slot.arrivable[i] += slot.arrivable[i - 1];
}

}  // namespace

namespace {

// The counts of one stage before op i, per local model stage, and how many I ops of each
// local model stage the first n I ops were (for the W still pending under dynamic fill:
// those of the most recent I ops).
struct Counts {
  std::size_t v;
  std::vector<std::int64_t> act, wgrad;  // F started and no B or I ended; I ended and no W
  std::size_t inputs = 0;                // I ops ended
  std::vector<std::int32_t> i_prefix;    // [n v + l]: I ops of l among the first n
  explicit Counts(std::size_t locals) : v(locals), act(v, 0), wgrad(v, 0), i_prefix(v, 0) {}

  void apply(const Op& op, int l) {
    switch (op.phase) {
      case Phase::Forward: ++act[l]; break;
      case Phase::Backward: --act[l]; break;
      case Phase::BackwardInput:
        --act[l];
        ++wgrad[l];
        ++inputs;
        for (std::size_t k = 0; k < v; ++k) {
          const std::int32_t before = i_prefix[(inputs - 1) * v + k];
          i_prefix.push_back(before + (k == static_cast<std::size_t>(l) ? 1 : 0));
        }
        break;
      case Phase::BackwardWeight: --wgrad[l]; break;
    }
  }
  // With dynamic W fill (no W listed), the W of at most `pending` of the latest I ops may
  // not have ended: how many of those are local model stage l's.
  std::int64_t pending_of(std::size_t l, std::int64_t pending) const {
    const std::size_t from = inputs - static_cast<std::size_t>(std::min<std::int64_t>(pending, static_cast<std::int64_t>(inputs)));
    return i_prefix[inputs * v + l] - i_prefix[from * v + l];
  }
};

// The memory above static bytes for given counts: per model stage act then wgrad, then
// per slot the waiting messages, summed in that order (the simulator's order of terms).
// `running_l` is the local model stage whose F runs (-1: none), `consumed` the slot whose
// message the running op took (-1: none), `pending` the bound on pending W (dynamic fill).
double held(const StageLayout& L, const std::vector<sim::StageParams>& params, const Counts& c, std::size_t i,
            const std::vector<std::int64_t>& consumed_before, int running_l, int consumed,
            const PendingCaps& caps, std::int64_t pending) {
  double sum = 0;
  for (std::size_t l = 0; l < L.locals.size(); ++l) {
    const sim::StageParams& p = params[L.locals[l]];
    const std::int64_t w = caps.dynamic ? c.pending_of(l, pending) : c.wgrad[l];
    sum += p.act * static_cast<double>(c.act[l] + (static_cast<int>(l) == running_l ? 1 : 0));
    sum += p.wgrad * static_cast<double>(w);
  }
  for (std::size_t k = 0; k < L.slots.size(); ++k) {
    const Slot& slot = L.slots[k];
    const std::int64_t waiting = slot.arrivable[i] - consumed_before[k] - (static_cast<int>(k) == consumed ? 1 : 0);
    sum += slot.bytes * static_cast<double>(capped(waiting, slot.capacity));
  }
  return sum;
}

// The bound of stage d: the largest value over the intervals before each listed op and
// after the last, and while each op runs.
double stage_bound(const sim::Schedule& sch, const std::vector<sim::StageParams>& params, const StageLayout& L,
                   int d) {
  const auto& order = sch.stages[d];
  const PendingCaps caps(sch.spec);
  Counts c(L.locals.size());
  std::vector<std::int64_t> consumed(L.slots.size(), 0);
  double peak = 0;
  for (std::size_t i = 0; i <= order.size(); ++i) {
    peak = std::max(peak, held(L, params, c, i, consumed, -1, -1, caps, caps.gap));
    if (i == order.size()) break;
    const Op& op = order[i];
    const int l = L.local_of[op.model_stage < 0 ? d : op.model_stage];
    const int slot = slot_of_op(L, op, d);
    const int running_l = op.phase == Phase::Forward ? l : -1;
    peak = std::max(peak, held(L, params, c, i, consumed, running_l, slot, caps, caps.running));
    c.apply(op, l);
    if (slot >= 0) ++consumed[slot];
  }
  double static_bytes = 0;
  for (const int j : L.locals) static_bytes += params[j].static_bytes;
  return static_bytes + peak;
}

}  // namespace

std::vector<int> peak_inflight(const sim::Schedule& sch) {
  // In flight only grows when an F starts, so the peak is taken there: F started minus B
  // and W ended; under dynamic W fill, I ended minus the W that may still be pending.
  const PendingCaps caps(sch.spec);
  std::vector<int> peak(sch.num_stages(), 0);
  for (int s = 0; s < sch.num_stages(); ++s) {
    std::int64_t started = 0, released = 0, inputs = 0;  // F; B and listed W; I
    for (const Op& op : sch.stages[s]) {
      if (op.phase == Phase::Forward) {
        ++started;
        const std::int64_t pending = caps.dynamic ? std::min(inputs, caps.running) : inputs;
        peak[s] = static_cast<int>(std::max<std::int64_t>(peak[s], started - released - inputs + pending));
      }
      released += op.phase == Phase::Backward || op.phase == Phase::BackwardWeight;
      inputs += op.phase == Phase::BackwardInput && caps.dynamic;
    }
  }
  return peak;
}

std::vector<double> memory_model(const std::vector<sim::StageParams>& params, const sim::Schedule& sch,
                                 const sim::Network& net) {
  if (sch.placement.empty()) return memory_detail::line_memory_model(params, sch, net);
  const OpGraph graph(sch);
  const std::vector<std::int32_t> last_dep = last_dependencies(graph);
  std::vector<double> out(sch.num_stages());
  for (int d = 0; d < sch.num_stages(); ++d) {
    StageLayout layout = stage_layout(sch, params, net, d);
    count_arrivable(layout, graph, last_dep, sch.stages[d], d);
    out[d] = stage_bound(sch, params, layout, d);
  }
  return out;
}

}  // namespace adagrouper::planner
