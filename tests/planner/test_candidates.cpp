// Tests of make_plan's candidates, evaluation and selection.
//
// The chosen plan is the argmin of the evaluated feasible candidates; each prediction is
// exactly the simulator's; the memory-limit curve is monotone, each point is the largest
// fitting b, smaller b are pruned and entries over the limit infeasible.
#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <fmt/format.h>

#include <algorithm>
#include <cmath>
#include <map>
#include <set>
#include <string>
#include <tuple>
#include <vector>

#include "helpers.h"

namespace plantest {
namespace {

using planner::Candidate;
using planner::Status;

double peak(const std::vector<double>& v) { return *std::max_element(v.begin(), v.end()); }

bool is_curve_schedule(const Candidate& c) { return c.spec.family == "1f1b" || c.spec.family == "kfkb"; }

std::vector<int> valid_sizes(const sim::Pipeline& p, int B) {
  std::vector<int> out;
  for (int b = p.min_micro_batch_size(); b <= p.max_micro_batch_size(); ++b)
    if (B % b == 0) out.push_back(b);
  return out;
}

// The memory model of a (schedule, b) computed independently of the planner.
std::vector<double> model_of(const sim::Pipeline& p, const sim::Network& net, const sim::ScheduleSpec& spec, int b,
                             int B) {
  return planner::memory_model(p.at(b), sim::make_schedule(spec, p.num_stages(), B / b), net);
}

struct Stats {
  int plans = 0, infeasible_inputs = 0, evaluated = 0, curve_points = 0, pruned = 0, infeasible = 0;
};

void check_result(const planner::PlanResult& plan, const sim::Pipeline& p, const sim::Network& net,
                  const planner::PlanOptions& o, Stats* stats);

// Checks every property of the plan of (p, net, o); returns false when make_plan threw
// because nothing fits (after checking that really nothing fits).
bool check_plan(const sim::Pipeline& p_in, const sim::Network& net, const planner::PlanOptions& o,
                const std::string& what, Stats* stats = nullptr) {
  SCOPED_TRACE(what);
  sim::Pipeline p = p_in;
  p.global_batch_size = o.global_batch_size;
  planner::PlanResult plan;
  try {
    plan = planner::make_plan(p_in, net, o);
  } catch (const InputError& e) {
    // Nothing fits: 1f1b at the smallest b must be over the limit (it needs the least).
    const auto sizes = valid_sizes(p, o.global_batch_size);
    EXPECT_FALSE(sizes.empty());
    if (!sizes.empty()) {
      EXPECT_GT(peak(model_of(p, net, sim::ScheduleSpec::named("1f1b"), sizes.front(), o.global_batch_size)), o.memory_limit_bytes)
          << e.what();
    }
    EXPECT_THAT(e.what(), HasSubstr("memory_limit_bytes"));
    if (stats) ++stats->infeasible_inputs;
    return false;
  }
  if (stats) ++stats->plans;
  check_result(plan, p, net, o, stats);
  return true;
}

// The properties of one plan, one check each. fits(m): the candidate's model memory is
// within the limit.
class ResultCheck {
 public:
  ResultCheck(const planner::PlanResult& plan, const sim::Pipeline& p, const sim::Network& net,
              const planner::PlanOptions& o, Stats* stats)
      : plan(plan), p(p), net(net), o(o), stats(stats), S(p.num_stages()), B(o.global_batch_size),
        limit(o.memory_limit_bytes), sizes(valid_sizes(p, B)), cands(plan.candidates) {}

  // Statuses, memory, exactly one chosen.
  void statuses() {
    int chosen_count = 0;
    for (std::size_t i = 0; i < cands.size(); ++i) {
      const Candidate& c = cands[i];
      SCOPED_TRACE(describe(c));
      EXPECT_EQ(c.micro_batches * c.micro_batch_size, B);
      EXPECT_NE(std::find(sizes.begin(), sizes.end(), c.micro_batch_size), sizes.end());
      ASSERT_EQ(c.model_memory.size(), static_cast<std::size_t>(S));
      EXPECT_EQ(c.model_memory, model_of(p, net, c.spec, c.micro_batch_size, B));
      if (c.status == Status::Chosen) {
        ++chosen_count;
        EXPECT_EQ(i, plan.chosen);
      }
      if (c.evaluated) {
        EXPECT_TRUE(c.status == Status::Chosen || c.status == Status::Lost);
        EXPECT_TRUE(fits(c.model_memory));
        if (stats) ++stats->evaluated;
      } else {
        EXPECT_TRUE(c.status == Status::Pruned || c.status == Status::Infeasible);
      }
      // Entries over the limit are infeasible, and only those.
      EXPECT_EQ(c.status == Status::Infeasible, !fits(c.model_memory));
      if (stats) {
        stats->pruned += c.status == Status::Pruned;
        stats->infeasible += c.status == Status::Infeasible;
      }
      EXPECT_FALSE(c.reason.empty());
    }
    EXPECT_EQ(chosen_count, 1);
    ASSERT_LT(plan.chosen, cands.size());
  }

  // Selection: argmin of (time, peak model memory, k) over the evaluated. Times within a
  // relative 1e-9 are a tie (rounding of the same sums in another order); then memory,
  // then k decide.
  void selection() {
    const Candidate& win = cands[plan.chosen];
    for (const Candidate& c : cands) {
      if (!c.evaluated) continue;
      const double tw = win.predicted_iteration_time_s, tc = c.predicted_iteration_time_s;
      const bool tie = std::fabs(tw - tc) <= 1e-9 * std::max(std::fabs(tw), std::fabs(tc));
      if (!tie) {
        EXPECT_LT(tw, tc) << "chosen " << describe(win) << " but " << describe(c) << " is faster";
        continue;
      }
      const auto key = std::tuple(c.peak_model_memory(), c.k);
      const auto wkey = std::tuple(win.peak_model_memory(), win.k);
      EXPECT_LE(wkey, key) << "chosen " << describe(win) << " but " << describe(c) << " ties and is better";
    }
    EXPECT_EQ(win.status, Status::Chosen);
    const sim::Schedule wsch = sim::make_schedule(win.spec, S, win.micro_batches);
    EXPECT_EQ(plan.chosen_schedule.stages, wsch.stages);
    ASSERT_EQ(plan.chosen_stages.size(), static_cast<std::size_t>(S));
    const auto wst = p.at(win.micro_batch_size);
    for (int s = 0; s < S; ++s) {
      EXPECT_EQ(plan.chosen_stages[s].fwd, wst[s].fwd);
      EXPECT_EQ(plan.chosen_stages[s].act, wst[s].act);
      EXPECT_EQ(plan.chosen_stages[s].out, wst[s].out);
    }
    if (plan.one_f_one_b) {
      const Candidate& base = cands[*plan.one_f_one_b];
      EXPECT_EQ(base.spec.label(), "1f1b");
      EXPECT_TRUE(base.evaluated);
      EXPECT_DOUBLE_EQ(plan.speedup_over_1f1b(), base.predicted_iteration_time_s / win.predicted_iteration_time_s);
      EXPECT_GE(plan.speedup_over_1f1b(), 1.0);
    }
  }

  // Evaluation: exactly the simulator.
  void evaluation() {
    for (const Candidate& c : cands) {
      if (!c.evaluated) continue;
      SCOPED_TRACE(describe(c));
      sim::Scenario sc = sim::make_scenario(p, net, sim::make_schedule(c.spec, S, c.micro_batches),
                                            c.micro_batch_size, o.eval_iterations);
      sc.start_time_s = o.eval_start_s;
      const sim::SimResult r = sim::simulate(sc);
      ASSERT_EQ(static_cast<int>(r.iteration_times_s.size()), o.eval_iterations);
      EXPECT_EQ(c.predicted_iteration_time_s, r.mean_iteration_time_s());
      EXPECT_EQ(c.throughput_samples_per_s, r.throughput_samples_per_s());
      ASSERT_EQ(c.simulated_memory.size(), static_cast<std::size_t>(S));
      for (int s = 0; s < S; ++s) {
        EXPECT_EQ(c.simulated_memory[s], r.stages[s].peak_memory_bytes) << "stage " << s;
        EXPECT_GE(c.model_memory[s], c.simulated_memory[s]) << "stage " << s << ": model below the simulated peak";
      }
    }
  }

  // The memory-limit curve: one evaluated point per k = 1..K, monotone in b, the larger b
  // over the limit and the smaller ones pruned.
  void curve() {
    std::map<int, const Candidate*> curve;  // k -> evaluated 1f1b/kfkb point
    for (const Candidate& c : cands) {
      if (!c.evaluated || !is_curve_schedule(c)) continue;
      EXPECT_TRUE(curve.emplace(c.k, &c).second) << "two curve points for k = " << c.k;
      if (c.spec.family == "1f1b") {
        EXPECT_EQ(c.k, 1);
      }
    }
    if (stats) stats->curve_points += static_cast<int>(curve.size());
    ASSERT_FALSE(curve.empty()) << "no curve point although a plan was found";
    EXPECT_EQ(curve.begin()->first, 1);
    EXPECT_EQ(curve.rbegin()->first, static_cast<int>(curve.size())) << "curve ks are not 1..K";
    int prev_b = 1 << 30;
    for (const auto& [k, c] : curve) {
      SCOPED_TRACE(describe(*c));
      // Monotone: the largest feasible b never grows with k.
      EXPECT_LE(c->micro_batch_size, prev_b) << "k = " << k;
      prev_b = c->micro_batch_size;
      // Every larger valid b (k <= M) is over the limit; in particular the next one.
      for (int b : sizes) {
        if (b <= c->micro_batch_size || k > B / b) continue;
        EXPECT_GT(peak(model_of(p, net, sim::ScheduleSpec::named("kfkb", k), b, B)), limit) << "k = " << k << ", b = " << b << " fits too";
      }
      // Every smaller valid b with the same k is listed as pruned.
      for (int b : sizes) {
        if (b >= c->micro_batch_size || k > B / b) continue;
        const auto it = std::find_if(cands.begin(), cands.end(), [&](const Candidate& x) {
          return is_curve_schedule(x) && x.k == k && x.micro_batch_size == b;
        });
        ASSERT_NE(it, cands.end()) << "k = " << k << ", b = " << b << " missing";
        EXPECT_EQ(it->status, Status::Pruned) << describe(*it);
      }
    }
    ends(curve);
  }

  // The baselines at their largest feasible b, or infeasible.
  void baselines() {
    for (const char* name : {"1f1b", "dapple-b", "gpipe"}) {
      SCOPED_TRACE(name);
      std::optional<int> largest;  // largest b at which the baseline fits
      for (int b : sizes)
        if (fits(model_of(p, net, sim::ScheduleSpec::named(name), b, B))) largest = b;
      const auto it = std::find_if(cands.begin(), cands.end(),
                                   [&](const Candidate& x) { return x.spec.family == name && (x.evaluated || !largest); });
      ASSERT_NE(it, cands.end()) << "baseline missing from the candidates";
      if (largest) {
        EXPECT_EQ(it->micro_batch_size, *largest);
        EXPECT_TRUE(it->evaluated);
      } else {
        EXPECT_EQ(it->status, Status::Infeasible);
      }
    }
  }

 private:
  bool fits(const std::vector<double>& m) const { return peak(m) <= limit; }

  // The candidates around the curve's points, and why the curve ends.
  void ends(const std::map<int, const Candidate*>& curve) {
    // Same k, smaller b than its curve point: pruned; larger b: infeasible.
    for (const Candidate& c : cands) {
      if (!is_curve_schedule(c) || c.evaluated) continue;
      const auto it = curve.find(c.k);
      if (it == curve.end()) continue;
      if (c.micro_batch_size < it->second->micro_batch_size) {
        EXPECT_EQ(c.status, Status::Pruned) << describe(c);
      }
      if (c.micro_batch_size > it->second->micro_batch_size) {
        EXPECT_EQ(c.status, Status::Infeasible) << describe(c);
      }
    }
    // The curve ends because no b fits the next k.
    const int K = curve.rbegin()->first;
    for (int b : sizes) {
      if (K + 1 > B / b) continue;
      EXPECT_GT(peak(model_of(p, net, sim::ScheduleSpec::named("kfkb", K + 1), b, B)), limit) << "the curve stops at k = " << K
                                                                    << " but k = " << K + 1 << ", b = " << b << " fits";
    }
  }

  const planner::PlanResult& plan;
  const sim::Pipeline& p;
  const sim::Network& net;
  const planner::PlanOptions& o;
  Stats* stats;
  const int S, B;
  const double limit;
  const std::vector<int> sizes;
  const std::vector<Candidate>& cands;
};

void check_result(const planner::PlanResult& plan, const sim::Pipeline& p, const sim::Network& net,
                  const planner::PlanOptions& o, Stats* stats) {
  ResultCheck check(plan, p, net, o, stats);
  for (void (ResultCheck::*step)() : {&ResultCheck::statuses, &ResultCheck::selection, &ResultCheck::evaluation,
                                      &ResultCheck::curve, &ResultCheck::baselines}) {
    (check.*step)();
    if (testing::Test::HasFatalFailure()) return;
  }
}

planner::PlanOptions options(const sim::Pipeline& p, int iterations = 1, double start = 0) {
  planner::PlanOptions o;
  o.global_batch_size = p.global_batch_size;
  o.memory_limit_bytes = p.memory_limit_bytes.value_or(0);
  o.eval_iterations = iterations;
  o.eval_start_s = start;
  return o;
}

// A 4-stage pipeline measured at b = 1, 2, 4, 8, 16 (other sizes interpolated), B = 48:
// valid b are 1, 2, 3, 4, 6, 8, 12, 16.
sim::Pipeline multi_size_pipeline(double limit) {
  std::vector<std::vector<Entry>> profiles(4);
  for (int s = 0; s < 4; ++s)
    for (int b : {1, 2, 4, 8, 16})
      profiles[s].push_back({b, 0.1 + 0.05 * b, 0.2 + 0.1 * b, 2e8 * b, 1e7 * b, 1e7 * b});
  return make_pipeline(profiles, {4e9, 3e9, 3e9, 2e9}, 48, limit, "multi");
}

sim::Network trace_network(int S) {
  sim::Network net = sim::Network::uniform(S, 1e8, 1e-4);
  net.rewrite_channels([&](sim::ChannelSpec& c) {
    if (c.to == c.from + 1) {
      c.set_rate(sim::RateTrace::piecewise({0, 3, 4.5}, {1e8, 1e7, 4e7}, 7 + c.from));
    } else {
      c.set_rate(sim::RateTrace::piecewise({0, 2}, {5e7, 2e8}, 5));
    }
  });
  net.set_speed(S - 1, sim::RateTrace::piecewise({0, 6}, {1.0, 0.5}, 9));
  return net;
}

TEST(Plan, ToyExampleOnEveryToyNetwork) {
  const sim::Pipeline p = sim::load_pipeline(kRoot / "configs/examples/toy-4.json");
  for (const char* n : {"toy-net-free.json", "toy-net-0.5s.json", "toy-net-2s.json"}) {
    const sim::Network net = sim::load_network(kRoot / "configs/examples" / n, 4);
    EXPECT_TRUE(check_plan(p, net, options(p), n));
  }
}

TEST(Plan, ToyExamplePicksGroupingWhenCommunicationCostsAndOneFOneBWhenFree) {
  const sim::Pipeline p = sim::load_pipeline(kRoot / "configs/examples/toy-4.json");
  const auto slow = planner::make_plan(p, sim::load_network(kRoot / "configs/examples/toy-net-0.5s.json", 4), options(p));
  const Candidate& w = slow.candidates[slow.chosen];
  EXPECT_TRUE((w.spec.family == "kfkb" && w.k >= 2) || w.spec.family == "dapple-b") << describe(w);
  EXPECT_EQ(w.predicted_iteration_time_s, 36.0);
  ASSERT_TRUE(slow.one_f_one_b);
  EXPECT_EQ(slow.candidates[*slow.one_f_one_b].predicted_iteration_time_s, 41.0);
  EXPECT_DOUBLE_EQ(slow.speedup_over_1f1b(), 41.0 / 36.0);

  // Free communication: every schedule takes 33 s, the tie goes to the least memory: 1f1b.
  const auto free = planner::make_plan(p, sim::load_network(kRoot / "configs/examples/toy-net-free.json", 4), options(p));
  const Candidate& f = free.candidates[free.chosen];
  EXPECT_EQ(f.spec.family, "1f1b") << describe(f);
  EXPECT_EQ(f.predicted_iteration_time_s, 33.0);
  for (const Candidate& c : free.candidates) {
    if (c.evaluated) {
      EXPECT_EQ(c.predicted_iteration_time_s, 33.0) << describe(c);
    }
  }
}

// Ties in time go to less peak memory, then to the smaller k: with free communication
// and no activations, every kfkb k has the same time and the same memory.
TEST(Plan, TiesGoToLessMemoryThenSmallerK) {
  std::vector<std::vector<Entry>> profiles(3, std::vector<Entry>{{1, 1.0, 2.0, 0.0, 0.0, 0.0}});
  const sim::Pipeline p = make_pipeline(profiles, {1e9, 1e9, 1e9}, 6, 2e9, "ties");
  const auto plan = planner::make_plan(p, sim::Network::uniform(3, std::nullopt), options(p));
  const Candidate& w = plan.candidates[plan.chosen];
  EXPECT_EQ(w.k, 1) << describe(w);
  EXPECT_EQ(w.spec.family, "1f1b") << describe(w);
  int evaluated = 0;
  for (const Candidate& c : plan.candidates) evaluated += c.evaluated;
  EXPECT_GE(evaluated, 4);  // k = 1..6 curve points plus baselines, all tied
  EXPECT_TRUE(check_plan(p, sim::Network::uniform(3, std::nullopt), options(p), "ties"));
}

TEST(Plan, MultiSizePipelineOnConstantNetwork) {
  for (double limit : {5.0e9, 6.5e9, 8e9, 1.2e10, 2e10, 1e12}) {
    const sim::Pipeline p = multi_size_pipeline(limit);
    for (std::optional<double> rate : {std::optional<double>(), std::optional<double>(1e8), std::optional<double>(1e9)}) {
      Stats st;
      check_plan(p, sim::Network::uniform(4, rate, 1e-4), options(p),
                 fmt::format("limit {} rate {}", limit, rate.value_or(0)), &st);
      EXPECT_EQ(st.plans, 1) << "limit " << limit;
    }
  }
}

TEST(Plan, MultiSizePipelineHasAnInterestingCurve) {
  const sim::Pipeline p = multi_size_pipeline(8e9);
  const auto plan = planner::make_plan(p, sim::Network::uniform(4, 1e8, 1e-4), options(p));
  std::set<int> bs;
  int pruned = 0, infeasible = 0;
  for (const Candidate& c : plan.candidates) {
    if (c.evaluated && is_curve_schedule(c)) bs.insert(c.micro_batch_size);
    pruned += c.status == Status::Pruned;
    infeasible += c.status == Status::Infeasible;
  }
  EXPECT_GE(bs.size(), 2u) << "the curve should use several micro-batch sizes";
  EXPECT_GT(pruned, 0);
  EXPECT_GT(infeasible, 0);
}

TEST(Plan, MultiSizePipelineOnRepeatingTraceNetwork) {
  const sim::Network net = trace_network(4);
  for (double limit : {6.5e9, 8e9, 2e10}) {
    const sim::Pipeline p = multi_size_pipeline(limit);
    Stats st;
    check_plan(p, net, options(p, 3, 5.0), fmt::format("trace, limit {}", limit), &st);
    EXPECT_EQ(st.plans, 1);
  }
}

// Traces really matter: the evaluated window changes the predictions.
TEST(Plan, EvaluationWindowFollowsEvalStart) {
  const sim::Pipeline p = multi_size_pipeline(8e9);
  const sim::Network net = trace_network(4);
  const auto a = planner::make_plan(p, net, options(p, 3, 0.0));
  const auto b = planner::make_plan(p, net, options(p, 3, 5.0));
  ASSERT_EQ(a.candidates.size(), b.candidates.size());
  bool differs = false;
  for (std::size_t i = 0; i < a.candidates.size(); ++i)
    differs |= a.candidates[i].predicted_iteration_time_s != b.candidates[i].predicted_iteration_time_s;
  EXPECT_TRUE(differs);
}

TEST(Plan, RandomPipelinesAndNetworks) {
  Stats st;
  const std::vector<std::vector<int>> size_sets = {{1, 2, 4, 8}, {1, 3, 8}, {2, 4, 16}, {1}, {1, 2}};
  const std::vector<int> batches = {8, 12, 16, 24, 32, 48};
  for (std::uint64_t seed = 1; seed <= 120; ++seed) {
    Rng rng(seed * 1000003ULL);
    const int S = rng.range(1, 6);
    const auto& sizes = size_sets[rng.below(size_sets.size())];
    const int B = batches[rng.below(batches.size())];
    sim::Pipeline p = random_pipeline(rng, S, sizes, B, 0);
    // A limit between the static bytes and a few tens of activations.
    double max_static = 0;
    for (const auto& s : p.stages) max_static = std::max(max_static, s.static_bytes);
    p.memory_limit_bytes = max_static + rng.dyadic(1, 64, 1) * 2e8;
    sim::Network net = sim::Network::uniform(S, std::nullopt, rng.chance(0.5) ? 0.0 : 1e-3);
    const bool traced = rng.chance(0.5);
    net.rewrite_channels([&](sim::ChannelSpec& ch) {
      ch.capacity = rng.range(0, 3);
      if (rng.chance(0.9)) {
        const sim::RateTrace r = traced ? random_trace(rng, 1, 16, 4) : sim::RateTrace::constant(rng.dyadic(1, 16, 4));
        // bytes are ~1e7 per sample: scale the rates to 1e7..1e8 B/s
        std::vector<double> v = r.values();
        for (double& x : v) x *= 1e7;
        ch.set_rate(sim::RateTrace::piecewise(r.times(), v, r.repeat_s()));
      }
    });
    if (traced && rng.chance(0.5)) net.set_speed(static_cast<int>(rng.below(S)), random_trace(rng, 1, 8, 4));
    if (valid_sizes(p, B).empty()) continue;
    const int iters = traced ? rng.range(1, 3) : 1;
    const double start = traced ? rng.dyadic(0, 40, 4) : 0.0;
    check_plan(p, net, options(p, iters, start), fmt::format("seed {} S={} B={} traced={}", seed, S, B, traced), &st);
  }
  // The random cases must exercise every part of the planner.
  EXPECT_GE(st.plans, 60);
  EXPECT_GE(st.infeasible_inputs, 1);
  EXPECT_GE(st.pruned, 20);
  EXPECT_GE(st.infeasible, 20);
  EXPECT_GE(st.curve_points, 120);
}

TEST(Plan, NothingFitsNamesTheSmallestNeedAndItsStage) {
  const sim::Pipeline p = multi_size_pipeline(1000);
  try {
    planner::make_plan(p, sim::Network::uniform(4, 1e9), options(p));
    FAIL() << "expected InputError";
  } catch (const InputError& e) {
    const std::string msg = e.what();
    EXPECT_THAT(msg, HasSubstr("multi.json"));
    EXPECT_THAT(msg, HasSubstr("memory_limit_bytes"));
    // The least memory any plan needs: 1f1b at b = 1, stage 0 (static 4e9 + 4 x 2e8 + buffers).
    const auto need = model_of(p, sim::Network::uniform(4, 1e9), sim::ScheduleSpec::named("1f1b"), 1, 48);
    const int stage = static_cast<int>(std::max_element(need.begin(), need.end()) - need.begin());
    EXPECT_THAT(msg, HasSubstr(fmt::format("{}", peak(need)))) << "need " << peak(need);
    EXPECT_THAT(msg, HasSubstr(fmt::format("stage {}", stage)));
    EXPECT_EQ(msg.find('\n'), std::string::npos);
  }
}

TEST(Plan, BadOptionsAreInputErrors) {
  const sim::Pipeline p = multi_size_pipeline(8e9);
  const sim::Network net = sim::Network::uniform(4, 1e9);
  auto o = options(p);
  o.eval_iterations = 0;
  EXPECT_THROW(planner::make_plan(p, net, o), InputError);
  o = options(p);
  o.memory_limit_bytes = 0;
  EXPECT_THROW(planner::make_plan(p, net, o), InputError);
  o = options(p);
  o.global_batch_size = 0;
  EXPECT_THROW(planner::make_plan(p, net, o), InputError);
  // No micro-batch size inside the profiles (2..4) divides B = 7.
  std::vector<std::vector<Entry>> profiles(2, std::vector<Entry>{{2, 1, 2, 1, 1, 1}, {4, 2, 4, 2, 2, 2}});
  const sim::Pipeline q = make_pipeline(profiles, {0, 0}, 7, 1e9, "odd");
  EXPECT_THROW(planner::make_plan(q, sim::Network::uniform(2, 1.0), options(q)), InputError);
}

}  // namespace
}  // namespace plantest
