// The event engine: the run in time order, driven by one event list ordered by
// (time, sequence) (docs/model.md §8).
#include <algorithm>
#include <cmath>
#include <cstdint>
#include <limits>

#include <fmt/format.h>

#include "../error.h"
#include "evaluator.h"
#include "event_list.h"
#include "message_latencies.h"
#include "op_durations.h"
#include "token_bucket.h"
#include "totals.h"

namespace adagrouper::sim::eval {

namespace {

struct StageState {
  std::uint32_t begin = 0, end = 0;  // this stage's listed ops in Program::ops
  std::uint32_t next = 0;            // absolute index of the next listed op
  std::uint32_t done = 0;            // listed ops completed this iteration
  std::uint32_t running = 0;         // the op it runs (listed, or in its W region)
  bool busy = false;
  bool deciding = false;             // a decision between a W op and its next op is scheduled
  double op_start = 0;
  double finished_at = 0;
  RateCursor speed;
  Level mem, inflight;
  double last_mem_recorded = -1;
  double busy_s = 0;
  std::uint32_t pending = 0, pending_head = 0, pending_tail = 0;  // dynamic W fill: its FIFO in pending_
  // The memory as a running total of the count changes: stage_memory's value to the last
  // bit where the stage's sums are exact in any order (Program::memory_sums_exact).
  double memory = 0;
  bool memory_exact = false;
};

// Boundaries of the trace's segments at or before t (counting each period's).
double boundaries_until(const RateTrace& trace, double t) {
  const auto& times = trace.times();
  const double period = trace.repeat_s();
  const double periods = period > 0 ? std::floor(t / period) : 0.0;
  const double in_period = t - periods * period;
  const auto upto = std::upper_bound(times.begin(), times.end(), in_period) - times.begin();
  return periods * static_cast<double>(times.size()) + static_cast<double>(upto);
}

// The rate of a channel over [t0, t1] as timeline samples: its value at t0 and at each
// change up to t1; a trace with more segment boundaries than Timeline::kMaxRateSamples
// in the span is recorded as its mean over that many equal buckets instead (the bytes
// the channel could move in each).
void record_rate(const RateTrace& trace, double t0, double t1, const ProgramChannel& pc,
                 std::vector<Timeline::RateSample>& out) {
  const auto from = static_cast<std::int32_t>(pc.sender), to = static_cast<std::int32_t>(pc.receiver);
  constexpr auto kMax = Timeline::kMaxRateSamples;
  const bool buckets = boundaries_until(trace, t1) - boundaries_until(trace, t0) >= static_cast<double>(kMax);
  const double width = (t1 - t0) / kMax;
  double last = buckets ? trace.integral(t0, t0 + width) / width : trace.value_at(t0);
  out.push_back({from, to, t0, last});
  const auto emit = [&](double t, double v) {
    if (v != last) out.push_back({from, to, t, v});
    last = v;
  };
  if (buckets) {
    for (std::size_t b = 1; b < kMax; ++b) {
      const double a = t0 + static_cast<double>(b) * width;
      const double e = b + 1 == kMax ? t1 : a + width;
      emit(a, trace.integral(a, e) / (e - a));
    }
    return;
  }
  const auto& times = trace.times();
  const auto& values = trace.values();
  const double period = trace.repeat_s();
  double base = period > 0 ? std::floor(t0 / period) * period : 0.0;
  std::size_t i = std::upper_bound(times.begin(), times.end(), t0 - base) - times.begin();
  for (;; ++i) {
    if (i == times.size()) {
      if (period <= 0) return;
      base += period;
      i = 0;
    }
    const double t = base + times[i];
    if (t > t1) return;
    if (t > t0) emit(t, values[i]);
  }
}

struct ChannelState {
  std::uint32_t next = 0;       // next message to transfer (in the receiver's order)
  std::uint32_t delivered = 0;  // messages arrived at the receiver
  std::uint32_t consumed = 0;   // messages whose consuming op has started
  bool busy = false;
  double start = 0;
  RateCursor rate;
  Level queue;
  double busy_s = 0;
};

// Compiled once per (timeline recorded, dynamic W fill), so that a run without them
// tests neither per event.
template <bool kRecord, bool kDynamicW>
class Engine {
 public:
  Engine(const Scenario& sc, const Program& prog, const SimOptions& opt)
      : sc_(sc), prog_(prog), S_(sc.num_stages()), record_order_(opt.record_order),
        durations_(sc_, prog_), latencies_(sc_, prog_) {
    if (static_cast<std::uint64_t>(S_) + prog_.channels.size() >= EventList::kMaxTargets)
      throw InputError(fmt::format("the pipeline has {} stages and {} channels; the engine supports fewer than {} in all",
                                   S_, prog_.channels.size(), EventList::kMaxTargets));
    stages_.resize(S_);
    counts_.assign(prog_.terms.size(), 0.0);
    for (int s = 0; s < S_; ++s) {
      auto& st = stages_[s];
      const ProgramStage& ps = prog_.stages[s];
      st.begin = ps.begin;
      st.end = ps.end;
      st.speed = RateCursor(sc.network.speed(s));
      st.mem.cur = st.mem.peak = ps.static_bytes;
      st.memory = ps.static_bytes;
      st.memory_exact = prog_.memory_sums_exact(static_cast<std::uint32_t>(s));
      st.pending = static_cast<std::uint32_t>(pending_.size());
      pending_.resize(pending_.size() + (ps.w_end - ps.w_begin));
    }
    channels_.resize(prog_.channels.size());
    events_ = EventList(static_cast<std::uint32_t>(stages_.size() + channels_.size()));
    bucket_.resize(channels_.size());
    for (std::size_t c = 0; c < channels_.size(); ++c) {
      const ProgramChannel& pc = prog_.channels[c];
      if (pc.transfer != Transfer::LatencyOnly) channels_[c].rate = RateCursor(*pc.spec->rate);
      if (pc.transfer == Transfer::Bucket) bucket_[c] = TokenBucket(*pc.spec, sc.start_time_s);
    }
    if constexpr (kRecord) {
      timeline_.ops.reserve(prog_.ops.size() * sc.iterations);
      timeline_.transfers.reserve(prog_.producer.size() * sc.iterations);
      op_end_.assign(prog_.ops.size(), 0.0);
    }
  }

  SimResult run() {
    double t = sc_.start_time_s;
    result_.iteration_times_s.reserve(sc_.iterations);
    for (int it = 0; it < sc_.iterations; ++it) {
      iteration_ = it;
      if (record_order_) result_.executed.emplace_back(S_);
      const double end = run_iteration(t);
      result_.iteration_times_s.push_back(end - t);
      t = end;
    }
    finish(t - sc_.start_time_s);
    if constexpr (kRecord) result_.timeline = std::move(timeline_);
    return std::move(result_);
  }

 private:
  double run_iteration(double t0) {
    durations_.load(iteration_);
    latencies_.load(iteration_);
    for (auto& st : stages_) {
      st.next = st.begin;
      st.done = 0;
      st.finished_at = t0;
      st.pending_head = st.pending_tail = st.pending;
    }
    for (auto& ch : channels_) ch.next = ch.delivered = ch.consumed = 0;
    for (int s = 0; s < S_; ++s) try_start_stage(static_cast<std::uint32_t>(s), t0);

    const std::uint32_t nstages = static_cast<std::uint32_t>(S_);
    while (!events_.empty()) {
      const Event e = events_.pop();
      if (e.target >= nstages) {
        transfer_end(e.target - nstages, e.time);
      } else if (kDynamicW && stages_[e.target].deciding) {
        decide(e.target, e.time);
      } else {
        op_end(e.target, e.time);
      }
    }

    double end = t0;
    for (int s = 0; s < S_; ++s) {
      const auto& st = stages_[s];
      if (st.next != st.end) throw SimError(deadlock_report());
      const double opt = prog_.stages[s].opt;
      end = std::max(end, st.finished_at + opt);
      if (kRecord && opt > 0) timeline_.optimizer.push_back({s, iteration_, st.finished_at, st.finished_at + opt});
    }
    return end;
  }

  // --- stages ---------------------------------------------------------------

  bool ready(const StageState& st, const ProgramOp& op, const OpClass& c) const {
    if (c.in == kLocal) return st.done > op.dep;
    return c.in == kNoChannel || channels_[c.in].delivered > op.dep;
  }

  // Starts what the stage runs next (docs/model.md §14 for dynamic W fill): the oldest
  // pending W when it holds P of them or has no listed op left, else its next listed op
  // when that is ready; if it is not and a W is pending, the choice waits until every
  // event of this instant has happened (the op may become ready at this very time).
  void try_start_stage(std::uint32_t s, double now) {
    StageState& st = stages_[s];
    if (st.busy) return;
    const std::uint32_t pending = kDynamicW ? st.pending_tail - st.pending_head : 0;
    if (pending > 0 && (pending >= prog_.max_pending_w || st.next == st.end)) return start_op(s, pending_[st.pending_head], now);
    if (st.next == st.end) return;
    const ProgramOp op = prog_.ops[st.next];
    if (ready(st, op, prog_.stages[s].cls(prog_.classes, op))) return start_op(s, st.next, now);
    if (pending > 0 && !st.deciding) {
      st.deciding = true;
      events_.push_last(now, s);
    }
  }

  // The decision try_start_stage deferred: nothing else happens at this instant any more.
  void decide(std::uint32_t s, double now) {
    StageState& st = stages_[s];
    st.deciding = false;
    const ProgramOp op = prog_.ops[st.next];
    start_op(s, ready(st, op, prog_.stages[s].cls(prog_.classes, op)) ? st.next : pending_[st.pending_head], now);
  }

  void start_op(std::uint32_t s, std::uint32_t index, double now) {
    StageState& st = stages_[s];
    const ProgramStage& ps = prog_.stages[s];
    const ProgramOp op = prog_.ops[index];
    const OpClass& c = ps.cls(prog_.classes, op);
    st.busy = true;
    st.deciding = false;
    st.op_start = now;
    st.running = index;
    if (kDynamicW && index >= ps.w_begin && index < ps.w_end) ++st.pending_head;
    // The memory once for both changes: a level set twice at one instant settles only
    // the second value (Level::set), and records what it held before the instant once.
    if (c.in < kLocal) {
      ++channels_[c.in].consumed;
      queue_change(c.in, now, -1);
      count(st, ps, c.slot_term, -1);
      try_start_channel(c.in, now);  // may free capacity
    }
    if (c.phase == Phase::Forward) {
      count(st, ps, c.act_term, 1);
      st.inflight.change(now, 1);
    }
    if (c.in < kLocal || c.phase == Phase::Forward) mem_update(s, now);
    const double end = eval::op_end(ps, st.speed, now, durations_.of(index, c));
    if (end == kNever) speed_never(s, op, now);
    events_.push(end, s);
  }

  // What an op's end releases (docs/model.md §14): B its activations, I all but what W
  // needs (W becomes pending under dynamic fill), W the rest.
  void release(std::uint32_t s, const ProgramOp& op, const OpClass& c, double now) {
    StageState& st = stages_[s];
    const ProgramStage& ps = prog_.stages[s];
    if (c.phase == Phase::Forward) return;
    if (c.phase == Phase::Backward) {
      count(st, ps, c.act_term, -1);
      st.inflight.change(now, -1);
    } else if (c.phase == Phase::BackwardInput) {
      count(st, ps, c.act_term, -1);
      count(st, ps, c.act_term + 1, 1);
      if (kDynamicW)
        pending_[st.pending_tail++] =
            ps.w_begin + static_cast<std::uint32_t>(c.act_term / 2) * prog_.micro_batches + op.micro_batch;
    } else {
      count(st, ps, c.act_term + 1, -1);
      st.inflight.change(now, -1);
    }
    mem_update(s, now);
  }

  void op_end(std::uint32_t s, double now) {
    StageState& st = stages_[s];
    const ProgramOp op = prog_.ops[st.running];
    const OpClass& c = prog_.stages[s].cls(prog_.classes, op);
    st.busy = false;
    st.busy_s += now - st.op_start;
    if constexpr (kRecord) {
      timeline_.ops.push_back({static_cast<std::int32_t>(s), iteration_, prog_.op_of(s, op), st.op_start, now});
      op_end_[st.running] = now;
    }
    if (record_order_) result_.executed.back()[s].push_back(prog_.op_of(s, op));
    if (!kDynamicW || st.running < st.end) {  // a listed op (W ops of dynamic fill lie after them)
      ++st.next;
      ++st.done;
    }
    ++result_.compute_ops;
    release(s, op, c, now);
    if (c.out != kNoChannel) try_start_channel(c.out, now);
    if (st.next == st.end && (!kDynamicW || st.pending_head == st.pending_tail)) {
      st.finished_at = now;
    } else {
      try_start_stage(s, now);
    }
  }

  // --- channels ---------------------------------------------------------------

  // The op that produced the channel's n-th message.
  Op message_op(const ProgramChannel& pc, std::uint32_t n) const {
    const std::uint32_t sender = pc.sender;
    return prog_.op_of(sender, prog_.ops[prog_.stages[sender].begin + prog_.producer[pc.first + n]]);
  }

  void try_start_channel(std::uint32_t c, double now) {
    ChannelState& ch = channels_[c];
    const ProgramChannel& pc = prog_.channels[c];
    if (ch.busy || ch.next == pc.count) return;
    if (stages_[pc.sender].done <= prog_.producer[pc.first + ch.next]) return;  // not produced yet
    const std::uint32_t cap = pc.capacity;
    if (cap > 0 && ch.next >= cap && ch.consumed < ch.next - cap + 1) return;  // receiver full
    ch.busy = true;
    ch.start = now;
    const double t_lat = now + latencies_.of(pc, ch.next);
    double end = t_lat;  // a message of 0 bytes takes just the latency: finish(t, 0) is t
    if (pc.transfer == Transfer::Rate) {
      end = ch.rate.finish(t_lat, prog_.message_bytes(pc, ch.next));
      if (end == kNever) rate_never(c, now);
    } else if (pc.transfer == Transfer::Bucket) {
      end = bucket_finish(c, t_lat, prog_.message_bytes(pc, ch.next));
      if (end == kNever) rate_never(c, now);
    }
    events_.push(end, static_cast<std::uint32_t>(S_) + c);
  }

  // A transfer's end behind channel c's token bucket; out of line, so that the common
  // path compiles as it would without buckets.
  [[gnu::noinline]] double bucket_finish(std::uint32_t c, double t, double bytes) {
    return bucket_[c].finish(channels_[c].rate, t, bytes);
  }

  void transfer_end(std::uint32_t c, double now) {
    ChannelState& ch = channels_[c];
    const ProgramChannel& pc = prog_.channels[c];
    ch.busy = false;
    ch.busy_s += now - ch.start;
    if constexpr (kRecord) {
      const Op op = message_op(pc, ch.next);
      const double ready = op_end_[prog_.stages[pc.sender].begin + prog_.producer[pc.first + ch.next]];
      timeline_.transfers.push_back({static_cast<std::int32_t>(pc.sender), static_cast<std::int32_t>(pc.receiver),
                                     iteration_, op.micro_batch, ready, ch.start, ch.start + latencies_.of(pc, ch.next), now,
                                     prog_.message_bytes(pc, ch.next), op.model_stage, op.phase != Phase::Forward});
    }
    count(stages_[pc.receiver], prog_.stages[pc.receiver], prog_.msg_term[pc.first + ch.next], 1);
    ++ch.next;
    ++ch.delivered;
    ++result_.transfers;
    queue_change(c, now, 1);
    mem_update(pc.receiver, now);
    try_start_stage(pc.receiver, now);
    try_start_channel(c, now);
  }

  // --- levels -----------------------------------------------------------------

  // Count `term` of the stage changes by delta (+1 or -1).
  void count(StageState& st, const ProgramStage& ps, std::uint32_t term, double delta) {
    counts_[ps.terms + term] += delta;
    st.memory += prog_.terms[ps.terms + term] * delta;
  }

  // The stage's memory from its counts (stage_memory), after some of them changed.
  void mem_update(std::uint32_t s, double now) {
    StageState& st = stages_[s];
    const ProgramStage& ps = prog_.stages[s];
    const double value = st.memory_exact ? st.memory
                                         : stage_memory(ps.static_bytes, &prog_.terms[ps.terms], &counts_[ps.terms],
                                                        ps.nterms);
    const double before = st.mem.cur;
    const double at = st.mem.last_t;
    if (st.mem.set(now, value) && kRecord && before != st.last_mem_recorded) {
      timeline_.counters.push_back({static_cast<std::int32_t>(s), Counter::Memory, -1, at, before});
      st.last_mem_recorded = before;
    }
  }

  void queue_change(std::uint32_t c, double now, double delta) {
    ChannelState& ch = channels_[c];
    const double before = ch.queue.cur;
    const double at = ch.queue.last_t;
    if (ch.queue.change(now, delta) && kRecord) {
      const ProgramChannel& pc = prog_.channels[c];
      timeline_.counters.push_back({static_cast<std::int32_t>(pc.receiver), Counter::QueueDepth,
                                    static_cast<std::int32_t>(pc.sender), at, before});
    }
  }

  // --- errors -----------------------------------------------------------------

  std::string name(const Op& op) const { return sc_.schedule.placement.empty() ? op_name(op) : action_name(op); }

  [[noreturn]] void speed_never(std::uint32_t s, const ProgramOp& op, double now) const {
    throw SimError(fmt::format(
        "{}: stages: speed of stage {} stays 0 forever; {} (iteration {}) started at t={} can never end",
        sc_.network.source, s, name(prog_.op_of(s, op)), iteration_, now));
  }

  [[noreturn]] void rate_never(std::uint32_t c, double now) const {
    const ProgramChannel& pc = prog_.channels[c];
    throw SimError(fmt::format(
        "{}: channels: rate of channel {} -> {} stays 0 forever; the transfer of micro-batch {} "
        "({} bytes, iteration {}) started at t={} can never end",
        sc_.network.source, pc.sender, pc.receiver, message_op(pc, channels_[c].next).micro_batch,
        prog_.msg_bytes[pc.first + channels_[c].next], iteration_, now));
  }

  // What the head message of a channel waits for.
  std::string head_waits(const ProgramChannel& pc, const ChannelState& ch) const {
    const std::uint32_t producer = prog_.producer[pc.first + ch.next];
    if (stages_[pc.sender].done <= producer)
      return fmt::format("stage {} has not run {} yet", pc.sender,
                         name(prog_.op_of(pc.sender, prog_.ops[stages_[pc.sender].begin + producer])));
    return fmt::format("the channel is full (capacity {}) until stage {} consumes an earlier message", pc.capacity,
                       pc.receiver);
  }

  std::string waits_for(std::uint32_t s) const {
    const StageState& st = stages_[s];
    const ProgramOp& op = prog_.ops[st.next];
    const Op named = prog_.op_of(s, op);
    const OpClass& c = prog_.stages[s].cls(prog_.classes, op);
    if (c.in == kLocal)
      return fmt::format("stage {} waits for {}, which needs {} on the same stage, ordered after it", s, name(named),
                         name(prog_.op_of(s, prog_.ops[st.begin + op.dep])));
    const ProgramChannel& pc = prog_.channels[c.in];
    const ChannelState& ch = channels_[c.in];
    const char* what = named.phase == Phase::Forward ? "activation" : "gradient";
    const std::int32_t head_mb = message_op(pc, ch.next).micro_batch;
    std::string head = head_waits(pc, ch);
    if (head_mb != named.micro_batch)
      head = fmt::format("channel {} -> {} delivers micro-batch {} first, and {}", pc.sender, pc.receiver, head_mb,
                         head);
    return fmt::format("stage {} waits for {}, which needs the {} of micro-batch {} from stage {}: {}", s, name(named),
                       what, named.micro_batch, pc.sender, head);
  }

  std::string deadlock_report() const {
    std::string out = fmt::format("deadlock in iteration {}:", iteration_);
    for (int s = 0; s < S_; ++s) {
      if (stages_[s].next == stages_[s].end) continue;
      out += fmt::format(" {};", waits_for(static_cast<std::uint32_t>(s)));
    }
    out.pop_back();
    return out;
  }

  void finish(double total) {
    std::vector<StageTotals> stages(S_);
    for (int s = 0; s < S_; ++s) {
      const auto& st = stages_[s];
      stages[s] = {st.busy_s, st.inflight.final_peak(), st.mem.final_peak()};
      if (kRecord && st.mem.cur != st.last_mem_recorded)
        timeline_.counters.push_back({s, Counter::Memory, -1, st.mem.last_t, st.mem.cur});
    }
    std::vector<ChannelTotals> channels(channels_.size());
    for (std::size_t c = 0; c < channels_.size(); ++c) {
      const auto& ch = channels_[c];
      channels[c] = {ch.busy_s, ch.queue.final_peak()};
      if constexpr (kRecord) {
        const auto& pc = prog_.channels[c];
        timeline_.counters.push_back({static_cast<std::int32_t>(pc.receiver), Counter::QueueDepth,
                                      static_cast<std::int32_t>(pc.sender), ch.queue.last_t, ch.queue.cur});
        if (pc.spec && pc.spec->rate)
          record_rate(*pc.spec->rate, sc_.start_time_s, sc_.start_time_s + total, pc, timeline_.rates);
      }
    }
    fill_result(sc_, prog_, total, stages, channels, result_);
  }

  const Scenario& sc_;
  const Program& prog_;
  int S_;
  bool record_order_;
  int iteration_ = 0;
  std::vector<StageState> stages_;
  std::vector<ChannelState> channels_;
  std::vector<TokenBucket> bucket_;  // per channel: those whose transfer is Transfer::Bucket
  std::vector<double> counts_;           // per memory term of every stage (Program::terms)
  std::vector<std::uint32_t> pending_;   // dynamic W fill: the stages' FIFOs of pending W ops
  EventList events_;
  SimResult result_;
  Timeline timeline_;      // recorded only when asked for
  std::vector<double> op_end_;  // with a timeline: when each op (Program::ops) last ended
  OpDurations durations_;  // the stage timing trace's durations, per iteration
  MessageLatencies latencies_;  // the message timing trace's latencies, per iteration
};

}  // namespace

std::optional<SimResult> run_event_engine(const Scenario& scenario, const Program& program, const SimOptions& options) {
  const auto run = [&]<bool kRecord, bool kDynamicW>() {
    return Engine<kRecord, kDynamicW>(scenario, program, options).run();
  };
  if (options.timeline)
    return program.dynamic_w ? run.operator()<true, true>() : run.operator()<true, false>();
  return program.dynamic_w ? run.operator()<false, true>() : run.operator()<false, false>();
}

}  // namespace adagrouper::sim::eval
