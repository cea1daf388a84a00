// Trace benchmarks (docs/performance.md, "Traces"):
//
// 1. Loading a 1,000,000-point CSV trace with traces::load_trace_file: seconds, bytes
//    per second and points per second (target: under 1 s).
// 2. Simulation speed when every channel follows its own 10^6-point trace instead of
//    a constant rate (target: at most 10 % slower). The engine queries rates through
//    RateCursor, whose cost per query does not depend on the trace's length.
#include <sys/resource.h>
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdint>
#include <cstdio>
#include <filesystem>
#include <string>
#include <vector>

#include <boost/program_options.hpp>
#include <fmt/format.h>

#include "../cli/allocator.h"
#include "../cli/cli_util.h"
#include "sim.h"
#include "traces.h"

using namespace adagrouper;
namespace fs = std::filesystem;

namespace {

using Clock = std::chrono::steady_clock;

double seconds_since(Clock::time_point t0) { return std::chrono::duration<double>(Clock::now() - t0).count(); }

// A 10^6-point bandwidth trace with points every spacing_s, repeating. random: 1 to
// 12.5 GB/s, one point in eight preempted down to 5-10 %; otherwise every point at
// `flat` B/s (the same network as the constant rate, so that only the cost of the rate
// queries differs).
sim::RateTrace make_trace(traces::Rng& rng, int points, double spacing_s, bool random, double flat) {
  std::vector<double> t(points), v(points);
  for (int i = 0; i < points; ++i) {
    t[i] = i * spacing_s;
    if (!random) {
      v[i] = flat;
      continue;
    }
    const double high = 1.0e9 + 11.5e9 * rng.uniform01();
    v[i] = rng.uniform01() < 0.125 ? high * (0.05 + 0.05 * rng.uniform01()) : high;
  }
  return sim::RateTrace::piecewise(std::move(t), std::move(v), points * spacing_s);
}

long peak_rss_kib() {
  rusage ru{};
  getrusage(RUSAGE_SELF, &ru);
  return ru.ru_maxrss;
}

void bench_load(int points, int repeat) {
  traces::Rng rng(1);
  traces::TraceBuilder b;
  b.reserve(points);
  for (int i = 0; i < points; ++i) b.add(i * 0.01, std::round(1e9 + 11.5e9 * rng.uniform01()));
  const traces::Trace t = b.finish(points * 0.01);
  const std::string csv = traces::to_csv(t);
  const fs::path path = fs::temp_directory_path() / fmt::format("trace_bench-{}.csv", ::getpid());
  write_file_atomic(path, csv);
  double best = 1e300;
  std::size_t loaded = 0;
  for (int r = 0; r < repeat; ++r) {
    const auto t0 = Clock::now();
    const traces::Loaded l = traces::load_trace_file(path);
    best = std::min(best, seconds_since(t0));
    loaded = l.trace.size();
  }
  fs::remove(path);
  fmt::print("load CSV   {} points ({} loaded), {:.1f} MB: {:.3f} s (best of {}), {:.0f} MB/s, {:.1f} M points/s\n",
             points, loaded, csv.size() / 1e6, best, repeat, csv.size() / best / 1e6, points / best / 1e6);
}

struct SimRun {
  double wall = 0, ops = 0;
};

SimRun bench_sim(const sim::Scenario& sc, int repeat) {
  SimRun out{1e300, 0};
  for (int r = 0; r < repeat; ++r) {
    const auto t0 = Clock::now();
    const sim::SimResult res = sim::simulate(sc);
    out.wall = std::min(out.wall, seconds_since(t0));
    out.ops = static_cast<double>(res.compute_ops + res.transfers);
  }
  return out;
}

}  // namespace

int main(int argc, char** argv) {
  adagrouper::cli::keep_freed_memory();
  namespace po = boost::program_options;
  po::options_description opts("trace_bench: loading a large CSV trace, and simulating with 10^6-point traces\nOptions");
  // clang-format off
  opts.add_options()
    ("help,h", "show this help")
    ("csv-points", po::value<int>()->default_value(1000000), "points of the CSV trace to load")
    ("stages", po::value<int>()->default_value(8), "S")
    ("micro-batches", po::value<int>()->default_value(512), "M")
    ("k", po::value<int>()->default_value(4), "kfkb group size")
    ("iterations", po::value<int>()->default_value(200), "iterations")
    ("trace-points", po::value<int>()->default_value(1000000), "points per channel trace")
    ("spacing-s", po::value<std::vector<double>>()->multitoken()->default_value({0.01, 0.001}, "0.01 0.001"),
       "time between trace points; one run per value")
    ("repeat", po::value<int>()->default_value(3), "runs per measurement; the best is reported");
  // clang-format on
  po::variables_map vm;
  if (const int rc = adagrouper::cli::parse_main_options(argc, argv, opts, "trace_bench", vm); rc >= 0) return rc;
  const int repeat = vm["repeat"].as<int>();
  bench_load(vm["csv-points"].as<int>(), repeat);

  const int S = vm["stages"].as<int>(), M = vm["micro-batches"].as<int>(), k = vm["k"].as<int>();
  const int points = vm["trace-points"].as<int>();
  traces::Rng rng(7);
  sim::Scenario sc;
  sc.pipeline_name = "trace-bench";
  sc.micro_batch_size = 1;
  sc.global_batch_size = M;
  sc.iterations = vm["iterations"].as<int>();
  sc.model_stages.resize(S);
  for (int s = 0; s < S; ++s) {
    sim::StageParams& p = sc.model_stages[s];
    p.fwd = 1.0e-3 * (0.9 + 0.2 * rng.uniform01());
    p.bwd = 2.0 * p.fwd;
    p.act = 2.0e8;
    p.out = s + 1 < S ? 8.0e6 : 0.0;  // 8 MB: about 1 ms at 8 GB/s
    p.gout = s > 0 ? 8.0e6 : 0.0;
    p.static_bytes = 4.0e9;
  }
  sc.schedule = sim::make_kfkb(S, M, k);
  const double flat = 6.0e9;
  sc.network = sim::Network::uniform(S, flat, 5.0e-6);
  const SimRun base = bench_sim(sc, repeat);
  fmt::print("scenario   S={} M={} kfkb k={} iterations={}, {} channels, {:.0f} ops\n", S, M, k, sc.iterations,
             2 * (S - 1), base.ops);
  fmt::print("simulate   constant {:.0e} B/s on every channel: {:.3f} s, {:.2f} M ops/s\n", flat, base.wall,
             base.ops / base.wall / 1e6);
  for (double spacing : vm["spacing-s"].as<std::vector<double>>()) {
    for (bool random : {false, true}) {
      const auto t0 = Clock::now();
      sc.network.rewrite_channels([&](sim::ChannelSpec& ch) {  // the channels the pipeline uses: neighbours
        if (ch.to == ch.from + 1 || ch.from == ch.to + 1) ch.set_rate(make_trace(rng, points, spacing, random, flat));
      });
      const double build = seconds_since(t0);
      const SimRun tr = bench_sim(sc, repeat);
      fmt::print("simulate   {} points every {} s, {}: {:.3f} s, {:.2f} M ops/s, {:+.1f} % time vs constant "
                 "(traces built in {:.2f} s)\n",
                 points, spacing, random ? "random values" : "all at the constant", tr.wall, tr.ops / tr.wall / 1e6,
                 100.0 * (tr.wall / base.wall - 1.0), build);
    }
  }
  fmt::print("peak RSS   {:.0f} MiB\n", peak_rss_kib() / 1024.0);
  return 0;
}
