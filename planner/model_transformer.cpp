// The transformer generator (gpt: decoder, bert: encoder) and a transformer layer's closed forms.
//
// Layers: embedding, transformer layers, head; the forward FLOPs and activation bytes of
// one transformer layer.
#include <string_view>

#include <fmt/format.h>

#include "error.h"
#include "model_generator.h"

namespace adagrouper::planner {

double transformer_layer_forward_flops(double b, double s, double h) { return 24 * b * s * h * h + 4 * b * s * s * h; }

double transformer_layer_activation_bytes(double b, double s, double h, double a, int d, std::string_view recompute) {
  // Korthikanti et al. 2022, "Reducing Activation Recomputation in Large Transformer
  // Models", section 4.1: per layer, in elements of d bytes, attention 5sbh + 2as^2b
  // (QKV input, Q and K, V, projection input; softmax output and its dropout output),
  // MLP 9sbh, two LayerNorm inputs 2sbh; and 1-byte dropout masks sbh (attention
  // output), as^2b (attention probabilities), sbh (MLP output).
  if (recompute == "full") return d * s * b * h;  // only the layer's input
  const double no_scores = d * 16 * s * b * h + 2 * s * b * h;
  if (recompute == "selective") return no_scores;  // the as^2b terms are recomputed
  return no_scores + d * 2 * a * s * s * b + a * s * s * b;
}

namespace model_generator {

namespace {

// Embedding: word + learned position (+ token type and LayerNorm for BERT), dropout.
void add_embedding(Model& m, const Generation& g, bool bert) {
  const Arch& a = g.arch;
  const Estimator& est = g.est;
  const double h = a.hidden, s = a.seq_len, V = a.vocab, d = a.bytes_per_element;
  const double params = (V + s) * h + (bert ? 2 * h + 2 * h : 0);
  const double hidden_msg = d * s * h;  // [b, s, h] per sample
  add_layer(m, g, "embedding", "embedding", params, [&](double b) {
    Costs c;
    const double elem = b * d * (bert ? 6 : 4) * s * h;  // gather, add(s), (LayerNorm,) dropout
    c.fwd = est.memory(elem) + est.launches(bert ? 6 : 4);
    // The dense word-embedding gradient is zeroed and accumulated every backward.
    c.bwd = est.memory(elem + 2 * d * V * h) + est.launches(bert ? 8 : 6);
    c.act = b * s * h + (bert ? b * d * s * h : 0);  // dropout mask (1 byte), LayerNorm input
    c.out = b * hidden_msg;
    return c;
  });
}

// One transformer layer at micro-batch size b.
Costs layer_costs(const Arch& a, const Estimator& est, double b) {
  const double h = a.hidden, s = a.seq_len, heads = a.heads, d = a.bytes_per_element;
  const double weights = (12 * h * h + 13 * h) * d;
  Costs c;
  const double rows = b * s;
  const double dense = 24 * b * s * h * h, core = 4 * b * s * s * h;
  c.flops = transformer_layer_forward_flops(b, s, h);
  // LayerNorm, GeLU, dropout, residual adds (46 s h), softmax and its dropout (9 a s^2),
  // in bytes for 2-byte elements (configs/pipelines/derive_gpt.py).
  const double elem = b * (d / 2) * (46 * s * h + 9 * heads * s * s);
  const double softmax = b * (d / 2) * 9 * heads * s * s;
  const double kernels = 12;
  c.fwd = est.gemm(dense, rows, weights) + est.gemm(core, rows, 0) + est.memory(elem) + est.launches(kernels);
  double bdense = 2 * dense, bcore = 2 * core, belem = 2 * elem, bkernels = 2 * kernels;
  if (a.recompute == "selective") {
    bcore += core;  // QK^T, softmax, dropout and AV are recomputed
    belem += softmax;
    bkernels += 5;
  } else if (a.recompute == "full") {
    bdense += dense;
    bcore += core;
    belem += elem;
    bkernels += kernels;
  }
  c.bwd = est.gemm(bdense, rows, 3 * weights) + est.gemm(bcore, rows, 0) + est.memory(belem) + est.launches(bkernels);
  c.act = transformer_layer_activation_bytes(b, s, h, heads, a.bytes_per_element, a.recompute);
  const double hidden_msg = d * s * h;  // [b, s, h] per sample
  c.out = b * hidden_msg;
  return c;
}

// BERT's pre-training heads: MLM transform (dense h x h, GeLU, LayerNorm), decoder to
// the vocabulary over every position, pooler and next-sentence classifier.
void add_bert_head(Model& m, const Generation& g) {
  const Estimator& est = g.est;
  const double h = g.arch.hidden, s = g.arch.seq_len, V = g.arch.vocab, d = g.arch.bytes_per_element;
  const double params = h * h + h + 2 * h + V * h + V + h * h + h + 2 * h + 2;
  add_layer(m, g, "head", "head", params, [&](double b) {
    Costs c;
    const double rows = b * s;
    const double dense = 2 * b * s * h * h, vocab = 2 * b * s * h * V, pooler = 2 * b * h * h;
    c.flops = dense + vocab + pooler;
    const double elem_f = b * ((d / 2) * 12 * s * h + 20 * s * V), elem_b = b * ((d / 2) * 16 * s * h + 8 * s * V);
    c.fwd = est.gemm(dense, rows, d * h * h) + est.gemm(vocab, rows, d * V * h) + est.gemm(pooler, b, d * h * h) +
            est.memory(elem_f) + est.launches(10);
    c.bwd = est.gemm(2 * dense, rows, 3 * d * h * h) + est.gemm(2 * vocab, rows, 3 * d * V * h) +
            est.gemm(2 * pooler, b, 3 * d * h * h) + est.memory(elem_b) + est.launches(20);
    c.act = b * (3 * d * s * h + 4 * s * V);  // transform inputs; fp32 logits for the loss
    c.out = 0;
    return c;
  });
}

// GPT's head: final LayerNorm, LM head (untied: the last stage holds its own copy),
// fp32 cross-entropy.
void add_gpt_head(Model& m, const Generation& g) {
  const Estimator& est = g.est;
  const double h = g.arch.hidden, s = g.arch.seq_len, V = g.arch.vocab, d = g.arch.bytes_per_element;
  add_layer(m, g, "head", "head", 2 * h + V * h, [&](double b) {
    Costs c;
    const double rows = b * s;
    const double vocab = 2 * b * s * h * V;
    c.flops = vocab;
    const double elem_f = b * ((d / 2) * 4 * s * h + 20 * s * V), elem_b = b * ((d / 2) * 8 * s * h + 8 * s * V);
    c.fwd = est.gemm(vocab, rows, d * V * h) + est.memory(elem_f) + est.launches(6);
    c.bwd = est.gemm(2 * vocab, rows, 3 * d * V * h) + est.memory(elem_b) + est.launches(10);
    c.act = b * (2 * d * s * h + 4 * s * V);  // Korthikanti et al.: 4sbh(1 + V/h) for d = 2
    c.out = 0;
    return c;
  });
}

void check_and_record(Model& m, const Generation& g) {
  const Arch& a = g.arch;
  const std::string_view ints[] = {"layers", "hidden", "heads", "seq-len", "vocab"};
  require_positive(a, ints);
  if (a.hidden % a.heads != 0)
    throw InputError(fmt::format("--heads: {} heads do not divide the hidden size {}", a.heads, a.hidden));
  auto& arch = m.architecture;
  record_ints(arch, a, ints);
  arch["dtype"] = g.dtype, arch["recompute"] = a.recompute;
}

}  // namespace

void generate_transformer(Model& m, const Generation& g) {
  const Arch& a = g.arch;
  check_and_record(m, g);
  const bool bert = a.arch == "bert";
  add_embedding(m, g, bert);
  const double layer_params = 12.0 * a.hidden * a.hidden + 13.0 * a.hidden;
  for (int i = 0; i < a.layers; ++i)
    add_layer(m, g, fmt::format("layer {}", i), bert ? "encoder" : "decoder", layer_params,
              [&](double b) { return layer_costs(a, g.est, b); });
  if (bert) {
    add_bert_head(m, g);
  } else {
    add_gpt_head(m, g);
  }
  m.description = fmt::format(
      "{} {} layers, hidden {}, {} heads, sequence {}, vocabulary {}, {} activations, '{}' activation "
      "recomputation; {} layers: embedding, {} transformer layers, head. Analytic estimates on {} "
      "(docs/formats.md, 'Model file'): forward FLOPs per transformer layer 24bsh^2 + 4bs^2h (Narayanan et al. "
      "2021); activations per layer from Korthikanti et al. 2022 (34sbh + 5as^2b bytes for 2-byte elements "
      "without recomputation, 34sbh with selective, 2sbh with full recomputation).",
      bert ? "Transformer encoder (BERT):" : "Transformer decoder (GPT):", a.layers, a.hidden, a.heads, a.seq_len,
      a.vocab, g.dtype, a.recompute, a.layers + 2, a.layers, g.est.dev.name);
}

}  // namespace model_generator

}  // namespace adagrouper::planner
