// The event engine: the run in time order, driven by one event list ordered by
// (time, sequence) (docs/model.md §8).
#include <algorithm>
#include <cmath>
#include <cstdint>
#include <limits>
#include <tuple>

#include <fmt/format.h>

#include "../error.h"
#include "evaluator.h"
#include "event_list.h"
#include "op_durations.h"
#include "totals.h"

namespace adagrouper::sim::eval {

namespace {

struct StageState {
  std::uint32_t begin = 0, end = 0;  // this stage's ops in Program::ops
  std::uint32_t next = 0;            // absolute index of the next op to start
  std::uint32_t done = 0;            // ops completed this iteration
  bool busy = false;
  double op_start = 0;
  double finished_at = 0;
  RateCursor speed;
  Level mem, inflight;
  double last_mem_recorded = -1;
  double busy_s = 0;
};

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

class Engine {
 public:
  Engine(const Scenario& sc, const Program& prog, const SimOptions& opt)
      : sc_(sc), prog_(prog), S_(sc.num_stages()), record_(opt.timeline), durations_(sc_, prog_) {
    if (static_cast<std::uint64_t>(3) * S_ >= EventList::kMaxTargets)
      throw InputError(fmt::format("the pipeline has {} stages; the engine supports fewer than {}", S_,
                                   EventList::kMaxTargets / 3));
    stages_.resize(S_);
    for (int s = 0; s < S_; ++s) {
      auto& st = stages_[s];
      st.begin = prog_.stages[s].begin;
      st.end = prog_.stages[s].end;
      st.speed = RateCursor(sc.network.speed(s));
      st.mem.cur = st.mem.peak = prog_.stages[s].memory.static_bytes;
    }
    channels_.resize(prog_.channels.size());
    events_ = EventList(static_cast<std::uint32_t>(stages_.size() + channels_.size()));
    for (std::size_t c = 0; c < channels_.size(); ++c) {
      const ChannelSpec& spec = *prog_.channels[c].spec;
      if (!spec.unlimited()) channels_[c].rate = RateCursor(*spec.rate);
    }
    if (record_) {
      timeline_.ops.reserve(prog_.ops.size() * sc.iterations);
      timeline_.transfers.reserve(prog_.producer.size() * sc.iterations);
    }
  }

  SimResult run() {
    double t = sc_.start_time_s;
    result_.iteration_times_s.reserve(sc_.iterations);
    for (int it = 0; it < sc_.iterations; ++it) {
      iteration_ = it;
      const double end = run_iteration(t);
      result_.iteration_times_s.push_back(end - t);
      t = end;
    }
    finish(t - sc_.start_time_s);
    if (record_) result_.timeline = std::move(timeline_);
    return std::move(result_);
  }

 private:
  double run_iteration(double t0) {
    durations_.load(iteration_);
    for (auto& st : stages_) {
      st.next = st.begin;
      st.done = 0;
      st.finished_at = t0;
    }
    for (auto& ch : channels_) ch.next = ch.delivered = ch.consumed = 0;
    for (int s = 0; s < S_; ++s) try_start_stage(static_cast<std::uint32_t>(s), t0);

    const std::uint32_t nstages = static_cast<std::uint32_t>(S_);
    while (!events_.empty()) {
      const Event e = events_.pop();
      if (e.target < nstages) {
        op_end(e.target, e.time);
      } else {
        transfer_end(e.target - nstages, e.time);
      }
    }

    double end = t0;
    for (int s = 0; s < S_; ++s) {
      const auto& st = stages_[s];
      if (st.next != st.end) throw SimError(deadlock_report());
      end = std::max(end, st.finished_at + sc_.model_stages[s].opt);
    }
    return end;
  }

  // --- stages ---------------------------------------------------------------

  void try_start_stage(std::uint32_t s, double now) {
    StageState& st = stages_[s];
    if (st.busy || st.next == st.end) return;
    const ProgramOp op = prog_.ops[st.next];
    const ProgramStage& ps = prog_.stages[s];
    const std::uint32_t in = ps.in_channel(op);
    if (in != kNoChannel) {
      if (channels_[in].delivered <= op.dep_index) return;  // its message has not arrived
    } else if (op.backward && st.done <= op.dep_index) {
      return;  // last stage: F(S-1, m) has not ended
    }
    st.busy = true;
    st.op_start = now;
    if (in != kNoChannel) {
      ++channels_[in].consumed;
      queue_change(in, now, -1);
      mem_update(s, now);
      try_start_channel(in, now);  // may free capacity
    }
    if (!op.backward) {
      st.inflight.change(now, 1);
      mem_update(s, now);
    }
    const double duration = durations_.has() ? durations_.at(st.next) : ps.duration(op);
    double end;
    if (ps.unit_speed) {
      end = now + duration;
    } else {
      end = st.speed.finish(now, duration);
      if (end == kNever) speed_never(s, op, now);
    }
    events_.push(end, s);
  }

  void op_end(std::uint32_t s, double now) {
    StageState& st = stages_[s];
    const ProgramOp op = prog_.ops[st.next];
    const ProgramStage& ps = prog_.stages[s];
    st.busy = false;
    st.busy_s += now - st.op_start;
    if (record_)
      timeline_.ops.push_back({static_cast<std::int32_t>(s), iteration_, {op.phase(), op.micro_batch},
                               st.op_start, now});
    ++st.next;
    ++st.done;
    ++result_.compute_ops;
    if (op.backward) {
      st.inflight.change(now, -1);
      mem_update(s, now);
    }
    const std::uint32_t out = ps.out_channel(op);
    if (out != kNoChannel) try_start_channel(out, now);
    if (st.next == st.end) {
      st.finished_at = now;
    } else {
      try_start_stage(s, now);
    }
  }

  // --- channels ---------------------------------------------------------------

  // Micro-batch of the channel's n-th message.
  std::int32_t message_micro_batch(const ProgramChannel& pc, std::uint32_t n) const {
    return prog_.ops[prog_.stages[pc.sender].begin + prog_.producer[pc.first + n]].micro_batch;
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
    const double t_lat = now + pc.latency_s;
    double end = t_lat;
    if (!pc.unlimited) {
      end = ch.rate.finish(t_lat, pc.bytes);
      if (end == kNever) rate_never(c, now);
    }
    events_.push(end, static_cast<std::uint32_t>(S_) + c);
  }

  void transfer_end(std::uint32_t c, double now) {
    ChannelState& ch = channels_[c];
    const ProgramChannel& pc = prog_.channels[c];
    ch.busy = false;
    ch.busy_s += now - ch.start;
    if (record_)
      timeline_.transfers.push_back({static_cast<std::int32_t>(pc.sender), static_cast<std::int32_t>(pc.receiver),
                                     iteration_, message_micro_batch(pc, ch.next), ch.start, now, pc.bytes});
    ++ch.next;
    ++ch.delivered;
    ++result_.transfers;
    queue_change(c, now, 1);
    mem_update(pc.receiver, now);
    try_start_stage(pc.receiver, now);
    try_start_channel(c, now);
  }

  // --- levels -----------------------------------------------------------------

  // The stage's memory from its counts (stage_memory), after one of them changed.
  void mem_update(std::uint32_t s, double now) {
    StageState& st = stages_[s];
    const ProgramStage& ps = prog_.stages[s];
    const double fwd_depth = ps.in[0] == kNoChannel ? 0.0 : channels_[ps.in[0]].queue.cur;
    const double bwd_depth = ps.in[1] == kNoChannel ? 0.0 : channels_[ps.in[1]].queue.cur;
    const double value = stage_memory(ps.memory, st.inflight.cur, fwd_depth, bwd_depth);
    const double before = st.mem.cur;
    const double at = st.mem.last_t;
    if (st.mem.set(now, value) && record_ && before != st.last_mem_recorded) {
      timeline_.counters.push_back({static_cast<std::int32_t>(s), Counter::Memory, -1, at, before});
      st.last_mem_recorded = before;
    }
  }

  void queue_change(std::uint32_t c, double now, double delta) {
    ChannelState& ch = channels_[c];
    const double before = ch.queue.cur;
    const double at = ch.queue.last_t;
    if (ch.queue.change(now, delta) && record_) {
      const ProgramChannel& pc = prog_.channels[c];
      auto& v = timeline_.counters;
      v.push_back({static_cast<std::int32_t>(pc.receiver), Counter::QueueDepth, static_cast<std::int32_t>(pc.sender), at,
                   before});
    }
  }

  // --- errors -----------------------------------------------------------------

  [[noreturn]] void speed_never(std::uint32_t s, const ProgramOp& op, double now) const {
    throw SimError(fmt::format(
        "{}: stages: speed of stage {} stays 0 forever; {} (iteration {}) started at t={} can never end",
        sc_.network.source, s, op_name({op.phase(), op.micro_batch}), iteration_, now));
  }

  [[noreturn]] void rate_never(std::uint32_t c, double now) const {
    const ProgramChannel& pc = prog_.channels[c];
    throw SimError(fmt::format(
        "{}: channels: rate of channel {} -> {} stays 0 forever; the transfer of micro-batch {} "
        "({} bytes, iteration {}) started at t={} can never end",
        sc_.network.source, pc.sender, pc.receiver, message_micro_batch(pc, channels_[c].next), pc.bytes,
        iteration_, now));
  }

  std::string waits_for(std::uint32_t s) const {
    const StageState& st = stages_[s];
    const ProgramOp& op = prog_.ops[st.next];
    const std::string name = op_name({op.phase(), op.micro_batch});
    const std::uint32_t in = prog_.stages[s].in_channel(op);
    if (in == kNoChannel)
      return fmt::format("stage {} waits for {}, which needs F{} on the same stage, ordered after it", s, name,
                         op.micro_batch);
    const ProgramChannel& pc = prog_.channels[in];
    const ChannelState& ch = channels_[in];
    const char* what = op.backward ? "gradient" : "activation";
    const std::int32_t head_mb = message_micro_batch(pc, ch.next);
    const std::uint32_t producer = prog_.producer[pc.first + ch.next];
    std::string head;
    if (stages_[pc.sender].done <= producer) {
      const ProgramOp& p = prog_.ops[stages_[pc.sender].begin + producer];
      head = fmt::format("stage {} has not run {} yet", pc.sender, op_name({p.phase(), p.micro_batch}));
    } else {
      head = fmt::format("the channel is full (capacity {}) until stage {} consumes an earlier message",
                         pc.capacity, pc.receiver);
    }
    if (head_mb != op.micro_batch)
      head = fmt::format("channel {} -> {} delivers micro-batch {} first, and {}", pc.sender, pc.receiver, head_mb,
                         head);
    return fmt::format("stage {} waits for {}, which needs the {} of micro-batch {} from stage {}: {}", s, name,
                       what, op.micro_batch, pc.sender, head);
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
      if (record_ && st.mem.cur != st.last_mem_recorded)
        timeline_.counters.push_back({s, Counter::Memory, -1, st.mem.last_t, st.mem.cur});
    }
    std::vector<ChannelTotals> channels(channels_.size());
    for (std::size_t c = 0; c < channels_.size(); ++c) {
      const auto& ch = channels_[c];
      channels[c] = {ch.busy_s, ch.queue.final_peak()};
      if (record_) {
        const auto& pc = prog_.channels[c];
        timeline_.counters.push_back({static_cast<std::int32_t>(pc.receiver), Counter::QueueDepth, static_cast<std::int32_t>(pc.sender),
                                      ch.queue.last_t, ch.queue.cur});
      }
    }
    fill_result(sc_, prog_, total, stages, channels, result_);
  }

  const Scenario& sc_;
  const Program& prog_;
  int S_;
  bool record_;
  int iteration_ = 0;
  std::vector<StageState> stages_;
  std::vector<ChannelState> channels_;
  EventList events_;
  SimResult result_;
  Timeline timeline_;  // recorded only when asked for
  OpDurations durations_;  // the stage timing trace's durations, per iteration
};

}  // namespace

std::optional<SimResult> run_event_engine(const Scenario& scenario, const Program& program, const SimOptions& options) {
  Engine engine(scenario, program, options);
  return engine.run();
}

}  // namespace adagrouper::sim::eval
