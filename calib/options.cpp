// The command line of adagrouper-calib (calib/options.h): help texts, option tables, checks.
#include "options.h"

#include <cmath>
#include <ostream>
#include <span>

#include <boost/program_options.hpp>
#include <fmt/format.h>

#include "error.h"
#include "option_aliases.h"
#include "unit_options.h"

namespace po = boost::program_options;

namespace adagrouper::calib {

std::string_view mode_name(Mode m) {
  switch (m) {
    case Mode::stages: return "stages";
    case Mode::p2p: return "p2p";
    case Mode::bandwidth: return "bandwidth";
  }
  return "?";
}

std::string usage() {
  return fmt::format(R"(Usage: mpirun -np N adagrouper-calib MODE [OPTIONS]   (adagrouper-calib MODE --help)
       adagrouper-calib --version

Measures what adagrouper simulates, on the devices and network you will train on, and
writes the files the simulator and the planner read (docs/calibration.md).

Modes:
  stages      forward and backward time, activation and message bytes of each pipeline
              stage of a transformer stage description, per micro-batch size: writes a
              pipeline file (docs/formats.md) and every measurement as JSONL
  p2p         send/recv between adjacent ranks in both directions over a recording
              window: writes transfer samples per channel and a network file
  bandwidth   an nccl-tests-like table (size, time, algbw) of the p2p path
  replay      run a plan's per-device programs for real and write what `adagrouper
              simulate` writes, measured (docs/fidelity.md)

Backends (--backend): cuda (cuBLAS GEMMs and kernels of our own, NCCL send/recv; one GPU
per rank, chosen by local rank) and cpu (CPU kernels, MPI point-to-point). This build: cpu{}.
Launch every mode under mpirun, one rank per pipeline stage (stages also runs on one
rank, measuring every stage in turn). As root, Open MPI needs --allow-run-as-root.
nccl-tests' short options are accepted too: -b and -e for the smallest and largest
size, -o for --output-dir.

Example:
  mpirun -np 4 adagrouper-calib stages --stages configs/calib/gpt-350m-4stage-v100.json \
      --min-micro-batch 1 --max-micro-batch 8 -f 2 --output-dir calib-gpt
)",
                     cuda_backend_built() ? ", cuda (default)" : " (default; built without CUDA)");
}

namespace {

// A size with any unit of docs/formats.md ("64MiB", "1GB", "1.5KiB"): a whole number of
// bytes that fits 64 bits.
std::uint64_t parse_size_with_unit(std::string_view text, std::string_view option) {
  double v = 0;
  try {
    v = parse_quantity(text, Quantity::size);
  } catch (const QuantityError& e) {
    throw InputError(fmt::format("--{}: \"{}\" is not a size like 4096, 64K, 16M, 1G (powers of 1024) or 64MB: {}",
                                 option, text, e.reason()));
  }
  if (!(v >= 0)) throw InputError(fmt::format("--{}: \"{}\" is not a size: must be >= 0", option, text));
  if (v >= 18446744073709551616.0) throw InputError(fmt::format("--{}: {} is too large", option, text));
  if (v != std::floor(v)) throw InputError(fmt::format("--{}: \"{}\" is {} bytes, not a whole number", option, text, v));
  return static_cast<std::uint64_t>(v);
}

}  // namespace

std::uint64_t parse_size(std::string_view text, std::string_view option) {
  std::uint64_t v = 0;
  std::size_t i = 0;
  if (text.empty()) throw InputError(fmt::format("--{}: empty size", option));
  for (; i < text.size() && text[i] >= '0' && text[i] <= '9'; ++i) {
    if (v > (UINT64_MAX - 9) / 10) throw InputError(fmt::format("--{}: {} is too large", option, text));
    v = v * 10 + static_cast<std::uint64_t>(text[i] - '0');
  }
  int shift = 0;
  if (i > 0 && i + 1 == text.size()) {  // one letter: nccl-tests' K, M, G, T, powers of 1024
    switch (text[i]) {
      case 'K': case 'k': shift = 10; break;
      case 'M': case 'm': shift = 20; break;
      case 'G': case 'g': shift = 30; break;
      case 'T': case 't': shift = 40; break;
      default: shift = -1;
    }
  }
  if (i == 0 || shift < 0 || (i < text.size() && shift == 0)) return parse_size_with_unit(text, option);
  if (shift > 0 && v > (UINT64_MAX >> shift)) throw InputError(fmt::format("--{}: {} is too large", option, text));
  return v << shift;
}

std::vector<std::uint64_t> size_series(std::uint64_t min, std::uint64_t max, std::uint64_t factor,
                                       std::string_view option) {
  if (min < 1) throw InputError(fmt::format("--{}: the smallest size must be >= 1, got {}", option, min));
  if (max < min) throw InputError(fmt::format("--{}: the largest size {} is below the smallest {}", option, max, min));
  if (max > min && factor < 2)
    throw InputError(fmt::format("--{}: the factor must be >= 2 (got {}) when the sizes differ", option, factor));
  std::vector<std::uint64_t> out;
  for (std::uint64_t s = min; s <= max; s *= factor) {
    out.push_back(s);
    if (s == max || factor < 2 || s > max / factor) break;
  }
  return out;
}

namespace {

constexpr const char* kStagesHelp = R"(Usage: mpirun -np S adagrouper-calib stages --stages FILE [OPTIONS]

Runs the forward and backward work of every stage of a transformer stage description
(docs/calibration.md, "Stage description") on the device, for each micro-batch size b of
-b/-e/-f (b = MIN, MIN*F, ... <= MAX): GEMMs for the attention and MLP matrices, our own
LayerNorm, causal softmax, GeLU, embedding and cross-entropy kernels. Each size runs
--warmup times, then --repeat times timed with events between the layers; the medians
are the result. Activation bytes are the bytes the forward pass keeps for the backward.
Rank r measures stage r (-np S, S = the number of stages), or one rank measures all.

Writes, in --output-dir:
  pipeline.json            a pipeline file (docs/formats.md): per stage static_bytes,
                           optimizer_s (a measured Adam step) and one profile entry per b
  stages.jsonl             every measurement, one JSON object a line, and per layer and b
                           {"type":"layer","layer":I,"name":...,"micro_batch_size":B,
                            "forward_s":X,"backward_s":Y,"activation_bytes":A,
                            "output_bytes":O,"parameter_bytes":P}
  raw/stages-rank-R.jsonl  the same lines, written by rank R as they are measured

Example:
  mpirun -np 2 adagrouper-calib stages --backend cpu --stages configs/calib/tiny-2stage.json \
      --min-micro-batch 1 --max-micro-batch 4 -f 2 --output-dir calib-tiny

Options)";

constexpr const char* kP2pHelp = R"(Usage: mpirun -np S adagrouper-calib p2p (--pipeline FILE | --bytes LIST) [OPTIONS]

Records transfers on every channel of a chain of S ranks (rank s -> s+1 and s+1 -> s;
--direction forward or backward: one of them), all channels at once, each on its own
communicator and stream: ceil(duration/interval) transfers per channel, the k-th
started at k * interval or when the previous one ends.
Message sizes are the pipeline file's output_bytes (forward) and grad_output_bytes
(backward) at each micro-batch size, or --bytes; they take turns. First 20 small
transfers per channel measure its latency. With --contention, a second communicator per
channel sends background traffic on an on/off pattern. --warmup transfers of every
size, untimed, come between the probes and the recording.

Writes, in --output-dir:
  network.json             a network file (docs/formats.md) whose channels read the
                           samples below, with the measured latency ("repeat": true)
  samples/F-T.csv          transfer samples of channel F -> T: time_s,bytes,duration_s
  samples.csv              all channels in one file (channel,time_s,bytes,duration_s),
                           for adagrouper plan --comm-profile samples.csv
  raw/p2p-rank-R.jsonl     every transfer as it is measured
Then: adagrouper simulate --pipeline P --network OUT/network.json ...

Example:
  mpirun -np 4 adagrouper-calib p2p --pipeline calib-gpt/pipeline.json --duration 60 \
      --interval 0.05 --output-dir calib-gpt

Options)";

constexpr const char* kBandwidthHelp = R"(Usage: mpirun -np N adagrouper-calib bandwidth [OPTIONS]

For each size (-b/-e/-f, bytes), every rank r < N-1 sends to rank r+1 at once, --iters
times after --warmup, and prints the slowest link's time per transfer and algbw =
size / time, like nccl-tests' sendrecv_perf.

Writes bandwidth.jsonl in --output-dir (one line per size) and prints the table.

Example:
  mpirun -np 2 adagrouper-calib bandwidth --min-bytes 1K --max-bytes 256M -f 4

Options)";

// The options every mode has; `warmup` and `repeat` are the mode's defaults (repeat 0:
// the mode has no --repeat).
void add_common(po::options_description& o, const Options& opt, int warmup, int repeat) {
  const bool cuda = cuda_backend_built();
  // clang-format off
  o.add_options()
    ("help,h", "print this help")
    ("backend", po::value<std::string>()->default_value(cuda ? "cuda" : "cpu"),
     "cuda (cuBLAS, our kernels and NCCL, one GPU per rank by local rank) or cpu (CPU kernels and MPI)")
    ("output-dir", po::value<std::string>()->default_value(opt.output_dir.string()), "where the outputs go")
    ("timeout", po::value<TimeArg>()->default_value(TimeArg{opt.timeout_s}),
     "seconds a transfer or synchronization may take before the job is aborted (0: never; units accepted: "
     "500us, 2min)")
    ("warmup,w", po::value<int>()->default_value(warmup), "untimed runs first")
    ("seed", po::value<std::uint64_t>()->default_value(opt.seed), "seed of the weights and inputs");
  // clang-format on
  if (repeat > 0) o.add_options()("repeat,n", po::value<int>()->default_value(repeat), "timed runs (the median is kept)");
}

void add_stages_options(po::options_description& o, const Options& opt) {
  add_common(o, opt, 2, 10);
  // clang-format off
  o.add_options()
    ("stages", po::value<std::string>()->value_name("FILE"), "stage description (required)")
    ("min-micro-batch", po::value<int>()->default_value(1), "smallest micro-batch size")
    ("max-micro-batch", po::value<int>()->default_value(8), "largest micro-batch size")
    ("factor,f", po::value<int>()->default_value(2), "each size is the previous one times this");
  // clang-format on
}

void add_p2p_options(po::options_description& o, const Options& opt) {
  add_common(o, opt, 2, 0);
  // clang-format off
  o.add_options()
    ("pipeline", po::value<std::string>()->value_name("FILE"), "message sizes from this pipeline file")
    ("micro-batch-size", po::value<std::vector<int>>()->multitoken()->value_name("B ..."),
     "with --pipeline: these micro-batch sizes (default: every size stage 0 profiles that all stages cover "
     "and that divides the global batch)")
    ("bytes", po::value<std::string>()->value_name("LIST"),
     "message sizes instead, e.g. 64M or 1M,16M (K, M, G, T: powers of 1024; or any size unit: 64MB, 64MiB)")
    ("duration", po::value<TimeArg>()->default_value(TimeArg{opt.duration_s}),
     "recording window, seconds (units accepted: 500us)")
    ("interval", po::value<TimeArg>()->default_value(TimeArg{opt.interval_s}),
     "seconds between transfer starts (> 0; units accepted: 500us)")
    ("direction", po::value<std::string>()->default_value("both"),
     "channels recorded: both (s -> s+1 and s+1 -> s, all at once), forward or backward")
    ("contention", po::value<std::string>()->value_name("ON,OFF[,BYTES]"),
     "background transfers on another communicator: ON seconds on, OFF seconds off (units accepted: 50ms,50ms,16MiB)");
  // clang-format on
}

void add_bandwidth_options(po::options_description& o, const Options& opt) {
  add_common(o, opt, 5, 0);
  // clang-format off
  o.add_options()
    ("min-bytes", po::value<std::string>()->default_value("1K"),
     "smallest size (K, M, G: powers of 1024; or any size unit: 1kB, 1KiB)")
    ("max-bytes", po::value<std::string>()->default_value("64M"), "largest size")
    ("factor,f", po::value<int>()->default_value(2), "each size is the previous one times this")
    ("iters", po::value<int>()->default_value(opt.iters), "timed transfers per size");
  // clang-format on
}

Mode mode_of(const std::string& name) {
  if (name == "stages") return Mode::stages;
  if (name == "p2p") return Mode::p2p;
  if (name == "bandwidth") return Mode::bandwidth;
  throw InputError(
      fmt::format("unknown mode '{}': stages, p2p, bandwidth or replay (see adagrouper-calib --help)", name));
}

// The short options of nccl-tests (-b, -e for the smallest and largest size) and -o, kept
// as hidden spellings of the long options: in adagrouper -b is a micro-batch size and -o
// a file, so the help shows the long names only.
std::span<const OptionAlias> short_aliases(Mode mode) {
  static constexpr OptionAlias kStages[] = {
      {"-b", "--min-micro-batch"}, {"-e", "--max-micro-batch"}, {"-o", "--output-dir"}};
  static constexpr OptionAlias kBandwidth[] = {{"-b", "--min-bytes"}, {"-e", "--max-bytes"}, {"-o", "--output-dir"}};
  static constexpr OptionAlias kOther[] = {{"-o", "--output-dir"}};
  switch (mode) {
    case Mode::stages: return kStages;
    case Mode::bandwidth: return kBandwidth;
    default: return kOther;
  }
}

// The help header of a mode, and its options.
const char* add_mode_options(po::options_description& o, const Options& opt) {
  switch (opt.mode) {
    case Mode::stages: add_stages_options(o, opt); return kStagesHelp;
    case Mode::p2p: add_p2p_options(o, opt); return kP2pHelp;
    case Mode::bandwidth: add_bandwidth_options(o, opt); return kBandwidthHelp;
  }
  return "";
}

void read_common(const po::variables_map& vm, Options& opt) {
  const std::string backend = vm["backend"].as<std::string>();
  if (backend == "cpu") {
    opt.backend = BackendKind::cpu;
  } else if (backend == "cuda") {
    opt.backend = BackendKind::cuda;
  } else {
    throw InputError(fmt::format("--backend: must be cpu or cuda, got \"{}\"", backend));
  }
  opt.output_dir = vm["output-dir"].as<std::string>();
  if (opt.output_dir.empty()) throw InputError("--output-dir: empty");
  opt.timeout_s = vm["timeout"].as<TimeArg>().value;
  if (!(opt.timeout_s >= 0) || !std::isfinite(opt.timeout_s))
    throw InputError(fmt::format("--timeout: must be >= 0 seconds, got {}", opt.timeout_s));
  opt.warmup = vm["warmup"].as<int>();
  if (opt.warmup < 0 || opt.warmup > 100000) throw InputError(fmt::format("--warmup: must be 0 .. 100000, got {}", opt.warmup));
  opt.seed = vm["seed"].as<std::uint64_t>();
  if (vm.count("repeat")) {
    opt.repeat = vm["repeat"].as<int>();
    if (opt.repeat < 1 || opt.repeat > 100000) throw InputError(fmt::format("--repeat: must be 1 .. 100000, got {}", opt.repeat));
  }
}

void read_stages(const po::variables_map& vm, Options& opt) {
  if (!vm.count("stages")) throw InputError("--stages: missing (see adagrouper-calib stages --help)");
  opt.stages_file = vm["stages"].as<std::string>();
  const int b = vm["min-micro-batch"].as<int>(), e = vm["max-micro-batch"].as<int>(), f = vm["factor"].as<int>();
  if (b < 1) throw InputError(fmt::format("--min-micro-batch: must be >= 1, got {}", b));
  if (f < 1) throw InputError(fmt::format("--factor: must be >= 2, got {}", f));
  if (e > 1 << 20) throw InputError(fmt::format("--max-micro-batch: at most {}, got {}", 1 << 20, e));
  for (const std::uint64_t s : size_series(static_cast<std::uint64_t>(b), static_cast<std::uint64_t>(std::max(e, 0)),
                                           static_cast<std::uint64_t>(f), "max-micro-batch"))
    opt.micro_batch_sizes.push_back(static_cast<int>(s));
}

// --bytes LIST: comma-separated sizes of at least 16 bytes.
std::vector<std::uint64_t> parse_message_bytes(const std::string& list) {
  std::vector<std::uint64_t> out;
  std::size_t start = 0;
  while (start <= list.size()) {
    const std::size_t comma = std::min(list.find(',', start), list.size());
    const std::uint64_t v = parse_size(std::string_view(list).substr(start, comma - start), "bytes");
    if (v < 16) throw InputError(fmt::format("--bytes: a message must be at least 16 bytes, got {}", v));
    out.push_back(v);
    start = comma + 1;
  }
  return out;
}

// --contention ON,OFF[,BYTES]; ON and OFF in seconds or with a time unit ("50ms").
Contention parse_contention(const std::string& spec) {
  Contention c;
  const std::size_t first = spec.find(',');
  const std::size_t second = first == std::string::npos ? first : spec.find(',', first + 1);
  double on = -1, off = -1;
  std::string why;
  try {
    if (first != std::string::npos) {
      on = parse_quantity(std::string_view(spec).substr(0, first), Quantity::time);
      off = parse_quantity(std::string_view(spec).substr(first + 1, second - first - 1), Quantity::time);
    }
  } catch (const QuantityError& e) {
    why = fmt::format(" ({})", e.what());
  }
  if (!(on > 0) || !(off >= 0))
    throw InputError(
        fmt::format("--contention: \"{}\" is not ON,OFF[,BYTES] with ON > 0 and OFF >= 0 seconds{}", spec, why));
  c.on_s = on;
  c.off_s = off;
  if (second != std::string::npos) {
    c.bytes = parse_size(std::string_view(spec).substr(second + 1), "contention");
    if (c.bytes < 1) throw InputError("--contention: BYTES must be >= 1");
  }
  return c;
}

// p2p's message sizes: --pipeline (with --micro-batch-size) or --bytes.
void read_p2p_messages(const po::variables_map& vm, Options& opt) {
  const bool pipe = vm.count("pipeline") > 0, bytes = vm.count("bytes") > 0;
  if (pipe == bytes) throw InputError("--pipeline or --bytes: give exactly one (see adagrouper-calib p2p --help)");
  if (pipe) opt.pipeline_file = vm["pipeline"].as<std::string>();
  if (vm.count("micro-batch-size")) {
    if (!pipe) throw InputError("--micro-batch-size: only with --pipeline");
    for (const int b : vm["micro-batch-size"].as<std::vector<int>>()) {
      if (b < 1) throw InputError(fmt::format("--micro-batch-size: must be >= 1, got {}", b));
      opt.p2p_micro_batch_sizes.push_back(b);
    }
  }
  if (bytes) opt.message_bytes = parse_message_bytes(vm["bytes"].as<std::string>());
}

// p2p's recording: channels, window, interval and background traffic.
void read_p2p_recording(const po::variables_map& vm, Options& opt) {
  const std::string dir = vm["direction"].as<std::string>();
  if (dir != "both" && dir != "forward" && dir != "backward")
    throw InputError(fmt::format("--direction: must be both, forward or backward, got \"{}\"", dir));
  opt.forward = dir != "backward";
  opt.backward = dir != "forward";
  opt.duration_s = vm["duration"].as<TimeArg>().value;
  opt.interval_s = vm["interval"].as<TimeArg>().value;
  if (!(opt.duration_s > 0) || !std::isfinite(opt.duration_s))
    throw InputError(fmt::format("--duration: must be > 0 seconds, got {}", opt.duration_s));
  if (!(opt.interval_s > 0) || !std::isfinite(opt.interval_s))
    throw InputError(fmt::format("--interval: must be > 0 seconds, got {}", opt.interval_s));
  const double count = std::ceil(opt.duration_s / opt.interval_s - 1e-9);
  if (count > 1e6)
    throw InputError(fmt::format("--duration / --interval: {} transfers per channel; at most 1000000", count));
  opt.count = std::max(1, static_cast<int>(count));
  if (vm.count("contention")) opt.contention = parse_contention(vm["contention"].as<std::string>());
}

void read_bandwidth(const po::variables_map& vm, Options& opt) {
  const std::uint64_t b = parse_size(vm["min-bytes"].as<std::string>(), "min-bytes");
  const std::uint64_t e = parse_size(vm["max-bytes"].as<std::string>(), "max-bytes");
  const int f = vm["factor"].as<int>();
  if (f < 1) throw InputError(fmt::format("--factor: must be >= 2, got {}", f));
  opt.sizes = size_series(b, e, static_cast<std::uint64_t>(f), "max-bytes");
  opt.iters = vm["iters"].as<int>();
  if (opt.iters < 1 || opt.iters > 1000000) throw InputError(fmt::format("--iters: must be 1 .. 1000000, got {}", opt.iters));
}

void read_mode(const po::variables_map& vm, Options& opt) {
  switch (opt.mode) {
    case Mode::stages: read_stages(vm, opt); return;
    case Mode::p2p:
      read_p2p_messages(vm, opt);
      read_p2p_recording(vm, opt);
      return;
    case Mode::bandwidth: read_bandwidth(vm, opt); return;
  }
}

}  // namespace

std::optional<Options> parse_options(const std::vector<std::string>& args, std::ostream& help) {
  if (args.empty())
    throw InputError("no mode given: stages, p2p, bandwidth or replay (see adagrouper-calib --help)");
  Options opt;
  const std::string& mode = args[0];
  opt.mode = mode_of(mode);
  po::options_description o;
  const char* header = add_mode_options(o, opt);
  po::variables_map vm;
  try {
    const std::vector<std::string> rest =
        with_aliases(std::vector<std::string>(args.begin() + 1, args.end()), short_aliases(opt.mode));
    po::store(po::command_line_parser(rest).options(o).run(), vm);
    po::notify(vm);
  } catch (const po::error& e) {
    throw InputError(fmt::format("{} (see adagrouper-calib {} --help)", e.what(), mode));
  }
  if (vm.count("help")) {
    help << header << ":\n" << o << '\n';
    return std::nullopt;
  }
  read_common(vm, opt);
  read_mode(vm, opt);
  return opt;
}

}  // namespace adagrouper::calib
