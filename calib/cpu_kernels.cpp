// The CPU backend's kernels (calib/cpu_kernels.h): the blocked GEMM and the elementwise kernels.
#include "cpu_kernels.h"

#include <algorithm>
#include <cmath>
#include <cstring>
#include <vector>

#if defined(__SSE__)
#include <xmmintrin.h>
#endif

#ifndef __FLT16_MAX__
#error "the CPU backend stores fp16 activations as _Float16, which this compiler lacks (GCC >= 12 on x86-64 or arm64)"
#endif

namespace adagrouper::calib {

void cpu_flush_denormals() {
#if defined(__SSE__)
  _mm_setcsr(_mm_getcsr() | 0x8040);  // FTZ | DAZ
#endif
}

namespace {

using half = _Float16;

template <class F>
void dispatch(Elem e, F&& f) {
  if (e == Elem::f16) {
    f(half{});
  } else {
    f(float{});
  }
}

template <class T>
inline float ld(const void* p, std::size_t i) {
  return static_cast<float>(static_cast<const T*>(p)[i]);
}
template <class T>
inline void st(void* p, std::size_t i, float v) {
  static_cast<T*>(p)[i] = static_cast<T>(v);
}

inline std::uint64_t splitmix(std::uint64_t x) {
  x += 0x9e3779b97f4a7c15ull;
  x = (x ^ (x >> 30)) * 0xbf58476d1ce4e5b9ull;
  x = (x ^ (x >> 27)) * 0x94d049bb133111ebull;
  return x ^ (x >> 31);
}

constexpr float kGeluC = 0.7978845608028654f;  // sqrt(2 / pi)

// GEMM blocking: C is computed in MC x NC tiles, K in KC slices; the micro-kernel holds
// an MR x NR block of C in registers.
constexpr int MC = 64, NC = 256, KC = 256, MR = 4, NR = 16;

class CpuKernels final : public Kernels {
 public:
  CpuKernels() : apack_(static_cast<std::size_t>(MC) * KC), bpack_(static_cast<std::size_t>(KC) * NC),
                 acc_(static_cast<std::size_t>(MC) * NC) {}

  void gemm(bool ta, bool tb, int m, int n, int k, float alpha, const void* a, int lda, const void* b, int ldb,
            float beta, void* c, int ldc, Elem ab, Elem ce) override {
    dispatch(ab, [&](auto tag_ab) {
      using TAB = decltype(tag_ab);
      dispatch(ce, [&](auto tag_c) {
        using TC = decltype(tag_c);
        gemm_impl<TAB, TC>(ta, tb, m, n, k, alpha, static_cast<const TAB*>(a), lda, static_cast<const TAB*>(b), ldb,
                           beta, static_cast<TC*>(c), ldc);
      });
    });
  }

  void gemm_batched(bool ta, bool tb, int m, int n, int k, float alpha, const void* a, int lda, std::int64_t sa,
                    const void* b, int ldb, std::int64_t sb, float beta, void* c, int ldc, std::int64_t sc, int batch,
                    Elem e) override {
    dispatch(e, [&](auto tag) {
      using T = decltype(tag);
      for (int i = 0; i < batch; ++i)
        gemm_impl<T, T>(ta, tb, m, n, k, alpha, static_cast<const T*>(a) + i * sa, lda,
                        static_cast<const T*>(b) + i * sb, ldb, beta, static_cast<T*>(c) + i * sc, ldc);
    });
  }

  void fill_uniform(void* x, std::size_t n, Elem e, std::uint64_t seed, float lo, float hi) override {
    dispatch(e, [&](auto tag) {
      using T = decltype(tag);
      const std::uint64_t key = splitmix(seed);
      for (std::size_t i = 0; i < n; ++i) {
        const float u = static_cast<float>(splitmix(key ^ (i * 0x9e3779b97f4a7c15ull)) >> 40) * 0x1.0p-24f;
        st<T>(x, i, lo + (hi - lo) * u);
      }
    });
  }

  void fill_value(void* x, std::size_t n, Elem e, float value) override {
    dispatch(e, [&](auto tag) {
      using T = decltype(tag);
      std::fill_n(static_cast<T*>(x), n, static_cast<T>(value));
    });
  }

  void fill_tokens(std::int32_t* ids, std::size_t n, int vocabulary, std::uint64_t seed) override {
    const std::uint64_t key = splitmix(seed);
    for (std::size_t i = 0; i < n; ++i)
      ids[i] = static_cast<std::int32_t>(splitmix(key ^ (i * 0x9e3779b97f4a7c15ull)) %
                                         static_cast<std::uint64_t>(vocabulary));
  }

  void layernorm_forward(const void* x, const void* gamma, const void* beta, void* y, float* mean, float* rstd,
                         int rows, int cols, Elem e) override {
    dispatch(e, [&](auto tag) {
      using T = decltype(tag);
      for (int r = 0; r < rows; ++r) {
        const std::size_t o = static_cast<std::size_t>(r) * static_cast<std::size_t>(cols);
        float sum = 0;
        for (int j = 0; j < cols; ++j) sum += ld<T>(x, o + j);
        const float mu = sum / static_cast<float>(cols);
        float var = 0;
        for (int j = 0; j < cols; ++j) {
          const float d = ld<T>(x, o + j) - mu;
          var += d * d;
        }
        const float rs = 1.0f / std::sqrt(var / static_cast<float>(cols) + 1e-5f);
        mean[r] = mu;
        rstd[r] = rs;
        for (int j = 0; j < cols; ++j)
          st<T>(y, o + j, (ld<T>(x, o + j) - mu) * rs * ld<T>(gamma, j) + ld<T>(beta, j));
      }
    });
  }

  void layernorm_backward(const void* dy, const void* x, const float* mean, const float* rstd, const void* gamma,
                          const void* residual, void* dx, float* dgamma, float* dbeta, int rows, int cols,
                          Elem e) override {
    dispatch(e, [&](auto tag) {
      using T = decltype(tag);
      for (int r = 0; r < rows; ++r) {
        const std::size_t o = static_cast<std::size_t>(r) * static_cast<std::size_t>(cols);
        const float mu = mean[r], rs = rstd[r];
        float m1 = 0, m2 = 0;
        for (int j = 0; j < cols; ++j) {
          const float xh = (ld<T>(x, o + j) - mu) * rs;
          const float g = ld<T>(dy, o + j);
          const float dxh = g * ld<T>(gamma, j);
          m1 += dxh;
          m2 += dxh * xh;
          dgamma[j] += g * xh;
          dbeta[j] += g;
        }
        m1 /= static_cast<float>(cols);
        m2 /= static_cast<float>(cols);
        for (int j = 0; j < cols; ++j) {
          const float xh = (ld<T>(x, o + j) - mu) * rs;
          const float dxh = ld<T>(dy, o + j) * ld<T>(gamma, j);
          float v = rs * (dxh - m1 - xh * m2);
          if (residual != nullptr) v += ld<T>(residual, o + j);
          st<T>(dx, o + j, v);
        }
      }
    });
  }

  void softmax_forward(void* p, int rows, int cols, float scale, bool causal, Elem e) override {
    dispatch(e, [&](auto tag) {
      using T = decltype(tag);
      for (int r = 0; r < rows; ++r) {
        const std::size_t o = static_cast<std::size_t>(r) * static_cast<std::size_t>(cols);
        const int visible = causal ? (r % cols) + 1 : cols;
        float mx = -INFINITY;
        for (int j = 0; j < visible; ++j) mx = std::max(mx, scale * ld<T>(p, o + j));
        float sum = 0;
        for (int j = 0; j < visible; ++j) {
          const float v = std::exp(scale * ld<T>(p, o + j) - mx);
          st<T>(p, o + j, v);
          sum += v;
        }
        const float inv = 1.0f / sum;
        for (int j = 0; j < visible; ++j) st<T>(p, o + j, ld<T>(p, o + j) * inv);
        for (int j = visible; j < cols; ++j) st<T>(p, o + j, 0.0f);
      }
    });
  }

  void softmax_backward(void* dp, const void* p, int rows, int cols, float scale, Elem e) override {
    dispatch(e, [&](auto tag) {
      using T = decltype(tag);
      for (int r = 0; r < rows; ++r) {
        const std::size_t o = static_cast<std::size_t>(r) * static_cast<std::size_t>(cols);
        float dot = 0;
        for (int j = 0; j < cols; ++j) dot += ld<T>(dp, o + j) * ld<T>(p, o + j);
        for (int j = 0; j < cols; ++j) st<T>(dp, o + j, scale * ld<T>(p, o + j) * (ld<T>(dp, o + j) - dot));
      }
    });
  }

  void bias_gelu_forward(void* u, const void* bias, void* g, int rows, int cols, Elem e) override {
    dispatch(e, [&](auto tag) {
      using T = decltype(tag);
      for (int r = 0; r < rows; ++r) {
        const std::size_t o = static_cast<std::size_t>(r) * static_cast<std::size_t>(cols);
        for (int j = 0; j < cols; ++j) {
          const float v = ld<T>(u, o + j) + ld<T>(bias, j);
          st<T>(u, o + j, v);
          st<T>(g, o + j, 0.5f * v * (1.0f + std::tanh(kGeluC * (v + 0.044715f * v * v * v))));
        }
      }
    });
  }

  void gelu_backward(void* dg, const void* u, int rows, int cols, Elem e) override {
    dispatch(e, [&](auto tag) {
      using T = decltype(tag);
      const std::size_t n = static_cast<std::size_t>(rows) * static_cast<std::size_t>(cols);
      for (std::size_t i = 0; i < n; ++i) {
        const float v = ld<T>(u, i);
        const float t = std::tanh(kGeluC * (v + 0.044715f * v * v * v));
        const float d = 0.5f * (1.0f + t) + 0.5f * v * (1.0f - t * t) * kGeluC * (1.0f + 3.0f * 0.044715f * v * v);
        st<T>(dg, i, ld<T>(dg, i) * d);
      }
    });
  }

  void add_bias(void* y, const void* bias, int rows, int cols, Elem e) override {
    copy_add_bias(y, y, bias, rows, cols, e);
  }

  void copy_add_bias(void* y, const void* x, const void* bias, int rows, int cols, Elem e) override {
    dispatch(e, [&](auto tag) {
      using T = decltype(tag);
      for (int r = 0; r < rows; ++r) {
        const std::size_t o = static_cast<std::size_t>(r) * static_cast<std::size_t>(cols);
        for (int j = 0; j < cols; ++j) st<T>(y, o + j, ld<T>(x, o + j) + ld<T>(bias, j));
      }
    });
  }

  void column_sum(const void* x, float* out, int rows, int cols, Elem e) override {
    dispatch(e, [&](auto tag) {
      using T = decltype(tag);
      for (int r = 0; r < rows; ++r) {
        const std::size_t o = static_cast<std::size_t>(r) * static_cast<std::size_t>(cols);
        for (int j = 0; j < cols; ++j) out[j] += ld<T>(x, o + j);
      }
    });
  }

  // Calls row(w, p, o) for every token t: where the rows of its id in wte, of its
  // position t % seq in wpe and of t in the activations start (rows of `hidden` elements).
  template <class Row>
  static void for_each_token(const std::int32_t* ids, int tokens, int seq, int hidden, Row&& row) {
    const std::size_t H = static_cast<std::size_t>(hidden);
    for (int t = 0; t < tokens; ++t)
      row(static_cast<std::size_t>(ids[t]) * H, static_cast<std::size_t>(t % seq) * H,
          static_cast<std::size_t>(t) * H);
  }

  void embedding_forward(const std::int32_t* ids, const void* wte, const void* wpe, void* out, int tokens, int seq,
                         int hidden, Elem e) override {
    dispatch(e, [&](auto tag) {
      using T = decltype(tag);
      const std::size_t H = static_cast<std::size_t>(hidden);
      for_each_token(ids, tokens, seq, hidden, [&](std::size_t w, std::size_t p, std::size_t o) {
        for (std::size_t j = 0; j < H; ++j) st<T>(out, o + j, ld<T>(wte, w + j) + ld<T>(wpe, p + j));
      });
    });
  }

  void embedding_backward(const std::int32_t* ids, const void* dout, float* dwte, float* dwpe, int tokens, int seq,
                          int hidden, Elem e) override {
    dispatch(e, [&](auto tag) {
      using T = decltype(tag);
      const std::size_t H = static_cast<std::size_t>(hidden);
      for_each_token(ids, tokens, seq, hidden, [&](std::size_t w, std::size_t p, std::size_t o) {
        for (std::size_t j = 0; j < H; ++j) {
          const float g = ld<T>(dout, o + j);
          dwte[w + j] += g;
          dwpe[p + j] += g;
        }
      });
    });
  }

  void cross_entropy_forward(void* logits, const std::int32_t* labels, float* loss, int rows, int vocabulary,
                             Elem e) override {
    dispatch(e, [&](auto tag) {
      using T = decltype(tag);
      double total = 0;
      for (int r = 0; r < rows; ++r) {
        const std::size_t o = static_cast<std::size_t>(r) * static_cast<std::size_t>(vocabulary);
        float mx = -INFINITY;
        for (int j = 0; j < vocabulary; ++j) mx = std::max(mx, ld<T>(logits, o + j));
        float sum = 0;
        for (int j = 0; j < vocabulary; ++j) sum += std::exp(ld<T>(logits, o + j) - mx);
        const float lse = mx + std::log(sum);
        total += lse - ld<T>(logits, o + static_cast<std::size_t>(labels[r]));
        for (int j = 0; j < vocabulary; ++j) st<T>(logits, o + j, std::exp(ld<T>(logits, o + j) - lse));
      }
      loss[0] = static_cast<float>(total / rows);
    });
  }

  void cross_entropy_backward(void* probs, const std::int32_t* labels, int rows, int vocabulary, Elem e) override {
    dispatch(e, [&](auto tag) {
      using T = decltype(tag);
      const float inv = 1.0f / static_cast<float>(rows);
      for (int r = 0; r < rows; ++r) {
        const std::size_t o = static_cast<std::size_t>(r) * static_cast<std::size_t>(vocabulary);
        for (int j = 0; j < vocabulary; ++j) {
          const float onehot = j == labels[r] ? 1.0f : 0.0f;
          st<T>(probs, o + j, (ld<T>(probs, o + j) - onehot) * inv);
        }
      }
    });
  }

  void adam(void* w, float* master, float* g, float* m, float* v, std::size_t n, int step, Elem e) override {
    constexpr float lr = 1e-4f, b1 = 0.9f, b2 = 0.999f, eps = 1e-8f;
    const float c1 = 1.0f / (1.0f - std::pow(b1, static_cast<float>(step)));
    const float c2 = 1.0f / (1.0f - std::pow(b2, static_cast<float>(step)));
    dispatch(e, [&](auto tag) {
      using T = decltype(tag);
      for (std::size_t i = 0; i < n; ++i) {
        m[i] = b1 * m[i] + (1 - b1) * g[i];
        v[i] = b2 * v[i] + (1 - b2) * g[i] * g[i];
        const float p = (master != nullptr ? master[i] : ld<T>(w, i)) - lr * (m[i] * c1) / (std::sqrt(v[i] * c2) + eps);
        if (master != nullptr) master[i] = p;
        st<T>(w, i, p);
        g[i] = 0;
      }
    });
  }

 private:
  // C = alpha op(A) op(B) + beta C, blocked: for each NC-wide panel of C and KC-deep slice
  // of K, B's slice is packed (f32, row-major KC x NC, zero-padded to NR); for each MC-tall
  // block, A's block is packed (f32, MC x KC, zero-padded to MR) and the micro-kernel
  // computes MR x NR tiles into acc_, which is merged into C.
  template <class TAB, class TC>
  void gemm_impl(bool ta, bool tb, int m, int n, int k, float alpha, const TAB* A, int lda, const TAB* B, int ldb,
                 float beta, TC* C, int ldc) {
    if (m <= 0 || n <= 0) return;
    if (k <= 0) {
      scale_c(m, n, beta, C, ldc);
      return;
    }
    for (int jc = 0; jc < n; jc += NC) {
      const int nc = std::min(NC, n - jc);
      const int ncp = (nc + NR - 1) / NR * NR;
      for (int pc = 0; pc < k; pc += KC) {
        const int kc = std::min(KC, k - pc);
        // Pack B[pc:pc+kc, jc:jc+nc].
        for (int p = 0; p < kc; ++p) {
          float* dst = bpack_.data() + static_cast<std::size_t>(p) * ncp;
          for (int j = 0; j < nc; ++j) {
            const std::size_t idx = tb ? static_cast<std::size_t>(jc + j) * static_cast<std::size_t>(ldb) + (pc + p)
                                       : static_cast<std::size_t>(pc + p) * static_cast<std::size_t>(ldb) + (jc + j);
            dst[j] = static_cast<float>(B[idx]);
          }
          for (int j = nc; j < ncp; ++j) dst[j] = 0.0f;
        }
        for (int ic = 0; ic < m; ic += MC) {
          const int mc = std::min(MC, m - ic);
          const int mcp = (mc + MR - 1) / MR * MR;
          // Pack A[ic:ic+mc, pc:pc+kc].
          for (int i = 0; i < mcp; ++i) {
            float* dst = apack_.data() + static_cast<std::size_t>(i) * kc;
            if (i >= mc) {
              std::fill_n(dst, kc, 0.0f);
              continue;
            }
            for (int p = 0; p < kc; ++p) {
              const std::size_t idx = ta ? static_cast<std::size_t>(pc + p) * static_cast<std::size_t>(lda) + (ic + i)
                                         : static_cast<std::size_t>(ic + i) * static_cast<std::size_t>(lda) + (pc + p);
              dst[p] = static_cast<float>(A[idx]);
            }
          }
          for (int i0 = 0; i0 < mcp; i0 += MR)
            for (int j0 = 0; j0 < ncp; j0 += NR) micro_kernel(kc, ncp, i0, j0);
          // Merge the tile into C.
          for (int i = 0; i < mc; ++i) {
            TC* crow = C + static_cast<std::size_t>(ic + i) * static_cast<std::size_t>(ldc) + jc;
            const float* arow = acc_.data() + static_cast<std::size_t>(i) * ncp;
            if (pc == 0 && beta == 0.0f) {
              for (int j = 0; j < nc; ++j) crow[j] = static_cast<TC>(alpha * arow[j]);
            } else {
              const float bb = pc == 0 ? beta : 1.0f;
              for (int j = 0; j < nc; ++j) crow[j] = static_cast<TC>(bb * static_cast<float>(crow[j]) + alpha * arow[j]);
            }
          }
        }
      }
    }
  }

  // acc_[i0:i0+MR, j0:j0+NR] = apack_[i0:i0+MR, :kc] * bpack_[:kc, j0:j0+NR]
  void micro_kernel(int kc, int ncp, int i0, int j0) {
    float c[MR][NR] = {};
    const float* a = apack_.data() + static_cast<std::size_t>(i0) * kc;
    const float* b = bpack_.data() + j0;
    for (int p = 0; p < kc; ++p) {
      const float* bp = b + static_cast<std::size_t>(p) * ncp;
      for (int r = 0; r < MR; ++r) {
        const float av = a[static_cast<std::size_t>(r) * kc + p];
        for (int j = 0; j < NR; ++j) c[r][j] += av * bp[j];
      }
    }
    for (int r = 0; r < MR; ++r) std::memcpy(acc_.data() + static_cast<std::size_t>(i0 + r) * ncp + j0, c[r], sizeof c[r]);
  }

  template <class TC>
  static void scale_c(int m, int n, float beta, TC* C, int ldc) {
    for (int i = 0; i < m; ++i)
      for (int j = 0; j < n; ++j) {
        TC& x = C[static_cast<std::size_t>(i) * static_cast<std::size_t>(ldc) + j];
        x = beta == 0.0f ? static_cast<TC>(0.0f) : static_cast<TC>(beta * static_cast<float>(x));
      }
  }

  std::vector<float> apack_, bpack_, acc_;
};

}  // namespace

std::unique_ptr<Kernels> make_cpu_kernels() { return std::make_unique<CpuKernels>(); }

}  // namespace adagrouper::calib
