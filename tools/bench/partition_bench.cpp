// Partition benchmark: the wall time of the DP and of partition() on 200 layers into 32 stages.
//
// docs/performance.md. Two models: a GPT-like one (embedding, 198 equal transformer
// layers, head) and a heterogeneous one whose layers differ in time (x0.5 to x1.5),
// activations and message size (U-Net-like skips), under a memory limit that binds, on a
// constant 25 Gb/s network, 1F1B at b = 2 with M = 128. Reports the wall time of the DP
// alone and of `partition()` (DP, candidates, and the simulation of the best --refine
// cuts), best of --repeat runs.
#include <chrono>
#include <cstdint>
#include <random>

#include <boost/program_options.hpp>
#include <fmt/format.h>

#include "../cli/allocator.h"
#include "../cli/cli_util.h"
#include "planner.h"

using namespace adagrouper;

namespace {

double uniform01(std::mt19937_64& rng) { return static_cast<double>(rng() >> 11) * 0x1.0p-53; }

planner::Model make_model(int L, bool heterogeneous, std::uint64_t seed) {
  std::mt19937_64 rng(seed);
  planner::Model m;
  m.name = heterogeneous ? "bench-hetero-200" : "bench-gpt-200";
  m.source_file = "(built in)";
  m.optimizer_bytes_per_parameter_byte = 7;
  m.device.memory_bytes = 32.0 * (1ull << 30);
  m.device.reserved_bytes = 1e9;
  for (int l = 0; l < L; ++l) {
    planner::Layer layer;
    layer.name = fmt::format("layer {}", l);
    const bool edge = l == 0 || l == L - 1;
    const double scale = heterogeneous ? 0.5 + uniform01(rng) : (edge ? 0.3 : 1.0);
    layer.parameter_bytes = (heterogeneous ? 0.5 + uniform01(rng) : 1.0) * 1.6e8;
    layer.optimizer_s = layer.parameter_bytes * 19 / 7e11;
    const double out = heterogeneous ? (uniform01(rng) < 0.3 ? 4.0 : 1.0) * (0.5 + uniform01(rng)) * 6.5e6 : 6.5e6;
    for (int b : {1, 2, 4}) {
      planner::LayerPoint p;
      p.micro_batch_size = b;
      p.forward_s = scale * 4e-3 * b * (0.8 + 0.2 / b);
      p.backward_s = 2.2 * p.forward_s;
      p.activation_bytes = (heterogeneous ? 0.3 + 1.4 * uniform01(rng) : 1.0) * 1.1e8 * b;
      p.output_bytes = out * b;
      layer.profile.push_back(p);
    }
    m.layers.push_back(std::move(layer));
  }
  return m;
}

template <typename F>
double best_of(int repeat, F&& f) {
  double best = 1e300;
  for (int i = 0; i < repeat; ++i) {
    const auto t0 = std::chrono::steady_clock::now();
    f();
    best = std::min(best, std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count());
  }
  return best;
}

}  // namespace

int main(int argc, char** argv) {
  adagrouper::cli::keep_freed_memory();
  namespace po = boost::program_options;
  po::options_description opts("partition_bench: 200 layers into 32 stages (DP and refinement)\nOptions");
  opts.add_options()("help,h", "show this help")(
      "layers", po::value<int>()->default_value(200), "layers")(
      "stages", po::value<int>()->default_value(32), "stages")(
      "refine", po::value<int>()->default_value(8), "cuts simulated after the DP")(
      "memory-limit-gib", po::value<double>()->default_value(32), "memory limit per stage (GiB)")(
      "repeat", po::value<int>()->default_value(5), "runs; the best is reported");
  po::variables_map vm;
  if (const int rc = adagrouper::cli::parse_main_options(argc, argv, opts, "partition_bench", vm); rc >= 0) return rc;
  const int L = vm["layers"].as<int>(), S = vm["stages"].as<int>(), repeat = std::max(1, vm["repeat"].as<int>());
  try {
    for (const bool hetero : {false, true}) {
      const planner::Model m = make_model(L, hetero, 20261129);
      planner::PartitionOptions o;
      o.stages = S;
      o.micro_batch_size = 2;
      o.global_batch_size = 256;
      o.memory_limit_bytes = vm["memory-limit-gib"].as<double>() * (1ull << 30);
      o.refine = vm["refine"].as<int>();
      const sim::Network net = sim::Network::uniform(S, 25e9 / 8, 5e-6);
      std::size_t front = 0;
      double optimum = 0;
      const double dp = best_of(repeat, [&] {
        const planner::PartitionProblem problem(m, net, o);
        const auto cuts = problem.solve();
        front = cuts.size();
        optimum = cuts.empty() ? 0.0 : problem.evaluate(cuts.front()).predicted_s;
      });
      planner::PartitionResult r;
      const double full = best_of(repeat, [&] { r = planner::partition(m, net, o); });
      std::size_t simulated = 0;
      for (const auto& c : r.candidates) simulated += c.simulated_s.has_value();
      double peak = 0;
      for (double x : r.chosen.memory_bytes) peak = std::max(peak, x);
      fmt::print(
          "{}: {} layers into {} stages, 1f1b b = 2, M = 128: DP {:.4f} s ({} Pareto cuts, optimum {:.4f} s), "
          "partition {:.4f} s ({} candidates, {} simulated); chosen: predicted {:.4f} s, simulated {:.4f} s per "
          "iteration, peak {:.2f} GiB of {:.2f}\n",
          m.name, L, S, dp, front, optimum, full, r.candidates.size(), simulated, r.chosen.predicted_s,
          r.chosen.simulated_s.value_or(0.0), peak / (1 << 30), o.memory_limit_bytes / (1 << 30));
    }
  } catch (const std::exception& e) {
    fmt::print(stderr, "partition_bench: {}\n", e.what());
    return 1;
  }
  return 0;
}
