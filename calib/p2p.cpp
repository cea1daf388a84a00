// adagrouper-calib p2p: transfers on every channel of the chain over a recording window,
// written as transfer samples and a network file.
#include <algorithm>
#include <atomic>
#include <cmath>
#include <cstdio>
#include <map>
#include <set>
#include <thread>

#include <fmt/format.h>

#include "error.h"
#include "io.h"
#include "modes.h"
#include "pipeline.h"
#include "samples.h"

namespace adagrouper::calib {

namespace {

constexpr int kProbes = 20;
constexpr std::size_t kProbeBytes = 16;

// Message sizes per channel, in the order of `specs`.
struct Messages {
  std::vector<ChannelSpec> specs;
  std::vector<std::vector<std::size_t>> sizes;
};

Messages plan_messages(const Options& opt, int ranks) {
  Messages m;
  for (int s = 0; s + 1 < ranks; ++s) {
    if (opt.forward) m.specs.push_back({s, s + 1});
    if (opt.backward) m.specs.push_back({s + 1, s});
  }
  if (opt.pipeline_file.empty()) {
    std::vector<std::size_t> sizes;
    for (const std::uint64_t b : opt.message_bytes) sizes.push_back(static_cast<std::size_t>(b));
    m.sizes.assign(m.specs.size(), sizes);
    return m;
  }
  const sim::Pipeline p = sim::load_pipeline(opt.pipeline_file);
  if (p.num_stages() != ranks)
    throw InputError(fmt::format("{}: {} stages, but mpirun started {} ranks (run one rank per stage: -np {})",
                                 opt.pipeline_file.string(), p.num_stages(), ranks, p.num_stages()));
  std::vector<int> bs = opt.p2p_micro_batch_sizes;
  if (bs.empty()) {
    for (const auto& pt : p.stages.front().profile) {
      const int b = pt.micro_batch_size;
      if (b >= p.min_micro_batch_size() && b <= p.max_micro_batch_size() && p.global_batch_size % b == 0)
        bs.push_back(b);
    }
    if (bs.empty())
      throw InputError(fmt::format("{}: no micro-batch size that every stage profiles and that divides the global "
                                   "batch size {}; give --micro-batch-size",
                                   opt.pipeline_file.string(), p.global_batch_size));
  }
  m.sizes.resize(m.specs.size());
  for (const int b : bs) {
    const std::vector<sim::StageParams> params = p.at(b, "--micro-batch-size");
    for (std::size_t c = 0; c < m.specs.size(); ++c) {
      const ChannelSpec& sp = m.specs[c];
      const bool forward = sp.to == sp.from + 1;
      const double bytes = forward ? params[static_cast<std::size_t>(sp.from)].out
                                   : params[static_cast<std::size_t>(sp.from)].gout;
      if (!(bytes >= 16) || bytes > 1e15)
        throw InputError(fmt::format("{}: the {} message of stage {} at micro-batch size {} is {} bytes; p2p needs "
                                     "messages of 16 bytes to 1e15 (or give --bytes)",
                                     opt.pipeline_file.string(), forward ? "activation" : "gradient", sp.from, b,
                                     bytes));
      m.sizes[c].push_back(static_cast<std::size_t>(std::llround(bytes)));
    }
  }
  return m;
}

// Runs one function per item on its own thread and rethrows the first error.
template <class T, class F>
void on_threads(std::vector<T>& items, F&& f) {
  std::vector<std::thread> threads;
  std::vector<std::exception_ptr> errors(items.size());
  for (std::size_t i = 0; i < items.size(); ++i)
    threads.emplace_back([&, i] {
      try {
        f(items[i]);
      } catch (...) {
        errors[i] = std::current_exception();
      }
    });
  for (auto& t : threads) t.join();
  for (auto& e : errors)
    if (e) std::rethrow_exception(e);
}

// The background traffic of --contention on one channel: the sender announces each
// message on `control` (1: a message follows, 0: stop), so both ends agree on the count.
void contend(const Contention& c, std::size_t bytes, Channel& ch, Stream& stream, const Mpi& mpi, MPI_Comm control,
             double origin, const std::atomic<bool>& done, JsonlWriter& raw) {
  const double period = c.on_s + c.off_s;
  if (ch.sender()) {
    bool on = false;
    for (;;) {
      const double t = now_s() - origin;
      const bool want = t < 0 ? false : std::fmod(t, period) < c.on_s;
      if (done.load()) break;
      if (want != on) {
        on = want;
        nlohmann::ordered_json line;
        line["type"] = "contention";
        line["from"] = ch.spec().from;
        line["to"] = ch.spec().to;
        line["state"] = on ? "on" : "off";
        line["time_s"] = t;
        raw.write(line);
      }
      if (!on) {
        std::this_thread::sleep_for(std::chrono::milliseconds(2));
        continue;
      }
      int go = 1;
      mpi.check(MPI_Send(&go, 1, MPI_INT, 1, 0, control), "MPI_Send");
      ch.send(stream, bytes);
      stream.synchronize();
    }
    int stop = 0;
    mpi.check(MPI_Send(&stop, 1, MPI_INT, 1, 0, control), "MPI_Send");
  } else {
    for (;;) {
      int go = 0;
      mpi.check(MPI_Recv(&go, 1, MPI_INT, 0, 0, control, MPI_STATUS_IGNORE), "MPI_Recv");
      if (go == 0) break;
      ch.recv(stream, bytes);
      stream.synchronize();
    }
  }
}

// Where each channel's samples go: its index in the specs, by (from, to).
using ChannelIndex = std::map<std::pair<int, int>, std::size_t>;

ChannelIndex index_of(const std::vector<ChannelSpec>& specs) {
  ChannelIndex index;
  for (std::size_t i = 0; i < specs.size(); ++i) index[{specs[i].from, specs[i].to}] = i;
  return index;
}

std::size_t largest_message(const Messages& msgs) {
  std::size_t largest = kProbeBytes;
  for (const auto& s : msgs.sizes)
    for (const std::size_t b : s) largest = std::max(largest, b);
  return largest;
}

// --contention: a second channel per spec, and a control communicator per channel this
// rank is an end of (collective over all ranks).
struct Background {
  std::vector<std::unique_ptr<Channel>> channels;
  std::vector<MPI_Comm> controls;
  std::size_t bytes = 0;
};

Background connect_background(const Options& opt, Backend& be, const Mpi& mpi, const Messages& msgs,
                              std::size_t largest) {
  Background bg;
  if (!opt.contention) return bg;
  bg.bytes = opt.contention->bytes > 0 ? static_cast<std::size_t>(opt.contention->bytes) : largest;
  bg.channels = be.connect(msgs.specs, bg.bytes);
  for (std::size_t i = 0; i < msgs.specs.size(); ++i) {
    const ChannelSpec& s = msgs.specs[i];
    const bool member = mpi.rank() == s.from || mpi.rank() == s.to;
    MPI_Comm c = mpi.split(member ? static_cast<int>(i) : MPI_UNDEFINED, mpi.rank() == s.from ? 0 : 1);
    if (member) bg.controls.push_back(c);
  }
  return bg;
}

void write_run_line(const Options& opt, const Mpi& mpi, const Backend& be, JsonlWriter& raw) {
  nlohmann::ordered_json line = run_line("p2p", opt, mpi, be);
  line["duration_s"] = opt.duration_s;
  line["interval_s"] = opt.interval_s;
  line["transfers_per_channel"] = opt.count;
  raw.write(line);
}

// This rank's end of one channel and what it measured.
struct End {
  Channel* channel;
  std::vector<std::size_t> sizes;
  ChannelSamples measured;
  bool measures = false;  // the end whose records count (the backend says which)
};

std::vector<End> make_ends(const std::vector<std::unique_ptr<Channel>>& channels, const Messages& msgs,
                           const ChannelIndex& index) {
  std::vector<End> ends;
  for (const auto& ch : channels) {
    End e;
    e.channel = ch.get();
    e.sizes = msgs.sizes[index.at({ch->spec().from, ch->spec().to})];
    e.measured.from = ch->spec().from;
    e.measured.to = ch->spec().to;
    ends.push_back(std::move(e));
  }
  return ends;
}

// Phase 1, on one channel: the latency probes, then --warmup untimed transfers of every
// recorded size, so that connections, buffers and TCP windows are warm when the
// recording starts.
void probe_and_warm_up(const Options& opt, End& e, JsonlWriter& raw) {
  e.channel->align_clocks();
  std::vector<double> durations;
  // 1 ms apart, so that a probe never queues behind the previous one.
  TransferPlan probe{{kProbeBytes}, kProbes, 1e-3, now_s()};
  e.channel->record_transfers(probe, [&](const TransferRecord& r) {
    e.measures = true;
    durations.push_back(r.duration_s);
  });
  e.measured.probe_latency_s = median(durations);
  if (opt.warmup > 0) {
    TransferPlan warm{e.sizes, opt.warmup * static_cast<int>(e.sizes.size()), 0.0, now_s()};
    e.channel->record_transfers(warm, [](const TransferRecord&) {});
  }
  if (!e.measures) return;
  nlohmann::ordered_json line;
  line["type"] = "probe";
  line["from"] = e.measured.from;
  line["to"] = e.measured.to;
  line["bytes"] = kProbeBytes;
  line["transfers"] = kProbes;
  line["median_duration_s"] = e.measured.probe_latency_s;
  raw.write(line);
}

// Phase 2, on one channel: the recording from `origin`.
void record(const Options& opt, End& e, double origin, JsonlWriter& raw) {
  TransferPlan plan{e.sizes, opt.count, opt.interval_s, origin};
  e.measured.samples.reserve(static_cast<std::size_t>(opt.count));
  e.channel->record_transfers(plan, [&](const TransferRecord& r) {
    e.measured.samples.push_back(r);
    nlohmann::ordered_json line;
    line["type"] = "transfer";
    line["from"] = e.measured.from;
    line["to"] = e.measured.to;
    line["time_s"] = r.time_s;
    line["bytes"] = r.bytes;
    line["duration_s"] = r.duration_s;
    raw.write(line);
  });
}

// Phase 2: every channel and its background traffic at once, from a common origin
// (clocks aligned again just before). Rethrows the first error of any thread, after
// every thread has stopped.
void record_all(const Options& opt, std::vector<End>& ends, Background& bg, Backend& be, const Mpi& mpi,
                JsonlWriter& raw) {
  on_threads(ends, [&](End& e) { e.channel->align_clocks(); });
  mpi.barrier();
  const double origin = now_s() + 0.01;
  std::atomic<bool> done(false);
  std::vector<std::thread> contenders;
  std::vector<std::unique_ptr<Stream>> streams;
  for (std::size_t i = 0; i < bg.channels.size(); ++i) streams.push_back(be.create_stream());
  std::vector<std::exception_ptr> contender_errors(bg.channels.size());
  for (std::size_t i = 0; i < bg.channels.size(); ++i) {
    contenders.emplace_back([&, i] {
      try {
        contend(*opt.contention, bg.bytes, *bg.channels[i], *streams[i], mpi, bg.controls[i], origin, done, raw);
      } catch (...) {
        contender_errors[i] = std::current_exception();
      }
    });
  }
  std::exception_ptr recording_error;
  try {
    on_threads(ends, [&](End& e) { record(opt, e, origin, raw); });
  } catch (...) {
    recording_error = std::current_exception();
  }
  done.store(true);
  for (auto& t : contenders) t.join();
  if (recording_error) std::rethrow_exception(recording_error);
  for (auto& e : contender_errors)
    if (e) std::rethrow_exception(e);
  for (MPI_Comm& c : bg.controls) mpi.free(c);
}

// What this rank measured, as JSON for rank 0.
std::string measured_json(const std::vector<End>& ends) {
  nlohmann::json mine = nlohmann::json::array();
  for (const End& e : ends) {
    if (!e.measures) continue;
    nlohmann::json samples = nlohmann::json::array();
    for (const TransferRecord& r : e.measured.samples) samples.push_back({r.time_s, r.bytes, r.duration_s});
    mine.push_back({{"from", e.measured.from},
                    {"to", e.measured.to},
                    {"probe_latency_s", e.measured.probe_latency_s},
                    {"samples", samples}});
  }
  return mine.dump();
}

// Rank 0: every channel's samples, in the order of the specs, from every rank's JSON.
std::vector<ChannelSamples> collect(const std::vector<std::string>& parts, const Messages& msgs,
                                    const ChannelIndex& index) {
  std::vector<ChannelSamples> all(msgs.specs.size());
  std::vector<bool> seen(msgs.specs.size(), false);
  for (const std::string& p : parts)
    for (const auto& c : nlohmann::json::parse(p)) {
      const std::size_t i = index.at({c["from"].get<int>(), c["to"].get<int>()});
      ChannelSamples& ch = all[i];
      ch.from = c["from"].get<int>();
      ch.to = c["to"].get<int>();
      ch.probe_latency_s = c["probe_latency_s"].get<double>();
      for (const auto& s : c["samples"]) ch.samples.push_back({s[0].get<double>(), s[1].get<double>(), s[2].get<double>()});
      seen[i] = true;
    }
  for (std::size_t i = 0; i < all.size(); ++i)
    if (!seen[i])
      throw CalibError(fmt::format("p2p: no rank reported the samples of channel {} -> {}", msgs.specs[i].from,
                                   msgs.specs[i].to));
  return all;
}

// The network file's description of how it was measured.
std::string network_description(const Options& opt, const std::vector<std::string>& devices,
                                 std::size_t background_bytes) {
  const std::set<std::string> unique_devices(devices.begin(), devices.end());
  return fmt::format(
      "Measured by adagrouper-calib p2p (backend {}, {}): {} transfers per channel, one every {} s or back to back, "
      "{}{}; rates from the transfer samples in samples/, latencies from {} transfers of {} bytes.",
      backend_name(opt.backend), fmt::join(unique_devices, "; "), opt.count, opt.interval_s,
      opt.forward && opt.backward ? "all channels at once"
      : opt.forward ? "forward channels only, at once (the backward channels are not listed: unlimited)"
                    : "backward channels only, at once (the forward channels are not listed: unlimited)",
      opt.contention ? fmt::format(", with background transfers of {} bytes on for {} s and off for {} s",
                                   background_bytes, opt.contention->on_s, opt.contention->off_s)
                     : std::string(),
      kProbes, kProbeBytes);
}

// Every file, or none.
void write_outputs(const Options& opt, const std::vector<ChannelSamples>& all, const std::string& description) {
  std::filesystem::create_directories(opt.output_dir / "samples");
  OutputSet outputs;
  auto write = [&](const std::filesystem::path& name, const std::string& text) {
    outputs.write(outputs.add("--output-dir", (opt.output_dir / name).string()), text);
  };
  for (const ChannelSamples& ch : all) write(sample_file(ch.from, ch.to), samples_csv(ch.samples));
  write("samples.csv", all_samples_csv(all));
  write("network.json", network_json(all, description).dump(2) + "\n");
  outputs.commit();
}

void print_table(const Options& opt, const std::vector<ChannelSamples>& all) {
  std::printf("%8s %10s %14s %12s %14s %14s\n", "channel", "transfers", "rate_MB/s", "latency_us", "median_ms",
              "max_ms");
  for (const ChannelSamples& ch : all) {
    std::vector<double> d;
    for (const auto& r : ch.samples) d.push_back(r.duration_s);
    const double latency = usable_latency(ch);
    std::printf("%8s %10zu %14.3f %12.1f %14.3f %14.3f\n", fmt::format("{}->{}", ch.from, ch.to).c_str(),
                ch.samples.size(), effective_rate(ch.samples, latency) / 1e6, latency * 1e6, median(d) * 1e3,
                d.empty() ? 0.0 : *std::max_element(d.begin(), d.end()) * 1e3);
  }
  std::printf("wrote %s, %s and samples/ there\n", (opt.output_dir / "network.json").c_str(),
              (opt.output_dir / "samples.csv").c_str());
  std::fflush(stdout);
}

}  // namespace

int run_p2p(const Options& opt, const Mpi& mpi, Watchdog& dog) {
  Messages msgs;
  std::string error;
  try {
    if (mpi.size() < 2)
      throw InputError("p2p needs at least 2 ranks (mpirun -np S, one rank per pipeline stage)");
    msgs = plan_messages(opt, mpi.size());
  } catch (const InputError& e) {
    error = e.what();
  }
  if (stop_on_error(mpi, opt, error)) return 2;
  const std::unique_ptr<Backend> be = make_backend_or_stop(opt, mpi, dog);
  if (!be) return 1;

  const std::size_t largest = largest_message(msgs);
  auto channels = be->connect(msgs.specs, largest);
  const ChannelIndex index = index_of(msgs.specs);
  Background background = connect_background(opt, *be, mpi, msgs, largest);
  JsonlWriter raw(opt.output_dir / "raw" / fmt::format("p2p-rank-{}.jsonl", mpi.rank()));
  write_run_line(opt, mpi, *be, raw);
  std::vector<End> ends = make_ends(channels, msgs, index);

  // Phase 1 on every channel at once, then phase 2.
  mpi.barrier();
  on_threads(ends, [&](End& e) { probe_and_warm_up(opt, e, raw); });
  record_all(opt, ends, background, *be, mpi, raw);

  // Rank 0 collects what every rank measured and writes the files.
  const std::vector<std::string> parts = mpi.gather(measured_json(ends), 0);
  const std::vector<std::string> devices = mpi.gather(fmt::format("{} on {}", be->device(), mpi.id().host), 0);
  if (mpi.rank() != 0) return 0;
  const std::vector<ChannelSamples> all = collect(parts, msgs, index);
  write_outputs(opt, all, network_description(opt, devices, background.bytes));
  print_table(opt, all);
  return 0;
}

}  // namespace adagrouper::calib
