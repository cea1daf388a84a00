// What a simulation produces: iteration times, per-stage and per-channel statistics,
// and (on request) the timeline of every op, transfer and counter change.
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "accounting.h"
#include "schedule.h"

namespace adagrouper::sim {

struct StageResult {
  int stage = 0;
  double busy_s = 0;        // F and B ops, end minus start (speed traces included)
  double bubble_s = 0;      // total time minus busy_s (includes optimizer steps)
  double optimizer_s = 0;   // optimizer steps, summed over iterations
  int peak_inflight = 0;    // micro-batches whose F started and B not yet ended
  double peak_memory_bytes = 0;
};

struct ChannelResult {
  int from = 0, to = 0;
  double busy_s = 0;            // time spent transferring (latency included)
  int peak_queue_depth = 0;     // messages arrived at the receiver, not yet consumed
  std::uint64_t messages = 0;
  double bytes = 0;
};

struct Timeline {
  struct OpSlice {
    std::int32_t stage, iteration;
    Op op;
    double start, end;
  };
  // A message's way through its channel: ready (its producing op ended) until start it
  // waits for the channel (earlier messages, or a full receiver); from start the channel
  // takes the latency, and from moving (start + latency) to end it moves the bytes.
  struct TransferSlice {
    std::int32_t from, to, iteration, micro_batch;
    double ready, start, moving, end, bytes;
    std::int32_t model_stage;  // of the op that sent it
    bool gradient;             // a gradient (sent by B or I), else an activation (sent by F)
  };
  // An optimizer step, on the stage's compute stream after its last op of the iteration.
  struct StepSlice {
    std::int32_t stage, iteration;
    double start, end;
  };
  // A counter's value from `time` on: the memory of `stage`, or the receive buffer
  // depth on `stage` of the channel from stage `peer` (-1 for memory).
  struct Sample {
    std::int32_t stage;
    Counter kind;
    std::int32_t peer;
    double time, value;
  };
  // The rate (bytes/s) of the channel from -> to from `time` on, over the run's span.
  struct RateSample {
    std::int32_t from, to;
    double time, value;
  };
  // Per channel at most this many rate samples: a trace that changes more often during
  // the run is recorded as its mean over as many equal buckets.
  static constexpr std::size_t kMaxRateSamples = 10000;
  std::vector<OpSlice> ops;
  std::vector<StepSlice> optimizer;
  std::vector<TransferSlice> transfers;
  std::vector<Sample> counters;
  std::vector<RateSample> rates;  // per channel with a rate, in time order
};

struct SimResult {
  // What was run.
  std::string pipeline;
  ScheduleSpec spec;          // the schedule that was run
  int k = 0;                  // group size (custom orders: 0)
  int micro_batch_size = 0;
  int micro_batches = 0;
  int global_batch_size = 0;
  int num_stages = 0;
  int model_stages = 0;       // J
  int virtual_stages = 1;     // v = J / stages
  std::string placement;      // "loop", "V" or "as listed" with model stages; "" with one per stage
  int iterations = 0;
  double start_time_s = 0;    // absolute time at which iteration 0 started
  std::optional<double> memory_limit_bytes;

  // What came out.
  std::vector<double> iteration_times_s;
  double total_time_s = 0;
  std::vector<StageResult> stages;
  std::vector<ChannelResult> channels;
  std::uint64_t compute_ops = 0;
  std::uint64_t transfers = 0;
  std::optional<Timeline> timeline;
  // With SimOptions::record_order: the order each stage ran its ops in, per iteration
  // (with dynamic W fill, where the W ops went).
  std::vector<std::vector<std::vector<Op>>> executed;

  double mean_iteration_time_s() const;
  double throughput_samples_per_s() const;
  double bubble_fraction() const;
  bool fits_memory() const;
};

// The summary JSON (docs/formats.md), with per-stage bubble and optimizer time, the
// channels, and memory-limit checks. Field order is fixed.
nlohmann::ordered_json summary_json(const SimResult& r);

// How the backward ran: split_backward, w_fill ("static" or "dynamic") and max_pending_w
// (null when unbounded), as the summary and the plan's candidates write them.
void backward_fields_json(const ScheduleSpec& spec, nlohmann::ordered_json& j);

// The human summary `adagrouper simulate` prints by default.
std::string summary_text(const SimResult& r);

// Chrome trace / Perfetto JSON of r.timeline (which must be present).
std::string timeline_json(const SimResult& r);

}  // namespace adagrouper::sim
