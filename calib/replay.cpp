// The replay's parts that need no MPI: the plan, the indexed programs, the measured
// result (calib/replay.h).
#include "replay.h"

#include <algorithm>
#include <cmath>
#include <filesystem>
#include <limits>
#include <map>
#include <tuple>

#include <fmt/format.h>

#include "json_util.h"

namespace adagrouper::calib {

namespace {

using Kind = planner::ProgramEntry::Kind;

std::string resolve_pipeline_path(const std::string& plan_path, const Field& root) {
  if (!root.has("inputs"))
    root.fail("has no inputs (no pipeline file to take the durations from); give --pipeline FILE");
  const Field inputs = root.at("inputs");
  inputs.require_array();
  for (std::size_t i = 0; i < inputs.size(); ++i) {
    const Field e = inputs.at(i);
    if (e.at("role").string() != "pipeline") continue;
    const std::filesystem::path p = e.at("path").string();
    // As written (relative to where `plan` ran), else relative to the plan's directory.
    if (p.is_absolute() || std::filesystem::exists(p)) return p.string();
    const auto beside = std::filesystem::path(plan_path).parent_path() / p;
    if (std::filesystem::exists(beside)) return beside.string();
    e.at("path").fail(fmt::format("the pipeline file {} does not exist (nor beside the plan); give --pipeline FILE",
                                  p.string()));
  }
  inputs.fail("has no entry with role \"pipeline\"; give --pipeline FILE");
}

planner::DeviceProgram parse_program(const Field& dev, int stage) {
  planner::DeviceProgram p;
  p.stage = stage;
  if (dev.at("stage").integer() != stage) dev.at("stage").fail(fmt::format("must be {} (devices in stage order)", stage));
  const Field prog = dev.at("program");
  prog.require_array();
  for (std::size_t i = 0; i < prog.size(); ++i) {
    const Field e = prog.at(i);
    const std::string op = e.at("op").string();
    planner::ProgramEntry x{Kind::Forward};
    x.micro_batch = static_cast<int>(e.at("micro_batch").integer_at_least(0));
    if (op == "forward" || op == "backward") {
      x.kind = op == "forward" ? Kind::Forward : Kind::Backward;
    } else if (op == "send" || op == "recv") {
      x.kind = op == "send" ? Kind::Send : Kind::Recv;
      if (e.has("stream") && e.at("stream").string() != op)
        e.at("stream").fail(fmt::format("must be \"{}\" (sends and recvs run on their own streams)", op));
      x.peer = static_cast<int>(e.at("peer").integer_at_least(0));
      x.bytes = e.at("bytes").non_negative();
      x.tag = static_cast<int>(e.at("tag").integer_at_least(0));
      x.communicator = static_cast<int>(e.at("communicator").integer_at_least(0));
    } else {
      e.at("op").fail(fmt::format("must be forward, backward, send or recv, got \"{}\"", op));
    }
    p.entries.push_back(x);
  }
  return p;
}

}  // namespace

ReplayPlan load_replay_plan(const std::string& plan_path, const ReplayPlanOptions& options) {
  const nlohmann::json doc = read_json_file(plan_path);
  const Field root(doc, plan_path);
  root.require_object();
  if (root.at("schema").string() != "adagrouper.plan/1")
    root.at("schema").fail("must be \"adagrouper.plan/1\" (a plan written by `adagrouper plan --output`)");
  ReplayPlan plan;
  plan.source = plan_path;
  plan.stages = static_cast<int>(root.at("stages").integer_at_least(1));
  plan.global_batch_size = static_cast<int>(root.at("global_batch_size").integer_at_least(1));
  if (root.has("memory_limit_bytes") && !root.at("memory_limit_bytes").json().is_null())
    plan.memory_limit_bytes = root.at("memory_limit_bytes").positive();

  // Which candidate.
  const Field candidates = root.at("candidates");
  candidates.require_array();
  Field pick = root.at("chosen");
  if (options.candidate) {
    const int i = *options.candidate;
    if (i < 0 || static_cast<std::size_t>(i) >= candidates.size())
      throw InputError(fmt::format("--candidate: {} is not the index of a candidate of {} (0 .. {})", i, plan_path,
                                   candidates.size() - 1));
    pick = candidates.at(static_cast<std::size_t>(i));
  }
  plan.schedule = pick.at("schedule").string();
  plan.k = static_cast<int>(pick.at("k").integer_at_least(1));
  plan.micro_batch_size = static_cast<int>(pick.at("micro_batch_size").integer_at_least(1));
  plan.micro_batches = static_cast<int>(pick.at("micro_batches").integer_at_least(1));
  if (plan.micro_batches * plan.micro_batch_size != plan.global_batch_size)
    pick.at("micro_batches").fail(fmt::format("{} x micro_batch_size {} is not global_batch_size {}",
                                              plan.micro_batches, plan.micro_batch_size, plan.global_batch_size));
  if (pick.has("predicted_iteration_time_s") && !pick.at("predicted_iteration_time_s").json().is_null())
    plan.predicted_iteration_time_s = pick.at("predicted_iteration_time_s").positive();
  const Field chosen = root.at("chosen");
  plan.chosen = chosen.at("schedule").string() == plan.schedule && chosen.at("k").integer() == plan.k &&
                chosen.at("micro_batch_size").integer() == plan.micro_batch_size;

  // Durations and bytes at b, from the pipeline the plan was made from.
  plan.pipeline_source =
      options.pipeline_path.empty() ? resolve_pipeline_path(plan_path, root) : options.pipeline_path;
  sim::Pipeline pipeline = sim::load_pipeline(plan.pipeline_source);
  if (pipeline.num_stages() != plan.stages)
    throw InputError(fmt::format("{}: stages: the plan has {} stages, the pipeline {} has {}", plan_path, plan.stages,
                                 plan.pipeline_source, pipeline.num_stages()));
  plan.pipeline = pipeline.name;
  pipeline.global_batch_size = plan.global_batch_size;  // the plan may have overridden B
  plan.params = pipeline.at(plan.micro_batch_size, fmt::format("{}: micro_batch_size", plan_path));

  if (plan.chosen) {
    const Field devices = root.at("devices");
    devices.require_array();
    if (devices.size() != static_cast<std::size_t>(plan.stages))
      devices.fail(fmt::format("has {} devices, the plan {} stages", devices.size(), plan.stages));
    for (int s = 0; s < plan.stages; ++s) plan.programs.push_back(parse_program(devices.at(s), s));
    const auto problems = planner::validate_programs(plan.programs);
    if (!problems.empty()) devices.fail(fmt::format("the programs are inconsistent: {}", problems.front()));
  } else {
    std::optional<int> k;
    if (plan.schedule == "kfkb") k = plan.k;
    const sim::Schedule schedule = sim::make_named(plan.schedule, plan.stages, plan.micro_batches, k);
    plan.programs = planner::device_programs(schedule, plan.params);
  }
  for (int s = 0; s < plan.stages; ++s) index_program(plan, s);  // every entry in its place
  return plan;
}

StageProgram index_program(const ReplayPlan& plan, int stage) {
  const int S = plan.stages;
  const int M = plan.micro_batches;
  const auto& entries = plan.programs.at(static_cast<std::size_t>(stage)).entries;
  const sim::StageParams& par = plan.params.at(static_cast<std::size_t>(stage));
  StageProgram p;
  p.stage = stage;
  auto where = [&](std::size_t i) { return fmt::format("{}: devices[{}].program[{}]", plan.source, stage, i); };
  // Compute ops by (phase, micro-batch), then messages attached to them.
  std::vector<int> compute_of(2 * static_cast<std::size_t>(M), -1);
  for (std::size_t i = 0; i < entries.size(); ++i) {
    const auto& e = entries[i];
    if (e.kind != Kind::Forward && e.kind != Kind::Backward) continue;
    if (e.micro_batch >= M) throw InputError(fmt::format("{}: micro-batch {} does not exist (M = {})", where(i), e.micro_batch, M));
    const bool bwd = e.kind == Kind::Backward;
    int& slot = compute_of[2 * static_cast<std::size_t>(e.micro_batch) + bwd];
    if (slot >= 0) throw InputError(fmt::format("{}: {}{} is repeated", where(i), bwd ? 'B' : 'F', e.micro_batch));
    slot = static_cast<int>(p.compute.size());
    p.compute.push_back({{bwd ? sim::Phase::Backward : sim::Phase::Forward, e.micro_batch}, bwd ? par.bwd : par.fwd});
  }
  for (int m = 0; m < M; ++m)
    for (int b = 0; b < 2; ++b)
      if (compute_of[2 * static_cast<std::size_t>(m) + b] < 0)
        throw InputError(fmt::format("{}: devices[{}]: {}{} is missing", plan.source, stage, b ? 'B' : 'F', m));
  for (std::size_t i = 0; i < entries.size(); ++i) {
    const auto& e = entries[i];
    if (e.kind != Kind::Send && e.kind != Kind::Recv) continue;
    const bool send = e.kind == Kind::Send;
    if (e.micro_batch >= M) throw InputError(fmt::format("{}: micro-batch {} does not exist (M = {})", where(i), e.micro_batch, M));
    const bool gradient = e.tag % 2 == 1;
    if (e.tag != 2 * e.micro_batch + gradient)
      throw InputError(fmt::format("{}: tag {} is not 2m or 2m+1 for micro-batch {}", where(i), e.tag, e.micro_batch));
    // Activations go up (s -> s+1), gradients down.
    const int expect_peer = send ? (gradient ? stage - 1 : stage + 1) : (gradient ? stage + 1 : stage - 1);
    if (e.peer != expect_peer || expect_peer < 0 || expect_peer >= S)
      throw InputError(fmt::format("{}: peer {} is not the neighbour a{} {} {} of stage {}", where(i), e.peer,
                                   gradient ? " gradient" : "n activation", send ? "goes to" : "comes from",
                                   expect_peer, stage));
    // F(m) sends the activation and consumes the one from below; B(m) the gradients.
    const int c = compute_of[2 * static_cast<std::size_t>(e.micro_batch) + gradient];
    StageProgram::Compute& op = p.compute[static_cast<std::size_t>(c)];
    int& link = send ? op.output : op.input;
    if (link >= 0)
      throw InputError(fmt::format("{}: {} {}{} twice", where(i), send ? "sends the output of" : "receives the input of",
                                   gradient ? 'B' : 'F', e.micro_batch));
    const double expect_bytes = send ? (gradient ? par.gout : par.out)
                                     : (gradient ? plan.params[static_cast<std::size_t>(stage + 1)].gout
                                                 : plan.params[static_cast<std::size_t>(stage - 1)].out);
    if (std::llround(e.bytes) != std::llround(expect_bytes))
      throw InputError(fmt::format("{}: bytes {} is not the pipeline's {} at b = {}", where(i), e.bytes, expect_bytes,
                                   plan.micro_batch_size));
    if (e.bytes > static_cast<double>(std::numeric_limits<int>::max()))
      throw InputError(fmt::format("{}: bytes {} is more than one MPI/NCCL message of this harness carries (2 GiB)",
                                   where(i), e.bytes));
    StageProgram::Message msg;
    msg.peer = e.peer;
    msg.tag = e.tag;
    msg.micro_batch = e.micro_batch;
    msg.bytes = static_cast<std::size_t>(std::llround(e.bytes));
    msg.side = e.peer > stage ? 1 : 0;
    msg.compute = c;
    auto& list = send ? p.sends : p.recvs;
    auto& per_side = send ? p.sends_per_side : p.recvs_per_side;
    msg.position = per_side[msg.side]++;
    link = static_cast<int>(list.size());
    list.push_back(msg);
  }
  for (std::size_t c = 0; c < p.compute.size(); ++c) {
    const auto& op = p.compute[c];
    const bool bwd = op.op.phase == sim::Phase::Backward;
    const bool needs_input = bwd ? stage + 1 < S : stage > 0;
    const bool needs_output = bwd ? stage > 0 : stage + 1 < S;
    if (needs_input && op.input < 0)
      throw InputError(fmt::format("{}: devices[{}]: {} has no recv of its input", plan.source, stage,
                                   sim::op_name(op.op)));
    if (needs_output && op.output < 0)
      throw InputError(fmt::format("{}: devices[{}]: {} has no send of its output", plan.source, stage,
                                   sim::op_name(op.op)));
  }
  // A recv must come before its consumer, a send after its producer: check in order.
  std::vector<char> ran(p.compute.size(), 0);
  std::size_t next_compute = 0;
  std::size_t recv_i = 0, send_i = 0;
  for (std::size_t i = 0; i < entries.size(); ++i) {
    const auto& e = entries[i];
    if (e.kind == Kind::Forward || e.kind == Kind::Backward) {
      ran[next_compute++] = 1;
    } else if (e.kind == Kind::Send) {
      if (!ran[static_cast<std::size_t>(p.sends[send_i++].compute)])
        throw InputError(fmt::format("{}: the send comes before the op that produces it", where(i)));
    } else {
      if (ran[static_cast<std::size_t>(p.recvs[recv_i++].compute)])
        throw InputError(fmt::format("{}: the recv comes after the op that consumes it", where(i)));
    }
  }
  return p;
}

namespace {

// A level (memory, queue depth) changed by events; releases before allocations at
// equal times, as the simulator does.
struct LevelEvent {
  double time;
  double delta;
};

void sweep(std::vector<LevelEvent>& ev, double base, double& peak, std::vector<sim::Timeline::Sample>* out,
           std::int32_t stage, sim::Counter kind, std::int32_t peer) {
  std::sort(ev.begin(), ev.end(), [](const LevelEvent& a, const LevelEvent& b) {
    return std::tie(a.time, a.delta) < std::tie(b.time, b.delta);
  });
  double cur = base;
  peak = std::max(peak, cur);
  for (std::size_t i = 0; i < ev.size(); ++i) {
    cur += ev[i].delta;
    peak = std::max(peak, cur);
    const bool last_at_time = i + 1 == ev.size() || ev[i + 1].time != ev[i].time;
    if (out && last_at_time) out->push_back({stage, kind, peer, ev[i].time, cur});
  }
}

}  // namespace

sim::SimResult measured_result(const ReplayPlan& plan, const std::vector<StageProgram>& progs, const Measurements& m,
                               bool timeline) {
  const int S = plan.stages;
  const int W = m.warmup, N = m.iterations;
  sim::SimResult r;
  r.pipeline = plan.pipeline;
  r.spec = sim::ScheduleSpec::named(plan.schedule, plan.schedule == "kfkb" ? std::optional<int>(plan.k) : std::nullopt);
  r.k = plan.k;
  r.micro_batch_size = plan.micro_batch_size;
  r.micro_batches = plan.micro_batches;
  r.global_batch_size = plan.global_batch_size;
  r.num_stages = S;
  r.iterations = N;
  r.start_time_s = m.start_time_s;
  r.memory_limit_bytes = plan.memory_limit_bytes;
  const double t0 = m.boundaries.at(static_cast<std::size_t>(W));
  auto at = [&](double t) { return t - t0 + m.start_time_s; };
  for (int i = 0; i < N; ++i)
    r.iteration_times_s.push_back(m.boundaries[static_cast<std::size_t>(W + i + 1)] -
                                  m.boundaries[static_cast<std::size_t>(W + i)]);
  for (double t : r.iteration_times_s) r.total_time_s += t;
  if (timeline) r.timeline.emplace();
  auto* counters = timeline ? &r.timeline->counters : nullptr;

  r.stages.resize(static_cast<std::size_t>(S));
  for (int s = 0; s < S; ++s) {
    const StageProgram& p = progs[static_cast<std::size_t>(s)];
    const RankRecord& rec = m.ranks[static_cast<std::size_t>(s)];
    const sim::StageParams& par = plan.params[static_cast<std::size_t>(s)];
    const std::size_t nops = p.compute.size(), nrecv = p.recvs.size();
    sim::StageResult& out = r.stages[static_cast<std::size_t>(s)];
    out.stage = s;
    std::vector<LevelEvent> mem, inflight;
    for (int i = W; i < W + N; ++i) {
      for (std::size_t c = 0; c < nops; ++c) {
        const auto& op = p.compute[c];
        const double a = rec.op_start[i * nops + c], b = rec.op_end[i * nops + c];
        out.busy_s += b - a;
        ++r.compute_ops;
        if (timeline)
          r.timeline->ops.push_back({s, i - W, op.op, at(a), at(b)});
        if (op.op.phase == sim::Phase::Forward) {
          mem.push_back({at(a), par.act});
          inflight.push_back({at(a), 1});
        } else {
          mem.push_back({at(b), -par.act});
          inflight.push_back({at(b), -1});
        }
      }
      for (std::size_t q = 0; q < nrecv; ++q) {
        const auto& msg = p.recvs[q];
        const double arrived = rec.recv_done[i * nrecv + q];
        const double consumed = rec.op_start[i * nops + static_cast<std::size_t>(msg.compute)];
        mem.push_back({at(arrived), static_cast<double>(msg.bytes)});
        mem.push_back({at(std::max(arrived, consumed)), -static_cast<double>(msg.bytes)});
      }
      out.optimizer_s += rec.iteration_end[static_cast<std::size_t>(i)] - rec.op_end[i * nops + nops - 1];
    }
    out.bubble_s = r.total_time_s - out.busy_s;
    double peak_inflight = 0, peak_mem = 0;
    sweep(inflight, 0, peak_inflight, nullptr, s, sim::Counter::Memory, -1);
    if (counters) counters->push_back({s, sim::Counter::Memory, -1, at(t0), par.static_bytes});
    sweep(mem, par.static_bytes, peak_mem, counters, s, sim::Counter::Memory, -1);
    out.peak_inflight = static_cast<int>(std::lround(peak_inflight));
    out.peak_memory_bytes = peak_mem;
  }

  // Channels: forward 0->1 .. S-2->S-1, then backward 1->0 .. S-1->S-2, as simulate lists them.
  auto channel = [&](int from, int to) {
    sim::ChannelResult ch;
    ch.from = from;
    ch.to = to;
    const StageProgram& tx = progs[static_cast<std::size_t>(from)];
    const StageProgram& rx = progs[static_cast<std::size_t>(to)];
    const RankRecord& txr = m.ranks[static_cast<std::size_t>(from)];
    const RankRecord& rxr = m.ranks[static_cast<std::size_t>(to)];
    const int tx_side = to > from ? 1 : 0, rx_side = to > from ? 0 : 1;
    // The receiver's recvs on this channel, by position.
    std::vector<std::size_t> rx_index(static_cast<std::size_t>(rx.recvs_per_side[rx_side]));
    for (std::size_t q = 0; q < rx.recvs.size(); ++q)
      if (rx.recvs[q].side == rx_side) rx_index[static_cast<std::size_t>(rx.recvs[q].position)] = q;
    std::vector<LevelEvent> queue;
    double prev_end = -std::numeric_limits<double>::infinity();
    for (int i = W; i < W + N; ++i) {
      for (std::size_t q = 0; q < tx.sends.size(); ++q) {
        const auto& msg = tx.sends[q];
        if (msg.side != tx_side) continue;
        const std::size_t rq = rx_index.at(static_cast<std::size_t>(msg.position));
        const double start = std::max(txr.send_post[i * tx.sends.size() + q], prev_end);
        const double end = std::max(rxr.recv_done[i * rx.recvs.size() + rq], start);
        prev_end = end;
        const double consumed =
            std::max(end, rxr.op_start[i * rx.compute.size() + static_cast<std::size_t>(rx.recvs[rq].compute)]);
        ch.busy_s += end - start;
        ++ch.messages;
        ch.bytes += static_cast<double>(msg.bytes);
        ++r.transfers;
        queue.push_back({at(end), 1});
        queue.push_back({at(consumed), -1});
        if (timeline)
          r.timeline->transfers.push_back({from, to, i - W, msg.micro_batch, at(start), at(end),
                                           static_cast<double>(msg.bytes)});
      }
    }
    double peak = 0;
    sweep(queue, 0, peak, counters, to, sim::Counter::QueueDepth, from);
    ch.peak_queue_depth = static_cast<int>(std::lround(peak));
    return ch;
  };
  for (int s = 0; s + 1 < S; ++s) r.channels.push_back(channel(s, s + 1));
  for (int s = 0; s + 1 < S; ++s) r.channels.push_back(channel(s + 1, s));
  if (timeline) {
    auto& ops = r.timeline->ops;
    std::stable_sort(ops.begin(), ops.end(), [](const auto& a, const auto& b) { return a.start < b.start; });
    auto& tr = r.timeline->transfers;
    std::stable_sort(tr.begin(), tr.end(), [](const auto& a, const auto& b) { return a.start < b.start; });
  }
  return r;
}

std::vector<std::string> check_measurements(const std::vector<StageProgram>& progs, const Measurements& m,
                                            double tol) {
  std::vector<std::string> problems;
  const int total = m.warmup + m.iterations;
  auto report = [&](std::string what) {
    if (problems.size() < 20) problems.push_back(std::move(what));
  };
  for (std::size_t s = 0; s < progs.size(); ++s) {
    const StageProgram& p = progs[s];
    const RankRecord& rec = m.ranks[s];
    const std::size_t nops = p.compute.size(), ns = p.sends.size(), nr = p.recvs.size();
    if (rec.op_start.size() != nops * total || rec.op_end.size() != nops * total || rec.send_post.size() != ns * total ||
        rec.recv_done.size() != nr * total || rec.iteration_end.size() != static_cast<std::size_t>(total)) {
      report(fmt::format("stage {}: the records do not hold every op of {} iterations", s, total));
      continue;
    }
    // The compute stream: in order, each op after the previous one and after its input.
    double prev = -std::numeric_limits<double>::infinity();
    for (int i = 0; i < total; ++i) {
      for (std::size_t c = 0; c < nops; ++c) {
        const std::size_t k = static_cast<std::size_t>(i) * nops + c;
        const auto& op = p.compute[c];
        if (rec.op_start[k] < prev - tol || rec.op_end[k] < rec.op_start[k])
          report(fmt::format("stage {} iteration {}: {} ran out of order ({} .. {}, previous op ended {})", s, i,
                             sim::op_name(op.op), rec.op_start[k], rec.op_end[k], prev));
        if (op.input >= 0) {
          const double arrived = rec.recv_done[static_cast<std::size_t>(i) * nr + static_cast<std::size_t>(op.input)];
          if (rec.op_start[k] < arrived - tol)
            report(fmt::format("stage {} iteration {}: {} started at {} before its input arrived at {}", s, i,
                               sim::op_name(op.op), rec.op_start[k], arrived));
        }
        if (op.output >= 0) {
          const double posted = rec.send_post[static_cast<std::size_t>(i) * ns + static_cast<std::size_t>(op.output)];
          if (posted < rec.op_end[k] - tol)
            report(fmt::format("stage {} iteration {}: the output of {} was sent at {} before the op ended at {}", s,
                               i, sim::op_name(op.op), posted, rec.op_end[k]));
        }
        prev = rec.op_end[k];
      }
      prev = std::max(prev, rec.iteration_end[static_cast<std::size_t>(i)]);
    }
    // Transfers: the n-th send on a channel against the receiver's n-th recv from it.
    for (std::size_t q = 0; q < ns; ++q) {
      const auto& msg = p.sends[q];
      const StageProgram& rx = progs[static_cast<std::size_t>(msg.peer)];
      const int rx_side = msg.side == 1 ? 0 : 1;
      std::size_t rq = rx.recvs.size();
      for (std::size_t j = 0; j < rx.recvs.size(); ++j)
        if (rx.recvs[j].side == rx_side && rx.recvs[j].position == msg.position) rq = j;
      if (rq == rx.recvs.size() || rx.recvs[rq].bytes != msg.bytes || rx.recvs[rq].tag != msg.tag) {
        report(fmt::format("stage {}: send {} (tag {}, {} bytes) has no matching recv on stage {}", s, q, msg.tag,
                           msg.bytes, msg.peer));
        continue;
      }
      for (int i = 0; i < total; ++i) {
        const double posted = rec.send_post[static_cast<std::size_t>(i) * ns + q];
        const double arrived = m.ranks[static_cast<std::size_t>(msg.peer)]
                                   .recv_done[static_cast<std::size_t>(i) * rx.recvs.size() + rq];
        if (arrived < posted - tol)
          report(fmt::format("channel {} -> {} iteration {}: tag {} arrived at {} before it was sent at {}", s,
                             msg.peer, i, msg.tag, arrived, posted));
      }
    }
  }
  for (std::size_t i = 1; i < m.boundaries.size(); ++i)
    if (m.boundaries[i] < m.boundaries[i - 1])
      report(fmt::format("iteration boundaries go backwards at {}", i));
  return problems;
}

std::string stage_trace_csv(const std::vector<StageProgram>& progs, const Measurements& m) {
  std::string out = "iteration,stage,micro_batch,phase,duration_s\n";
  for (int i = 0; i < m.iterations; ++i) {
    for (std::size_t s = 0; s < progs.size(); ++s) {
      const auto& p = progs[s];
      const auto& rec = m.ranks[s];
      const std::size_t nops = p.compute.size();
      for (std::size_t c = 0; c < nops; ++c) {
        const std::size_t k = static_cast<std::size_t>(m.warmup + i) * nops + c;
        out += fmt::format("{},{},{},{},{:.9g}\n", i, s, p.compute[c].op.micro_batch,
                           p.compute[c].op.phase == sim::Phase::Forward ? 'F' : 'B', rec.op_end[k] - rec.op_start[k]);
      }
    }
  }
  return out;
}

}  // namespace adagrouper::calib
