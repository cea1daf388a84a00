// Static deadlock detection: the dependency graph of one iteration (ops, messages,
// order edges, channel FIFO edges, capacity edges) must be acyclic.
#include <algorithm>
#include <vector>

#include <boost/graph/adjacency_list.hpp>
#include <boost/graph/depth_first_search.hpp>
#include <fmt/format.h>

#include "engine.h"
#include "program.h"

namespace adagrouper::sim {

namespace {

using Graph = boost::adjacency_list<boost::vecS, boost::vecS, boost::directedS>;
using Vertex = boost::graph_traits<Graph>::vertex_descriptor;

struct CycleFound {
  Vertex from, to;  // the back edge from -> to closes the cycle
};

class CycleVisitor : public boost::default_dfs_visitor {
 public:
  explicit CycleVisitor(std::vector<Vertex>& pred) : pred_(&pred) {}
  void tree_edge(boost::graph_traits<Graph>::edge_descriptor e, const Graph& g) {
    (*pred_)[boost::target(e, g)] = boost::source(e, g);
  }
  void back_edge(boost::graph_traits<Graph>::edge_descriptor e, const Graph& g) {
    throw CycleFound{boost::source(e, g), boost::target(e, g)};
  }

 private:
  std::vector<Vertex>* pred_;
};

}  // namespace

std::vector<std::string> find_dependency_cycle(const Scenario& sc) {
  const Program p = build_program(sc);
  const std::size_t nops = p.ops.size();
  const int S = sc.num_stages();
  Graph g(nops + p.messages.size());

  // Order edges and local dependencies.
  for (int s = 0; s < S; ++s) {
    for (std::uint32_t i = p.stage_begin[s]; i < p.stage_begin[s + 1]; ++i) {
      if (i > p.stage_begin[s]) boost::add_edge(i - 1, i, g);
      if (p.ops[i].dep == Dep::Local) boost::add_edge(p.stage_begin[s] + p.ops[i].dep_index, i, g);
      if (p.consumes[i] >= 0) boost::add_edge(nops + static_cast<std::size_t>(p.consumes[i]), i, g);
    }
  }
  // Messages: produced by an op, FIFO behind the previous message, capacity.
  std::vector<std::uint32_t> consumer(p.messages.size(), 0);
  for (std::size_t i = 0; i < nops; ++i)
    if (p.consumes[i] >= 0) consumer[static_cast<std::size_t>(p.consumes[i])] = static_cast<std::uint32_t>(i);
  for (const ProgramChannel& ch : p.channels) {
    for (std::uint32_t n = 0; n < ch.count; ++n) {
      const std::size_t v = nops + ch.first + n;
      boost::add_edge(p.stage_begin[ch.sender] + p.messages[ch.first + n].producer_index, v, g);
      if (n > 0) boost::add_edge(v - 1, v, g);
      const auto cap = static_cast<std::uint32_t>(ch.spec->capacity);
      if (cap > 0 && n >= cap) boost::add_edge(consumer[ch.first + n - cap], v, g);
    }
  }

  std::vector<Vertex> pred(boost::num_vertices(g));
  for (std::size_t i = 0; i < pred.size(); ++i) pred[i] = i;
  std::vector<std::string> cycle;
  try {
    boost::depth_first_search(g, boost::visitor(CycleVisitor(pred)));
  } catch (const CycleFound& found) {
    // Walk the tree back from `from` to `to`, then close the loop.
    std::vector<Vertex> path{found.from};
    for (Vertex v = found.from; v != found.to;) {
      v = pred[v];
      path.push_back(v);
    }
    std::reverse(path.begin(), path.end());
    auto name = [&](Vertex v) -> std::string {
      if (v < nops) {
        const int s = static_cast<int>(std::upper_bound(p.stage_begin.begin(), p.stage_begin.end(), v) -
                                       p.stage_begin.begin()) - 1;
        return fmt::format("stage {} {}", s, op_name({p.ops[v].phase, p.ops[v].micro_batch}));
      }
      const std::size_t m = v - nops;
      const auto it = std::find_if(p.channels.begin(), p.channels.end(), [&](const ProgramChannel& c) {
        return m >= c.first && m < c.first + c.count;
      });
      return fmt::format("{} of micro-batch {} on channel {} -> {}",
                         it->receiver > it->sender ? "activation" : "gradient", p.messages[m].micro_batch,
                         it->sender, it->receiver);
    };
    for (Vertex v : path) cycle.push_back(name(v));
    cycle.push_back(name(path.front()));
  }
  return cycle;
}

}  // namespace adagrouper::sim
