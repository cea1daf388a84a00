// Candidate enumeration on the memory-limit curve, evaluation with the simulator, and
// selection (Ada-Grouper, section "memory-limit curve"; docs/model.md).
#include <algorithm>
#include <cmath>
#include <string_view>

#include <fmt/format.h>

#include "planner.h"

namespace adagrouper::planner {

std::string to_string(Status s) {
  switch (s) {
    case Status::Chosen: return "chosen";
    case Status::Lost: return "lost";
    case Status::Pruned: return "pruned";
    case Status::Infeasible: return "infeasible";
  }
  return "?";
}

double Candidate::peak_model_memory() const {
  return model_memory.empty() ? 0.0 : *std::max_element(model_memory.begin(), model_memory.end());
}

int Candidate::peak_stage() const {
  return static_cast<int>(std::max_element(model_memory.begin(), model_memory.end()) - model_memory.begin());
}

double PlanResult::speedup_over_1f1b() const {
  if (!one_f_one_b) return 0.0;
  return candidates[*one_f_one_b].predicted_iteration_time_s / candidates[chosen].predicted_iteration_time_s;
}

namespace {

struct Context {
  const sim::Pipeline& pipeline;
  const sim::Network& network;
  const PlanOptions& options;
  std::vector<int> sizes;  // micro-batch sizes that divide B, inside every profile, increasing
};

sim::Schedule schedule_for(const std::string& name, int S, int M, int k) {
  if (name == "kfkb") return sim::make_kfkb(S, M, k);
  return sim::make_named(name, S, M, std::nullopt);
}

Candidate describe(const Context& cx, const std::string& name, int k, int b, bool baseline) {
  Candidate c;
  c.schedule = name;
  c.micro_batch_size = b;
  c.micro_batches = cx.options.global_batch_size / b;
  const int S = cx.pipeline.num_stages();
  const sim::Schedule sch = schedule_for(name, S, c.micro_batches, k);
  c.k = sch.k;
  c.baseline = baseline;
  c.model_memory = memory_model(cx.pipeline.at(b), sch, cx.network);
  return c;
}

bool fits(const Context& cx, const Candidate& c) {
  return c.peak_model_memory() <= cx.options.memory_limit_bytes;
}

void evaluate(const Context& cx, Candidate& c) {
  const int S = cx.pipeline.num_stages();
  sim::Scenario sc = sim::make_scenario(cx.pipeline, cx.network,
                                        schedule_for(c.schedule, S, c.micro_batches, c.k), c.micro_batch_size,
                                        cx.options.eval_iterations);
  sc.start_time_s = cx.options.eval_start_s;
  const sim::SimResult r = sim::simulate(sc);
  c.evaluated = true;
  c.predicted_iteration_time_s = r.mean_iteration_time_s();
  c.throughput_samples_per_s = r.throughput_samples_per_s();
  c.simulated_memory.clear();
  for (const auto& st : r.stages) c.simulated_memory.push_back(st.peak_memory_bytes);
}

// Times within a relative 1e-9 are a tie: two schedules that differ only by rounding in
// the last bits (summing the same durations in another order) are equally fast, and
// the tie-breakers (less memory, then smaller k) should decide.
bool same_time(double a, double b) { return std::fabs(a - b) <= 1e-9 * std::max(std::fabs(a), std::fabs(b)); }

// Selection order: faster, then less peak model memory, then smaller k.
bool better(const Candidate& a, const Candidate& b) {
  if (!same_time(a.predicted_iteration_time_s, b.predicted_iteration_time_s))
    return a.predicted_iteration_time_s < b.predicted_iteration_time_s;
  if (a.peak_model_memory() != b.peak_model_memory()) return a.peak_model_memory() < b.peak_model_memory();
  return a.k < b.k;
}

std::string bytes_text(double b) { return fmt::format("{:.2f} GiB", b / (1024.0 * 1024.0 * 1024.0)); }

}  // namespace

PlanResult make_plan(const sim::Pipeline& pipeline_in, const sim::Network& network, const PlanOptions& options) {
  PlanResult res;
  res.pipeline = pipeline_in;
  res.pipeline.global_batch_size = options.global_batch_size;
  res.pipeline.memory_limit_bytes = options.memory_limit_bytes;
  res.network = network;
  res.options = options;
  const int B = options.global_batch_size;
  if (B < 1) throw InputError(fmt::format("--global-batch-size: must be >= 1, got {}", B));
  if (!(options.memory_limit_bytes > 0))
    throw InputError(fmt::format("{}: memory_limit_bytes: missing; give it in the pipeline file or with --memory-limit",
                                 pipeline_in.source));
  if (options.eval_iterations < 1)
    throw InputError(fmt::format("--eval-iterations: must be >= 1, got {}", options.eval_iterations));

  Context cx{res.pipeline, res.network, res.options, {}};
  for (int b = pipeline_in.min_micro_batch_size(); b <= pipeline_in.max_micro_batch_size(); ++b)
    if (B % b == 0) cx.sizes.push_back(b);
  if (cx.sizes.empty())
    throw InputError(fmt::format(
        "{}: stages[].profile: no micro-batch size in {}..{} (the range every stage's profile covers) divides "
        "the global batch {}",
        pipeline_in.source, pipeline_in.min_micro_batch_size(), pipeline_in.max_micro_batch_size(), B));

  auto& cands = res.candidates;
  // The memory-limit curve: for k = 1, 2, ... the largest b whose kFkB plan fits.
  for (int k = 1;; ++k) {
    std::optional<std::size_t> best;  // index into cx.sizes
    std::vector<Candidate> tried;
    for (std::size_t i = cx.sizes.size(); i-- > 0;) {
      const int b = cx.sizes[i];
      if (k > B / b) continue;  // k <= M
      Candidate c = describe(cx, k == 1 ? "1f1b" : "kfkb", k, b, false);  // kFkB with k = 1 is 1F1B
      if (fits(cx, c)) {
        best = i;
        tried.push_back(std::move(c));
        break;
      }
      c.status = Status::Infeasible;
      c.reason = fmt::format("needs {} on stage {}, over the limit", bytes_text(c.peak_model_memory()), c.peak_stage());
      tried.push_back(std::move(c));
    }
    if (!best) {
      // No b fits this k: the curve ends. Keep the smallest b's record as evidence.
      if (!tried.empty()) {
        tried.back().reason += fmt::format("; no micro-batch size fits k = {}, the curve ends", k);
        cands.push_back(std::move(tried.back()));
      }
      break;
    }
    // The point above the curve (next larger b), the curve point, the pruned points below.
    if (tried.size() >= 2) cands.push_back(std::move(tried[tried.size() - 2]));
    Candidate point = std::move(tried.back());
    point.baseline = k == 1;  // the curve's first point is the 1F1B baseline
    evaluate(cx, point);
    cands.push_back(std::move(point));
    for (std::size_t i = *best; i-- > 0;) {
      const int b = cx.sizes[i];
      if (k > B / b) continue;
      Candidate c = describe(cx, k == 1 ? "1f1b" : "kfkb", k, b, false);
      c.status = Status::Pruned;
      c.reason = fmt::format("under the memory-limit curve: b = {} fits with k = {} and uses memory better",
                             cx.sizes[*best], k);
      cands.push_back(std::move(c));
    }
    if (k >= B / cx.sizes.front()) break;  // k cannot exceed M for any b
  }

  // Baselines at their own largest feasible b.
  const bool have_1f1b = std::any_of(cands.begin(), cands.end(), [](const Candidate& c) { return c.schedule == "1f1b"; });
  for (const char* name : {"1f1b", "dapple-b", "gpipe"}) {
    if (std::string_view(name) == "1f1b" && have_1f1b) continue;
    std::optional<Candidate> found;
    for (std::size_t i = cx.sizes.size(); i-- > 0;) {
      Candidate c = describe(cx, name, 0, cx.sizes[i], true);
      if (fits(cx, c)) {
        found = std::move(c);
        break;
      }
      if (i == 0) {
        c.status = Status::Infeasible;
        c.reason = fmt::format("baseline: does not fit at any micro-batch size; needs at least {} on stage {}",
                               bytes_text(c.peak_model_memory()), c.peak_stage());
        cands.push_back(std::move(c));
      }
    }
    if (found) {
      evaluate(cx, *found);
      cands.push_back(std::move(*found));
    }
  }

  // Selection: fastest feasible; ties to less peak memory, then smaller k.
  std::optional<std::size_t> chosen;
  for (std::size_t i = 0; i < cands.size(); ++i) {
    const Candidate& c = cands[i];
    if (!c.evaluated) continue;
    if (c.schedule == "1f1b" && !res.one_f_one_b) res.one_f_one_b = i;
    if (!chosen) {
      chosen = i;
      continue;
    }
    if (better(c, cands[*chosen])) chosen = i;
  }
  if (!chosen) {
    // Nothing fits: report the smallest need.
    const auto it = std::min_element(cands.begin(), cands.end(), [](const Candidate& a, const Candidate& b) {
      return a.peak_model_memory() < b.peak_model_memory();
    });
    throw InputError(fmt::format(
        "{}: memory_limit_bytes: no schedule fits the limit of {} bytes ({}) per stage; the smallest need is {} "
        "({} bytes) on stage {} ({}{}, b = {})",
        pipeline_in.source, options.memory_limit_bytes, bytes_text(options.memory_limit_bytes),
        bytes_text(it->peak_model_memory()),
        it->peak_model_memory(), it->peak_stage(), it->schedule,
        it->schedule == "kfkb" ? fmt::format(" k = {}", it->k) : std::string(), it->micro_batch_size));
  }
  res.chosen = *chosen;
  const Candidate& win = cands[*chosen];
  for (std::size_t i = 0; i < cands.size(); ++i) {
    Candidate& c = cands[i];
    if (!c.evaluated) continue;
    if (i == *chosen) {
      c.status = Status::Chosen;
      c.reason = "fastest feasible";
    } else {
      c.status = Status::Lost;
      c.reason = fmt::format("feasible, {:.4g} s per iteration vs {:.4g} s ({:+.1f}%)", c.predicted_iteration_time_s,
                             win.predicted_iteration_time_s,
                             100.0 * (c.predicted_iteration_time_s / win.predicted_iteration_time_s - 1.0));
      if (same_time(c.predicted_iteration_time_s, win.predicted_iteration_time_s))
        c.reason += ", a tie broken by memory, then k";
    }
  }
  res.chosen_schedule = schedule_for(win.schedule, pipeline_in.num_stages(), win.micro_batches, win.k);
  res.chosen_stages = res.pipeline.at(win.micro_batch_size);
  return res;
}

}  // namespace adagrouper::planner
