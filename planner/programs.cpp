// Per-device programs of a plan, and their validation (send/recv pairing, per-
// communicator order, and an acyclic combined dependency graph).
#include <algorithm>
#include <map>
#include <optional>
#include <tuple>

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

std::vector<std::string> validate_programs(const std::vector<DeviceProgram>& progs) {
  using K = ProgramEntry::Kind;
  std::vector<std::string> problems;
  // Vertex numbering: entries of all devices in order.
  std::vector<std::size_t> base(progs.size() + 1, 0);
  for (std::size_t d = 0; d < progs.size(); ++d) base[d + 1] = base[d] + progs[d].entries.size();

  // Per communicator: the sends and recvs in issue order.
  struct Side {
    std::vector<std::size_t> sends, recvs;
  };
  std::map<int, Side> comms;
  for (std::size_t d = 0; d < progs.size(); ++d) {
    for (std::size_t i = 0; i < progs[d].entries.size(); ++i) {
      const ProgramEntry& e = progs[d].entries[i];
      if (e.kind == K::Send) comms[e.communicator].sends.push_back(base[d] + i);
      if (e.kind == K::Recv) comms[e.communicator].recvs.push_back(base[d] + i);
    }
  }
  auto locate = [&](std::size_t v) {
    const std::size_t d = static_cast<std::size_t>(std::upper_bound(base.begin(), base.end(), v) - base.begin()) - 1;
    return std::pair{d, v - base[d]};
  };
  auto entry = [&](std::size_t v) -> const ProgramEntry& {
    const auto [d, i] = locate(v);
    return progs[d].entries[i];
  };
  auto name = [&](std::size_t v) {
    const auto [d, i] = locate(v);
    const ProgramEntry& e = progs[d].entries[i];
    const char* kind = e.kind == K::Send ? "send" : e.kind == K::Recv ? "recv" : e.kind == K::Forward ? "forward" : "backward";
    return fmt::format("device {} entry {} ({} micro-batch {}, communicator {}, tag {})", progs[d].stage, i, kind,
                       e.micro_batch, e.communicator, e.tag);
  };

  // Pairing: the n-th send of a communicator matches its n-th recv.
  std::vector<std::pair<std::size_t, std::size_t>> pairs;
  for (const auto& [comm, side] : comms) {
    if (side.sends.size() != side.recvs.size())
      problems.push_back(fmt::format("communicator {}: {} sends but {} recvs", comm, side.sends.size(), side.recvs.size()));
    const std::size_t n = std::min(side.sends.size(), side.recvs.size());
    for (std::size_t j = 0; j < n; ++j) {
      const ProgramEntry& s = entry(side.sends[j]);
      const ProgramEntry& r = entry(side.recvs[j]);
      const int sender = progs[locate(side.sends[j]).first].stage;
      const int receiver = progs[locate(side.recvs[j]).first].stage;
      if (s.tag != r.tag || s.bytes != r.bytes || s.peer != receiver || r.peer != sender)
        problems.push_back(fmt::format("communicator {}: send #{} {} does not match recv #{} {} (order, tag, bytes or peers differ)",
                                       comm, j, name(side.sends[j]), j, name(side.recvs[j])));
      else
        pairs.emplace_back(side.sends[j], side.recvs[j]);
    }
  }
  if (!problems.empty()) return problems;

  // Dependency graph: a matched send and recv complete together, so they share one
  // vertex (the recv's is merged into the send's). Edges: program order on each
  // device's compute, send and recv streams; recv before the compute op after it,
  // compute op before the send after it.
  std::vector<std::size_t> rep(base.back());
  for (std::size_t v = 0; v < rep.size(); ++v) rep[v] = v;
  for (const auto& [s, r] : pairs) rep[r] = s;
  using Graph = boost::adjacency_list<boost::vecS, boost::vecS, boost::directedS>;
  Graph g(base.back());
  for (std::size_t d = 0; d < progs.size(); ++d) {
    std::optional<std::size_t> last_compute, last_send, last_recv, pending_recv;
    for (std::size_t i = 0; i < progs[d].entries.size(); ++i) {
      const std::size_t v = base[d] + i;
      const ProgramEntry& e = progs[d].entries[i];
      auto chain = [&](std::optional<std::size_t>& last) {
        if (last) boost::add_edge(rep[*last], rep[v], g);
        last = v;
      };
      switch (e.kind) {
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
  std::vector<Graph::vertex_descriptor> order;
  try {
    boost::topological_sort(g, std::back_inserter(order));
  } catch (const boost::not_a_dag&) {
    problems.push_back("the programs' combined dependency graph has a cycle: the plan would deadlock");
  }
  return problems;
}

}  // namespace adagrouper::planner
