// The choice among make_plan's evaluated candidates, and why each other one lost.
//
// The fastest feasible one (by its predicted time, or as deployed: --rank-by), ties to
// less peak memory, then smaller k, then fewer virtual stages (docs/model.md section 11).
#include <algorithm>
#include <cmath>
#include <optional>

#include <fmt/format.h>

#include "plan_steps.h"

namespace adagrouper::planner::plan_steps {

namespace {

// Times within a relative 1e-9 are a tie: two schedules that differ only by rounding in
// the last bits (summing the same durations in another order) are equally fast, and
// the tie-breakers (less memory, then smaller k) should decide.
bool same_time(double a, double b) { return std::fabs(a - b) <= 1e-9 * std::max(std::fabs(a), std::fabs(b)); }

// Selection order: faster (by the time `rank_by` names), then less peak model memory,
// then smaller k, then fewer virtual stages.
bool better(const Candidate& a, const Candidate& b, RankBy rank_by) {
  const double ta = a.ranked_time_s(rank_by), tb = b.ranked_time_s(rank_by);
  if (!same_time(ta, tb)) return ta < tb;
  if (a.peak_model_memory() != b.peak_model_memory()) return a.peak_model_memory() < b.peak_model_memory();
  if (a.k != b.k) return a.k < b.k;
  return a.virtual_stages() < b.virtual_stages();
}

// The best evaluated candidate in selection order (the first of equals); nullopt when
// none was evaluated.
std::optional<std::size_t> best_evaluated(const std::vector<Candidate>& cands, RankBy rank_by) {
  std::optional<std::size_t> best;
  for (std::size_t i = 0; i < cands.size(); ++i)
    if (cands[i].evaluated && (!best || better(cands[i], cands[*best], rank_by))) best = i;
  return best;
}

// The first evaluated 1F1B candidate.
std::optional<std::size_t> evaluated_1f1b(const std::vector<Candidate>& cands) {
  const sim::ScheduleSpec one_f_one_b = sim::ScheduleSpec::named("1f1b");
  for (std::size_t i = 0; i < cands.size(); ++i)
    if (cands[i].evaluated && cands[i].spec == one_f_one_b) return i;
  return std::nullopt;
}

[[noreturn]] void throw_nothing_fits(const PlanContext& cx, const std::vector<Candidate>& cands) {
  // Refused candidates have no memory model: they never name the smallest need.
  const auto it = std::min_element(cands.begin(), cands.end(), [](const Candidate& a, const Candidate& b) {
    if (a.model_memory.empty() != b.model_memory.empty()) return b.model_memory.empty();
    return a.peak_model_memory() < b.peak_model_memory();
  });
  const double limit = cx.options.memory_limit_bytes;
  throw InputError(fmt::format(
      "{}: memory_limit_bytes: no schedule fits the limit of {} bytes ({}) per stage; the smallest need is {} "
      "({} bytes) on stage {} ({}, b = {})",
      cx.pipeline.source, limit, gib_text(limit), gib_text(it->peak_model_memory()), it->peak_model_memory(),
      it->peak_stage(), it->spec.prose(), it->micro_batch_size));
}

// Statuses and reasons of the evaluated candidates, against the chosen one.
void mark(std::vector<Candidate>& cands, std::size_t chosen, RankBy rank_by) {
  const Candidate& win = cands[chosen];
  const bool deployed = rank_by == RankBy::Deployed;
  const double tw = win.ranked_time_s(rank_by);
  for (std::size_t i = 0; i < cands.size(); ++i) {
    Candidate& c = cands[i];
    if (!c.evaluated) continue;
    if (i == chosen) {
      c.status = Status::Chosen;
      c.reason = deployed ? "fastest feasible as deployed" : "fastest feasible";
      continue;
    }
    c.status = Status::Lost;
    const double tc = c.ranked_time_s(rank_by);
    c.reason = fmt::format("feasible, {:.4g} s per iteration{} vs {:.4g} s ({:+.1f}%)", tc,
                           deployed ? " as deployed" : "", tw, 100.0 * (tc / tw - 1.0));
    if (same_time(tc, tw))
      c.reason += c.virtual_stages() == win.virtual_stages() ? ", a tie broken by memory, then k"
                                                             : ", a tie broken by memory, then k, then virtual stages";
  }
}

}  // namespace

void choose(const PlanContext& cx, PlanResult& result) {
  const RankBy rank_by = cx.options.rank_by;
  const std::optional<std::size_t> chosen = best_evaluated(result.candidates, rank_by);
  if (!chosen) throw_nothing_fits(cx, result.candidates);
  result.chosen = *chosen;
  result.one_f_one_b = evaluated_1f1b(result.candidates);
  mark(result.candidates, *chosen, rank_by);
  const RankBy other = rank_by == RankBy::Deployed ? RankBy::Predicted : RankBy::Deployed;
  const std::optional<std::size_t> alternative = best_evaluated(result.candidates, other);
  if (alternative != chosen) result.other_rank_choice = alternative;
}

}  // namespace adagrouper::planner::plan_steps
