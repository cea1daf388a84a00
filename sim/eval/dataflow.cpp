// The dataflow evaluator: the execution model of docs/model.md §3 computed without an
// event list (docs/model.md, "Two evaluators").
//
// Every time in the model is a maximum of times already known: an op starts at
// max(end of the previous op on its stage, arrival of its message or end of the local op
// it waits for); a transfer starts at max(end of its producing op, end of the previous
// transfer on the channel, start of the op that consumed the message Q places earlier).
// So the times can be computed in any order that respects those dependencies, not only
// in time order. This evaluator advances each stage as far as its inputs allow (a work
// list of stages whose input changed), pushing each produced message through its
// channel at once; when a stage has finished the iteration it replays the stage's
// memory, in-flight and queue-depth changes in time order from the recorded times (a
// few sorted streams, no heap).
//
// Dynamic W fill fits the same scheme: a stage decides between a pending W and its next
// listed op only from that op's ready time, which W ops never change (they send
// nothing), so the decision is made as soon as the ready time is known.
//
// It gives the same numbers as the event engine, to the last bit: every rate and speed
// cursor sees the same queries in the same order (a channel's transfers and a stage's
// ops are evaluated in their own order in both), and the levels' peaks do not depend on
// the order of changes at one instant (accounting.h). Tests check that on seeded random
// scenarios. It records no timeline; deadlocks and rates that stay 0 forever are left
// to the event engine, which reports them (simulate() runs it when this one gives up).
#include <algorithm>
#include <array>
#include <cstdint>
#include <type_traits>
#include <limits>
#include <vector>

#include "../rate.h"
#include "evaluator.h"
#include "op_durations.h"
#include "totals.h"

namespace adagrouper::sim::eval {
namespace {

constexpr double kInf = std::numeric_limits<double>::infinity();

struct StageRun {
  std::uint32_t begin = 0, end = 0;
  std::uint32_t next = 0;  // absolute index of the next listed op to evaluate
  double free = 0;         // end of the previous op
  bool queued = false;     // on the work list
  RateCursor speed;
  double busy_s = 0;
  // Dynamic W fill: its pending W ops (a FIFO in pending_) and the order it ran its ops
  // in (in executed_), both from `pending` / `executed` on.
  std::uint32_t pending = 0, pending_head = 0, pending_tail = 0;
  std::uint32_t executed = 0, executed_end = 0;
  double last_t = 0;  // time of its last level change (replay_levels)
  double peak_memory = 0, peak_inflight = 0;
};

struct ChannelRun {
  std::uint32_t next = 0;      // next message to transfer = messages delivered
  std::uint32_t consumed = 0;  // messages whose consuming op has been evaluated (with a capacity)
  std::uint32_t arrivals = 0;  // where its arrival times start in arrival_
  double free = 0;             // end of the previous transfer
  RateCursor rate;
  double busy_s = 0;
  double peak_depth = 0;
};

// One input channel of a stage, as the level replay reads it.
struct ReplayInput {
  const double* arrival;      // its arrival times, then +inf
  const std::uint16_t* term;  // the memory term each message waits in
  std::uint32_t n;            // arrivals counted so far
  std::uint32_t at_t;         // where the arrivals at the current op event's time start
  std::int32_t depth;         // messages waiting
  std::int32_t peak;          // the largest depth that settled
  std::uint32_t channel;      // kNoChannel: padding
};

// An arrival stream that never arrives: the padding of a replay with fewer inputs than
// its room.
constexpr double kNoArrival[1] = {kInf};

// The replay of one stage's levels (memory, micro-batches in flight, receive-buffer
// depths) in time order from its recorded times, once it has finished the iteration
// (every message it consumes has arrived then): its ops' starts (a consumed message
// leaves its buffer, a forward's activations arrive), its backward ops' ends (their
// activations leave), and the arrivals on its input channels. The peaks take the values
// that settle when time moves on (accounting.h), for all of the stage's levels at once.
// Between two op events only arrivals happen, and they only increase the levels, so of
// the values they settle at the last is the largest: the arrivals before an op event are
// counted, the peaks are taken once, then the arrivals at the event's own instant join it.
//
// NI inputs and NT memory terms of room, fixed so that the loops unroll (a stage with
// fewer is padded: an input that never arrives, terms of 0 bytes, which add +0.0 and so
// change no sum); NI = 0 sizes both from the stage.
template <std::size_t NI, std::size_t NT>
class StageReplay {
 public:
  StageReplay(const Program& prog, const ProgramStage& ps, std::vector<double>& counts,
              const std::vector<double>& arrival, const std::vector<ChannelRun>& channels, ReplayInput* room,
              double last_t)
      : static_bytes_(ps.static_bytes), last_t_(last_t), ninputs_(ps.ninputs), nterms_(ps.nterms) {
    if constexpr (NI > 0) {
      bytes_.fill(0.0);
      counts_.fill(0.0);
      std::copy_n(&prog.terms[ps.terms], ps.nterms, bytes_.begin());
      for (std::size_t k = 0; k < NI; ++k) in_[k] = {kNoArrival, nullptr, 0, 0, 0, 0, kNoChannel};
    } else {
      bytes_ = &prog.terms[ps.terms];
      counts_ = &counts[ps.terms];
      std::fill(counts_, counts_ + nterms(), 0.0);
      in_ = room;
    }
    for (std::uint32_t k = 0; k < ps.ninputs; ++k) {
      const std::uint32_t c = prog.inputs[ps.inputs + k];
      in_[k] = {&arrival[channels[c].arrivals], &prog.msg_term[prog.channels[c].first], 0, 0, 0, 0, c};
    }
  }

  // Brings the levels to an op event at time t: the arrivals before t settle (the peaks
  // are taken), those at t join the event.
  void until(double t) {
    bool before = t > last_t_;  // time moved on, or something arrived before t
    for (std::uint32_t k = 0; k < ninputs(); ++k) {
      ReplayInput& in = in_[k];
      const std::uint32_t n0 = in.n;
      for (; in.arrival[in.n] < t; ++in.n) counts_[in.term[in.n]] += 1;
      in.depth += static_cast<std::int32_t>(in.n - n0);
      before |= in.n != n0;
      in.at_t = in.n;
      while (in.arrival[in.n] == t) ++in.n;
    }
    if (before) settle();
    for (std::uint32_t k = 0; k < ninputs(); ++k) {
      ReplayInput& in = in_[k];
      for (std::uint32_t i = in.at_t; i < in.n; ++i) counts_[in.term[i]] += 1;
      in.depth += static_cast<std::int32_t>(in.n - in.at_t);
    }
    last_t_ = t;
  }

  void start(const OpClass& c) {
    if (c.in < kLocal) {
      counts_[c.slot_term] -= 1;
      in_[c.input].depth -= 1;
    }
    if (c.phase == Phase::Forward) {
      counts_[c.act_term] += 1;
      ++inflight_;
    }
  }

  void end(const OpClass& c) {
    if (c.phase == Phase::BackwardInput) {
      counts_[c.act_term] -= 1;
      counts_[c.act_term + 1] += 1;
      return;
    }
    counts_[c.phase == Phase::Backward ? c.act_term : c.act_term + 1] -= 1;
    --inflight_;
  }

  void settle() {
    peak_memory_ = std::max(peak_memory_, stage_memory(static_bytes_, &bytes_[0], &counts_[0], nterms()));
    peak_inflight_ = std::max(peak_inflight_, inflight_);
    for (std::uint32_t k = 0; k < ninputs(); ++k) in_[k].peak = std::max(in_[k].peak, in_[k].depth);
  }

  // The settle after the last op event.
  void settle_last() { settle(); }

  // The stage's peaks into its totals (and the time of its last level change), the
  // depths' into its input channels'.
  void finish(double& peak_memory, double& peak_inflight, double& last_t, std::vector<ChannelRun>& channels) const {
    last_t = last_t_;
    peak_memory = std::max(peak_memory, peak_memory_);
    peak_inflight = std::max(peak_inflight, static_cast<double>(peak_inflight_));
    for (std::uint32_t k = 0; k < ninputs(); ++k) {
      if (in_[k].channel == kNoChannel) continue;
      double& peak = channels[in_[k].channel].peak_depth;
      peak = std::max(peak, static_cast<double>(in_[k].peak));
    }
  }

 private:
  // The room: fixed (the loops unroll) or the stage's own.
  std::uint32_t ninputs() const {
    if constexpr (NI > 0) return NI;
    return ninputs_;
  }
  std::uint32_t nterms() const {
    if constexpr (NT > 0) return NT;
    return nterms_;
  }

  using Terms = std::conditional_t<(NI > 0), std::array<double, NT>, double*>;
  using ConstTerms = std::conditional_t<(NI > 0), std::array<double, NT>, const double*>;
  using Inputs = std::conditional_t<(NI > 0), std::array<ReplayInput, NI>, ReplayInput*>;

  double static_bytes_;
  double last_t_;  // time of the last level change
  std::uint32_t ninputs_, nterms_;
  ConstTerms bytes_;
  Terms counts_;
  Inputs in_;
  std::int32_t inflight_ = 0, peak_inflight_ = 0;
  double peak_memory_ = 0;
};

// The replay of a stage with one model stage whose inputs each feed one memory term, in
// the order of the terms (every stage of a pipeline without virtual stages): the same
// rules as StageReplay, with every count in a register. Up to two inputs; a missing one
// never arrives and weighs 0 bytes (adding +0.0 changes no sum).
class SimpleReplay {
 public:
  SimpleReplay(const Program& prog, const ProgramStage& ps, const std::vector<double>& arrival,
               const std::vector<ChannelRun>& channels, double last_t)
      : static_(ps.static_bytes), act_(prog.terms[ps.terms]), wgrad_(prog.terms[ps.terms + 1]), last_t_(last_t) {
    for (std::uint32_t k = 0; k < 2; ++k) {
      const bool has = k < ps.ninputs;
      const std::uint32_t c = has ? prog.inputs[ps.inputs + k] : kNoChannel;
      arrival_[k] = has ? &arrival[channels[c].arrivals] : kNoArrival;
      bytes_[k] = has ? prog.terms[ps.terms + 2 + k] : 0.0;
      channel_[k] = c;
    }
  }

  // Whether stage `ps` has that shape.
  static bool fits(const Program& prog, const ProgramStage& ps) {
    if (ps.locals != 1 || ps.ninputs > 2 || ps.nterms != 2 + ps.ninputs) return false;
    for (std::uint32_t k = 0; k < ps.ninputs; ++k)
      if (prog.input_term[ps.inputs + k] != 2 + k) return false;
    return true;
  }

  // Brings the levels to an op event at time t: the arrivals before t settle (the peaks
  // are taken), those at t join the event.
  void until(double t) {
    const std::uint32_t n0 = n_[0], n1 = n_[1];
    at_[0] = at_[1] = 0;
    for (double a; (a = arrival_[0][n_[0]]) <= t; ++n_[0]) at_[0] += a == t;
    for (double a; (a = arrival_[1][n_[1]]) <= t; ++n_[1]) at_[1] += a == t;
    if (n_[0] - at_[0] != n0 || n_[1] - at_[1] != n1 || t > last_t_) settle();
    last_t_ = t;
  }

  void start(const OpClass& c) {
    if (c.in < kLocal) ++used_[c.input];
    if (c.phase == Phase::Forward) ++full_;
  }

  void end(const OpClass& c) {
    if (c.phase == Phase::Backward) --full_;
    if (c.phase == Phase::BackwardInput) --full_, ++partial_;
    if (c.phase == Phase::BackwardWeight) --partial_;
  }

  void settle() {
    const double d0 = n_[0] - at_[0] - used_[0], d1 = n_[1] - at_[1] - used_[1];
    const double counts[4] = {static_cast<double>(full_), static_cast<double>(partial_), d0, d1};
    const double bytes[4] = {act_, wgrad_, bytes_[0], bytes_[1]};
    peak_memory_ = std::max(peak_memory_, stage_memory(static_, bytes, counts, 4));
    peak_inflight_ = std::max(peak_inflight_, full_ + partial_);
    peak_[0] = std::max(peak_[0], d0);
    peak_[1] = std::max(peak_[1], d1);
  }

  void settle_last() {
    at_[0] = at_[1] = 0;
    settle();
  }

  void finish(double& peak_memory, double& peak_inflight, double& last_t, std::vector<ChannelRun>& channels) const {
    last_t = last_t_;
    peak_memory = std::max(peak_memory, peak_memory_);
    peak_inflight = std::max(peak_inflight, static_cast<double>(peak_inflight_));
    for (std::uint32_t k = 0; k < 2; ++k)
      if (channel_[k] != kNoChannel) channels[channel_[k]].peak_depth = std::max(channels[channel_[k]].peak_depth, peak_[k]);
  }

 private:
  double static_, act_, wgrad_;
  double bytes_[2];
  const double* arrival_[2];
  std::uint32_t channel_[2];
  double last_t_;
  std::uint32_t n_[2] = {0, 0}, at_[2] = {0, 0}, used_[2] = {0, 0};
  std::int32_t full_ = 0, partial_ = 0, peak_inflight_ = 0;
  double peak_memory_ = 0, peak_[2] = {0, 0};
};

class Dataflow {
 public:
  Dataflow(const Scenario& sc, const Program& prog, bool record_order)
      : sc_(sc), prog_(prog), S_(static_cast<std::uint32_t>(sc.num_stages())), dynamic_w_(prog.dynamic_w),
        record_order_(record_order), durations_(sc_, prog_) {
    stages_.resize(S_);
    for (std::uint32_t s = 0; s < S_; ++s) {
      StageRun& st = stages_[s];
      const ProgramStage& ps = prog_.stages[s];
      st.begin = ps.begin;
      st.end = ps.end;
      st.speed = RateCursor(sc.network.speed(s));
      st.peak_memory = ps.static_bytes;
      st.pending = static_cast<std::uint32_t>(pending_.size());
      pending_.resize(pending_.size() + (ps.w_end - ps.w_begin));
      st.executed = static_cast<std::uint32_t>(executed_.size());
      if (dynamic_w_) executed_.resize(executed_.size() + (ps.w_end - ps.begin));
    }
    channels_.resize(prog_.channels.size());
    for (std::size_t c = 0; c < channels_.size(); ++c) {
      const ProgramChannel& pc = prog_.channels[c];
      if (!pc.unlimited) channels_[c].rate = RateCursor(*pc.spec->rate);
    }
    start_.resize(prog_.ops.size());
    end_.resize(prog_.ops.size());
    // Each channel's arrivals followed by +inf (a sentinel for replay_levels).
    arrival_.assign(prog_.producer.size() + channels_.size(), kInf);
    for (std::size_t c = 0; c < channels_.size(); ++c)
      channels_[c].arrivals = static_cast<std::uint32_t>(prog_.channels[c].first + c);
    consumed_at_.resize(prog_.producer.size());
    counts_.resize(prog_.terms.size());
    std::uint32_t most_inputs = 0;
    for (const ProgramStage& ps : prog_.stages) most_inputs = std::max(most_inputs, ps.ninputs);
    inputs_.resize(most_inputs);
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
      if (record_order_) r.executed.push_back(executed_orders());
      t = end;
    }
    r.compute_ops = static_cast<std::uint64_t>(ops_per_iteration()) * sc_.iterations;
    r.transfers = static_cast<std::uint64_t>(prog_.producer.size()) * sc_.iterations;
    std::vector<StageTotals> stages(S_);
    std::vector<ChannelTotals> channels(channels_.size());
    for (std::uint32_t s = 0; s < S_; ++s)
      stages[s] = {stages_[s].busy_s, stages_[s].peak_inflight, stages_[s].peak_memory};
    for (std::size_t c = 0; c < channels_.size(); ++c) channels[c] = {channels_[c].busy_s, channels_[c].peak_depth};
    fill_result(sc_, prog_, t - sc_.start_time_s, stages, channels, r);
    return r;
  }

 private:
  // The order each stage ran its ops in this iteration.
  std::vector<std::vector<Op>> executed_orders() const {
    std::vector<std::vector<Op>> out(S_);
    for (std::uint32_t s = 0; s < S_; ++s) {
      const StageRun& st = stages_[s];
      const std::uint32_t n = dynamic_w_ ? st.executed_end - st.executed : st.end - st.begin;
      for (std::uint32_t e = 0; e < n; ++e)
        out[s].push_back(prog_.op_of(s, prog_.ops[dynamic_w_ ? executed_[st.executed + e] : st.begin + e]));
    }
    return out;
  }

  // Listed ops plus, with dynamic W fill, the W ops (one per I).
  std::size_t ops_per_iteration() const {
    std::size_t n = 0;
    for (const ProgramStage& ps : prog_.stages) {
      n += ps.end - ps.begin;
      if (!dynamic_w_) continue;
      for (std::uint32_t i = ps.begin; i < ps.end; ++i) n += ps.cls(prog_.classes, prog_.ops[i]).phase == Phase::BackwardInput;
    }
    return n;
  }

  // Computes every op's and message's times for one iteration starting at t0. False when
  // it cannot finish (a dependency cycle, or a rate or speed that stays 0 forever).
  bool run_iteration(double t0, double& end) {
    t0_ = t0;
    for (std::uint32_t s = S_; s-- > 0;) {
      StageRun& st = stages_[s];
      st.next = st.begin;
      st.free = t0;
      st.queued = true;
      st.pending_head = st.pending_tail = st.pending;
      st.executed_end = st.executed;
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
      end = std::max(end, st.free + prog_.stages[s].opt);
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

  // Times op i of stage s from `start`; false when its speed stays 0 forever.
  bool run_op(std::uint32_t s, std::uint32_t i, const OpClass& c, double start) {
    StageRun& st = stages_[s];
    const ProgramStage& ps = prog_.stages[s];
    const double end = op_end(ps, st.speed, start, durations_.of(i, c));
    if (end == kNever) return false;
    start_[i] = start;
    end_[i] = end;
    st.busy_s += end - start;
    st.free = end;
    if (dynamic_w_) {
      executed_[st.executed_end++] = i;
      if (c.phase == Phase::BackwardInput)
        pending_[st.pending_tail++] = ps.w_begin + (c.act_term / 2u) * prog_.micro_batches + prog_.ops[i].micro_batch;
    }
    return true;
  }

  // Runs the oldest pending W op.
  bool run_pending_w(std::uint32_t s) {
    StageRun& st = stages_[s];
    const std::uint32_t w = pending_[st.pending_head++];
    return run_op(s, w, prog_.stages[s].cls(prog_.classes, prog_.ops[w]), st.free);
  }

  // Dynamic W fill before a listed op ready at `ready` (docs/model.md §14): the oldest
  // pending W while the stage holds P of them or the op is not ready yet.
  bool fill_w(std::uint32_t s, double ready) {
    StageRun& st = stages_[s];
    for (std::uint32_t n = st.pending_tail - st.pending_head; n > 0; --n) {
      if (n < prog_.max_pending_w && ready <= st.free) break;
      if (!run_pending_w(s)) return false;
    }
    return true;
  }

  // Whether the input of listed op i is known; if so, its ready time in `ready`.
  bool ready_time(const StageRun& st, std::uint32_t i, const ProgramOp& op, const OpClass& c, double& ready) const {
    if (c.in < kLocal) {
      if (channels_[c.in].next <= op.dep) return false;  // its message has not arrived
      ready = arrival_[channels_[c.in].arrivals + op.dep];
    } else if (c.in == kLocal) {
      if (i - st.begin <= op.dep) return false;  // ordered after it: never
      ready = end_[st.begin + op.dep];
    } else {
      ready = t0_;
    }
    return true;
  }

  // Evaluates stage s's ops in order until one's input is not known yet.
  bool advance_stage(std::uint32_t s) {
    StageRun& st = stages_[s];
    if (st.next == st.end) return true;  // finished (and its levels replayed) already
    const OpClass* classes = &prog_.classes[prog_.stages[s].classes];
    while (st.next < st.end) {
      const std::uint32_t i = st.next;
      const ProgramOp op = prog_.ops[i];
      const OpClass& c = classes[op.cls];
      double ready;
      if (!ready_time(st, i, op, c, ready)) return true;
      if (dynamic_w_ && !fill_w(s, ready)) return false;
      if (!run_op(s, i, c, std::max(st.free, ready))) return false;
      st.next = i + 1;
      if (c.in < kLocal && prog_.channels[c.in].capacity > 0) {
        consumed_at_[prog_.channels[c.in].first + op.dep] = start_[i];
        ++channels_[c.in].consumed;
        if (!advance_channel(c.in)) return false;  // may free capacity
      }
      if (c.out != kNoChannel && !advance_channel(c.out)) return false;
    }
    while (st.pending_head != st.pending_tail)  // the remaining W ops, back to back
      if (!run_pending_w(s)) return false;
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
      if (!pc.unlimited) {  // a message of 0 bytes takes just the latency: finish(t, 0) is t
        end = ch.rate.finish(t_lat, prog_.message_bytes(pc, ch.next));
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

  // Replays stage s's level changes of one iteration (StageReplay).
  void replay_levels(std::uint32_t s);
  template <class Replay>
  void replay(std::uint32_t s, Replay r);

  const Scenario& sc_;
  const Program& prog_;
  std::uint32_t S_;
  bool dynamic_w_;
  bool record_order_;
  OpDurations durations_;
  double t0_ = 0;
  std::vector<StageRun> stages_;
  std::vector<ChannelRun> channels_;
  std::vector<double> start_, end_;       // per op of the iteration (index into Program::ops)
  std::vector<double> arrival_;           // per message: ChannelRun::arrivals + n
  std::vector<double> consumed_at_;       // per message (index into Program::producer)
  std::vector<double> counts_;            // per memory term (replay_levels)
  std::vector<std::uint32_t> pending_;    // dynamic W fill: pending W ops, per stage
  std::vector<std::uint32_t> executed_;   // dynamic W fill: ops in the order they ran, per stage
  std::vector<std::uint32_t> work_;       // stages whose input changed
  std::vector<ReplayInput> inputs_;       // room for a stage's input channels (replay_levels)
};

template <class Replay>
void Dataflow::replay(std::uint32_t s, Replay r) {
  StageRun& st = stages_[s];
  const ProgramStage& ps = prog_.stages[s];
  const std::uint32_t* order = dynamic_w_ ? &executed_[st.executed] : nullptr;
  const std::uint32_t n = dynamic_w_ ? st.executed_end - st.executed : st.end - st.begin;
  for (std::uint32_t e = 0; e < n; ++e) {
    const std::uint32_t i = order ? order[e] : st.begin + e;  // the ops in the order they ran
    const OpClass& c = ps.cls(prog_.classes, prog_.ops[i]);
    r.until(start_[i]);
    r.start(c);
    if (c.phase == Phase::Forward) continue;
    r.until(end_[i]);
    r.end(c);
  }
  // Every message is consumed by an op, so nothing arrives after the last op event; the
  // final values (nothing in flight, empty buffers) are the floor of the peaks.
  r.settle_last();
  r.finish(st.peak_memory, st.peak_inflight, st.last_t, channels_);
}

void Dataflow::replay_levels(std::uint32_t s) {
  const ProgramStage& ps = prog_.stages[s];
  const double last_t = stages_[s].last_t;
  if (SimpleReplay::fits(prog_, ps)) return replay(s, SimpleReplay(prog_, ps, arrival_, channels_, last_t));
  if (ps.ninputs <= 2 && ps.nterms <= 8)  // two model stages, as on a V
    return replay(s, StageReplay<2, 8>(prog_, ps, counts_, arrival_, channels_, inputs_.data(), last_t));
  replay(s, StageReplay<0, 0>(prog_, ps, counts_, arrival_, channels_, inputs_.data(), last_t));
}

}  // namespace

std::optional<SimResult> run_dataflow(const Scenario& scenario, const Program& program, const SimOptions& options) {
  Dataflow d(scenario, program, options.record_order);
  return d.run();
}

}  // namespace adagrouper::sim::eval
