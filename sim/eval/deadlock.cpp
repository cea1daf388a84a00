// Static deadlock detection: the dependency graph of one iteration (ops, messages,
// order edges, channel FIFO edges, capacity edges) must be acyclic.
#include <algorithm>
#include <vector>

#include <boost/graph/adjacency_list.hpp>
#include <boost/graph/depth_first_search.hpp>
#include <fmt/format.h>

#include "../simulate.h"
#include "program.h"

namespace adagrouper::sim {

using eval::Program;
using eval::ProgramStage;
using eval::ProgramChannel;
using eval::build_program;
using eval::kLocal;
using eval::kNoChannel;
using eval::ProgramOp;

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
  Graph g(nops + p.producer.size());

  // Order edges, local dependencies, and message -> consuming op.
  std::vector<std::uint32_t> consumer(p.producer.size(), 0);
  for (int s = 0; s < S; ++s) {
    const ProgramStage& ps = p.stages[s];
    for (std::uint32_t i = ps.begin; i < ps.end; ++i) {
      if (i > ps.begin) boost::add_edge(i - 1, i, g);
      const std::int64_t msg = p.consumed_message(static_cast<std::uint32_t>(s), p.ops[i]);
      if (msg >= 0) {
        boost::add_edge(nops + static_cast<std::size_t>(msg), i, g);
        consumer[static_cast<std::size_t>(msg)] = i;
      } else if (ps.cls(p.classes, p.ops[i]).in == kLocal) {
        boost::add_edge(ps.begin + p.ops[i].dep, i, g);
      }
    }
  }
  // Messages: produced by an op, FIFO behind the previous message, capacity.
  for (const ProgramChannel& ch : p.channels) {
    for (std::uint32_t n = 0; n < ch.count; ++n) {
      const std::size_t v = nops + ch.first + n;
      boost::add_edge(p.stages[ch.sender].begin + p.producer[ch.first + n], v, g);
      if (n > 0) boost::add_edge(v - 1, v, g);
      const std::uint32_t cap = ch.capacity;
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
    const bool model_stages = !sc.schedule.placement.empty();
    auto op_text = [&](const Op& op) { return model_stages ? action_name(op) : op_name(op); };
    auto name = [&](Vertex v) -> std::string {
      if (v < nops) {
        const auto it = std::find_if(p.stages.begin(), p.stages.end(),
                                     [&](const ProgramStage& st) { return v >= st.begin && v < st.w_end; });
        const auto s = static_cast<std::uint32_t>(it - p.stages.begin());
        return fmt::format("stage {} {}", s, op_text(p.op_of(s, p.ops[v])));
      }
      const std::size_t m = v - nops;
      const auto it = std::find_if(p.channels.begin(), p.channels.end(), [&](const ProgramChannel& c) {
        return m >= c.first && m < c.first + c.count;
      });
      const Op producer = p.op_of(it->sender, p.ops[p.stages[it->sender].begin + p.producer[m]]);
      return fmt::format("{} of micro-batch {} on channel {} -> {}",
                         producer.phase == Phase::Forward ? "activation" : "gradient", producer.micro_batch,
                         it->sender, it->receiver);
    };
    for (Vertex v : path) cycle.push_back(name(v));
    cycle.push_back(name(path.front()));
  }
  return cycle;
}

}  // namespace adagrouper::sim
