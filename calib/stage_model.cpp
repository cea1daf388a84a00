// One pipeline stage on a backend (calib/stage_model.h): buffers, initialization, layer kernels.
#include "stage_model.h"

#include <climits>
#include <cmath>

#include <fmt/format.h>

#include "error.h"

namespace adagrouper::calib {

namespace {

// Parameter offsets (elements) of a transformer layer inside the stage's flat buffers.
struct TransformerParams {
  std::uint64_t wqkv, bqkv, wo, bo, w1, b1, w2, b2, ln1_g, ln1_b, ln2_g, ln2_b, end;
};
struct EmbeddingParams {
  std::uint64_t wte, wpe, end;
};
struct HeadParams {
  std::uint64_t ln_g, ln_b, w, end;
};

}  // namespace

struct StageModel::Impl {
  struct Layer {
    LayerDesc desc;
    std::uint64_t param_begin = 0, param_end = 0;
    TransformerParams tp{};
    EmbeddingParams ep{};
    HeadParams hp{};
    std::uint64_t activation_bytes = 0, output_bytes = 0;
    std::vector<std::unique_ptr<Buffer>> kept;  // owned: what forward keeps for backward
    // Views (not owned by the layer unless also in `kept`).
    void* x = nullptr;    // input (hidden state)
    void* out = nullptr;  // output (the next layer's input, or the stage's message)
    float *mean1 = nullptr, *rstd1 = nullptr, *mean2 = nullptr, *rstd2 = nullptr;
    void *y1 = nullptr, *qkv = nullptr, *probs = nullptr, *ctx = nullptr, *x2 = nullptr, *y2 = nullptr,
         *u = nullptr, *g = nullptr;
    std::int32_t* ids = nullptr;  // embedding: token ids; head: labels
    float* loss = nullptr;
  };

  Backend& be;
  const StageDescription& d;
  int stage, b;
  Elem e;
  std::size_t es;
  int h, a, dh, s, f, V, rows;
  std::vector<Layer> layers;
  std::uint64_t nparams = 0;
  std::unique_ptr<Buffer> params, grads, adam_m, adam_v, master;
  // The last layer's output: the message to the next stage (the head's: its loss). The
  // other hidden states are the layers' inputs, which the layers keep.
  std::unique_ptr<Buffer> stage_out;
  std::unique_ptr<Buffer> grad_in;       // the gradient arriving from the next stage
  std::unique_ptr<Buffer> grad_ping[2];  // the gradient of layer j's input in grad_ping[j % 2]
  // Backward workspaces, shared by the layers.
  std::unique_ptr<Buffer> ws_dg, ws_dy2, ws_dx2, ws_dctx, ws_dp, ws_dqkv, ws_dy1;
  int step = 0;

  Impl(Backend& backend, const StageDescription& desc, int st, int mbs)
      : be(backend),
        d(desc),
        stage(st),
        b(mbs),
        e(elem_of(desc.dtype)),
        es(dtype_bytes(desc.dtype)),
        h(desc.hidden),
        a(desc.heads),
        dh(desc.hidden / desc.heads),
        s(desc.sequence_length),
        f(desc.ffn_hidden),
        V(desc.vocabulary),
        rows(0) {}

  std::unique_ptr<Buffer> alloc(std::uint64_t elements, Elem t) { return be.allocate(elements * elem_bytes(t)); }
  void* at(void* base, std::uint64_t elements) const { return static_cast<char*>(base) + elements * es; }
  const void* pat(std::uint64_t elements) const { return static_cast<const char*>(params->data()) + elements * es; }
  float* gat(std::uint64_t elements) const { return grads->as<float>() + elements; }

  // Allocates a kept buffer of `elements` of type t for layer L.
  void* keep(Layer& L, std::uint64_t elements, Elem t) {
    L.kept.push_back(alloc(elements, t));
    L.activation_bytes += elements * elem_bytes(t);
    return L.kept.back()->data();
  }

  // The constructor's steps, in order.
  void lay_out_parameters();
  void allocate_hidden_states();
  void keep_activations(Layer& L);
  void allocate_workspaces();
  void initialize(Stream& stream, std::uint64_t seed);

  void forward(Kernels& k, Layer& L) const;
  void backward(Kernels& k, Layer& L, const void* dy, void* dx);
  void* grad_of_output(int i) {
    const int n = static_cast<int>(layers.size());
    if (i + 1 == n) return grad_in ? grad_in->data() : nullptr;
    return grad_ping[(i + 1) % 2]->data();
  }
};

StageModel::StageModel(Backend& backend, Stream& stream, const StageDescription& d, int stage, int micro_batch_size,
                       std::uint64_t seed)
    : impl_(std::make_unique<Impl>(backend, d, stage, micro_batch_size)) {
  const std::int64_t rows = static_cast<std::int64_t>(micro_batch_size) * d.sequence_length;
  if (micro_batch_size < 1 || rows > INT_MAX)
    throw InputError(fmt::format("{}: micro-batch size {} x sequence_length {} is more rows than the kernels take",
                                 d.source, micro_batch_size, d.sequence_length));
  impl_->rows = static_cast<int>(rows);
  impl_->lay_out_parameters();
  impl_->allocate_hidden_states();
  impl_->allocate_workspaces();
  impl_->initialize(stream, seed);
}

// Parameters: one flat buffer per kind (weights, f32 gradients, Adam moments, f32
// master weights for f16), the layers one after the other.
void StageModel::Impl::lay_out_parameters() {
  const std::uint64_t H = static_cast<std::uint64_t>(h), F = static_cast<std::uint64_t>(f),
                      S = static_cast<std::uint64_t>(s), Vc = static_cast<std::uint64_t>(V);
  for (const LayerDesc& ld : d.layers_of(stage)) {
    Layer L;
    L.desc = ld;
    L.param_begin = nparams;
    std::uint64_t p = nparams;
    auto take = [&p](std::uint64_t n) {
      const std::uint64_t at = p;
      p += n;
      return at;
    };
    switch (ld.kind) {
      case LayerKind::embedding:
        L.ep = {take(Vc * H), take(S * H), 0};
        L.ep.end = p;
        break;
      case LayerKind::transformer:
        L.tp.wqkv = take(H * 3 * H);
        L.tp.bqkv = take(3 * H);
        L.tp.wo = take(H * H);
        L.tp.bo = take(H);
        L.tp.w1 = take(H * F);
        L.tp.b1 = take(F);
        L.tp.w2 = take(F * H);
        L.tp.b2 = take(H);
        L.tp.ln1_g = take(H);
        L.tp.ln1_b = take(H);
        L.tp.ln2_g = take(H);
        L.tp.ln2_b = take(H);
        L.tp.end = p;
        break;
      case LayerKind::head:
        L.hp.ln_g = take(H);
        L.hp.ln_b = take(H);
        L.hp.w = take(H * Vc);
        L.hp.end = p;
        break;
    }
    L.param_end = p;
    nparams = p;
    layers.push_back(std::move(L));
  }
  params = alloc(nparams, e);
  grads = alloc(nparams, Elem::f32);
  adam_m = alloc(nparams, Elem::f32);
  adam_v = alloc(nparams, Elem::f32);
  if (e == Elem::f16) master = alloc(nparams, Elem::f32);
}

// Hidden states: a layer's input is kept by that layer (counted in its activations; the
// embedding takes token ids instead); the last layer's output is the message to the
// next stage (the head's is its loss, see keep_activations).
void StageModel::Impl::allocate_hidden_states() {
  const std::uint64_t R = static_cast<std::uint64_t>(rows), H = static_cast<std::uint64_t>(h);
  const int n = static_cast<int>(layers.size());
  for (auto& L : layers)
    if (L.desc.kind != LayerKind::embedding) keep(L, R * H, e);
  if (layers.back().desc.kind != LayerKind::head) stage_out = alloc(R * H, e);
  auto input_of = [&](int i) -> void* {
    Layer& L = layers[static_cast<std::size_t>(i)];
    if (L.desc.kind == LayerKind::embedding) return nullptr;
    return L.kept.front()->data();
  };
  for (int i = 0; i < n; ++i) {
    Layer& L = layers[static_cast<std::size_t>(i)];
    L.x = input_of(i);
    if (i + 1 < n) {
      L.out = input_of(i + 1);
    } else if (stage_out) {
      L.out = stage_out->data();
    }
    L.output_bytes = layer_shape(d, L.desc.kind, b).output_bytes;
    keep_activations(L);
  }
}

// What layer L's forward writes and its backward reads, beyond its input.
void StageModel::Impl::keep_activations(Layer& L) {
  const std::uint64_t R = static_cast<std::uint64_t>(rows), H = static_cast<std::uint64_t>(h),
                      F = static_cast<std::uint64_t>(f), S = static_cast<std::uint64_t>(s),
                      A = static_cast<std::uint64_t>(a), B = static_cast<std::uint64_t>(b),
                      Vc = static_cast<std::uint64_t>(V);
  switch (L.desc.kind) {
    case LayerKind::embedding:
      L.ids = static_cast<std::int32_t*>(keep(L, R, Elem::i32));
      break;
    case LayerKind::transformer:
      L.mean1 = static_cast<float*>(keep(L, R, Elem::f32));
      L.rstd1 = static_cast<float*>(keep(L, R, Elem::f32));
      L.y1 = keep(L, R * H, e);
      L.qkv = keep(L, R * 3 * H, e);
      L.probs = keep(L, B * A * S * S, e);
      L.ctx = keep(L, R * H, e);
      L.x2 = keep(L, R * H, e);
      L.mean2 = static_cast<float*>(keep(L, R, Elem::f32));
      L.rstd2 = static_cast<float*>(keep(L, R, Elem::f32));
      L.y2 = keep(L, R * H, e);
      L.u = keep(L, R * F, e);
      L.g = keep(L, R * F, e);
      break;
    case LayerKind::head:
      L.mean1 = static_cast<float*>(keep(L, R, Elem::f32));
      L.rstd1 = static_cast<float*>(keep(L, R, Elem::f32));
      L.y1 = keep(L, R * H, e);
      L.probs = keep(L, R * Vc, e);
      L.ids = static_cast<std::int32_t*>(keep(L, R, Elem::i32));  // labels
      // The loss is one f32 the backward does not read: not an activation.
      stage_out = alloc(1, Elem::f32);
      L.loss = stage_out->as<float>();
      break;
  }
}

// Gradients flowing backward, and workspaces sized for the largest layer.
void StageModel::Impl::allocate_workspaces() {
  const std::uint64_t R = static_cast<std::uint64_t>(rows), H = static_cast<std::uint64_t>(h),
                      F = static_cast<std::uint64_t>(f), S = static_cast<std::uint64_t>(s),
                      A = static_cast<std::uint64_t>(a), B = static_cast<std::uint64_t>(b);
  if (layers.back().desc.kind != LayerKind::head) grad_in = alloc(R * H, e);
  grad_ping[0] = alloc(R * H, e);
  grad_ping[1] = alloc(R * H, e);
  bool any_transformer = false;
  for (const auto& L : layers) any_transformer |= L.desc.kind == LayerKind::transformer;
  if (any_transformer) {
    ws_dg = alloc(R * F, e);
    ws_dy2 = alloc(R * H, e);
    ws_dx2 = alloc(R * H, e);
    ws_dctx = alloc(R * H, e);
    ws_dp = alloc(B * A * S * S, e);
    ws_dqkv = alloc(R * 3 * H, e);
  }
  ws_dy1 = alloc(R * H, e);
}

// Weights uniform in +-0.02, LayerNorm scales 1, inputs +-1, the arriving gradient
// +-1e-3, token ids and labels from the seed; enqueued on `stream`.
void StageModel::Impl::initialize(Stream& stream, std::uint64_t seed) {
  stream.submit([&m = *this, seed](Kernels& k) {
    k.fill_uniform(m.params->data(), m.nparams, m.e, seed, -0.02f, 0.02f);
    if (m.master) k.fill_uniform(m.master->data(), m.nparams, Elem::f32, seed, -0.02f, 0.02f);
    const std::uint64_t H = static_cast<std::uint64_t>(m.h), R = static_cast<std::uint64_t>(m.rows);
    for (const auto& L : m.layers) {
      auto ones = [&](std::uint64_t off, std::uint64_t count) {
        k.fill_value(m.at(m.params->data(), off), count, m.e, 1.0f);
        if (m.master) k.fill_value(m.master->as<float>() + off, count, Elem::f32, 1.0f);
      };
      if (L.desc.kind == LayerKind::transformer) {
        ones(L.tp.ln1_g, H);
        ones(L.tp.ln2_g, H);
      } else if (L.desc.kind == LayerKind::head) {
        ones(L.hp.ln_g, H);
      }
      if (L.desc.kind == LayerKind::embedding || L.desc.kind == LayerKind::head)
        k.fill_tokens(L.ids, R, m.V, seed + 1000 + static_cast<std::uint64_t>(L.desc.index));
    }
    const Layer& first = m.layers.front();
    if (first.x != nullptr) k.fill_uniform(first.x, R * H, m.e, seed + 1, -1.0f, 1.0f);
    if (m.grad_in) k.fill_uniform(m.grad_in->data(), R * H, m.e, seed + 2, -1e-3f, 1e-3f);
  });
}

StageModel::~StageModel() = default;

int StageModel::num_layers() const { return static_cast<int>(impl_->layers.size()); }
const LayerDesc& StageModel::layer(int i) const { return impl_->layers.at(static_cast<std::size_t>(i)).desc; }

LayerSizes StageModel::sizes(int i) const {
  const auto& L = impl_->layers.at(static_cast<std::size_t>(i));
  return {L.activation_bytes, L.output_bytes, (L.param_end - L.param_begin) * impl_->es};
}

std::uint64_t StageModel::activation_bytes() const {
  std::uint64_t sum = 0;
  for (const auto& L : impl_->layers) sum += L.activation_bytes;
  return sum;
}

std::uint64_t StageModel::parameter_count() const { return impl_->nparams; }

std::uint64_t StageModel::static_bytes() const {
  const Impl& m = *impl_;
  std::uint64_t bytes = m.params->bytes() + m.grads->bytes() + m.adam_m->bytes() + m.adam_v->bytes();
  if (m.master) bytes += m.master->bytes();
  return bytes + static_cast<std::uint64_t>(m.d.static_overhead_bytes);
}

std::uint64_t StageModel::output_bytes() const {
  const Impl& m = *impl_;
  return m.layers.back().desc.kind == LayerKind::head ? 0 : m.layers.back().output_bytes;
}

void StageModel::forward(Stream& stream, int i) {
  Impl::Layer& L = impl_->layers.at(static_cast<std::size_t>(i));
  Impl& m = *impl_;
  stream.submit([&m, &L](Kernels& k) { m.forward(k, L); });
}

void StageModel::backward(Stream& stream, int i) {
  Impl& m = *impl_;
  Impl::Layer& L = m.layers.at(static_cast<std::size_t>(i));
  const void* dy = m.grad_of_output(i);
  void* dx = m.grad_ping[static_cast<std::size_t>(i % 2)]->data();
  stream.submit([&m, &L, dy, dx](Kernels& k) { m.backward(k, L, dy, dx); });
}

void StageModel::optimizer_step(Stream& stream) {
  Impl& m = *impl_;
  const int step = ++m.step;
  stream.submit([&m, step](Kernels& k) {
    k.adam(m.params->data(), m.master ? m.master->as<float>() : nullptr, m.grads->as<float>(), m.adam_m->as<float>(),
           m.adam_v->as<float>(), m.nparams, step, m.e);
  });
}

void StageModel::Impl::forward(Kernels& k, Layer& L) const {
  const int H = h, H3 = 3 * h;
  const std::int64_t ss = static_cast<std::int64_t>(s) * s;
  const std::uint64_t qkv_batch = static_cast<std::uint64_t>(s) * static_cast<std::uint64_t>(H3);
  const std::uint64_t hid_batch = static_cast<std::uint64_t>(s) * static_cast<std::uint64_t>(H);
  const std::uint64_t p_batch = static_cast<std::uint64_t>(a) * static_cast<std::uint64_t>(ss);
  switch (L.desc.kind) {
    case LayerKind::embedding:
      k.embedding_forward(L.ids, pat(L.ep.wte), pat(L.ep.wpe), L.out, rows, s, H, e);
      return;
    case LayerKind::head:
      k.layernorm_forward(L.x, pat(L.hp.ln_g), pat(L.hp.ln_b), L.y1, L.mean1, L.rstd1, rows, H, e);
      k.gemm(false, false, rows, V, H, 1.0f, L.y1, H, pat(L.hp.w), V, 0.0f, L.probs, V, e, e);
      k.cross_entropy_forward(L.probs, L.ids, L.loss, rows, V, e);
      return;
    case LayerKind::transformer:
      break;
  }
  const TransformerParams& P = L.tp;
  const float scale = 1.0f / std::sqrt(static_cast<float>(dh));
  k.layernorm_forward(L.x, pat(P.ln1_g), pat(P.ln1_b), L.y1, L.mean1, L.rstd1, rows, H, e);
  k.gemm(false, false, rows, H3, H, 1.0f, L.y1, H, pat(P.wqkv), H3, 0.0f, L.qkv, H3, e, e);
  k.add_bias(L.qkv, pat(P.bqkv), rows, H3, e);
  for (int bi = 0; bi < b; ++bi) {
    const std::uint64_t qb = static_cast<std::uint64_t>(bi) * qkv_batch;
    // Scores of every head: Q K^T (s x s), into the probabilities' buffer.
    k.gemm_batched(false, true, s, s, dh, 1.0f, at(L.qkv, qb), H3, dh, at(L.qkv, qb + static_cast<std::uint64_t>(H)),
                   H3, dh, 0.0f, at(L.probs, static_cast<std::uint64_t>(bi) * p_batch), s, ss, a, e);
  }
  k.softmax_forward(L.probs, b * a * s, s, scale, true, e);
  for (int bi = 0; bi < b; ++bi) {
    const std::uint64_t qb = static_cast<std::uint64_t>(bi) * qkv_batch;
    k.gemm_batched(false, false, s, dh, s, 1.0f, at(L.probs, static_cast<std::uint64_t>(bi) * p_batch), s, ss,
                   at(L.qkv, qb + 2 * static_cast<std::uint64_t>(H)), H3, dh, 0.0f,
                   at(L.ctx, static_cast<std::uint64_t>(bi) * hid_batch), H, dh, a, e);
  }
  k.copy_add_bias(L.x2, L.x, pat(P.bo), rows, H, e);
  k.gemm(false, false, rows, H, H, 1.0f, L.ctx, H, pat(P.wo), H, 1.0f, L.x2, H, e, e);
  k.layernorm_forward(L.x2, pat(P.ln2_g), pat(P.ln2_b), L.y2, L.mean2, L.rstd2, rows, H, e);
  k.gemm(false, false, rows, f, H, 1.0f, L.y2, H, pat(P.w1), f, 0.0f, L.u, f, e, e);
  k.bias_gelu_forward(L.u, pat(P.b1), L.g, rows, f, e);
  k.copy_add_bias(L.out, L.x2, pat(P.b2), rows, H, e);
  k.gemm(false, false, rows, H, f, 1.0f, L.g, f, pat(P.w2), H, 1.0f, L.out, H, e, e);
}

void StageModel::Impl::backward(Kernels& k, Layer& L, const void* dy, void* dx) {
  const int H = h, H3 = 3 * h;
  const Elem f32 = Elem::f32;
  switch (L.desc.kind) {
    case LayerKind::embedding:
      k.embedding_backward(L.ids, dy, gat(L.ep.wte), gat(L.ep.wpe), rows, s, H, e);
      return;
    case LayerKind::head: {
      const HeadParams& P = L.hp;
      void* dy1 = ws_dy1->data();
      k.cross_entropy_backward(L.probs, L.ids, rows, V, e);
      k.gemm(true, false, H, V, rows, 1.0f, L.y1, H, L.probs, V, 1.0f, gat(P.w), V, e, f32);
      k.gemm(false, true, rows, H, V, 1.0f, L.probs, V, pat(P.w), V, 0.0f, dy1, H, e, e);
      k.layernorm_backward(dy1, L.x, L.mean1, L.rstd1, pat(P.ln_g), nullptr, dx, gat(P.ln_g), gat(P.ln_b), rows, H,
                           e);
      return;
    }
    case LayerKind::transformer:
      break;
  }
  const TransformerParams& P = L.tp;
  const float scale = 1.0f / std::sqrt(static_cast<float>(dh));
  const std::int64_t ss = static_cast<std::int64_t>(s) * s;
  const std::uint64_t qkv_batch = static_cast<std::uint64_t>(s) * static_cast<std::uint64_t>(H3);
  const std::uint64_t hid_batch = static_cast<std::uint64_t>(s) * static_cast<std::uint64_t>(H);
  const std::uint64_t p_batch = static_cast<std::uint64_t>(a) * static_cast<std::uint64_t>(ss);
  void *dg = ws_dg->data(), *dy2 = ws_dy2->data(), *dx2 = ws_dx2->data(), *dctx = ws_dctx->data(),
       *dp = ws_dp->data(), *dqkv = ws_dqkv->data(), *dy1 = ws_dy1->data();
  // MLP.
  k.gemm(true, false, f, H, rows, 1.0f, L.g, f, dy, H, 1.0f, gat(P.w2), H, e, f32);
  k.column_sum(dy, gat(P.b2), rows, H, e);
  k.gemm(false, true, rows, f, H, 1.0f, dy, H, pat(P.w2), H, 0.0f, dg, f, e, e);
  k.gelu_backward(dg, L.u, rows, f, e);
  k.gemm(true, false, H, f, rows, 1.0f, L.y2, H, dg, f, 1.0f, gat(P.w1), f, e, f32);
  k.column_sum(dg, gat(P.b1), rows, f, e);
  k.gemm(false, true, rows, H, f, 1.0f, dg, f, pat(P.w1), f, 0.0f, dy2, H, e, e);
  k.layernorm_backward(dy2, L.x2, L.mean2, L.rstd2, pat(P.ln2_g), dy, dx2, gat(P.ln2_g), gat(P.ln2_b), rows, H, e);
  // Attention output projection.
  k.gemm(true, false, H, H, rows, 1.0f, L.ctx, H, dx2, H, 1.0f, gat(P.wo), H, e, f32);
  k.column_sum(dx2, gat(P.bo), rows, H, e);
  k.gemm(false, true, rows, H, H, 1.0f, dx2, H, pat(P.wo), H, 0.0f, dctx, H, e, e);
  // Attention core, per sample over the heads.
  for (int bi = 0; bi < b; ++bi) {
    const std::uint64_t qb = static_cast<std::uint64_t>(bi) * qkv_batch;
    const std::uint64_t hb = static_cast<std::uint64_t>(bi) * hid_batch;
    const std::uint64_t pb = static_cast<std::uint64_t>(bi) * p_batch;
    const std::uint64_t v_off = qb + 2 * static_cast<std::uint64_t>(H);
    // dP = dctx V^T; dV = P^T dctx.
    k.gemm_batched(false, true, s, s, dh, 1.0f, at(dctx, hb), H, dh, at(L.qkv, v_off), H3, dh, 0.0f, at(dp, pb), s, ss,
                   a, e);
    k.gemm_batched(true, false, s, dh, s, 1.0f, at(L.probs, pb), s, ss, at(dctx, hb), H, dh, 0.0f, at(dqkv, v_off),
                   H3, dh, a, e);
  }
  k.softmax_backward(dp, L.probs, b * a * s, s, scale, e);
  for (int bi = 0; bi < b; ++bi) {
    const std::uint64_t qb = static_cast<std::uint64_t>(bi) * qkv_batch;
    const std::uint64_t pb = static_cast<std::uint64_t>(bi) * p_batch;
    const std::uint64_t k_off = qb + static_cast<std::uint64_t>(H);
    // dQ = dS K; dK = dS^T Q.
    k.gemm_batched(false, false, s, dh, s, 1.0f, at(dp, pb), s, ss, at(L.qkv, k_off), H3, dh, 0.0f, at(dqkv, qb), H3,
                   dh, a, e);
    k.gemm_batched(true, false, s, dh, s, 1.0f, at(dp, pb), s, ss, at(L.qkv, qb), H3, dh, 0.0f, at(dqkv, k_off), H3,
                   dh, a, e);
  }
  k.gemm(true, false, H, H3, rows, 1.0f, L.y1, H, dqkv, H3, 1.0f, gat(P.wqkv), H3, e, f32);
  k.column_sum(dqkv, gat(P.bqkv), rows, H3, e);
  k.gemm(false, true, rows, H, H3, 1.0f, dqkv, H3, pat(P.wqkv), H3, 0.0f, dy1, H, e, e);
  k.layernorm_backward(dy1, L.x, L.mean1, L.rstd1, pat(P.ln1_g), dx2, dx, gat(P.ln1_g), gat(P.ln1_b), rows, H, e);
}

}  // namespace adagrouper::calib
