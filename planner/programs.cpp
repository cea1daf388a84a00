// Per-device programs of a plan, and their validation.
//
// Validation: send/recv pairing, per-communicator order, and an acyclic combined
// dependency graph.
#include <algorithm>
#include <map>
#include <optional>
#include <string>
#include <utility>

#include <boost/graph/adjacency_list.hpp>
#include <boost/graph/topological_sort.hpp>
#include <fmt/format.h>

#include "planner.h"

namespace adagrouper::planner {

using sim::Phase;

std::vector<DeviceProgram> device_programs(const sim::Schedule& sch, const std::vector<sim::StageParams>& stages) {
  const int S = sch.num_stages();
  std::vector<DeviceProgram> progs(S);
  for (int s = 0; s < S; ++s) {
    DeviceProgram& p = progs[s];
    p.stage = s;
    for (const sim::Op& op : sch.stages[s]) {
      const int m = op.micro_batch;
      using K = ProgramEntry::Kind;
      if (op.phase == Phase::Forward) {
        if (s > 0) p.entries.push_back({K::Recv, m, s - 1, stages[s - 1].out, 2 * m, 2 * (s - 1)});
        p.entries.push_back({K::Forward, m, -1, 0, 0, 0});
        if (s + 1 < S) p.entries.push_back({K::Send, m, s + 1, stages[s].out, 2 * m, 2 * s});
      } else {
        if (s + 1 < S) p.entries.push_back({K::Recv, m, s + 1, stages[s + 1].gout, 2 * m + 1, 2 * s + 1});
        p.entries.push_back({K::Backward, m, -1, 0, 0, 0});
        if (s > 0) p.entries.push_back({K::Send, m, s - 1, stages[s].gout, 2 * m + 1, 2 * (s - 1) + 1});
      }
    }
  }
  return progs;
}

namespace {

using K = ProgramEntry::Kind;

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
    const char* kind = e.kind == K::Send      ? "send"
                       : e.kind == K::Recv    ? "recv"
                       : e.kind == K::Forward ? "forward"
                                              : "backward";
    return fmt::format("device {} entry {} ({} micro-batch {}, communicator {}, tag {})", progs_[d].stage, i, kind,
                       e.micro_batch, e.communicator, e.tag);
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

// The edges of one device's program: program order on its compute, send and recv
// streams; a recv before the compute op after it; a compute op before the send after it.
// rep maps a vertex to the vertex it is merged into.
void add_device_edges(const DeviceProgram& prog, std::size_t first, const std::vector<std::size_t>& rep, Graph& g) {
  std::optional<std::size_t> last_compute, last_send, last_recv, pending_recv;
  for (std::size_t i = 0; i < prog.entries.size(); ++i) {
    const std::size_t v = first + i;
    auto chain = [&](std::optional<std::size_t>& last) {
      if (last) boost::add_edge(rep[*last], rep[v], g);
      last = v;
    };
    switch (prog.entries[i].kind) {
      case K::Recv:
        chain(last_recv);
        pending_recv = v;
        break;
      case K::Send:
        chain(last_send);
        if (last_compute) boost::add_edge(rep[*last_compute], rep[v], g);
        break;
      default:
        chain(last_compute);
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
