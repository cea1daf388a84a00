// generate_model: the device and common checks, then the architecture's generator.
//
// The generators are in model_transformer.cpp, model_unet.cpp and model_gnmt.cpp;
// docs/formats.md, "Model file".
#include <algorithm>
#include <cmath>
#include <stdexcept>
#include <string>

#include <fmt/format.h>

#include "error.h"
#include "model_generator.h"

namespace adagrouper::planner {

namespace model_generator {

double round_sig(double x, int digits) {
  if (x == 0 || !std::isfinite(x)) return x;
  const double scale = std::pow(10.0, digits - 1 - static_cast<int>(std::floor(std::log10(std::fabs(x)))));
  return std::round(x * scale) / scale;
}

LayerPoint point(int b, const Costs& c) {
  LayerPoint p;
  p.micro_batch_size = b;
  p.forward_s = round_sig(c.fwd, 6);
  p.backward_s = round_sig(c.bwd, 6);
  p.activation_bytes = std::round(c.act);
  p.output_bytes = std::round(c.out);
  if (c.gout) p.grad_output_bytes = std::round(*c.gout);
  if (c.flops > 0) p.forward_flops = c.flops;
  return p;
}

void require_positive(int v, const char* option, const std::string& arch) {
  if (v < 1) throw InputError(fmt::format("--{}: must be >= 1 for --arch {}, got {}", option, arch, v));
}

namespace {

int Arch::*arch_int(std::string_view option) {
  for (const auto& [name, member] : kArchInts)
    if (name == option) return member;
  throw std::logic_error(fmt::format("no integer hyperparameter --{}", option));
}

}  // namespace

void require_positive(const Arch& a, std::span<const std::string_view> options) {
  for (const std::string_view o : options) require_positive(a.*arch_int(o), std::string(o).c_str(), a.arch);
}

void record_ints(nlohmann::ordered_json& architecture, const Arch& a, std::span<const std::string_view> options) {
  for (const std::string_view o : options) {
    std::string key(o);
    std::replace(key.begin(), key.end(), '-', '_');
    architecture[key] = a.*arch_int(o);
  }
}

}  // namespace model_generator

namespace {

using namespace model_generator;

// Per-parameter-byte constants of mixed-precision Adam (fp16/bf16 weights: fp16
// gradient 2 + fp32 master 4 + m 4 + v 4 bytes per 2-byte parameter; the step reads and
// writes them, 38 bytes of traffic) and of fp32 Adam (gradient 4 + m 4 + v 4 per 4-byte
// parameter; 28 bytes of traffic). `ema` adds an fp32 exponential moving average of the
// weights (diffusion training): 4 more bytes and 12 more bytes of traffic per parameter.
struct OptimizerBytes {
  double state_per_param_byte;
  double traffic_per_param_byte;
};
OptimizerBytes optimizer_bytes(int d, bool ema) {
  const double state = d == 2 ? 14.0 : 12.0, traffic = d == 2 ? 38.0 : 28.0;
  return {(state + (ema ? 4.0 : 0.0)) / d, (traffic + (ema ? 12.0 : 0.0)) / d};
}

void check_device(const Device& d) {
  auto need = [](double v, const char* option, bool fraction) {
    if (!(v > 0) || !std::isfinite(v) || (fraction && v > 1))
      throw InputError(fmt::format("--{}: must be {}, got {}", option, fraction ? "in (0, 1]" : "> 0", v));
  };
  need(d.memory_bytes, "memory-bytes", false);
  need(d.peak_flops, "peak-flops", false);
  need(d.memory_bandwidth, "memory-bandwidth", false);
  need(d.gemm_efficiency, "gemm-efficiency", true);
  need(d.attention_efficiency, "attention-efficiency", true);
  need(d.memory_efficiency, "memory-efficiency", true);
  if (!(d.gemm_half_rows >= 0) || !std::isfinite(d.gemm_half_rows))
    throw InputError(fmt::format("--gemm-half-rows: must be >= 0, got {}", d.gemm_half_rows));
  if (!(d.kernel_overhead_s >= 0) || !std::isfinite(d.kernel_overhead_s))
    throw InputError(fmt::format("--kernel-overhead: must be >= 0, got {}", d.kernel_overhead_s));
  if (!(d.reserved_bytes >= 0) || !std::isfinite(d.reserved_bytes))
    throw InputError(fmt::format("--reserved-bytes: must be >= 0, got {}", d.reserved_bytes));
}

// The options every architecture shares: sizes, element size, recomputation, batch.
void check_common(const Arch& a, const std::vector<int>& sizes) {
  if (sizes.empty()) throw InputError("--micro-batch-sizes: give at least one size");
  for (std::size_t i = 0; i < sizes.size(); ++i)
    if (sizes[i] < 1 || (i > 0 && sizes[i] <= sizes[i - 1]))
      throw InputError(fmt::format("--micro-batch-sizes: sizes must be >= 1 and strictly increasing, got {} after {}",
                                   sizes[i], i > 0 ? sizes[i - 1] : 0));
  if (a.bytes_per_element != 2 && a.bytes_per_element != 4)
    throw InputError(fmt::format("--dtype: element size must be 2 or 4 bytes, got {}", a.bytes_per_element));
  if (a.recompute != "none" && a.recompute != "selective" && a.recompute != "full")
    throw InputError(fmt::format("--recompute: must be none, selective or full, got '{}'", a.recompute));
  if (a.global_batch_size < 0)
    throw InputError(fmt::format("--global-batch-size: must be >= 1, got {}", a.global_batch_size));
}

}  // namespace

Model generate_model(const Arch& a, const Device& device, const std::vector<int>& sizes) {
  check_device(device);
  check_common(a, sizes);
  Model m;
  m.name = a.name.empty() ? a.arch : a.name;
  m.source_file = "(generated)";
  m.source = a.source;
  m.device = device;
  if (a.global_batch_size > 0) m.global_batch_size = a.global_batch_size;
  const Estimator est{device, static_cast<double>(a.bytes_per_element)};
  const OptimizerBytes ob = optimizer_bytes(a.bytes_per_element, a.arch == "unet");  // U-Net: with an EMA
  m.optimizer_bytes_per_parameter_byte = ob.state_per_param_byte;
  m.architecture["arch"] = a.arch;
  const Generation g{a, est, sizes, ob.traffic_per_param_byte, a.bytes_per_element == 2 ? "fp16/bf16" : "fp32"};
  if (a.arch == "gpt" || a.arch == "bert") {
    generate_transformer(m, g);
  } else if (a.arch == "unet") {
    generate_unet(m, g);
  } else if (a.arch == "gnmt") {
    generate_gnmt(m, g);
  } else {
    throw InputError(fmt::format("--arch: must be gpt, bert, unet or gnmt, got '{}'", a.arch));
  }
  m.description += fmt::format(
      " Static memory: parameters x (1 + {}) (gradients and optimizer state) plus {:.3g} bytes reserved per device.",
      m.optimizer_bytes_per_parameter_byte, device.reserved_bytes);
  return m;
}

}  // namespace adagrouper::planner
