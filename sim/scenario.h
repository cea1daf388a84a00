// A scenario: everything one simulation needs (the stages' parameters, the network,
// the schedule, the batch, how many iterations from when), already validated; and the
// measured op durations and message latencies of stage and message timing traces.
#pragma once

#include <optional>
#include <string>
#include <vector>

#include "network.h"
#include "pipeline.h"
#include "schedule.h"

namespace adagrouper::sim {

// One measured op duration from a stage timing trace: the op takes `duration_s`
// (nominal, still stretched by the stage's speed trace) instead of the profile's.
struct OpTiming {
  int iteration = 0;
  int stage = 0;  // the model stage (the stage, with one model stage per stage)
  int micro_batch = 0;
  Phase phase = Phase::Forward;
  double duration_s = 0;
  int line = 0;  // where it came from, for error messages (0: not from a file)
};

// One measured message latency from a message timing trace: the message spends
// `latency_s` in transit before its bytes move, instead of its channel's latency.
struct MessageTiming {
  int iteration = 0;
  int stage = 0;  // the model stage that sends it
  int micro_batch = 0;
  Phase phase = Phase::Forward;  // Forward: the activation message; Backward: the gradient message
  double latency_s = 0;
  int line = 0;  // where it came from, for error messages (0: not from a file)
};

struct Scenario {
  std::string pipeline_name;
  std::vector<StageParams> model_stages;  // the parameters at the run's micro-batch size, per model stage
  Network network;
  Schedule schedule;
  int micro_batch_size = 1;
  int global_batch_size = 1;   // M = global_batch_size / micro_batch_size
  int iterations = 1;
  // Absolute time at which iteration 0 starts: traces are functions of absolute time,
  // so this selects the window of the network traces the run sees.
  double start_time_s = 0.0;
  std::optional<double> memory_limit_bytes;
  // Measured durations that replace the profile's for the ops they name (empty: none).
  // Set with set_op_timings, which validates them.
  std::vector<OpTiming> op_timings;
  // Measured latencies that replace the channels' for the messages they name (empty:
  // none). Set with set_message_timings, which validates them.
  std::vector<MessageTiming> message_timings;

  int num_stages() const { return schedule.num_stages(); }  // D
  int num_model_stages() const { return static_cast<int>(model_stages.size()); }  // J
  int micro_batches() const { return global_batch_size / micro_batch_size; }
};

// Builds a scenario from a pipeline, a network and a schedule, checking that they
// agree (stage counts, b divides B and lies in every profile, the order is complete).
Scenario make_scenario(const Pipeline& pipeline, Network network, Schedule schedule, int micro_batch_size,
                       int iterations);

// Validates and installs measured op durations: the model stage (OpTiming::stage; with
// one model stage per stage, the stage), micro-batch and phase must exist and each op of
// an iteration may be listed once; iterations beyond the run are ignored. Errors name
// `source` and the entry's line.
void set_op_timings(Scenario& scenario, std::vector<OpTiming> timings, const std::string& source);

// Validates and installs measured message latencies: the sending model stage
// (MessageTiming::stage) and micro-batch must exist, the phase must be Forward (the
// activation message, not from the last model stage) or Backward (the gradient message,
// not from the first), and each message of an iteration may be listed once; iterations
// beyond the run are ignored, and so are messages between model stages on one stage,
// which take no transfer. Errors name `source` and the entry's line.
void set_message_timings(Scenario& scenario, std::vector<MessageTiming> timings, const std::string& source);

}  // namespace adagrouper::sim
