// `adagrouper-calib replay`: run a plan for real and measure it (docs/fidelity.md).
//
// Under mpirun, one rank per stage, each rank executes its device program from the plan
// JSON (`adagrouper plan --output`) for warm-up plus measured iterations: compute ops (F,
// B, and I and W with a split backward, of any model stage the stage runs) take the
// profile's duration for the model stage and micro-batch size, sends and recvs move
// the planned bytes over MPI on their own threads, and every op's start and end are
// recorded on clocks aligned to rank 0. Rank 0 turns the records into a sim::SimResult
// and writes the same summary JSON and Perfetto timeline as `adagrouper simulate`, so
// that `adagrouper compare` can hold the prediction against the measurement.
//
// This header has the parts that need no MPI, so that they are tested on their own:
// reading the plan and indexing its programs (replay_plan.cpp), and turning the records
// into a result (replay_result.cpp). replay_run.cpp runs it under MPI.
#pragma once

#include <cstddef>
#include <optional>
#include <string>
#include <vector>

#include "planner.h"
#include "sim.h"

namespace adagrouper::calib {

// What to replay: one candidate of a plan, with its device programs and the parameters
// (durations, bytes) of its model stages at its micro-batch size. A candidate with v
// virtual stages runs stages x v model stages, placed as its family places them; the
// pipeline the plan was made from is merged to that many (planner::merge_model_stages)
// when it has more.
struct ReplayPlan {
  // An ordered pair of stages that exchange messages: one communicator, one channel.
  struct Channel {
    int from = 0, to = 0;
  };
  std::string source;                       // the plan file
  std::string pipeline_source;              // the pipeline file the durations come from
  std::string pipeline;                     // its name
  int stages = 0;                           // devices, one rank each
  int global_batch_size = 0;
  std::optional<double> memory_limit_bytes;
  sim::ScheduleSpec spec;                   // the candidate's schedule (a named family, its v and split)
  int k = 0;                                // the group size results report (sim::Schedule::k)
  int micro_batch_size = 0;
  int micro_batches = 0;
  bool chosen = false;                      // the plan's chosen candidate
  std::optional<double> predicted_iteration_time_s;
  std::vector<sim::StageParams> params;     // per model stage, at micro_batch_size
  std::vector<int> placement;               // per model stage, the stage it runs on
  // The channels in the simulator's order: those of the activations, model stage by
  // model stage, then those of the gradients (s -> s+1 then s+1 -> s with one model
  // stage per stage).
  std::vector<Channel> channels;
  std::vector<planner::DeviceProgram> programs;  // per stage, in issue order

  int model_stages() const { return static_cast<int>(params.size()); }
  int stage_of(int model_stage) const { return placement[static_cast<std::size_t>(model_stage)]; }
  // The index of channel from -> to in `channels`, or -1.
  int channel(int from, int to) const;
};

// Sets plan.placement and plan.channels from the candidate's schedule (its model stages
// and where they run).
void place_model_stages(ReplayPlan& plan, const sim::Schedule& schedule);

struct ReplayPlanOptions {
  std::string pipeline_path;      // empty: the plan's pipeline input, or its model cut at its partition bounds
  std::optional<int> candidate;   // index into `candidates`; none: the chosen plan
};

// Reads the plan. The chosen candidate's programs are the plan's `devices`, checked
// with planner::validate_programs; another candidate's are made by the planner's own
// device_programs from its schedule, k and b (with dynamic W fill, from the order the
// fill executed in the first iteration of the plan's evaluation, on the plan's network
// input: planner::deployed_schedule). Throws InputError naming the file and the field.
ReplayPlan load_replay_plan(const std::string& plan_path, const ReplayPlanOptions& options);

// One device's program from the plan (planner::DeviceProgram), indexed for the replay:
// the compute ops in order, each with the recv that brings its input and the send that
// carries its output, and the sends and recvs in issue order. A compute op whose input
// is made on the same stage (model stages j and j+1 both there, or its own I for a W)
// has no recv: the compute stream runs its ops in order.
struct IndexedProgram {
  struct Compute {
    sim::Op op;              // with its model stage
    double duration_s = 0;   // nominal, from the profile
    int input = -1;          // index into recvs, -1: none (first or last model stage, or a local input)
    int output = -1;         // index into sends, -1: none
  };
  struct Message {
    int peer = 0;
    int tag = 0;
    int micro_batch = 0;
    int model_stage = 0;     // the model stage that sends it
    bool gradient = false;   // a gradient (backward), else an activation
    std::size_t bytes = 0;
    int channel = 0;         // index into ReplayPlan::channels
    int position = 0;        // index among this channel's messages
    int compute = 0;         // the compute op that produces (sends) or consumes (recvs) it
  };
  int stage = 0;
  std::vector<Compute> compute;
  std::vector<Message> sends, recvs;
};

// Indexes stage s's program; throws InputError (naming the plan file, the stage and the
// entry) when a compute op's input or output is missing, repeated or of the wrong size.
IndexedProgram index_program(const ReplayPlan& plan, int stage);

// Per compute op of `p`: for an I op, the index of the W op of its (model stage,
// micro-batch); -1 for every other op.
std::vector<int> weight_ops(const IndexedProgram& p);

// What one rank measured, in seconds on the aligned clock, for all iterations run
// (warm-up included), flat: [iteration * count + index].
struct RankRecord {
  std::vector<double> op_start, op_end;       // per compute op
  std::vector<double> send_post, send_done;   // per send: posted (Isend) and completed locally
  std::vector<double> recv_post, recv_done;   // per recv: posted (Irecv) and data arrived
  std::vector<double> iteration_end;          // per iteration: last op end + optimizer step
};

struct Measurements {
  int warmup = 0;                     // iterations run before the measured ones
  int iterations = 0;                 // measured iterations
  std::vector<double> boundaries;     // T_0 .. T_{warmup+iterations}, aligned clock
  double start_time_s = 0;            // what the measured iteration 0 start is called
  std::vector<RankRecord> ranks;      // one per stage
  // The W ops ran where a runtime W fill put them (`replay --w-fill runtime`), not at
  // their places in the programs: each stage's compute ops are checked in the order they ran.
  bool runtime_w_fill = false;
};

// The measured run as a SimResult: iteration i (after the warm-up) runs from
// boundaries[warmup + i] to boundaries[warmup + i + 1]; times are moved so that it
// starts at start_time_s. Busy, bubble, optimizer time and channel busy time follow the
// simulator's definitions. A transfer runs from max(its post, the end of the previous
// transfer on its channel) to its arrival. In-flight micro-batches, receive-buffer
// depths and memory are the simulator's own accounting (sim/accounting.h) of the
// measured times (docs/model.md §5 and §14): a (model stage, micro-batch) is in flight
// from its F's start to its last backward op's end, I hands the activations W still
// needs over to W, a message waits from its arrival until the op that consumes it
// starts. With `timeline`, the Timeline as the simulator records it.
sim::SimResult measured_result(const ReplayPlan& plan, const std::vector<IndexedProgram>& indexed,
                               const Measurements& m, bool timeline);

// Checks that the records are those of the plan executed as written: on each stream the
// ops ran one after the other in the program's order, every compute op started after
// its input arrived and every transfer arrived after its send started (with the n-th
// send of a channel paired with the receiver's n-th recv), within `tolerance_s` of
// clock alignment. Returns the problems found (empty: none).
std::vector<std::string> check_measurements(const std::vector<IndexedProgram>& indexed, const Measurements& m,
                                            double tolerance_s);

// The measured op durations as a stage timing trace (`simulate --stage-trace`):
// iteration,stage,micro_batch,phase,duration_s for the measured iterations.
std::string stage_trace_csv(const std::vector<IndexedProgram>& indexed, const Measurements& m);

class Mpi;

// The `replay` mode of adagrouper-calib (needs MPI): parses its options (argv[0] is
// "replay"), runs, writes the outputs on rank 0. Returns the exit status: 0, 1 when the
// records are inconsistent, 2 for bad input (said once, by rank 0); a failure in the
// middle of the run aborts the job.
int replay_main(const Mpi& mpi, int argc, char** argv);

}  // namespace adagrouper::calib
