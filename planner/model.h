// Layer-level models: the model file, its analytic generator and device presets, and measured layers.
//
// A model (docs/formats.md, "Model file") is an ordered list of layers, each with
// per-micro-batch-size forward/backward time and activation, output and parameter
// bytes, measured or estimated; the optimizer's bytes per parameter byte; and the
// device. The generator behind `adagrouper model` covers transformer decoders and
// encoders, U-Net diffusion models and GNMT-style LSTM seq2seq.
//
//   Model m = generate_model(arch_preset("gpt2-xl"), device_preset("v100-32gb"), {1, 2, 4}, 64);
//   merge_measured(m, "calib.jsonl");
//   model_json(m)  ->  the adagrouper.model/1 document
#pragma once

#include <filesystem>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include <nlohmann/json.hpp>

namespace adagrouper::planner {

// --- the device ------------------------------------------------------------------

// The analytic device model: a GEMM of n rows runs at
//   peak_flops x gemm_efficiency x n / (n + gemm_half_rows)
// but never faster than reading its weights; memory-bound (elementwise) kernels move
// bytes at memory_bandwidth x memory_efficiency; each kernel costs kernel_overhead_s.
struct Device {
  std::string name;
  double memory_bytes = 0;             // per device; the default memory limit per stage
  double peak_flops = 0;               // dense fp16/bf16 tensor-core peak, FLOP/s
  double memory_bandwidth = 0;         // peak memory bandwidth, bytes/s
  double gemm_efficiency = 0;          // achieved fraction of peak for large GEMMs
  double gemm_half_rows = 0;           // GEMM rows at which half of gemm_efficiency is reached
  double attention_efficiency = 0;     // fused (memory-efficient) attention kernels, fraction of peak
  double memory_efficiency = 0;        // achieved fraction of memory_bandwidth
  double kernel_overhead_s = 0;        // launch and framework cost per kernel
  double reserved_bytes = 0;           // CUDA context, library workspaces: resident on every device
  std::string source;                  // where the numbers come from
};

// The presets: v100-32gb, a100-40gb, a100-80gb, h100-80gb. Throws InputError naming
// `what` for an unknown name.
Device device_preset(std::string_view name, const std::string& what = "--device");
inline constexpr std::string_view kDevicePresets = "v100-32gb, a100-40gb, a100-80gb, h100-80gb";

// --- the model file ----------------------------------------------------------------

struct LayerPoint {
  int micro_batch_size = 0;
  double forward_s = 0, backward_s = 0;
  double activation_bytes = 0;   // kept from F until B ends
  double output_bytes = 0;       // what crosses a stage cut placed right after this layer
  std::optional<double> grad_output_bytes;  // the gradient crossing that cut (default output_bytes)
  std::optional<double> forward_flops;      // the estimate's FLOPs of F (informational)
  bool measured = false;
};

struct Layer {
  std::string name;
  std::string kind;                 // informational: embedding, transformer, head, resnet, lstm, ...
  double parameter_bytes = 0;
  double optimizer_s = 0;           // optimizer step for this layer's parameters
  std::vector<LayerPoint> profile;  // strictly increasing micro_batch_size
};

struct Model {
  std::string name;
  std::string source_file;          // the file it was read from (for messages)
  std::string description;
  std::string source;               // where the architecture comes from
  std::string generated_by;         // the command that wrote it (generated models)
  nlohmann::ordered_json architecture = nlohmann::ordered_json::object();  // hyperparameters (informational)
  std::optional<int> global_batch_size;
  double optimizer_bytes_per_parameter_byte = 0;  // gradients + optimizer state per parameter byte
  Device device;
  std::vector<Layer> layers;
  std::vector<std::string> measured_files;

  int num_layers() const { return static_cast<int>(layers.size()); }
  // Micro-batch sizes every layer's profile covers: the listed sizes of all layers that
  // lie inside the range common to all of them, increasing. Throws InputError when the
  // ranges do not overlap.
  std::vector<int> micro_batch_sizes() const;
  double total_parameter_bytes() const;
};

// Layer values at micro-batch size b, linearly interpolated between listed sizes. Throws
// InputError naming `what` and the layer when b is outside the layer's profile.
struct LayerAt {
  double fwd = 0, bwd = 0, act = 0, out = 0, gout = 0;
};
LayerAt layer_at(const Model& model, int layer, int b, const std::string& what = "--micro-batch-size");

Model load_model(const std::filesystem::path& path);
Model parse_model(const nlohmann::json& doc, const std::string& source);
nlohmann::ordered_json model_json(const Model& model);

// JSON text with every object or array that fits in `width` columns on one line (the
// shipped model and pipeline files are written this way).
std::string dump_compact(const nlohmann::ordered_json& value, int width = 160, int indent = 0);

// Replaces estimates with the measurements of a calibration JSONL file: every line with
// "type": "layer" names a layer by index and a micro_batch_size and gives forward_s and
// backward_s (required) and activation_bytes, output_bytes, parameter_bytes (optional;
// missing ones keep the estimate). A size the layer does not list is inserted. Lines of
// other types are ignored. Returns warnings (a layer whose name differs from the
// measured one); throws InputError naming the file and line for bad lines.
std::vector<std::string> merge_measured(Model& model, const std::filesystem::path& path);

// --- the generator -------------------------------------------------------------------

// Architecture hyperparameters. Which fields matter depends on `arch`:
//   gpt, bert: layers, hidden, heads, seq_len, vocab
//   unet:      latent, in_channels, channels, attention, layers_per_block, heads, context_len,
//              context_dim, time_embed_dim
//   gnmt:      encoder_layers, decoder_layers, hidden, vocab, seq_len (source), target_len
struct Arch {
  std::string arch;                  // gpt, bert, unet, gnmt
  std::string name;                  // model name
  std::string source;                // where the shape comes from
  int layers = 0, hidden = 0, heads = 0, seq_len = 0, vocab = 0;
  int bytes_per_element = 2;         // dtype: 2 (fp16/bf16) or 4 (fp32)
  std::string recompute = "selective";  // none, selective, full (transformer layers)
  int latent = 0, in_channels = 0, layers_per_block = 0, context_len = 0, context_dim = 0, time_embed_dim = 0;
  std::vector<int> channels;         // unet: channels per level
  std::vector<int> attention;        // unet: 1 if the level has transformer blocks
  int encoder_layers = 0, decoder_layers = 0, target_len = 0;
  int global_batch_size = 0;         // recorded in the model file
};

// The integer hyperparameters of Arch by the names of their options ("seq-len"; in the
// model file's "architecture", "seq_len"), in the order `adagrouper model` applies them.
struct ArchInt {
  std::string_view option;
  int Arch::*member;
};
inline constexpr ArchInt kArchInts[] = {
    {"layers", &Arch::layers}, {"hidden", &Arch::hidden}, {"heads", &Arch::heads}, {"seq-len", &Arch::seq_len},
    {"vocab", &Arch::vocab}, {"latent", &Arch::latent}, {"in-channels", &Arch::in_channels},
    {"layers-per-block", &Arch::layers_per_block}, {"context-len", &Arch::context_len},
    {"context-dim", &Arch::context_dim}, {"time-embed-dim", &Arch::time_embed_dim},
    {"encoder-layers", &Arch::encoder_layers}, {"decoder-layers", &Arch::decoder_layers},
    {"target-len", &Arch::target_len}, {"global-batch-size", &Arch::global_batch_size}};

// The presets: gpt2-xl, gpt3-2.7b, gpt3-6.7b, bert-48, sd-unet, gnmt-16. Throws
// InputError naming `what` for an unknown name.
Arch arch_preset(std::string_view name, const std::string& what = "--preset");
inline constexpr std::string_view kArchPresets = "gpt2-xl, gpt3-2.7b, gpt3-6.7b, bert-48, sd-unet, gnmt-16";

// Checks the hyperparameters (InputError naming the option) and builds the layer list
// with analytic estimates at every size in `micro_batch_sizes` (increasing, >= 1).
Model generate_model(const Arch& arch, const Device& device, const std::vector<int>& micro_batch_sizes);

// Closed forms the generator uses, exposed for tests and docs.
// Forward FLOPs of one transformer layer for b samples of s tokens, hidden h:
// 24 b s h^2 + 4 b s^2 h (Narayanan et al. 2021).
double transformer_layer_forward_flops(double b, double s, double h);
// Activation bytes one transformer layer keeps (Korthikanti et al. 2022, table 2,
// generalised to element size d; d = 2 gives 34 s b h + 5 a s^2 b for "none",
// 34 s b h for "selective", 2 s b h for "full").
double transformer_layer_activation_bytes(double b, double s, double h, double a, int d, std::string_view recompute);

}  // namespace adagrouper::planner
