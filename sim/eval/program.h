// A scenario compiled into flat arrays for the evaluators: every stage's ops in order
// and every channel's messages in the order the receiver consumes them (docs/model.md
// §3: a channel is a FIFO in the receiver's order). Internal to sim/.
//
// The arrays are kept small on purpose: the evaluators stream through them once per
// iteration, and their size decides whether that stream stays in cache. An op is 8
// bytes; what all ops of one (model stage, phase) on a stage share (duration, input
// and output channel, memory) lives in an OpClass of that stage.
#pragma once

#include <cstdint>
#include <vector>

#include "../accounting.h"
#include "../scenario.h"

namespace adagrouper::sim::eval {

inline constexpr std::uint32_t kNoChannel = 0xffffffffu;  // no input (or no remote output)
inline constexpr std::uint32_t kLocal = 0xfffffffeu;      // input: an earlier op on the same stage

// What every op of one (model stage, phase) on a stage shares. A stage with v model
// stages has 4v classes, class 4l + phase for its l-th model stage (in model order).
struct OpClass {
  double nominal = 0;             // duration at nominal speed
  std::uint32_t in = kNoChannel;  // channel it consumes from, kLocal, or kNoChannel
  std::uint32_t out = kNoChannel; // channel it sends on, or kNoChannel (nothing, or a local consumer)
  std::uint16_t act_term = 0;     // 2l: its model stage's act term (wgrad is act_term + 1)
  std::uint16_t slot_term = 0;    // the term its input message waits in (when `in` is a channel)
  std::uint16_t model_stage = 0;  // j
  Phase phase = Phase::Forward;
  std::uint8_t input = 0;         // which of the stage's input channels `in` is (when it is one)
};
static_assert(sizeof(OpClass) == 24);

struct ProgramOp {
  std::int32_t micro_batch;
  // Ops with an input channel: the number of the message they consume on it. Ops with a
  // local input (kLocal): the position, within the stage's listed ops, of the op they wait
  // for (F(j-1,m), the backward of (j+1,m), F(J-1,m) for the last model stage's
  // backward, I(j,m) for W(j,m)).
  std::uint32_t dep : 24;
  std::uint32_t cls : 8;  // index into the stage's classes
};
static_assert(sizeof(ProgramOp) == 8);

struct ProgramStage {
  std::uint32_t begin, end;      // its listed ops in Program::ops
  std::uint32_t w_begin, w_end;  // dynamic W fill: W(l, m) at w_begin + l M + m (else empty)
  std::uint32_t classes;         // its classes start at Program::classes[classes]
  // Memory (docs/model.md §5, §14): static bytes + sum over terms of bytes x count, in the
  // order of `terms`: per model stage l, act (x micro-batches with F started and no
  // backward ended) then wgrad (x I ended, W not), then per input slot the bytes of one
  // waiting message (x messages waiting in it).
  double static_bytes;
  std::uint32_t terms, nterms;   // into Program::terms
  std::uint32_t inputs, ninputs; // its input channels, into Program::inputs
  std::uint32_t locals;          // v
  bool unit_speed;               // speed constant 1: an op takes its nominal duration
  double opt;                    // optimizer step at the end of each iteration

  const OpClass& cls(const std::vector<OpClass>& all, const ProgramOp& op) const { return all[classes + op.cls]; }
};

// How a channel's transfers take their time: the latency alone (no rate, or no bytes to
// send), the latency and then bytes at the rate, or the same behind a token bucket.
enum class Transfer : std::uint8_t { Rate, LatencyOnly, Bucket };

struct ProgramChannel {
  std::uint32_t sender, receiver;
  std::uint32_t first, count;    // its messages in Program::producer, msg_bytes, msg_slot
  double latency_s;
  std::uint32_t capacity;        // 0: unlimited
  Transfer transfer;
  bool uniform;                  // every message has `bytes` (so the evaluators need not read msg_bytes)
  double bytes;
  const ChannelSpec* spec;       // into the scenario's network
};

// Where a memory term's bytes per count come from: one field of one model stage.
struct TermSource {
  enum class Field : std::uint8_t { Act, Wgrad, Out, Gout };
  std::uint32_t model_stage;
  Field field;
};

// Channel numbering: the forward messages' channels in model-stage order first
// (j -> j+1 for j = 0 .. J-2, skipping local ones and channels already numbered), then
// the backward ones (j+1 -> j); with one model stage per stage, s -> s+1 is channel s
// and s+1 -> s is channel (S-1) + s.
struct Program {
  std::vector<ProgramOp> ops;        // all stages, stage after stage (each: listed ops, then its W region)
  std::vector<ProgramStage> stages;
  std::vector<OpClass> classes;
  std::vector<double> terms;         // bytes per count, per stage (ProgramStage::terms)
  std::vector<TermSource> term_source;  // per term: the model stage's field it is
  std::vector<std::uint32_t> inputs; // input channels per stage
  std::vector<ProgramChannel> channels;
  // Per message (channel.first + n): the position, within the sending stage's listed
  // ops, of the op that produces the channel's n-th message; its bytes; and the memory
  // term (offset within the receiver's terms) its waiting counts in.
  std::vector<std::uint32_t> producer;
  std::vector<double> msg_bytes;
  std::vector<std::uint16_t> msg_term;
  bool dynamic_w = false;            // W ops are placed by dynamic W fill
  std::uint32_t max_pending_w = 0;   // P (0xffffffff: unlimited)
  int micro_batches = 0;

  // The size of channel c's n-th message.
  double message_bytes(const ProgramChannel& c, std::uint32_t n) const {
    return c.uniform ? c.bytes : msg_bytes[c.first + n];
  }
  // The message (index into producer) an op consumes, or -1 (a local input or none).
  std::int64_t consumed_message(std::uint32_t stage, const ProgramOp& op) const {
    const std::uint32_t c = stages[stage].cls(classes, op).in;
    return c >= kLocal ? -1 : static_cast<std::int64_t>(channels[c].first + op.dep);
  }
  // The op as the schedule names it.
  Op op_of(std::uint32_t stage, const ProgramOp& op) const;
  // Whether every sum of stage s's memory terms is exact in any order
  // (sums_exact_in_any_order with counts up to its ops and received messages), so that a
  // running total of its memory is stage_memory's value to the last bit.
  bool memory_sums_exact(std::uint32_t s) const;
};

// Compiles a validated scenario. Throws InputError when it is too large for the
// program's fields (more than 2^24 ops on a stage or messages on a channel).
Program build_program(const Scenario& scenario);

// Sets what depends on the model stages' parameters and the network's channels (nominal
// durations, static bytes and optimizer steps, memory terms, message bytes, and each
// channel's spec and transfer kind), keeping what depends on the schedule alone (ops,
// dependencies, channels, messages). build_program ends with it; a program built for a
// scenario with the same schedule, micro-batches and network layout is rebound to
// another's parameters with it, at a small part of the cost of building anew.
void bind_parameters(const Scenario& scenario, Program& program);

}  // namespace adagrouper::sim::eval
