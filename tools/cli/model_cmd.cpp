// `adagrouper model`: layer-level model files from architecture hyperparameters or measurements.
//
// Generated from a preset or hyperparameters, and merged with calibration measurements
// (docs/formats.md, "Model file").
#include <charconv>
#include <iostream>
#include <map>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include <boost/program_options.hpp>
#include <fmt/format.h>
#include <fmt/ranges.h>

#include "cli_util.h"
#include "commands.h"
#include "planner.h"
#include "sim.h"

namespace adagrouper::cli {

namespace po = boost::program_options;

namespace {

constexpr const char* kModelHelp = R"(Usage: adagrouper model (--preset NAME | --arch ARCH ... | --from MODEL.json)
                        [--device PRESET] [device overrides] [--micro-batch-sizes LIST]
                        [--measured FILE.jsonl ...] [--output FILE]

Writes a layer-level model file (schema adagrouper.model/1, docs/formats.md "Model
file"): an ordered list of layers, each with forward and backward time and activation,
output and parameter bytes per micro-batch size, the optimizer's bytes per parameter
byte, and the device. `adagrouper partition` cuts it into pipeline stages and `adagrouper
plan --model` plans it.

Architectures (--arch; --preset fills every hyperparameter, options override):
  gpt    transformer decoder: embedding, --layers transformer layers, LM head + loss
  bert   transformer encoder: embeddings, --layers layers, masked-LM and NSP heads
  unet   U-Net diffusion model: time embedding, conv_in, ResNet and transformer blocks,
         samplers, out (a cut carries every live skip connection)
  gnmt   LSTM seq2seq: embeddings, --encoder-layers (first bidirectional),
         --decoder-layers (first with attention), classifier
Presets: gpt2-xl, gpt3-2.7b, gpt3-6.7b, bert-48, sd-unet, gnmt-16.

Estimates: a GEMM of F FLOPs over n rows takes F / (peak x gemm-efficiency x n/(n +
gemm-half-rows)), but no less than reading its weights; elementwise traffic moves at
memory-bandwidth x memory-efficiency; every kernel costs kernel-overhead. Transformer
layers: forward FLOPs 24bsh^2 + 4bs^2h (Narayanan et al. 2021); activations from
Korthikanti et al. 2022: 34sbh + 5as^2b bytes per layer without recomputation, 34sbh
with selective recomputation (the default), 2sbh with full recomputation (2-byte
elements). Static memory per stage: reserved bytes + parameter bytes x (1 + optimizer
bytes per parameter byte: 7 for mixed-precision Adam, 3 for fp32 Adam, +2 with the
U-Net's fp32 EMA). docs/model.md ("Stage partitioning") has the details.

Measurements: --measured FILE.jsonl (repeatable) reads the calibration harness's raw
JSONL; every line {"type": "layer", "layer": INDEX, "micro_batch_size": B,
"forward_s": X, "backward_s": Y, "activation_bytes": A, "output_bytes": O,
"parameter_bytes": P} replaces the estimate of that layer at that size (a size not
listed is added) and is marked "measured"; other lines are ignored. With --from, the
measurements are merged into an existing model file.

Without --output the model JSON goes to stdout; with it, a summary per layer kind.
Exit status: 0 ok, 2 bad input (one line naming the file or option), 1 other failures.

Examples:
  adagrouper model --preset gpt2-xl --device v100-32gb --micro-batch-sizes 1,2,4,8 \
      --output gpt2-xl.json
  adagrouper model --arch gpt --layers 24 --hidden 2048 --heads 16 --seq-len 2048 \
      --vocab 50257 --device a100-80gb --gemm-efficiency 0.7 --output gpt-1.3b.json
  adagrouper model --from configs/models/gpt2-xl.json --measured calib/run.jsonl \
      --output gpt2-xl-measured.json

Options)";

// Most layers a generated model may have (as a model file).
constexpr int kMaxLayers = 100'000;

// A comma-separated list of integers in 1..sim::kMaxBatchSize.
std::vector<int> int_list(const std::string& option, const std::string& text) {
  std::vector<int> out;
  std::size_t pos = 0;
  while (pos <= text.size()) {
    const std::size_t comma = std::min(text.find(',', pos), text.size());
    const std::string item = text.substr(pos, comma - pos);
    int v = 0;
    const auto [end, ec] = std::from_chars(item.data(), item.data() + item.size(), v);
    if (item.empty() || ec != std::errc() || end != item.data() + item.size())
      throw InputError(fmt::format("--{}: '{}' is not a comma-separated list of integers", option, text));
    if (v < 0 || v > sim::kMaxBatchSize)
      throw InputError(fmt::format("--{}: {} is outside 0..{}", option, v, sim::kMaxBatchSize));
    out.push_back(v);
    pos = comma + 1;
  }
  return out;
}

// The command line that wrote a model, without the output file, for the record.
std::string command_line(int argc, char** argv) {
  std::string out = "adagrouper model";
  for (int i = 1; i < argc; ++i) {
    const std::string a = argv[i];
    if (a == "--output" || a == "-o") {
      ++i;
      continue;
    }
    if (a.rfind("--output=", 0) == 0) continue;
    out += " " + a;
  }
  return out;
}

std::string summary(const planner::Model& m) {
  struct Kind {
    int count = 0;
    double params = 0, fwd = 0, bwd = 0, act = 0;
  };
  const std::vector<int> sizes = m.micro_batch_sizes();
  const int b = sizes.front();
  std::vector<std::string> order;
  std::map<std::string, Kind> kinds;
  int measured = 0;
  for (int l = 0; l < m.num_layers(); ++l) {
    const auto& layer = m.layers[l];
    const std::string k = layer.kind.empty() ? "layer" : layer.kind;
    if (!kinds.count(k)) order.push_back(k);
    Kind& x = kinds[k];
    const planner::LayerAt v = planner::layer_at(m, l, b);
    ++x.count;
    x.params += layer.parameter_bytes;
    x.fwd += v.fwd;
    x.bwd += v.bwd;
    x.act += v.act;
    for (const auto& p : layer.profile) measured += p.measured;
  }
  std::string out = fmt::format("{}: {} layers, {:.4g} GB of parameters, device {} ({:.2f} GiB), sizes {}{}\n", m.name,
                                m.num_layers(), m.total_parameter_bytes() / 1e9, m.device.name,
                                m.device.memory_bytes / (1024.0 * 1024 * 1024), fmt::join(sizes, ","),
                                measured ? fmt::format(", {} measured points", measured) : "");
  out += fmt::format("  {:<22} {:>6} {:>12} {:>12} {:>12} {:>14}\n", "kind", "layers", "params GB",
                     fmt::format("fwd s (b={})", b), "bwd s", "activation GB");
  for (const auto& k : order) {
    const Kind& x = kinds[k];
    out += fmt::format("  {:<22} {:>6} {:>12.4g} {:>12.4g} {:>12.4g} {:>14.4g}\n", k, x.count, x.params / 1e9, x.fwd,
                       x.bwd, x.act / 1e9);
  }
  return out;
}

po::options_description model_options() {
  po::options_description opts(kModelHelp);
  // clang-format off
  opts.add_options()
    ("help,h", "show this help")
    ("preset", po::value<std::string>()->value_name("NAME"),
       "architecture preset: gpt2-xl, gpt3-2.7b, gpt3-6.7b, bert-48, sd-unet, gnmt-16")
    ("arch", po::value<std::string>()->value_name("ARCH"), "gpt, bert, unet or gnmt (default: the preset's)")
    ("from", po::value<std::string>()->value_name("FILE"),
       "start from this model file instead of generating one (for --measured)")
    ("name", po::value<std::string>()->value_name("NAME"), "model name (default: the preset's, else the arch)")
    ("layers", po::value<int>()->value_name("N"), "gpt, bert: transformer layers")
    ("hidden", po::value<int>()->value_name("H"), "gpt, bert, gnmt: hidden size")
    ("heads", po::value<int>()->value_name("A"), "gpt, bert, unet: attention heads")
    ("seq-len", po::value<int>()->value_name("S"), "gpt, bert: sequence length; gnmt: source tokens")
    ("vocab", po::value<int>()->value_name("V"), "gpt, bert, gnmt: vocabulary size")
    ("dtype", po::value<std::string>()->default_value("fp16")->value_name("T"),
       "fp16, bf16 (2-byte elements, mixed-precision Adam) or fp32")
    ("recompute", po::value<std::string>()->default_value("selective")->value_name("MODE"),
       "gpt, bert activation recomputation: none, selective or full")
    ("latent", po::value<int>()->value_name("N"), "unet: latent height and width")
    ("in-channels", po::value<int>()->value_name("C"), "unet: latent channels")
    ("channels", po::value<std::string>()->value_name("LIST"), "unet: channels per level, e.g. 320,640,1280,1280")
    ("attention-levels", po::value<std::string>()->value_name("LIST"),
       "unet: 1 for a level with transformer blocks, else 0, e.g. 1,1,1,0")
    ("layers-per-block", po::value<int>()->value_name("N"), "unet: ResNet blocks per level")
    ("context-len", po::value<int>()->value_name("N"), "unet: text context tokens")
    ("context-dim", po::value<int>()->value_name("N"), "unet: text context width")
    ("time-embed-dim", po::value<int>()->value_name("N"), "unet: time embedding width")
    ("encoder-layers", po::value<int>()->value_name("N"), "gnmt: encoder LSTM layers")
    ("decoder-layers", po::value<int>()->value_name("N"), "gnmt: decoder LSTM layers")
    ("target-len", po::value<int>()->value_name("N"), "gnmt: target tokens")
    ("global-batch-size", po::value<int>()->value_name("B"), "global batch recorded in the model (default: the preset's)")
    ("micro-batch-sizes", po::value<std::string>()->default_value("1,2,4,8")->value_name("LIST"),
       "micro-batch sizes to estimate, increasing")
    ("device", po::value<std::string>()->default_value("v100-32gb")->value_name("PRESET"),
       "device preset: v100-32gb, a100-40gb, a100-80gb, h100-80gb")
    ("memory-bytes", po::value<SizeArg>()->value_name("BYTES"),
       with_units("device memory (default: the preset's)", Quantity::size).c_str())
    ("peak-flops", po::value<double>()->value_name("FLOP/S"), "dense fp16/bf16 peak")
    ("memory-bandwidth", po::value<RateArg>()->value_name("BYTES/S"),
       with_units("peak memory bandwidth", Quantity::rate).c_str())
    ("gemm-efficiency", po::value<double>()->value_name("F"), "achieved fraction of peak of large GEMMs")
    ("gemm-half-rows", po::value<double>()->value_name("N"), "GEMM rows at which half of that is reached")
    ("attention-efficiency", po::value<double>()->value_name("F"), "fraction of peak of fused attention (unet)")
    ("memory-efficiency", po::value<double>()->value_name("F"), "achieved fraction of the memory bandwidth")
    ("kernel-overhead", po::value<TimeArg>()->value_name("S"),
       with_units("seconds per kernel (launch, framework)", Quantity::time).c_str())
    ("reserved-bytes", po::value<SizeArg>()->value_name("BYTES"),
       with_units("CUDA context and workspaces per device", Quantity::size).c_str())
    ("measured", po::value<std::vector<std::string>>()->value_name("FILE.jsonl"),
       "calibration JSONL whose \"layer\" lines replace the estimates (repeatable)")
    ("output,o", po::value<std::string>()->value_name("FILE"), "write the model file (default, or -: JSON on stdout)");
  // clang-format on
  return opts;
}

// --from FILE: the model file to merge --measured into; every generator option is refused.
planner::Model model_from_file(const po::variables_map& vm) {
  for (const char* o : {"preset", "arch", "name", "layers", "hidden", "heads", "seq-len", "vocab", "latent",
                        "in-channels", "channels", "attention-levels", "layers-per-block", "context-len",
                        "context-dim", "time-embed-dim", "encoder-layers", "decoder-layers", "target-len",
                        "global-batch-size", "memory-bytes", "peak-flops", "memory-bandwidth", "gemm-efficiency",
                        "gemm-half-rows", "attention-efficiency", "memory-efficiency", "kernel-overhead",
                        "reserved-bytes"})
    if (vm.count(o)) throw InputError(fmt::format("--{}: not allowed with --from (the model file fixes it)", o));
  for (const char* o : {"dtype", "recompute", "micro-batch-sizes", "device"})
    if (!vm[o].defaulted()) throw InputError(fmt::format("--{}: not allowed with --from (the model file fixes it)", o));
  if (!vm.count("measured")) throw InputError("--from: give --measured FILE.jsonl to merge into the model");
  return planner::load_model(vm["from"].as<std::string>());
}

// The preset or --arch, and the name.
planner::Arch named_arch(const po::variables_map& vm) {
  planner::Arch arch;
  if (vm.count("preset")) arch = planner::arch_preset(vm["preset"].as<std::string>());
  if (vm.count("arch")) {
    const std::string a = vm["arch"].as<std::string>();
    if (vm.count("preset") && a != arch.arch)
      throw InputError(fmt::format("--arch: the preset {} is a {} model, not {}", arch.name, arch.arch, a));
    arch.arch = a;
  }
  if (arch.arch.empty()) throw InputError("--arch: missing; give --preset NAME or --arch gpt|bert|unet|gnmt");
  if (vm.count("name")) arch.name = vm["name"].as<std::string>();
  if (arch.name.empty()) arch.name = arch.arch;
  return arch;
}

// The architecture: the preset or --arch, with every hyperparameter option applied.
planner::Arch arch_from(const po::variables_map& vm) {
  planner::Arch arch = named_arch(vm);
  // Sizes and counts up to sim::kMaxBatchSize; layer counts up to what a model file may hold.
  auto set_int = [&](const std::string& o, int& field) {
    const bool layers = std::string_view(o).find("layers") != std::string_view::npos;
    if (vm.count(o)) field = int_option(vm, o.c_str(), 1, layers ? kMaxLayers : sim::kMaxBatchSize);
  };
  for (const auto& [option, member] : planner::kArchInts) set_int(std::string(option), arch.*member);
  if (vm.count("channels")) arch.channels = int_list("channels", vm["channels"].as<std::string>());
  if (vm.count("attention-levels")) {
    arch.attention = int_list("attention-levels", vm["attention-levels"].as<std::string>());
    for (int v : arch.attention)
      if (v != 0 && v != 1) throw InputError(fmt::format("--attention-levels: entries must be 0 or 1, got {}", v));
  }
  const std::string dtype = vm["dtype"].as<std::string>();
  if (dtype == "fp16" || dtype == "bf16") {
    arch.bytes_per_element = 2;
  } else if (dtype == "fp32") {
    arch.bytes_per_element = 4;
  } else {
    throw InputError(fmt::format("--dtype: must be fp16, bf16 or fp32, got '{}'", dtype));
  }
  arch.recompute = vm["recompute"].as<std::string>();
  return arch;
}

// The device preset with every device option applied, noted in its source.
planner::Device device_from(const po::variables_map& vm) {
  planner::Device dev = planner::device_preset(vm["device"].as<std::string>());
  const std::pair<const char*, double planner::Device::*> fields[] = {
      {"memory-bytes", &planner::Device::memory_bytes},
      {"peak-flops", &planner::Device::peak_flops},
      {"memory-bandwidth", &planner::Device::memory_bandwidth},
      {"gemm-efficiency", &planner::Device::gemm_efficiency},
      {"gemm-half-rows", &planner::Device::gemm_half_rows},
      {"attention-efficiency", &planner::Device::attention_efficiency},
      {"memory-efficiency", &planner::Device::memory_efficiency},
      {"kernel-overhead", &planner::Device::kernel_overhead_s},
      {"reserved-bytes", &planner::Device::reserved_bytes},
  };
  for (const auto& [o, field] : fields)
    if (vm.count(o)) dev.*field = number_option(vm, o);
  for (const auto& [o, field] : fields)
    if (vm.count(o))
      dev.source += fmt::format("{}--{} {} given on the command line", dev.source.empty() ? "" : "; ", o,
                                number_option(vm, o));
  return dev;
}

}  // namespace

int cmd_model(int argc, char** argv) {
  const auto parsed = parse_options(argc, argv, model_options());
  if (!parsed) return 0;
  const po::variables_map& vm = *parsed;
  OutputSet outputs;
  input_options(outputs, vm, {"from", "measured"});
  const auto out = output_option(outputs, vm, "output");
  planner::Model model;
  if (vm.count("from")) {
    model = model_from_file(vm);
  } else {
    const planner::Arch arch = arch_from(vm);
    const planner::Device dev = device_from(vm);
    model = planner::generate_model(arch, dev, int_list("micro-batch-sizes", vm["micro-batch-sizes"].as<std::string>()));
    model.generated_by = command_line(argc, argv);
  }
  std::vector<std::string> warnings;
  if (vm.count("measured"))
    for (const auto& f : vm["measured"].as<std::vector<std::string>>()) {
      auto w = planner::merge_measured(model, f);
      warnings.insert(warnings.end(), w.begin(), w.end());
    }
  const std::string text = planner::dump_compact(planner::model_json(model)) + "\n";
  if (out) {
    outputs.write(*out, text);
    outputs.commit();
  }
  for (const auto& w : warnings) std::cerr << "adagrouper model: warning: " << w << '\n';
  if (!out) {
    std::cout << text;
  } else if (!outputs.has_stdout()) {
    std::cout << summary(model) << "wrote " << vm["output"].as<std::string>() << '\n';
  }
  return 0;
}

}  // namespace adagrouper::cli
