// The replay's plan (calib/replay.h): one candidate of a plan file, its programs indexed.
#include <cmath>
#include <filesystem>
#include <limits>

#include <fmt/format.h>

#include "compare.h"
#include "json_util.h"
#include "model.h"
#include "partition.h"
#include "pipeline.h"
#include "replay.h"

namespace adagrouper::calib {

namespace {

using Kind = planner::ProgramEntry::Kind;

// The path of the plan's input with `role` ("pipeline", "model"): as written (relative to
// where `plan` ran), else relative to the plan's directory; "" when the plan has none.
std::string input_path(const std::string& plan_path, const Field& root, std::string_view role) {
  if (!root.has("inputs")) return {};
  const Field inputs = root.at("inputs");
  inputs.require_array();
  for (std::size_t i = 0; i < inputs.size(); ++i) {
    const Field e = inputs.at(i);
    if (e.at("role").string() != role) continue;
    const std::filesystem::path p = e.at("path").string();
    if (p.is_absolute() || std::filesystem::exists(p)) return p.string();
    const auto beside = std::filesystem::path(plan_path).parent_path() / p;
    if (std::filesystem::exists(beside)) return beside.string();
    e.at("path").fail(fmt::format("the {} file {} does not exist (nor beside the plan); give --pipeline FILE", role,
                                  p.string()));
  }
  return {};
}

// The pipeline the plan was made from: --pipeline, the plan's pipeline input, or, for a
// plan made with `plan --model`, the model cut at the plan's partition bounds (what the
// planner ran).
sim::Pipeline planned_pipeline(const Field& root, const ReplayPlanOptions& options, ReplayPlan& plan) {
  plan.pipeline_source = options.pipeline_path.empty() ? input_path(plan.source, root, "pipeline") : options.pipeline_path;
  if (!plan.pipeline_source.empty()) return sim::load_pipeline(plan.pipeline_source);
  const std::string model = input_path(plan.source, root, "model");
  if (model.empty() || !root.has("partition"))
    root.fail("has no pipeline or model among its inputs (no durations to replay); give --pipeline FILE");
  const Field bounds_field = root.at("partition").at("bounds");
  bounds_field.require_array();
  const planner::Model m = planner::load_model(model);
  if (bounds_field.size() != static_cast<std::size_t>(plan.stages) + 1)
    bounds_field.fail(fmt::format("has {} entries, the plan's {} stages need {}", bounds_field.size(), plan.stages,
                                  plan.stages + 1));
  // 0 = b_0 < b_1 < ... < b_S = the model's layers: every stage holds at least one layer.
  std::vector<int> bounds;
  const std::size_t last = bounds_field.size() - 1;
  for (std::size_t i = 0; i <= last; ++i) {
    const int b = bounds_field.at(i).int_in(0, m.num_layers());
    if ((i == 0 && b != 0) || (i == last && b != m.num_layers()) || (i > 0 && b <= bounds.back()))
      bounds_field.at(i).fail(fmt::format("bounds must rise from 0 to the model's {} layers", m.num_layers()));
    bounds.push_back(b);
  }
  plan.pipeline_source = fmt::format("{} cut at {}", model, bounds_field.json().dump());
  return planner::pipeline_of(m, bounds, plan.global_batch_size, plan.memory_limit_bytes.value_or(0.0));
}

planner::ProgramEntry parse_entry(const Field& e) {
  const std::string op = e.at("op").string();
  planner::ProgramEntry x{Kind::Forward};
  x.micro_batch = e.at("micro_batch").int_in(0, sim::kMaxBatchSize);
  if (op == "forward" || op == "backward") {
    x.kind = op == "forward" ? Kind::Forward : Kind::Backward;
  } else if (op == "send" || op == "recv") {
    x.kind = op == "send" ? Kind::Send : Kind::Recv;
    if (e.has("stream") && e.at("stream").string() != op)
      e.at("stream").fail(fmt::format("must be \"{}\" (sends and recvs run on their own streams)", op));
    x.peer = e.at("peer").int_in(0, sim::kMaxStages);
    x.bytes = e.at("bytes").number_in(0, sim::kMaxBytes, "the largest byte count an input may give");
    x.tag = e.at("tag").int_in(0);
    x.communicator = e.at("communicator").int_in(0);
  } else {
    e.at("op").fail(fmt::format("must be forward, backward, send or recv, got \"{}\"", op));
  }
  return x;
}

planner::DeviceProgram parse_program(const Field& dev, int stage) {
  planner::DeviceProgram p;
  p.stage = stage;
  if (dev.at("stage").integer() != stage) dev.at("stage").fail(fmt::format("must be {} (devices in stage order)", stage));
  const Field prog = dev.at("program");
  prog.require_array();
  for (std::size_t i = 0; i < prog.size(); ++i) p.entries.push_back(parse_entry(prog.at(i)));
  return p;
}

// The schedule a candidate names: its family, with its "k" for the families that take one.
sim::ScheduleSpec schedule_spec(const Field& candidate) {
  const std::string family = candidate.at("schedule").string();
  const sim::ScheduleFamily* f = sim::find_schedule_family(family);
  if (f && f->takes_k) return sim::ScheduleSpec::named(family, candidate.at("k").int_in(1, sim::kMaxBatchSize));
  return sim::ScheduleSpec::named(family);
}

// This harness runs one model stage per device with a whole backward: a candidate
// (adagrouper.plan/2) with virtual stages or a split backward is refused by name.
void refuse_model_stages(const Field& candidate) {
  if (candidate.has("virtual_stages") && candidate.at("virtual_stages").int_in(1, sim::kMaxStages) != 1)
    candidate.at("virtual_stages").fail(
        fmt::format("replay runs one model stage per device; {} with {} virtual stages cannot be replayed yet",
                    candidate.at("schedule").string(), candidate.at("virtual_stages").integer()));
  if (candidate.has("split_backward") && candidate.at("split_backward").boolean())
    candidate.at("split_backward").fail(
        fmt::format("replay runs the backward as one op; {} with a split backward cannot be replayed yet",
                    candidate.at("schedule").string()));
}

// The candidate to replay: the chosen plan, or candidates[options.candidate].
Field pick_candidate(const Field& root, const ReplayPlanOptions& options) {
  const Field candidates = root.at("candidates");
  candidates.require_array();
  if (!options.candidate) return root.at("chosen");
  const int i = *options.candidate;
  if (i < 0 || static_cast<std::size_t>(i) >= candidates.size())
    throw InputError(fmt::format("--candidate: {} is not the index of a candidate of {} (0 .. {})", i, root.file(),
                                 candidates.size() - 1));
  return candidates.at(static_cast<std::size_t>(i));
}

// The schedule, sizes and prediction of the candidate `pick`, and whether it is the chosen one.
void read_candidate(const Field& root, const Field& pick, ReplayPlan& plan) {
  plan.spec = schedule_spec(pick);
  refuse_model_stages(pick);
  plan.k = pick.at("k").int_in(1, sim::kMaxBatchSize);
  plan.micro_batch_size = pick.at("micro_batch_size").int_in(1, sim::kMaxBatchSize);
  plan.micro_batches = pick.at("micro_batches").int_in(1, sim::kMaxBatchSize);
  if (static_cast<long long>(plan.micro_batches) * plan.micro_batch_size != plan.global_batch_size)
    pick.at("micro_batches").fail(fmt::format("{} x micro_batch_size {} is not global_batch_size {}",
                                              plan.micro_batches, plan.micro_batch_size, plan.global_batch_size));
  if (pick.has("predicted_iteration_time_s") && !pick.at("predicted_iteration_time_s").json().is_null())
    plan.predicted_iteration_time_s = pick.at("predicted_iteration_time_s").positive();
  const Field chosen = root.at("chosen");
  plan.chosen = schedule_spec(chosen) == plan.spec && chosen.at("k").integer() == plan.k &&
                chosen.at("micro_batch_size").integer() == plan.micro_batch_size;
}

// Durations and bytes at b, from the pipeline the plan was made from.
void read_pipeline(const Field& root, const ReplayPlanOptions& options, ReplayPlan& plan) {
  sim::Pipeline pipeline = planned_pipeline(root, options, plan);
  if (pipeline.num_stages() != plan.stages)
    throw InputError(fmt::format("{}: stages: the plan has {} stages, the pipeline {} has {}", plan.source,
                                 plan.stages, plan.pipeline_source, pipeline.num_stages()));
  plan.pipeline = pipeline.name;
  pipeline.global_batch_size = plan.global_batch_size;  // the plan may have overridden B
  plan.params = pipeline.at(plan.micro_batch_size, fmt::format("{}: micro_batch_size", plan.source));
}

// The chosen candidate's programs are the plan's `devices`; another's, the planner's own.
void read_programs(const Field& root, ReplayPlan& plan) {
  if (!plan.chosen) {
    const sim::Schedule schedule = sim::make_schedule(plan.spec, plan.stages, plan.micro_batches);
    plan.programs = planner::device_programs(schedule, plan.params);
    return;
  }
  const Field devices = root.at("devices");
  devices.require_array();
  if (devices.size() != static_cast<std::size_t>(plan.stages))
    devices.fail(fmt::format("has {} devices, the plan {} stages", devices.size(), plan.stages));
  for (int s = 0; s < plan.stages; ++s) plan.programs.push_back(parse_program(devices.at(s), s));
  const auto problems = planner::validate_programs(plan.programs);
  if (!problems.empty()) devices.fail(fmt::format("the programs are inconsistent: {}", problems.front()));
}

}  // namespace

ReplayPlan load_replay_plan(const std::string& plan_path, const ReplayPlanOptions& options) {
  const nlohmann::json doc = read_json_file(plan_path);
  const Field root(doc, plan_path);
  root.require_object();
  sim::check_plan_keys(root);
  const std::string schema = root.at("schema").string();
  if (schema != "adagrouper.plan/1" && schema != "adagrouper.plan/2")
    root.at("schema").fail(
        "must be \"adagrouper.plan/2\" or \"adagrouper.plan/1\" (a plan written by `adagrouper plan --output`)");
  ReplayPlan plan;
  plan.source = plan_path;
  plan.stages = root.at("stages").int_in(1, sim::kMaxStages);
  plan.global_batch_size = root.at("global_batch_size").int_in(1, sim::kMaxBatchSize);
  if (root.has("memory_limit_bytes") && !root.at("memory_limit_bytes").json().is_null())
    plan.memory_limit_bytes = root.at("memory_limit_bytes").positive();
  read_candidate(root, pick_candidate(root, options), plan);
  read_pipeline(root, options, plan);
  read_programs(root, plan);
  for (int s = 0; s < plan.stages; ++s) index_program(plan, s);  // every entry in its place
  return plan;
}

namespace {

// Indexes one stage's program: first its compute ops, then each send and recv attached
// to the op that produces or consumes it, then the checks that every op has the
// messages it needs and that they are issued in an order that can run.
class Indexer {
 public:
  Indexer(const ReplayPlan& plan, int stage)
      : plan_(plan),
        stage_(stage),
        entries_(plan.programs.at(static_cast<std::size_t>(stage)).entries),
        par_(plan.params.at(static_cast<std::size_t>(stage))),
        compute_of_(2 * static_cast<std::size_t>(plan.micro_batches), -1) {
    p_.stage = stage;
  }

  IndexedProgram run() {
    for (std::size_t i = 0; i < entries_.size(); ++i)
      if (is_compute(entries_[i])) add_compute(i);
    check_every_op_present();
    for (std::size_t i = 0; i < entries_.size(); ++i)
      if (!is_compute(entries_[i])) add_message(i);
    check_every_op_linked();
    check_issue_order();
    return std::move(p_);
  }

 private:
  static bool is_compute(const planner::ProgramEntry& e) { return e.kind == Kind::Forward || e.kind == Kind::Backward; }

  std::string where(std::size_t i) const {
    return fmt::format("{}: devices[{}].program[{}]", plan_.source, stage_, i);
  }
  int& compute_slot(int micro_batch, bool backward) {
    return compute_of_[2 * static_cast<std::size_t>(micro_batch) + (backward ? 1 : 0)];
  }
  void check_micro_batch(std::size_t i) const {
    if (entries_[i].micro_batch >= plan_.micro_batches)
      throw InputError(fmt::format("{}: micro-batch {} does not exist (M = {})", where(i), entries_[i].micro_batch,
                                   plan_.micro_batches));
  }

  void add_compute(std::size_t i) {
    const auto& e = entries_[i];
    check_micro_batch(i);
    const bool bwd = e.kind == Kind::Backward;
    int& slot = compute_slot(e.micro_batch, bwd);
    if (slot >= 0) throw InputError(fmt::format("{}: {}{} is repeated", where(i), bwd ? 'B' : 'F', e.micro_batch));
    slot = static_cast<int>(p_.compute.size());
    // One model stage per stage: the stage's own.
    const sim::Op op{bwd ? sim::Phase::Backward : sim::Phase::Forward, e.micro_batch, stage_};
    p_.compute.push_back({op, bwd ? par_.bwd : par_.fwd});
  }

  void check_every_op_present() {
    for (int m = 0; m < plan_.micro_batches; ++m)
      for (const bool bwd : {false, true})
        if (compute_slot(m, bwd) < 0)
          throw InputError(
              fmt::format("{}: devices[{}]: {}{} is missing", plan_.source, stage_, bwd ? 'B' : 'F', m));
  }

  // The tag and peer of a send or recv: the neighbour the message goes to or comes from.
  void check_route(std::size_t i) const {
    const auto& e = entries_[i];
    const bool send = e.kind == Kind::Send;
    check_micro_batch(i);
    const bool gradient = e.tag % 2 == 1;
    if (e.tag != 2 * e.micro_batch + gradient)
      throw InputError(fmt::format("{}: tag {} is not 2m or 2m+1 for micro-batch {}", where(i), e.tag, e.micro_batch));
    // Activations go up (s -> s+1), gradients down.
    const int expect_peer = send == gradient ? stage_ - 1 : stage_ + 1;
    if (e.peer != expect_peer || expect_peer < 0 || expect_peer >= plan_.stages)
      throw InputError(fmt::format("{}: peer {} is not the neighbour a{} {} {} of stage {}", where(i), e.peer,
                                   gradient ? " gradient" : "n activation", send ? "goes to" : "comes from",
                                   expect_peer, stage_));
  }

  // The size of a send or recv: the sender's message in the plan's pipeline at b.
  void check_size(std::size_t i) const {
    const auto& e = entries_[i];
    const auto& sender = e.kind == Kind::Send ? par_ : plan_.params[static_cast<std::size_t>(e.peer)];
    const double expect_bytes = e.tag % 2 == 1 ? sender.gout : sender.out;
    if (std::llround(e.bytes) != std::llround(expect_bytes))
      throw InputError(fmt::format("{}: bytes {} is not the pipeline's {} at b = {}", where(i), e.bytes, expect_bytes,
                                   plan_.micro_batch_size));
    if (e.bytes > static_cast<double>(std::numeric_limits<int>::max()))
      throw InputError(fmt::format("{}: bytes {} is more than one MPI/NCCL message of this harness carries (2 GiB)",
                                   where(i), e.bytes));
  }

  // F(m) sends the activation and consumes the one from below; B(m) the gradients.
  void add_message(std::size_t i) {
    check_route(i);
    const auto& e = entries_[i];
    const bool send = e.kind == Kind::Send;
    const bool gradient = e.tag % 2 == 1;
    const int c = compute_slot(e.micro_batch, gradient);
    IndexedProgram::Compute& op = p_.compute[static_cast<std::size_t>(c)];
    int& link = send ? op.output : op.input;
    if (link >= 0)
      throw InputError(fmt::format("{}: {} {}{} twice", where(i), send ? "sends the output of" : "receives the input of",
                                   gradient ? 'B' : 'F', e.micro_batch));
    check_size(i);
    IndexedProgram::Message msg;
    msg.peer = e.peer;
    msg.tag = e.tag;
    msg.micro_batch = e.micro_batch;
    msg.bytes = static_cast<std::size_t>(std::llround(e.bytes));
    msg.side = e.peer > stage_ ? 1 : 0;
    msg.compute = c;
    auto& list = send ? p_.sends : p_.recvs;
    auto& per_side = send ? p_.sends_per_side : p_.recvs_per_side;
    msg.position = per_side[msg.side]++;
    link = static_cast<int>(list.size());
    list.push_back(msg);
  }

  void check_every_op_linked() const {
    const int S = plan_.stages;
    for (const auto& op : p_.compute) {
      const bool bwd = op.op.phase == sim::Phase::Backward;
      const bool needs_input = bwd ? stage_ + 1 < S : stage_ > 0;
      const bool needs_output = bwd ? stage_ > 0 : stage_ + 1 < S;
      if (needs_input && op.input < 0)
        throw InputError(fmt::format("{}: devices[{}]: {} has no recv of its input", plan_.source, stage_,
                                     sim::op_name(op.op)));
      if (needs_output && op.output < 0)
        throw InputError(fmt::format("{}: devices[{}]: {} has no send of its output", plan_.source, stage_,
                                     sim::op_name(op.op)));
    }
  }

  // A recv must come before its consumer, a send after its producer.
  void check_issue_order() const {
    std::vector<char> ran(p_.compute.size(), 0);
    std::size_t next_compute = 0, recv_i = 0, send_i = 0;
    for (std::size_t i = 0; i < entries_.size(); ++i) {
      const auto& e = entries_[i];
      if (is_compute(e)) {
        ran[next_compute++] = 1;
      } else if (e.kind == Kind::Send) {
        if (!ran[static_cast<std::size_t>(p_.sends[send_i++].compute)])
          throw InputError(fmt::format("{}: the send comes before the op that produces it", where(i)));
      } else if (ran[static_cast<std::size_t>(p_.recvs[recv_i++].compute)]) {
        throw InputError(fmt::format("{}: the recv comes after the op that consumes it", where(i)));
      }
    }
  }

  const ReplayPlan& plan_;
  const int stage_;
  const std::vector<planner::ProgramEntry>& entries_;
  const sim::StageParams& par_;
  std::vector<int> compute_of_;  // [2 * micro-batch + backward]: index into p_.compute, -1: not yet
  IndexedProgram p_;
};

}  // namespace

IndexedProgram index_program(const ReplayPlan& plan, int stage) { return Indexer(plan, stage).run(); }

}  // namespace adagrouper::calib
