// The outputs of `plan`: the adagrouper.plan/2 document and the table of candidates;
// and the reader of its device programs.
#include <algorithm>
#include <iterator>
#include <stdexcept>
#include <string_view>
#include <utility>

#include <fmt/format.h>

#include "json_util.h"
#include "planner.h"

namespace adagrouper::planner {

namespace {

// What names the candidate's schedule: its family, k and how it runs its model stages and
// backwards.
void schedule_fields(const Candidate& c, nlohmann::ordered_json& j) {
  j["schedule"] = c.spec.family;
  j["k"] = c.k;
  j["virtual_stages"] = c.spec.virtual_stages;
  sim::backward_fields_json(c.spec, j);
}

nlohmann::ordered_json candidate_json(const Candidate& c) {
  nlohmann::ordered_json j;
  schedule_fields(c, j);
  j["micro_batch_size"] = c.micro_batch_size;
  j["micro_batches"] = c.micro_batches;
  j["baseline"] = c.baseline;
  if (c.evaluated) {
    j["predicted_iteration_time_s"] = c.predicted_iteration_time_s;
    if (c.deployed_iteration_time_s) j["deployed_iteration_time_s"] = *c.deployed_iteration_time_s;
    j["throughput_samples_per_s"] = c.throughput_samples_per_s;
  } else {
    j["predicted_iteration_time_s"] = nullptr;
  }
  if (c.status == Status::Refused) {
    j["peak_memory_bytes"] = nullptr;
  } else {
    j["peak_memory_bytes"] = c.model_memory;
  }
  if (c.evaluated) j["simulated_peak_memory_bytes"] = c.simulated_memory;
  j["status"] = to_string(c.status);
  j["reason"] = c.reason;
  return j;
}

// The chosen plan: its candidate's figures and the op order of every stage.
nlohmann::ordered_json chosen_json(const PlanResult& plan) {
  const Candidate& win = plan.candidates[plan.chosen];
  nlohmann::ordered_json chosen;
  schedule_fields(win, chosen);
  chosen["micro_batch_size"] = win.micro_batch_size;
  chosen["micro_batches"] = win.micro_batches;
  chosen["predicted_iteration_time_s"] = win.predicted_iteration_time_s;
  if (win.deployed_iteration_time_s) chosen["deployed_iteration_time_s"] = *win.deployed_iteration_time_s;
  chosen["throughput_samples_per_s"] = win.throughput_samples_per_s;
  chosen["peak_memory_bytes"] = win.model_memory;
  chosen["simulated_peak_memory_bytes"] = win.simulated_memory;
  if (plan.one_f_one_b) {
    chosen["speedup_over_1f1b"] = plan.speedup_over_1f1b();
  } else {
    chosen["speedup_over_1f1b"] = nullptr;
  }
  chosen["status"] = to_string(win.status);
  chosen["reason"] = win.reason;
  // "F3" with one model stage per stage, "2F3" (model stage first) with several.
  const sim::Schedule& sch = plan.chosen_schedule;
  chosen["order"] = nlohmann::ordered_json::array();
  for (const auto& ops : sch.stages) {
    auto names = nlohmann::ordered_json::array();
    for (const auto& op : ops) names.push_back(sch.placement.empty() ? sim::op_name(op) : sim::action_name(op));
    chosen["order"].push_back(std::move(names));
  }
  return chosen;
}

nlohmann::ordered_json entry_json(const ProgramEntry& e) {
  nlohmann::ordered_json o;
  o["op"] = program_entry_name(e.kind);
  if (e.kind == ProgramEntry::Kind::Send || e.kind == ProgramEntry::Kind::Recv) {
    o["stream"] = program_entry_name(e.kind);
    o["peer"] = e.peer;
    o["micro_batch"] = e.micro_batch;
    o["model_stage"] = e.model_stage;
    o["bytes"] = e.bytes;
    o["tag"] = e.tag;
    o["communicator"] = e.communicator;
  } else {
    o["micro_batch"] = e.micro_batch;
    o["model_stage"] = e.model_stage;
  }
  return o;
}

nlohmann::ordered_json devices_json(const std::vector<DeviceProgram>& programs) {
  auto devs = nlohmann::ordered_json::array();
  for (const auto& p : programs) {
    nlohmann::ordered_json d;
    d["stage"] = p.stage;
    auto& prog = d["program"] = nlohmann::ordered_json::array();
    for (const auto& e : p.entries) prog.push_back(entry_json(e));
    devs.push_back(std::move(d));
  }
  return devs;
}

// One communicator per ordered pair of stages (planner::communicators).
nlohmann::ordered_json communicators_json(const sim::Schedule& schedule) {
  auto comms = nlohmann::ordered_json::array();
  for (const Communicator& c : communicators(schedule)) {
    const char* carries = c.activations && c.gradients ? "activations and gradients"
                          : c.gradients               ? "gradients"
                                                      : "activations";
    comms.push_back({{"id", c.id}, {"from", c.from}, {"to", c.to}, {"carries", carries}});
  }
  return comms;
}

// The chosen plan's device programs; throws std::logic_error when they are invalid.
std::vector<DeviceProgram> checked_programs(const PlanResult& plan) {
  auto programs = device_programs(plan.chosen_schedule, plan.chosen_stages);
  const auto problems = validate_programs(programs);
  if (!problems.empty()) {
    std::string all;
    for (const auto& p : problems) all += (all.empty() ? "" : "; ") + p;
    throw std::logic_error("internal error: the chosen plan's device programs are invalid: " + all);
  }
  return programs;
}

}  // namespace

nlohmann::ordered_json plan_json(const PlanResult& plan, const std::vector<InputFile>& inputs) {
  const auto programs = checked_programs(plan);
  nlohmann::ordered_json j;
  j["schema"] = "adagrouper.plan/2";
  j["pipeline"] = plan.pipeline.name;
  j["stages"] = plan.devices;
  j["pipeline_stages"] = plan.pipeline.num_stages();
  j["global_batch_size"] = plan.options.global_batch_size;
  j["memory_limit_bytes"] = plan.options.memory_limit_bytes;
  auto& in = j["inputs"] = nlohmann::ordered_json::array();
  for (const auto& f : inputs) in.push_back({{"role", f.role}, {"path", f.path}, {"sha256", f.sha256}});
  j["evaluation"] = {{"iterations", plan.options.eval_iterations},
                     {"start_time_s", plan.options.eval_start_s},
                     {"rank_by", to_string(plan.options.rank_by)}};
  j["chosen"] = chosen_json(plan);
  auto& cs = j["candidates"] = nlohmann::ordered_json::array();
  for (const auto& c : plan.candidates) cs.push_back(candidate_json(c));
  j["devices"] = devices_json(programs);
  j["communicators"] = communicators_json(plan.chosen_schedule);
  return j;
}

namespace {

// The schedule column of the table: the family and its parameters other than k (the k
// column has it): "kfkb", "zbv", "interleaved-1f1b v=2", "kfkb split-backward w-fill=dynamic".
std::string schedule_column(const Candidate& c) {
  sim::ScheduleSpec spec = c.spec;
  spec.k.reset();
  return spec.label();
}

// For a chosen candidate with dynamic W fill, what a runtime that executes its programs
// runs; and the choice of the other --rank-by, when it differs.
std::string deployed_text(const PlanResult& plan) {
  const Candidate& win = plan.candidates[plan.chosen];
  const bool by_deployed = plan.options.rank_by == RankBy::Deployed;
  std::string out;
  // Over one iteration the fixed order is the fill's own run: nothing to say.
  if (win.deployed_iteration_time_s && plan.options.eval_iterations > 1)
    out += fmt::format("Its programs fix the W ops where the first iteration put them: a runtime that executes them "
                       "runs {:.6g} s per iteration ({:+.2f}% against the fill's prediction).\n",
                       *win.deployed_iteration_time_s,
                       100.0 * (*win.deployed_iteration_time_s / win.predicted_iteration_time_s - 1.0));
  if (plan.other_rank_choice) {
    const Candidate& alt = plan.candidates[*plan.other_rank_choice];
    const RankBy other = by_deployed ? RankBy::Predicted : RankBy::Deployed;
    out += fmt::format("--rank-by {} would choose {} with b = {}: {:.6g} s per iteration{}, against {:.6g} s.\n",
                       to_string(other), alt.spec.prose(), alt.micro_batch_size,
                       alt.ranked_time_s(other), by_deployed ? " predicted" : " as deployed",
                       win.ranked_time_s(other));
  }
  return out;
}

}  // namespace

std::string plan_text(const PlanResult& plan) {
  const Candidate& win = plan.candidates[plan.chosen];
  const double gib = 1024.0 * 1024.0 * 1024.0;
  const int J = plan.pipeline.num_stages();
  const std::string model_stages = J == plan.devices ? "" : fmt::format(" ({} model stages)", J);
  std::string out = fmt::format("{}: S={} stages{}, B={}, memory limit {:.2f} GiB per stage\n", plan.pipeline.name,
                                plan.devices, model_stages, plan.options.global_batch_size,
                                plan.options.memory_limit_bytes / gib);
  std::size_t width = 9;
  for (const Candidate& c : plan.candidates) width = std::max(width, schedule_column(c).size());
  // The time column is the one candidates were ranked by.
  const RankBy rank_by = plan.options.rank_by;
  const bool deployed = rank_by == RankBy::Deployed;
  out += fmt::format("  {:<{}} {:>4} {:>5} {:>6} {:>12} {:>13} {:>8}  {}\n", "schedule", width, "k", "b", "M",
                     "peak memory", deployed ? "deployed s" : "iteration s", "vs 1F1B", "status");
  const double base = plan.one_f_one_b ? plan.candidates[*plan.one_f_one_b].predicted_iteration_time_s : 0.0;
  for (std::size_t i = 0; i < plan.candidates.size(); ++i) {
    const Candidate& c = plan.candidates[i];
    const double time = c.ranked_time_s(rank_by);
    const std::string t = c.evaluated ? fmt::format("{:.6g}", time) : "-";
    const std::string sp = c.evaluated && base > 0 ? fmt::format("{:.3f}x", base / time) : "-";
    const std::string mem =
        c.status == Status::Refused ? std::string("-") : fmt::format("{:.2f} GiB", c.peak_model_memory() / gib);
    out += fmt::format("{} {:<{}} {:>4} {:>5} {:>6} {:>12} {:>13} {:>8}  {}\n", i == plan.chosen ? "*" : " ",
                       schedule_column(c), width, c.k, c.micro_batch_size, c.micro_batches, mem, t, sp,
                       to_string(c.status));
  }
  const double win_time = win.ranked_time_s(rank_by);
  std::string why = fmt::format("{} with b = {} is the fastest plan that fits{}: {:.6g} s per iteration",
                                win.spec.prose(), win.micro_batch_size, deployed ? " as deployed" : "", win_time);
  if (plan.one_f_one_b && plan.one_f_one_b != plan.chosen)
    why += fmt::format(", {:.3f}x the throughput of 1F1B", base / win_time);
  why += fmt::format(", peak {:.2f} GiB on stage {}.\n", win.peak_model_memory() / gib, win.peak_stage());
  return out + why + deployed_text(plan);
}

namespace {

using Kind = ProgramEntry::Kind;

constexpr Kind kEntryKinds[] = {Kind::Forward, Kind::Backward, Kind::BackwardInput,
                                Kind::BackwardWeight, Kind::Send, Kind::Recv};

ProgramEntry read_entry(const Field& e, int stage, int model_stages) {
  const std::string op = e.at("op").string();
  const auto* kind = std::find_if(std::begin(kEntryKinds), std::end(kEntryKinds),
                                  [&](Kind k) { return op == program_entry_name(k); });
  if (kind == std::end(kEntryKinds))
    e.at("op").fail(fmt::format(
        "must be forward, backward, backward_input, backward_weight, send or recv, got \"{}\"", op));
  ProgramEntry x{*kind};
  x.micro_batch = e.at("micro_batch").int_in(0, sim::kMaxBatchSize);
  x.model_stage = e.has("model_stage") ? e.at("model_stage").int_in(0, model_stages - 1) : stage;
  if (x.kind == Kind::Send || x.kind == Kind::Recv) {
    if (e.has("stream") && e.at("stream").string() != op)
      e.at("stream").fail(fmt::format("must be \"{}\" (sends and recvs run on their own streams)", op));
    x.peer = e.at("peer").int_in(0, sim::kMaxStages);
    x.bytes = e.at("bytes").number_in(0, sim::kMaxBytes, "the largest byte count an input may give");
    x.tag = e.at("tag").int_in(0);
    x.communicator = e.at("communicator").int_in(0);
  }
  return x;
}

}  // namespace

std::vector<DeviceProgram> read_device_programs(const Field& devices, int stages, int model_stages) {
  devices.require_array();
  if (devices.size() != static_cast<std::size_t>(stages))
    devices.fail(fmt::format("has {} devices, the plan {} stages", devices.size(), stages));
  std::vector<DeviceProgram> programs;
  for (int s = 0; s < stages; ++s) {
    const Field dev = devices.at(static_cast<std::size_t>(s));
    if (dev.at("stage").integer() != s) dev.at("stage").fail(fmt::format("must be {} (devices in stage order)", s));
    const Field program = dev.at("program");
    program.require_array();
    DeviceProgram p;
    p.stage = s;
    for (std::size_t i = 0; i < program.size(); ++i) p.entries.push_back(read_entry(program.at(i), s, model_stages));
    programs.push_back(std::move(p));
  }
  return programs;
}

}  // namespace adagrouper::planner
