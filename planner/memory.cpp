// The planner's memory model: a per-stage bound on peak memory for a schedule.
//
// See planner.h and docs/model.md section 11. At any instant stage s is either waiting
// before op i or running op i. Both the micro-batches in flight and the messages
// consumed so far are then fixed by the order. A message from a neighbour can be waiting
// in the receive buffer only if its producing op can have ended, and an op on a
// neighbour stage that depends (transitively) on the end of op i cannot have. Along a
// pipeline every such path leaves stage s from op i or a later op through one of its
// own messages, so the first neighbour op that depends on op i is a suffix minimum over
// the consumers of the messages that ops i.. send. Counting the messages produced before
// that point and not yet consumed bounds the buffer at every instant of the interval;
// with a channel capacity Q it is also at most Q.
#include <algorithm>
#include <cstdint>
#include <limits>

#include "planner.h"

namespace adagrouper::planner {

using sim::Op;
using sim::Phase;

namespace {

struct Positions {
  // pos[s][2m + phase]: index of F(s,m) / B(s,m) in stage s's order.
  std::vector<std::vector<std::uint32_t>> pos;
  explicit Positions(const sim::Schedule& sch) : pos(sch.num_stages()) {
    for (int s = 0; s < sch.num_stages(); ++s) {
      const auto& order = sch.stages[s];
      pos[s].resize(order.size());
      for (std::size_t i = 0; i < order.size(); ++i)
        pos[s][2 * order[i].micro_batch + (order[i].phase == Phase::Backward)] = static_cast<std::uint32_t>(i);
    }
  }
  std::uint32_t at(int s, Phase ph, int m) const { return pos[s][2 * m + (ph == Phase::Backward)]; }
};

// prefix[i] = number of ops of phase `ph` among the first i ops of `order`.
std::vector<std::uint32_t> prefix_count(const std::vector<Op>& order, Phase ph) {
  std::vector<std::uint32_t> c(order.size() + 1, 0);
  for (std::size_t i = 0; i < order.size(); ++i) c[i + 1] = c[i] + (order[i].phase == ph);
  return c;
}

}  // namespace

std::vector<int> peak_inflight(const sim::Schedule& sch) {
  std::vector<int> peak(sch.num_stages(), 0);
  for (int s = 0; s < sch.num_stages(); ++s) {
    int cur = 0;
    for (const Op& op : sch.stages[s]) {
      if (op.phase == Phase::Forward) peak[s] = std::max(peak[s], ++cur);
      else --cur;
    }
  }
  return peak;
}

std::vector<double> memory_model(const std::vector<sim::StageParams>& stages, const sim::Schedule& sch,
                                 const sim::Network& net) {
  const int S = sch.num_stages();
  const Positions pos(sch);
  std::vector<std::vector<std::uint32_t>> fwd_done(S), bwd_done(S);
  for (int s = 0; s < S; ++s) {
    fwd_done[s] = prefix_count(sch.stages[s], Phase::Forward);
    bwd_done[s] = prefix_count(sch.stages[s], Phase::Backward);
  }

  std::vector<double> out(S);
  for (int s = 0; s < S; ++s) {
    const auto& order = sch.stages[s];
    const std::size_t n = order.size();
    const std::uint32_t none = std::numeric_limits<std::uint32_t>::max();
    // first_down[i]: first op of stage s-1 that depends on op i of s (or its order);
    // first_up[i]: the same on stage s+1.
    std::vector<std::uint32_t> first_down(n + 1, none), first_up(n + 1, none);
    for (std::size_t i = n; i-- > 0;) {
      first_down[i] = first_down[i + 1];
      first_up[i] = first_up[i + 1];
      const Op& op = order[i];
      if (op.phase == Phase::Backward && s > 0)
        first_down[i] = std::min(first_down[i], pos.at(s - 1, Phase::Backward, op.micro_batch));
      if (op.phase == Phase::Forward && s + 1 < S)
        first_up[i] = std::min(first_up[i], pos.at(s + 1, Phase::Forward, op.micro_batch));
    }
    const double act = stages[s].act;
    const double in_fwd_bytes = s > 0 ? stages[s - 1].out : 0.0;
    const double in_bwd_bytes = s + 1 < S ? stages[s + 1].gout : 0.0;
    const int cap_fwd = s > 0 ? net.channel(s - 1, s).capacity : 0;
    const int cap_bwd = s + 1 < S ? net.channel(s + 1, s).capacity : 0;
    auto capped = [](std::int64_t v, int cap) {
      v = std::max<std::int64_t>(v, 0);
      return cap > 0 ? std::min<std::int64_t>(v, cap) : v;
    };

    double peak = 0;
    int inflight = 0;
    for (std::size_t i = 0; i < n; ++i) {
      const Op& op = order[i];
      // Activations produced by s-1 that may have arrived, minus those consumed.
      std::int64_t waiting_f = 0, waiting_b = 0;
      if (s > 0) {
        const std::uint32_t lim = std::min<std::uint32_t>(first_down[i], static_cast<std::uint32_t>(sch.stages[s - 1].size()));
        waiting_f = static_cast<std::int64_t>(fwd_done[s - 1][lim]) - fwd_done[s][i];
      }
      if (s + 1 < S) {
        const std::uint32_t lim = std::min<std::uint32_t>(first_up[i], static_cast<std::uint32_t>(sch.stages[s + 1].size()));
        waiting_b = static_cast<std::int64_t>(bwd_done[s + 1][lim]) - bwd_done[s][i];
      }
      // Waiting before op i starts.
      const double gap = act * inflight + in_fwd_bytes * static_cast<double>(capped(waiting_f, cap_fwd)) +
                         in_bwd_bytes * static_cast<double>(capped(waiting_b, cap_bwd));
      // Running op i: F allocates its activation and consumes its input message.
      const bool fwd = op.phase == Phase::Forward;
      const bool consumes_f = fwd && s > 0;
      const bool consumes_b = !fwd && s + 1 < S;
      const double running = act * (inflight + (fwd ? 1 : 0)) +
                             in_fwd_bytes * static_cast<double>(capped(waiting_f - (consumes_f ? 1 : 0), cap_fwd)) +
                             in_bwd_bytes * static_cast<double>(capped(waiting_b - (consumes_b ? 1 : 0), cap_bwd));
      peak = std::max({peak, gap, running});
      inflight += fwd ? 1 : -1;
    }
    out[s] = stages[s].static_bytes + peak;
  }
  return out;
}

}  // namespace adagrouper::planner
