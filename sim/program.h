// A scenario compiled into flat arrays for the engine: every stage's ops with what
// each one waits for, and every channel's messages in the order the receiver consumes
// them (SPEC: a channel is a FIFO in the receiver's order). Internal to sim/.
#pragma once

#include <cstdint>
#include <vector>

#include "engine.h"

namespace adagrouper::sim {

enum class Dep : std::uint8_t {
  None,     // F on stage 0: ready when the iteration starts
  Message,  // the dep_index-th message of channel dep_channel has arrived
  Local,    // op dep_index of the same stage (F(S-1,m) for B(S-1,m)) has ended
};

struct ProgramOp {
  double duration;          // nominal seconds
  double act;               // activation bytes (F allocates, B releases)
  std::int32_t micro_batch;
  std::int32_t out_channel; // channel this op sends on, or -1
  std::uint32_t dep_channel;
  std::uint32_t dep_index;  // message number, or op index within the stage
  Phase phase;
  Dep dep;
};

struct ProgramMessage {
  std::uint32_t producer_index;  // op index within the sending stage
  std::int32_t micro_batch;
};

struct ProgramChannel {
  std::uint32_t sender, receiver;
  std::uint32_t first, count;    // its messages in Program::messages
  double bytes;                  // per message
  const ChannelSpec* spec;       // into the scenario's network
};

// Channel numbering: s -> s+1 is channel s; s+1 -> s is channel (S-1) + s.
struct Program {
  std::vector<ProgramOp> ops;            // all stages, stage after stage
  std::vector<std::uint32_t> stage_begin;  // S + 1 offsets into ops
  std::vector<ProgramChannel> channels;
  std::vector<ProgramMessage> messages;
  // For each op that consumes a message: which message (index into messages), else -1.
  std::vector<std::int64_t> consumes;
};

Program build_program(const Scenario& scenario);

}  // namespace adagrouper::sim
