// Tests of merging model stages (planner::merge_model_stages, docs/model.md section 11).
//
// A merged pipeline runs exactly as the unmerged one with each merged pair back to back
// on one stage (a custom order with v = 2), and its memory bounds the unmerged run's
// from above; merged profiles interpolate to the sums of their parts; the pipeline file
// it writes reads back to the same numbers.
#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <fmt/format.h>

#include <algorithm>
#include <cmath>
#include <string>
#include <vector>

#include "helpers.h"

namespace plantest {
namespace {

// The order of a merged schedule on the unmerged pipeline: each op of merged model stage
// d becomes the ops of its parts 2d and 2d+1 back to back (forwards in model order,
// backwards in reverse), both parts on stage d.
sim::Schedule unmerged_pairs(const sim::Schedule& merged) {
  sim::Schedule s;
  s.spec = sim::ScheduleSpec::custom();
  s.spec.virtual_stages = 2;
  s.k = 0;
  const int D = merged.num_stages();
  for (int j = 0; j < 2 * D; ++j) s.placement.push_back(j / 2);
  s.stages.resize(D);
  for (int d = 0; d < D; ++d)
    for (const sim::Op& op : merged.stages[d]) {
      const bool forward = op.phase == sim::Phase::Forward;
      s.stages[d].push_back({op.phase, op.micro_batch, forward ? 2 * d : 2 * d + 1});
      s.stages[d].push_back({op.phase, op.micro_batch, forward ? 2 * d + 1 : 2 * d});
    }
  return s;
}

TEST(Merge, ExactInTimeAndAnUpperBoundInMemory) {
  const char* families[] = {"1f1b", "gpipe", "dapple-b", "kfkb"};
  int compared = 0;
  for (std::uint64_t seed = 1; seed <= 300; ++seed) {
    Rng rng(seed * 0x2545F4914F6CDD1DULL);
    const int D = rng.range(1, 4), M = rng.range(1, 8), b = rng.range(1, 2);
    const sim::Pipeline p = dyadic_pipeline(rng, 2 * D, M * b);
    const sim::Pipeline merged = planner::merge_model_stages(p, D);
    ASSERT_EQ(merged.num_stages(), D);
    const int which = rng.range(0, 3);
    sim::ScheduleSpec spec = sim::ScheduleSpec::named(families[which], which == 3 ? std::optional<int>(rng.range(1, M))
                                                                                  : std::nullopt);
    spec.split_backward = rng.chance(0.4);
    const sim::Schedule sch = sim::make_schedule(spec, D, M);
    const sim::Network net = random_device_network(rng, D);
    const int iterations = rng.range(1, 2);
    const std::string what = fmt::format("seed {} D={} M={} b={} {}", seed, D, M, b, spec.label());
    const sim::SimResult a = sim::simulate(sim::make_scenario(merged, net, sch, b, iterations));
    const sim::SimResult u = sim::simulate(sim::make_scenario(p, net, unmerged_pairs(sch), b, iterations));
    ASSERT_EQ(a.iteration_times_s.size(), u.iteration_times_s.size());
    for (std::size_t i = 0; i < a.iteration_times_s.size(); ++i)
      EXPECT_NEAR(a.iteration_times_s[i], u.iteration_times_s[i], 1e-9 * u.iteration_times_s[i]) << what;
    const auto bound = planner::memory_model(merged.at(b), sch, net);
    for (int d = 0; d < D; ++d) {
      EXPECT_GE(a.stages[d].peak_memory_bytes, u.stages[d].peak_memory_bytes) << what << " stage " << d;
      EXPECT_GE(bound[d], u.stages[d].peak_memory_bytes) << what << " stage " << d;
      EXPECT_GE(bound[d], a.stages[d].peak_memory_bytes) << what << " stage " << d;
    }
    ++compared;
  }
  EXPECT_EQ(compared, 300);
}

// Parts measured at different sizes: the merged profile lists every size within the
// range all cover, so that it interpolates to the sums of the parts at every b.
TEST(Merge, ProfilesInterpolateToTheSumsOfTheParts) {
  std::vector<std::vector<Entry>> profiles = {
      {{1, 0.1, 0.2, 10, 1, 1}, {2, 0.15, 0.3, 20, 2, 2}, {4, 0.3, 0.5, 40, 4, 4}, {8, 0.5, 0.9, 80, 8, 8}},
      {{1, 0.2, 0.4, 5, 3, 3}, {3, 0.4, 0.9, 15, 9, 9}, {8, 1.1, 2.0, 40, 24, 24}},
      {{2, 0.3, 0.6, 7, 5, 5}, {6, 0.7, 1.3, 21, 15, 15}, {8, 0.9, 1.7, 28, 20, 20}},
      {{1, 0.1, 0.1, 1, 0, 0}, {8, 0.8, 0.8, 8, 0, 0}}};
  sim::Pipeline p = make_pipeline(profiles, {1e9, 2e9, 3e9, 4e9}, 48, 1e12, "sizes");
  p.stages[1].profile[1].backward_input_s = 0.6;
  p.stages[1].profile[1].weight_grad_bytes = 3;
  const sim::Pipeline merged = planner::merge_model_stages(p, 2);
  ASSERT_EQ(merged.num_stages(), 2);
  EXPECT_EQ(merged.stages[0].static_bytes, 3e9);
  EXPECT_EQ(merged.min_micro_batch_size(), 2);
  EXPECT_EQ(merged.max_micro_batch_size(), 8);
  for (int b : {2, 3, 4, 6, 8}) {
    const auto parts = p.at(b), m = merged.at(b);
    for (int g = 0; g < 2; ++g) {
      const sim::StageParams &x = parts[2 * g], &y = parts[2 * g + 1];
      const std::string what = fmt::format("b={} group {}", b, g);
      EXPECT_NEAR(m[g].fwd, x.fwd + y.fwd, 1e-12) << what;
      EXPECT_NEAR(m[g].bwd, x.bwd + y.bwd, 1e-12) << what;
      EXPECT_NEAR(m[g].bwd_input, x.bwd_input + y.bwd_input, 1e-12) << what;
      EXPECT_NEAR(m[g].bwd_weight, x.bwd_weight + y.bwd_weight, 1e-12) << what;
      EXPECT_NEAR(m[g].act, x.act + y.act, 1e-9) << what;
      EXPECT_NEAR(m[g].wgrad, x.wgrad + y.wgrad, 1e-9) << what;
      EXPECT_NEAR(m[g].out, y.out, 1e-9) << what;    // the last part's output
      EXPECT_NEAR(m[g].gout, x.gout, 1e-9) << what;  // the first part's gradient
      EXPECT_EQ(m[g].static_bytes, x.static_bytes + y.static_bytes);
    }
  }
}

TEST(Merge, PipelineFileReadsBackToTheSameNumbers) {
  Rng rng(99);
  const sim::Pipeline p = dyadic_pipeline(rng, 6, 4);
  for (const int J : {6, 3, 2, 1}) {
    const sim::Pipeline merged = planner::merge_model_stages(p, J);
    const sim::Pipeline back = sim::parse_pipeline(nlohmann::json::parse(planner::pipeline_file_json(merged).dump()),
                                                   "back.json");
    ASSERT_EQ(back.num_stages(), J);
    for (int b : {1, 2}) {
      const auto x = merged.at(b), y = back.at(b);
      for (int j = 0; j < J; ++j) {
        EXPECT_EQ(x[j].fwd, y[j].fwd);
        EXPECT_EQ(x[j].bwd, y[j].bwd);
        EXPECT_EQ(x[j].bwd_input, y[j].bwd_input);
        EXPECT_EQ(x[j].bwd_weight, y[j].bwd_weight);
        EXPECT_EQ(x[j].act, y[j].act);
        EXPECT_EQ(x[j].wgrad, y[j].wgrad);
        EXPECT_EQ(x[j].out, y[j].out);
        EXPECT_EQ(x[j].gout, y[j].gout);
        EXPECT_EQ(x[j].static_bytes, y[j].static_bytes);
        EXPECT_EQ(x[j].opt, y[j].opt);
      }
    }
  }
}

// A merged model stage runs as one op on its device, so it pays one op overhead, the
// parts' mean, not their sum; the pipeline file keeps it.
TEST(Merge, AMergedOpPaysTheOpOverheadOnce) {
  Rng rng(17);
  sim::Pipeline p = dyadic_pipeline(rng, 4, 4);
  const double o[] = {0.25, 0.75, 0.5, 0.5};
  for (int j = 0; j < 4; ++j) p.stages[j].op_overhead_s = o[j];
  const sim::Pipeline merged = planner::merge_model_stages(p, 2);
  const sim::Pipeline bare = planner::merge_model_stages(p.without_op_overhead(), 2);
  ASSERT_EQ(merged.num_stages(), 2);
  EXPECT_EQ(merged.stages[0].op_overhead_s, 0.5);
  EXPECT_EQ(merged.stages[1].op_overhead_s, 0.5);
  const sim::Pipeline back =
      sim::parse_pipeline(nlohmann::json::parse(planner::pipeline_file_json(merged).dump()), "back.json");
  for (int b : {1, 2}) {
    const auto x = merged.at(b), y = bare.at(b), z = back.at(b);
    for (int j = 0; j < 2; ++j) {
      EXPECT_EQ(x[j].fwd, y[j].fwd + 0.5) << b << " " << j;
      EXPECT_EQ(x[j].bwd, y[j].bwd + 0.5);
      EXPECT_EQ(x[j].bwd_input, y[j].bwd_input + 0.5);
      EXPECT_EQ(x[j].bwd_weight, y[j].bwd_weight + 0.5);
      EXPECT_EQ(x[j].act, y[j].act);
      EXPECT_EQ(x[j].fwd, z[j].fwd);
      EXPECT_EQ(x[j].bwd_weight, z[j].bwd_weight);
    }
  }
  // Without overhead the file has no such field (plans of profiled pipelines unchanged).
  EXPECT_FALSE(planner::pipeline_file_json(bare)["stages"][0].contains("op_overhead_s"));
}

TEST(Merge, UnmergedIsTheSamePipelineAndBadCountsAreErrors) {
  Rng rng(5);
  const sim::Pipeline p = dyadic_pipeline(rng, 4, 2);
  const sim::Pipeline same = planner::merge_model_stages(p, 4);
  EXPECT_EQ(same.num_stages(), 4);
  EXPECT_EQ(same.stages[2].profile[1].forward_s, p.stages[2].profile[1].forward_s);
  for (const int bad : {3, 0, 8}) {
    try {
      planner::merge_model_stages(p, bad);
      ADD_FAILURE() << bad << ": expected InputError";
    } catch (const InputError& e) {
      EXPECT_THAT(e.what(), HasSubstr("--devices")) << bad;
      EXPECT_EQ(std::string(e.what()).find('\n'), std::string::npos);
    }
  }
}

}  // namespace
}  // namespace plantest
