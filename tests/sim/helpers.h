// Shared helpers of the sim_test suite: toy pipelines, a seeded random source that
// does not depend on the standard library's distributions, temporary directories.
#pragma once

#include "../common/network_edit.h"
#include "../common/test_util.h"
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
    sim::ProfilePoint pt;
    pt.micro_batch_size = 1;
    pt.forward_s = s.fwd;
    pt.backward_s = s.bwd;
    pt.activation_bytes = s.act;
    pt.output_bytes = s.out;
    pt.grad_output_bytes = s.gout;
    spec.profile.push_back(pt);
    p.stages.push_back(spec);
  }
  return p;
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
