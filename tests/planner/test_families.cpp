// Tests of make_plan across schedule families and devices (docs/model.md sections 11 and 14).
//
// Every candidate's memory is the model of its merged pipeline and schedule; each family
// appears at every micro-batch size of the curve (kfkb-dynamic at every curve point with
// P unlimited and P = k), evaluated when it fits, infeasible when not, refused with the
// family's reason when it does not run; the prediction is the simulator's on the merged
// pipeline; the chosen one is the fastest feasible (ties: memory, k, then fewer virtual
// stages); the programs of every evaluated candidate validate.
#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <fmt/format.h>

#include <algorithm>
#include <cmath>
#include <set>
#include <string>
#include <tuple>
#include <vector>

#include "helpers.h"

namespace plantest {
namespace {

using planner::Candidate;
using planner::Status;
using ::testing::IsEmpty;

bool is_curve(const Candidate& c) {
  return (c.spec.family == "kfkb" || c.spec.family == "1f1b") && !c.spec.split_backward && c.virtual_stages() == 1;
}

// The scenario of a candidate: its pipeline merged into D x v model stages.
sim::Scenario scenario_of(const sim::Pipeline& p, const sim::Network& net, const planner::PlanOptions& o, int D,
                          const Candidate& c) {
  sim::Pipeline q = p;
  q.global_batch_size = o.global_batch_size;
  sim::Scenario sc = sim::make_scenario(planner::merge_model_stages(q, D * c.virtual_stages()), net,
                                        sim::make_schedule(c.spec, D, c.micro_batches), c.micro_batch_size,
                                        o.eval_iterations);
  sc.start_time_s = o.eval_start_s;
  return sc;
}

// Selection key: time (ties within 1e-9), memory, k, virtual stages.
bool better_or_tie(const Candidate& a, const Candidate& b) {
  const double ta = a.predicted_iteration_time_s, tb = b.predicted_iteration_time_s;
  if (std::fabs(ta - tb) > 1e-9 * std::max(ta, tb)) return ta < tb;
  return std::tuple(a.peak_model_memory(), a.k, a.virtual_stages()) <=
         std::tuple(b.peak_model_memory(), b.k, b.virtual_stages());
}

void check_candidate(const Candidate& c, const sim::Pipeline& p, const sim::Network& net,
                     const planner::PlanOptions& o, int D) {
  SCOPED_TRACE(describe(c));
  EXPECT_FALSE(c.reason.empty());
  if (c.status == Status::Refused) {
    EXPECT_FALSE(c.evaluated);
    EXPECT_TRUE(c.model_memory.empty());
    EXPECT_THROW(sim::make_schedule(c.spec, D, c.micro_batches), InputError);
    return;
  }
  const sim::Scenario sc = scenario_of(p, net, o, D, c);
  ASSERT_EQ(c.model_memory.size(), static_cast<std::size_t>(D));
  EXPECT_EQ(c.model_memory, planner::memory_model(sc.model_stages, sc.schedule, net));
  const bool fits = c.peak_model_memory() <= o.memory_limit_bytes;
  EXPECT_EQ(c.status == Status::Infeasible, !fits);
  if (!c.evaluated) return;
  EXPECT_TRUE(c.status == Status::Chosen || c.status == Status::Lost);
  const sim::SimResult r = sim::simulate(sc, {.record_order = true});
  EXPECT_EQ(c.predicted_iteration_time_s, r.mean_iteration_time_s());
  for (int d = 0; d < D; ++d) {
    EXPECT_EQ(c.simulated_memory[d], r.stages[d].peak_memory_bytes);
    EXPECT_GE(c.model_memory[d], c.simulated_memory[d]) << "stage " << d;
  }
  // The programs of the order it ran (where the W ops went under dynamic fill) validate.
  sim::Schedule ran = sc.schedule;
  ran.stages = r.executed.front();
  EXPECT_THAT(planner::validate_programs(planner::device_programs(ran, sc.model_stages)), IsEmpty());
}

// Every extra family of the options appears at the curve's sizes (and v) it should.
void check_family_coverage(const planner::PlanResult& plan, const std::vector<int>& vs) {
  std::vector<std::pair<int, int>> points;  // (k, b)
  std::set<int> sizes;
  for (const Candidate& c : plan.candidates)
    if (c.evaluated && is_curve(c)) points.emplace_back(c.k, c.micro_batch_size), sizes.insert(c.micro_batch_size);
  auto count = [&](auto pred) { return std::count_if(plan.candidates.begin(), plan.candidates.end(), pred); };
  for (const std::string& family : plan.options.families) {
    SCOPED_TRACE(family);
    if (family == planner::kKfkbDynamic) {
      for (const auto& [k, b] : points)
        for (const std::optional<int> P : {std::optional<int>(), std::optional<int>(k)})
          EXPECT_EQ(count([&](const Candidate& c) {
                      return c.spec.split_backward && c.spec.w_fill == sim::WFill::Dynamic && c.k == k &&
                             c.micro_batch_size == b && c.spec.max_pending_w == P && c.virtual_stages() == 1;
                    }),
                    1)
              << "k=" << k << " b=" << b;
      continue;
    }
    const sim::ScheduleFamily& f = *sim::find_schedule_family(family);
    for (const int b : sizes)
      for (const int v : vs)
        EXPECT_EQ(count([&](const Candidate& c) {
                    return c.spec.family == family && c.micro_batch_size == b && c.virtual_stages() == v;
                  }),
                  f.virtual_stages == 0 || f.virtual_stages == v ? 1 : 0)
            << "b=" << b << " v=" << v;
  }
}

void check_family_plan(const planner::PlanResult& plan, const sim::Pipeline& p, const sim::Network& net,
                       const planner::PlanOptions& o, const std::vector<int>& vs) {
  const int D = o.devices > 0 ? o.devices : p.num_stages();
  EXPECT_EQ(plan.devices, D);
  int chosen = 0;
  for (const Candidate& c : plan.candidates) {
    check_candidate(c, p, net, o, D);
    chosen += c.status == Status::Chosen;
  }
  EXPECT_EQ(chosen, 1);
  const Candidate& win = plan.candidates[plan.chosen];
  EXPECT_EQ(win.status, Status::Chosen);
  for (const Candidate& c : plan.candidates)
    if (c.evaluated) {
      EXPECT_TRUE(better_or_tie(win, c)) << "chosen " << describe(win) << " over " << describe(c);
    }
  check_family_coverage(plan, vs);
  EXPECT_EQ(plan.chosen_pipeline.num_stages(), D * win.virtual_stages());
  EXPECT_THAT(planner::validate_programs(planner::device_programs(plan.chosen_schedule, plan.chosen_stages)),
              IsEmpty());
  EXPECT_NO_THROW(planner::plan_json(plan, {}));
}

planner::PlanOptions family_options(const sim::Pipeline& p, int devices, std::vector<std::string> families) {
  planner::PlanOptions o;
  o.global_batch_size = p.global_batch_size;
  o.memory_limit_bytes = p.memory_limit_bytes.value_or(0);
  o.devices = devices;
  o.families = std::move(families);
  return o;
}

TEST(Families, ToyEightOnFourDevicesOnEveryToyNetwork) {
  const sim::Pipeline p = sim::load_pipeline(kRoot / "configs/examples/toy-8.json");
  for (const char* n : {"toy-net-free.json", "toy-net-0.5s.json", "toy-net-2s.json"}) {
    SCOPED_TRACE(n);
    const sim::Network net = sim::load_network(kRoot / "configs/examples" / n, 4);
    const planner::PlanOptions o = family_options(p, 4, planner::extra_families());
    const planner::PlanResult plan = planner::make_plan(p, net, o);
    check_family_plan(plan, p, net, o, {1, 2});
    std::set<std::string> families;
    for (const Candidate& c : plan.candidates) families.insert(c.spec.family);
    for (const char* f : {"kfkb", "1f1b", "gpipe", "dapple-b", "interleaved-1f1b", "looped-bfs", "interleaved-zb",
                          "zbv", "dualpipev"})
      EXPECT_TRUE(families.count(f)) << f;
  }
}

// On toy-8 (toy-4 cut in two) with 0.5 s messages, kFkB with dynamic W fill beats every
// other schedule, as in docs/model.md section 14 (28.5 s against 36 s for kFkB).
TEST(Families, ToyEightPicksKfkbWithDynamicWFillWithHalfSecondMessages) {
  const sim::Pipeline p = sim::load_pipeline(kRoot / "configs/examples/toy-8.json");
  const sim::Network net = sim::load_network(kRoot / "configs/examples/toy-net-0.5s.json", 4);
  const planner::PlanResult plan = planner::make_plan(p, net, family_options(p, 4, planner::extra_families()));
  const Candidate& w = plan.candidates[plan.chosen];
  EXPECT_EQ(w.spec.w_fill, sim::WFill::Dynamic) << describe(w);
  EXPECT_EQ(w.predicted_iteration_time_s, 28.5) << describe(w);
  EXPECT_DOUBLE_EQ(plan.speedup_over_1f1b(), 41.0 / 28.5);
}

TEST(Families, RandomPipelinesDevicesAndNetworks) {
  const std::vector<std::string> all = planner::extra_families();
  int plans = 0, refused = 0, evaluated_extra = 0;
  for (std::uint64_t seed = 1; seed <= 60; ++seed) {
    Rng rng(seed * 1000033ULL);
    const int D = rng.range(1, 4), v_max = rng.range(1, 2);
    const int B = std::vector<int>{8, 12, 16}[rng.below(3)];
    sim::Pipeline p = random_pipeline(rng, D * v_max, {1, 2, 4}, B, 0);
    double max_static = 0;
    for (const auto& s : p.stages) max_static = std::max(max_static, s.static_bytes);
    p.memory_limit_bytes = v_max * max_static + rng.dyadic(1, 64, 1) * 2e8;
    sim::Network net = sim::Network::uniform(D, std::nullopt, rng.chance(0.5) ? 0.0 : 1e-3);
    net.rewrite_channels([&](sim::ChannelSpec& ch) {
      ch.capacity = rng.range(0, 2);
      if (rng.chance(0.9)) ch.set_rate(sim::RateTrace::constant(rng.dyadic(1, 16, 4) * 1e7));
    });
    std::vector<std::string> families;
    for (const std::string& f : all)
      if (rng.chance(0.6)) families.push_back(f);
    planner::PlanOptions o = family_options(p, D, families);
    o.eval_iterations = rng.range(1, 2);
    planner::PlanResult plan;
    try {
      plan = planner::make_plan(p, net, o);
    } catch (const InputError& e) {
      EXPECT_THAT(e.what(), HasSubstr("memory_limit_bytes"));
      continue;
    }
    ++plans;
    std::vector<int> vs;
    for (int v = 1; v <= v_max; ++v)
      if (v_max % v == 0) vs.push_back(v);
    check_family_plan(plan, p, net, o, vs);
    for (const Candidate& c : plan.candidates) {
      refused += c.status == Status::Refused;
      evaluated_extra += c.evaluated && !is_curve(c) && !c.baseline;
    }
  }
  EXPECT_GE(plans, 30);
  EXPECT_GE(refused, 5);
  EXPECT_GE(evaluated_extra, 100);
}

TEST(Families, WithoutOptionsTheCandidatesAreTheCurveAndTheBaselines) {
  const sim::Pipeline p = sim::load_pipeline(kRoot / "configs/examples/toy-8.json");
  const sim::Network net = sim::load_network(kRoot / "configs/examples/toy-net-0.5s.json", 8);
  const planner::PlanResult plan = planner::make_plan(p, net, family_options(p, 0, {}));
  EXPECT_EQ(plan.devices, 8);
  for (const Candidate& c : plan.candidates) {
    EXPECT_TRUE(is_curve(c) || c.spec.family == "gpipe" || c.spec.family == "dapple-b") << describe(c);
    EXPECT_EQ(c.virtual_stages(), 1);
    EXPECT_FALSE(c.spec.split_backward);
  }
  // --devices alone merges for the curve too: the v = 1 candidates run toy-8 as toy-4.
  const sim::Network net4 = sim::load_network(kRoot / "configs/examples/toy-net-0.5s.json", 4);
  const planner::PlanOptions o = family_options(p, 4, {});
  const planner::PlanResult merged = planner::make_plan(p, net4, o);
  check_family_plan(merged, p, net4, o, {1, 2});
  const sim::Pipeline toy4 = sim::load_pipeline(kRoot / "configs/examples/toy-4.json");
  for (const Candidate& c : merged.candidates)
    if (c.evaluated && c.spec.family == "1f1b") {
      EXPECT_EQ(c.predicted_iteration_time_s, 41.0);  // toy-4's 1F1B at 0.5 s
    }
}

// One device, nothing to send and no activations: every schedule takes the same time
// and memory; the tie goes to k = 1 and then to one model stage per stage.
TEST(Families, TiesGoToFewerVirtualStages) {
  std::vector<std::vector<Entry>> profiles(2, std::vector<Entry>{{1, 1.0, 2.0, 0.0, 0.0, 0.0}});
  const sim::Pipeline p = make_pipeline(profiles, {1e9, 1e9}, 4, 4e9, "one-device");
  const sim::Network net = sim::Network::uniform(1, std::nullopt);
  const planner::PlanOptions o = family_options(p, 1, planner::extra_families());
  const planner::PlanResult plan = planner::make_plan(p, net, o);
  check_family_plan(plan, p, net, o, {1, 2});
  const Candidate& w = plan.candidates[plan.chosen];
  EXPECT_EQ(w.virtual_stages(), 1) << describe(w);
  EXPECT_EQ(w.k, 1) << describe(w);
  bool tie_by_v = false;
  for (const Candidate& c : plan.candidates)
    tie_by_v |= c.evaluated && c.virtual_stages() == 2 && c.reason.find("then virtual stages") != std::string::npos;
  EXPECT_TRUE(tie_by_v);
}

TEST(Families, OptionsAreCheckedInOneLine) {
  EXPECT_EQ(planner::parse_families("all"), planner::extra_families());
  EXPECT_EQ(planner::parse_families("zbv, kfkb-dynamic,kfkb,gpipe"),
            (std::vector<std::string>{"kfkb-dynamic", "zbv"}));
  EXPECT_EQ(planner::parse_virtual_stages("2,1,2"), (std::vector<int>{1, 2}));
  for (const char* bad : {"zbw", "", "all,zbv", "kfkb;zbv"}) {
    try {
      planner::parse_families(bad);
      ADD_FAILURE() << bad;
    } catch (const InputError& e) {
      EXPECT_THAT(e.what(), HasSubstr("--families")) << bad;
    }
  }
  for (const char* bad : {"0", "x", "1,", "-1", "2.5"}) EXPECT_THROW(planner::parse_virtual_stages(bad), InputError) << bad;

  const sim::Pipeline p = sim::load_pipeline(kRoot / "configs/examples/toy-8.json");
  auto message = [&](int devices, std::vector<int> vs, int network_stages) {
    planner::PlanOptions o = family_options(p, devices, {});
    o.virtual_stages = std::move(vs);
    try {
      planner::make_plan(p, sim::Network::uniform(network_stages, 1.0), o);
    } catch (const InputError& e) {
      EXPECT_EQ(std::string(e.what()).find('\n'), std::string::npos);
      return std::string(e.what());
    }
    return std::string("no error");
  };
  EXPECT_THAT(message(3, {}, 3), HasSubstr("--devices"));
  EXPECT_THAT(message(4, {3}, 4), HasSubstr("--virtual-stages"));
  EXPECT_THAT(message(4, {}, 8), HasSubstr("describes 8 stages"));
}

}  // namespace
}  // namespace plantest
