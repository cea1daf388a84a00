// Simulator throughput benchmark (docs/performance.md).
//
// The scenario of docs/performance.md: 64 model stages, M = 1024 micro-batches, kFkB
// with k = 4, every channel with its own 10,000-point bandwidth trace. Reports
// simulated ops per second (compute ops + transfers), wall time and peak RSS. Run it
// once with 20 and once with 200 iterations (separate processes, since peak RSS is
// per process) to see that memory does not grow with iterations. Any schedule runs on
// the same model stages (64 / v stages with v model stages each), so that every
// schedule family is measured at the same op count.
#include <sys/resource.h>

#include <chrono>
#include <cstdint>
#include <cstdio>
#include <random>
#include <string>
#include <vector>

#include <boost/program_options.hpp>
#include <fmt/format.h>

#include "../cli/allocator.h"
#include "../cli/cli_util.h"
#include "../cli/schedule_options.h"
#include "sim.h"

using namespace adagrouper::sim;

namespace {

double uniform01(std::mt19937_64& rng) { return static_cast<double>(rng() >> 11) * 0x1.0p-53; }

RateTrace random_trace(std::mt19937_64& rng, int points, double spacing_s) {
  std::vector<double> t(points), v(points);
  for (int i = 0; i < points; ++i) {
    t[i] = i * spacing_s;
    // 1 to 12.5 GB/s, with one point in eight preempted down to 5-10%.
    const double high = 1.0e9 + 11.5e9 * uniform01(rng);
    v[i] = (rng() % 8 == 0) ? high * (0.05 + 0.05 * uniform01(rng)) : high;
  }
  return RateTrace::piecewise(std::move(t), std::move(v), points * spacing_s);
}

long peak_rss_kib() {
  rusage ru{};
  getrusage(RUSAGE_SELF, &ru);
  return ru.ru_maxrss;
}

}  // namespace

int main(int argc, char** argv) {
  adagrouper::cli::keep_freed_memory();
  namespace po = boost::program_options;
  po::options_description opts("sim_bench: simulator throughput on a large pipeline\nOptions");
  // clang-format off
  opts.add_options()
    ("help,h", "show this help")
    ("model-stages", po::value<int>()->default_value(64), "J: model stages (the pipeline runs J / v stages)")
    ("micro-batches", po::value<int>()->default_value(1024), "M")
    ("iterations", po::value<int>()->default_value(20), "iterations")
    ("trace-points", po::value<int>()->default_value(10000), "points per channel trace")
    ("repeat", po::value<int>()->default_value(3), "runs; the best is reported")
    ("seed", po::value<std::uint64_t>()->default_value(1), "trace seed")
    ("evaluator", po::value<std::string>()->default_value("dataflow"),
     (evaluator_names() + " (simulate --help says what each is)").c_str());
  // clang-format on
  adagrouper::cli::add_schedule_options(opts);
  po::variables_map vm;
  if (const int rc = adagrouper::cli::parse_main_options(argc, argv, opts, "sim_bench", vm); rc >= 0) return rc;
  const int J = vm["model-stages"].as<int>(), M = vm["micro-batches"].as<int>();
  const int iterations = vm["iterations"].as<int>(), points = vm["trace-points"].as<int>();
  const std::string evaluator = vm["evaluator"].as<std::string>();
  SimOptions options;
  Schedule schedule;
  try {
    options.evaluator = parse_evaluator(evaluator);
    ScheduleSpec spec = vm.count("schedule") ? adagrouper::cli::schedule_spec_option(vm, "sim_bench")
                                             : ScheduleSpec::named("kfkb", 4);
    if (!vm.count("schedule") && vm.count("k")) spec.k = vm["k"].as<int>();
    schedule = make_schedule(spec, adagrouper::cli::stages_for(J, spec.virtual_stages, "the benchmark"), M);
  } catch (const adagrouper::InputError& e) {
    std::fprintf(stderr, "sim_bench: %s\n", e.what());
    return 2;
  }
  const int S = schedule.num_stages();

  std::mt19937_64 rng(vm["seed"].as<std::uint64_t>());
  Scenario sc;
  sc.pipeline_name = "bench";
  sc.micro_batch_size = 1;
  sc.global_batch_size = M;
  sc.iterations = iterations;
  sc.model_stages.resize(J);
  for (int j = 0; j < J; ++j) {
    StageParams& p = sc.model_stages[j];
    p.fwd = 1.0e-3 * (0.9 + 0.2 * uniform01(rng));
    p.bwd = 2.0 * p.fwd;
    p.bwd_input = p.bwd_weight = p.fwd;
    p.act = 2.0e8;
    p.wgrad = 1.0e8;
    p.out = j + 1 < J ? 8.0e6 : 0.0;  // 8 MB activations: ~1 ms at 8 GB/s
    p.gout = j > 0 ? 8.0e6 : 0.0;
    p.static_bytes = 4.0e9;
  }
  sc.network = Network::uniform(S, 1.0, 5.0e-6);
  // A trace on every channel a loop or V placement uses: neighbours, and S-1 <-> 0.
  sc.network.rewrite_channels([&](ChannelSpec& ch) {
    const bool used = ch.to == ch.from + 1 || ch.from == ch.to + 1 || (ch.from + ch.to == S - 1 && ch.from * ch.to == 0);
    if (used) ch.set_rate(random_trace(rng, points, 0.01));
  });
  sc.schedule = std::move(schedule);

  double best = 1e300;
  SimResult r;
  for (int rep = 0; rep < vm["repeat"].as<int>(); ++rep) {
    const auto t0 = std::chrono::steady_clock::now();
    r = simulate(sc, options);
    const double wall = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
    best = std::min(best, wall);
  }
  const double ops = static_cast<double>(r.compute_ops + r.transfers);
  fmt::print("scenario   {} model stages on S={} stages, M={}, {}, iterations={} trace points/channel={}, {} evaluator\n",
             J, S, M, sc.schedule.spec.label(), iterations, points, evaluator);
  fmt::print("simulated  {} compute ops + {} transfers = {:.0f} ops, {:.3f} s simulated time\n", r.compute_ops,
             r.transfers, ops, r.total_time_s);
  fmt::print("wall       {:.3f} s (best of {})\n", best, vm["repeat"].as<int>());
  fmt::print("speed      {:.1f} million ops/s\n", ops / best / 1e6);
  fmt::print("peak RSS   {:.1f} MiB\n", peak_rss_kib() / 1024.0);
  return 0;
}
