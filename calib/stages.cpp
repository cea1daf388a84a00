// adagrouper-calib stages: per-stage forward/backward times, activation bytes and
// message bytes at each micro-batch size, written as a pipeline file and JSONL.
#include <algorithm>
#include <cstdio>

#include <fmt/format.h>

#include "error.h"
#include "io.h"
#include "modes.h"
#include "stage_model.h"

namespace adagrouper::calib {

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

// The measured runs of one model at one micro-batch size: the time of each layer's
// forward and backward, and of the stage's, per timed run.
struct Timings {
  std::vector<std::vector<double>> layer_fwd, layer_bwd;  // [layer][run]
  std::vector<double> stage_fwd, stage_bwd;               // [run]
};

// Events between the layers of one model: fwd[i] before layer i's forward (fwd[n]: after
// the last), bwd[i] after layer i's backward (bwd[n]: before the first backward).
class LayerEvents {
 public:
  LayerEvents(Backend& be, int layers) : n_(static_cast<std::size_t>(layers)) {
    for (std::size_t i = 0; i <= n_; ++i) {
      fwd_.push_back(be.create_event());
      bwd_.push_back(be.create_event());
    }
  }
  // One forward and backward pass of every layer, timed, waited for.
  void iteration(StageModel& model, Stream& stream) {
    stream.record(*fwd_[0]);
    for (std::size_t i = 0; i < n_; ++i) {
      model.forward(stream, static_cast<int>(i));
      stream.record(*fwd_[i + 1]);
    }
    stream.record(*bwd_[n_]);
    for (std::size_t i = n_; i-- > 0;) {
      model.backward(stream, static_cast<int>(i));
      stream.record(*bwd_[i]);
    }
    stream.synchronize();
  }
  double forward_s(std::size_t i) const { return fwd_[i + 1]->seconds_since(*fwd_[i]); }
  double backward_s(std::size_t i) const { return bwd_[i]->seconds_since(*bwd_[i + 1]); }
  double stage_forward_s() const { return fwd_[n_]->seconds_since(*fwd_[0]); }
  double stage_backward_s() const { return bwd_[0]->seconds_since(*bwd_[n_]); }

 private:
  std::size_t n_;
  std::vector<std::unique_ptr<Event>> fwd_, bwd_;
};

// --warmup untimed runs, then --repeat timed ones, each measurement written as a line.
Timings time_layers(const Options& opt, StageModel& model, Stream& stream, Backend& be, int stage, int b,
                    Lines& out) {
  const std::size_t n = static_cast<std::size_t>(model.num_layers());
  LayerEvents ev(be, model.num_layers());
  for (int w = 0; w < opt.warmup; ++w) ev.iteration(model, stream);
  Timings t;
  t.layer_fwd.resize(n);
  t.layer_bwd.resize(n);
  for (int r = 0; r < opt.repeat; ++r) {
    ev.iteration(model, stream);
    for (std::size_t i = 0; i < n; ++i) {
      t.layer_fwd[i].push_back(ev.forward_s(i));
      t.layer_bwd[i].push_back(ev.backward_s(i));
      const LayerDesc& ld = model.layer(static_cast<int>(i));
      nlohmann::ordered_json line;
      line["type"] = "measurement";
      line["stage"] = stage;
      line["layer"] = ld.index;
      line["name"] = layer_kind_name(ld.kind);
      line["micro_batch_size"] = b;
      line["repeat"] = r;
      line["forward_s"] = t.layer_fwd[i].back();
      line["backward_s"] = t.layer_bwd[i].back();
      out.write(line);
    }
    t.stage_fwd.push_back(ev.stage_forward_s());
    t.stage_bwd.push_back(ev.stage_backward_s());
    nlohmann::ordered_json line;
    line["type"] = "stage_measurement";
    line["stage"] = stage;
    line["micro_batch_size"] = b;
    line["repeat"] = r;
    line["forward_s"] = t.stage_fwd.back();
    line["backward_s"] = t.stage_bwd.back();
    out.write(line);
  }
  return t;
}

// The medians per layer, in the form `adagrouper model --measured` reads: keep these
// keys and their order.
void write_layer_lines(const StageModel& model, int b, const Timings& t, Lines& out) {
  for (int i = 0; i < model.num_layers(); ++i) {
    const std::size_t u = static_cast<std::size_t>(i);
    const LayerDesc& ld = model.layer(i);
    const LayerSizes sz = model.sizes(i);
    nlohmann::ordered_json line;
    line["type"] = "layer";
    line["layer"] = ld.index;
    line["name"] = layer_kind_name(ld.kind);
    line["micro_batch_size"] = b;
    line["forward_s"] = median(t.layer_fwd[u]);
    line["backward_s"] = median(t.layer_bwd[u]);
    line["activation_bytes"] = sz.activation_bytes;
    line["output_bytes"] = sz.output_bytes;
    line["parameter_bytes"] = sz.parameter_bytes;
    out.write(line);
  }
}

// The stage at one micro-batch size: its pipeline-file profile entry, and its line.
nlohmann::ordered_json stage_entry(const StageDescription& d, const StageModel& model, int stage, int b,
                                   const Timings& t, Lines& out) {
  nlohmann::ordered_json entry;
  entry["micro_batch_size"] = b;
  entry["forward_s"] = median(t.stage_fwd);
  entry["backward_s"] = median(t.stage_bwd);
  entry["activation_bytes"] = static_cast<double>(model.activation_bytes());
  if (stage + 1 < d.num_stages()) entry["output_bytes"] = static_cast<double>(model.output_bytes());
  nlohmann::ordered_json line;
  line["type"] = "stage";
  line["stage"] = stage;
  line["micro_batch_size"] = b;
  line["forward_s"] = median(t.stage_fwd);
  line["backward_s"] = median(t.stage_bwd);
  line["activation_bytes"] = model.activation_bytes();
  line["output_bytes"] = model.output_bytes();
  line["static_bytes"] = model.static_bytes();
  line["parameters"] = model.parameter_count();
  out.write(line);
  return entry;
}

// The median Adam step of `model` (it does not depend on the micro-batch size).
double time_optimizer(const Options& opt, StageModel& model, Stream& stream, Backend& be, int stage, Lines& out) {
  std::vector<double> times;
  auto e0 = be.create_event(), e1 = be.create_event();
  for (int w = 0; w < std::max(1, opt.warmup); ++w) model.optimizer_step(stream);
  for (int r = 0; r < opt.repeat; ++r) {
    stream.record(*e0);
    model.optimizer_step(stream);
    stream.record(*e1);
    stream.synchronize();
    times.push_back(e1->seconds_since(*e0));
  }
  nlohmann::ordered_json line;
  line["type"] = "optimizer";
  line["stage"] = stage;
  line["optimizer_s"] = median(times);
  line["parameters"] = model.parameter_count();
  out.write(line);
  return median(times);
}

StageResult measure_stage(const Options& opt, const StageDescription& d, int stage, Backend& be, Lines& out) {
  StageResult result;
  result.stage = stage;
  auto stream = be.create_stream();
  for (std::size_t bi = 0; bi < opt.micro_batch_sizes.size(); ++bi) {
    const int b = opt.micro_batch_sizes[bi];
    StageModel model(be, *stream, d, stage, b, opt.seed + static_cast<std::uint64_t>(stage) * 7919);
    stream->synchronize();
    const Timings t = time_layers(opt, model, *stream, be, stage, b, out);
    write_layer_lines(model, b, t, out);
    result.profile.push_back(stage_entry(d, model, stage, b, t, out));
    result.static_bytes = static_cast<double>(model.static_bytes());
    if (bi == 0) result.optimizer_s = time_optimizer(opt, model, *stream, be, stage, out);
  }
  return result;
}

// The stage description, checked against the job's size before any device work.
// Sets `error` (the same on every rank) instead of throwing.
StageDescription load_description(const Options& opt, const Mpi& mpi, std::string& error) {
  StageDescription d;
  try {
    d = load_stage_description(opt.stages_file);
    if (mpi.size() != 1 && mpi.size() != d.num_stages())
      throw InputError(fmt::format("{}: {} stages, but mpirun started {} ranks (run one rank per stage, -np {}, or "
                                   "one rank for all: -np 1)",
                                   opt.stages_file.string(), d.num_stages(), mpi.size(), d.num_stages()));
  } catch (const InputError& e) {
    error = e.what();
  }
  return d;
}

void write_run_line(const Options& opt, const Mpi& mpi, const Backend& be, const StageDescription& d,
                    const std::vector<int>& mine, Lines& out) {
  nlohmann::ordered_json line = run_line("stages", opt, mpi, be);
  line["stages_file"] = opt.stages_file.string();
  line["name"] = d.name;
  line["dtype"] = dtype_name(d.dtype);
  line["stages"] = mine;
  line["micro_batch_sizes"] = opt.micro_batch_sizes;
  line["warmup"] = opt.warmup;
  line["repeat"] = opt.repeat;
  out.write(line);
}

// The pipeline file's stages, in stage order, from every rank's results.
std::vector<nlohmann::ordered_json> merge_stages(const StageDescription& d, const std::vector<std::string>& parts) {
  std::vector<nlohmann::ordered_json> stages(static_cast<std::size_t>(d.num_stages()));
  for (const std::string& p : parts)
    for (const auto& r : nlohmann::ordered_json::parse(p)) {
      nlohmann::ordered_json st;
      st["static_bytes"] = r["static_bytes"];
      st["optimizer_s"] = r["optimizer_s"];
      st["profile"] = r["profile"];
      stages[r["stage"].get<std::size_t>()] = st;
    }
  return stages;
}

nlohmann::ordered_json pipeline_json(const Options& opt, const StageDescription& d,
                                     std::vector<nlohmann::ordered_json> stages, std::vector<std::string> devices,
                                     double device_memory) {
  std::sort(devices.begin(), devices.end());
  devices.erase(std::unique(devices.begin(), devices.end()), devices.end());
  nlohmann::ordered_json pipe;
  pipe["name"] = d.name;
  pipe["description"] = fmt::format(
      "Measured by adagrouper-calib stages (backend {}, {}) from {}: {} layers, hidden {}, {} heads, sequence {}, "
      "FFN {}, vocabulary {}, {}. Times are medians of {} runs after {} warm-up runs; activation_bytes is what "
      "each forward pass keeps for its backward; static_bytes is parameters, f32 gradients and Adam state{}; "
      "optimizer_s is one Adam step.",
      backend_name(opt.backend), fmt::join(devices, "; "), opt.stages_file.string(), d.num_layers(), d.hidden,
      d.heads, d.sequence_length, d.ffn_hidden, d.vocabulary, dtype_name(d.dtype), opt.repeat, opt.warmup,
      d.static_overhead_bytes > 0 ? fmt::format(" plus {} bytes of overhead", d.static_overhead_bytes) : "");
  pipe["global_batch_size"] = d.global_batch_size.value_or(opt.micro_batch_sizes.back());
  if (d.memory_limit_bytes) {
    pipe["memory_limit_bytes"] = *d.memory_limit_bytes;
  } else if (device_memory > 0) {
    pipe["memory_limit_bytes"] = device_memory;
  }
  pipe["stages"] = std::move(stages);
  return pipe;
}

void print_table(const Options& opt, const StageDescription& d, const nlohmann::ordered_json& pipe) {
  std::printf("%s: %d stages, %s, backend %s\n", d.name.c_str(), d.num_stages(), std::string(dtype_name(d.dtype)).c_str(),
              std::string(backend_name(opt.backend)).c_str());
  std::printf("%6s %6s %14s %14s %16s %16s\n", "stage", "b", "forward_ms", "backward_ms", "activation_MiB",
              "output_MiB");
  const auto& stages = pipe["stages"];
  for (std::size_t s = 0; s < stages.size(); ++s)
    for (const auto& e : stages[s]["profile"])
      std::printf("%6zu %6d %14.3f %14.3f %16.2f %16.2f\n", s, e["micro_batch_size"].get<int>(),
                  e["forward_s"].get<double>() * 1e3, e["backward_s"].get<double>() * 1e3,
                  e["activation_bytes"].get<double>() / 1048576.0,
                  e.contains("output_bytes") ? e["output_bytes"].get<double>() / 1048576.0 : 0.0);
  std::printf("wrote %s and %s\n", (opt.output_dir / "pipeline.json").c_str(), (opt.output_dir / "stages.jsonl").c_str());
  std::fflush(stdout);
}

}  // namespace

int run_stages(const Options& opt, const Mpi& mpi, Watchdog& dog) {
  // Everything that can be wrong with the input is found before any device work.
  std::string error;
  const StageDescription d = load_description(opt, mpi, error);
  if (stop_on_error(mpi, opt, error)) return 2;
  const std::unique_ptr<Backend> be = make_backend_or_stop(opt, mpi, dog);
  if (!be) return 1;

  // One rank per stage, or one rank for all of them.
  std::vector<int> mine;
  for (int s = 0; s < d.num_stages(); ++s)
    if (mpi.size() == 1 || s == mpi.rank()) mine.push_back(s);
  Lines out(opt.output_dir / "raw" / fmt::format("stages-rank-{}.jsonl", mpi.rank()));
  write_run_line(opt, mpi, *be, d, mine, out);
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
  const nlohmann::ordered_json pipe = pipeline_json(opt, d, merge_stages(d, parts), devices, memory);
  OutputSet outputs;  // both files, or neither
  outputs.write(outputs.add("--output-dir", (opt.output_dir / "stages.jsonl").string()), merged);
  outputs.write(outputs.add("--output-dir", (opt.output_dir / "pipeline.json").string()), pipe.dump(2) + "\n");
  outputs.commit();
  print_table(opt, d, pipe);
  return 0;
}

}  // namespace adagrouper::calib
