// Building and validating a scenario.
#include "scenario.h"

#include <algorithm>
#include <cmath>
#include <tuple>

#include <fmt/format.h>

#include "error.h"

namespace adagrouper::sim {

Scenario make_scenario(const Pipeline& pipeline, Network network, Schedule schedule, int micro_batch_size,
                       int iterations) {
  Scenario sc;
  sc.pipeline_name = pipeline.name;
  sc.model_stages = pipeline.at(micro_batch_size);
  sc.global_batch_size = pipeline.global_batch_size;
  sc.micro_batch_size = micro_batch_size;
  if (iterations < 1) throw InputError(fmt::format("--iterations: must be >= 1, got {}", iterations));
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

void set_op_timings(Scenario& sc, std::vector<OpTiming> timings, const std::string& source) {
  const int S = sc.num_model_stages(), M = sc.micro_batches();
  auto where = [&](const OpTiming& t) { return t.line > 0 ? fmt::format("{}:{}", source, t.line) : source; };
  for (const OpTiming& t : timings) {
    if (t.iteration < 0) throw InputError(fmt::format("{}: iteration {} is negative", where(t), t.iteration));
    if (t.stage < 0 || t.stage >= S)
      throw InputError(fmt::format("{}: stage {} does not exist (the pipeline has {} {}stages)", where(t), t.stage, S,
                                   S == sc.num_stages() ? "" : "model "));
    if (t.micro_batch < 0 || t.micro_batch >= M)
      throw InputError(fmt::format("{}: micro_batch {} does not exist (M = {})", where(t), t.micro_batch, M));
    if (!(t.duration_s >= 0) || !std::isfinite(t.duration_s))
      throw InputError(fmt::format("{}: duration_s must be a finite number >= 0, got {}", where(t), t.duration_s));
  }
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
