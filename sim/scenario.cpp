// Building and validating a scenario.
#include "scenario.h"

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <string>
#include <tuple>
#include <vector>

#include <fmt/format.h>

#include "error.h"
#include "rate.h"

namespace adagrouper::sim {

Scenario make_scenario(const Pipeline& pipeline, Network network, Schedule schedule, int micro_batch_size,
                       int iterations) {
  Scenario sc;
  sc.pipeline_name = pipeline.name;
  sc.model_stages = pipeline.at(micro_batch_size);
  sc.global_batch_size = pipeline.global_batch_size;
  sc.micro_batch_size = micro_batch_size;
  if (iterations < 1 || iterations > kMaxIterations)
    throw InputError(fmt::format("--iterations: must be in 1..{}, got {}", kMaxIterations, iterations));
  sc.iterations = iterations;
  sc.memory_limit_bytes = pipeline.memory_limit_bytes;
  const std::string source =
      schedule.spec.is_custom() ? std::string("schedule file") : "--schedule " + schedule.name();
  const int J = pipeline.num_stages();
  if (schedule.placement.empty()) {
    if (network.num_stages() != J)
      throw InputError(fmt::format("{}: describes {} stages, {} has {}", network.source, network.num_stages(),
                                   pipeline.source, J));
  } else {
    if (schedule.num_model_stages() != J)
      throw InputError(fmt::format("{}: runs {} model stages ({} stages x {}), {} has {}", source,
                                   schedule.num_model_stages(), schedule.num_stages(),
                                   schedule.num_model_stages() / std::max(1, schedule.num_stages()), pipeline.source, J));
    if (network.num_stages() != schedule.num_stages())
      throw InputError(fmt::format("{}: describes {} stages, the schedule runs on {}", network.source,
                                   network.num_stages(), schedule.num_stages()));
  }
  normalize_schedule(schedule, J, sc.micro_batches(), source);
  sc.network = std::move(network);
  sc.schedule = std::move(schedule);
  return sc;
}

namespace {

// For every (model stage, micro-batch), the phases the schedule runs as bits (1 << phase);
// W runs wherever I does (dynamic W fill takes it out of the orders).
std::vector<std::uint8_t> phases_run(const Scenario& sc) {
  const std::size_t M = static_cast<std::size_t>(sc.micro_batches());
  std::vector<std::uint8_t> run(static_cast<std::size_t>(sc.num_model_stages()) * M, 0);
  for (std::size_t s = 0; s < sc.schedule.stages.size(); ++s)
    for (const Op& op : sc.schedule.stages[s]) {
      const std::size_t j = op.model_stage < 0 ? s : static_cast<std::size_t>(op.model_stage);
      if (j * M + static_cast<std::size_t>(op.micro_batch) >= run.size()) continue;  // not a valid op: not ours to report
      std::uint8_t& bits = run[j * M + static_cast<std::size_t>(op.micro_batch)];
      bits |= static_cast<std::uint8_t>(1u << static_cast<int>(op.phase));
      if (op.phase == Phase::BackwardInput) bits |= 1u << static_cast<int>(Phase::BackwardWeight);
    }
  return run;
}

// Why a timing cannot apply to this scenario, or empty.
std::string timing_error(const Scenario& sc, const OpTiming& t, const std::vector<std::uint8_t>& run) {
  const int S = sc.num_model_stages(), M = sc.micro_batches();
  if (t.iteration < 0) return fmt::format("iteration {} is negative", t.iteration);
  if (t.stage < 0 || t.stage >= S)
    return fmt::format("stage {} does not exist (the pipeline has {} {}stages)", t.stage, S,
                       S == sc.num_stages() ? "" : "model ");
  if (t.micro_batch < 0 || t.micro_batch >= M)
    return fmt::format("micro_batch {} does not exist (M = {})", t.micro_batch, M);
  if (!(t.duration_s >= 0) || !std::isfinite(t.duration_s))
    return fmt::format("duration_s must be a finite number >= 0, got {}", t.duration_s);
  if (const std::string e = time_error(t.duration_s); !e.empty()) return "duration_s: " + e;
  const std::uint8_t bits = run[static_cast<std::size_t>(t.stage) * M + static_cast<std::size_t>(t.micro_batch)];
  if (!(bits & (1u << static_cast<int>(t.phase))))
    return fmt::format("{} of stage {} does not run in this schedule (its backward is {})",
                       op_name({t.phase, t.micro_batch}), t.stage,
                       bits & (1u << static_cast<int>(Phase::Backward)) ? "B" : "I and W");
  return {};
}

}  // namespace

void set_op_timings(Scenario& sc, std::vector<OpTiming> timings, const std::string& source) {
  auto where = [&](const OpTiming& t) { return t.line > 0 ? fmt::format("{}:{}", source, t.line) : source; };
  const std::vector<std::uint8_t> run = phases_run(sc);
  for (const OpTiming& t : timings)
    if (const std::string e = timing_error(sc, t, run); !e.empty())
      throw InputError(fmt::format("{}: {}", where(t), e));
  auto key = [](const OpTiming& t) { return std::tuple(t.iteration, t.stage, t.micro_batch, t.phase); };
  std::stable_sort(timings.begin(), timings.end(),
                   [&](const OpTiming& a, const OpTiming& b) { return key(a) < key(b); });
  for (std::size_t i = 1; i < timings.size(); ++i)
    if (key(timings[i]) == key(timings[i - 1]))
      throw InputError(fmt::format("{}: {} of stage {} in iteration {} is listed twice (also on line {})",
                                   where(timings[i]), op_name({timings[i].phase, timings[i].micro_batch}),
                                   timings[i].stage, timings[i].iteration, timings[i - 1].line));
  sc.op_timings = std::move(timings);
}

}  // namespace adagrouper::sim
