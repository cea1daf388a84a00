// `adagrouper-calib replay`: executing a plan's device programs on the backend's streams
// (calib/backend.h) and measuring them (calib/replay.h, docs/fidelity.md).
#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstring>
#include <iostream>
#include <limits>
#include <memory>
#include <optional>
#include <string>
#include <thread>
#include <utility>
#include <vector>

#include <boost/program_options.hpp>
#include <fmt/format.h>

#include "backend.h"
#include "modes.h"
#include "replay.h"
#include "replay_cpu.h"
#include "runtime.h"

namespace adagrouper::calib {

namespace po = boost::program_options;

namespace {

constexpr double kComputeSpinUs = 200;  // the default spun end of a cpu compute op
constexpr double kMpiPollUs = 20;       // the default MPI_Test period of a cpu transfer

constexpr const char* kReplayHelp = R"(Usage: mpirun -np S adagrouper-calib replay --plan PLAN.json [--candidate I]
                       [--pipeline P] [--iterations n] [--warmup w] [--backend cpu|cuda]
                       [--streams plan|channel] [--w-fill recorded|runtime]
                       [--compute-fifo P] [--compute-spin US] [--mpi-poll US]
                       [--time-origin T] [--start-at T] [--timeout SEC]
                       [--output FILE] [--timeline FILE] [--stage-trace FILE] [--raw FILE]
                       [--json]

Runs a plan for real, one MPI rank per stage, and measures it. Each rank executes its
device program from the plan (`adagrouper plan --output`) for w warm-up and n measured
iterations: compute ops (F and B, or F, I and W with a split backward, of every model
stage the stage runs: virtual stages, V placement) are busy kernels that last the
profile's duration for the model stage and micro-batch size (cpu: a wait on the compute
stream's thread; cuda: a busy kernel on the GPU), sends and recvs move the planned bytes
on their own streams (cpu: MPI point-to-point from separate threads; cuda: NCCL), in
the program's issue order on each stream, one communicator per pair of stages and
direction that exchange messages; a message between two model stages of one stage is
local and moves nothing. The optimizer step (the optimizer_s of the stage's model
stages) ends each iteration on every stage, and stage 0 starts the next iteration when
every stage has finished the last one (a small message from each stage), as the
simulator's iterations do.

Every op's start and end is recorded with the backend's events on clocks aligned to
rank 0 (a barrier, then the offset of each rank's clock from the fastest of 16
ping-pongs with rank 0, applied when the ranks run on different hosts). Rank 0 writes
what `adagrouper simulate` writes for the same schedule: the summary JSON, with the
same fields, and the Perfetto timeline, so that `adagrouper compare --predicted
SIM.json --measured RUN.json` holds the prediction against the measurement. Iteration
i runs from T_i to T_{i+1} = the latest end of a stage's last op and optimizer step.

Inputs: the plan JSON (docs/formats.md "Plan JSON"); the pipeline file it names in
`inputs` (or --pipeline) gives the durations, merged as the planner merged it when the
candidate runs fewer model stages (`plan --devices`). Without --candidate the chosen
plan's own `devices` programs run; --candidate I replays candidate I of the plan, with
the programs the planner makes for its schedule, k, virtual stages and micro-batch size
(with dynamic W fill, from the order the fill executed in the first iteration of the
plan's evaluation, on the plan's own pipeline and network inputs, whatever --pipeline
gives: what the plan would record were that candidate chosen). With --w-fill runtime
(cpu backend) such a candidate's W ops are placed as the run goes instead, by the
simulator's rule: before each other op the compute stream runs the oldest pending W
ops while it holds P of them or that op's input has not arrived yet (docs/model.md
section 14, docs/fidelity.md).
Outputs (rank 0; docs/formats.md "Measured files"): --output the summary JSON,
--timeline the Perfetto JSON, --stage-trace the measured op durations as a stage
timing trace (`simulate --stage-trace`), --raw one JSON line per executed op.
Exit status: 0 ok, 2 bad input (the plan, a rank count that is not the plan's stages),
1 other failures (an MPI, CUDA or NCCL call, a timeout).

Example:
  adagrouper plan --pipeline configs/fidelity/pipeline-2.json \
      --network configs/fidelity/net-200mbit.json --output plan.json
  mpirun -np 2 adagrouper-calib replay --plan plan.json --iterations 5 \
      --output run.json --timeline run.trace.json

Options)";

struct ReplayOptions {
  std::string plan, pipeline;
  std::optional<int> candidate;
  int iterations = 5, warmup = 1;
  std::string backend = cuda_backend_built() ? "cuda" : "cpu", streams = "plan";
  bool runtime_w_fill = false;  // --w-fill runtime
  int compute_fifo = 0;  // 0: the compute stream's thread keeps the process's policy
  double compute_spin_us = kComputeSpinUs;  // cpu: the end of a compute op is spun for this long, not slept
  double mpi_poll_us = kMpiPollUs;          // cpu: the MPI_Test period of a transfer in flight
  std::optional<double> time_origin, start_at;
  double timeout_s = 120;
  std::string output, timeline, stage_trace, raw;
  bool json = false;
};

void add_replay_options(po::options_description& opts) {
  // clang-format off
  opts.add_options()
    ("help,h", "show this help")
    ("plan", po::value<std::string>()->value_name("FILE"), "plan JSON (required)")
    ("candidate", po::value<int>()->value_name("I"), "replay candidate I of the plan (default: the chosen plan)")
    ("pipeline", po::value<std::string>()->value_name("FILE"),
       "pipeline file for the durations and bytes (default: the plan's inputs entry with role pipeline)")
    ("iterations,n", po::value<int>()->default_value(5)->value_name("n"), "measured iterations")
    ("warmup,w", po::value<int>()->default_value(1)->value_name("w"),
       "iterations run first and not reported (connections, caches, TCP windows)")
    ("backend", po::value<std::string>()->default_value(cuda_backend_built() ? "cuda" : "cpu")->value_name("cpu|cuda"),
       "cpu: MPI point-to-point and host threads; cuda: NCCL and a busy kernel on the rank's GPU (the default, as "
       "in every mode, where this build has CUDA; the fidelity testbed gives cpu)")
    ("streams", po::value<std::string>()->default_value("plan")->value_name("plan|channel"),
       "plan: one send and one recv stream per stage, as the plan says; channel: one stream per channel "
       "end, so that a slow transfer from one neighbour does not hold up the other (the simulator's model)")
    ("w-fill", po::value<std::string>()->default_value("recorded")->value_name("recorded|runtime"),
       "a candidate with dynamic W fill: recorded runs its W ops where the simulated fill put them (the plan's "
       "programs); runtime places them as the run goes, by the simulator's rule: before each other op, the oldest "
       "pending W ops run while the stage holds P of them or the op's input has not arrived (cpu backend: a CUDA "
       "stream cannot choose its next kernel without the host)")
    ("compute-fifo", po::value<int>()->default_value(0)->value_name("P"),
       "cpu: run the compute stream's thread under SCHED_FIFO at priority P (1-99; 0: off), the rest of the "
       "rank as it was started: an op then waits for no core behind the threads that poll MPI. The thread "
       "sleeps, or spins for at most --compute-spin, so it holds a core only briefly; but threads of one SCHED_FIFO "
       "priority are not time-sliced, so with more ranks than cores an op can wait for the others' spins "
       "(docs/fidelity.md measures both). Needs CAP_SYS_NICE (root)")
    ("compute-spin", po::value<double>()->default_value(kComputeSpinUs)->value_name("US"),
       "cpu: a compute op sleeps until US microseconds before its end and spins the rest (0-100000). A longer "
       "spin ends an op closer to its duration on an idle core; a shorter one leaves the cores to the other "
       "ranks, which matters with more ranks than cores (0: sleep to the end, which then ends late by the "
       "thread's wake-up)")
    ("mpi-poll", po::value<double>()->default_value(kMpiPollUs)->value_name("US"),
       "cpu: the period of MPI_Test on a transfer in flight, a sleep in between (1-100000 us). A transfer ends "
       "up to one period late; a shorter period wakes each send and recv thread more often, which with more "
       "ranks than cores takes cores from the ops")
    ("time-origin", po::value<double>()->value_name("T"),
       "Unix time (s) that is time 0 of the traces: start_time_s in the summary is the measured iteration 0's "
       "start minus T (default: start_time_s 0)")
    ("start-at", po::value<double>()->value_name("T"),
       "Unix time (s) at which stage 0 starts the first (warm-up) iteration, not before (default: as soon as "
       "every rank is ready); with a trace played on the links, every run then starts at the same point of it")
    ("timeout", po::value<double>()->default_value(120)->value_name("SEC"),
       "abort the job when a wait takes longer (0: never)")
    ("output,o", po::value<std::string>()->value_name("FILE"), "write the measured summary JSON to FILE (-: stdout)")
    ("timeline", po::value<std::string>()->value_name("FILE"), "write the measured Perfetto timeline to FILE")
    ("stage-trace", po::value<std::string>()->value_name("FILE"),
       "write the measured op durations as CSV iteration,stage,micro_batch,phase,duration_s")
    ("raw", po::value<std::string>()->value_name("FILE"),
       "write one JSON line per executed op (stage, iteration, kind, micro-batch, peer, bytes, start_s, end_s)")
    ("json", po::bool_switch(), "print the summary JSON on stdout instead of the human summary");
  // clang-format on
}

// The cpu backend's option `name` in microseconds, from `lowest` to 100000; refused
// with another backend where it was given (`why`: what that backend does instead).
double cpu_microseconds(const po::variables_map& vm, const std::string& name, double lowest,
                        const std::string& backend, const char* why) {
  const double us = vm[name].as<double>();
  if (!(us >= lowest && us <= 100000))
    throw InputError(fmt::format("--{}: microseconds from {} to 100000, got {}", name, lowest, us));
  if (!vm[name].defaulted() && backend != "cpu")
    throw InputError(fmt::format("--{}: the cpu backend's option ({})", name, why));
  return us;
}

// Throws InputError for an option that is wrong on its own; returns nullopt after --help.
std::optional<ReplayOptions> parse(int argc, char** argv, bool print_help) {
  po::options_description opts(kReplayHelp);
  add_replay_options(opts);
  po::variables_map vm;
  po::store(po::command_line_parser(argc, argv).options(opts).run(), vm);
  po::notify(vm);
  if (vm.count("help")) {
    if (print_help) std::cout << opts << '\n';
    return std::nullopt;
  }
  ReplayOptions o;
  if (!vm.count("plan")) throw InputError("--plan: missing (see adagrouper-calib replay --help)");
  o.plan = vm["plan"].as<std::string>();
  if (vm.count("pipeline")) o.pipeline = vm["pipeline"].as<std::string>();
  if (vm.count("candidate")) o.candidate = vm["candidate"].as<int>();
  o.iterations = vm["iterations"].as<int>();
  o.warmup = vm["warmup"].as<int>();
  if (o.iterations < 1) throw InputError(fmt::format("--iterations: must be >= 1, got {}", o.iterations));
  if (o.warmup < 0) throw InputError(fmt::format("--warmup: must be >= 0, got {}", o.warmup));
  if (o.iterations + o.warmup > 100000) throw InputError("--iterations: at most 100000 iterations with the warm-up");
  o.backend = vm["backend"].as<std::string>();
  if (o.backend != "cpu" && o.backend != "cuda")
    throw InputError(fmt::format("--backend: must be cpu or cuda, got '{}'", o.backend));
  o.streams = vm["streams"].as<std::string>();
  if (o.streams != "plan" && o.streams != "channel")
    throw InputError(fmt::format("--streams: must be plan or channel, got '{}'", o.streams));
  const std::string w_fill = vm["w-fill"].as<std::string>();
  if (w_fill != "recorded" && w_fill != "runtime")
    throw InputError(fmt::format("--w-fill: must be recorded or runtime, got '{}'", w_fill));
  o.runtime_w_fill = w_fill == "runtime";
  if (o.runtime_w_fill && o.backend != "cpu")
    throw InputError("--w-fill runtime: the cpu backend's option (a CUDA stream cannot choose its next kernel without "
                     "the host; cuda replays the recorded order)");
  o.compute_fifo = vm["compute-fifo"].as<int>();
  if (o.compute_fifo < 0 || o.compute_fifo > 99)
    throw InputError(fmt::format("--compute-fifo: a SCHED_FIFO priority 1-99, or 0 for off, got {}", o.compute_fifo));
  if (o.compute_fifo > 0 && o.backend != "cpu")
    throw InputError("--compute-fifo: the cpu backend's option (cuda's compute runs on the GPU)");
  o.compute_spin_us = cpu_microseconds(vm, "compute-spin", 0, o.backend, "cuda's compute runs on the GPU");
  o.mpi_poll_us = cpu_microseconds(vm, "mpi-poll", 1, o.backend, "cuda's transfers are NCCL's");
  if (vm.count("time-origin")) {
    o.time_origin = vm["time-origin"].as<double>();
    if (!std::isfinite(*o.time_origin)) throw InputError("--time-origin: must be a finite Unix time");
  }
  if (vm.count("start-at")) {
    o.start_at = vm["start-at"].as<double>();
    if (!std::isfinite(*o.start_at)) throw InputError("--start-at: must be a finite Unix time");
  }
  o.timeout_s = vm["timeout"].as<double>();
  if (!(o.timeout_s >= 0)) throw InputError("--timeout: must be >= 0");
  if (vm.count("output")) o.output = vm["output"].as<std::string>();
  if (vm.count("timeline")) o.timeline = vm["timeline"].as<std::string>();
  if (vm.count("stage-trace")) o.stage_trace = vm["stage-trace"].as<std::string>();
  if (vm.count("raw")) o.raw = vm["raw"].as<std::string>();
  o.json = vm["json"].as<bool>();
  return o;
}

// What the human summary says about the ranks' threads where they are not as by default
// (the cpu backend's options: another backend refuses them).
std::string compute_note(const ReplayOptions& o, const ReplayPlan& plan) {
  std::string note;
  if (o.runtime_w_fill)
    note += fmt::format(", W fill at run time (P = {})",
                        plan.spec.max_pending_w ? std::to_string(*plan.spec.max_pending_w) : "unlimited");
  if (o.compute_fifo > 0) note += fmt::format(", compute thread SCHED_FIFO {}", o.compute_fifo);
  if (o.compute_spin_us != kComputeSpinUs) note += fmt::format(", ops spin their last {:g} us", o.compute_spin_us);
  if (o.mpi_poll_us != kMpiPollUs) note += fmt::format(", MPI_Test every {:g} us", o.mpi_poll_us);
  return note;
}

// Offset of this rank's clock from rank 0's (local - rank 0), from the fastest of
// `rounds` ping-pongs: rank 0 stamps t0, the rank answers with its time tr, rank 0
// stamps t1; the offset is tr - (t0 + t1) / 2 for the round with the smallest t1 - t0.
double clock_offset(const Mpi& mpi, int rounds) {
  constexpr int kTag = 31000;
  double offset = 0;
  for (int r = 1; r < mpi.size(); ++r) {
    if (mpi.rank() == 0) {
      double best_rtt = std::numeric_limits<double>::infinity(), best = 0;
      for (int i = 0; i < rounds; ++i) {
        const double t0 = now_s();
        double tr = 0;
        mpi.check(MPI_Send(&t0, 1, MPI_DOUBLE, r, kTag, mpi.world()), "MPI_Send");
        mpi.check(MPI_Recv(&tr, 1, MPI_DOUBLE, r, kTag, mpi.world(), MPI_STATUS_IGNORE), "MPI_Recv");
        const double t1 = now_s();
        if (t1 - t0 < best_rtt) {
          best_rtt = t1 - t0;
          best = tr - 0.5 * (t0 + t1);
        }
      }
      mpi.check(MPI_Send(&best, 1, MPI_DOUBLE, r, kTag, mpi.world()), "MPI_Send");
    } else if (mpi.rank() == r) {
      for (int i = 0; i < rounds; ++i) {
        double t0 = 0;
        mpi.check(MPI_Recv(&t0, 1, MPI_DOUBLE, 0, kTag, mpi.world(), MPI_STATUS_IGNORE), "MPI_Recv");
        const double tr = now_s();
        mpi.check(MPI_Send(&tr, 1, MPI_DOUBLE, 0, kTag, mpi.world()), "MPI_Send");
      }
      mpi.check(MPI_Recv(&offset, 1, MPI_DOUBLE, 0, kTag, mpi.world(), MPI_STATUS_IGNORE), "MPI_Recv");
    }
  }
  return offset;
}

std::string pack(const RankRecord& r) {
  std::string out;
  auto put = [&](const std::vector<double>& v) {
    const std::uint64_t n = v.size();
    out.append(reinterpret_cast<const char*>(&n), sizeof n);
    out.append(reinterpret_cast<const char*>(v.data()), v.size() * sizeof(double));
  };
  put(r.op_start), put(r.op_end), put(r.send_post), put(r.send_done), put(r.recv_post), put(r.recv_done);
  put(r.iteration_end);
  return out;
}

RankRecord unpack(const std::string& s) {
  RankRecord r;
  std::size_t pos = 0;
  auto get = [&](std::vector<double>& v) {
    std::uint64_t n = 0;
    if (pos + sizeof n > s.size()) throw CalibError("replay: a rank's records are truncated");
    std::memcpy(&n, s.data() + pos, sizeof n);
    pos += sizeof n;
    if (pos + n * sizeof(double) > s.size()) throw CalibError("replay: a rank's records are truncated");
    v.resize(n);
    std::memcpy(v.data(), s.data() + pos, n * sizeof(double));
    pos += n * sizeof(double);
  };
  get(r.op_start), get(r.op_end), get(r.send_post), get(r.send_done), get(r.recv_post), get(r.recv_done);
  get(r.iteration_end);
  return r;
}

// Counts the entries of one kind in one iteration of a program, as they are executed.
struct EntryCursor {
  std::size_t compute = 0, send = 0, recv = 0;
};

// The --raw line of entry `e` of stage s's program in iteration i (counted from the
// first measured one); times from `origin`.
nlohmann::ordered_json raw_line(const planner::ProgramEntry& e, std::size_t s, int iteration, std::size_t i,
                                const IndexedProgram& p, const RankRecord& rec, EntryCursor& at, double origin) {
  using K = planner::ProgramEntry::Kind;
  nlohmann::ordered_json j;
  j["stage"] = s;
  j["iteration"] = iteration;
  j["kind"] = planner::program_entry_name(e.kind);
  j["micro_batch"] = e.micro_batch;
  j["model_stage"] = e.model_stage;
  double a = 0, b = 0;
  if (e.kind != K::Send && e.kind != K::Recv) {
    const std::size_t k = i * p.compute.size() + at.compute++;
    a = rec.op_start[k], b = rec.op_end[k];
  } else {
    const bool send = e.kind == K::Send;
    const auto& messages = send ? p.sends : p.recvs;
    std::size_t& n = send ? at.send : at.recv;
    const std::size_t k = i * messages.size() + n;
    j["peer"] = e.peer;
    j["tag"] = e.tag;
    j["bytes"] = messages[n++].bytes;
    a = send ? rec.send_post[k] : rec.recv_post[k];
    b = send ? rec.send_done[k] : rec.recv_done[k];
  }
  j["start_s"] = a - origin;
  j["end_s"] = b - origin;
  return j;
}

// --raw: one JSON line per executed entry, warm-up included, stage by stage.
std::string raw_lines(const ReplayPlan& plan, const std::vector<IndexedProgram>& indexed, const Measurements& m,
                      double origin) {
  std::string out;
  for (std::size_t s = 0; s < indexed.size(); ++s) {
    for (int i = 0; i < m.warmup + m.iterations; ++i) {
      EntryCursor at;
      for (const auto& e : plan.programs[s].entries)
        out += raw_line(e, s, i - m.warmup, static_cast<std::size_t>(i), indexed[s], m.ranks[s], at, origin).dump() +
               "\n";
    }
  }
  return out;
}

double unix_time_now() {
  return std::chrono::duration<double>(std::chrono::system_clock::now().time_since_epoch()).count();
}

// The channels of one list of specs: the backend's own (cuda: NCCL), or on the CPU
// backend the replay's non-blocking MPI links (calib/replay_cpu.h).
class Links {
 public:
  Links(Backend& be, const Mpi& mpi, Watchdog& dog, const std::vector<ChannelSpec>& specs, std::size_t max_bytes,
        double poll_s)
      : index_(specs.size(), -1) {
    if (be.kind() == BackendKind::cpu) {
      cpu_ = std::make_unique<CpuReplayLinks>(mpi, dog, specs, max_bytes, poll_s);
      return;
    }
    backend_ = be.connect(specs, max_bytes);
    // connect returns this rank's ends in spec order.
    std::size_t next = 0;
    for (std::size_t i = 0; i < specs.size() && next < backend_.size(); ++i)
      if (backend_[next]->spec().from == specs[i].from && backend_[next]->spec().to == specs[i].to)
        index_[i] = static_cast<int>(next++);
  }
  void send(std::size_t spec, Stream& st, std::size_t bytes) {
    if (cpu_) {
      st.submit(cpu_->send_task(spec, bytes));
    } else {
      backend_.at(static_cast<std::size_t>(index_.at(spec)))->send(st, bytes);
    }
  }
  void recv(std::size_t spec, Stream& st, std::size_t bytes) {
    if (cpu_) {
      st.submit(cpu_->recv_task(spec, bytes));
    } else {
      backend_.at(static_cast<std::size_t>(index_.at(spec)))->recv(st, bytes);
    }
  }

 private:
  std::vector<std::unique_ptr<Channel>> backend_;
  std::vector<int> index_;
  std::unique_ptr<CpuReplayLinks> cpu_;
};

// One rank's run of its program: the channels, streams and events it needs, all made
// before anything is enqueued; then every iteration enqueued on the streams in the
// program's issue order; then the events read as times on the aligned clock.
class RankRun {
 public:
  RankRun(const Mpi& mpi, Watchdog& dog, Backend& be, const ReplayOptions& o, const ReplayPlan& plan,
          const IndexedProgram& p)
      : be_(be),
        compute_spin_s_(1e-6 * o.compute_spin_us),
        plan_(plan),
        p_(p),
        s_(mpi.rank()),
        total_(static_cast<std::size_t>(o.warmup + o.iterations)),
        peers_(static_cast<std::size_t>(plan.stages - 1)),
        data_links_(be, mpi, dog, data_specs(plan), largest_message(plan), 1e-6 * o.mpi_poll_us),
        done_links_(be, mpi, dog, control_specs(plan.stages), 16, 1e-6 * o.mpi_poll_us),
        ready_links_(be, mpi, dog, control_specs(plan.stages), 16, 1e-6 * o.mpi_poll_us) {
    if (o.runtime_w_fill) make_fill(plan.spec.max_pending_w);
    make_streams(o.streams == "channel");
    make_all_events();
    if (o.compute_fifo > 0) {  // before anything else runs on it; a refusal is thrown here
      compute_->submit(cpu_fifo_task(o.compute_fifo, mpi.id()));
      compute_->synchronize();
    }
  }

  // Runs every iteration; stage 0 starts the first not before `start_at` (Unix time).
  // `offset` is this rank's clock minus rank 0's.
  RankRecord run(const Mpi& mpi, std::optional<double> start_at, double offset) {
    // The origin: every rank records it on its compute stream after a barrier. Its time on
    // the host clock is the event's own where the backend has one (cpu); otherwise (cuda)
    // the middle of the calls that record it and wait for it, on an idle stream. Reading
    // the clock after the wait instead would add the wake-up of this thread, which on an
    // oversubscribed host is milliseconds and differs between ranks.
    auto origin = be_.create_event();
    mpi.barrier();
    const double before = now_s();
    compute_->record(*origin);
    origin->synchronize();
    const double after = now_s();
    const double origin_host = origin->host_time().value_or(0.5 * (before + after)) - offset;
    if (s_ == 0) wait_for_start(start_at);
    for (std::size_t i = 0; i < total_; ++i) enqueue_iteration(i);
    if (s_ > 0) ready_links_.send(static_cast<std::size_t>(s_ - 1), *gate_, 16);
    for (Stream* st : {compute_.get(), control_.get(), gate_.get()}) st->synchronize();
    for (const auto& st : send_) st->synchronize();
    for (const auto& st : recv_) st->synchronize();
    return records(*origin, origin_host);
  }

 private:
  // The plan's channels, a communicator each.
  static std::vector<ChannelSpec> data_specs(const ReplayPlan& plan) {
    std::vector<ChannelSpec> specs;
    for (const auto& c : plan.channels) specs.push_back({c.from, c.to});
    return specs;
  }
  // Control messages ("iteration done", "ready") from every stage r > 0 to stage 0: spec r - 1.
  static std::vector<ChannelSpec> control_specs(int stages) {
    std::vector<ChannelSpec> specs;
    for (int x = 1; x < stages; ++x) specs.push_back({x, 0});
    return specs;
  }
  static std::size_t largest_message(const ReplayPlan& plan) {
    std::size_t bytes = 16;
    for (const auto& program : plan.programs)
      for (const auto& e : program.entries)
        bytes = std::max<std::size_t>(bytes, static_cast<std::size_t>(std::llround(e.bytes)));
    return bytes;
  }
  // --streams plan: one send and one recv stream; channel: one per channel end.
  Stream& send_on(int channel) { return *send_[stream_of_[static_cast<std::size_t>(channel)]]; }
  Stream& recv_on(int channel) { return *recv_[stream_of_[static_cast<std::size_t>(channel)]]; }

  // Streams for the channels this rank sends or receives on: one of each kind, or with
  // `per_channel` one per channel end (stream_of_ maps a channel to its stream).
  void make_streams(bool per_channel) {
    compute_ = be_.create_stream();
    stream_of_.assign(plan_.channels.size(), 0);
    std::size_t sends = 0, recvs = 0;
    for (std::size_t c = 0; c < plan_.channels.size(); ++c) {
      const bool out = plan_.channels[c].from == s_, in = plan_.channels[c].to == s_;
      if (per_channel && (out || in)) stream_of_[c] = out ? sends++ : recvs++;
    }
    for (std::size_t i = 0; i < std::max<std::size_t>(1, sends); ++i) send_.push_back(be_.create_stream());
    for (std::size_t i = 0; i < std::max<std::size_t>(1, recvs); ++i) recv_.push_back(be_.create_stream());
    control_ = be_.create_stream();
    gate_ = be_.create_stream();
  }

  // The runtime W fill: each compute op's duration, and which W each I op pends.
  void make_fill(std::optional<int> max_pending_w) {
    std::vector<double> durations;
    for (const auto& op : p_.compute) durations.push_back(op.duration_s);
    const std::size_t P = max_pending_w ? static_cast<std::size_t>(*max_pending_w)
                                          : std::numeric_limits<std::size_t>::max();
    fill_ = std::make_unique<CpuWFill>(std::move(durations), total_, P, compute_spin_s_);
    w_of_ = weight_ops(p_);
  }
  bool filled(std::size_t c) const { return fill_ && p_.compute[c].op.phase == sim::Phase::BackwardWeight; }

  void make_events(std::vector<std::unique_ptr<Event>>& v, std::size_t n) {
    v.reserve(n);
    for (std::size_t i = 0; i < n; ++i) v.push_back(be_.create_event());
  }
  void make_all_events() {
    make_events(op_start_, p_.compute.size() * total_);
    make_events(op_end_, p_.compute.size() * total_);
    make_events(send_start_, p_.sends.size() * total_);
    make_events(send_end_, p_.sends.size() * total_);
    make_events(recv_start_, p_.recvs.size() * total_);
    make_events(recv_end_, p_.recvs.size() * total_);
    make_events(iteration_end_, total_);
    if (s_ == 0) {
      make_events(done_, total_ * peers_);
      make_events(ready_, peers_);
    }
  }

  // A compute op of `seconds` on the compute stream (cpu: the replay's own task).
  void busy(double seconds) {
    if (be_.kind() == BackendKind::cpu) {
      compute_->submit(cpu_compute_task(seconds, compute_spin_s_));
    } else {
      compute_->busy(seconds);
    }
  }

  // Stage 0 starts when every rank has enqueued its work, and not before --start-at.
  void wait_for_start(std::optional<double> start_at) {
    if (start_at) {
      const double wait = *start_at - unix_time_now();
      if (wait > 0) std::this_thread::sleep_for(std::chrono::duration<double>(wait));
    }
    for (std::size_t r = 0; r < peers_; ++r) {
      ready_links_.recv(r, *gate_, 16);
      gate_->record(*ready_[r]);
    }
    for (auto& e : ready_) compute_->wait(*e);
  }

  void enqueue_iteration(std::size_t i) {
    using K = planner::ProgramEntry::Kind;
    // Stage 0 starts an iteration when every stage has finished the previous one.
    if (s_ == 0 && i > 0)
      for (std::size_t r = 0; r < peers_; ++r) compute_->wait(*done_[(i - 1) * peers_ + r]);
    std::size_t c = 0, q = 0, rv = 0;
    for (const auto& e : plan_.programs[static_cast<std::size_t>(s_)].entries) {
      if (e.kind == K::Recv) {
        enqueue_recv(i, rv++);
      } else if (e.kind == K::Send) {
        enqueue_send(i, q++);
      } else if (filled(c)) {
        ++c;  // the runtime fill runs it
      } else {
        enqueue_listed(i, c++);
      }
    }
    if (fill_) compute_->submit(fill_->drain(i));
    end_iteration(i);
  }

  void enqueue_recv(std::size_t i, std::size_t rv) {
    const std::size_t k = i * p_.recvs.size() + rv;
    const auto& msg = p_.recvs[rv];
    Stream& st = recv_on(msg.channel);
    st.record(*recv_start_[k]);
    data_links_.recv(static_cast<std::size_t>(msg.channel), st, msg.bytes);
    st.record(*recv_end_[k]);
  }

  void enqueue_send(std::size_t i, std::size_t q) {
    const std::size_t k = i * p_.sends.size() + q;
    const auto& msg = p_.sends[q];
    Stream& st = send_on(msg.channel);
    st.wait(*op_end_[i * p_.compute.size() + static_cast<std::size_t>(msg.compute)]);
    st.record(*send_start_[k]);
    data_links_.send(static_cast<std::size_t>(msg.channel), st, msg.bytes);
    st.record(*send_end_[k]);
  }

  // A compute op the program lists; with a runtime fill, the fill's decision before it
  // (from whether its input has arrived) and, after an I, its W made pending.
  void enqueue_listed(std::size_t i, std::size_t c) {
    if (!fill_) return enqueue_compute(i, c);
    const int input = p_.compute[c].input;
    Event* arrived = input >= 0 ? recv_end_[i * p_.recvs.size() + static_cast<std::size_t>(input)].get() : nullptr;
    compute_->submit(fill_->before(i, arrived));
    enqueue_compute(i, c);
    if (w_of_[c] >= 0) compute_->submit(fill_->pend(static_cast<std::size_t>(w_of_[c])));
  }

  void enqueue_compute(std::size_t i, std::size_t c) {
    const std::size_t k = i * p_.compute.size() + c;
    const auto& op = p_.compute[c];
    if (op.input >= 0) compute_->wait(*recv_end_[i * p_.recvs.size() + static_cast<std::size_t>(op.input)]);
    compute_->record(*op_start_[k]);
    busy(op.duration_s);
    compute_->record(*op_end_[k]);
  }

  // The optimizer step, then stage 0 hears from every other stage that it is done.
  void end_iteration(std::size_t i) {
    double opt = 0;  // the optimizer steps of the stage's model stages, as one
    for (int j = 0; j < plan_.model_stages(); ++j)
      if (plan_.stage_of(j) == s_) opt += plan_.params[static_cast<std::size_t>(j)].opt;
    if (opt > 0) busy(opt);
    compute_->record(*iteration_end_[i]);
    if (s_ > 0) {
      control_->wait(*iteration_end_[i]);
      done_links_.send(static_cast<std::size_t>(s_ - 1), *control_, 16);
      return;
    }
    for (std::size_t r = 0; r < peers_; ++r) {
      done_links_.recv(r, *control_, 16);
      control_->record(*done_[i * peers_ + r]);
    }
  }

  RankRecord records(const Event& origin, double origin_host) const {
    RankRecord rec;
    auto times = [&](const std::vector<std::unique_ptr<Event>>& v, std::vector<double>& out) {
      out.reserve(v.size());
      for (const auto& e : v) out.push_back(origin_host + e->seconds_since(origin));
    };
    times(op_start_, rec.op_start);
    times(op_end_, rec.op_end);
    if (fill_) {  // the W ops' times are the fill's, on the clock of the cpu backend's events
      const double origin_time = origin.host_time().value_or(0.0);
      const std::size_t n = p_.compute.size();
      for (std::size_t i = 0; i < total_; ++i)
        for (std::size_t c = 0; c < n; ++c)
          if (filled(c)) {
            rec.op_start[i * n + c] = origin_host + (fill_->start(i, c) - origin_time);
            rec.op_end[i * n + c] = origin_host + (fill_->end(i, c) - origin_time);
          }
    }
    times(send_start_, rec.send_post);
    times(send_end_, rec.send_done);
    times(recv_start_, rec.recv_post);
    times(recv_end_, rec.recv_done);
    times(iteration_end_, rec.iteration_end);
    return rec;
  }

  Backend& be_;
  const double compute_spin_s_;  // cpu: the spun end of each compute op
  const ReplayPlan& plan_;
  const IndexedProgram& p_;
  const int s_;               // this rank's stage
  const std::size_t total_;   // iterations, warm-up included
  const std::size_t peers_;   // the stages that report to stage 0
  Links data_links_, done_links_, ready_links_;
  // --w-fill runtime (null otherwise): made before the streams whose tasks use it, so
  // that it outlives them.
  std::unique_ptr<CpuWFill> fill_;
  std::vector<int> w_of_;  // per compute op: the W an I op pends (weight_ops)
  std::unique_ptr<Stream> compute_, control_, gate_;
  std::vector<std::unique_ptr<Stream>> send_, recv_;
  std::vector<std::size_t> stream_of_;  // per plan channel: its stream among send_ or recv_
  // Per iteration, flat: [iteration * count + index]; done_ and ready_ on stage 0 only.
  std::vector<std::unique_ptr<Event>> op_start_, op_end_, send_start_, send_end_, recv_start_, recv_end_,
      iteration_end_, done_, ready_;
};

// Rank 0's view of the run: every rank's records, and the iteration boundaries T_i.
// `unix_minus_clock` ties rank 0's clock to Unix time, for --time-origin.
Measurements gather_measurements(const ReplayOptions& o, const std::vector<std::string>& blobs,
                                 double unix_minus_clock) {
  Measurements m;
  m.warmup = o.warmup;
  m.iterations = o.iterations;
  m.runtime_w_fill = o.runtime_w_fill;
  for (const auto& blob : blobs) m.ranks.push_back(unpack(blob));
  m.boundaries.push_back(m.ranks[0].op_start.front());
  for (int i = 0; i < o.warmup + o.iterations; ++i) {
    double end = 0;
    for (const auto& r : m.ranks) end = std::max(end, r.iteration_end[static_cast<std::size_t>(i)]);
    m.boundaries.push_back(end);
  }
  const double t0 = m.boundaries[static_cast<std::size_t>(o.warmup)];
  if (o.time_origin) m.start_time_s = t0 + unix_minus_clock - *o.time_origin;
  if (m.start_time_s < 0)
    throw InputError(fmt::format("--time-origin: {} is after the measured run started (start_time_s {})",
                                 *o.time_origin, m.start_time_s));
  return m;
}

// How the clocks of the ranks were aligned, for the report.
struct ClockAlignment {
  double offset = 0;        // this rank's clock minus rank 0's, as applied to its records
  double worst_offset = 0;  // the largest estimated offset of any rank
  bool one_host = false;    // every rank on one host: one clock, nothing applied
};

ClockAlignment align_clocks(const Mpi& mpi) {
  ClockAlignment c;
  const double offset = clock_offset(mpi, 16);
  // On one host the clocks are the same clock: the estimate only measures its own error.
  c.one_host = mpi.id().local_size == mpi.size();
  c.offset = c.one_host ? 0.0 : offset;
  c.worst_offset = mpi.max(std::abs(offset));
  return c;
}

// Before the run, on rank 0: the outputs can be written (their temporaries are made,
// then removed) and none of them is an input. Throws as OutputSet::add.
void check_outputs(const ReplayOptions& o) {
  OutputSet outputs;
  outputs.input("--plan", o.plan);
  if (!o.pipeline.empty()) outputs.input("--pipeline", o.pipeline);
  for (const auto& [option, path] : {std::pair{"--output", &o.output}, {"--timeline", &o.timeline},
                                     {"--stage-trace", &o.stage_trace}, {"--raw", &o.raw}})
    if (!path->empty()) outputs.add(option, *path);
  if (o.json && outputs.has_stdout())
    throw InputError(fmt::format("--json: {} - already writes to stdout", outputs.stdout_option()));
}

// Rank 0: checks the records, writes the outputs and prints the summary. Returns the exit status.
int report(const ReplayOptions& o, const ReplayPlan& plan, const std::vector<IndexedProgram>& indexed,
           const Measurements& m, const ClockAlignment& clocks) {
  const auto problems = check_measurements(indexed, m, clocks.one_host ? 1e-4 : 2 * clocks.worst_offset + 1e-4);
  for (const auto& x : problems) std::cerr << "adagrouper-calib replay: warning: " << x << '\n';

  const sim::SimResult result = measured_result(plan, indexed, m, !o.timeline.empty());
  auto summary = sim::summary_json(result);
  const double t0 = m.boundaries[static_cast<std::size_t>(m.warmup)];
  OutputSet outputs;  // every output, or none
  outputs.input("--plan", o.plan);
  if (!o.pipeline.empty()) outputs.input("--pipeline", o.pipeline);
  auto write = [&](const char* option, const std::string& path, auto&& text) {
    if (!path.empty()) outputs.write(outputs.add(option, path), text());
  };
  write("--output", o.output, [&] { return summary.dump(2) + "\n"; });
  write("--timeline", o.timeline, [&] { return sim::timeline_json(result); });
  write("--stage-trace", o.stage_trace, [&] { return stage_trace_csv(indexed, m); });
  write("--raw", o.raw, [&] { return raw_lines(plan, indexed, m, t0 - m.start_time_s); });
  outputs.commit();
  if (outputs.has_stdout()) return problems.empty() ? 0 : 1;
  if (o.json) {
    std::cout << summary.dump(2) << '\n';
  } else {
    std::cout << fmt::format("replay of {} ({} backend, {} streams{}, {} warm-up + {} measured iterations, clock "
                             "offsets up to {:.1f} us{})\n",
                             plan.source, o.backend, o.streams,
                             compute_note(o, plan),
                             o.warmup, o.iterations, 1e6 * clocks.worst_offset,
                             clocks.one_host ? ", one host: not applied" : "");
    std::cout << sim::summary_text(result);
    if (plan.predicted_iteration_time_s)
      std::cout << fmt::format("planner's prediction {:.6g} s per iteration: measured {:+.2f}%\n",
                               *plan.predicted_iteration_time_s,
                               100.0 * (result.mean_iteration_time_s() / *plan.predicted_iteration_time_s - 1.0));
    if (!problems.empty()) std::cout << fmt::format("{} consistency problems (see stderr)\n", problems.size());
  }
  return problems.empty() ? 0 : 1;
}

// Said up front by rank 0 when the ranks on its host outnumber its cores: each rank then
// waits for a core now and then, and the measured times include those waits.
void warn_if_oversubscribed(const Mpi& mpi) {
  const unsigned cores = std::thread::hardware_concurrency();
  const int ranks = mpi.id().local_size;
  if (mpi.rank() != 0 || cores == 0 || ranks <= static_cast<int>(cores)) return;
  std::cerr << fmt::format("adagrouper-calib replay: warning: {} ranks share {} cores on this host: ranks wait for a "
                           "core, and the measured times include those waits (docs/fidelity.md)\n",
                           ranks, cores);
}

// Every rank runs its program; rank 0 gathers the records and reports.
int replay(const Mpi& mpi, const ReplayOptions& o, const ReplayPlan& plan, const std::vector<IndexedProgram>& indexed) {
  warn_if_oversubscribed(mpi);
  Watchdog dog(mpi, o.timeout_s);
  const ClockAlignment clocks = align_clocks(mpi);
  // Created on every rank or on none (a rank without a GPU, say): then every rank stops
  // here with status 2, and rank 0 says why, instead of the others waiting for it.
  const std::unique_ptr<Backend> be =
      make_backend_or_stop(o.backend == "cuda" ? BackendKind::cuda : BackendKind::cpu, "replay", mpi, dog);
  if (!be) return 2;
  RankRun rank(mpi, dog, *be, o, plan, indexed[static_cast<std::size_t>(mpi.rank())]);
  const RankRecord mine = rank.run(mpi, o.start_at, clocks.offset);

  const double unix_minus_clock = unix_time_now() - now_s();
  const auto all = mpi.gather(pack(mine), 0);
  if (mpi.rank() != 0) return 0;
  return report(o, plan, indexed, gather_measurements(o, all, unix_minus_clock), clocks);
}

}  // namespace

int replay_main(const Mpi& mpi, int argc, char** argv) {
  const bool root = mpi.rank() == 0;
  // Bad input is found on every rank alike (they read the same files); rank 0 says it.
  ReplayOptions o;
  ReplayPlan plan;
  std::vector<IndexedProgram> indexed;
  std::string error;
  try {
    const auto parsed = parse(argc, argv, root);
    if (!parsed) return 0;
    o = *parsed;
    plan = load_replay_plan(o.plan, {o.pipeline, o.candidate});
    if (plan.stages != mpi.size())
      throw InputError(fmt::format("{}: stages: the plan has {} stages, and this job runs {} ranks (mpirun -np {})",
                                   o.plan, plan.stages, mpi.size(), plan.stages));
    for (int s = 0; s < plan.stages; ++s) indexed.push_back(index_program(plan, s));
    if (o.runtime_w_fill && plan.spec.w_fill != sim::WFill::Dynamic)
      throw InputError(fmt::format("{}: --w-fill runtime: the candidate ({}) has its W ops in its schedule; a runtime "
                                   "fill replays a candidate with dynamic W fill",
                                   o.plan, plan.spec.label()));
    if (root) check_outputs(o);
  } catch (const InputError& e) {
    error = e.what();
  } catch (const std::runtime_error& e) {  // an output that cannot be written
    error = e.what();
  } catch (const boost::program_options::error& e) {
    error = fmt::format("{} (see adagrouper-calib replay --help)", e.what());
  }
  if (mpi.any(!error.empty())) {
    if (root) std::cerr << "adagrouper-calib replay: " << (error.empty() ? "bad input on another rank" : error) << '\n';
    return 2;
  }
  try {
    return replay(mpi, o, plan, indexed);
  } catch (const InputError& e) {
    // Found by rank 0 alone, after the run (the other ranks are done).
    std::cerr << "adagrouper-calib replay: " << e.what() << std::endl;
    return 2;
  } catch (const std::exception& e) {
    // A failed call or a broken peer in the middle of the run: the other ranks may be
    // waiting for this one, so the whole job ends here.
    std::cerr << "adagrouper-calib replay: " << e.what() << std::endl;
    mpi.abort(1);
  }
}

}  // namespace adagrouper::calib
