// The replay's records as results (calib/replay.h): the measured SimResult, checks, stage trace.
#include <algorithm>
#include <limits>
#include <numeric>

#include <fmt/format.h>

#include "replay.h"

namespace adagrouper::calib {

namespace {

// The measured iterations of a run, on the time axis of the result: the first measured
// iteration (which starts at t0 on the aligned clock) starts at m.start_time_s.
struct MeasuredRun {
  const ReplayPlan& plan;
  const std::vector<IndexedProgram>& indexed;
  const Measurements& m;
  double t0;

  double at(double t) const { return t - t0 + m.start_time_s; }
  int first() const { return m.warmup; }
  int end() const { return m.warmup + m.iterations; }
  const IndexedProgram& program(int s) const { return indexed[static_cast<std::size_t>(s)]; }
  const RankRecord& record(int s) const { return m.ranks[static_cast<std::size_t>(s)]; }
  // When compute op c of stage s started in iteration i.
  double op_start(int s, int i, std::size_t c) const {
    return record(s).op_start[static_cast<std::size_t>(i) * program(s).compute.size() + c];
  }
};

// What was run and the iteration times, as simulate reports them.
sim::SimResult result_of(const ReplayPlan& plan, const Measurements& m) {
  sim::SimResult r;
  r.pipeline = plan.pipeline;
  r.spec = plan.spec;
  r.k = plan.k;
  r.micro_batch_size = plan.micro_batch_size;
  r.micro_batches = plan.micro_batches;
  r.global_batch_size = plan.global_batch_size;
  r.num_stages = plan.stages;
  r.model_stages = plan.model_stages();
  r.virtual_stages = plan.spec.virtual_stages;
  r.iterations = m.iterations;
  r.start_time_s = m.start_time_s;
  r.memory_limit_bytes = plan.memory_limit_bytes;
  for (int i = m.warmup; i < m.warmup + m.iterations; ++i) {
    const double t = m.boundaries[static_cast<std::size_t>(i + 1)] - m.boundaries[static_cast<std::size_t>(i)];
    r.iteration_times_s.push_back(t);
    r.total_time_s += t;
  }
  return r;
}

// A stage's counts as the simulator keeps them (docs/model.md §5, §14), in its order: per
// model stage the stage runs, its activations and the part W still needs; per model
// stage whose input comes from another stage, the term its waiting activation and
// gradient messages count in; then the counts that hold no memory: micro-batches in
// flight, and the messages waiting on each channel into the stage.
struct StageLayout {
  sim::StageCounts counts;
  std::vector<int> local;                        // per model stage: its index here, -1 elsewhere
  std::vector<std::uint32_t> slot_f, slot_b;     // per model stage here: its input's term
  std::uint32_t inflight = 0;
  std::vector<std::uint32_t> depth;              // per plan channel into this stage: its count

  std::uint32_t act(int j) const { return 2 * static_cast<std::uint32_t>(local[static_cast<std::size_t>(j)]); }
};

StageLayout layout_of(const ReplayPlan& plan, int s) {
  const int J = plan.model_stages();
  StageLayout L;
  L.local.assign(static_cast<std::size_t>(J), -1);
  L.slot_f.assign(static_cast<std::size_t>(J), 0);
  L.slot_b.assign(static_cast<std::size_t>(J), 0);
  auto& bytes = L.counts.bytes;
  std::vector<int> mine;
  for (int j = 0; j < J; ++j)
    if (plan.stage_of(j) == s) {
      L.local[static_cast<std::size_t>(j)] = static_cast<int>(mine.size());
      mine.push_back(j);
      const sim::StageParams& p = plan.params[static_cast<std::size_t>(j)];
      L.counts.static_bytes += p.static_bytes;
      bytes.push_back(p.act);
      bytes.push_back(p.wgrad);
    }
  auto slot = [&](double b) {
    bytes.push_back(b);
    return static_cast<std::uint32_t>(bytes.size() - 1);
  };
  for (const int j : mine) {
    const std::size_t u = static_cast<std::size_t>(j);
    if (j > 0 && plan.stage_of(j - 1) != s) L.slot_f[u] = slot(plan.params[u - 1].out);
    if (j + 1 < J && plan.stage_of(j + 1) != s) L.slot_b[u] = slot(plan.params[u + 1].gout);
  }
  std::uint32_t next = static_cast<std::uint32_t>(bytes.size());
  L.inflight = next++;
  L.depth.assign(plan.channels.size(), 0);
  for (std::size_t c = 0; c < plan.channels.size(); ++c)
    if (plan.channels[c].to == s) L.depth[c] = next++;
  L.counts.counts = next;
  return L;
}

// The count changes of one compute op (docs/model.md §14): F allocates its activations
// when it starts, B releases them when it ends, I hands the part W needs over to W, and
// a (model stage, micro-batch) leaves the in-flight count with its last backward op.
void op_changes(const StageLayout& L, const sim::Op& op, double start, double end,
                std::vector<sim::CountChange>& changes) {
  const std::uint32_t act = L.act(op.model_stage);
  switch (op.phase) {
    case sim::Phase::Forward:
      changes.push_back({start, act, +1});
      changes.push_back({start, L.inflight, +1});
      break;
    case sim::Phase::Backward:
      changes.push_back({end, act, -1});
      changes.push_back({end, L.inflight, -1});
      break;
    case sim::Phase::BackwardInput:
      changes.push_back({end, act, -1});
      changes.push_back({end, act + 1, +1});
      break;
    case sim::Phase::BackwardWeight:
      changes.push_back({end, act + 1, -1});
      changes.push_back({end, L.inflight, -1});
      break;
  }
}

// Stage s's compute ops: busy and optimizer time, the ops on the timeline, and their
// count changes.
void add_compute(const MeasuredRun& run, const StageLayout& L, int s, sim::SimResult& r,
                 std::vector<sim::CountChange>& changes) {
  const IndexedProgram& p = run.program(s);
  const RankRecord& rec = run.record(s);
  const std::size_t nops = p.compute.size();
  sim::StageResult& out = r.stages[static_cast<std::size_t>(s)];
  out.stage = s;
  for (int i = run.first(); i < run.end(); ++i) {
    const std::size_t base = static_cast<std::size_t>(i) * nops;
    for (std::size_t c = 0; c < nops; ++c) {
      const sim::Op op = p.compute[c].op;
      const double a = rec.op_start[base + c], b = rec.op_end[base + c];
      out.busy_s += b - a;
      ++r.compute_ops;
      if (r.timeline) r.timeline->ops.push_back({s, i - run.first(), op, run.at(a), run.at(b)});
      op_changes(L, op, run.at(a), run.at(b), changes);
    }
    out.optimizer_s += rec.iteration_end[static_cast<std::size_t>(i)] - rec.op_end[base + nops - 1];
  }
  out.bubble_s = r.total_time_s - out.busy_s;
}

// The receiver's recvs on channel c, by position.
std::vector<std::size_t> recvs_by_position(const IndexedProgram& rx, int c) {
  std::vector<std::size_t> index;
  for (std::size_t q = 0; q < rx.recvs.size(); ++q) {
    if (rx.recvs[q].channel != c) continue;
    const auto at = static_cast<std::size_t>(rx.recvs[q].position);
    if (index.size() <= at) index.resize(at + 1);
    index[at] = q;
  }
  return index;
}

// Channel c: its transfers, busy time and the transfers on the timeline; the receiver's
// count changes of the messages waiting (+1 when one arrives, -1 when the op that
// consumes it starts, or at its arrival if that is later). Its peak depth comes later,
// from the receiver's levels.
sim::ChannelResult add_channel(const MeasuredRun& run, int c, const StageLayout& rx_layout, sim::SimResult& r,
                               std::vector<sim::CountChange>& receiver_changes) {
  const ReplayPlan::Channel& pc = run.plan.channels[static_cast<std::size_t>(c)];
  sim::ChannelResult ch;
  ch.from = pc.from;
  ch.to = pc.to;
  const IndexedProgram& tx = run.program(pc.from);
  const IndexedProgram& rx = run.program(pc.to);
  const std::vector<std::size_t> rx_index = recvs_by_position(rx, c);
  const std::uint32_t depth = rx_layout.depth[static_cast<std::size_t>(c)];
  double prev_end = -std::numeric_limits<double>::infinity();
  for (int i = run.first(); i < run.end(); ++i) {
    const std::size_t io = static_cast<std::size_t>(i);
    for (std::size_t q = 0; q < tx.sends.size(); ++q) {
      const auto& msg = tx.sends[q];
      if (msg.channel != c) continue;
      const std::size_t rq = rx_index.at(static_cast<std::size_t>(msg.position));
      const double posted = run.record(pc.from).send_post[io * tx.sends.size() + q];
      const double start = std::max(posted, prev_end);
      const double end = std::max(run.record(pc.to).recv_done[io * rx.recvs.size() + rq], start);
      prev_end = end;
      const double consumed =
          std::max(end, run.op_start(pc.to, i, static_cast<std::size_t>(rx.recvs[rq].compute)));
      ch.busy_s += end - start;
      ++ch.messages;
      ch.bytes += static_cast<double>(msg.bytes);
      ++r.transfers;
      const int consumer = msg.gradient ? msg.model_stage - 1 : msg.model_stage + 1;
      const auto u = static_cast<std::size_t>(consumer);
      const std::uint32_t slot = msg.gradient ? rx_layout.slot_b[u] : rx_layout.slot_f[u];
      for (const std::uint32_t count : {slot, depth}) {
        receiver_changes.push_back({run.at(end), count, +1});
        receiver_changes.push_back({run.at(consumed), count, -1});
      }
      if (r.timeline)
        // Posted when the sender was ready, started when the channel was free; a measured
        // transfer's latency is not separable, so its bytes move from its start.
        r.timeline->transfers.push_back({.from = pc.from,
                                         .to = pc.to,
                                         .iteration = i - run.first(),
                                         .micro_batch = msg.micro_batch,
                                         .ready = run.at(posted),
                                         .start = run.at(start),
                                         .moving = run.at(start),
                                         .end = run.at(end),
                                         .bytes = static_cast<double>(msg.bytes),
                                         .model_stage = msg.model_stage,
                                         .gradient = msg.gradient});
    }
  }
  return ch;
}

// Stage s's peaks from its count changes, and those of the channels into it; with a
// timeline, its memory from the start and the depth of each channel into it.
void settle_stage(const MeasuredRun& run, const StageLayout& L, int s, std::vector<sim::CountChange>& changes,
                  sim::SimResult& r) {
  const sim::StageLevels levels = sim::replay_counts(changes, L.counts, r.timeline.has_value());
  sim::StageResult& out = r.stages[static_cast<std::size_t>(s)];
  out.peak_inflight = static_cast<int>(std::lround(levels.peak[L.inflight]));
  out.peak_memory_bytes = levels.peak_memory;
  for (std::size_t c = 0; c < run.plan.channels.size(); ++c)
    if (run.plan.channels[c].to == s)
      r.channels[c].peak_queue_depth = static_cast<int>(std::lround(levels.peak[L.depth[c]]));
  if (!r.timeline) return;
  auto& counters = r.timeline->counters;
  counters.push_back({s, sim::Counter::Memory, -1, run.at(run.t0), L.counts.static_bytes});
  for (const auto& [t, bytes] : levels.memory_samples) counters.push_back({s, sim::Counter::Memory, -1, t, bytes});
  for (std::size_t c = 0; c < run.plan.channels.size(); ++c)
    if (run.plan.channels[c].to == s)
      for (const auto& [t, depth] : levels.count_samples[L.depth[c]])
        counters.push_back({s, sim::Counter::QueueDepth, run.plan.channels[c].from, t, depth});
}

void sort_timeline(sim::Timeline& tl) {
  std::stable_sort(tl.ops.begin(), tl.ops.end(), [](const auto& a, const auto& b) { return a.start < b.start; });
  std::stable_sort(tl.transfers.begin(), tl.transfers.end(),
                   [](const auto& a, const auto& b) { return a.start < b.start; });
}

}  // namespace

sim::SimResult measured_result(const ReplayPlan& plan, const std::vector<IndexedProgram>& indexed,
                               const Measurements& m, bool timeline) {
  const int S = plan.stages;
  const MeasuredRun run{plan, indexed, m, m.boundaries.at(static_cast<std::size_t>(m.warmup))};
  sim::SimResult r = result_of(plan, m);
  if (timeline) r.timeline.emplace();
  r.stages.resize(static_cast<std::size_t>(S));
  std::vector<StageLayout> layouts;
  for (int s = 0; s < S; ++s) layouts.push_back(layout_of(plan, s));
  // Each stage's count changes: its ops', then its input channels'.
  std::vector<std::vector<sim::CountChange>> changes(static_cast<std::size_t>(S));
  for (int s = 0; s < S; ++s) add_compute(run, layouts[static_cast<std::size_t>(s)], s, r, changes[static_cast<std::size_t>(s)]);
  for (int c = 0; c < static_cast<int>(plan.channels.size()); ++c) {
    const auto to = static_cast<std::size_t>(plan.channels[static_cast<std::size_t>(c)].to);
    r.channels.push_back(add_channel(run, c, layouts[to], r, changes[to]));
  }
  for (int s = 0; s < S; ++s)
    settle_stage(run, layouts[static_cast<std::size_t>(s)], s, changes[static_cast<std::size_t>(s)], r);
  if (timeline) sort_timeline(*r.timeline);
  return r;
}

namespace {

// The checks of check_measurements, each reporting what it finds (the first 20 problems).
class RecordChecker {
 public:
  RecordChecker(const std::vector<IndexedProgram>& indexed, const Measurements& m, double tolerance_s)
      : indexed_(indexed), m_(m), tol_(tolerance_s), total_(m.warmup + m.iterations) {}

  std::vector<std::string> run() {
    for (std::size_t s = 0; s < indexed_.size(); ++s) {
      if (!complete(s)) {
        report(fmt::format("stage {}: the records do not hold every op of {} iterations", s, total_));
        continue;
      }
      check_compute_stream(s);
      for (std::size_t q = 0; q < indexed_[s].sends.size(); ++q) check_transfers(s, q);
    }
    for (std::size_t i = 1; i < m_.boundaries.size(); ++i)
      if (m_.boundaries[i] < m_.boundaries[i - 1]) report(fmt::format("iteration boundaries go backwards at {}", i));
    return std::move(problems_);
  }

 private:
  void report(std::string what) {
    if (problems_.size() < 20) problems_.push_back(std::move(what));
  }

  bool complete(std::size_t s) const {
    const IndexedProgram& p = indexed_[s];
    const RankRecord& rec = m_.ranks[s];
    const std::size_t n = static_cast<std::size_t>(total_);
    return rec.op_start.size() == p.compute.size() * n && rec.op_end.size() == p.compute.size() * n &&
           rec.send_post.size() == p.sends.size() * n && rec.recv_done.size() == p.recvs.size() * n &&
           rec.iteration_end.size() == n;
  }

  // The compute stream: in order, each op after the previous one and after its input,
  // and its output sent after it ended. With a runtime W fill the order is the one the
  // ops ran in, which must keep the program's order of the other ops and run each W
  // after its I (check_runtime_order).
  void check_compute_stream(std::size_t s) {
    const IndexedProgram& p = indexed_[s];
    const RankRecord& rec = m_.ranks[s];
    const std::size_t nops = p.compute.size(), ns = p.sends.size(), nr = p.recvs.size();
    std::vector<std::size_t> order(nops);
    const std::vector<int> w_of = m_.runtime_w_fill ? weight_ops(p) : std::vector<int>{};
    double prev = -std::numeric_limits<double>::infinity();
    for (int i = 0; i < total_; ++i) {
      const std::size_t io = static_cast<std::size_t>(i);
      std::iota(order.begin(), order.end(), std::size_t{0});
      if (m_.runtime_w_fill) {
        std::stable_sort(order.begin(), order.end(), [&](std::size_t a, std::size_t b) {
          return rec.op_start[io * nops + a] < rec.op_start[io * nops + b];
        });
        check_runtime_order(s, i, order, w_of);
      }
      for (const std::size_t c : order) {
        const std::size_t k = io * nops + c;
        const auto& op = p.compute[c];
        const std::string name = sim::op_name(op.op);
        if (rec.op_start[k] < prev - tol_ || rec.op_end[k] < rec.op_start[k])
          report(fmt::format("stage {} iteration {}: {} ran out of order ({} .. {}, previous op ended {})", s, i, name,
                             rec.op_start[k], rec.op_end[k], prev));
        if (op.input >= 0) {
          const double arrived = rec.recv_done[io * nr + static_cast<std::size_t>(op.input)];
          if (rec.op_start[k] < arrived - tol_)
            report(fmt::format("stage {} iteration {}: {} started at {} before its input arrived at {}", s, i, name,
                               rec.op_start[k], arrived));
        }
        if (op.output >= 0) {
          const double posted = rec.send_post[io * ns + static_cast<std::size_t>(op.output)];
          if (posted < rec.op_end[k] - tol_)
            report(fmt::format("stage {} iteration {}: the output of {} was sent at {} before the op ended at {}", s,
                               i, name, posted, rec.op_end[k]));
        }
        prev = rec.op_end[k];
      }
      prev = std::max(prev, rec.iteration_end[io]);
    }
  }

  // Iteration i of stage s ran its compute ops in `order` (by their starts): the ops
  // other than W in the program's order, each W after its I ended (w_of: weight_ops).
  void check_runtime_order(std::size_t s, int i, const std::vector<std::size_t>& order,
                           const std::vector<int>& w_of) {
    const IndexedProgram& p = indexed_[s];
    const RankRecord& rec = m_.ranks[s];
    const std::size_t nops = p.compute.size(), io = static_cast<std::size_t>(i);
    std::size_t listed = 0;  // the next op other than W in the program
    for (const std::size_t c : order) {
      if (p.compute[c].op.phase == sim::Phase::BackwardWeight) continue;
      while (listed < nops && p.compute[listed].op.phase == sim::Phase::BackwardWeight) ++listed;
      if (c != listed)
        report(fmt::format("stage {} iteration {}: {} ran where the program has {}", s, i,
                           sim::op_name(p.compute[c].op), sim::op_name(p.compute[listed].op)));
      listed = c + 1;
    }
    for (std::size_t c = 0; c < nops; ++c) {
      if (w_of[c] < 0) continue;
      const std::size_t w = static_cast<std::size_t>(w_of[c]);
      if (rec.op_start[io * nops + w] < rec.op_end[io * nops + c] - tol_)
        report(fmt::format("stage {} iteration {}: {} started at {} before {} ended at {}", s, i,
                           sim::op_name(p.compute[w].op), rec.op_start[io * nops + w], sim::op_name(p.compute[c].op),
                           rec.op_end[io * nops + c]));
    }
  }

  // Send q of stage s against the receiver's recv at the same position on the channel.
  void check_transfers(std::size_t s, std::size_t q) {
    const IndexedProgram& p = indexed_[s];
    const auto& msg = p.sends[q];
    const IndexedProgram& rx = indexed_[static_cast<std::size_t>(msg.peer)];
    std::size_t rq = rx.recvs.size();
    for (std::size_t j = 0; j < rx.recvs.size(); ++j)
      if (rx.recvs[j].channel == msg.channel && rx.recvs[j].position == msg.position) rq = j;
    if (rq == rx.recvs.size() || rx.recvs[rq].bytes != msg.bytes || rx.recvs[rq].tag != msg.tag) {
      report(fmt::format("stage {}: send {} (tag {}, {} bytes) has no matching recv on stage {}", s, q, msg.tag,
                         msg.bytes, msg.peer));
      return;
    }
    for (int i = 0; i < total_; ++i) {
      const std::size_t io = static_cast<std::size_t>(i);
      const double posted = m_.ranks[s].send_post[io * p.sends.size() + q];
      const double arrived = m_.ranks[static_cast<std::size_t>(msg.peer)].recv_done[io * rx.recvs.size() + rq];
      if (arrived < posted - tol_)
        report(fmt::format("channel {} -> {} iteration {}: tag {} arrived at {} before it was sent at {}", s,
                           msg.peer, i, msg.tag, arrived, posted));
    }
  }

  const std::vector<IndexedProgram>& indexed_;
  const Measurements& m_;
  const double tol_;
  const int total_;
  std::vector<std::string> problems_;
};

}  // namespace

std::vector<std::string> check_measurements(const std::vector<IndexedProgram>& indexed, const Measurements& m,
                                            double tolerance_s) {
  return RecordChecker(indexed, m, tolerance_s).run();
}

std::string stage_trace_csv(const std::vector<IndexedProgram>& indexed, const Measurements& m) {
  std::string out = "iteration,stage,micro_batch,phase,duration_s\n";
  for (int i = 0; i < m.iterations; ++i) {
    for (std::size_t s = 0; s < indexed.size(); ++s) {
      const auto& p = indexed[s];
      const auto& rec = m.ranks[s];
      const std::size_t nops = p.compute.size();
      for (std::size_t c = 0; c < nops; ++c) {
        const std::size_t k = static_cast<std::size_t>(m.warmup + i) * nops + c;
        const sim::Op& op = p.compute[c].op;
        out += fmt::format("{},{},{},{},{:.9g}\n", i, op.model_stage, op.micro_batch, sim::phase_letter(op.phase),
                           rec.op_end[k] - rec.op_start[k]);
      }
    }
  }
  return out;
}

}  // namespace adagrouper::calib
