// The dataflow evaluator: the execution model of docs/model.md §3 computed without an
// event list (docs/model.md, "Two evaluators").
//
// Every time in the model is a maximum of times already known: an op starts at
// max(end of the previous op on its stage, arrival of its message or end of the local op
// it waits for); a transfer starts at max(end of its producing op, end of the previous
// transfer on the channel, start of the op that consumed the message Q places earlier).
// So the times can be computed in any order that respects those dependencies, not only
// in time order. This evaluator advances each stage as far as its inputs allow (a work
// list of stages whose awaited message arrived), pushing each produced message through its
// channel at once; when a stage has finished the iteration it replays the stage's
// memory, in-flight and queue-depth changes in time order from the recorded times (a
// few sorted streams, no heap).
//
// Which inputs are known at each step depends on counts alone (ops run, messages
// produced and sent), never on times, so a static order is evaluated in the same
// sequence in every iteration. The first iteration records that sequence (each op run,
// and where each stage finished); the later ones run it as one flat loop over ops, with
// no readiness tests and no work list.
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
// to the event engine, which reports them (simulate() runs it when this one gives up),
// and so are channels with a token bucket (docs/model.md, "Shaped links").
#include <algorithm>
#include <array>
#include <bit>
#include <cassert>
#include <cmath>
#include <cstdint>
#include <limits>
#include <vector>

#if defined(__SSE2__)
#include <emmintrin.h>
#endif

#include "../rate.h"
#include "evaluator.h"
#include "message_latencies.h"
#include "op_durations.h"
#include "totals.h"

namespace adagrouper::sim::eval {
namespace {

constexpr double kInf = std::numeric_limits<double>::infinity();

struct StageRun {
  std::uint32_t begin = 0, end = 0;
  std::uint32_t next = 0;  // absolute index of the next listed op to evaluate
  double free = 0;         // end of the previous op
  // The input its next op waits for: message `awaited_message` of channel `awaited`;
  // only that arrival wakes it. kNoChannel while it is on the work list or being
  // advanced (so that nothing wakes it twice), and while it waits for nothing that can
  // arrive.
  std::uint32_t awaited = kNoChannel, awaited_message = 0;
  bool bounded = false;    // an input channel has a capacity (consumption is recorded)
  bool unit_speed = false; // ProgramStage::unit_speed, beside what the op loop reads anyway
  RateCursor speed;
  double busy_s = 0;
  // Dynamic W fill: its pending W ops (a FIFO in pending_) and the order it ran its ops
  // in (in executed_), both from `pending` / `executed` on.
  std::uint32_t pending = 0, pending_head = 0, pending_tail = 0;
  std::uint32_t executed = 0, executed_end = 0;
  double last_t = 0;  // time of its last level change (replay_levels)
  double peak_memory = 0, peak_inflight = 0;
};

// An op's start and end, side by side: whoever reads one reads the other soon (the
// replay both, a local input's or a message's sender's end beside the op's own writes),
// so a stage's ops take one stream through the caches instead of two.
struct OpTimes {
  double start = 0, end = 0;
};

struct ChannelRun {
  std::uint32_t next = 0;      // next message to transfer = messages delivered
  std::uint32_t consumed = 0;  // messages whose consuming op has been evaluated (with a capacity)
  std::uint32_t arrivals = 0;  // where its arrival times start in arrival_
  std::uint32_t capacity = 0;  // the receiver's buffer: ProgramChannel::capacity
  std::uint32_t full_at = ~0u; // the first message that may find the buffer full (none: unlimited)
  // Its messages all take `bytes` at its rate (Transfer::Rate, ProgramChannel::uniform):
  // the common case, tested once per transfer instead of twice.
  bool uniform_rate = false;
  // Its messages are produced in the order it carries them, and its receiver's buffer is
  // unlimited: each leaves as soon as its producing op ends, so an op that sends on it
  // sends the channel's next message (send()).
  bool in_order = false;
  double bytes = 0;
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
  std::uint32_t channel;
};

// Each channel's arrival times are followed by this many +inf, so that a replay may read
// that far past the last arrival it has counted.
constexpr std::uint32_t kArrivalPad = 3;

// An arrival stream that never arrives: a missing input of a replay with room for two.
constexpr double kNoArrival[kArrivalPad] = {kInf, kInf, kInf};

// Past the arrivals at or before t in list a (ending with kArrivalPad +inf) from n;
// `before` is where those at t start. The next two arrivals are read at once and
// counted without a branch: which of them have arrived is data, and both a mispredicted
// branch and a chain of dependent loads cost more than the comparisons. A channel's
// arrivals are in order, so of a0 <= a1 the ones below a bound are a prefix: a mask of
// the two comparisons is 0, 1 or 3, and (mask + 1) / 2 counts it.
[[gnu::always_inline]] inline std::uint32_t past(const double* a, std::uint32_t n, double t, std::uint32_t& before) {
  if (a[n + 2] <= t) [[unlikely]] {
    std::uint32_t m = n;
    while (a[m] < t) ++m;
    before = m;
    while (a[m] == t) ++m;
    return m;
  }
#if defined(__SSE2__)
  const __m128d pair = _mm_loadu_pd(a + n), bound = _mm_set1_pd(t);
  before = n + ((static_cast<std::uint32_t>(_mm_movemask_pd(_mm_cmplt_pd(pair, bound))) + 1) >> 1);
  return n + ((static_cast<std::uint32_t>(_mm_movemask_pd(_mm_cmple_pd(pair, bound))) + 1) >> 1);
#else
  const double a0 = a[n], a1 = a[n + 1];
  before = n + (a0 < t) + (a1 < t);
  return n + (a0 <= t) + (a1 <= t);
#endif
}

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
// This is the general replay, for any number of inputs and memory terms, with the memory
// summed in the order of the terms (stage_memory); the two below do the same for the
// common shapes with less work.
class StageReplay {
 public:
  StageReplay(const Program& prog, const ProgramStage& ps, std::vector<double>& counts,
              const std::vector<double>& arrival, const std::vector<ChannelRun>& channels, ReplayInput* room,
              double last_t)
      : static_bytes_(ps.static_bytes), last_t_(last_t), ninputs_(ps.ninputs), nterms_(ps.nterms),
        bytes_(&prog.terms[ps.terms]), counts_(&counts[ps.terms]), in_(room) {
    std::fill(counts_, counts_ + nterms_, 0.0);
    for (std::uint32_t k = 0; k < ps.ninputs; ++k) {
      const std::uint32_t c = prog.inputs[ps.inputs + k];
      in_[k] = {&arrival[channels[c].arrivals], &prog.msg_term[prog.channels[c].first], 0, 0, 0, 0, c};
    }
  }

  // Brings the levels to an op event at time t: the arrivals before t settle (the peaks
  // are taken), those at t join the event.
  void until(double t) {
    bool before = t > last_t_;  // time moved on, or something arrived before t
    for (std::uint32_t k = 0; k < ninputs_; ++k) {
      ReplayInput& in = in_[k];
      const std::uint32_t n0 = in.n;
      for (; in.arrival[in.n] < t; ++in.n) counts_[in.term[in.n]] += 1;
      in.depth += static_cast<std::int32_t>(in.n - n0);
      before |= in.n != n0;
      in.at_t = in.n;
      while (in.arrival[in.n] == t) ++in.n;
    }
    if (before) settle();
    for (std::uint32_t k = 0; k < ninputs_; ++k) {
      ReplayInput& in = in_[k];
      for (std::uint32_t i = in.at_t; i < in.n; ++i) counts_[in.term[i]] += 1;
      in.depth += static_cast<std::int32_t>(in.n - in.at_t);
    }
    last_t_ = t;
  }

  void start(const OpClass& c, std::uint32_t) {
    if (c.in < kLocal) {
      counts_[c.slot_term] -= 1;
      in_[c.input].depth -= 1;
    }
    if (c.phase == Phase::Forward) {
      counts_[c.act_term] += 1;
      ++inflight_;
    }
  }

  void end(const OpClass& c, std::uint32_t) {
    if (c.phase == Phase::BackwardInput) {
      counts_[c.act_term] -= 1;
      counts_[c.act_term + 1] += 1;
      return;
    }
    counts_[c.phase == Phase::Backward ? c.act_term : c.act_term + 1] -= 1;
    --inflight_;
  }

  void settle() {
    peak_memory_ = std::max(peak_memory_, stage_memory(static_bytes_, bytes_, counts_, nterms_));
    peak_inflight_ = std::max(peak_inflight_, inflight_);
    for (std::uint32_t k = 0; k < ninputs_; ++k) in_[k].peak = std::max(in_[k].peak, in_[k].depth);
  }

  // The settle after the last op event.
  void settle_last() { settle(); }

  // The stage's peaks into its totals (and the time of its last level change), the
  // depths' into its input channels'.
  void finish(double& peak_memory, double& peak_inflight, double& last_t, std::vector<ChannelRun>& channels) const {
    last_t = last_t_;
    peak_memory = std::max(peak_memory, peak_memory_);
    peak_inflight = std::max(peak_inflight, static_cast<double>(peak_inflight_));
    for (std::uint32_t k = 0; k < ninputs_; ++k) {
      double& peak = channels[in_[k].channel].peak_depth;
      peak = std::max(peak, static_cast<double>(in_[k].peak));
    }
  }

 private:
  double static_bytes_;
  double last_t_;  // time of the last level change
  std::uint32_t ninputs_, nterms_;
  const double* bytes_;
  double* counts_;
  ReplayInput* in_;
  std::int32_t inflight_ = 0, peak_inflight_ = 0;
  double peak_memory_ = 0;
};

// The memory term all of an input channel's messages wait in (their receiver's), for
// SimpleReplay; kMixedTerms when they wait in more than one, or there are none.
constexpr std::uint32_t kMixedTerms = ~0u;

// What an op of one class changes when it starts and when it ends, for ExactReplay: the
// memory in bytes, the micro-batches in flight, and whether it consumes a message.
struct ClassDeltas {
  double start = 0, end = 0;
  std::int32_t inflight_start = 0, inflight_end = 0;
  std::uint32_t consumes = 0;
};

// What the replays of stages with at most two input channels share: each input's
// arrivals, counted up to an op event without a branch (past()), the messages consumed
// from it, the time of the last level change and the peaks. A missing input never
// arrives. Replay supplies settle(n0, n1), the peaks with n0 and n1 messages arrived.
template <class Replay>
class TwoInputs {
 public:
  // Brings the levels to an op event at time t: the arrivals before t settle (the peaks
  // are taken), those at t join the event. Inline: it is the replay's inner step.
  [[gnu::always_inline]] void until(double t) {
    // Again at the last op event's time (a stage that runs its ops back to back): every
    // arrival up to t has been counted then, and nothing settles.
    if (t == counted_t_) return;
    std::uint32_t before0, before1;
    n_[0] = past(arrival_[0], n_[0], t, before0);
    n_[1] = past(arrival_[1], n_[1], t, before1);
    // Time moved on, or arrivals before t would settle (StageReplay's rule). Op events
    // come in time order, so after the iteration's first one time has always moved on
    // here; at the first, t >= t0 >= last_t_ and no arrival of the iteration is before
    // t0, so the test on time alone decides.
    if (t > last_t_) static_cast<Replay*>(this)->settle(before0, before1);
    last_t_ = counted_t_ = t;
  }

  void settle_last() { static_cast<Replay*>(this)->settle(n_[0], n_[1]); }

  // The stage's peaks into its totals (and the time of its last level change), the
  // depths' into its input channels'.
  void finish(double& peak_memory, double& peak_inflight, double& last_t, std::vector<ChannelRun>& channels) const {
    last_t = last_t_;
    peak_memory = std::max(peak_memory, peak_memory_);
    peak_inflight = std::max(peak_inflight, static_cast<double>(peak_inflight_));
    for (std::uint32_t k = 0; k < 2; ++k)
      if (channel_[k] != kNoChannel)
        channels[channel_[k]].peak_depth = std::max(channels[channel_[k]].peak_depth, peak_[k]);
  }

 protected:
  TwoInputs(const Program& prog, const ProgramStage& ps, const std::vector<double>& arrival,
            const std::vector<ChannelRun>& channels, double last_t)
      : last_t_(last_t) {
    for (std::uint32_t k = 0; k < 2; ++k) {
      channel_[k] = k < ps.ninputs ? prog.inputs[ps.inputs + k] : kNoChannel;
      arrival_[k] = k < ps.ninputs ? &arrival[channels[channel_[k]].arrivals] : kNoArrival;
    }
  }

  // The messages waiting on input k with n of them arrived.
  double depth(std::uint32_t k, std::uint32_t n) const { return n - used_[k]; }

  // Takes the peaks: memory, micro-batches in flight, the depths.
  void take_peaks(double memory, std::int32_t inflight, double depth0, double depth1) {
    peak_memory_ = std::max(peak_memory_, memory);
    peak_inflight_ = std::max(peak_inflight_, inflight);
    peak_[0] = std::max(peak_[0], depth0);
    peak_[1] = std::max(peak_[1], depth1);
  }

  const double* arrival_[2];
  std::uint32_t channel_[2];
  std::uint32_t n_[2] = {0, 0}, used_[2] = {0, 0};

 private:
  double last_t_;
  double counted_t_ = -kInf;  // the arrivals up to it are counted
  double peak_memory_ = 0, peak_[2] = {0, 0};
  std::int32_t peak_inflight_ = 0;
};

// The replay of a stage with at most two inputs (every stage of the named schedules),
// when its memory sums are exact in any order (sums_exact_in_any_order): the same rules
// as StageReplay, computed with less work. The memory is kept as a running total of the
// op events' changes (one table lookup an event), the arrivals are only counted per input
// (a few comparisons and no branch, see past()), and the bytes of the messages that have
// arrived on an input are read from a table of prefix sums when the peaks are taken.
// Every partial sum is then an exactly represented multiple of the smallest unit of the
// terms, so the total is stage_memory's to the last bit whatever the order. A missing
// input weighs 0 bytes.
class ExactReplay : public TwoInputs<ExactReplay> {
 public:
  ExactReplay(const Program& prog, const ProgramStage& ps, const std::vector<double>& arrival,
              const std::vector<double>& arrived_bytes, const ClassDeltas* deltas,
              const std::vector<ChannelRun>& channels, double last_t)
      : TwoInputs(prog, ps, arrival, channels, last_t), deltas_(deltas), memory_(ps.static_bytes) {
    for (std::uint32_t k = 0; k < 2; ++k)
      arrived_bytes_[k] = channel_[k] != kNoChannel ? &arrived_bytes[channels[channel_[k]].arrivals] : kNothing;
  }

  // Whether stage `ps` has that shape (its sums are checked apart: sums_exact_in_any_order).
  static bool fits(const ProgramStage& ps) { return ps.ninputs <= 2; }

  void start(const OpClass& c, std::uint32_t k) {
    const ClassDeltas& d = deltas_[k];
    memory_ += d.start;
    inflight_ += d.inflight_start;
    used_[c.input] += d.consumes;
  }

  void end(const OpClass&, std::uint32_t k) {
    const ClassDeltas& d = deltas_[k];
    memory_ += d.end;
    inflight_ += d.inflight_end;
  }

  // The peaks with n0 and n1 messages arrived.
  void settle(std::uint32_t n0, std::uint32_t n1) {
    // memory_ counts the consumed messages out (ClassDeltas::start), so every arrived one is in.
    take_peaks(memory_ + arrived_bytes_[0][n0] + arrived_bytes_[1][n1], inflight_, depth(0, n0), depth(1, n1));
  }

 private:
  static constexpr double kNothing[kArrivalPad] = {0, 0, 0};

  const ClassDeltas* deltas_;  // the stage's classes'
  double memory_;              // without the waiting messages
  const double* arrived_bytes_[2];  // per input: the bytes of its first n messages
  std::int32_t inflight_ = 0;
};

// The replay of a stage with one model stage whose inputs each feed one memory term, in
// the order of the terms (every stage of a pipeline without virtual stages): the same
// rules as ExactReplay, with every count in a register and the memory summed term by
// term. A missing input weighs 0 bytes (adding +0.0 changes no sum). Without split
// backward (kSplit false) no weight gradient is ever held, and its term, +0.0, is left
// out of the sum.
template <bool kSplit>
class SimpleReplay : public TwoInputs<SimpleReplay<kSplit>> {
  using Base = TwoInputs<SimpleReplay<kSplit>>;

 public:
  SimpleReplay(const Program& prog, const ProgramStage& ps, const std::vector<double>& arrival,
               const std::vector<ChannelRun>& channels, double last_t)
      : Base(prog, ps, arrival, channels, last_t), static_(ps.static_bytes), act_(prog.terms[ps.terms]),
        wgrad_(prog.terms[ps.terms + 1]) {
    for (std::uint32_t k = 0; k < 2; ++k) bytes_[k] = k < ps.ninputs ? prog.terms[ps.terms + 2 + k] : 0.0;
  }

  // Whether stage `ps` has that shape: input k's messages all wait in term 2 + k.
  static bool fits(const Program& prog, const ProgramStage& ps, const std::vector<std::uint32_t>& input_term) {
    if (ps.locals != 1 || ps.ninputs > 2 || ps.nterms != 2 + ps.ninputs) return false;
    for (std::uint32_t k = 0; k < ps.ninputs; ++k)
      if (input_term[prog.inputs[ps.inputs + k]] != 2 + k) return false;
    return true;
  }

  void start(const OpClass& c, std::uint32_t) {
    if (c.in < kLocal) ++this->used_[c.input];
    if (c.phase == Phase::Forward) ++full_;
  }

  void end(const OpClass& c, std::uint32_t) {
    if (c.phase == Phase::Backward) --full_;
    if (!kSplit) return;
    if (c.phase == Phase::BackwardInput) --full_, ++partial_;
    if (c.phase == Phase::BackwardWeight) --partial_;
  }

  // The peaks with n0 and n1 messages arrived.
  void settle(std::uint32_t n0, std::uint32_t n1) {
    const double d0 = this->depth(0, n0), d1 = this->depth(1, n1);
    if constexpr (kSplit) {
      const double counts[4] = {static_cast<double>(full_), static_cast<double>(partial_), d0, d1};
      const double bytes[4] = {act_, wgrad_, bytes_[0], bytes_[1]};
      this->take_peaks(stage_memory(static_, bytes, counts, 4), full_ + partial_, d0, d1);
    } else {
      const double counts[3] = {static_cast<double>(full_), d0, d1};
      const double bytes[3] = {act_, bytes_[0], bytes_[1]};
      this->take_peaks(stage_memory(static_, bytes, counts, 3), full_, d0, d1);
    }
  }

 private:
  double static_, act_, wgrad_;
  double bytes_[2];
  std::int32_t full_ = 0, partial_ = 0;
};

// One step of the recorded sequence: op `op` (index into Program::ops) of stage `stage`,
// of class `cls` (index into Program::classes), whose input is known at `ready` (its
// message's arrival, the end of the op it waits for, or the iteration's start), after
// which `sends` messages leave on its output channel (the channel's next ones: 1 on a
// channel in production order, 0 to 2 on one that is not).
struct FlatOp {
  static constexpr std::uint32_t kMaxSends = 3;
  const double* ready;
  const double* produced;  // the end of the op that produced the first message it sends
  std::uint32_t op;
  std::uint16_t stage : 14, sends : 2;
  std::uint16_t cls;
};
static_assert(sizeof(FlatOp) == 24);

// Where a stage finished in the recorded sequence: after the first `end` steps.
struct FlatFinish {
  std::uint32_t end, stage;
};

// Which replay replays a stage: the cheapest whose shape it has.
enum class ReplayKind : std::uint8_t { Simple, SimpleSplit, Exact, General };

class Dataflow {
 public:
  Dataflow(const Scenario& sc, const Program& prog, bool record_order)
      : sc_(sc), prog_(prog), p_ops_(prog.ops.data()), p_stages_(prog.stages.data()),
        p_classes_(prog.classes.data()), p_channels_(prog.channels.data()), p_producer_(prog.producer.data()),
        S_(static_cast<std::uint32_t>(sc.num_stages())), dynamic_w_(prog.dynamic_w),
        record_order_(record_order), durations_(sc_, prog_), latencies_(sc_, prog_) {
    stages_.resize(S_);
    for (std::uint32_t s = 0; s < S_; ++s) {
      StageRun& st = stages_[s];
      const ProgramStage& ps = prog_.stages[s];
      st.begin = ps.begin;
      st.end = ps.end;
      st.speed = RateCursor(sc.network.speed(s));
      st.unit_speed = ps.unit_speed;
      st.peak_memory = ps.static_bytes;
      for (std::uint32_t k = 0; k < ps.ninputs; ++k) st.bounded |= prog_.channels[prog_.inputs[ps.inputs + k]].capacity > 0;
      st.pending = static_cast<std::uint32_t>(pending_.size());
      pending_.resize(pending_.size() + (ps.w_end - ps.w_begin));
      st.executed = static_cast<std::uint32_t>(executed_.size());
      if (dynamic_w_) executed_.resize(executed_.size() + (ps.w_end - ps.begin));
    }
    channels_.resize(prog_.channels.size());
    for (std::size_t c = 0; c < channels_.size(); ++c) {
      const ProgramChannel& pc = prog_.channels[c];
      if (pc.transfer == Transfer::Rate) channels_[c].rate = RateCursor(*pc.spec->rate);
      channels_[c].capacity = pc.capacity;
      if (pc.capacity > 0) channels_[c].full_at = pc.capacity;
      channels_[c].uniform_rate = pc.transfer == Transfer::Rate && pc.uniform;
      channels_[c].bytes = pc.bytes;
      const std::uint32_t* producer = &prog_.producer[pc.first];
      channels_[c].in_order = pc.capacity == 0 && std::is_sorted(producer, producer + pc.count);
      flat_ok_ &= pc.capacity == 0;
    }
    // Dynamic W fill decides from times; a bounded channel's transfers wait for
    // consumption, a step the recorded sequence does not hold. One iteration has no use
    // for a recording.
    flat_ok_ &= !dynamic_w_ && sc.iterations > 1 && S_ < (1u << 14) && prog_.classes.size() <= 0xffff;
    if (flat_ok_) flat_.reserve(prog_.ops.size());
    times_.resize(prog_.ops.size());
    // Each channel's arrivals followed by kArrivalPad +inf (sentinels for replay_levels).
    arrival_.assign(prog_.producer.size() + kArrivalPad * channels_.size(), kInf);
    for (std::size_t c = 0; c < channels_.size(); ++c)
      channels_[c].arrivals = static_cast<std::uint32_t>(prog_.channels[c].first + kArrivalPad * c);
    consumed_at_.resize(prog_.producer.size());
    index_terms();
    choose_replays();
    counts_.resize(prog_.terms.size());
    std::uint32_t most_inputs = 0;
    for (const ProgramStage& ps : prog_.stages) most_inputs = std::max(most_inputs, ps.ninputs);
    inputs_.resize(most_inputs);
    work_.resize(S_ + 1);  // a stage is on it at most once; wake() writes one past the end
  }

  // input_term_ from the messages' terms.
  void index_terms() {
    input_term_.resize(channels_.size());
    for (std::size_t c = 0; c < channels_.size(); ++c) {
      const ProgramChannel& pc = prog_.channels[c];
      const std::uint16_t* term = &prog_.msg_term[pc.first];
      const bool single = pc.count > 0 && std::all_of(term, term + pc.count, [&](auto t) { return t == term[0]; });
      input_term_[c] = single ? term[0] : kMixedTerms;
    }
  }

  // arrived_bytes_ from the messages' terms (for ExactReplay only): each sum is exact, as
  // the receiver's sums_exact_in_any_order says.
  void index_arrived_bytes() {
    arrived_bytes_.assign(arrival_.size(), 0.0);
    for (std::size_t c = 0; c < channels_.size(); ++c) {
      const ProgramChannel& pc = prog_.channels[c];
      const std::uint16_t* term = &prog_.msg_term[pc.first];
      const double* bytes = &prog_.terms[prog_.stages[pc.receiver].terms];
      double* arrived = &arrived_bytes_[channels_[c].arrivals];
      for (std::uint32_t n = 0; n < pc.count; ++n) arrived[n + 1] = arrived[n] + bytes[term[n]];
      std::fill(arrived + pc.count + 1, arrived + pc.count + kArrivalPad, arrived[pc.count]);
    }
  }

  // Whether stage `ps` runs I or W ops (split backward).
  bool splits(const ProgramStage& ps) const {
    if (ps.w_end > ps.w_begin) return true;
    for (std::uint32_t i = ps.begin; i < ps.end; ++i)
      if (ps.cls(prog_.classes, prog_.ops[i]).phase >= Phase::BackwardInput) return true;
    return false;
  }

  // deltas_ from the classes, and which replay each stage takes.
  void choose_replays() {
    deltas_.resize(prog_.classes.size());
    replay_.assign(S_, ReplayKind::General);
    for (std::uint32_t s = 0; s < S_; ++s) {
      const ProgramStage& ps = prog_.stages[s];
      const double* bytes = &prog_.terms[ps.terms];
      for (std::uint32_t k = ps.classes; k < ps.classes + 4 * ps.locals; ++k) {
        const OpClass& c = prog_.classes[k];
        ClassDeltas& d = deltas_[k];
        const bool consumes = c.in < kLocal;
        d.consumes = consumes;
        d.start = (c.phase == Phase::Forward ? bytes[c.act_term] : 0.0) - (consumes ? bytes[c.slot_term] : 0.0);
        d.inflight_start = c.phase == Phase::Forward;
        if (c.phase == Phase::Backward) d.end = -bytes[c.act_term];
        if (c.phase == Phase::BackwardInput) d.end = bytes[c.act_term + 1] - bytes[c.act_term];
        if (c.phase == Phase::BackwardWeight) d.end = -bytes[c.act_term + 1];
        d.inflight_end = -static_cast<std::int32_t>(c.phase == Phase::Backward || c.phase == Phase::BackwardWeight);
      }
      if (SimpleReplay<false>::fits(prog_, ps, input_term_))
        replay_[s] = splits(ps) ? ReplayKind::SimpleSplit : ReplayKind::Simple;
      else if (ExactReplay::fits(ps) && prog_.memory_sums_exact(s))
        replay_[s] = ReplayKind::Exact;
    }
    if (std::find(replay_.begin(), replay_.end(), ReplayKind::Exact) != replay_.end()) index_arrived_bytes();
  }

  // The recorded sequence points into the evaluator's own arrays (and at t0_): it stays
  // where it was built.
  Dataflow(const Dataflow&) = delete;
  Dataflow& operator=(const Dataflow&) = delete;

  std::optional<SimResult> run() {
    SimResult r;
    r.iteration_times_s.reserve(sc_.iterations);
    double t = sc_.start_time_s;
    for (int it = 0; it < sc_.iterations; ++it) {
      // Timed (OpDurations::timed(), which drain() asks) where either trace lists the
      // iteration: both then give their per-op and per-message arrays.
      const bool timed = durations_.lists(it) || latencies_.lists(it);
      durations_.load(it, timed);
      latencies_.load(it, timed);
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
      st.awaited = kNoChannel;  // on the work list
      st.pending_head = st.pending_tail = st.pending;
      st.executed_end = st.executed;
      work_[nwork_++] = s;  // stage 0 is evaluated first
    }
    for (ChannelRun& ch : channels_) {
      ch.next = ch.consumed = 0;
      ch.free = t0;
    }
    if (!drain()) return false;
    end = t0;
    for (std::uint32_t s = 0; s < S_; ++s) {
      const StageRun& st = stages_[s];
      if (st.next != st.end) return false;  // stuck: a dependency cycle
      end = std::max(end, st.free + prog_.stages[s].opt);
    }
    return true;
  }

  // Advances the stages on the work list until it is empty, or runs the recorded sequence
  // (after the first iteration of a static order); false when a stage cannot finish. The
  // loops are compiled once per combination of dynamic W fill, timed durations or message
  // latencies (a stage or message timing trace that lists the iteration) and
  // recording, so that the per-op path tests none of them.
  bool drain() {
    const bool timed = durations_.timed();
    if (dynamic_w_) return timed ? drain<true, true, false>() : drain<true, false, false>();
    if (recorded_) {
      nwork_ = 0;  // the flat loop reads no work list
      return timed ? run_flat<true>() : run_flat<false>();
    }
    if (!flat_ok_) return timed ? drain<false, true, false>() : drain<false, false, false>();
    const bool done = timed ? drain<false, true, true>() : drain<false, false, true>();
    recorded_ = done && flat_ok_ && finishes_.size() == S_;
    return done;
  }
  template <bool kDynamicW, bool kTimed, bool kRecord>
  bool drain() {
    while (nwork_ > 0) {
      const std::uint32_t s = work_[--nwork_];
      if (!advance_stage<kDynamicW, kTimed, kRecord>(s)) return false;
    }
    return true;
  }

  // The recorded sequence: every op as the work list ran it, each stage's levels replayed
  // where it finished. Every op's input is known when its turn comes.
  template <bool kTimed>
  bool run_flat() {
    const FlatOp* step = flat_.data();
    for (const FlatFinish f : finishes_) {
      for (const FlatOp* last = flat_.data() + f.end; step != last; ++step) {
        const std::uint32_t s = step->stage, i = step->op;
        StageRun& st = stages_[s];
        const OpClass& c = p_classes_[step->cls];
        if (!run_op<false, kTimed>(s, i, c, std::max(st.free, *step->ready))) return false;
        st.next = i + 1;
        // A counted loop rather than send(): whether a channel is in production order is
        // data that a branch per op would mispredict (half the channels of a V placement).
        if (std::uint32_t n = step->sends; n > 0) {
          ChannelRun& ch = channels_[c.out];
          if (!transfer<kTimed>(ch, p_channels_[c.out], std::max(ch.free, *step->produced))) return false;
          for (; n > 1; --n)
            if (!transfer_next<kTimed>(c.out)) return false;
        }
      }
      replay_levels(f.stage);
    }
    return true;
  }

  // Puts stage s on the work list when the message it waits for is among the first
  // `arrived` of channel c (it is not on the list then: its `awaited` says so); without
  // a branch, since that is data. Waking it for any other arrival would only make it
  // find its next op still waiting.
  void wake(std::uint32_t s, std::uint32_t c, std::uint32_t arrived) {
    StageRun& st = stages_[s];
    const bool ready = (st.awaited == c) & (st.awaited_message < arrived);
    work_[nwork_] = s;
    nwork_ += ready;
    st.awaited = ready ? kNoChannel : st.awaited;
  }

  // Times op i of stage s from `start`; false when its speed stays 0 forever.
  template <bool kDynamicW, bool kTimed>
  bool run_op(std::uint32_t s, std::uint32_t i, const OpClass& c, double start) {
    StageRun& st = stages_[s];
    const double duration = durations_.of<kTimed>(i, c);
    // op_end(), with the test for a speed that stays 0 only where there is a speed trace.
    const double end = st.unit_speed ? start + duration : st.speed.finish(start, duration);
    if (!st.unit_speed && end == kNever) return false;
    times_[i] = {start, end};
    st.busy_s += end - start;
    st.free = end;
    if (kDynamicW) {
      executed_[st.executed_end++] = i;
      if (c.phase == Phase::BackwardInput)
        pending_[st.pending_tail++] = p_stages_[s].w_begin + (c.act_term / 2u) * prog_.micro_batches + p_ops_[i].micro_batch;
    }
    return true;
  }

  // Runs the oldest pending W op.
  template <bool kTimed>
  bool run_pending_w(std::uint32_t s) {
    StageRun& st = stages_[s];
    const std::uint32_t w = pending_[st.pending_head++];
    return run_op<true, kTimed>(s, w, prog_.stages[s].cls(prog_.classes, prog_.ops[w]), st.free);
  }

  // Dynamic W fill before a listed op ready at `ready` (docs/model.md §14): the oldest
  // pending W while the stage holds P of them or the op is not ready yet.
  template <bool kTimed>
  bool fill_w(std::uint32_t s, double ready) {
    StageRun& st = stages_[s];
    for (std::uint32_t n = st.pending_tail - st.pending_head; n > 0; --n) {
      if (n < prog_.max_pending_w && ready <= st.free) break;
      if (!run_pending_w<kTimed>(s)) return false;
    }
    return true;
  }

  // Whether the input of listed op i is known; if so, its ready time in `ready`.
  bool ready_time(const StageRun& st, std::uint32_t i, const ProgramOp& op, const OpClass& c, double& ready) const {
    if (c.in < kLocal && channels_[c.in].next <= op.dep) return false;  // its message has not arrived
    if (c.in == kLocal && i - st.begin <= op.dep) return false;          // ordered after it: never
    ready = input_time(st, op, c);
    return true;
  }

  // Where listed op `op`'s input time is (once known): its message's arrival, the end of
  // the local op it waits for, or the iteration's start.
  const double& input_time(const StageRun& st, const ProgramOp& op, const OpClass& c) const {
    if (c.in < kLocal) return arrival_[channels_[c.in].arrivals + op.dep];
    if (c.in == kLocal) return times_[st.begin + op.dep].end;
    return t0_;
  }

  // Appends listed op i of stage s to the recorded sequence.
  void record(std::uint32_t s, std::uint32_t i, const ProgramOp& op, const OpClass& c) {
    flat_.push_back({&input_time(stages_[s], op, c), nullptr, i, static_cast<std::uint16_t>(s), 0,
                     static_cast<std::uint16_t>(p_stages_[s].classes + op.cls)});
  }

  // The messages the last recorded op sent: channel c's next ones from `before` on (none
  // without c). A sequence with more than FlatOp::kMaxSends is not used.
  void record_sends(std::uint32_t c, std::uint32_t before) {
    const std::uint32_t n = c == kNoChannel ? 0 : channels_[c].next - before;
    if (n > FlatOp::kMaxSends) flat_ok_ = false;
    flat_.back().sends = n & FlatOp::kMaxSends;
    if (n > 0) flat_.back().produced = &producer_end(p_channels_[c], before);
  }

  // Evaluates stage s's ops in order until one's input is not known yet.
  template <bool kDynamicW, bool kTimed, bool kRecord>
  bool advance_stage(std::uint32_t s) {
    StageRun& st = stages_[s];
    if (st.next == st.end) return true;  // finished (and its levels replayed) already
    const OpClass* classes = &p_classes_[p_stages_[s].classes];
    const bool bounded = st.bounded;
    while (st.next < st.end) {
      const std::uint32_t i = st.next;
      const ProgramOp op = p_ops_[i];
      const OpClass& c = classes[op.cls];
      double ready;
      if (!ready_time(st, i, op, c, ready)) {  // until its input arrives (if it can: c.in < kLocal)
        st.awaited = c.in < kLocal ? c.in : kNoChannel;
        st.awaited_message = op.dep;
        return true;
      }
      if (kDynamicW && !fill_w<kTimed>(s, ready)) return false;
      if (!run_op<kDynamicW, kTimed>(s, i, c, std::max(st.free, ready))) return false;
      if constexpr (kRecord) record(s, i, op, c);
      st.next = i + 1;
      if (bounded && c.in < kLocal && channels_[c.in].capacity > 0) {  // whether c.in < kLocal is data
        consumed_at_[p_channels_[c.in].first + op.dep] = times_[i].start;
        ++channels_[c.in].consumed;
        if (!advance_channel<kTimed>(c.in)) return false;  // may free capacity
      }
      const std::uint32_t before = kRecord && c.out != kNoChannel ? channels_[c.out].next : 0;
      if (c.out != kNoChannel && !send<kTimed>(c.out, i, st.free)) return false;
      if constexpr (kRecord) record_sends(c.out, before);
    }
    while (kDynamicW && st.pending_head != st.pending_tail)  // the remaining W ops, back to back
      if (!run_pending_w<kTimed>(s)) return false;
    // Done for this iteration: every message it consumes has arrived, so its levels can
    // be replayed now, while its times are still in cache.
    replay_levels(s);
    if constexpr (kRecord) finishes_.push_back({static_cast<std::uint32_t>(flat_.size()), s});
    return true;
  }

  // Transfers the channel's messages in order until one is not produced yet or the
  // receiver's buffer is full; wakes the receiver when what it waits for arrived.
  template <bool kTimed>
  bool advance_channel(std::uint32_t c) {
    ChannelRun& ch = channels_[c];
    const ProgramChannel& pc = p_channels_[c];
    const StageRun& sender = stages_[pc.sender];
    const std::uint32_t produced = sender.next - sender.begin;
    while (ch.next < pc.count) {
      const std::uint32_t p = p_producer_[pc.first + ch.next];
      if (produced <= p) break;  // not produced yet
      double start = std::max(ch.free, producer_end(pc, ch.next));
      if (ch.next >= ch.full_at) {
        if (ch.consumed < ch.next - pc.capacity + 1) break;  // receiver full
        start = std::max(start, consumed_at_[pc.first + ch.next - pc.capacity]);
      }
      if (!transfer<kTimed>(ch, pc, start)) return false;
    }
    wake(pc.receiver, c, ch.next);
    return true;
  }

  // What listed op i, which ended at `at`, sends on channel c: on a channel in order
  // (ChannelRun::in_order), the next message, with no search; else what advance_channel
  // finds produced and room for.
  template <bool kTimed>
  bool send(std::uint32_t c, [[maybe_unused]] std::uint32_t i, double at) {
    ChannelRun& ch = channels_[c];
    if (!ch.in_order) return advance_channel<kTimed>(c);
    const ProgramChannel& pc = p_channels_[c];
    assert(p_producer_[pc.first + ch.next] == i - stages_[pc.sender].begin);
    if (!transfer<kTimed>(ch, pc, std::max(ch.free, at))) return false;
    wake(pc.receiver, c, ch.next);
    return true;
  }

  // The end of the op that produces channel pc's n-th message.
  const double& producer_end(const ProgramChannel& pc, std::uint32_t n) const {
    return times_[stages_[pc.sender].begin + p_producer_[pc.first + n]].end;
  }

  // Transfers channel c's next message, whose producing op has run.
  template <bool kTimed>
  bool transfer_next(std::uint32_t c) {
    ChannelRun& ch = channels_[c];
    const ProgramChannel& pc = p_channels_[c];
    return transfer<kTimed>(ch, pc, std::max(ch.free, producer_end(pc, ch.next)));
  }

  // Transfers channel c's next message, which may leave at `start`, and records its
  // arrival; false when the channel's rate stays 0 forever.
  template <bool kTimed>
  [[gnu::always_inline]] bool transfer(ChannelRun& ch, const ProgramChannel& pc, double start) {
    const double t_lat = start + latencies_.of<kTimed>(pc, ch.next);
    double end = t_lat;
    if (ch.uniform_rate) {
      end = ch.rate.finish(t_lat, ch.bytes);
      if (end == kNever) return false;
    } else if (pc.transfer == Transfer::Rate) {  // a message of 0 bytes takes just the latency: finish(t, 0) is t
      end = ch.rate.finish(t_lat, prog_.msg_bytes[pc.first + ch.next]);
      if (end == kNever) return false;
    }
    arrival_[ch.arrivals + ch.next] = end;
    ch.busy_s += end - start;
    ch.free = end;
    ++ch.next;
    return true;
  }

  // Replays stage s's level changes of one iteration (StageReplay).
  [[gnu::noinline]] void replay_levels(std::uint32_t s);
  template <class Replay>
  void replay(std::uint32_t s, Replay r);
  // Op i's level changes: its start, and its end unless it is a forward (whose
  // activations stay until its backward). Inline: it is the replay's loop body.
  template <class Replay>
  [[gnu::always_inline]] void replay_op(Replay& r, const OpClass* classes, std::uint32_t i) const {
    const std::uint32_t k = p_ops_[i].cls;
    const OpClass& c = classes[k];
    r.until(times_[i].start);
    r.start(c, k);
    if (c.phase == Phase::Forward) return;
    r.until(times_[i].end);
    r.end(c, k);
  }

  const Scenario& sc_;
  const Program& prog_;
  // The program's arrays that the loops read, each one load away (through prog_ it
  // takes two, and they are reloaded after every call the compiler cannot see into).
  const ProgramOp* p_ops_;
  const ProgramStage* p_stages_;
  const OpClass* p_classes_;
  const ProgramChannel* p_channels_;
  const std::uint32_t* p_producer_;
  std::uint32_t S_;
  bool dynamic_w_;
  bool record_order_;
  OpDurations durations_;
  MessageLatencies latencies_;
  double t0_ = 0;
  std::vector<StageRun> stages_;
  std::vector<ChannelRun> channels_;
  std::vector<OpTimes> times_;            // per op of the iteration (index into Program::ops)
  std::vector<double> arrival_;           // per message: ChannelRun::arrivals + n
  std::vector<double> consumed_at_;       // per message (index into Program::producer)
  std::vector<double> counts_;            // per memory term (replay_levels)
  std::vector<std::uint32_t> pending_;    // dynamic W fill: pending W ops, per stage
  std::vector<std::uint32_t> executed_;   // dynamic W fill: ops in the order they ran, per stage
  std::vector<std::uint32_t> work_;       // stages whose awaited message arrived: the first nwork_
  std::uint32_t nwork_ = 0;
  std::vector<ReplayInput> inputs_;       // room for a stage's input channels (replay_levels)
  std::vector<std::uint32_t> input_term_;  // per channel: the term its messages wait in (SimpleReplay)
  std::vector<double> arrived_bytes_;     // per message n, laid out like arrival_: its channel's first n's bytes
  std::vector<ClassDeltas> deltas_;       // per class (ExactReplay)
  std::vector<ReplayKind> replay_;        // per stage: which replay replays it
  // The recorded sequence (a static order with unlimited buffers: flat_ok_), once the
  // first iteration has run (recorded_).
  bool flat_ok_ = true, recorded_ = false;
  std::vector<FlatOp> flat_;
  std::vector<FlatFinish> finishes_;
};

template <class Replay>
void Dataflow::replay(std::uint32_t s, Replay r) {
  StageRun& st = stages_[s];
  const OpClass* classes = &p_classes_[p_stages_[s].classes];
  if (dynamic_w_) {  // the ops in the order they ran
    for (std::uint32_t e = st.executed; e < st.executed_end; ++e) replay_op(r, classes, executed_[e]);
  } else {
    for (std::uint32_t i = st.begin; i < st.end; ++i) replay_op(r, classes, i);
  }
  // Every message is consumed by an op, so nothing arrives after the last op event; the
  // final values (nothing in flight, empty buffers) are the floor of the peaks.
  r.settle_last();
  r.finish(st.peak_memory, st.peak_inflight, st.last_t, channels_);
}

void Dataflow::replay_levels(std::uint32_t s) {
  const ProgramStage& ps = prog_.stages[s];
  const double last_t = stages_[s].last_t;
  switch (replay_[s]) {
    case ReplayKind::Simple: return replay(s, SimpleReplay<false>(prog_, ps, arrival_, channels_, last_t));
    case ReplayKind::SimpleSplit: return replay(s, SimpleReplay<true>(prog_, ps, arrival_, channels_, last_t));
    case ReplayKind::Exact:
      return replay(s, ExactReplay(prog_, ps, arrival_, arrived_bytes_, &deltas_[ps.classes], channels_, last_t));
    case ReplayKind::General: return replay(s, StageReplay(prog_, ps, counts_, arrival_, channels_, inputs_.data(), last_t));
  }
}

// Token buckets are the event engine's alone: their path, even never taken, would cost
// the transfer loop here about 1% for every scenario. Out of line, to leave the
// evaluator's own code as it compiles without it.
[[gnu::noinline]] bool has_token_buckets(const Program& program) {
  return std::any_of(program.channels.begin(), program.channels.end(),
                     [](const ProgramChannel& pc) { return pc.transfer == Transfer::Bucket; });
}

}  // namespace

std::optional<SimResult> run_dataflow(const Scenario& scenario, const Program& program, const SimOptions& options) {
  if (has_token_buckets(program)) return std::nullopt;
  Dataflow d(scenario, program, options.record_order);
  return d.run();
}

}  // namespace adagrouper::sim::eval
