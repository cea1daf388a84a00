// The pipeline file (docs/formats.md): stages with measured per-micro-batch-size
// profiles, and the per-stage parameters the execution model uses for one size b.
#pragma once

#include <filesystem>
#include <optional>
#include <string>
#include <vector>

#include <nlohmann/json_fwd.hpp>

namespace adagrouper::sim {

// Largest global and micro-batch size an input may give (so that M, k and the loops
// over sizes stay far from the limits of int).
inline constexpr int kMaxBatchSize = 1 << 24;
// Most stages a pipeline may have: a network between S stages holds S x S channels.
inline constexpr int kMaxStages = 4096;
// Most compute ops one iteration may have (2 x M x model stages): the schedule and the
// evaluators hold every op.
inline constexpr long long kMaxOps = 1LL << 26;
// Memory a run takes per compute op of an iteration (its schedule, compiled program and
// the evaluator's times), rounded up from 63 bytes measured with the dataflow evaluator
// (1F1B, 4 stages, M = 2^20: 532 MB peak) for messages that say how much a run needs.
inline constexpr double kBytesPerOp = 64;
// Most iterations one run may simulate.
inline constexpr int kMaxIterations = 1'000'000;
// Largest byte count an input may give (so that sums over stages and micro-batches stay
// finite).
inline constexpr double kMaxBytes = 1e18;

struct ProfilePoint {
  int micro_batch_size = 0;
  double forward_s = 0, backward_s = 0;
  double activation_bytes = 0, output_bytes = 0;
  std::optional<double> grad_output_bytes;
  // The halves of a split backward (docs/model.md §14): neither given, each is
  // backward_s / 2; one given, the other is backward_s minus it.
  std::optional<double> backward_input_s, backward_weight_s;
  std::optional<double> weight_grad_bytes;  // the activations W still needs (default activation_bytes)

  // I and W durations and W's bytes with those defaults applied.
  double input_s() const;
  double weight_s() const;
  double weight_bytes() const { return weight_grad_bytes.value_or(activation_bytes); }
};

struct StageSpec {
  double static_bytes = 0;
  double optimizer_s = 0;
  // What the host adds to every op of the stage (F, B, I, W) beyond its profile: a
  // launch or a wake-up, measured (docs/model.md §1, "Op overhead"). Not summed when
  // model stages merge: a merged op pays it once.
  double op_overhead_s = 0;
  std::vector<ProfilePoint> profile;  // sorted by micro_batch_size, strictly increasing
};

// What the execution model needs of stage s for one micro-batch size (docs/model.md §1).
struct StageParams {
  double fwd = 0, bwd = 0;   // nominal durations of F and B
  double bwd_input = 0;      // nominal duration of I (the gradient with respect to the input)
  double bwd_weight = 0;     // nominal duration of W (the gradient with respect to the weights)
  double wgrad = 0;          // bytes of act that W still needs after I (<= act)
  double act = 0;            // bytes F keeps alive until B ends
  double out = 0;            // bytes F sends to s+1 (0 on the last stage)
  double gout = 0;           // bytes B sends to s-1 (0 on the first stage)
  double static_bytes = 0;   // always resident
  double opt = 0;            // optimizer step at the end of each iteration
};

struct Pipeline {
  std::string name;
  std::string source;        // the file it was read from (for messages)
  int global_batch_size = 0;
  std::optional<double> memory_limit_bytes;
  std::vector<StageSpec> stages;

  int num_stages() const { return static_cast<int>(stages.size()); }
  // Smallest and largest micro-batch size every stage's profile covers.
  int min_micro_batch_size() const;
  int max_micro_batch_size() const;
  // Per-stage parameters at micro-batch size b (linear interpolation between measured
  // sizes), each op's duration with its stage's op_overhead_s added. Throws InputError
  // if b does not divide the global batch or lies outside a stage's profile; `what`
  // names the option or field that supplied b.
  std::vector<StageParams> at(int b, const std::string& what = "--micro-batch-size") const;
  // The pipeline with no op overhead: what its profiles alone give (the ops a replay
  // runs, whose host adds its own).
  Pipeline without_op_overhead() const;
};

Pipeline load_pipeline(const std::filesystem::path& path);
Pipeline parse_pipeline(const nlohmann::json& doc, const std::string& source);

// One profile entry as a pipeline file writes it (docs/formats.md): its sizes and times,
// the optional fields only when set; output_bytes left out when `with_output` is false
// (a last stage sends nothing).
nlohmann::ordered_json profile_point_json(const ProfilePoint& pt, bool with_output = true);

}  // namespace adagrouper::sim
