// The analytic model generator's shared parts, internal to planner/.
//
// The device cost model, a layer's costs at one micro-batch size, and the
// per-architecture generators that generate_model (model_generate.cpp) dispatches to.
#pragma once

#include <algorithm>
#include <optional>
#include <span>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "model.h"

namespace adagrouper::planner::model_generator {

// The analytic device model for one generated layer.
struct Estimator {
  const Device& dev;
  double d;  // bytes per element

  double eff(double rows) const { return dev.gemm_efficiency * (rows / (rows + dev.gemm_half_rows)); }
  // A GEMM (or convolution) of `flops` over `rows` rows that must read `weight_bytes`.
  double gemm(double flops, double rows, double weight_bytes) const {
    if (flops <= 0) return 0;
    return std::max(flops / (dev.peak_flops * eff(rows)),
                    weight_bytes / (dev.memory_bandwidth * dev.memory_efficiency));
  }
  double attention(double flops) const { return flops / (dev.peak_flops * dev.attention_efficiency); }
  double memory(double bytes) const { return bytes / (dev.memory_bandwidth * dev.memory_efficiency); }
  double launches(double kernels) const { return kernels * dev.kernel_overhead_s; }
};

// What a generated layer needs at one micro-batch size.
struct Costs {
  double fwd = 0, bwd = 0, act = 0, out = 0;
  std::optional<double> gout;
  double flops = 0;
};

// x rounded to `digits` significant digits.
double round_sig(double x, int digits);

// The profile entry of costs c at micro-batch size b (times to 6 significant digits,
// bytes to whole bytes).
LayerPoint point(int b, const Costs& c);

// Throws InputError "--OPTION: must be >= 1 for --arch ARCH" when v < 1.
void require_positive(int v, const char* option, const std::string& arch);

// The same for each of a's integer hyperparameters named in `options` (kArchInts), in order.
void require_positive(const Arch& a, std::span<const std::string_view> options);

// Records those hyperparameters in `architecture`, in order, under their names with '_'
// for '-'.
void record_ints(nlohmann::ordered_json& architecture, const Arch& a, std::span<const std::string_view> options);

// What every architecture's generator reads.
struct Generation {
  const Arch& arch;
  const Estimator& est;
  const std::vector<int>& sizes;  // micro-batch sizes, increasing
  double opt_traffic;             // optimizer step traffic per parameter byte
  const char* dtype;              // "fp16/bf16" or "fp32", for the record
};

// Appends a layer of `params` parameters whose costs at micro-batch size b are
// costs_at(b) for every size of the generation.
template <typename CostsAt>
void add_layer(Model& m, const Generation& g, std::string name, std::string kind, double params, CostsAt costs_at) {
  Layer l;
  l.name = std::move(name);
  l.kind = std::move(kind);
  l.parameter_bytes = params * g.est.d;
  l.optimizer_s = round_sig(g.est.memory(l.parameter_bytes * g.opt_traffic), 6);
  for (int b : g.sizes) l.profile.push_back(point(b, costs_at(static_cast<double>(b))));
  m.layers.push_back(std::move(l));
}

// The generators: each checks its hyperparameters (InputError naming the option),
// records them in m.architecture, appends the layers and writes m.description.
void generate_transformer(Model& m, const Generation& g);  // gpt, bert (model_transformer.cpp)
void generate_unet(Model& m, const Generation& g);         // model_unet.cpp
void generate_gnmt(Model& m, const Generation& g);         // model_gnmt.cpp

}  // namespace adagrouper::planner::model_generator
