// The U-Net generator: a diffusion model's layers, after configs/pipelines/derive_unet.py.
//
// Time embedding, conv_in, ResNet and transformer blocks, samplers and the output head;
// a cut carries every live skip connection.
#include <fmt/format.h>
#include <fmt/ranges.h>

#include "error.h"
#include "model_generator.h"

namespace adagrouper::planner::model_generator {

namespace {

// One layer of the U-Net in 2-byte elements, per sample.
struct Unit {
  std::string name, kind;
  double hw = 0, params = 0, gemm_flops = 0, attn_flops = 0, elem_bytes = 0, act_bytes = 0, kernels = 0;
  double out_ch = 0, out_res = 0;
  bool push = false, pop = false;
};

double conv_params(double cin, double cout, double k) { return k * k * cin * cout + cout; }

Unit resnet(const Arch& a, std::string name, double cin, double cout, double res, bool pop, bool push) {
  const double hw = res * res, T = a.time_embed_dim;
  Unit u;
  u.name = std::move(name);
  u.kind = "resnet";
  u.hw = hw;
  u.params = 2 * cin + conv_params(cin, cout, 3) + T * cout + cout + 2 * cout + conv_params(cout, cout, 3) +
             (cin != cout ? conv_params(cin, cout, 1) : 0);
  u.gemm_flops = 2 * hw * (9 * cin * cout + 9 * cout * cout + (cin != cout ? cin * cout : 0));
  // GroupNorm + SiLU on cin and cout, time-embedding add, residual add; up blocks copy the concatenation.
  u.elem_bytes = hw * (8 * cin + 8 * cout + 4 * cout + 6 * cout + (pop ? 4 * cin : 0));
  u.act_bytes = hw * (6 * cin + 6 * cout);
  u.kernels = 14;
  u.out_ch = cout;
  u.out_res = res;
  u.push = push;
  u.pop = pop;
  return u;
}

Unit unet_transformer(const Arch& a, std::string name, double c, double res, bool push) {
  const double n = res * res, L = a.context_len, D = a.context_dim;
  Unit u;
  u.name = std::move(name);
  u.kind = "transformer";
  u.hw = n;
  u.params = (2 * c + (c * c + c)) + (2 * c + 3 * c * c + c * c + c) + (2 * c + c * c + 2 * D * c + c * c + c) +
             (2 * c + c * 8 * c + 8 * c + 4 * c * c + c) + (c * c + c);
  u.gemm_flops = 2 * n * c * c * (1 + 4 + 2 + 12 + 1) + 2 * 2 * L * D * c;
  u.attn_flops = 4 * n * n * c + 4 * n * L * c;
  u.elem_bytes = 72 * n * c;
  u.act_bytes = 58 * n * c + 4 * L * c;
  u.kernels = 40;
  u.out_ch = c;
  u.out_res = res;
  u.push = push;
  return u;
}

Unit sampler(std::string name, double c, double res_in, double res_out, bool push) {
  const double hw_out = res_out * res_out;
  Unit u;
  u.name = std::move(name);
  u.kind = res_out > res_in ? "upsample" : "downsample";
  u.hw = hw_out;
  u.params = conv_params(c, c, 3);
  u.gemm_flops = 2 * hw_out * 9 * c * c;
  u.elem_bytes = 2 * c * (res_in * res_in + hw_out) * (res_out > res_in ? 2 : 1);
  u.act_bytes = 2 * c * std::max(res_in, res_out) * std::max(res_in, res_out);
  u.kernels = 3;
  u.out_ch = c;
  u.out_res = res_out;
  u.push = push;
  return u;
}

// The time embedding MLP (it has no GEMM FLOPs worth counting) and conv_in.
void add_input_units(const Arch& a, std::vector<Unit>& u) {
  const double c0 = a.channels.front(), T = a.time_embed_dim;
  Unit temb;
  temb.name = "time embedding";
  temb.kind = "embedding";
  temb.hw = 1;
  temb.params = (c0 * T + T) + (T * T + T);
  temb.kernels = 6;
  temb.out_ch = a.in_channels;
  temb.out_res = a.latent;
  u.push_back(temb);
  const double hw = static_cast<double>(a.latent) * a.latent;
  Unit in;
  in.name = "conv_in";
  in.kind = "conv";
  in.hw = hw;
  in.params = conv_params(a.in_channels, c0, 3);
  in.gemm_flops = 2 * hw * 9 * a.in_channels * c0;
  in.elem_bytes = 2 * hw * (a.in_channels + c0);
  in.act_bytes = 2 * hw * a.in_channels;
  in.kernels = 1;
  in.out_ch = c0;
  in.out_res = a.latent;
  in.push = true;
  u.push_back(in);
}

// The down path from resolution `res` and c channels, then the middle block; updates
// res and c to the bottom's.
void add_down_and_middle(const Arch& a, std::vector<Unit>& u, double& res, double& c) {
  const std::size_t levels = a.channels.size();
  for (std::size_t lvl = 0; lvl < levels; ++lvl) {
    const double cl = a.channels[lvl];
    const bool attn = a.attention[lvl] != 0;
    for (int j = 0; j < a.layers_per_block; ++j) {
      u.push_back(resnet(a, fmt::format("down{}.resnet{}", lvl, j), c, cl, res, false, !attn));
      c = cl;
      if (attn) u.push_back(unet_transformer(a, fmt::format("down{}.attn{}", lvl, j), c, res, true));
    }
    if (lvl + 1 < levels) {
      u.push_back(sampler(fmt::format("down{}.downsample", lvl), c, res, res / 2, true));
      res /= 2;
    }
  }
  u.push_back(resnet(a, "mid.resnet0", c, c, res, false, false));
  u.push_back(unet_transformer(a, "mid.attn", c, res, false));
  u.push_back(resnet(a, "mid.resnet1", c, c, res, false, false));
}

// The up path, each ResNet block taking the last live skip connection; updates res and c.
void add_up(const Arch& a, std::vector<Unit>& u, double& res, double& c) {
  std::vector<double> skips;
  for (const Unit& x : u)
    if (x.push) skips.push_back(x.out_ch);
  for (std::size_t lvl = a.channels.size(); lvl-- > 0;) {
    const double cl = a.channels[lvl];
    for (int j = 0; j <= a.layers_per_block; ++j) {
      const double cs = skips.back();
      skips.pop_back();
      u.push_back(resnet(a, fmt::format("up{}.resnet{}", lvl, j), c + cs, cl, res, true, false));
      c = cl;
      if (a.attention[lvl]) u.push_back(unet_transformer(a, fmt::format("up{}.attn{}", lvl, j), c, res, false));
    }
    if (lvl > 0) {
      u.push_back(sampler(fmt::format("up{}.upsample", lvl), c, res, res * 2, false));
      res *= 2;
    }
  }
}

Unit output_unit(const Arch& a, double c) {
  const double hw = static_cast<double>(a.latent) * a.latent;
  Unit out;
  out.name = "out";
  out.kind = "head";
  out.hw = hw;
  out.params = 2 * c + conv_params(c, a.in_channels, 3);
  out.gemm_flops = 2 * hw * 9 * c * a.in_channels;
  out.elem_bytes = hw * (8 * c + 2 * a.in_channels * 4);
  out.act_bytes = hw * 6 * c;
  out.kernels = 5;
  out.out_ch = a.in_channels;
  out.out_res = a.latent;
  return out;
}

std::vector<Unit> unet_units(const Arch& a) {
  std::vector<Unit> u;
  add_input_units(a, u);
  double res = a.latent, c = a.channels.front();
  add_down_and_middle(a, u, res, c);
  add_up(a, u, res, c);
  u.push_back(output_unit(a, c));
  return u;
}

// Unit x at micro-batch size b; fwd_msg and bwd_msg are the bytes per sample crossing a
// cut after it.
Costs unit_costs(const Unit& x, const Estimator& est, double b, double fwd_msg, double bwd_msg) {
  const double d = est.d, sc = d / 2;  // the unit tables are in 2-byte elements
  Costs c;
  const double rows = b * x.hw;
  c.flops = b * (x.gemm_flops + x.attn_flops);
  c.fwd = est.gemm(b * x.gemm_flops, rows, d * x.params) + (x.attn_flops > 0 ? est.attention(b * x.attn_flops) : 0) +
          est.memory(b * sc * x.elem_bytes) + est.launches(x.kernels);
  // Backward: 2x the GEMMs (reading weights, writing and accumulating gradients),
  // 2.5x attention (the scores are recomputed), 2x elementwise and kernels.
  c.bwd = est.gemm(2 * b * x.gemm_flops, rows, 3 * d * x.params) +
          (x.attn_flops > 0 ? est.attention(2.5 * b * x.attn_flops) : 0) + est.memory(2 * b * sc * x.elem_bytes) +
          est.launches(2 * x.kernels);
  // time embedding: only the tiny MLP; its weights are read once per op
  if (x.gemm_flops == 0) {
    c.fwd += est.memory(d * x.params);
    c.bwd += est.memory(3 * d * x.params);
  }
  c.act = b * sc * x.act_bytes;
  c.out = b * fwd_msg;
  if (bwd_msg != fwd_msg) c.gout = b * bwd_msg;
  return c;
}

void add_layers(Model& m, const Generation& g) {
  const Arch& a = g.arch;
  const std::vector<Unit> units = unet_units(a);
  const double sc = g.est.d / 2;
  // Bytes per sample crossing a cut after unit i: the hidden state, every live skip
  // tensor, the time embedding and the text context forward; the same without the
  // context backward (it belongs to the frozen text encoder).
  std::vector<double> live;
  for (std::size_t i = 0; i < units.size(); ++i) {
    const Unit& x = units[i];
    if (x.pop) live.pop_back();
    if (x.push) live.push_back(2 * x.out_ch * x.out_res * x.out_res);
    const bool last = i + 1 == units.size();
    double grad = (x.push ? 0 : 2 * x.out_ch * x.out_res * x.out_res) + 2 * a.time_embed_dim;
    for (double v : live) grad += v;
    const double fwd_msg = last ? 0 : sc * (grad + 2.0 * a.context_len * a.context_dim);
    const double bwd_msg = last ? 0 : sc * grad;
    add_layer(m, g, x.name, x.kind, x.params, [&](double b) { return unit_costs(x, g.est, b, fwd_msg, bwd_msg); });
  }
}

void check_and_record(Model& m, const Generation& g) {
  const Arch& a = g.arch;
  const std::string_view levels[] = {"latent", "in-channels"};
  const std::string_view blocks[] = {"layers-per-block", "heads", "context-len", "context-dim", "time-embed-dim"};
  require_positive(a, levels);
  require_positive(a, blocks);
  if (a.channels.empty()) throw InputError("--channels: give the channels of every level (e.g. 320,640,1280,1280)");
  for (int c : a.channels) require_positive(c, "channels", a.arch);
  if (a.attention.size() != a.channels.size())
    throw InputError(fmt::format("--attention-levels: give one 0/1 per level ({} levels), got {}", a.channels.size(),
                                 a.attention.size()));
  if (a.latent % (1 << (a.channels.size() - 1)) != 0)
    throw InputError(fmt::format("--latent: {} cannot be halved {} times", a.latent, a.channels.size() - 1));
  auto& arch = m.architecture;
  record_ints(arch, a, levels);
  arch["channels"] = a.channels, arch["attention_levels"] = a.attention;
  record_ints(arch, a, blocks);
  arch["dtype"] = g.dtype;
}

}  // namespace

void generate_unet(Model& m, const Generation& g) {
  const Arch& a = g.arch;
  check_and_record(m, g);
  add_layers(m, g);
  m.description = fmt::format(
      "U-Net diffusion model: {}x{}x{} latents, channels {}, {} ResNet blocks per level, text cross-attention "
      "({}x{} context); {} layers (ResNet blocks, transformer blocks, samplers). Analytic estimates on {} "
      "after configs/pipelines/derive_unet.py: convolutions 2*H*W*9*cin*cout FLOPs, transformer GEMMs, fused "
      "attention cores 4*N^2*C + 4*N*77*C; a cut carries the hidden state, every live skip connection, the time "
      "embedding and (forward only) the text context; fp32 EMA of the weights.",
      a.latent, a.latent, a.in_channels, fmt::join(a.channels, "/"), a.layers_per_block, a.context_len,
      a.context_dim, m.layers.size(), g.est.dev.name);
}

}  // namespace adagrouper::planner::model_generator
