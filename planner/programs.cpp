// Per-device programs of a plan, their communicators, and their validation.
//
// Validation: send/recv pairing, per-communicator order, and an acyclic combined
// dependency graph (docs/model.md section 11).
#include <algorithm>
#include <cstdlib>
#include <map>
#include <optional>
#include <set>
#include <stdexcept>
#include <string>
#include <utility>

#include <boost/graph/adjacency_list.hpp>
#include <boost/graph/topological_sort.hpp>
#include <fmt/format.h>

#include "planner.h"

namespace adagrouper::planner {

using sim::Phase;

namespace {

using K = ProgramEntry::Kind;

// Where each model stage runs, its index among its stage's model stages, and where every
// op sits in its stage's order.
struct Placement {
  int S = 0, J = 0, M = 0;
  std::vector<int> stage_of, local_of, locals_on;  // per model stage; per stage
  std::vector<std::int32_t> pos;                   // [(j M + m) 4 + phase]: position, or -1

  explicit Placement(const sim::Schedule& sch) : S(sch.num_stages()), J(sch.num_model_stages()), locals_on(S, 0) {
    for (int j = 0; j < J; ++j) {
      stage_of.push_back(sch.stage_of(j));
      local_of.push_back(locals_on[stage_of.back()]++);
    }
    for (const auto& order : sch.stages)
      for (const sim::Op& op : order) M = std::max(M, op.micro_batch + 1);
    pos.assign(static_cast<std::size_t>(J) * M * 4, -1);
    for (int s = 0; s < S; ++s)
      for (std::size_t i = 0; i < sch.stages[s].size(); ++i) {
        const sim::Op& op = sch.stages[s][i];
        at(model_stage(op, s), op.micro_batch, op.phase) = static_cast<std::int32_t>(i);
      }
  }
  static int model_stage(const sim::Op& op, int stage) { return op.model_stage < 0 ? stage : op.model_stage; }
  std::int32_t& at(int j, int m, Phase ph) { return pos[(static_cast<std::size_t>(j) * M + m) * 4 + static_cast<int>(ph)]; }
  // The model stage whose op produces the input of `op` (of model stage j), or -1.
  int producer(int j, Phase ph) const {
    if (ph == Phase::Forward) return j - 1;
    if (ph == Phase::BackwardWeight) return -1;
    return j + 1 < J ? j + 1 : -1;
  }
  // The model stage `op` (of model stage j) sends its output to, or -1.
  int consumer(int j, Phase ph) const {
    if (ph == Phase::Forward) return j + 1 < J ? j + 1 : -1;
    if (ph == Phase::BackwardWeight) return -1;
    return j - 1;
  }
  bool remote(int a, int b) const { return a >= 0 && stage_of[a] != stage_of[b]; }
  // The position of the op of (j, m) that sends to model stage `to`.
  std::int32_t sender_position(int j, int m, int to) {
    if (to == j + 1) return at(j, m, Phase::Forward);
    const std::int32_t b = at(j, m, Phase::Backward);
    return b >= 0 ? b : at(j, m, Phase::BackwardInput);
  }
  // The tag of the message model stage j sends for micro-batch m (docs/model.md section 11).
  int tag(int j, int m, bool gradient) const {
    return 2 * (m * locals_on[stage_of[j]] + local_of[j]) + (gradient ? 1 : 0);
  }
};

}  // namespace

const char* program_entry_name(ProgramEntry::Kind kind) {
  switch (kind) {
    case K::Forward: return "forward";
    case K::Backward: return "backward";
    case K::BackwardInput: return "backward_input";
    case K::BackwardWeight: return "backward_weight";
    case K::Send: return "send";
    case K::Recv: return "recv";
  }
  return "?";
}

std::optional<sim::Op> compute_op(const ProgramEntry& e) {
  switch (e.kind) {
    case K::Forward: return sim::Op{Phase::Forward, e.micro_batch, e.model_stage};
    case K::Backward: return sim::Op{Phase::Backward, e.micro_batch, e.model_stage};
    case K::BackwardInput: return sim::Op{Phase::BackwardInput, e.micro_batch, e.model_stage};
    case K::BackwardWeight: return sim::Op{Phase::BackwardWeight, e.micro_batch, e.model_stage};
    case K::Send:
    case K::Recv: break;
  }
  return std::nullopt;
}

std::vector<Communicator> communicators(const sim::Schedule& sch) {
  const Placement pl(sch);
  std::vector<Communicator> out;
  for (int s = 0; s + 1 < pl.S; ++s) {
    out.push_back({2 * s, s, s + 1, false, false});
    out.push_back({2 * s + 1, s + 1, s, false, false});
  }
  std::set<std::pair<int, int>> far;  // pairs that are not neighbours
  for (int j = 0; j + 1 < pl.J; ++j) {
    const int a = pl.stage_of[j], b = pl.stage_of[j + 1];
    if (std::abs(a - b) > 1) far.insert({a, b}), far.insert({b, a});
  }
  for (const auto& [from, to] : far) out.push_back({static_cast<int>(out.size()), from, to, false, false});
  auto find = [&](int from, int to) -> Communicator& {
    for (Communicator& c : out)
      if (c.from == from && c.to == to) return c;
    throw std::logic_error("communicators: no communicator for a pair of stages that exchange messages");
  };
  for (int j = 0; j + 1 < pl.J; ++j) {
    const int a = pl.stage_of[j], b = pl.stage_of[j + 1];
    if (a == b) continue;
    find(a, b).activations = true;
    find(b, a).gradients = true;
  }
  return out;
}

namespace {

// One message of a communicator, in the order its receiver consumes them.
struct Message {
  int micro_batch, sender_model_stage;
  bool gradient;
  std::int32_t produced_at;  // position of its producer in the sender's order
  std::int32_t issue_after;  // the sender issues it after this op: its producer's and the previous one's
};

// Per communicator id, its messages in the receiver's order.
std::map<int, std::vector<Message>> communicator_messages(const sim::Schedule& sch, Placement& pl,
                                                          const std::map<std::pair<int, int>, int>& ids) {
  std::map<int, std::vector<Message>> out;
  for (int d = 0; d < pl.S; ++d)
    for (const sim::Op& op : sch.stages[d]) {
      const int j = Placement::model_stage(op, d), from = pl.producer(j, op.phase);
      if (!pl.remote(from, j)) continue;
      auto& list = out[ids.at({pl.stage_of[from], d})];
      const std::int32_t at = pl.sender_position(from, op.micro_batch, j);
      const std::int32_t after = list.empty() ? at : std::max(at, list.back().issue_after);
      list.push_back({op.micro_batch, from, op.phase != Phase::Forward, at, after});
    }
  return out;
}

}  // namespace

std::vector<DeviceProgram> device_programs(const sim::Schedule& sch, const std::vector<sim::StageParams>& params) {
  Placement pl(sch);
  std::map<std::pair<int, int>, int> ids;
  for (const Communicator& c : communicators(sch)) ids[{c.from, c.to}] = c.id;
  // sends[d][i]: the sends stage d issues after its op i, in issue order.
  std::vector<std::vector<std::vector<ProgramEntry>>> sends(pl.S);
  for (int d = 0; d < pl.S; ++d) sends[d].resize(sch.stages[d].size());
  for (const auto& [id, list] : communicator_messages(sch, pl, ids))
    for (const Message& msg : list) {
      const int j = msg.sender_model_stage, to = msg.gradient ? j - 1 : j + 1;
      const double bytes = msg.gradient ? params[j].gout : params[j].out;
      sends[pl.stage_of[j]][msg.issue_after].push_back(
          {K::Send, msg.micro_batch, pl.stage_of[to], bytes, pl.tag(j, msg.micro_batch, msg.gradient), id, j});
    }
  static constexpr K kKinds[] = {K::Forward, K::Backward, K::BackwardInput, K::BackwardWeight};
  std::vector<DeviceProgram> progs(pl.S);
  for (int d = 0; d < pl.S; ++d) {
    DeviceProgram& p = progs[d];
    p.stage = d;
    for (std::size_t i = 0; i < sch.stages[d].size(); ++i) {
      const sim::Op& op = sch.stages[d][i];
      const int j = Placement::model_stage(op, d), m = op.micro_batch, from = pl.producer(j, op.phase);
      if (pl.remote(from, j)) {
        const bool gradient = op.phase != Phase::Forward;
        const double bytes = gradient ? params[from].gout : params[from].out;
        p.entries.push_back({K::Recv, m, pl.stage_of[from], bytes, pl.tag(from, m, gradient),
                             ids.at({pl.stage_of[from], d}), j});
      }
      p.entries.push_back({kKinds[static_cast<int>(op.phase)], m, -1, 0, 0, 0, j});
      for (ProgramEntry& e : sends[d][i]) p.entries.push_back(std::move(e));
    }
  }
  return progs;
}

namespace {

// Every entry of every device as one vertex, numbered device by device in issue order.
class EntryIndex {
 public:
  explicit EntryIndex(const std::vector<DeviceProgram>& progs) : progs_(progs), base_(progs.size() + 1, 0) {
    for (std::size_t d = 0; d < progs.size(); ++d) base_[d + 1] = base_[d] + progs[d].entries.size();
  }
  std::size_t size() const { return base_.back(); }
  std::size_t vertex(std::size_t device, std::size_t i) const { return base_[device] + i; }
  // (device, index of the entry in its program)
  std::pair<std::size_t, std::size_t> locate(std::size_t v) const {
    const auto d = static_cast<std::size_t>(std::upper_bound(base_.begin(), base_.end(), v) - base_.begin()) - 1;
    return {d, v - base_[d]};
  }
  const ProgramEntry& entry(std::size_t v) const {
    const auto [d, i] = locate(v);
    return progs_[d].entries[i];
  }
  int stage(std::size_t v) const { return progs_[locate(v).first].stage; }
  // "device 1 entry 4 (send micro-batch 2, communicator 2, tag 4)", for messages.
  std::string name(std::size_t v) const {
    const auto [d, i] = locate(v);
    const ProgramEntry& e = progs_[d].entries[i];
    return fmt::format("device {} entry {} ({} micro-batch {} of model stage {}, communicator {}, tag {})",
                       progs_[d].stage, i, program_entry_name(e.kind), e.micro_batch, e.model_stage, e.communicator,
                       e.tag);
  }

 private:
  const std::vector<DeviceProgram>& progs_;
  std::vector<std::size_t> base_;  // first vertex of each device; the total last
};

// Per communicator: the vertices of its sends and of its recvs, in issue order.
struct CommunicatorSides {
  std::vector<std::size_t> sends, recvs;
};

std::map<int, CommunicatorSides> communicator_sides(const std::vector<DeviceProgram>& progs, const EntryIndex& index) {
  std::map<int, CommunicatorSides> comms;
  for (std::size_t d = 0; d < progs.size(); ++d) {
    for (std::size_t i = 0; i < progs[d].entries.size(); ++i) {
      const ProgramEntry& e = progs[d].entries[i];
      if (e.kind == K::Send) comms[e.communicator].sends.push_back(index.vertex(d, i));
      if (e.kind == K::Recv) comms[e.communicator].recvs.push_back(index.vertex(d, i));
    }
  }
  return comms;
}

// Pairing: the n-th send of a communicator matches its n-th recv. Returns the matched
// (send, recv) vertex pairs and appends a problem for every mismatch.
std::vector<std::pair<std::size_t, std::size_t>> pair_sends(const std::map<int, CommunicatorSides>& comms,
                                                            const EntryIndex& index,
                                                            std::vector<std::string>& problems) {
  std::vector<std::pair<std::size_t, std::size_t>> pairs;
  for (const auto& [comm, side] : comms) {
    if (side.sends.size() != side.recvs.size())
      problems.push_back(fmt::format("communicator {}: {} sends but {} recvs", comm, side.sends.size(), side.recvs.size()));
    const std::size_t n = std::min(side.sends.size(), side.recvs.size());
    for (std::size_t j = 0; j < n; ++j) {
      const ProgramEntry& s = index.entry(side.sends[j]);
      const ProgramEntry& r = index.entry(side.recvs[j]);
      if (s.tag != r.tag || s.bytes != r.bytes || s.peer != index.stage(side.recvs[j]) ||
          r.peer != index.stage(side.sends[j]))
        problems.push_back(fmt::format("communicator {}: send #{} {} does not match recv #{} {} (order, tag, bytes or peers differ)",
                                       comm, j, index.name(side.sends[j]), j, index.name(side.recvs[j])));
      else
        pairs.emplace_back(side.sends[j], side.recvs[j]);
    }
  }
  return pairs;
}

using Graph = boost::adjacency_list<boost::vecS, boost::vecS, boost::directedS>;

// The edges of one device's program: program order on its compute stream and on each
// communicator's sends and recvs (one FIFO each, as the simulator's channels: docs/model.md
// section 11); a recv before the compute op after it; a compute op before the send after
// it. rep maps a vertex to the vertex it is merged into.
void add_device_edges(const DeviceProgram& prog, std::size_t first, const std::vector<std::size_t>& rep, Graph& g) {
  std::optional<std::size_t> last_compute, pending_recv;
  std::map<int, std::size_t> last_send, last_recv;  // per communicator
  auto chain = [&](std::map<int, std::size_t>& last, int communicator, std::size_t v) {
    if (const auto it = last.find(communicator); it != last.end()) boost::add_edge(rep[it->second], rep[v], g);
    last[communicator] = v;
  };
  for (std::size_t i = 0; i < prog.entries.size(); ++i) {
    const std::size_t v = first + i;
    const ProgramEntry& e = prog.entries[i];
    switch (e.kind) {
      case K::Recv:
        chain(last_recv, e.communicator, v);
        pending_recv = v;
        break;
      case K::Send:
        chain(last_send, e.communicator, v);
        if (last_compute) boost::add_edge(rep[*last_compute], rep[v], g);
        break;
      default:
        if (last_compute) boost::add_edge(rep[*last_compute], rep[v], g);
        last_compute = v;
        if (pending_recv) boost::add_edge(rep[*pending_recv], rep[v], g);
        pending_recv.reset();
    }
  }
}

// Whether the combined dependency graph is acyclic. A matched send and recv complete
// together, so they share one vertex (the recv's is merged into the send's).
bool acyclic(const std::vector<DeviceProgram>& progs, const EntryIndex& index,
             const std::vector<std::pair<std::size_t, std::size_t>>& pairs) {
  std::vector<std::size_t> rep(index.size());
  for (std::size_t v = 0; v < rep.size(); ++v) rep[v] = v;
  for (const auto& [s, r] : pairs) rep[r] = s;
  Graph g(index.size());
  for (std::size_t d = 0; d < progs.size(); ++d) add_device_edges(progs[d], index.vertex(d, 0), rep, g);
  std::vector<Graph::vertex_descriptor> order;
  try {
    boost::topological_sort(g, std::back_inserter(order));
  } catch (const boost::not_a_dag&) {
    return false;
  }
  return true;
}

}  // namespace

std::vector<std::string> validate_programs(const std::vector<DeviceProgram>& progs) {
  const EntryIndex index(progs);
  std::vector<std::string> problems;
  const auto pairs = pair_sends(communicator_sides(progs, index), index, problems);
  if (!problems.empty()) return problems;
  if (!acyclic(progs, index, pairs))
    problems.push_back("the programs' combined dependency graph has a cycle: the plan would deadlock");
  return problems;
}

}  // namespace adagrouper::planner
