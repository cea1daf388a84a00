// The schedule vocabulary: op names, schedule specs and their labels, and the check
// that an order is complete.
#include "schedule.h"

#include <algorithm>

#include <fmt/format.h>

#include "error.h"

namespace adagrouper::sim {

std::string op_name(const Op& op) {
  return fmt::format("{}{}", op.phase == Phase::Forward ? 'F' : 'B', op.micro_batch);
}

ScheduleSpec ScheduleSpec::named(std::string_view family, std::optional<int> k) {
  ScheduleSpec s;
  s.family = std::string(family);
  s.k = k;
  return s;
}

ScheduleSpec ScheduleSpec::custom() { return named("custom"); }

std::string ScheduleSpec::label() const { return k ? fmt::format("{} k={}", family, *k) : family; }

std::string ScheduleSpec::label(int micro_batch_size) const {
  return fmt::format("{} b={}", label(), micro_batch_size);
}

std::string ScheduleSpec::prose() const { return k ? fmt::format("{} k = {}", family, *k) : family; }

void validate_schedule(const Schedule& sch, int S, int M, const std::string& source) {
  if (sch.num_stages() != S)
    throw InputError(fmt::format("{}: stages: lists {} stages, the pipeline has {}", source, sch.num_stages(), S));
  std::vector<std::uint8_t> seen(2 * static_cast<std::size_t>(M));
  for (int s = 0; s < S; ++s) {
    std::fill(seen.begin(), seen.end(), 0);
    for (std::size_t i = 0; i < sch.stages[s].size(); ++i) {
      const Op& op = sch.stages[s][i];
      if (op.micro_batch < 0 || op.micro_batch >= M)
        throw InputError(fmt::format("{}: stages[{}][{}]: micro-batch {} does not exist (M = {})", source, s, i,
                                     op.micro_batch, M));
      auto& f = seen[2 * op.micro_batch + (op.phase == Phase::Backward)];
      if (f) throw InputError(fmt::format("{}: stages[{}][{}]: {} is repeated", source, s, i, op_name(op)));
      f = 1;
    }
    for (int m = 0; m < M; ++m)
      for (Phase ph : {Phase::Forward, Phase::Backward})
        if (!seen[2 * m + (ph == Phase::Backward)])
          throw InputError(fmt::format("{}: stages[{}]: misses {}", source, s, op_name({ph, m})));
  }
}

}  // namespace adagrouper::sim
