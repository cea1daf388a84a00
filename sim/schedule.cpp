// The schedule vocabulary: op names, schedule specs and their labels, and the check
// that an order is complete.
#include "schedule.h"

#include <algorithm>

#include <fmt/format.h>

#include "error.h"

namespace adagrouper::sim {

char phase_letter(Phase phase) {
  constexpr char kLetters[] = {'F', 'B', 'I', 'W'};
  return kLetters[static_cast<int>(phase)];
}

std::optional<Phase> phase_of_letter(char letter) {
  switch (letter) {
    case 'F': return Phase::Forward;
    case 'B': return Phase::Backward;
    case 'I': return Phase::BackwardInput;
    case 'W': return Phase::BackwardWeight;
    default: return std::nullopt;
  }
}

std::string op_name(const Op& op) { return fmt::format("{}{}", phase_letter(op.phase), op.micro_batch); }

std::string action_name(const Op& op) {
  return fmt::format("{}{}{}", op.model_stage, phase_letter(op.phase), op.micro_batch);
}

ScheduleSpec ScheduleSpec::named(std::string_view family, std::optional<int> k) {
  ScheduleSpec s;
  s.family = std::string(family);
  s.k = k;
  if (const ScheduleFamily* f = find_schedule_family(family); f && f->virtual_stages > 1)
    s.virtual_stages = f->virtual_stages;
  return s;
}

ScheduleSpec ScheduleSpec::custom() { return named("custom"); }

namespace {

// The parameters that are not their default, each as " name=value" (k with `k_eq`).
std::string parameters(const ScheduleSpec& s, std::string_view k_eq) {
  std::string out;
  if (s.k) out += fmt::format(" k{}{}", k_eq, *s.k);
  const ScheduleFamily* f = find_schedule_family(s.family);
  if (s.virtual_stages != 1 && !(f && f->virtual_stages == s.virtual_stages))
    out += fmt::format(" v={}", s.virtual_stages);
  if (s.split_backward) out += " split-backward";
  if (s.w_fill == WFill::Dynamic) out += " w-fill=dynamic";
  if (s.max_pending_w) out += fmt::format(" max-pending-w={}", *s.max_pending_w);
  return out;
}

}  // namespace

std::string ScheduleSpec::label() const { return family + parameters(*this, "="); }

std::string ScheduleSpec::label(int micro_batch_size) const {
  return fmt::format("{} b={}", label(), micro_batch_size);
}

std::string ScheduleSpec::prose() const { return family + parameters(*this, " = "); }

namespace {

// Which ops of one (model stage, micro-batch) a stage lists.
enum Seen : std::uint8_t { kF = 1, kB = 2, kI = 4, kW = 8 };

std::uint8_t seen_bit(Phase ph) { return static_cast<std::uint8_t>(1u << static_cast<int>(ph)); }

// Names an op in messages: "F3" with one model stage per stage, "2F3" otherwise.
std::string name_in(const Schedule& sch, const Op& op) {
  return sch.placement.empty() ? op_name(op) : action_name(op);
}

void check_op(const Schedule& sch, int s, std::size_t i, const Op& op, int M, const std::string& source) {
  const int J = sch.num_model_stages();
  if (op.micro_batch < 0 || op.micro_batch >= M)
    throw InputError(fmt::format("{}: stages[{}][{}]: micro-batch {} does not exist (M = {})", source, s, i,
                                 op.micro_batch, M));
  if (op.model_stage < 0 || op.model_stage >= J)
    throw InputError(fmt::format("{}: stages[{}][{}]: model stage {} does not exist (there are {})", source, s, i,
                                 op.model_stage, J));
  if (sch.stage_of(op.model_stage) != s)
    throw InputError(fmt::format("{}: stages[{}][{}]: {} belongs to model stage {}, which runs on stage {}", source,
                                 s, i, name_in(sch, op), op.model_stage, sch.stage_of(op.model_stage)));
}

// What (model stage j, micro-batch m) must have listed: F, and B or I (+ W unless filled).
void check_complete(const Schedule& sch, int j, int m, std::uint8_t seen, const std::string& source) {
  const int s = sch.stage_of(j);
  auto misses = [&](Phase ph) {
    throw InputError(fmt::format("{}: stages[{}]: misses {}", source, s, name_in(sch, {ph, m, j})));
  };
  if (!(seen & kF)) misses(Phase::Forward);
  if ((seen & kB) && (seen & (kI | kW)))
    throw InputError(fmt::format("{}: stages[{}]: lists {} and also {} or {}", source, s,
                                 name_in(sch, {Phase::Backward, m, j}), name_in(sch, {Phase::BackwardInput, m, j}),
                                 name_in(sch, {Phase::BackwardWeight, m, j})));
  if (seen & kB) return;
  if (!(seen & (kI | kW))) misses(Phase::Backward);
  if (!(seen & kI)) misses(Phase::BackwardInput);
  const bool filled = sch.spec.w_fill == WFill::Dynamic;
  if (filled && (seen & kW))
    throw InputError(fmt::format("{}: stages[{}]: lists {}, but W ops are placed by dynamic W fill", source, s,
                                 name_in(sch, {Phase::BackwardWeight, m, j})));
  if (!filled && !(seen & kW)) misses(Phase::BackwardWeight);
}

}  // namespace

void normalize_schedule(Schedule& sch, int J, int M, const std::string& source) {
  for (int s = 0; s < sch.num_stages(); ++s)
    for (Op& op : sch.stages[s])
      if (op.model_stage < 0) {
        if (!sch.placement.empty())
          throw InputError(fmt::format("{}: stages[{}]: {} names no model stage, and stages run several", source, s,
                                       op_name(op)));
        op.model_stage = s;
      }
  validate_schedule(sch, sch.placement.empty() ? J : sch.num_stages(), M, source);
}

void validate_schedule(const Schedule& sch, int S, int M, const std::string& source) {
  if (sch.num_stages() != S)
    throw InputError(fmt::format("{}: stages: lists {} stages, the pipeline has {}", source, sch.num_stages(), S));
  const int J = sch.num_model_stages();
  const bool line = sch.placement.empty();
  // The ops each (model stage, micro-batch) must list, as check_complete accepts them.
  const std::uint8_t split = sch.spec.w_fill == WFill::Dynamic ? kF | kI : kF | kI | kW;
  std::vector<std::uint8_t> seen(static_cast<std::size_t>(J) * M);
  for (int s = 0; s < S; ++s) {
    for (std::size_t i = 0; i < sch.stages[s].size(); ++i) {
      Op op = sch.stages[s][i];
      if (op.model_stage < 0 && line) op.model_stage = s;
      const bool placed = static_cast<unsigned>(op.micro_batch) < static_cast<unsigned>(M) &&
                          static_cast<unsigned>(op.model_stage) < static_cast<unsigned>(J) &&
                          (line ? op.model_stage : sch.placement[op.model_stage]) == s;
      if (!placed) check_op(sch, s, i, op, M, source);  // says what is wrong
      auto& f = seen[static_cast<std::size_t>(op.model_stage) * M + op.micro_batch];
      if (f & seen_bit(op.phase))
        throw InputError(fmt::format("{}: stages[{}][{}]: {} is repeated", source, s, i, name_in(sch, op)));
      f |= seen_bit(op.phase);
    }
    for (int j = 0; j < J; ++j) {
      if (sch.stage_of(j) != s) continue;
      const std::uint8_t* listed = &seen[static_cast<std::size_t>(j) * M];
      for (int m = 0; m < M; ++m)
        if (listed[m] != (kF | kB) && listed[m] != split) check_complete(sch, j, m, listed[m], source);
    }
  }
}

}  // namespace adagrouper::sim
