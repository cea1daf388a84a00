// The replay's records as results (calib/replay.h): the measured SimResult, checks, stage trace.
#include <algorithm>
#include <limits>

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
  r.model_stages = plan.stages;  // one model stage per stage
  r.virtual_stages = 1;
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

// Stage s's compute ops: busy and optimizer time, the ops on the timeline, and the
// micro-batches in flight as count changes (+1 when F starts, -1 when B ends).
void add_compute(const MeasuredRun& run, int s, sim::SimResult& r, std::vector<sim::CountChange>& changes) {
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
      if (op.phase == sim::Phase::Forward) {
        changes.push_back({run.at(a), sim::Count::Inflight, +1});
      } else {
        changes.push_back({run.at(b), sim::Count::Inflight, -1});
      }
    }
    out.optimizer_s += rec.iteration_end[static_cast<std::size_t>(i)] - rec.op_end[base + nops - 1];
  }
  out.bubble_s = r.total_time_s - out.busy_s;
}

// The receiver's recvs on the channel from `from`, by position.
std::vector<std::size_t> recvs_by_position(const IndexedProgram& rx, int rx_side) {
  std::vector<std::size_t> index(static_cast<std::size_t>(rx.recvs_per_side[rx_side]));
  for (std::size_t q = 0; q < rx.recvs.size(); ++q)
    if (rx.recvs[q].side == rx_side) index[static_cast<std::size_t>(rx.recvs[q].position)] = q;
  return index;
}

// The channel from -> to: its transfers, busy time and the transfers on the timeline;
// the receiver's buffer depth as count changes (+1 when a message arrives, -1 when the
// op that consumes it starts, or at its arrival if that is later). Its peak depth comes
// later, from the receiver's levels.
sim::ChannelResult add_channel(const MeasuredRun& run, int from, int to, sim::SimResult& r,
                               std::vector<sim::CountChange>& receiver_changes) {
  sim::ChannelResult ch;
  ch.from = from;
  ch.to = to;
  const IndexedProgram& tx = run.program(from);
  const IndexedProgram& rx = run.program(to);
  const int tx_side = to > from ? 1 : 0, rx_side = to > from ? 0 : 1;
  const sim::Count depth = to > from ? sim::Count::ForwardDepth : sim::Count::BackwardDepth;
  const std::vector<std::size_t> rx_index = recvs_by_position(rx, rx_side);
  double prev_end = -std::numeric_limits<double>::infinity();
  for (int i = run.first(); i < run.end(); ++i) {
    const std::size_t io = static_cast<std::size_t>(i);
    for (std::size_t q = 0; q < tx.sends.size(); ++q) {
      const auto& msg = tx.sends[q];
      if (msg.side != tx_side) continue;
      const std::size_t rq = rx_index.at(static_cast<std::size_t>(msg.position));
      const double posted = run.record(from).send_post[io * tx.sends.size() + q];
      const double start = std::max(posted, prev_end);
      const double end = std::max(run.record(to).recv_done[io * rx.recvs.size() + rq], start);
      prev_end = end;
      const double consumed =
          std::max(end, run.op_start(to, i, static_cast<std::size_t>(rx.recvs[rq].compute)));
      ch.busy_s += end - start;
      ++ch.messages;
      ch.bytes += static_cast<double>(msg.bytes);
      ++r.transfers;
      receiver_changes.push_back({run.at(end), depth, +1});
      receiver_changes.push_back({run.at(consumed), depth, -1});
      if (r.timeline)
        // Posted when the sender was ready, started when the channel was free; a measured
        // transfer's latency is not separable, so its bytes move from its start.
        r.timeline->transfers.push_back({.from = from,
                                         .to = to,
                                         .iteration = i - run.first(),
                                         .micro_batch = msg.micro_batch,
                                         .ready = run.at(posted),
                                         .start = run.at(start),
                                         .moving = run.at(start),
                                         .end = run.at(end),
                                         .bytes = static_cast<double>(msg.bytes),
                                         .model_stage = from,
                                         .gradient = to < from});
    }
  }
  return ch;
}

// The bytes stage s holds per unit of each count, as the simulator has them: its static
// bytes, its activations per micro-batch in flight, and per waiting message the bytes
// its neighbour sends on that input (forward: s - 1's output, backward: s + 1's gradient).
sim::MemoryTerms memory_terms(const ReplayPlan& plan, int s) {
  const auto& params = plan.params;
  const std::size_t u = static_cast<std::size_t>(s);
  sim::MemoryTerms terms;
  terms.static_bytes = params[u].static_bytes;
  terms.act = params[u].act;
  terms.in_bytes[0] = s > 0 ? params[u - 1].out : 0.0;
  terms.in_bytes[1] = s + 1 < plan.stages ? params[u + 1].gout : 0.0;
  return terms;
}

// The depth of one of a stage's receive buffers where it changed, as (time, messages):
// the same replay of the counts, with one unit per message waiting on that side.
std::vector<std::pair<double, double>> depth_samples(std::vector<sim::CountChange>& changes, int side) {
  sim::MemoryTerms unit;
  unit.in_bytes[side] = 1;
  std::vector<std::pair<double, double>> samples;
  sim::replay_counts(changes, unit, &samples);
  return samples;
}

// Stage s's peaks from its count changes; with a timeline, its memory from the start.
sim::StagePeaks settle_stage(const MeasuredRun& run, int s, std::vector<sim::CountChange>& changes,
                             sim::SimResult& r) {
  const sim::MemoryTerms terms = memory_terms(run.plan, s);
  std::vector<std::pair<double, double>> samples;
  const sim::StagePeaks peaks = sim::replay_counts(changes, terms, r.timeline ? &samples : nullptr);
  sim::StageResult& out = r.stages[static_cast<std::size_t>(s)];
  out.peak_inflight = static_cast<int>(std::lround(peaks.inflight));
  out.peak_memory_bytes = peaks.memory;
  if (r.timeline) {
    auto& counters = r.timeline->counters;
    counters.push_back({s, sim::Counter::Memory, -1, run.at(run.t0), terms.static_bytes});
    for (const auto& [t, bytes] : samples) counters.push_back({s, sim::Counter::Memory, -1, t, bytes});
  }
  return peaks;
}

// The channel's peak queue depth from its receiver's levels; with a timeline, its depth.
void settle_channel(sim::ChannelResult& ch, const sim::StagePeaks& receiver, std::vector<sim::CountChange>& changes,
                    sim::SimResult& r) {
  const int side = ch.to > ch.from ? 0 : 1;
  ch.peak_queue_depth = static_cast<int>(std::lround(side == 0 ? receiver.forward_depth : receiver.backward_depth));
  if (!r.timeline) return;
  for (const auto& [t, depth] : depth_samples(changes, side))
    r.timeline->counters.push_back({ch.to, sim::Counter::QueueDepth, ch.from, t, depth});
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
  // Each stage's count changes: its ops', then its input channels'.
  std::vector<std::vector<sim::CountChange>> changes(static_cast<std::size_t>(S));
  auto changes_of = [&](int s) -> std::vector<sim::CountChange>& { return changes[static_cast<std::size_t>(s)]; };
  for (int s = 0; s < S; ++s) add_compute(run, s, r, changes_of(s));
  // Channels: forward 0->1 .. S-2->S-1, then backward 1->0 .. S-1->S-2, as simulate lists them.
  for (int s = 0; s + 1 < S; ++s) r.channels.push_back(add_channel(run, s, s + 1, r, changes_of(s + 1)));
  for (int s = 0; s + 1 < S; ++s) r.channels.push_back(add_channel(run, s + 1, s, r, changes_of(s)));
  std::vector<sim::StagePeaks> peaks;
  for (int s = 0; s < S; ++s) peaks.push_back(settle_stage(run, s, changes_of(s), r));
  for (sim::ChannelResult& ch : r.channels)
    settle_channel(ch, peaks[static_cast<std::size_t>(ch.to)], changes_of(ch.to), r);
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
  // and its output sent after it ended.
  void check_compute_stream(std::size_t s) {
    const IndexedProgram& p = indexed_[s];
    const RankRecord& rec = m_.ranks[s];
    const std::size_t nops = p.compute.size(), ns = p.sends.size(), nr = p.recvs.size();
    double prev = -std::numeric_limits<double>::infinity();
    for (int i = 0; i < total_; ++i) {
      const std::size_t io = static_cast<std::size_t>(i);
      for (std::size_t c = 0; c < nops; ++c) {
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

  // Send q of stage s against the receiver's recv at the same position on the channel.
  void check_transfers(std::size_t s, std::size_t q) {
    const IndexedProgram& p = indexed_[s];
    const auto& msg = p.sends[q];
    const IndexedProgram& rx = indexed_[static_cast<std::size_t>(msg.peer)];
    const int rx_side = msg.side == 1 ? 0 : 1;
    std::size_t rq = rx.recvs.size();
    for (std::size_t j = 0; j < rx.recvs.size(); ++j)
      if (rx.recvs[j].side == rx_side && rx.recvs[j].position == msg.position) rq = j;
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
        out += fmt::format("{},{},{},{},{:.9g}\n", i, s, p.compute[c].op.micro_batch,
                           p.compute[c].op.phase == sim::Phase::Forward ? 'F' : 'B', rec.op_end[k] - rec.op_start[k]);
      }
    }
  }
  return out;
}

}  // namespace adagrouper::calib
