// PyTorch profiler (Kineto) traces of pipeline-parallel training: reading the Chrome
// trace JSON that torch.profiler exports (one file per rank, plain or gzip), finding the
// PP:<action> ranges of torch.distributed.pipelining (or names that --action-regex
// matches) and the NCCL send/recv kernels, and turning them into a pipeline file, a
// stage timing trace and transfer samples. docs/formats.md, "PyTorch profiler traces".
//
//   traces::ActionPattern p = traces::torch_action_pattern();
//   std::vector<traces::KinetoRank> ranks{traces::load_kineto("rank0.json", p), ...};
//   traces::KinetoStages st = traces::collect_stages(ranks);
//   nlohmann::json pipe = traces::kineto_pipeline(st, {.micro_batch_size = 2});
#pragma once

#include <array>
#include <cstddef>
#include <filesystem>
#include <optional>
#include <regex>
#include <string>
#include <string_view>
#include <vector>

#include <nlohmann/json_fwd.hpp>

#include "schedule.h"  // sim::Phase

namespace adagrouper::traces {

// How an annotation's name names an action: torch's PP:<stage><type><microbatch>, or a
// regular expression with the capture groups stage, type and microbatch.
struct ActionPattern {
  std::optional<std::regex> regex;  // nullopt: torch's format, read without a regex
  int stage_group = 1, type_group = 2, micro_batch_group = 3;
  std::string text;  // as given, for messages
};

// torch.distributed.pipelining's names: "PP:2F0", "PP:1SEND_B3", ...
ActionPattern torch_action_pattern();
// A user's pattern (ECMAScript syntax): named groups (?<stage>...), (?<type>...),
// (?<microbatch>...) (or (?P<name>...)), else the first three groups in that order.
// Throws InputError naming `option` for a bad expression or missing groups.
ActionPattern parse_action_pattern(const std::string& regex, const std::string& option);

// One measured compute op (F, B, I or W of one micro-batch of one model stage).
struct KinetoOp {
  int stage = 0, micro_batch = 0;
  sim::Phase phase = sim::Phase::Forward;
  double start_us = 0, duration_us = 0;
  std::size_t event = 0;  // index in traceEvents (the first, when ranges were merged)
  // A part of an OVERLAP_F_B range: its share of the range's time, not a measurement of
  // its own (not in the medians; in the stage trace).
  bool overlapped = false;
};

// One NCCL send/recv kernel.
struct KinetoTransfer {
  double start_us = 0, duration_us = 0;
  std::optional<double> bytes;  // from the kernel's args, when they say
  std::size_t event = 0;
};

// What one rank's file holds.
struct KinetoRank {
  std::string source;
  bool gpu = false;               // ranges from gpu_user_annotation events (else CPU ranges)
  std::vector<KinetoOp> ops;      // in time order; ranges of one action that overlap merged
  std::vector<KinetoTransfer> transfers;  // in time order
  std::size_t skipped = 0;        // matched actions that are not compute (SEND_F, RECV_B, ...)
  std::size_t overlapped = 0;     // OVERLAP_F_B ranges, split into their parts (in ops)
};

// Decompresses gzip data (magic 1f 8b; several members allowed); other data unchanged.
// Throws InputError "SOURCE: gzip: ..." for corrupt or truncated data.
std::string maybe_gunzip(std::string text, const std::string& source);

// Parses one rank's trace (the bytes of the file, gzip or not). Errors are InputErrors
// naming `source` and the event: "rank1.json: traceEvents[42].dur: must be >= 0, got -1".
KinetoRank parse_kineto(std::string text, const std::string& source, const ActionPattern& pattern);
KinetoRank load_kineto(const std::filesystem::path& path, const ActionPattern& pattern);

// The samples (seconds) of one model stage, by phase (F, B, I, W).
struct StageSamples {
  std::array<std::vector<double>, 4> seconds;
  std::vector<std::string> sources;  // the rank files it appears in
  const std::vector<double>& of(sim::Phase p) const { return seconds[static_cast<std::size_t>(p)]; }
};

struct KinetoStages {
  std::vector<StageSamples> stages;  // model stages 0..S-1
  int micro_batches = 0;             // distinct micro-batch indices seen
};

// Groups every rank's ops by model stage. Throws InputError when a stage between 0 and
// the highest has no F, or none of B and I+W, or I without W.
KinetoStages collect_stages(const std::vector<KinetoRank>& ranks);

// The median of a non-empty list (the mean of the middle two for an even count).
double median(std::vector<double> v);

struct PipelineOptions {
  int micro_batch_size = 1;
  int global_batch_size = 0;  // 0: micro_batch_size x micro_batches
  std::string name;           // "": no name (the loader takes the file name)
};

// The pipeline file (docs/formats.md, "Pipeline file"): one stage per model stage, one
// profile entry at micro_batch_size, medians as durations, bytes 0; the spread in each
// stage's description.
nlohmann::ordered_json kineto_pipeline(const KinetoStages& stages, const PipelineOptions& options);

// The stage timing trace (iteration,stage,micro_batch,phase,duration_s): the n-th
// occurrence of an op in a file is iteration n. A stage found in several files (data-
// parallel replicas) is taken from the first.
std::string kineto_stage_trace(const std::vector<KinetoRank>& ranks);

// Transfer samples (time_s,bytes,duration_s) of every NCCL send/recv kernel, times from
// the first one. Throws InputError when there is none or one has no byte count.
std::string kineto_transfer_samples(const std::vector<KinetoRank>& ranks);

}  // namespace adagrouper::traces
