// The builders of PyTorch's schedules (schedule_torch.h), written from the algorithms of
// torch/distributed/pipelining/schedules.py, and the checks PyTorch makes before it runs
// an order.
#include "schedule_torch.h"

#include <algorithm>
#include <cstdint>
#include <deque>
#include <optional>
#include <string_view>
#include <utility>

#include <fmt/format.h>

#include "error.h"

namespace adagrouper::sim {

namespace {

constexpr Phase kF = Phase::Forward;
constexpr Phase kB = Phase::Backward;
constexpr Phase kI = Phase::BackwardInput;
constexpr Phase kW = Phase::BackwardWeight;

// One non-idle step of a rank's pipeline_order: an op, or an OVERLAP_F_B pair, whose
// forward `op` runs first and backward `then` second.
struct Action {
  Op op;
  std::optional<Op> then;
};
using RankActions = std::vector<Action>;

[[noreturn]] void refuse(std::string_view option, std::string_view family, const std::string& why) {
  throw InputError(fmt::format("{}: {} {}", option, family, why));
}

void check_sizes(std::string_view family, int D, int v, int M) {
  if (D < 1) refuse("--stages", family, fmt::format("needs at least one stage, got {}", D));
  if (v < 1) refuse("--virtual-stages", family, fmt::format("needs at least one model stage per stage, got {}", v));
  if (M < 1) refuse("--micro-batches", family, fmt::format("needs at least one micro-batch, got {}", M));
}

void check_two_per_rank(std::string_view family, int v) {
  if (v != 2) refuse("--virtual-stages", family, fmt::format("runs exactly 2 model stages per stage, got {}", v));
}

// --- the checks of PyTorch's lowering --------------------------------------------------

// Why PyTorch's _validate_schedule rejects the orders (a (model stage, micro-batch) whose
// backward comes before its forward, W before I, a count that is not M), or nothing.
std::optional<std::string> malformed(const std::vector<RankActions>& ranks, int J, int M) {
  std::vector<std::uint8_t> seen(static_cast<std::size_t>(J) * M);  // bit 0: F, bit 1: I
  std::vector<int> forwards(J), backwards(J), inputs(J), weights(J);
  for (std::size_t r = 0; r < ranks.size(); ++r)
    for (const Action& a : ranks[r])
      for (const Op* op : {&a.op, a.then ? &*a.then : nullptr}) {
        if (!op) continue;
        auto& s = seen[static_cast<std::size_t>(op->model_stage) * M + op->micro_batch];
        const bool needs_f = op->phase != kF && op->phase != kW, needs_i = op->phase == kW;
        if ((needs_f && !(s & 1)) || (needs_i && !(s & 2)))
          return fmt::format("rank {} lists {} before its {}", r, action_name(*op), needs_f ? "forward" : "I");
        s |= op->phase == kF ? 1 : (op->phase == kI ? 2 : 0);
        auto& count = op->phase == kF ? forwards : op->phase == kB ? backwards : op->phase == kI ? inputs : weights;
        ++count[op->model_stage];
      }
  for (int j = 0; j < J; ++j)
    if (forwards[j] != M || inputs[j] != weights[j] || backwards[j] + inputs[j] != M)
      return fmt::format("model stage {} gets {} F, {} B, {} I and {} W ops for {} micro-batches", j, forwards[j],
                         backwards[j], inputs[j], weights[j], M);
  return std::nullopt;
}

// Why PyTorch's _add_send_recv finds no order of sends and receives (the ranks wait on
// each other in a circle), or nothing. Like it, passes over the ranks in order, each
// running its next action when every op of it has its input: F(j,m) the output of
// F(j-1,m), B or I(j,m) the gradient from the backward of (j+1,m); W ops need nothing.
std::optional<std::string> stuck(const std::vector<RankActions>& ranks, int J, int M) {
  std::vector<std::uint8_t> done(static_cast<std::size_t>(J) * M);  // bit 0: F, bit 1: B or I
  auto at = [&](int j, int m) -> std::uint8_t& { return done[static_cast<std::size_t>(j) * M + m]; };
  auto ready = [&](const Op& op) {
    if (op.phase == kF) return op.model_stage == 0 || (at(op.model_stage - 1, op.micro_batch) & 1);
    if (op.phase == kW) return true;
    return op.model_stage == J - 1 || (at(op.model_stage + 1, op.micro_batch) & 2);
  };
  auto mark = [&](const Op& op) { at(op.model_stage, op.micro_batch) |= op.phase == kF ? 1 : op.phase == kW ? 0 : 2; };
  std::vector<std::size_t> next(ranks.size());
  for (bool left = true; left;) {
    left = false;
    bool progress = false;
    for (std::size_t r = 0; r < ranks.size(); ++r) {
      if (next[r] == ranks[r].size()) continue;
      left = true;
      const Action& a = ranks[r][next[r]];
      if (!ready(a.op) || (a.then && !ready(*a.then))) continue;
      mark(a.op);
      if (a.then) mark(*a.then);
      ++next[r];
      progress = true;
    }
    if (left && !progress) {
      std::string waiting;
      for (std::size_t r = 0; r < ranks.size(); ++r)
        if (next[r] < ranks[r].size())
          waiting += fmt::format("{}rank {} at {}", waiting.empty() ? "" : ", ", r, action_name(ranks[r][next[r]].op));
      return "the orders wait on each other (" + waiting + ")";
    }
  }
  return std::nullopt;
}

// PyTorch's checks, then the orders with idle steps dropped and pairs run in turn.
Schedule finish(std::string_view family, const std::vector<RankActions>& ranks, int v, int M) {
  const int D = static_cast<int>(ranks.size());
  auto why = malformed(ranks, D * v, M);
  if (!why) why = stuck(ranks, D * v, M);
  if (why)
    refuse("--micro-batches", family, fmt::format("with D = {}, v = {}, M = {}: PyTorch refuses: {}", D, v, M, *why));
  Schedule sch;
  sch.k = 1;
  sch.stages.resize(D);
  for (int d = 0; d < D; ++d)
    for (const Action& a : ranks[d]) {
      sch.stages[d].push_back(a.op);
      if (a.then) sch.stages[d].push_back(*a.then);
    }
  return sch;
}

// --- interleaved 1F1B and zero bubble -------------------------------------------------

struct Interleaved {
  int D, v, M;
  int per_round;     // micro-batches per round
  bool zero_bubble;  // I and W ops (else B)
};

// One rank's order (PyTorch's _get_1f1b_rank_ops): a warm-up of forwards, then one
// forward and one backward per step, then the remaining backwards; the model stage of the
// step-th forward cycles through the rank's model stages every round, the backwards the
// other way round. With zero bubble rank d lists the W of each backward, oldest first,
// from its (d+1)-th steady step on, and the rest at the end.
RankActions interleaved_rank(const Interleaved& p, int rank) {
  const int ops = p.v * p.M;
  const int hop = p.zero_bubble ? 1 : 2;
  const int warmup = std::min((p.v - 1) * p.per_round + hop * (p.D - 1 - rank), ops);
  auto forward_stage = [&](int step) { return step / p.per_round % p.v * p.D + rank; };
  auto backward_stage = [&](int step) { return (p.v - 1 - (step - warmup) / p.per_round % p.v) * p.D + rank; };
  std::vector<int> next_f(p.D * p.v), next_b(p.D * p.v), next_w(p.D * p.v);
  RankActions out;
  auto emit = [&](Phase ph, int j, std::vector<int>& next) { out.push_back({{ph, next[j]++, j}, std::nullopt}); };
  std::vector<int> backward_steps;
  std::size_t weights = 0;
  auto weight = [&] { emit(kW, backward_stage(backward_steps[weights++]), next_w); };
  for (int step = 0; step < ops + warmup; ++step) {
    if (step < ops) emit(kF, forward_stage(step), next_f);
    if (step < warmup) continue;
    emit(p.zero_bubble ? kI : kB, backward_stage(step), next_b);
    backward_steps.push_back(step);
    if (p.zero_bubble && step - warmup >= rank) weight();
  }
  while (p.zero_bubble && weights < backward_steps.size()) weight();
  return out;
}

Schedule interleaved(std::string_view family, const ScheduleSpec& spec, int D, int M, bool zero_bubble) {
  const int v = spec.virtual_stages;
  check_sizes(family, D, v, M);
  const int rounds = std::max(1, M / D);
  if (M % rounds != 0)
    refuse("--micro-batches", family,
           fmt::format("runs the micro-batches in rounds of max(1, floor(M / D)) = {} (D = {}), so M must be a "
                       "multiple of {}, got {}",
                       rounds, D, rounds, M));
  const Interleaved p{D, v, M, M / rounds, zero_bubble};
  std::vector<RankActions> ranks;
  for (int d = 0; d < D; ++d) ranks.push_back(interleaved_rank(p, d));
  return finish(family, ranks, v, M);
}

// --- looped BFS -------------------------------------------------------------------------

RankActions looped_bfs_rank(int D, int v, int M, int rank) {
  RankActions out;
  for (int l = 0; l < v; ++l)
    for (int m = 0; m < M; ++m) out.push_back({{kF, m, l * D + rank}, std::nullopt});
  for (int l = v - 1; l >= 0; --l)
    for (int m = M - 1; m >= 0; --m) out.push_back({{kB, m, l * D + rank}, std::nullopt});
  return out;
}

// --- ZB-V ------------------------------------------------------------------------------

// One rank's order: chunk 0 is model stage `rank`, chunk 1 model stage 2D - 1 - rank. It
// is built for max(2D - 1, M) micro-batches and the ops of micro-batches >= M are dropped.
RankActions zbv_rank(int D, int M, int rank) {
  const int n = std::max(2 * D - 1, M);
  const int s0 = rank, s1 = 2 * D - 1 - rank;
  int f0 = 0, f1 = 0, b0 = 0, b1 = 0;
  RankActions out;
  auto add = [&](Phase ph, int j, int m) {
    if (m < M) out.push_back({{ph, m, j}, std::nullopt});
  };
  auto f_i_w = [&](int s, int& f, int& b) {  // F of chunk s, then I and W of its oldest
    add(kF, s, f++);
    add(kI, s, b);
    add(kW, s, b++);
  };
  for (int i = 0; i < 2 * (D - rank) - 1; ++i) add(kF, s0, f0++);
  for (int i = 0; i < rank; ++i) {
    add(kF, s1, f1++);
    add(kF, s0, f0++);
  }
  for (int i = 0; i < D - rank; ++i) f_i_w(s1, f1, b1);
  while (f1 < f0 || f0 < n) {
    if (f0 < n) add(kF, s0, f0++);
    add(kI, s0, b0);
    add(kW, s0, b0++);
    f_i_w(s1, f1, b1);
  }
  int w0 = b0, w1 = b1;
  for (int i = 0; i < rank; ++i) {
    add(kI, s0, b0++);
    add(kI, s1, b1++);
  }
  for (int i = 0; i < D - rank; ++i) {
    add(kI, s0, b0++);
    add(kW, s0, w0++);
  }
  while (w1 < b1) add(kW, s1, w1++);
  while (w0 < b0) add(kW, s0, w0++);
  return out;
}

// --- DualPipeV -------------------------------------------------------------------------

// The order of one rank as it grows: chunk c (0 or 1) is model stage chunk[c]. A B or I
// takes the chunk's next backward micro-batch; each I queues its W, and weight() lists
// the oldest queued W, if any.
class DualPipeVRank {
 public:
  DualPipeVRank(int D, int rank) : chunk_{rank, 2 * D - 1 - rank} {}

  void forward(int c) { out_.push_back({{kF, next_f_[c]++, chunk_[c]}, std::nullopt}); }
  void backward(int c, bool split) {
    const int m = next_b_[c]++;
    out_.push_back({{split ? kI : kB, m, chunk_[c]}, std::nullopt});
    if (split) pending_w_.emplace_back(chunk_[c], m);
  }
  void weight() {
    if (pending_w_.empty()) return;
    const auto [j, m] = pending_w_.front();
    pending_w_.pop_front();
    out_.push_back({{kW, m, j}, std::nullopt});
  }
  // (forward of chunk f; B of chunk b)OVERLAP_F_B.
  void overlap(int f, int b) { out_.push_back({{kF, next_f_[f]++, chunk_[f]}, Op{kB, next_b_[b]++, chunk_[b]}}); }
  RankActions take() { return std::move(out_); }

 private:
  int chunk_[2];
  int next_f_[2] = {0, 0}, next_b_[2] = {0, 0};
  std::deque<std::pair<int, int>> pending_w_;  // (model stage, micro-batch)
  RankActions out_;
};

// DualPipeV's eight steps for one rank.
RankActions dualpipev_rank(int D, int M, int r) {
  DualPipeVRank o(D, r);
  for (int i = 0; i < 2 * (D - r - 1); ++i) o.forward(0);
  for (int i = 0; i <= r; ++i) {
    o.forward(0);
    o.forward(1);
  }
  for (int i = 0; i < D - r - 1; ++i) {
    o.backward(1, true);
    o.weight();
    o.forward(1);
  }
  for (int i = 0; i < M - 2 * D + r + 1; ++i) {
    if (i == 0 && r == D - 1) {  // the last rank does not overlap its first pair
      o.forward(0);
      o.backward(1, false);
    } else {
      o.overlap(0, 1);
    }
    o.overlap(1, 0);
  }
  for (int i = 0; i < D - r - 1; ++i) {
    o.backward(1, false);
    o.overlap(1, 0);
  }
  bool split = false;  // from the middle of this step on, backwards are I (+ W later)
  for (int i = 0; i <= r; ++i) {
    if (i == (r + 1) / 2 && r % 2 == 1) split = true;
    o.backward(1, split);
    if (i == (r + 1) / 2 && r % 2 == 0) split = true;
    o.backward(0, split);
  }
  for (int i = 0; i < D - r - 1; ++i) {
    o.weight();
    o.backward(0, split);
  }
  for (int i = 0; i <= r; ++i) o.weight();
  return o.take();
}

}  // namespace

Schedule build_interleaved_1f1b(const ScheduleSpec& spec, int D, int M) {
  return interleaved("interleaved-1f1b", spec, D, M, false);
}

Schedule build_interleaved_zb(const ScheduleSpec& spec, int D, int M) {
  return interleaved("interleaved-zb", spec, D, M, true);
}

Schedule build_looped_bfs(const ScheduleSpec& spec, int D, int M) {
  const int v = spec.virtual_stages;
  check_sizes("looped-bfs", D, v, M);
  std::vector<RankActions> ranks;
  for (int d = 0; d < D; ++d) ranks.push_back(looped_bfs_rank(D, v, M, d));
  return finish("looped-bfs", ranks, v, M);
}

Schedule build_zbv(const ScheduleSpec& spec, int D, int M) {
  check_sizes("zbv", D, spec.virtual_stages, M);
  check_two_per_rank("zbv", spec.virtual_stages);
  std::vector<RankActions> ranks;
  for (int d = 0; d < D; ++d) ranks.push_back(zbv_rank(D, M, d));
  return finish("zbv", ranks, 2, M);
}

Schedule build_dualpipev(const ScheduleSpec& spec, int D, int M) {
  check_sizes("dualpipev", D, spec.virtual_stages, M);
  check_two_per_rank("dualpipev", spec.virtual_stages);
  if (M < 2 * D)
    refuse("--micro-batches", "dualpipev",
           fmt::format("needs at least as many micro-batches as model stages (2D = {}), got M = {}", 2 * D, M));
  std::vector<RankActions> ranks;
  for (int d = 0; d < D; ++d) ranks.push_back(dualpipev_rank(D, M, d));
  return finish("dualpipev", ranks, 2, M);
}

}  // namespace adagrouper::sim
