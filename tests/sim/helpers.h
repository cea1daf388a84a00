// Shared helpers of the sim_test suite: toy pipelines, a seeded random source that
// does not depend on the standard library's distributions, temporary directories.
#pragma once

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

// Seeded randomness drawn by hand (no std::uniform_*_distribution, whose output is
// implementation-defined), so a seed means the same scenario everywhere.
class Rng {
 public:
  explicit Rng(std::uint64_t seed) : g_(seed) {}
  double uniform() { return static_cast<double>(g_() >> 11) * 0x1.0p-53; }  // [0, 1)
  std::uint64_t below(std::uint64_t n) { return g_() % n; }                 // [0, n)
  int range(int lo, int hi) { return lo + static_cast<int>(below(static_cast<std::uint64_t>(hi - lo + 1))); }
  bool chance(double p) { return uniform() < p; }
  // A multiple of 1/denominator in [lo, hi] (exactly representable for powers of 2).
  double dyadic(int lo_units, int hi_units, double denominator) { return range(lo_units, hi_units) / denominator; }

 private:
  std::mt19937_64 g_;
};

// A fresh directory under the system temporary directory, removed on destruction.
class TempDir {
 public:
  TempDir() {
    static std::atomic<int> counter{0};
    std::random_device rd;
    path_ = std::filesystem::temp_directory_path() /
            ("adagrouper_sim_test_" + std::to_string(::getpid()) + "_" + std::to_string(counter++) + "_" +
             std::to_string(rd()));
    std::filesystem::create_directories(path_);
  }
  ~TempDir() {
    std::error_code ec;
    std::filesystem::remove_all(path_, ec);
  }
  TempDir(const TempDir&) = delete;
  TempDir& operator=(const TempDir&) = delete;

  const std::filesystem::path& path() const { return path_; }
  std::filesystem::path write(const std::string& name, const std::string& content) const {
    const auto p = path_ / name;
    std::filesystem::create_directories(p.parent_path());
    std::ofstream out(p, std::ios::binary);
    out << content;
    return p;
  }
  std::filesystem::path write(const std::string& name, const nlohmann::json& doc) const {
    return write(name, doc.dump(2));
  }

 private:
  std::filesystem::path path_;
};

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
