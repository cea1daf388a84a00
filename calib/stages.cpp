// adagrouper-calib stages: per-stage forward/backward times, activation bytes and
// message bytes at each micro-batch size, written as a pipeline file and JSONL.
#include <algorithm>
#include <cstdio>
#include <iostream>

#include <fmt/format.h>

#include "error.h"
#include "io.h"
#include "modes.h"
#include "stage_model.h"

namespace adagrouper::calib {

double median(std::vector<double> v) {
  if (v.empty()) return 0.0;
  std::sort(v.begin(), v.end());
  const std::size_t n = v.size();
  return n % 2 == 1 ? v[n / 2] : 0.5 * (v[n / 2 - 1] + v[n / 2]);
}

bool stop_on_error(const Mpi& mpi, std::string_view mode, const std::string& error) {
  const std::string first = mpi.first_error(error);
  if (first.empty()) return false;
  if (mpi.rank() == 0) std::cerr << "adagrouper-calib " << mode << ": " << first << std::endl;
  return true;
}

bool stop_on_error(const Mpi& mpi, const Options& options, const std::string& error) {
  return stop_on_error(mpi, mode_name(options.mode), error);
}

std::unique_ptr<Backend> make_backend_or_stop(BackendKind kind, std::string_view mode, const Mpi& mpi,
                                              Watchdog& watchdog) {
  std::string error;
  std::unique_ptr<Backend> be;
  try {
    be = make_backend(kind, mpi, watchdog);
  } catch (const std::exception& e) {
    error = e.what();
  }
  if (stop_on_error(mpi, mode, error)) return nullptr;
  return be;
}

std::unique_ptr<Backend> make_backend_or_stop(const Options& options, const Mpi& mpi, Watchdog& watchdog) {
  return make_backend_or_stop(options.backend, mode_name(options.mode), mpi, watchdog);
}

namespace {

// What one rank measured of one stage.
struct StageResult {
  int stage = 0;
  double static_bytes = 0, optimizer_s = 0;
  nlohmann::ordered_json profile = nlohmann::ordered_json::array();
};

// Writes a line to the rank's raw file and keeps it for the merged stages.jsonl.
class Lines {
 public:
  explicit Lines(const std::filesystem::path& raw) : raw_(raw) {}
  void write(const nlohmann::ordered_json& line) {
    raw_.write(line);
    all_ += line.dump();
    all_ += '\n';
  }
  const std::string& all() const { return all_; }

 private:
  JsonlWriter raw_;
  std::string all_;
};

StageResult measure_stage(const Options& opt, const StageDescription& d, int stage, Backend& be, Lines& out) {
  StageResult result;
  result.stage = stage;
  auto stream = be.create_stream();
  std::vector<double> optimizer_times;
  for (std::size_t bi = 0; bi < opt.micro_batch_sizes.size(); ++bi) {
    const int b = opt.micro_batch_sizes[bi];
    StageModel model(be, *stream, d, stage, b, opt.seed + static_cast<std::uint64_t>(stage) * 7919);
    stream->synchronize();
    const int n = model.num_layers();
    // fwd[i]: before layer i's forward (fwd[n]: after the last); bwd[i]: after layer i's
    // backward (bwd[n]: before the first backward).
    std::vector<std::unique_ptr<Event>> fwd, bwd;
    for (int i = 0; i <= n; ++i) {
      fwd.push_back(be.create_event());
      bwd.push_back(be.create_event());
    }
    auto iteration = [&] {
      stream->record(*fwd[0]);
      for (int i = 0; i < n; ++i) {
        model.forward(*stream, i);
        stream->record(*fwd[static_cast<std::size_t>(i) + 1]);
      }
      stream->record(*bwd[static_cast<std::size_t>(n)]);
      for (int i = n - 1; i >= 0; --i) {
        model.backward(*stream, i);
        stream->record(*bwd[static_cast<std::size_t>(i)]);
      }
      stream->synchronize();
    };
    for (int w = 0; w < opt.warmup; ++w) iteration();
    std::vector<std::vector<double>> lf(static_cast<std::size_t>(n)), lb(static_cast<std::size_t>(n));
    std::vector<double> sf, sb;
    for (int r = 0; r < opt.repeat; ++r) {
      iteration();
      for (int i = 0; i < n; ++i) {
        const std::size_t u = static_cast<std::size_t>(i);
        const double f = fwd[u + 1]->seconds_since(*fwd[u]);
        const double bw = bwd[u]->seconds_since(*bwd[u + 1]);
        lf[u].push_back(f);
        lb[u].push_back(bw);
        const LayerDesc& ld = model.layer(i);
        nlohmann::ordered_json line;
        line["type"] = "measurement";
        line["stage"] = stage;
        line["layer"] = ld.index;
        line["name"] = layer_kind_name(ld.kind);
        line["micro_batch_size"] = b;
        line["repeat"] = r;
        line["forward_s"] = f;
        line["backward_s"] = bw;
        out.write(line);
      }
      sf.push_back(fwd[static_cast<std::size_t>(n)]->seconds_since(*fwd[0]));
      sb.push_back(bwd[0]->seconds_since(*bwd[static_cast<std::size_t>(n)]));
      nlohmann::ordered_json line;
      line["type"] = "stage_measurement";
      line["stage"] = stage;
      line["micro_batch_size"] = b;
      line["repeat"] = r;
      line["forward_s"] = sf.back();
      line["backward_s"] = sb.back();
      out.write(line);
    }
    for (int i = 0; i < n; ++i) {
      const std::size_t u = static_cast<std::size_t>(i);
      const LayerDesc& ld = model.layer(i);
      const LayerSizes sz = model.sizes(i);
      // The form `adagrouper model --measured` reads: keep these keys and their order.
      nlohmann::ordered_json line;
      line["type"] = "layer";
      line["layer"] = ld.index;
      line["name"] = layer_kind_name(ld.kind);
      line["micro_batch_size"] = b;
      line["forward_s"] = median(lf[u]);
      line["backward_s"] = median(lb[u]);
      line["activation_bytes"] = sz.activation_bytes;
      line["output_bytes"] = sz.output_bytes;
      line["parameter_bytes"] = sz.parameter_bytes;
      out.write(line);
    }
    nlohmann::ordered_json entry;
    entry["micro_batch_size"] = b;
    entry["forward_s"] = median(sf);
    entry["backward_s"] = median(sb);
    entry["activation_bytes"] = static_cast<double>(model.activation_bytes());
    if (stage + 1 < d.num_stages()) entry["output_bytes"] = static_cast<double>(model.output_bytes());
    result.profile.push_back(entry);
    nlohmann::ordered_json line;
    line["type"] = "stage";
    line["stage"] = stage;
    line["micro_batch_size"] = b;
    line["forward_s"] = median(sf);
    line["backward_s"] = median(sb);
    line["activation_bytes"] = model.activation_bytes();
    line["output_bytes"] = model.output_bytes();
    line["static_bytes"] = model.static_bytes();
    line["parameters"] = model.parameter_count();
    out.write(line);
    result.static_bytes = static_cast<double>(model.static_bytes());

    if (bi == 0) {
      // The optimizer step does not depend on b: measured once, on the first model.
      auto e0 = be.create_event(), e1 = be.create_event();
      for (int w = 0; w < std::max(1, opt.warmup); ++w) model.optimizer_step(*stream);
      for (int r = 0; r < opt.repeat; ++r) {
        stream->record(*e0);
        model.optimizer_step(*stream);
        stream->record(*e1);
        stream->synchronize();
        optimizer_times.push_back(e1->seconds_since(*e0));
      }
      nlohmann::ordered_json opt_line;
      opt_line["type"] = "optimizer";
      opt_line["stage"] = stage;
      opt_line["optimizer_s"] = median(optimizer_times);
      opt_line["parameters"] = model.parameter_count();
      out.write(opt_line);
    }
  }
  result.optimizer_s = median(optimizer_times);
  return result;
}

}  // namespace

int run_stages(const Options& opt, const Mpi& mpi, Watchdog& dog) {
  // Everything that can be wrong with the input is found before any device work.
  StageDescription d;
  std::string error;
  try {
    d = load_stage_description(opt.stages_file);
    if (mpi.size() != 1 && mpi.size() != d.num_stages())
      throw InputError(fmt::format("{}: {} stages, but mpirun started {} ranks (run one rank per stage, -np {}, or "
                                   "one rank for all: -np 1)",
                                   opt.stages_file.string(), d.num_stages(), mpi.size(), d.num_stages()));
  } catch (const InputError& e) {
    error = e.what();
  }
  if (stop_on_error(mpi, opt, error)) return 2;

  const std::unique_ptr<Backend> be = make_backend_or_stop(opt, mpi, dog);
  if (!be) return 1;

  std::vector<int> mine;
  if (mpi.size() == 1) {
    for (int s = 0; s < d.num_stages(); ++s) mine.push_back(s);
  } else {
    mine.push_back(mpi.rank());
  }
  Lines out(opt.output_dir / "raw" / fmt::format("stages-rank-{}.jsonl", mpi.rank()));
  {
    nlohmann::ordered_json line;
    line["type"] = "run";
    line["mode"] = "stages";
    line["rank"] = mpi.rank();
    line["host"] = mpi.id().host;
    line["backend"] = backend_name(opt.backend);
    line["device"] = be->device();
    line["stages_file"] = opt.stages_file.string();
    line["name"] = d.name;
    line["dtype"] = dtype_name(d.dtype);
    line["stages"] = mine;
    line["micro_batch_sizes"] = opt.micro_batch_sizes;
    line["warmup"] = opt.warmup;
    line["repeat"] = opt.repeat;
    out.write(line);
  }
  nlohmann::ordered_json results = nlohmann::ordered_json::array();
  for (const int s : mine) {
    const StageResult r = measure_stage(opt, d, s, *be, out);
    if (mpi.rank() == 0 || mpi.size() > 1)
      std::fprintf(stderr, "adagrouper-calib stages: rank %d measured stage %d (%zu micro-batch sizes)\n",
                   mpi.rank(), s, opt.micro_batch_sizes.size());
    results.push_back({{"stage", r.stage},
                       {"static_bytes", r.static_bytes},
                       {"optimizer_s", r.optimizer_s},
                       {"profile", r.profile}});
  }

  // Rank 0 merges: the lines of every rank (in rank order) and the pipeline file.
  const double memory = mpi.min(be->device_memory_bytes().value_or(0.0));
  const std::vector<std::string> lines = mpi.gather(out.all(), 0);
  const std::vector<std::string> parts = mpi.gather(results.dump(), 0);
  const std::vector<std::string> devices = mpi.gather(fmt::format("{} on {}", be->device(), mpi.id().host), 0);
  if (mpi.rank() != 0) return 0;

  std::string merged;
  for (const std::string& l : lines) merged += l;
  std::vector<nlohmann::ordered_json> stages(static_cast<std::size_t>(d.num_stages()));
  for (const std::string& p : parts)
    for (const auto& r : nlohmann::ordered_json::parse(p)) {
      nlohmann::ordered_json st;
      st["static_bytes"] = r["static_bytes"];
      st["optimizer_s"] = r["optimizer_s"];
      st["profile"] = r["profile"];
      stages[r["stage"].get<std::size_t>()] = st;
    }
  std::vector<std::string> unique_devices = devices;
  std::sort(unique_devices.begin(), unique_devices.end());
  unique_devices.erase(std::unique(unique_devices.begin(), unique_devices.end()), unique_devices.end());
  nlohmann::ordered_json pipe;
  pipe["name"] = d.name;
  pipe["description"] = fmt::format(
      "Measured by adagrouper-calib stages (backend {}, {}) from {}: {} layers, hidden {}, {} heads, sequence {}, "
      "FFN {}, vocabulary {}, {}. Times are medians of {} runs after {} warm-up runs; activation_bytes is what "
      "each forward pass keeps for its backward; static_bytes is parameters, f32 gradients and Adam state{}; "
      "optimizer_s is one Adam step.",
      backend_name(opt.backend), fmt::join(unique_devices, "; "), opt.stages_file.string(), d.num_layers(), d.hidden,
      d.heads, d.sequence_length, d.ffn_hidden, d.vocabulary, dtype_name(d.dtype), opt.repeat, opt.warmup,
      d.static_overhead_bytes > 0 ? fmt::format(" plus {} bytes of overhead", d.static_overhead_bytes) : "");
  pipe["global_batch_size"] = d.global_batch_size.value_or(opt.micro_batch_sizes.back());
  if (d.memory_limit_bytes) {
    pipe["memory_limit_bytes"] = *d.memory_limit_bytes;
  } else if (memory > 0) {
    pipe["memory_limit_bytes"] = memory;
  }
  pipe["stages"] = stages;
  write_file_atomic(opt.output_dir / "stages.jsonl", merged);
  write_file_atomic(opt.output_dir / "pipeline.json", pipe.dump(2) + "\n");

  // A short table.
  std::printf("%s: %d stages, %s, backend %s\n", d.name.c_str(), d.num_stages(), std::string(dtype_name(d.dtype)).c_str(),
              std::string(backend_name(opt.backend)).c_str());
  std::printf("%6s %6s %14s %14s %16s %16s\n", "stage", "b", "forward_ms", "backward_ms", "activation_MiB",
              "output_MiB");
  for (std::size_t s = 0; s < stages.size(); ++s)
    for (const auto& e : stages[s]["profile"])
      std::printf("%6zu %6d %14.3f %14.3f %16.2f %16.2f\n", s, e["micro_batch_size"].get<int>(),
                  e["forward_s"].get<double>() * 1e3, e["backward_s"].get<double>() * 1e3,
                  e["activation_bytes"].get<double>() / 1048576.0,
                  e.contains("output_bytes") ? e["output_bytes"].get<double>() / 1048576.0 : 0.0);
  std::printf("wrote %s and %s\n", (opt.output_dir / "pipeline.json").c_str(), (opt.output_dir / "stages.jsonl").c_str());
  std::fflush(stdout);
  return 0;
}

}  // namespace adagrouper::calib
