// The candidates make_plan considers: the memory-limit curve and the baselines.
//
// docs/model.md section 11.
#include <optional>
#include <utility>

#include <fmt/format.h>

#include "plan_steps.h"

namespace adagrouper::planner::plan_steps {

namespace {

// The schedule of the curve's point for k: kFkB, which with k = 1 is 1F1B.
sim::ScheduleSpec curve_spec(int k) {
  return k == 1 ? sim::ScheduleSpec::named("1f1b") : sim::ScheduleSpec::named("kfkb", k);
}

// One k tried from the largest b down: every b over the limit, then the largest that fits.
struct CurveScan {
  std::optional<std::size_t> fitting;  // index into PlanContext::sizes of the largest b that fits
  std::vector<Candidate> tried;        // from the largest b down; the fitting one last
};

CurveScan scan(const PlanContext& cx, int k) {
  const int B = cx.options.global_batch_size;
  CurveScan scan;
  for (std::size_t i = cx.sizes.size(); i-- > 0;) {
    const int b = cx.sizes[i];
    if (k > B / b) continue;  // k <= M
    Candidate c = describe(cx, curve_spec(k), b, false);
    if (fits(cx, c)) {
      scan.fitting = i;
      scan.tried.push_back(std::move(c));
      break;
    }
    c.status = Status::Infeasible;
    c.reason = fmt::format("needs {} on stage {}, over the limit", gib_text(c.peak_model_memory()), c.peak_stage());
    scan.tried.push_back(std::move(c));
  }
  return scan;
}

// The sizes below the curve point (index `fitting`): they fit too, but use memory worse.
void add_pruned(const PlanContext& cx, int k, std::size_t fitting, std::vector<Candidate>& out) {
  const int B = cx.options.global_batch_size;
  for (std::size_t i = fitting; i-- > 0;) {
    const int b = cx.sizes[i];
    if (k > B / b) continue;
    Candidate c = describe(cx, curve_spec(k), b, false);
    c.status = Status::Pruned;
    c.reason = fmt::format("under the memory-limit curve: b = {} fits with k = {} and uses memory better",
                           cx.sizes[fitting], k);
    out.push_back(std::move(c));
  }
}

// Appends the records of k: the point above the curve (the next larger b), the curve
// point (evaluated) and the pruned points below it. Returns false when no b fits k: the
// curve ends, and the smallest b's record is kept as evidence.
bool add_curve_point(const PlanContext& cx, int k, std::vector<Candidate>& out) {
  CurveScan s = scan(cx, k);
  if (!s.fitting) {
    if (!s.tried.empty()) {
      s.tried.back().reason += fmt::format("; no micro-batch size fits k = {}, the curve ends", k);
      out.push_back(std::move(s.tried.back()));
    }
    return false;
  }
  if (s.tried.size() >= 2) out.push_back(std::move(s.tried[s.tried.size() - 2]));
  Candidate point = std::move(s.tried.back());
  point.baseline = k == 1;  // the curve's first point is the 1F1B baseline
  evaluate(cx, point);
  out.push_back(std::move(point));
  add_pruned(cx, k, *s.fitting, out);
  return true;
}

// A baseline at its largest feasible b, or its record at the smallest b when none fits.
void add_baseline(const PlanContext& cx, const sim::ScheduleSpec& spec, std::vector<Candidate>& out) {
  for (std::size_t i = cx.sizes.size(); i-- > 0;) {
    Candidate c = describe(cx, spec, cx.sizes[i], true);
    if (fits(cx, c)) {
      evaluate(cx, c);
      out.push_back(std::move(c));
      return;
    }
    if (i == 0) {
      c.status = Status::Infeasible;
      c.reason = fmt::format("baseline: does not fit at any micro-batch size; needs at least {} on stage {}",
                             gib_text(c.peak_model_memory()), c.peak_stage());
      out.push_back(std::move(c));
    }
  }
}

}  // namespace

void add_curve(const PlanContext& cx, std::vector<Candidate>& out) {
  const int max_k = cx.options.global_batch_size / cx.sizes.front();  // the largest M
  for (int k = 1; add_curve_point(cx, k, out); ++k)
    if (k >= max_k) break;  // k cannot exceed M for any b
}

void add_baselines(const PlanContext& cx, std::vector<Candidate>& out) {
  // 1F1B needs no entry of its own: k = 1 tries every b, so the curve always lists it.
  for (const char* family : {"dapple-b", "gpipe"}) add_baseline(cx, sim::ScheduleSpec::named(family), out);
}

}  // namespace adagrouper::planner::plan_steps
