// The GNMT generator: an LSTM sequence-to-sequence model with attention.
//
// Layers: the encoder embedding, the encoder LSTMs, the decoder embedding, the decoder
// LSTMs (the first with attention) and the classifier.
#include <fmt/format.h>

#include "model_generator.h"

namespace adagrouper::planner::model_generator {

namespace {

// One LSTM direction over `steps` tokens.
struct LstmCosts {
  double flops, fwd, bwd, act;
};

// The GNMT layers' shapes and the device model.
class Gnmt {
 public:
  explicit Gnmt(const Generation& g)
      : g_(g), est_(g.est), h_(g.arch.hidden), V_(g.arch.vocab), S_(g.arch.seq_len), T_(g.arch.target_len),
        d_(g.arch.bytes_per_element) {}

  void add_layers(Model& m) const {
    const double enc_out = d_ * S_ * h_, dec_state = d_ * T_ * h_;
    // Cuts inside the encoder carry its hidden state (the target tokens, 4 bytes each, too).
    add_embedding(m, "encoder embedding", S_, enc_out + 4 * T_);
    for (int i = 0; i < g_.arch.encoder_layers; ++i) add_encoder(m, i, enc_out);
    // From here on, cuts carry the encoder output until the attention has used it.
    add_embedding(m, "decoder embedding", T_, enc_out + dec_state);
    for (int i = 0; i < g_.arch.decoder_layers; ++i) add_decoder(m, i, dec_state);
    add_layer(m, g_, "classifier", "head", V_ * h_ + V_, [&](double b) {
      Costs c;
      const double vocab = 2 * b * T_ * h_ * V_;
      c.flops = vocab;
      c.fwd = est_.gemm(vocab, b * T_, d_ * V_ * h_) + est_.memory(b * 20 * T_ * V_) + est_.launches(6);
      c.bwd = est_.gemm(2 * vocab, b * T_, 3 * d_ * V_ * h_) + est_.memory(b * 8 * T_ * V_) + est_.launches(10);
      c.act = b * (d_ * T_ * h_ + 4 * T_ * V_);
      c.out = 0;
      return c;
    });
  }

 private:
  // One LSTM direction over `steps` tokens with input width `in`: the input GEMM runs
  // for all steps at once, the recurrent GEMM one step at a time (b rows, weights read
  // every step); gates and cell updates are memory-bound.
  LstmCosts lstm(double b, double in, double steps) const {
    LstmCosts r;
    const double wi = 4 * h_ * in * d_, wh = 4 * h_ * h_ * d_;
    const double fin = 2 * b * steps * in * 4 * h_, fstep = 2 * b * h_ * 4 * h_;
    const double elem = b * steps * h_ * d_ * 10;
    r.flops = fin + steps * fstep;
    r.fwd = est_.gemm(fin, b * steps, wi) + steps * est_.gemm(fstep, b, wh) + est_.memory(elem) +
            est_.launches(2 * steps + 2);
    r.bwd = est_.gemm(2 * fin, b * steps, 3 * wi) + steps * est_.gemm(2 * fstep, b, 3 * wh) + est_.memory(2 * elem) +
            est_.launches(4 * steps + 4);
    r.act = b * steps * (in + 6 * h_) * d_;  // input, 4 gates, cell state and its tanh
    return r;
  }

  double lstm_params(double in) const { return 4 * h_ * (in + h_) + 8 * h_; }

  void add_embedding(Model& m, const char* name, double steps, double msg) const {
    add_layer(m, g_, name, "embedding", V_ * h_, [&](double b) {
      Costs c;
      const double elem = b * d_ * 2 * steps * h_;
      c.fwd = est_.memory(elem) + est_.launches(2);
      c.bwd = est_.memory(elem + 2 * d_ * V_ * h_) + est_.launches(4);
      c.out = b * msg;
      return c;
    });
  }

  // Encoder layer i: the first is bidirectional, the second takes both directions.
  void add_encoder(Model& m, int i, double enc_out) const {
    const bool bidir = i == 0;
    const double in = i == 1 ? 2 * h_ : h_;
    const double params = lstm_params(in) * (bidir ? 2 : 1);
    add_layer(m, g_, fmt::format("encoder {}", i), bidir ? "lstm (bidirectional)" : "lstm", params, [&](double b) {
      const LstmCosts l = lstm(b, in, S_);
      const double k = bidir ? 2 : 1;
      Costs c;
      c.flops = k * l.flops;
      c.fwd = k * l.fwd, c.bwd = k * l.bwd, c.act = k * l.act;
      c.out = b * ((bidir ? 2 : 1) * enc_out + 4 * T_);
      return c;
    });
  }

  // Decoder layer i: the first computes the attention, which the later ones also take.
  void add_decoder(Model& m, int i, double dec_state) const {
    const bool attn = i == 0;
    const double in = attn ? h_ : 2 * h_;
    const double params = lstm_params(in) + (attn ? 2 * h_ * h_ + 2 * h_ + 1 : 0);
    add_layer(m, g_, fmt::format("decoder {}", i), attn ? "lstm + attention" : "lstm", params, [&](double b) {
      const LstmCosts l = lstm(b, in, T_);
      Costs c;
      c.flops = l.flops;
      c.fwd = l.fwd, c.bwd = l.bwd, c.act = l.act;
      if (attn) add_attention(c, b);
      c.out = b * 2 * dec_state;  // hidden state and attention context
      return c;
    });
  }

  // Normalised additive attention: key and query projections, tanh(q + k) scores over
  // every (target, source) pair, softmax, context = weights x encoder output.
  void add_attention(Costs& c, double b) const {
    const double keys = 2 * b * S_ * h_ * h_, queries = 2 * b * T_ * h_ * h_, context = 2 * b * T_ * S_ * h_;
    const double scores = 3 * d_ * b * T_ * S_ * h_;
    c.flops += keys + queries + context + b * T_ * S_ * h_ * 2;
    c.fwd += est_.gemm(keys, b * S_, d_ * h_ * h_) + est_.gemm(queries, b * T_, d_ * h_ * h_) +
             est_.gemm(context, T_, 0) + est_.memory(scores) + est_.launches(8);
    c.bwd += est_.gemm(2 * keys, b * S_, 3 * d_ * h_ * h_) + est_.gemm(2 * queries, b * T_, 3 * d_ * h_ * h_) +
             est_.gemm(2 * context, T_, 0) + est_.memory(2 * scores) + est_.launches(16);
    c.act += d_ * b * T_ * S_ * h_ + d_ * b * S_ * h_;  // tanh(q + k), keys
  }

  const Generation& g_;
  const Estimator& est_;
  const double h_, V_, S_, T_, d_;  // hidden, vocabulary, source and target tokens, bytes per element
};

}  // namespace

void generate_gnmt(Model& m, const Generation& g) {
  const Arch& a = g.arch;
  const std::string_view ints[] = {"encoder-layers", "decoder-layers", "hidden", "vocab", "seq-len", "target-len"};
  require_positive(a, ints);
  record_ints(m.architecture, a, ints);
  m.architecture["dtype"] = g.dtype;
  Gnmt(g).add_layers(m);
  m.description = fmt::format(
      "LSTM sequence-to-sequence model (GNMT): {} encoder layers (the first bidirectional), {} decoder layers "
      "with additive attention, hidden {}, vocabulary {}, {} source and {} target tokens. Analytic estimates on "
      "{}: input GEMMs over all steps at once, recurrent GEMMs one step at a time (b rows, weights read every "
      "step); a cut carries the hidden state, and the encoder output until the attention has used it.",
      a.encoder_layers, a.decoder_layers, a.hidden, a.vocab, a.seq_len, a.target_len, g.est.dev.name);
}

}  // namespace adagrouper::planner::model_generator
