// The Ada-Grouper planner: the library's entry header.
//
// (k, b) candidates on the memory-limit curve, each evaluated with the simulator, the
// fastest feasible one chosen, and its per-device programs (docs/model.md section 11).
// It also includes the headers of models, partitioning, profiling and adaptive
// re-planning.
//
//   PlanResult r = make_plan(pipeline, network, options);
//   plan_json(r, inputs)  ->  the adagrouper.plan/1 document (docs/formats.md)
#pragma once

#include <optional>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "sim.h"

namespace adagrouper::planner {

// --- memory model -------------------------------------------------------------

// Per-stage peak memory bound for running `schedule` with these stage parameters:
// static + act x micro-batches in flight + messages that can be waiting in the
// receive buffers, evaluated jointly op by op. Never below what the simulator
// measures on any network (a message can only be waiting if its producer does not
// depend on the receiver's current op). The activation part is exact; the buffer part
// allows what a delayed receiver could accumulate (docs/model.md section 11).
std::vector<double> memory_model(const std::vector<sim::StageParams>& stages, const sim::Schedule& schedule,
                                 const sim::Network& network);

// Peak micro-batches in flight per stage implied by an order alone.
std::vector<int> peak_inflight(const sim::Schedule& schedule);

// --- candidates -----------------------------------------------------------------

struct PlanOptions {
  double memory_limit_bytes = 0;  // per stage
  int global_batch_size = 0;      // B (fixed)
  int eval_iterations = 1;        // iterations simulated per candidate
  double eval_start_s = 0;        // absolute time at which they start
};

enum class Status { Chosen, Lost, Pruned, Infeasible };
std::string to_string(Status s);

struct Candidate {
  sim::ScheduleSpec spec;         // kfkb with its k, or 1f1b, dapple-b, gpipe (no k)
  // The group size outputs report (the "k" of plan JSON, tables and rows): spec.k for
  // kfkb, 1 for 1f1b and dapple-b, M for gpipe (sim::Schedule::k).
  int k = 0;
  int micro_batch_size = 0;
  int micro_batches = 0;
  bool baseline = false;          // one of the baselines (1f1b, dapple-b, gpipe)
  std::vector<double> model_memory;      // per stage, the memory model
  std::vector<double> simulated_memory;  // per stage, measured by the simulator (evaluated only)
  bool evaluated = false;
  double predicted_iteration_time_s = 0;  // mean over the evaluated iterations
  double throughput_samples_per_s = 0;
  Status status = Status::Pruned;
  std::string reason;

  double peak_model_memory() const;
  int peak_stage() const;  // stage with the largest model memory
  // The plan as users name it: "kfkb k=3 b=1", "1f1b b=4", "gpipe b=1".
  std::string label() const { return spec.label(micro_batch_size); }
};

struct PlanResult {
  sim::Pipeline pipeline;
  sim::Network network;
  PlanOptions options;
  std::vector<Candidate> candidates;  // curve points, pruned and infeasible points, baselines
  std::size_t chosen = 0;             // index into candidates
  std::optional<std::size_t> one_f_one_b;  // the evaluated 1f1b baseline, if feasible
  sim::Schedule chosen_schedule;
  std::vector<sim::StageParams> chosen_stages;  // stage parameters at the chosen b
  double speedup_over_1f1b() const;       // 0 when 1f1b does not fit
};

// Enumerates, evaluates and selects. Throws InputError when no candidate fits the
// memory limit (naming the smallest memory any candidate needs and its stage).
PlanResult make_plan(const sim::Pipeline& pipeline, const sim::Network& network, const PlanOptions& options);

// --- device programs ------------------------------------------------------------

struct ProgramEntry {
  enum class Kind { Forward, Backward, Send, Recv } kind;
  int micro_batch = 0;
  int peer = -1;          // send / recv
  double bytes = 0;       // send / recv
  int tag = 0;            // 2m for activations, 2m+1 for gradients
  int communicator = 0;   // 2s for s -> s+1, 2s+1 for s+1 -> s
};

struct DeviceProgram {
  int stage = 0;
  std::vector<ProgramEntry> entries;  // in issue order; compute, send and recv streams
};

// The programs of a schedule: each compute op, preceded by the recv of its input and
// followed by the send of its output, on separate send and recv streams.
std::vector<DeviceProgram> device_programs(const sim::Schedule& schedule, const std::vector<sim::StageParams>& stages);

// Checks that every send has exactly one matching recv (communicator, tag, bytes,
// peers), that both sides issue each communicator's operations in the same order,
// and that the combined dependency graph (Boost.Graph) has no cycle. Returns the
// problems found, empty when the programs are valid.
std::vector<std::string> validate_programs(const std::vector<DeviceProgram>& programs);

// --- output ---------------------------------------------------------------------

struct InputFile {
  std::string role;  // "pipeline", "network"
  std::string path;
  std::string sha256;
};

// The adagrouper.plan/1 document. Validates the programs first and throws
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
