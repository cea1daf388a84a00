// Planner benchmark: the wall time of make_plan on a 32-stage pipeline.
//
// docs/performance.md. S = 32 stages, B = 2048, profile sizes 1..64 (7 sizes), on a
// constant network, then on a 10^5-point trace with 10 evaluated iterations; then with
// every schedule family: the same model cut into 64 model stages on 32 devices (v = 1
// and 2), on the constant network. Reports wall time, how many candidates were
// evaluated, and the time per simulated candidate.
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

// S stages (S = 32), or each of them cut in `parts` equal model stages.
sim::Pipeline make_pipeline(int S, int B, int parts = 1) {
  sim::Pipeline p;
  p.name = parts == 1 ? "bench-32" : "bench-32x" + std::to_string(parts);
  p.source = "(built in)";
  p.global_batch_size = B;
  p.memory_limit_bytes = 32.0 * (1ull << 30);
  for (int s = 0; s < S * parts; ++s) {
    sim::StageSpec st;
    st.static_bytes = 6.0e9 / parts;
    for (int b = 1; b <= 64; b *= 2) {
      sim::ProfilePoint pt;
      pt.micro_batch_size = b;
      // Small micro-batches use the GPU less well: time per sample falls with b.
      const double eff = 0.55 + 0.4 * (1.0 - 1.0 / b);
      pt.forward_s = 2.0e-3 * b / eff / parts;
      pt.backward_s = 2.0 * pt.forward_s;
      pt.activation_bytes = 1.2e8 * b / parts;
      pt.output_bytes = 4.0e6 * b;
      st.profile.push_back(pt);
    }
    p.stages.push_back(std::move(st));
  }
  return p;
}

struct Run {
  double wall = 0;
  std::size_t candidates = 0, evaluated = 0, refused = 0;
};

Run run(const sim::Pipeline& p, const sim::Network& n, int iterations, int devices = 0,
        std::vector<std::string> families = {}) {
  planner::PlanOptions o;
  o.global_batch_size = p.global_batch_size;
  o.memory_limit_bytes = *p.memory_limit_bytes;
  o.eval_iterations = iterations;
  o.devices = devices;
  o.families = std::move(families);
  const auto t0 = std::chrono::steady_clock::now();
  const planner::PlanResult r = planner::make_plan(p, n, o);
  Run out;
  out.wall = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  out.candidates = r.candidates.size();
  for (const auto& c : r.candidates) {
    out.evaluated += c.evaluated;
    out.refused += c.status == planner::Status::Refused;
  }
  return out;
}

}  // namespace

int main(int argc, char** argv) {
  adagrouper::cli::keep_freed_memory();
  namespace po = boost::program_options;
  po::options_description opts("plan_bench: planner wall time on a 32-stage pipeline\nOptions");
  opts.add_options()("help,h", "show this help")(
      "trace-points", po::value<int>()->default_value(100000), "points of the trace in the second run")(
      "eval-iterations", po::value<int>()->default_value(10), "evaluated iterations in the second run")(
      "only", po::value<std::string>(), "run one line: constant, families or trace (for profiling one)");
  po::variables_map vm;
  if (const int rc = adagrouper::cli::parse_main_options(argc, argv, opts, "plan_bench", vm); rc >= 0) return rc;
  const std::string only = vm.count("only") ? vm["only"].as<std::string>() : "";
  if (!only.empty() && only != "constant" && only != "families" && only != "trace") {
    fmt::print(stderr, "plan_bench: --only: constant, families or trace, got '{}'\n", only);
    return 2;
  }
  auto runs = [&](const char* line) { return only.empty() || only == line; };
  const int S = 32, B = 2048;
  const sim::Pipeline p = make_pipeline(S, B);

  const sim::Network constant = sim::Network::uniform(S, 10.0e9, 10.0e-6);
  if (runs("constant")) {
    const Run r1 = run(p, constant, 1);
    fmt::print("constant network        S={} B={} sizes 1..64: {:.3f} s wall, {} candidates simulated\n", S, B,
               r1.wall, r1.evaluated);
  }

  // Every family on 64 model stages, 32 devices: v = 1 (pairs merged) and v = 2.
  if (runs("families")) {
    const Run r3 = run(make_pipeline(S, B, 2), constant, 1, S, planner::extra_families());
    fmt::print("every family, 64 model stages on {} devices, v = 1, 2, constant network: {:.3f} s wall, {} candidates "
               "({} simulated, {} refused), {:.1f} ms per simulated candidate\n",
               S, r3.wall, r3.candidates, r3.evaluated, r3.refused,
               1e3 * r3.wall / static_cast<double>(r3.evaluated));
  }
  if (!runs("trace")) return 0;

  std::mt19937_64 rng(7);
  const int points = vm["trace-points"].as<int>();
  std::vector<double> t(points), v(points);
  for (int i = 0; i < points; ++i) {
    t[i] = i * 0.01;
    v[i] = (rng() % 4 == 0) ? 1.0e9 * (0.5 + uniform01(rng)) : 1.0e10 * (0.5 + 0.5 * uniform01(rng));
  }
  sim::Network traced = constant;
  const sim::RateTrace trace = sim::RateTrace::piecewise(std::move(t), std::move(v), points * 0.01);
  const sim::RatePtr shared = std::make_shared<const sim::RateTrace>(trace);
  traced.rewrite_channels([&](sim::ChannelSpec& ch) { ch.rate = shared; });
  const int iters = vm["eval-iterations"].as<int>();
  const Run r2 = run(p, traced, iters);
  fmt::print("{}-point trace, {} iterations: {:.3f} s wall, {} candidates simulated\n", points, iters, r2.wall,
             r2.evaluated);
  return 0;
}
