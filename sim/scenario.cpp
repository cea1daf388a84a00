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

// Why an entry naming (iteration, model stage, micro-batch) and a time in seconds
// (`what`) cannot apply to this scenario, or empty.
std::string entry_error(const Scenario& sc, int iteration, int stage, int micro_batch, const char* what, double v) {
  const int S = sc.num_model_stages(), M = sc.micro_batches();
  if (iteration < 0) return fmt::format("iteration {} is negative", iteration);
  if (stage < 0 || stage >= S)
    return fmt::format("stage {} does not exist (the pipeline has {} {}stages)", stage, S,
                       S == sc.num_stages() ? "" : "model ");
  if (micro_batch < 0 || micro_batch >= M) return fmt::format("micro_batch {} does not exist (M = {})", micro_batch, M);
  if (!(v >= 0) || !std::isfinite(v)) return fmt::format("{} must be a finite number >= 0, got {}", what, v);
  if (const std::string e = time_error(v); !e.empty()) return fmt::format("{}: {}", what, e);
  return {};
}

// Why a timing cannot apply to this scenario, or empty.
std::string timing_error(const Scenario& sc, const OpTiming& t, const std::vector<std::uint8_t>& run) {
  if (std::string e = entry_error(sc, t.iteration, t.stage, t.micro_batch, "duration_s", t.duration_s); !e.empty())
    return e;
  const std::uint8_t bits = run[static_cast<std::size_t>(t.stage) * sc.micro_batches() +
                                static_cast<std::size_t>(t.micro_batch)];
  if (!(bits & (1u << static_cast<int>(t.phase))))
    return fmt::format("{} of stage {} does not run in this schedule (its backward is {})",
                       op_name({t.phase, t.micro_batch}), t.stage,
                       bits & (1u << static_cast<int>(Phase::Backward)) ? "B" : "I and W");
  return {};
}

// Why a message timing cannot apply to this scenario, or empty.
std::string message_timing_error(const Scenario& sc, const MessageTiming& t) {
  if (std::string e = entry_error(sc, t.iteration, t.stage, t.micro_batch, "latency_s", t.latency_s); !e.empty())
    return e;
  if (t.phase != Phase::Forward && t.phase != Phase::Backward)
    return fmt::format("phase must be F (the activation message) or B (the gradient message), got {}",
                       phase_letter(t.phase));
  if (t.phase == Phase::Forward && t.stage == sc.num_model_stages() - 1)
    return fmt::format("stage {} is the last and sends no activation message", t.stage);
  if (t.phase == Phase::Backward && t.stage == 0) return "stage 0 is the first and sends no gradient message";
  return {};
}

// Checks every entry with `error`, sorts them by (iteration, stage, micro-batch, phase)
// and refuses one listed twice; `kind` names what an entry times ("B1", "the gradient
// message of B1").
template <class Entry, class Error, class Kind>
void check_and_sort(std::vector<Entry>& entries, const std::string& source, Error error, Kind kind) {
  auto where = [&](const Entry& t) { return t.line > 0 ? fmt::format("{}:{}", source, t.line) : source; };
  for (const Entry& t : entries)
    if (const std::string e = error(t); !e.empty()) throw InputError(fmt::format("{}: {}", where(t), e));
  auto key = [](const Entry& t) { return std::tuple(t.iteration, t.stage, t.micro_batch, t.phase); };
  std::stable_sort(entries.begin(), entries.end(), [&](const Entry& a, const Entry& b) { return key(a) < key(b); });
  for (std::size_t i = 1; i < entries.size(); ++i)
    if (key(entries[i]) == key(entries[i - 1]))
      throw InputError(fmt::format("{}: {} of stage {} in iteration {} is listed twice (also on line {})",
                                   where(entries[i]), kind(entries[i]), entries[i].stage, entries[i].iteration,
                                   entries[i - 1].line));
}

}  // namespace

void set_op_timings(Scenario& sc, std::vector<OpTiming> timings, const std::string& source) {
  const std::vector<std::uint8_t> run = phases_run(sc);
  check_and_sort(
      timings, source, [&](const OpTiming& t) { return timing_error(sc, t, run); },
      [](const OpTiming& t) { return op_name({t.phase, t.micro_batch}); });
  sc.op_timings = std::move(timings);
}

void set_message_timings(Scenario& sc, std::vector<MessageTiming> timings, const std::string& source) {
  check_and_sort(
      timings, source, [&](const MessageTiming& t) { return message_timing_error(sc, t); },
      [](const MessageTiming& t) {
        return fmt::format("the {} message of {}", t.phase == Phase::Forward ? "activation" : "gradient",
                           op_name({t.phase, t.micro_batch}));
      });
  sc.message_timings = std::move(timings);
}

}  // namespace adagrouper::sim
