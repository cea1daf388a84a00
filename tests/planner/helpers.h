// Shared helpers of the planner_test suite.
//
// Seeded randomness drawn by hand, pipelines with several profile sizes, random
// networks, and a runner for build/adagrouper.
#pragma once

#include "../common/network_edit.h"
#include "../common/test_util.h"
#include "../common/sim_inputs.h"
#include "../common/cli_runner.h"

#include <sys/wait.h>

#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <cstdint>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <optional>
#include <random>
#include <sstream>
#include <string>
#include <vector>

#include <fmt/format.h>
#include <gmock/gmock.h>
#include <nlohmann/json.hpp>

#include "planner.h"
#include "sim.h"

namespace plantest {

namespace fs = std::filesystem;
namespace sim = adagrouper::sim;
namespace planner = adagrouper::planner;
using adagrouper::InputError;
using json = nlohmann::json;
using ::testing::HasSubstr;
using testutil::Rng;
using testutil::TempDir;

inline const fs::path kRoot = SOURCE_ROOT;
// A shipped pipeline more than one test file runs (paths from the source root).
inline const std::string kUnet = "configs/pipelines/unet-4stage-v100.json";

// A candidate in one line, for failure messages: label, sizes, status, memory, time, reason.
inline std::string describe(const planner::Candidate& c) {
  return fmt::format("{} k={} b={} M={} status={} mem={} t={} ({})", c.spec.label(), c.k, c.micro_batch_size,
                     c.micro_batches, planner::to_string(c.status), c.peak_model_memory(), c.predicted_iteration_time_s,
                     c.reason);
}

// A bandwidth or speed trace: constant, or piecewise (zero segments allowed) with a
// repeat at probability 0.6; never zero forever.
inline sim::RateTrace random_trace(Rng& rng, int lo_units, int hi_units, double denom) {
  return testutil::random_trace(rng, lo_units, hi_units, denom, 0.6);
}

// One profile entry of a generated pipeline.
struct Entry {
  int b;
  double fwd, bwd, act, out, gout;
};

// A pipeline from per-stage profiles (entries sorted by b) and static bytes.
inline sim::Pipeline make_pipeline(const std::vector<std::vector<Entry>>& profiles, const std::vector<double>& statics,
                                   int global_batch, double memory_limit, const std::string& name = "gen") {
  sim::Pipeline p;
  p.name = name;
  p.source = name + ".json";
  p.global_batch_size = global_batch;
  p.memory_limit_bytes = memory_limit;
  for (std::size_t s = 0; s < profiles.size(); ++s) {
    sim::StageSpec spec;
    spec.static_bytes = statics[s];
    for (const Entry& e : profiles[s])
      spec.profile.push_back(testutil::profile_point(e.b, e.fwd, e.bwd, e.act, e.out, e.gout));
    p.stages.push_back(spec);
  }
  return p;
}

// A random pipeline with several measured sizes: costs grow with b (durations
// sub-linearly, bytes linearly).
inline sim::Pipeline random_pipeline(Rng& rng, int S, const std::vector<int>& sizes, int global_batch,
                                     double memory_limit) {
  std::vector<std::vector<Entry>> profiles(S);
  std::vector<double> statics(S);
  for (int s = 0; s < S; ++s) {
    statics[s] = rng.dyadic(0, 64, 1) * 1e8;
    const double f1 = rng.dyadic(1, 16, 8), b1 = rng.dyadic(1, 32, 8);
    const double a1 = rng.dyadic(1, 16, 1) * 1e8, o1 = rng.dyadic(0, 16, 1) * 1e7;
    for (int b : sizes) {
      const double scale = 0.5 + 0.5 * b;  // fixed overhead + per-sample cost
      profiles[s].push_back({b, f1 * scale, b1 * scale, a1 * b, o1 * b, o1 * b});
    }
  }
  return make_pipeline(profiles, statics, global_batch, memory_limit);
}

// A pipeline of J model stages with dyadic numbers (sums stay exact), profiled at b = 1
// and 2, some with split-backward fields and gradients of their own.
inline sim::Pipeline dyadic_pipeline(Rng& rng, int J, int B) {
  sim::Pipeline p;
  p.name = "dyadic";
  p.source = "dyadic.json";
  p.global_batch_size = B;
  p.memory_limit_bytes = 1e18;
  const bool own_gout = rng.chance(0.5);
  for (int j = 0; j < J; ++j) {
    sim::StageSpec st;
    st.static_bytes = rng.dyadic(0, 64, 1);
    st.optimizer_s = rng.chance(0.5) ? 0.0 : rng.dyadic(0, 8, 4);
    for (const int b : {1, 2}) {
      sim::ProfilePoint pt;
      pt.micro_batch_size = b;
      pt.forward_s = b * rng.dyadic(1, 16, 8);
      pt.backward_s = b * rng.dyadic(2, 32, 8);
      pt.activation_bytes = b * rng.dyadic(0, 16, 1);
      pt.output_bytes = b * rng.dyadic(0, 16, 4);
      if (own_gout) pt.grad_output_bytes = b * rng.dyadic(0, 16, 4);
      if (rng.chance(0.5)) {
        pt.backward_input_s = pt.backward_s * rng.dyadic(1, 3, 4);
        pt.weight_grad_bytes = pt.activation_bytes * rng.dyadic(0, 4, 4);
      }
      st.profile.push_back(pt);
    }
    p.stages.push_back(st);
  }
  return p;
}

// A network of D stages: every channel with a random latency, capacity (0: unlimited)
// and rate trace (or none), some stages with a speed trace.
inline sim::Network random_device_network(Rng& rng, int D) {
  sim::Network net = sim::Network::uniform(D, std::nullopt, 0.0);
  net.rewrite_channels([&](sim::ChannelSpec& ch) {
    ch.latency_s = rng.chance(0.5) ? 0.0 : rng.dyadic(0, 4, 4);
    ch.capacity = rng.range(0, 3);
    if (rng.chance(0.8)) ch.set_rate(random_trace(rng, 1, 16, 4));
  });
  for (int d = 0; d < D; ++d)
    if (rng.chance(0.3)) net.set_speed(d, random_trace(rng, 1, 8, 4));
  return net;
}

// Network with every channel at `rate`, and the given traces replacing some of them.
inline sim::Network constant_network(int S, std::optional<double> rate, double latency = 0.0) {
  return sim::Network::uniform(S, rate, latency);
}

// ---- command line ----------------------------------------------------------------

using clirunner::Outcome;
using clirunner::slurp;

// Output of a shell command (stdout only).
inline std::string shell(const std::string& cmd) {
  std::FILE* p = ::popen(cmd.c_str(), "r");
  std::string out;
  if (!p) return out;
  char buf[4096];
  std::size_t n;
  while ((n = std::fread(buf, 1, sizeof buf, p)) > 0) out.append(buf, n);
  ::pclose(p);
  return out;
}


// Runs `adagrouper ARGS` from the source root; stderr goes to a file in `dir`.
inline Outcome run_cli(const std::string& args, const fs::path& dir) { return clirunner::run_adagrouper(args, dir); }

}  // namespace plantest
