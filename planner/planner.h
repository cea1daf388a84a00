// The Ada-Grouper planner: the library's entry header.
//
// (k, b) candidates on the memory-limit curve, the schedule families of today's
// runtimes at the curve's micro-batch sizes, each evaluated with the simulator, the
// fastest feasible one chosen, and its per-device programs (docs/model.md sections 11
// and 14). It also includes the headers of models, partitioning, profiling and adaptive
// re-planning.
//
//   PlanResult r = make_plan(pipeline, network, options);
//   plan_json(r, inputs)  ->  the adagrouper.plan/2 document (docs/formats.md)
#pragma once

#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include <nlohmann/json.hpp>

#include "sim.h"

namespace adagrouper {
class Field;  // json_util.h
}

namespace adagrouper::planner {

// --- memory model -------------------------------------------------------------

// Per-stage peak memory bound for running `schedule` with these model-stage parameters
// (one per model stage, sim::Pipeline::at): static + the activations of each of a
// stage's model stages in flight (act until B or I ends, then weight_grad_bytes until W
// ends) + messages that can be waiting in its receive slots (local messages take none),
// evaluated jointly op by op. Never below what the simulator measures on any network (a
// message can only be waiting if its producer does not depend on the receiver's current
// op through any chain of order and message edges). The activation part is exact with W
// ops in the order; under dynamic W fill the pending W are bounded by P, or by every I so
// far with P unlimited. The buffer part allows what a delayed receiver could accumulate
// (docs/model.md sections 11 and 14).
std::vector<double> memory_model(const std::vector<sim::StageParams>& stages, const sim::Schedule& schedule,
                                 const sim::Network& network);

// Peak micro-batches in flight per stage implied by an order alone (under dynamic W fill
// the bound the memory model uses for the pending W).
std::vector<int> peak_inflight(const sim::Schedule& schedule);

// --- model stages on stages -----------------------------------------------------

// The pipeline with its J model stages merged, in consecutive groups of J / model_stages,
// into `model_stages` model stages (docs/model.md section 11): forward, backward, I and
// W times, static bytes and optimizer times, activation and weight-gradient bytes add; the
// message inside a group disappears; a merged model stage sends its last part's
// output_bytes and its first part's grad_output_bytes; its op overhead is the parts' mean
// (one op, one overhead). Profiles are merged at every size
// any part lists within the range all cover, so interpolation stays exact (to rounding).
// Throws InputError naming --devices when model_stages does not divide J; J itself
// returns the pipeline unchanged.
sim::Pipeline merge_model_stages(const sim::Pipeline& pipeline, int model_stages);

// The pipeline file of a pipeline (docs/formats.md), as `plan --pipeline-output` writes
// the chosen plan's merged pipeline: `simulate` on it reproduces the plan's prediction.
nlohmann::ordered_json pipeline_file_json(const sim::Pipeline& pipeline);

// --- candidates -----------------------------------------------------------------

// The name of kFkB with split backward and dynamic W fill among the families.
inline constexpr std::string_view kKfkbDynamic = "kfkb-dynamic";

// The families make_plan can consider beyond the memory-limit curve and the baselines
// (kfkb, 1f1b, gpipe and dapple-b, always considered): kfkb-dynamic, then the registry's
// families that section 2 does not describe, in registry order.
std::vector<std::string> extra_families();
// `--families LIST`: comma-separated names of extra_families() (kfkb, 1f1b, gpipe and
// dapple-b are accepted and always considered), or "all". Returns the extra ones, in
// extra_families() order; InputError naming --families for an unknown name.
std::vector<std::string> parse_families(std::string_view list);
// `--virtual-stages LIST`: comma-separated v >= 1, increasing and without repeats in the
// result; InputError naming --virtual-stages otherwise.
std::vector<int> parse_virtual_stages(std::string_view list);

// --rank-by: predicted (the simulated run, as `simulate` reports it) or deployed (with
// dynamic W fill, the order a runtime that executes the plan's programs runs).
enum class RankBy { Predicted, Deployed };
// "predicted" or "deployed"; InputError naming --rank-by otherwise.
RankBy parse_rank_by(std::string_view name);
const char* to_string(RankBy r);

struct PlanOptions {
  double memory_limit_bytes = 0;  // per stage
  int global_batch_size = 0;      // B (fixed)
  int eval_iterations = 1;        // iterations simulated per candidate
  double eval_start_s = 0;        // absolute time at which they start
  // D: the stages (devices) the pipeline's J model stages run on, J a multiple of D;
  // 0: D = J. Candidates with v model stages per stage run the pipeline merged into D x v
  // model stages (merge_model_stages).
  int devices = 0;
  std::vector<int> virtual_stages;    // v considered, each dividing J / D; empty: every divisor
  std::vector<std::string> families;  // extra_families() considered (empty: none, as before)
  // What candidates are ranked by: their predicted iteration time, or, for dynamic W fill,
  // their deployed one (Candidate::deployed_iteration_time_s).
  RankBy rank_by = RankBy::Predicted;
};

// Refused: the family does not run (D, v, M) (PyTorch's constraint); the reason says why.
enum class Status { Chosen, Lost, Pruned, Infeasible, Refused };
std::string to_string(Status s);

struct Candidate {
  // kfkb with its k, 1f1b, dapple-b, gpipe, or a family with its v, split backward and
  // W fill (kfkb-dynamic is kfkb or 1f1b with split_backward and dynamic W fill).
  sim::ScheduleSpec spec;
  // The group size outputs report (the "k" of plan JSON, tables and rows): spec.k for
  // kfkb, 1 for 1f1b, dapple-b and the families of today's runtimes, M for gpipe
  // (sim::Schedule::k).
  int k = 0;
  int micro_batch_size = 0;
  int micro_batches = 0;
  bool baseline = false;          // one of the baselines (1f1b, dapple-b, gpipe)
  std::vector<double> model_memory;      // per stage, the memory model (refused: empty)
  std::vector<double> simulated_memory;  // per stage, measured by the simulator (evaluated only)
  bool evaluated = false;
  double predicted_iteration_time_s = 0;  // mean over the evaluated iterations
  // Dynamic W fill only: the mean over the evaluated iterations when each runs the order
  // the fill executed in the first (sim::fixed_order_schedule). The plan's programs
  // record that order, so a runtime that executes them (the replay, PyTorch's runtime
  // with the plan's CSV) runs this; the fill's prediction assumes a runtime that places
  // W ops as it goes. Equal to the predicted time over one iteration.
  std::optional<double> deployed_iteration_time_s;
  double throughput_samples_per_s = 0;
  Status status = Status::Pruned;
  std::string reason;

  double peak_model_memory() const;
  int peak_stage() const;  // stage with the largest model memory
  // The iteration time the candidate is ranked by: the deployed one with
  // RankBy::Deployed where it has one, else the predicted one.
  double ranked_time_s(RankBy rank_by) const;
  int virtual_stages() const { return spec.virtual_stages; }
  // The plan as users name it: "kfkb k=3 b=1", "1f1b b=4", "zbv b=2".
  std::string label() const { return spec.label(micro_batch_size); }
};

struct PlanResult {
  sim::Pipeline pipeline;  // as given, with the options' B and memory limit
  sim::Network network;
  PlanOptions options;
  int devices = 0;         // D
  // Curve points, pruned and infeasible points, baselines, then the extra families.
  std::vector<Candidate> candidates;
  std::size_t chosen = 0;             // index into candidates
  std::optional<std::size_t> one_f_one_b;  // the evaluated 1f1b baseline, if feasible
  // The candidate the other --rank-by would choose, when it is another one.
  std::optional<std::size_t> other_rank_choice;
  // The chosen plan's orders as its devices run them: with dynamic W fill, where the
  // evaluated run put the W ops (its first iteration; the spec still says dynamic).
  sim::Schedule chosen_schedule;
  sim::Pipeline chosen_pipeline;                // the pipeline merged into D x v model stages
  std::vector<sim::StageParams> chosen_stages;  // its model stages' parameters at the chosen b
  double speedup_over_1f1b() const;       // 0 when 1f1b does not fit
};

// Enumerates, evaluates and selects. Throws InputError when no candidate fits the
// memory limit (naming the smallest memory any candidate needs and its stage), and for
// bad options (--devices not dividing the model stages, a v that does not divide J / D, a
// network of another number of stages).
PlanResult make_plan(const sim::Pipeline& pipeline, const sim::Network& network, const PlanOptions& options);

// What a candidate deploys: for dynamic W fill, the order the fill executed in the first
// iteration of `evaluation` (a scenario of the candidate's schedule: the plan's
// evaluation), as a static order (sim::fixed_order_schedule), which is what the plan's
// programs record for it when it is chosen and what deployed_iteration_time_s runs;
// any other schedule, itself.
sim::Schedule deployed_schedule(const sim::Scenario& evaluation);

// The pipeline a plan (its root) evaluated its candidates on: its pipeline input (as
// sim::plan_input_path finds it), or for a plan made with `plan --model` the model cut at
// the plan's partition bounds; `source` names it. InputError naming the field when the
// plan has neither or the file is not there, followed by `remedy` (what the caller's
// user can do about it).
sim::Pipeline planned_pipeline(const Field& plan, std::string& source, std::string_view remedy);

// The order a plan would record for its candidate `run` (of `schedule`) were it chosen:
// deployed_schedule of the plan's evaluation (its iterations and start) on the plan's own
// pipeline (planned_pipeline, merged to the candidate's model stages) and on
// `network_input` (sim::load_planned_network) with the rates the plan measured. It is
// the plan's, whatever pipeline a replay runs or a simulation times: both run this order.
sim::Schedule planned_order(const sim::PlannedRun& run, const Field& plan, const sim::NetworkSpec& network_input,
                            sim::Schedule schedule);

// --- device programs ------------------------------------------------------------

struct ProgramEntry {
  enum class Kind { Forward, Backward, Send, Recv, BackwardInput, BackwardWeight } kind;
  int micro_batch = 0;
  int peer = -1;          // send / recv
  double bytes = 0;       // send / recv
  // send / recv: 2 (m v + l) for activations, 2 (m v + l) + 1 for gradients, l the index
  // of the sending model stage among its stage's (2m and 2m+1 with one per stage)
  int tag = 0;
  // send / recv: one per ordered pair of stages: 2s for s -> s+1, 2s+1 for s+1 -> s, then
  // the pairs that are not neighbours, numbered in order of (from, to)
  int communicator = 0;
  int model_stage = 0;    // of the compute op, or of the op that sends / consumes the message
};

// "forward", "backward", "backward_input", "backward_weight", "send", "recv": the op
// names of plan JSON.
const char* program_entry_name(ProgramEntry::Kind kind);

// The compute op an entry runs (phase, micro-batch, model stage); none for a send or recv.
std::optional<sim::Op> compute_op(const ProgramEntry& e);

// A communicator: the messages of one ordered pair of stages.
struct Communicator {
  int id = 0;
  int from = 0, to = 0;
  bool activations = false, gradients = false;  // what it carries
};

// The communicators of a schedule: every pair of neighbours in both directions (ids 2s
// for s -> s+1, 2s+1 for s+1 -> s), then the pairs that are not neighbours but exchange
// messages (model stages on stages), ordered by (from, to).
std::vector<Communicator> communicators(const sim::Schedule& schedule);

struct DeviceProgram {
  int stage = 0;
  std::vector<ProgramEntry> entries;  // in issue order; compute, send and recv streams
};

// The programs of a schedule (one model-stage parameter entry per model stage): each
// compute op, preceded by the recv of its input and followed by the send of its output
// (local messages need neither), on separate send and recv streams. A communicator's
// sends are issued in the order its receiver consumes them (the simulator's FIFO): a send
// whose message is produced before an earlier one's waits after that one's producer.
// Orders of dynamic W fill must list their W ops (PlanResult::chosen_schedule does).
std::vector<DeviceProgram> device_programs(const sim::Schedule& schedule, const std::vector<sim::StageParams>& stages);

// Checks that every send has exactly one matching recv (communicator, tag, bytes,
// peers), that both sides issue each communicator's operations in the same order,
// and that the combined dependency graph (Boost.Graph) has no cycle. Returns the
// problems found, empty when the programs are valid.
std::vector<std::string> validate_programs(const std::vector<DeviceProgram>& programs);

// Reads a plan's `devices`, as plan_json writes them: one program per stage, in stage
// order, each entry as written (an adagrouper.plan/1 entry without model_stage runs its
// stage's). InputError naming the file and field. It does not validate the programs
// against each other: validate_programs does.
std::vector<DeviceProgram> read_device_programs(const Field& devices, int stages, int model_stages);

// --- output ---------------------------------------------------------------------

struct InputFile {
  std::string role;  // "pipeline", "network"
  std::string path;
  std::string sha256;
};

// The adagrouper.plan/2 document. Validates the programs first and throws
// std::logic_error if they are invalid (a bug, never bad input).
nlohmann::ordered_json plan_json(const PlanResult& plan, const std::vector<InputFile>& inputs);

// Table of candidates with the chosen one marked, and one sentence on why it won.
std::string plan_text(const PlanResult& plan);

}  // namespace adagrouper::planner

// Layer-level models, stage partitioning, channel profiling and adaptive re-planning
// (they include this header themselves where they need it).
#include "model.h"      // Model, load_model, generate_model, merge_measured
#include "partition.h"  // partition, pipeline_of, plan_model
#include "profiling.h"  // window_rate: rates from measured transfers
#include "adapt.h"      // run_adapt: adaptive re-planning
