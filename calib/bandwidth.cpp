// adagrouper-calib bandwidth: an nccl-tests-like table of the p2p path.
#include <cstdio>

#include <fmt/format.h>

#include "error.h"
#include "modes.h"

namespace adagrouper::calib {

int run_bandwidth(const Options& opt, const Mpi& mpi, Watchdog& dog) {
  std::string error;
  if (mpi.size() < 2) error = "bandwidth needs at least 2 ranks (mpirun -np 2 or more)";
  if (stop_on_error(mpi, opt, error)) return 2;
  const std::unique_ptr<Backend> be = make_backend_or_stop(opt, mpi, dog);
  if (!be) return 1;

  std::vector<ChannelSpec> specs;
  for (int r = 0; r + 1 < mpi.size(); ++r) specs.push_back({r, r + 1});
  std::uint64_t largest = 1;
  for (const std::uint64_t s : opt.sizes) largest = std::max(largest, s);
  auto channels = be->connect(specs, static_cast<std::size_t>(largest));
  Channel* send = nullptr;
  Channel* recv = nullptr;
  for (auto& c : channels) (c->sender() ? send : recv) = c.get();
  auto send_stream = be->create_stream(), recv_stream = be->create_stream();
  auto s0 = be->create_event(), s1 = be->create_event(), r0 = be->create_event(), r1 = be->create_event();

  std::unique_ptr<JsonlWriter> out;
  if (mpi.rank() == 0) {
    out = std::make_unique<JsonlWriter>(opt.output_dir / "bandwidth.jsonl");
    nlohmann::ordered_json line = run_line("bandwidth", opt, mpi, *be);
    line["ranks"] = mpi.size();
    line["iters"] = opt.iters;
    line["warmup"] = opt.warmup;
    out->write(line);
    std::printf("# adagrouper-calib bandwidth: %d ranks, rank r sends to r+1 (backend %s, %s)\n", mpi.size(),
                std::string(backend_name(opt.backend)).c_str(), be->device().c_str());
    std::printf("# %12s %12s %12s\n", "size(B)", "time(us)", "algbw(GB/s)");
    std::fflush(stdout);
  }
  for (const std::uint64_t size : opt.sizes) {
    const std::size_t bytes = static_cast<std::size_t>(size);
    auto run = [&](int n) {
      for (int i = 0; i < n; ++i) {
        if (send) send->send(*send_stream, bytes);
        if (recv) recv->recv(*recv_stream, bytes);
      }
    };
    run(opt.warmup);
    send_stream->synchronize();
    recv_stream->synchronize();
    mpi.barrier();
    send_stream->record(*s0);
    recv_stream->record(*r0);
    run(opt.iters);
    send_stream->record(*s1);
    recv_stream->record(*r1);
    send_stream->synchronize();
    recv_stream->synchronize();
    double mine = 0;
    if (send) mine = std::max(mine, s1->seconds_since(*s0));
    if (recv) mine = std::max(mine, r1->seconds_since(*r0));
    const double t = mpi.max(mine) / opt.iters;
    if (mpi.rank() == 0) {
      const double algbw = t > 0 ? static_cast<double>(size) / t / 1e9 : 0.0;
      std::printf("  %12llu %12.2f %12.3f\n", static_cast<unsigned long long>(size), t * 1e6, algbw);
      std::fflush(stdout);
      nlohmann::ordered_json line;
      line["type"] = "bandwidth";
      line["bytes"] = size;
      line["time_s"] = t;
      line["algbw_bytes_per_s"] = t > 0 ? static_cast<double>(size) / t : 0.0;
      out->write(line);
    }
  }
  return 0;
}

}  // namespace adagrouper::calib
