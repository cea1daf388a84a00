// The dataflow evaluator: the execution model of docs/model.md §3 computed without an
// event list (docs/model.md, "Two evaluators").
//
// Every time in the model is a maximum of times already known: an op starts at
// max(end of the previous op on its stage, arrival of its message); a transfer starts at
// max(end of its producing op, end of the previous transfer on the channel, start of the
// op that consumed the message Q places earlier). So the times can be computed in any
// order that respects those dependencies, not only in time order. This evaluator
// advances each stage as far as its inputs allow (a work list of stages whose input
// changed), pushing each produced message through its channel at once; when a stage has
// finished the iteration it replays the stage's memory, in-flight and queue-depth
// changes in time order from the recorded times (a few sorted streams, no heap).
//
// It gives the same numbers as the event engine, to the last bit: every rate and speed
// cursor sees the same queries in the same order (a channel's transfers and a stage's
// ops are evaluated in their own order in both), and the levels' peaks do not depend on
// the order of changes at one instant (levels.h). Tests check that on seeded random
// scenarios. It records no timeline; deadlocks and rates that stay 0 forever are left
// to the event engine, which reports them (simulate() runs it when this one gives up).
#include <algorithm>
#include <cstdint>
#include <limits>
#include <vector>

#include "../rate.h"
#include "evaluator.h"
#include "op_durations.h"
#include "totals.h"

namespace adagrouper::sim::eval {
namespace {

constexpr double kInf = std::numeric_limits<double>::infinity();

// The peaks of a stage's memory, micro-batches in flight and receive-buffer depths, and
// the time of its last level change.
struct StageLevels {
  double last_t = 0;
  double peak_memory = 0, peak_inflight = 0, peak_fwd_depth = 0, peak_bwd_depth = 0;
};

struct StageRun {
  std::uint32_t begin = 0, end = 0;
  std::uint32_t next = 0;  // absolute index of the next op to evaluate
  double free = 0;         // end of the previous op
  bool queued = false;     // on the work list
  RateCursor speed;
  double busy_s = 0;
  StageLevels levels;  // replayed when the stage finishes an iteration
};

struct ChannelRun {
  std::uint32_t next = 0;      // next message to transfer = messages delivered
  std::uint32_t consumed = 0;  // messages whose consuming op has been evaluated (with a capacity)
  std::uint32_t arrivals = 0;  // where its arrival times start in arrival_
  double free = 0;             // end of the previous transfer
  RateCursor rate;
  double busy_s = 0;
};

class Dataflow {
 public:
  Dataflow(const Scenario& sc, const Program& prog)
      : sc_(sc), prog_(prog), S_(static_cast<std::uint32_t>(sc.num_stages())), durations_(sc_, prog_) {
    stages_.resize(S_);
    for (std::uint32_t s = 0; s < S_; ++s) {
      StageRun& st = stages_[s];
      st.begin = prog_.stages[s].begin;
      st.end = prog_.stages[s].end;
      st.speed = RateCursor(sc.network.speed(s));
      st.levels.peak_memory = prog_.stages[s].memory.static_bytes;
    }
    channels_.resize(prog_.channels.size());
    for (std::size_t c = 0; c < channels_.size(); ++c) {
      const ProgramChannel& pc = prog_.channels[c];
      if (!pc.spec->unlimited()) channels_[c].rate = RateCursor(*pc.spec->rate);
    }
    start_.resize(prog_.ops.size());
    end_.resize(prog_.ops.size());
    // Each channel's arrivals followed by +inf (a sentinel for replay_levels), and one
    // more +inf for stages without an input channel.
    arrival_.assign(prog_.producer.size() + channels_.size() + 1, kInf);
    for (std::size_t c = 0; c < channels_.size(); ++c)
      channels_[c].arrivals = static_cast<std::uint32_t>(prog_.channels[c].first + c);
    consumed_at_.resize(prog_.producer.size());
    work_.reserve(S_);
  }

  std::optional<SimResult> run() {
    SimResult r;
    r.iteration_times_s.reserve(sc_.iterations);
    double t = sc_.start_time_s;
    for (int it = 0; it < sc_.iterations; ++it) {
      durations_.load(it);
      double end = 0;
      if (!run_iteration(t, end)) return std::nullopt;
      r.iteration_times_s.push_back(end - t);
      t = end;
    }
    r.compute_ops = static_cast<std::uint64_t>(prog_.ops.size()) * sc_.iterations;
    r.transfers = static_cast<std::uint64_t>(prog_.producer.size()) * sc_.iterations;
    std::vector<StageTotals> stages(S_);
    std::vector<ChannelTotals> channels(channels_.size());
    for (std::uint32_t s = 0; s < S_; ++s) {
      const StageRun& st = stages_[s];
      const ProgramStage& ps = prog_.stages[s];
      stages[s] = {st.busy_s, st.levels.peak_inflight, st.levels.peak_memory};
      if (ps.in[0] != kNoChannel) channels[ps.in[0]].peak_queue_depth = st.levels.peak_fwd_depth;
      if (ps.in[1] != kNoChannel) channels[ps.in[1]].peak_queue_depth = st.levels.peak_bwd_depth;
    }
    for (std::size_t c = 0; c < channels_.size(); ++c) channels[c].busy_s = channels_[c].busy_s;
    fill_result(sc_, prog_, t - sc_.start_time_s, stages, channels, r);
    return r;
  }

 private:
  // Computes every op's and message's times for one iteration starting at t0. False when
  // it cannot finish (a dependency cycle, or a rate or speed that stays 0 forever).
  bool run_iteration(double t0, double& end) {
    t0_ = t0;
    for (std::uint32_t s = S_; s-- > 0;) {
      StageRun& st = stages_[s];
      st.next = st.begin;
      st.free = t0;
      st.queued = true;
      work_.push_back(s);  // stage 0 is evaluated first
    }
    for (ChannelRun& ch : channels_) {
      ch.next = ch.consumed = 0;
      ch.free = t0;
    }
    while (!work_.empty()) {
      const std::uint32_t s = work_.back();
      work_.pop_back();
      stages_[s].queued = false;
      if (!advance_stage(s)) return false;
    }
    end = t0;
    for (std::uint32_t s = 0; s < S_; ++s) {
      const StageRun& st = stages_[s];
      if (st.next != st.end) return false;  // stuck: a dependency cycle
      end = std::max(end, st.free + sc_.model_stages[s].opt);
    }
    return true;
  }

  void wake(std::uint32_t s) {
    StageRun& st = stages_[s];
    if (!st.queued) {
      st.queued = true;
      work_.push_back(s);
    }
  }

  // Evaluates stage s's ops in order until one's input is not known yet.
  bool advance_stage(std::uint32_t s) {
    StageRun& st = stages_[s];
    if (st.next == st.end) return true;  // finished (and its levels replayed) already
    const ProgramStage& ps = prog_.stages[s];
    const bool timed = durations_.has();
    while (st.next < st.end) {
      const std::uint32_t i = st.next;
      const ProgramOp op = prog_.ops[i];
      const std::uint32_t in = ps.in_channel(op);
      double ready = t0_;
      if (in != kNoChannel) {
        if (channels_[in].next <= op.dep_index) return true;  // its message has not arrived
        ready = arrival_[channels_[in].arrivals + op.dep_index];
      } else if (op.backward) {
        if (i - st.begin <= op.dep_index) return true;  // last stage: F(S-1, m) is ordered after it
        ready = end_[st.begin + op.dep_index];
      }
      const double start = std::max(st.free, ready);
      const double duration = timed ? durations_.at(i) : ps.duration(op);
      double end;
      if (ps.unit_speed) {
        end = start + duration;
      } else {
        end = st.speed.finish(start, duration);
        if (end == kNever) return false;
      }
      start_[i] = start;
      end_[i] = end;
      st.busy_s += end - start;
      st.free = end;
      st.next = i + 1;
      if (in != kNoChannel && prog_.channels[in].capacity > 0) {
        consumed_at_[prog_.channels[in].first + op.dep_index] = start;
        ++channels_[in].consumed;
        if (!advance_channel(in)) return false;  // may free capacity
      }
      const std::uint32_t out = ps.out_channel(op);
      if (out != kNoChannel && !advance_channel(out)) return false;
    }
    // Done for this iteration: every message it consumes has arrived, so its levels can
    // be replayed now, while its times are still in cache.
    replay_levels(s);
    return true;
  }

  // Transfers the channel's messages in order until one is not produced yet or the
  // receiver's buffer is full; wakes the receiver when something arrived.
  bool advance_channel(std::uint32_t c) {
    ChannelRun& ch = channels_[c];
    const ProgramChannel& pc = prog_.channels[c];
    const StageRun& sender = stages_[pc.sender];
    const std::uint32_t produced = sender.next - sender.begin;
    const std::uint32_t first_next = ch.next;
    while (ch.next < pc.count) {
      const std::uint32_t p = prog_.producer[pc.first + ch.next];
      if (produced <= p) break;  // not produced yet
      double start = std::max(ch.free, end_[sender.begin + p]);
      if (pc.capacity > 0 && ch.next >= pc.capacity) {
        if (ch.consumed < ch.next - pc.capacity + 1) break;  // receiver full
        start = std::max(start, consumed_at_[pc.first + ch.next - pc.capacity]);
      }
      const double t_lat = start + pc.latency_s;
      double end = t_lat;
      if (!pc.unlimited) {
        end = ch.rate.finish(t_lat, pc.bytes);
        if (end == kNever) return false;
      }
      arrival_[ch.arrivals + ch.next] = end;
      ch.busy_s += end - start;
      ch.free = end;
      ++ch.next;
    }
    if (ch.next != first_next) wake(pc.receiver);
    return true;
  }

  // Replays stage s's level changes of one iteration in time order, once the stage has
  // finished the iteration (every message it consumes has arrived then): its ops' starts
  // (a consumed message leaves its buffer, a forward's activations arrive), its
  // backwards' ends (their activations leave), and the arrivals on its two input
  // channels. The peaks take the values that settle when time moves on (levels.h), for
  // all of the stage's levels at once. Between two op events only arrivals happen, and
  // they only increase the levels, so of the values they settle at the last is the
  // largest: the arrivals before an op event are counted (two sorted streams, no merge),
  // the peaks are taken once, then the arrivals at the event's own instant join it.
  void replay_levels(std::uint32_t s) {
    StageRun& st = stages_[s];
    StageLevels& lv = st.levels;
    const ProgramStage& ps = prog_.stages[s];
    const std::uint32_t cf = ps.in[0], cb = ps.in[1];
    // Each ends with +inf: no bounds checks below.
    const double* fa = &arrival_[cf == kNoChannel ? arrival_.size() - 1 : channels_[cf].arrivals];
    const double* ba = &arrival_[cb == kNoChannel ? arrival_.size() - 1 : channels_[cb].arrivals];
    // Arrived and consumed messages per input channel, micro-batches in flight.
    std::uint32_t f = 0, b = 0, used_f = 0, used_b = 0, inflight = 0;
    double last_t = lv.last_t;
    auto settle = [&] {
      const double fd = f - used_f, bd = b - used_b, in = inflight;
      lv.peak_memory = std::max(lv.peak_memory, stage_memory(ps.memory, in, fd, bd));
      lv.peak_inflight = std::max(lv.peak_inflight, in);
      lv.peak_fwd_depth = std::max(lv.peak_fwd_depth, fd);
      lv.peak_bwd_depth = std::max(lv.peak_bwd_depth, bd);
    };
    // Brings the levels to an op event at time t: the arrivals before t settle (the
    // peaks are taken), those at t join the event.
    auto until = [&](double t) {
      const std::uint32_t f0 = f, b0 = b;
      std::uint32_t at_f = 0, at_b = 0;
      for (; fa[f] <= t; ++f) at_f += fa[f] == t;
      for (; ba[b] <= t; ++b) at_b += ba[b] == t;
      if (f - at_f != f0 || b - at_b != b0 || t > last_t) {
        f -= at_f;
        b -= at_b;
        settle();
        f += at_f;
        b += at_b;
      }
      last_t = t;
    };
    for (std::uint32_t i = st.begin; i < st.end; ++i) {
      const ProgramOp op = prog_.ops[i];
      until(start_[i]);
      if (op.backward) {
        used_b += cb != kNoChannel;
        until(end_[i]);
        --inflight;
      } else {
        used_f += cf != kNoChannel;
        ++inflight;
      }
    }
    // Every message is consumed by an op, so nothing arrives after the last op event;
    // the final values (no micro-batch in flight, empty buffers) are the floor of the peaks.
    settle();
    lv.last_t = last_t;
  }

  const Scenario& sc_;
  const Program& prog_;
  std::uint32_t S_;
  OpDurations durations_;
  double t0_ = 0;
  std::vector<StageRun> stages_;
  std::vector<ChannelRun> channels_;
  std::vector<double> start_, end_;           // per op of the iteration (index into Program::ops)
  std::vector<double> arrival_;      // per message: ChannelRun::arrivals + n
  std::vector<double> consumed_at_;  // per message (index into Program::producer)
  std::vector<std::uint32_t> work_;           // stages whose input changed
};

}  // namespace

std::optional<SimResult> run_dataflow(const Scenario& scenario, const Program& program, const SimOptions&) {
  Dataflow d(scenario, program);
  return d.run();
}

}  // namespace adagrouper::sim::eval
