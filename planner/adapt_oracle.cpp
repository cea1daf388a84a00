// The hindsight oracle of `adapt`: the optimal sequence of plans over the run's periods.
//
// Found by a search over period boundaries, then replayed (docs/model.md section 13).
// Exact: an iteration that starts later never ends earlier (every op and transfer end is
// a non-decreasing function of when its inputs are ready), so per plan only the earliest
// arrival at each boundary matters:
//   E[w][q] = f_q,w( min(E[w-1][q], min_{p != q} E[w-1][p] + pause) ).
#include <algorithm>
#include <stdexcept>
#include <utility>

#include <fmt/format.h>

#include "adapt_internal.h"

namespace adagrouper::planner::adapt_parts {

namespace {

// The earliest and the second earliest entry of `ends` (-1 where there is none).
std::pair<int, int> two_earliest(const std::vector<double>& ends) {
  int m1 = -1, m2 = -1;
  for (int q = 0; q < static_cast<int>(ends.size()); ++q) {
    if (m1 < 0 || ends[q] < ends[m1]) {
      m2 = m1;
      m1 = q;
    } else if (m2 < 0 || ends[q] < ends[m2]) {
      m2 = q;
    }
  }
  return {m1, m2};
}

// The search: E per plan after the last period, and per period and plan the plan it
// came from.
struct Search {
  std::vector<double> ends;
  std::vector<std::vector<int>> from;  // [period][plan]
};

class OracleSearch {
 public:
  OracleSearch(Plans& plans, const Periods& periods, const std::vector<std::vector<double>>& static_ends,
               double pause_s, const Reporter& reporter)
      : plans_(plans), periods_(periods), static_ends_(static_ends), pause_(pause_s), reporter_(reporter) {}

  Search run() {
    const int C = plans_.size();
    Search s{std::vector<double>(C, 0.0), std::vector<std::vector<int>>(periods_.count, std::vector<int>(C))};
    std::vector<double> next(C, 0.0);
    pure_.assign(C, 1);
    for (int w = 0; w < periods_.count; ++w) {
      const auto [m1, m2] = two_earliest(s.ends);
      for (int q = 0; q < C; ++q) {
        const int other = m1 != q ? m1 : m2;
        next[q] = period_end(w, q, s.ends, other, s.from[w][q]);
      }
      std::swap(s.ends, next);
    }
    return s;
  }

 private:
  // The end of period w on plan q, arriving from the best of staying on q and switching
  // from `other`; sets `from` to the plan it came from.
  double period_end(int w, int q, const std::vector<double>& ends, int other, int& from) {
    double start = ends[q];
    from = q;
    if (w > 0 && other >= 0 && ends[other] + pause_ < ends[q]) {
      start = ends[other] + pause_;
      from = other;
      pure_[q] = 0;
    }
    double t = start;
    if (pure_[q]) {
      t = static_ends_[q][w];
    } else {
      for (int i = 0; i < periods_.length(w); ++i) t += plans_.iteration(q, t);
    }
    done_ += periods_.length(w);
    reporter_.progress("oracle", done_, static_cast<long>(plans_.size()) * periods_.iterations);
    return t;
  }

  Plans& plans_;
  const Periods& periods_;
  const std::vector<std::vector<double>>& static_ends_;
  const double pause_;
  const Reporter& reporter_;
  std::vector<char> pure_;  // per plan: still on the static plan's own path (its ends are known)
  long done_ = 0;
};

// The plan of every period on the path that ends earliest (the first plan on a tie).
std::vector<int> best_path(const Search& s, int periods) {
  int q = 0;
  for (int i = 1; i < static_cast<int>(s.ends.size()); ++i)
    if (s.ends[i] < s.ends[q]) q = i;
  std::vector<int> path(periods);
  for (int w = periods - 1; w >= 0; --w) {
    path[w] = q;
    q = s.from[w][q];
  }
  return path;
}

}  // namespace

PolicyRun run_oracle(Plans& plans, const Periods& periods, const std::vector<std::vector<double>>& static_ends,
                     double pause_s, const Reporter& reporter) {
  const Search search = OracleSearch(plans, periods, static_ends, pause_s, reporter).run();
  const std::vector<int> path = best_path(search, periods.count);
  PolicyRun p = named_policy("oracle", fmt::format("the best plan per period of {} iterations in hindsight (the "
                                                   "optimal sequence, {} s pause per change)",
                                                   periods.every, pause_s));
  p.rows.reserve(static_cast<std::size_t>(periods.iterations));
  double t = 0;
  for (int w = 0; w < periods.count; ++w) {
    double pause = 0;
    if (w > 0 && path[w] != path[w - 1]) {
      pause = pause_s;
      ++p.switches;
      p.pause_s += pause_s;
    }
    t += pause;
    for (int i = 0; i < periods.length(w); ++i) {
      const IterationRow row{periods.first(w) + i, t, path[w], i == 0 ? pause : 0.0, plans.iteration(path[w], t)};
      reporter.add(p, row);
      t += row.time_s;
    }
  }
  p.total_time_s = t;
  const double searched = *std::min_element(search.ends.begin(), search.ends.end());
  if (t != searched)
    throw std::logic_error(fmt::format("adapt: the oracle's replay ends at {} s, its search at {} s", t, searched));
  return p;
}

}  // namespace adagrouper::planner::adapt_parts
