// A scenario compiled into flat arrays for the evaluators: every stage's ops in order
// and every channel's messages in the order the receiver consumes them (docs/model.md
// §3: a channel is a FIFO in the receiver's order). Internal to sim/.
//
// The arrays are kept small on purpose: the engine streams through them once per
// iteration, 64 stages and 126 channels at a time in the large benchmarks, and their
// size is what decides whether that stream stays in cache. An op is 8 bytes; what is
// the same for all ops of a stage (durations, bytes, channels) lives in ProgramStage.
#pragma once

#include <cstdint>
#include <vector>

#include "../accounting.h"
#include "../scenario.h"

namespace adagrouper::sim::eval {

inline constexpr std::uint32_t kNoChannel = 0xffffffffu;

struct ProgramOp {
  std::int32_t micro_batch;
  // Forward ops with an input channel and backward ops with one: the number of the
  // message they consume on it. Backward ops on the last stage: the index (within the
  // stage) of F(S-1, m), which must have ended.
  std::uint32_t dep_index : 31;
  std::uint32_t backward : 1;

  Phase phase() const { return backward ? Phase::Backward : Phase::Forward; }
};
static_assert(sizeof(ProgramOp) == 8);

struct ProgramStage {
  std::uint32_t begin, end;  // ops of this stage in Program::ops
  // Indexed by ProgramOp::backward ([0] forward, [1] backward), so that choosing by an
  // op's phase is a load, not a branch: the phases of consecutive ops are data-dependent.
  double nominal[2];          // durations of F and B at nominal speed
  MemoryTerms memory;         // static, act, and bytes of a message on in[0] / in[1] (0 without)
  std::uint32_t in[2];        // channels F / B consume from (or kNoChannel)
  std::uint32_t out[2];       // channels F / B send on (or kNoChannel)
  bool unit_speed;            // speed constant 1: an op takes its nominal duration

  double duration(const ProgramOp& op) const { return nominal[op.backward]; }
  std::uint32_t in_channel(const ProgramOp& op) const { return in[op.backward]; }
  std::uint32_t out_channel(const ProgramOp& op) const { return out[op.backward]; }
};

struct ProgramChannel {
  std::uint32_t sender, receiver;
  std::uint32_t first, count;    // its messages in Program::producer
  double bytes;                  // per message
  double latency_s;
  std::uint32_t capacity;        // 0: unlimited
  bool unlimited;                // no rate: a transfer takes only the latency
  const ChannelSpec* spec;       // into the scenario's network
};

// Channel numbering: s -> s+1 is channel s; s+1 -> s is channel (S-1) + s.
struct Program {
  std::vector<ProgramOp> ops;        // all stages, stage after stage
  std::vector<ProgramStage> stages;
  std::vector<ProgramChannel> channels;
  // producer[channel.first + n]: index, within the sending stage, of the op that
  // produces the channel's n-th message.
  std::vector<std::uint32_t> producer;

  // The message (index into producer) an op consumes, or -1 (stage-local or none).
  std::int64_t consumed_message(std::uint32_t stage, const ProgramOp& op) const {
    const std::uint32_t c = stages[stage].in_channel(op);
    return c == kNoChannel ? -1 : static_cast<std::int64_t>(channels[c].first + op.dep_index);
  }
};

Program build_program(const Scenario& scenario);

}  // namespace adagrouper::sim::eval
