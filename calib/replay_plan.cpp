// The replay's plan (calib/replay.h): one candidate of a plan file, its programs indexed.
#include <algorithm>
#include <cmath>
#include <filesystem>
#include <iterator>
#include <limits>
#include <map>
#include <utility>

#include <fmt/format.h>

#include "compare.h"
#include "json_util.h"
#include "model.h"
#include "partition.h"
#include "pipeline.h"
#include "replay.h"
#include "traces.h"

namespace adagrouper::calib {

namespace {

using Kind = planner::ProgramEntry::Kind;

// The pipeline the plan was made from: --pipeline, or the plan's own
// (planner::planned_pipeline).
sim::Pipeline planned_pipeline(const Field& root, const ReplayPlanOptions& options, ReplayPlan& plan) {
  plan.pipeline_source = options.pipeline_path;
  if (!plan.pipeline_source.empty()) return sim::load_pipeline(plan.pipeline_source);
  return planner::planned_pipeline(root, plan.pipeline_source, "give --pipeline FILE");
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
  if (pick.has("status") && pick.at("status").string() == "refused")
    pick.at("status").fail("this candidate was refused by its family: there is nothing to replay");
  plan.spec = sim::planned_spec(pick);
  plan.k = pick.at("k").int_in(0, sim::kMaxBatchSize);
  plan.micro_batch_size = pick.at("micro_batch_size").int_in(1, sim::kMaxBatchSize);
  plan.micro_batches = pick.at("micro_batches").int_in(1, sim::kMaxBatchSize);
  if (static_cast<long long>(plan.micro_batches) * plan.micro_batch_size != plan.global_batch_size)
    pick.at("micro_batches").fail(fmt::format("{} x micro_batch_size {} is not global_batch_size {}",
                                              plan.micro_batches, plan.micro_batch_size, plan.global_batch_size));
  if (pick.has("predicted_iteration_time_s") && !pick.at("predicted_iteration_time_s").json().is_null())
    plan.predicted_iteration_time_s = pick.at("predicted_iteration_time_s").positive();
  plan.chosen = sim::is_chosen_candidate(root, pick);
}

// Durations and bytes at b, per model stage, from the pipeline the plan was made from,
// merged to the candidate's model stages when it has more.
void read_pipeline(const Field& root, const ReplayPlanOptions& options, ReplayPlan& plan) {
  sim::Pipeline pipeline = planned_pipeline(root, options, plan);
  const int wanted = plan.stages * plan.spec.virtual_stages;
  if (pipeline.num_stages() < wanted || pipeline.num_stages() % wanted != 0)
    throw InputError(fmt::format("{}: stages: the candidate runs {} model stages ({} stages x {} virtual stages), the "
                                 "pipeline {} has {}, not a multiple",
                                 plan.source, wanted, plan.stages, plan.spec.virtual_stages, plan.pipeline_source,
                                 pipeline.num_stages()));
  if (pipeline.num_stages() != wanted) pipeline = planner::merge_model_stages(pipeline, wanted);
  plan.pipeline = pipeline.name;
  pipeline.global_batch_size = plan.global_batch_size;  // the plan may have overridden B
  // The ranks run the profiles; the op overhead a pipeline may give is what a host adds.
  plan.params = pipeline.without_op_overhead().at(plan.micro_batch_size,
                                                   fmt::format("{}: micro_batch_size", plan.source));
}

// What the plan would record for a candidate it did not choose: its schedule, or with
// dynamic W fill the order of the first iteration of the plan's evaluation, made on the
// plan's own pipeline and network whatever --pipeline gives the ranks to run
// (planner::planned_order).
sim::Schedule deployed_order(const Field& root, const ReplayPlanOptions& options, const ReplayPlan& plan,
                             sim::Schedule schedule) {
  if (schedule.spec.w_fill != sim::WFill::Dynamic) return schedule;
  const sim::PlannedRun run = sim::load_planned_run(plan.source, options.candidate);
  return planner::planned_order(run, root, sim::load_planned_network(run, plan.source, traces::TraceRates()),
                                std::move(schedule));
}

// The candidate's schedule: where its model stages run, the channels between them, and
// its programs. The chosen candidate's programs are the plan's `devices`; another's,
// the planner's own from the order the plan would record for it.
void read_programs(const Field& root, const ReplayPlanOptions& options, ReplayPlan& plan) {
  sim::Schedule schedule = sim::make_schedule(plan.spec, plan.stages, plan.micro_batches);
  place_model_stages(plan, schedule);
  if (!plan.chosen) {
    plan.programs = planner::device_programs(deployed_order(root, options, plan, std::move(schedule)), plan.params);
    return;
  }
  const Field devices = root.at("devices");
  plan.programs = planner::read_device_programs(devices, plan.stages, plan.model_stages());
  const auto problems = planner::validate_programs(plan.programs);
  if (!problems.empty()) devices.fail(fmt::format("the programs are inconsistent: {}", problems.front()));
}

}  // namespace

void place_model_stages(ReplayPlan& plan, const sim::Schedule& schedule) {
  plan.placement.clear();
  plan.channels.clear();
  for (int j = 0; j < schedule.num_model_stages(); ++j) plan.placement.push_back(schedule.stage_of(j));
  auto add = [&](int from, int to) {
    if (from != to && plan.channel(from, to) < 0) plan.channels.push_back({from, to});
  };
  for (int j = 0; j + 1 < schedule.num_model_stages(); ++j) add(plan.stage_of(j), plan.stage_of(j + 1));
  for (int j = 0; j + 1 < schedule.num_model_stages(); ++j) add(plan.stage_of(j + 1), plan.stage_of(j));
}

int ReplayPlan::channel(int from, int to) const {
  for (std::size_t c = 0; c < channels.size(); ++c)
    if (channels[c].from == from && channels[c].to == to) return static_cast<int>(c);
  return -1;
}

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
  read_programs(root, options, plan);
  for (int s = 0; s < plan.stages; ++s) index_program(plan, s);  // every entry in its place
  return plan;
}

namespace {

// Indexes one stage's program: first its compute ops, then each send and recv attached
// to the op that produces or consumes it, then the checks that every op has the
// messages (or the local op) it needs and that they are issued in an order that can run.
class Indexer {
 public:
  Indexer(const ReplayPlan& plan, int stage)
      : plan_(plan),
        stage_(stage),
        entries_(plan.programs.at(static_cast<std::size_t>(stage)).entries),
        op_at_(4 * static_cast<std::size_t>(plan.model_stages()) * static_cast<std::size_t>(plan.micro_batches), -1),
        positions_(plan.channels.size(), 0) {
    p_.stage = stage;
    for (int j = 0; j < plan.model_stages(); ++j)
      if (plan.stage_of(j) == stage) locals_.push_back(j);
  }

  IndexedProgram run() {
    for (std::size_t i = 0; i < entries_.size(); ++i)
      if (is_compute(entries_[i])) add_compute(i);
    check_every_op_present();
    for (std::size_t i = 0; i < entries_.size(); ++i)
      if (!is_compute(entries_[i])) add_message(i);
    for (std::size_t c = 0; c < p_.compute.size(); ++c) check_linked(p_.compute[c], static_cast<int>(c));
    check_issue_order();
    return std::move(p_);
  }

 private:
  static bool is_compute(const planner::ProgramEntry& e) { return planner::compute_op(e).has_value(); }

  std::string where(std::size_t i) const {
    return fmt::format("{}: devices[{}].program[{}]", plan_.source, stage_, i);
  }
  // The position in p_.compute of the op (j, m, phase), -1: not listed.
  int& op_at(int j, int m, sim::Phase ph) {
    return op_at_[(static_cast<std::size_t>(j) * static_cast<std::size_t>(plan_.micro_batches) +
                   static_cast<std::size_t>(m)) * 4 + static_cast<std::size_t>(ph)];
  }
  // The backward op of (j, m) that sends the gradient: B, or I with a split backward.
  int backward_at(int j, int m) {
    const int b = op_at(j, m, sim::Phase::Backward);
    return b >= 0 ? b : op_at(j, m, sim::Phase::BackwardInput);
  }
  std::string op_label(int j, int m, sim::Phase ph) const {
    return fmt::format("{} of model stage {}", sim::op_name({ph, m, j}), j);
  }
  void check_micro_batch(std::size_t i) const {
    if (entries_[i].micro_batch >= plan_.micro_batches)
      throw InputError(fmt::format("{}: micro-batch {} does not exist (M = {})", where(i), entries_[i].micro_batch,
                                   plan_.micro_batches));
  }
  void check_here(std::size_t i, int j) const {
    if (plan_.stage_of(j) != stage_)
      throw InputError(fmt::format("{}: model stage {} runs on stage {}, not on stage {}", where(i), j,
                                   plan_.stage_of(j), stage_));
  }

  void add_compute(std::size_t i) {
    const auto& e = entries_[i];
    check_micro_batch(i);
    check_here(i, e.model_stage);
    const sim::Phase ph = planner::compute_op(e)->phase;
    int& slot = op_at(e.model_stage, e.micro_batch, ph);
    if (slot >= 0) throw InputError(fmt::format("{}: {} is repeated", where(i), op_label(e.model_stage, e.micro_batch, ph)));
    slot = static_cast<int>(p_.compute.size());
    const sim::StageParams& par = plan_.params[static_cast<std::size_t>(e.model_stage)];
    const double durations[4] = {par.fwd, par.bwd, par.bwd_input, par.bwd_weight};
    p_.compute.push_back({{ph, e.micro_batch, e.model_stage}, durations[static_cast<int>(ph)]});
  }

  // Every (model stage, micro-batch) of this stage has its F, and either a B or an I and a W.
  void check_every_op_present() {
    for (const int j : locals_)
      for (int m = 0; m < plan_.micro_batches; ++m) {
        const bool f = op_at(j, m, sim::Phase::Forward) >= 0, b = op_at(j, m, sim::Phase::Backward) >= 0;
        const bool in = op_at(j, m, sim::Phase::BackwardInput) >= 0, w = op_at(j, m, sim::Phase::BackwardWeight) >= 0;
        std::string_view missing;
        if (!f) {
          missing = "F";
        } else if (b && (in || w)) {
          throw InputError(fmt::format("{}: devices[{}]: micro-batch {} of model stage {} has both a B and a split "
                                       "backward",
                                       plan_.source, stage_, m, j));
        } else if (!b && !in && !w) {
          missing = "B (or I and W)";
        } else if (!b && in != w) {
          missing = in ? "W" : "I";
        }
        if (!missing.empty())
          throw InputError(fmt::format("{}: devices[{}]: {}{} of model stage {} is missing", plan_.source, stage_,
                                       missing, m, j));
      }
  }

  // The tag the planner gives the message model stage j sends for micro-batch m
  // (docs/model.md §11): 2 (m v + l) + gradient, l its index among its stage's v.
  int tag_of(int j, int m, bool gradient) const {
    const int s = plan_.stage_of(j);
    int v = 0, l = 0;
    for (int x = 0; x < plan_.model_stages(); ++x) {
      if (plan_.stage_of(x) != s) continue;
      ++v;
      if (x < j) ++l;
    }
    return 2 * (m * v + l) + (gradient ? 1 : 0);
  }

  // A send carries the output of its model stage to the next (activation) or previous
  // (gradient) one; a recv brings its model stage's input from there. Returns the model
  // stage that sends it, checked with the peer and the tag.
  int route(std::size_t i, bool gradient) const {
    const auto& e = entries_[i];
    const bool send = e.kind == Kind::Send;
    check_here(i, e.model_stage);
    const int other = send == gradient ? e.model_stage - 1 : e.model_stage + 1;
    const char* what = gradient ? "a gradient" : "an activation";
    if (other < 0 || other >= plan_.model_stages())
      throw InputError(fmt::format("{}: model stage {} {} no {}", where(i), e.model_stage,
                                   send ? "sends" : "receives", what));
    const int sender = send ? e.model_stage : other;
    if (e.peer != plan_.stage_of(other) || e.peer == stage_)
      throw InputError(fmt::format("{}: peer {} is not the stage model stage {} runs on ({}), which {} {} {}", where(i),
                                   e.peer, other, plan_.stage_of(other), send ? "receives" : "sends", what,
                                   send ? "from here" : "to here"));
    if (e.tag != tag_of(sender, e.micro_batch, gradient))
      throw InputError(fmt::format("{}: tag {} is not {}, the tag of {} of model stage {} for micro-batch {}", where(i),
                                   e.tag, tag_of(sender, e.micro_batch, gradient), what, sender, e.micro_batch));
    return sender;
  }

  // The size of a send or recv: the sender's message in the plan's pipeline at b.
  void check_size(std::size_t i, int sender, bool gradient) const {
    const auto& e = entries_[i];
    const auto& par = plan_.params[static_cast<std::size_t>(sender)];
    const double expect_bytes = gradient ? par.gout : par.out;
    if (std::llround(e.bytes) != std::llround(expect_bytes))
      throw InputError(fmt::format("{}: bytes {} is not the pipeline's {} at b = {}", where(i), e.bytes, expect_bytes,
                                   plan_.micro_batch_size));
    if (e.bytes > static_cast<double>(std::numeric_limits<int>::max()))
      throw InputError(fmt::format("{}: bytes {} is more than one MPI/NCCL message of this harness carries (2 GiB)",
                                   where(i), e.bytes));
  }

  // F(j, m) sends the activation and consumes the one from j - 1; the backward of (j, m)
  // (B, or I) the gradients.
  void add_message(std::size_t i) {
    check_micro_batch(i);
    const auto& e = entries_[i];
    const bool send = e.kind == Kind::Send, gradient = e.tag % 2 == 1;
    const int sender = route(i, gradient);
    const int j = e.model_stage, m = e.micro_batch;
    const int c = gradient ? backward_at(j, m) : op_at(j, m, sim::Phase::Forward);
    if (c < 0) throw InputError(fmt::format("{}: no op of model stage {} {} it", where(i), j, send ? "sends" : "consumes"));
    IndexedProgram::Compute& op = p_.compute[static_cast<std::size_t>(c)];
    int& link = send ? op.output : op.input;
    if (link >= 0)
      throw InputError(fmt::format("{}: {} {} twice", where(i), send ? "sends the output of" : "receives the input of",
                                   op_label(j, m, op.op.phase)));
    check_size(i, sender, gradient);
    IndexedProgram::Message msg;
    msg.peer = e.peer;
    msg.tag = e.tag;
    msg.micro_batch = m;
    msg.model_stage = sender;
    msg.gradient = gradient;
    msg.bytes = static_cast<std::size_t>(std::llround(e.bytes));
    msg.channel = send ? plan_.channel(stage_, e.peer) : plan_.channel(e.peer, stage_);
    if (msg.channel < 0)
      throw InputError(fmt::format("{}: stages {} and {} exchange no messages in this schedule", where(i), stage_, e.peer));
    msg.position = positions_[static_cast<std::size_t>(msg.channel)]++;
    msg.compute = c;
    auto& list = send ? p_.sends : p_.recvs;
    link = static_cast<int>(list.size());
    list.push_back(msg);
  }

  // Compute op c (of model stage j) has the recv of its input when that is made on
  // another stage, and otherwise comes after the op that makes it; it has the send of
  // its output when that goes to another stage.
  void check_linked(const IndexedProgram::Compute& op, int c) {
    const int j = op.op.model_stage, m = op.op.micro_batch, J = plan_.model_stages();
    const sim::Phase ph = op.op.phase;
    const bool fwd = ph == sim::Phase::Forward, w = ph == sim::Phase::BackwardWeight;
    const int from = fwd ? j - 1 : w ? j : j + 1 < J ? j + 1 : j;  // whose op makes the input; -1: none
    const int to = fwd ? (j + 1 < J ? j + 1 : -1) : w ? -1 : j - 1;  // who takes the output; -1: nobody
    const std::string name = op_label(j, m, ph);
    if (from >= 0 && plan_.stage_of(from) != stage_ && op.input < 0)
      throw InputError(fmt::format("{}: devices[{}]: {} has no recv of its input", plan_.source, stage_, name));
    if (from >= 0 && plan_.stage_of(from) == stage_) {
      const int producer = w ? op_at(j, m, sim::Phase::BackwardInput)
                           : fwd ? op_at(from, m, sim::Phase::Forward)
                           : from == j ? op_at(j, m, sim::Phase::Forward)
                                       : backward_at(from, m);
      if (producer < 0 || producer > c)
        throw InputError(fmt::format("{}: devices[{}]: {} comes before the op on this stage that makes its input",
                                     plan_.source, stage_, name));
    }
    if (to >= 0 && plan_.stage_of(to) != stage_ && op.output < 0 && (fwd || backward_at(j, m) == c))
      throw InputError(fmt::format("{}: devices[{}]: {} has no send of its output", plan_.source, stage_, name));
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
  std::vector<int> locals_;      // the model stages this stage runs
  std::vector<int> op_at_;       // [(j M + m) 4 + phase]: index into p_.compute, -1: not listed
  std::vector<int> positions_;   // per channel: its messages indexed so far
  IndexedProgram p_;
};

}  // namespace

IndexedProgram index_program(const ReplayPlan& plan, int stage) { return Indexer(plan, stage).run(); }

std::vector<int> weight_ops(const IndexedProgram& p) {
  std::map<std::pair<int, int>, int> w_at;  // (model stage, micro-batch) -> its W
  for (std::size_t c = 0; c < p.compute.size(); ++c)
    if (p.compute[c].op.phase == sim::Phase::BackwardWeight)
      w_at[{p.compute[c].op.model_stage, p.compute[c].op.micro_batch}] = static_cast<int>(c);
  std::vector<int> out(p.compute.size(), -1);
  for (std::size_t c = 0; c < p.compute.size(); ++c) {
    const sim::Op& op = p.compute[c].op;
    if (op.phase != sim::Phase::BackwardInput) continue;
    if (const auto it = w_at.find({op.model_stage, op.micro_batch}); it != w_at.end()) out[c] = it->second;
  }
  return out;
}

}  // namespace adagrouper::calib
