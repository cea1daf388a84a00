#include "engine.h"

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <limits>
#include <tuple>

#include <fmt/format.h>

#include "error.h"
#include "event_list.h"
#include "program.h"

namespace adagrouper::sim {

Scenario make_scenario(const Pipeline& pipeline, Network network, Schedule schedule,
                       int micro_batch_size, int iterations) {
  Scenario sc;
  sc.pipeline_name = pipeline.name;
  sc.stages = pipeline.at(micro_batch_size);
  sc.global_batch_size = pipeline.global_batch_size;
  sc.micro_batch_size = micro_batch_size;
  if (iterations < 1) throw InputError(fmt::format("--iterations: must be >= 1, got {}", iterations));
  sc.iterations = iterations;
  sc.memory_limit_bytes = pipeline.memory_limit_bytes;
  if (network.num_stages() != pipeline.num_stages())
    throw InputError(fmt::format("{}: describes {} stages, {} has {}", network.source, network.num_stages(),
                                 pipeline.source, pipeline.num_stages()));
  validate_schedule(schedule, pipeline.num_stages(), sc.micro_batches(),
                    schedule.name == "custom" ? std::string("schedule file") : "--schedule " + schedule.name);
  sc.network = std::move(network);
  sc.schedule = std::move(schedule);
  return sc;
}

void set_op_timings(Scenario& sc, std::vector<OpTiming> timings, const std::string& source) {
  const int S = sc.num_stages(), M = sc.micro_batches();
  auto where = [&](const OpTiming& t) { return t.line > 0 ? fmt::format("{}:{}", source, t.line) : source; };
  for (const OpTiming& t : timings) {
    if (t.iteration < 0) throw InputError(fmt::format("{}: iteration {} is negative", where(t), t.iteration));
    if (t.stage < 0 || t.stage >= S)
      throw InputError(fmt::format("{}: stage {} does not exist (the pipeline has {} stages)", where(t), t.stage, S));
    if (t.micro_batch < 0 || t.micro_batch >= M)
      throw InputError(fmt::format("{}: micro_batch {} does not exist (M = {})", where(t), t.micro_batch, M));
    if (!(t.duration_s >= 0) || !std::isfinite(t.duration_s))
      throw InputError(fmt::format("{}: duration_s must be a finite number >= 0, got {}", where(t), t.duration_s));
  }
  auto key = [](const OpTiming& t) { return std::tuple(t.iteration, t.stage, t.micro_batch, t.phase); };
  std::stable_sort(timings.begin(), timings.end(),
                   [&](const OpTiming& a, const OpTiming& b) { return key(a) < key(b); });
  for (std::size_t i = 1; i < timings.size(); ++i)
    if (key(timings[i]) == key(timings[i - 1]))
      throw InputError(fmt::format("{}: {} of stage {} in iteration {} is listed twice (also on line {})",
                                   where(timings[i]), op_name({timings[i].phase, timings[i].micro_batch}),
                                   timings[i].stage, timings[i].iteration, timings[i - 1].line));
  sc.op_timings = std::move(timings);
}

namespace {

// A level (memory bytes, micro-batches in flight, queue depth) whose peak follows the
// SPEC's rule "at equal times, releases happen before allocations": only the value
// that settles at each instant can be a peak, so the peak is taken when time moves on.
struct Level {
  double cur = 0, peak = 0, last_t = 0;
  // Returns true when time moved on, i.e. `cur` settled at `last_t` before this change.
  bool change(double t, double delta) {
    bool moved = false;
    if (t > last_t) {
      if (cur > peak) peak = cur;
      moved = true;
    }
    last_t = t;
    cur += delta;
    return moved;
  }
  double final_peak() const { return std::max(peak, cur); }
};

struct StageState {
  std::uint32_t begin = 0, end = 0;  // this stage's ops in Program::ops
  std::uint32_t next = 0;            // absolute index of the next op to start
  std::uint32_t done = 0;            // ops completed this iteration
  bool busy = false;
  double op_start = 0;
  double finished_at = 0;
  bool unit_speed = true;
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
  Engine(const Scenario& sc, const SimOptions& opt)
      : sc_(sc), prog_(build_program(sc)), S_(sc.num_stages()), record_(opt.timeline) {
    if (static_cast<std::uint64_t>(3) * S_ >= EventList::kMaxTargets)
      throw InputError(fmt::format("the pipeline has {} stages; the engine supports fewer than {}", S_,
                                   EventList::kMaxTargets / 3));
    stages_.resize(S_);
    for (int s = 0; s < S_; ++s) {
      auto& st = stages_[s];
      st.begin = prog_.stages[s].begin;
      st.end = prog_.stages[s].end;
      const RateTrace& sp = sc.network.speed[s];
      st.unit_speed = sp.is_constant() && sp.values()[0] == 1.0;
      st.speed = RateCursor(sp);
      st.mem.cur = st.mem.peak = sc.stages[s].static_bytes;
    }
    channels_.resize(prog_.channels.size());
    events_ = EventList(static_cast<std::uint32_t>(stages_.size() + channels_.size()));
    for (std::size_t c = 0; c < channels_.size(); ++c) {
      const ChannelSpec& spec = *prog_.channels[c].spec;
      if (!spec.unlimited) channels_[c].rate = RateCursor(spec.rate);
    }
    if (!sc.op_timings.empty()) {
      position_.resize(S_);
      for (int s = 0; s < S_; ++s) {
        const auto& order = sc.schedule.stages[s];
        position_[s].resize(order.size());
        for (std::size_t i = 0; i < order.size(); ++i)
          position_[s][2 * order[i].micro_batch + (order[i].phase == Phase::Backward)] = static_cast<std::uint32_t>(i);
      }
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
  // Durations of this iteration's ops: the profile's, except where the stage timing
  // trace lists the op (a dense array, filled only for iterations the trace covers).
  void load_op_timings(int it) {
    has_timings_ = false;
    auto& list = sc_.op_timings;
    while (timing_cursor_ < list.size() && list[timing_cursor_].iteration < it) ++timing_cursor_;
    if (timing_cursor_ == list.size() || list[timing_cursor_].iteration != it) return;
    if (op_duration_.empty()) op_duration_.resize(prog_.ops.size());
    for (int s = 0; s < S_; ++s) {
      const ProgramStage& ps = prog_.stages[s];
      for (std::uint32_t i = ps.begin; i < ps.end; ++i) op_duration_[i] = prog_.ops[i].backward ? ps.bwd : ps.fwd;
    }
    for (; timing_cursor_ < list.size() && list[timing_cursor_].iteration == it; ++timing_cursor_) {
      const OpTiming& t = list[timing_cursor_];
      op_duration_[prog_.stages[t.stage].begin + position_[t.stage][2 * t.micro_batch + (t.phase == Phase::Backward)]] =
          t.duration_s;
    }
    has_timings_ = true;
  }

  double run_iteration(double t0) {
    load_op_timings(iteration_);
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
      end = std::max(end, st.finished_at + sc_.stages[s].opt);
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
      mem_change(s, now, -prog_.channels[in].bytes);
      try_start_channel(in, now);  // may free capacity
    }
    if (!op.backward) {
      st.inflight.change(now, 1);
      mem_change(s, now, ps.act);
    }
    const double duration = has_timings_ ? op_duration_[st.next] : op.backward ? ps.bwd : ps.fwd;
    double end;
    if (st.unit_speed) {
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
      mem_change(s, now, -ps.act);
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
    mem_change(pc.receiver, now, pc.bytes);
    try_start_stage(pc.receiver, now);
    try_start_channel(c, now);
  }

  // --- levels -----------------------------------------------------------------

  void mem_change(std::uint32_t s, double now, double delta) {
    StageState& st = stages_[s];
    const double before = st.mem.cur;
    const double at = st.mem.last_t;
    if (st.mem.change(now, delta) && record_ && before != st.last_mem_recorded) {
      timeline_.counters.push_back({static_cast<std::int32_t>(s), 0, -1, at, before});
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
      v.push_back({static_cast<std::int32_t>(pc.receiver), 1, static_cast<std::int32_t>(pc.sender), at, before});
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
    auto& r = result_;
    r.pipeline = sc_.pipeline_name;
    r.schedule = sc_.schedule.name;
    r.k = sc_.schedule.k;
    r.micro_batch_size = sc_.micro_batch_size;
    r.micro_batches = sc_.micro_batches();
    r.global_batch_size = sc_.global_batch_size;
    r.num_stages = S_;
    r.iterations = sc_.iterations;
    r.start_time_s = sc_.start_time_s;
    r.memory_limit_bytes = sc_.memory_limit_bytes;
    r.total_time_s = total;
    r.stages.resize(S_);
    for (int s = 0; s < S_; ++s) {
      auto& st = stages_[s];
      auto& out = r.stages[s];
      out.stage = s;
      out.busy_s = st.busy_s;
      out.bubble_s = total - st.busy_s;
      out.optimizer_s = sc_.stages[s].opt * sc_.iterations;
      out.peak_inflight = static_cast<int>(st.inflight.final_peak());
      out.peak_memory_bytes = st.mem.final_peak();
      if (record_ && st.mem.cur != st.last_mem_recorded)
        timeline_.counters.push_back({s, 0, -1, st.mem.last_t, st.mem.cur});
    }
    r.channels.resize(channels_.size());
    for (std::size_t c = 0; c < channels_.size(); ++c) {
      const auto& pc = prog_.channels[c];
      auto& out = r.channels[c];
      out.from = static_cast<int>(pc.sender);
      out.to = static_cast<int>(pc.receiver);
      out.busy_s = channels_[c].busy_s;
      out.peak_queue_depth = static_cast<int>(channels_[c].queue.final_peak());
      out.messages = static_cast<std::uint64_t>(pc.count) * sc_.iterations;
      out.bytes = pc.bytes * pc.count * sc_.iterations;
      if (record_)
        timeline_.counters.push_back({static_cast<std::int32_t>(pc.receiver), 1,
                                        static_cast<std::int32_t>(pc.sender), channels_[c].queue.last_t,
                                        channels_[c].queue.cur});
    }
  }

  const Scenario& sc_;
  Program prog_;
  int S_;
  bool record_;
  int iteration_ = 0;
  std::vector<StageState> stages_;
  std::vector<ChannelState> channels_;
  EventList events_;
  SimResult result_;
  Timeline timeline_;  // recorded only when asked for
  // Stage timing trace: the next entry to apply, and this iteration's durations.
  std::size_t timing_cursor_ = 0;
  bool has_timings_ = false;
  std::vector<double> op_duration_;
  std::vector<std::vector<std::uint32_t>> position_;  // [stage][2m + phase]: index in the stage's order
};

}  // namespace

SimResult simulate(const Scenario& scenario, const SimOptions& options) {
  Engine engine(scenario, options);
  return engine.run();
}

}  // namespace adagrouper::sim
