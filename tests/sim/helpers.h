// Shared helpers of the sim_test suite: toy pipelines, a seeded random source that
// does not depend on the standard library's distributions, temporary directories.
#pragma once

#include "../common/network_edit.h"
#include "../common/test_util.h"
#include "../common/sim_inputs.h"
#include <atomic>
#include <cstdint>
#include <filesystem>
#include <fstream>
#include <optional>
#include <random>
#include <string>
#include <vector>

#include <unistd.h>

#include <nlohmann/json.hpp>

#include "eval/evaluator.h"
#include "json_util.h"
#include "sim.h"

namespace simtest {

using adagrouper::InputError;
using adagrouper::SimError;
namespace sim = adagrouper::sim;
using testutil::edit_channel;
using testutil::Rng;
using testutil::TempDir;

// A pipeline JSON document with S identical stages and one profile entry (b = 1).
inline nlohmann::json uniform_pipeline_json(int S, int global_batch, double fwd, double bwd, double out,
                                            double act = 0.0, double static_bytes = 0.0) {
  nlohmann::json stages = nlohmann::json::array();
  for (int s = 0; s < S; ++s) {
    stages.push_back({{"static_bytes", static_bytes},
                      {"profile",
                       {{{"micro_batch_size", 1},
                         {"forward_s", fwd},
                         {"backward_s", bwd},
                         {"activation_bytes", act},
                         {"output_bytes", out}}}}});
  }
  return {{"name", "toy"}, {"global_batch_size", global_batch}, {"stages", stages}};
}

inline sim::Pipeline uniform_pipeline(int S, int global_batch, double fwd, double bwd, double out,
                                      double act = 0.0, double static_bytes = 0.0) {
  return sim::parse_pipeline(uniform_pipeline_json(S, global_batch, fwd, bwd, out, act, static_bytes),
                             "toy.json");
}

// A pipeline built directly from per-stage parameters (one profile entry, b = 1).
inline sim::Pipeline pipeline_from(const std::vector<sim::StageParams>& st, int global_batch) {
  sim::Pipeline p;
  p.name = "direct";
  p.source = "direct.json";
  p.global_batch_size = global_batch;
  for (const auto& s : st) {
    sim::StageSpec spec;
    spec.static_bytes = s.static_bytes;
    spec.optimizer_s = s.opt;
    sim::ProfilePoint pt = testutil::profile_point(1, s.fwd, s.bwd, s.act, s.out, s.gout);
    if (s.bwd_input > 0 || s.bwd_weight > 0) {  // a split backward given explicitly
      pt.backward_input_s = s.bwd_input;
      pt.backward_weight_s = s.bwd_weight;
      pt.weight_grad_bytes = s.wgrad;
    }
    spec.profile.push_back(pt);
    p.stages.push_back(spec);
  }
  return p;
}



// A trace of random (non-dyadic) values, sometimes zero for a while, sometimes repeating.
inline sim::RateTrace rough_trace(Rng& rng, double scale) {
  if (rng.chance(0.25)) return sim::RateTrace::constant(scale * (0.1 + rng.uniform()));
  const int n = rng.range(2, 40);
  std::vector<double> times{0.0}, values;
  for (int i = 1; i < n; ++i) times.push_back(times.back() + 0.01 + rng.uniform() * 0.7);
  for (int i = 0; i < n; ++i) values.push_back(rng.chance(0.15) ? 0.0 : scale * (0.05 + rng.uniform()));
  double repeat = rng.chance(0.5) ? times.back() + 0.01 + rng.uniform() : 0.0;
  if (values.back() == 0) values.back() = scale * 0.3;  // never zero forever
  return sim::RateTrace::piecewise(times, values, repeat);
}

// Two results of the same scenario, field by field and exactly (not within a tolerance).
inline void expect_same(const sim::SimResult& a, const sim::SimResult& b) {
  EXPECT_EQ(a.iteration_times_s, b.iteration_times_s);  // exact, not within a tolerance
  EXPECT_EQ(a.total_time_s, b.total_time_s);
  ASSERT_EQ(a.stages.size(), b.stages.size());
  for (std::size_t s = 0; s < a.stages.size(); ++s) {
    EXPECT_EQ(a.stages[s].busy_s, b.stages[s].busy_s) << "stage " << s;
    EXPECT_EQ(a.stages[s].peak_memory_bytes, b.stages[s].peak_memory_bytes) << "stage " << s;
    EXPECT_EQ(a.stages[s].peak_inflight, b.stages[s].peak_inflight) << "stage " << s;
  }
  ASSERT_EQ(a.channels.size(), b.channels.size());
  for (std::size_t c = 0; c < a.channels.size(); ++c) {
    EXPECT_EQ(a.channels[c].busy_s, b.channels[c].busy_s) << "channel " << c;
    EXPECT_EQ(a.channels[c].peak_queue_depth, b.channels[c].peak_queue_depth) << "channel " << c;
  }
  EXPECT_EQ(a.compute_ops, b.compute_ops);
  EXPECT_EQ(a.transfers, b.transfers);
  EXPECT_EQ(sim::summary_json(a).dump(), sim::summary_json(b).dump());
}

// Whether the dataflow evaluator finishes sc by itself: simulate() hides its giving up
// (a stage it never woke, say) by running the event engine instead.
inline bool dataflow_finishes(const sim::Scenario& sc) {
  return sim::eval::run_dataflow(sc, sim::eval::build_program(sc), {}).has_value();
}

// Ops of one stage as a string "F0 F1 B0 ...", for readable comparisons.
inline std::string order_string(const std::vector<sim::Op>& ops) {
  std::string s;
  for (const auto& op : ops) {
    if (!s.empty()) s += ' ';
    s += sim::op_name(op);
  }
  return s;
}

}  // namespace simtest
