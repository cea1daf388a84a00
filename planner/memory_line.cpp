// The planner's memory model along a line of stages (one model stage per stage): one pass
// per stage.
//
// Stage d exchanges messages with d - 1 and d + 1 only, so every chain from op i of d to a
// neighbour p leaves d through a message that op i or a later op sends to p: the first op
// of p that depends on op i is a suffix minimum over the consumers of those messages, and
// a message from p can be waiting during op i exactly when p produces it before that op.
// The sums are the general analysis's (memory.cpp), term for term in the same order, so
// both give the same numbers to the last bit.
#include <algorithm>
#include <array>
#include <cstdint>
#include <limits>

#include "memory_internal.h"

namespace adagrouper::planner::memory_detail {

using sim::Op;
using sim::Phase;

namespace {

constexpr std::uint32_t kNone = std::numeric_limits<std::uint32_t>::max();

bool sends_backward(Phase ph) { return ph == Phase::Backward || ph == Phase::BackwardInput; }

// Where a stage's ops are: the position of each micro-batch's F and of its B or I, and
// how many of each the first i ops are.
struct StageIndex {
  std::vector<std::uint32_t> fwd_pos, bwd_pos;        // per micro-batch
  std::vector<std::uint32_t> fwd_before, bwd_before;  // [i], i = 0..n

  void build(const std::vector<Op>& order, int M) {
    fwd_pos.assign(static_cast<std::size_t>(M), kNone);
    bwd_pos.assign(static_cast<std::size_t>(M), kNone);
    fwd_before.resize(order.size() + 1);
    bwd_before.resize(order.size() + 1);
    fwd_before[0] = bwd_before[0] = 0;
    for (std::size_t i = 0; i < order.size(); ++i) {
      const Op& op = order[i];
      const bool f = op.phase == Phase::Forward, b = sends_backward(op.phase);
      if (f) fwd_pos[op.micro_batch] = static_cast<std::uint32_t>(i);
      if (b) bwd_pos[op.micro_batch] = static_cast<std::uint32_t>(i);
      fwd_before[i + 1] = fwd_before[i] + f;
      bwd_before[i + 1] = bwd_before[i] + b;
    }
  }
  std::uint32_t size() const { return static_cast<std::uint32_t>(fwd_before.size() - 1); }
};

// For each i = 0..n: the messages from the stage before (`prev`, F outputs) and from the
// stage after (`next`, B or I outputs) whose producer can have ended before op i ends.
void count_arrivable(const std::vector<Op>& order, const StageIndex* prev, const StageIndex* next,
                     std::vector<std::int64_t>& from_prev, std::vector<std::int64_t>& from_next) {
  const std::size_t n = order.size();
  from_prev.resize(n + 1);
  from_next.resize(n + 1);
  if (!prev) std::fill(from_prev.begin(), from_prev.end(), 0);
  if (!next) std::fill(from_next.begin(), from_next.end(), 0);
  std::uint32_t down = kNone, up = kNone;  // the first op of prev, of next, depending on op i
  for (std::size_t i = n + 1; i-- > 0;) {
    if (i < n) {
      const Op& op = order[i];
      if (prev && sends_backward(op.phase)) down = std::min(down, prev->bwd_pos[op.micro_batch]);
      if (next && op.phase == Phase::Forward) up = std::min(up, next->fwd_pos[op.micro_batch]);
    }
    if (prev) from_prev[i] = prev->fwd_before[std::min(down, prev->size())];
    if (next) from_next[i] = next->bwd_before[std::min(up, next->size())];
  }
}

// One receive slot of the stage: its message bytes, capacity, and arrivable counts. A
// stage without the slot has zero bytes and counts, so its term adds +0.0 and leaves
// every sum as the general analysis has it.
struct LineSlot {
  double bytes = 0;
  std::int64_t capacity = kUnlimited;
  const std::int64_t* arrivable = nullptr;
};

LineSlot line_slot(bool present, double bytes, const sim::Network& net, int from, int to,
                   const std::vector<std::int64_t>& arrivable) {
  LineSlot slot;
  slot.arrivable = arrivable.data();
  if (!present) return slot;
  slot.bytes = bytes;
  if (const int cap = net.channel(from, to).capacity; cap > 0) slot.capacity = cap;
  return slot;
}

// The bound of stage d: the largest value over the intervals before each op and after
// the last, and while each op runs (as memory.cpp's stage_bound, for one model stage).
double line_stage_bound(const sim::StageParams& p, const std::vector<Op>& order, const PendingCaps& caps,
                        const LineSlot& fwd, const LineSlot& bwd) {
  std::int64_t act = 0, wgrad = 0, inputs = 0, used_f = 0, used_b = 0;
  // Activations, weight gradients (pending W under dynamic fill) and waiting messages,
  // summed in the general analysis's order.
  auto held = [&](std::int64_t acts, std::int64_t pending, std::int64_t waiting_f, std::int64_t waiting_b) {
    double sum = 0;
    sum += p.act * static_cast<double>(acts);
    sum += p.wgrad * static_cast<double>(caps.dynamic ? std::min(pending, inputs) : wgrad);
    sum += fwd.bytes * static_cast<double>(capped(waiting_f, fwd.capacity));
    sum += bwd.bytes * static_cast<double>(capped(waiting_b, bwd.capacity));
    return sum;
  };
  double peak = 0;
  for (std::size_t i = 0;; ++i) {
    const std::int64_t waiting_f = fwd.arrivable[i] - used_f, waiting_b = bwd.arrivable[i] - used_b;
    peak = std::max(peak, held(act, caps.gap, waiting_f, waiting_b));
    if (i == order.size()) break;
    const Phase ph = order[i].phase;
    const std::int64_t f = ph == Phase::Forward, b = sends_backward(ph);
    peak = std::max(peak, held(act + f, caps.running, waiting_f - f, waiting_b - b));
    act += f - b;
    wgrad += (ph == Phase::BackwardInput) - (ph == Phase::BackwardWeight);
    inputs += ph == Phase::BackwardInput;
    used_f += f;
    used_b += b;
  }
  return p.static_bytes + peak;
}

}  // namespace

std::vector<double> line_memory_model(const std::vector<sim::StageParams>& params, const sim::Schedule& sch,
                                      const sim::Network& net) {
  const int S = sch.num_stages();
  int M = 0;
  for (const auto& order : sch.stages)
    for (const Op& op : order) M = std::max(M, op.micro_batch + 1);
  const PendingCaps caps(sch.spec);
  // The indexes of stages d - 1, d and d + 1, rolled along.
  std::array<StageIndex, 3> index;
  if (S > 0) index[2].build(sch.stages[0], M);
  std::vector<std::int64_t> from_prev, from_next;
  std::vector<double> out(S);
  for (int d = 0; d < S; ++d) {
    std::rotate(index.begin(), index.begin() + 1, index.end());
    if (d + 1 < S) index[2].build(sch.stages[d + 1], M);
    const StageIndex* prev = d > 0 ? &index[0] : nullptr;
    const StageIndex* next = d + 1 < S ? &index[2] : nullptr;
    count_arrivable(sch.stages[d], prev, next, from_prev, from_next);
    const LineSlot fwd = line_slot(prev != nullptr, d > 0 ? params[d - 1].out : 0, net, d - 1, d, from_prev);
    const LineSlot bwd = line_slot(next != nullptr, d + 1 < S ? params[d + 1].gout : 0, net, d + 1, d, from_next);
    out[d] = line_stage_bound(params[d], sch.stages[d], caps, fwd, bwd);
  }
  return out;
}

}  // namespace adagrouper::planner::memory_detail
