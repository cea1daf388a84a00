// The partitioning DP (PartitionProblem::solve): the best cut and the Pareto front of cuts.
//
// The cut that minimises the latency model under the memory limit, and the other cuts on
// the last state's front (docs/model.md section 12).
//
// State (s, j): stages 0..s cover layers [0, j). Its front holds the non-dominated
// (bottleneck, transfer sum) pairs of the ways to get there, sorted by bottleneck
// ascending (so transfer sums strictly descending), with back pointers. The latency
// model is increasing in both, so the optimum of the last state is on its front.
//
// Two passes. The first keeps one entry per state, the smallest (bottleneck, transfer
// sum): a feasible cut whose score bounds the optimum from above (ub). The second keeps
// whole fronts but drops what cannot reach ub: an entry's score so far,
// sum(fwd + bwd) + transfers + (M - 1) x bottleneck, only grows; and a stage slower than
// (ub - sum) / (M - 1) can never be part of the optimum.
#include <algorithm>
#include <cmath>
#include <cstdint>
#include <utility>

#include "partition.h"
#include "partition_internal.h"

namespace adagrouper::planner {

using partition_parts::kInf;

class PartitionProblem::Dp {
 public:
  explicit Dp(const PartitionProblem& p)
      : p_(p), S_(p.S_), L_(p.L_), total_(p.time_[p.L_]), arena_(S_), span_(S_, std::vector<Span>(L_ + 1, {0, 0})) {
    scratch_.reserve(static_cast<std::size_t>(L_) * 4);
  }

  // One pass: with `single`, one entry per state; entries whose score exceeds ub dropped.
  void run(bool single, double ub) {
    slack_ = ub + 1e-9 * std::fabs(ub);  // rounding must not drop the optimum
    for (auto& a : arena_) a.clear();
    for (auto& sp : span_) std::fill(sp.begin(), sp.end(), Span{0, 0});
    first_stage();
    for (int s = 1; s < S_; ++s) later_stage(s, single);
  }

  // Whether the last state (all layers on all stages) was reached.
  bool found() const { return span_[S_ - 1][L_].first != span_[S_ - 1][L_].second; }

  // The latency model of the last state's first entry (found() must hold).
  double first_score() const { return score(arena_[S_ - 1][span_[S_ - 1][L_].first]); }

  // The cuts on the last state's front, best first: the latency model, ties to the
  // smaller bottleneck (earlier on the front).
  std::vector<std::vector<int>> cuts() const {
    const auto [fb, fe] = span_[S_ - 1][L_];
    if (fb == fe) return {};
    std::vector<std::uint32_t> order;
    for (std::uint32_t k = fb; k < fe; ++k) order.push_back(k);
    const auto& last = arena_[S_ - 1];
    std::stable_sort(order.begin(), order.end(),
                     [&](std::uint32_t x, std::uint32_t y) { return score(last[x]) < score(last[y]); });
    std::vector<std::vector<int>> out;
    for (std::uint32_t k : order) out.push_back(bounds_of(k));
    return out;
  }

 private:
  struct Entry {
    double bott, comm;
    std::int32_t prev_i, prev_k;
  };
  using Span = std::pair<std::uint32_t, std::uint32_t>;  // [begin, end) in the stage's arena

  static bool before(const Entry& x, const Entry& y) {
    if (x.bott != y.bott) return x.bott < y.bott;
    if (x.comm != y.comm) return x.comm < y.comm;
    if (x.prev_i != y.prev_i) return x.prev_i > y.prev_i;
    return x.prev_k < y.prev_k;
  }

  double score(const Entry& e) const { return total_ + e.comm + (p_.M_ - 1) * e.bott; }
  bool hopeless(double bott, double comm) const { return total_ + comm + (p_.M_ - 1) * bott > slack_; }
  // A lower bound of the memory of stage s holding [i, j) already exceeds the limit.
  bool too_big(int s, int i, int j) const {
    return p_.reserved_ + (p_.static_[j] - p_.static_[i]) + (p_.act_[j] - p_.act_[i]) * p_.max_a_[s] > p_.limit_;
  }

  void first_stage() {
    for (int j = 1; j <= L_ - (S_ - 1); ++j) {
      if (S_ == 1 && j != L_) continue;
      if (too_big(0, 0, j) || hopeless(p_.time_[j], 0.0)) break;
      if (p_.stage_memory(0, 0, j) > p_.limit_) continue;
      span_[0][j] = {static_cast<std::uint32_t>(arena_[0].size()), static_cast<std::uint32_t>(arena_[0].size() + 1)};
      arena_[0].push_back({p_.time_[j], 0.0, -1, -1});
    }
  }

  void later_stage(int s, bool single) {
    const int j_lo = s + 1, j_hi = L_ - (S_ - 1 - s);
    for (int j = s + 1 == S_ ? L_ : j_lo; j <= j_hi; ++j) {
      scratch_.clear();
      for (int i = j - 1; i >= s; --i) {
        if (too_big(s, i, j) || hopeless(p_.time_[j] - p_.time_[i], 0.0)) break;
        extend(s, i, j, single);
      }
      store(s, j, single);
    }
  }

  // The entries of state (s, j) whose stage s holds [i, j), into scratch_.
  void extend(int s, int i, int j, bool single) {
    const auto [b0, e0] = span_[s - 1][i];
    if (b0 == e0) return;
    if (p_.stage_memory(s, i, j) > p_.limit_) return;
    const double tf = p_.transfer_fwd(s - 1, i), tb = p_.transfer_bwd(s - 1, i);
    const double bm = std::max({p_.time_[j] - p_.time_[i], tf, tb}), cs = tf + tb;
    // Entries whose bottleneck is below bm collapse onto bm: only the last of them (the
    // smallest transfer sum) survives.
    const auto& prev = arena_[s - 1];
    std::uint32_t k = b0;
    while (k + 1 < e0 && prev[k + 1].bott <= bm) ++k;
    for (; k < e0; ++k) {
      const Entry e{std::max(prev[k].bott, bm), prev[k].comm + cs, i, static_cast<std::int32_t>(k)};
      if (hopeless(e.bott, e.comm)) continue;
      if (!single) {
        scratch_.push_back(e);
        continue;
      }
      if (scratch_.empty()) {
        scratch_.push_back(e);
      } else if (before(e, scratch_[0])) {
        scratch_[0] = e;
      }
      break;  // the first entry not collapsed has the smallest bottleneck
    }
  }

  // Stores state (s, j) from scratch_: its best entry, or its non-dominated front.
  void store(int s, int j, bool single) {
    if (scratch_.empty()) return;
    const auto begin = static_cast<std::uint32_t>(arena_[s].size());
    if (single) {
      arena_[s].push_back(scratch_[0]);
    } else {
      std::sort(scratch_.begin(), scratch_.end(), before);
      double best = kInf;
      for (const Entry& e : scratch_)
        if (e.comm < best) {
          arena_[s].push_back(e);
          best = e.comm;
        }
    }
    span_[s][j] = {begin, static_cast<std::uint32_t>(arena_[s].size())};
  }

  // The cut of entry k of the last state, following the back pointers.
  std::vector<int> bounds_of(std::uint32_t k) const {
    std::vector<int> bounds(S_ + 1);
    bounds[S_] = L_;
    std::int32_t idx = static_cast<std::int32_t>(k);
    for (int s = S_ - 1; s >= 0; --s) {
      const Entry& e = arena_[s][static_cast<std::size_t>(idx)];
      bounds[s] = s == 0 ? 0 : e.prev_i;
      idx = e.prev_k;
    }
    return bounds;
  }

  const PartitionProblem& p_;
  const int S_, L_;
  const double total_;  // sum of every layer's fwd + bwd
  double slack_ = kInf;
  std::vector<std::vector<Entry>> arena_;  // per stage, the fronts of its states one after another
  std::vector<std::vector<Span>> span_;    // [s][j]: the front of state (s, j) in arena_[s]
  std::vector<Entry> scratch_;
};

std::vector<std::vector<int>> PartitionProblem::solve() const {
  // The equal split (as many layers per stage as possible), when it fits, bounds the
  // first pass too.
  double ub = kInf;
  std::vector<int> equal(S_ + 1);
  for (int s = 0; s <= S_; ++s) equal[s] = static_cast<int>(static_cast<std::int64_t>(s) * L_ / S_);
  if (const CutScore c = evaluate(equal); c.fits) ub = c.predicted_s;
  Dp dp(*this);
  dp.run(true, ub);
  if (!dp.found() && ub < kInf) dp.run(true, kInf);  // the single entries kept may all have run past ub
  if (!dp.found()) return {};                        // nothing fits
  dp.run(false, std::min(ub, dp.first_score()));
  return dp.cuts();
}

}  // namespace adagrouper::planner
