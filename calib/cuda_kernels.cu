// The CUDA backend's elementwise, reduction and row kernels (calib/cuda_kernels.h).
#include <cuda_fp16.h>

#include <cmath>
#include <cstdint>

#include "cuda_kernels.h"

namespace adagrouper::calib::cuda {

namespace {

constexpr int kThreads = 256;

template <class T>
__device__ __forceinline__ float tof(T v);
template <>
__device__ __forceinline__ float tof<float>(float v) {
  return v;
}
template <>
__device__ __forceinline__ float tof<__half>(__half v) {
  return __half2float(v);
}

template <class T>
__device__ __forceinline__ T fromf(float v);
template <>
__device__ __forceinline__ float fromf<float>(float v) {
  return v;
}
template <>
__device__ __forceinline__ __half fromf<__half>(float v) {
  return __float2half(v);
}

__device__ __forceinline__ std::uint64_t splitmix(std::uint64_t x) {
  x += 0x9e3779b97f4a7c15ull;
  x = (x ^ (x >> 30)) * 0xbf58476d1ce4e5b9ull;
  x = (x ^ (x >> 27)) * 0x94d049bb133111ebull;
  return x ^ (x >> 31);
}

// Sum or max over the block; every thread gets the result. `shared` holds 32 floats.
__device__ float block_sum(float v, float* shared) {
  for (int o = 16; o > 0; o >>= 1) v += __shfl_xor_sync(0xffffffffu, v, o);
  const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5;
  __syncthreads();  // shared may still be read by a previous reduction
  if (lane == 0) shared[warp] = v;
  __syncthreads();
  const int warps = (blockDim.x + 31) >> 5;
  v = lane < warps ? shared[lane] : 0.0f;
  for (int o = 16; o > 0; o >>= 1) v += __shfl_xor_sync(0xffffffffu, v, o);
  return v;
}

__device__ float block_max(float v, float* shared) {
  for (int o = 16; o > 0; o >>= 1) v = fmaxf(v, __shfl_xor_sync(0xffffffffu, v, o));
  const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5;
  __syncthreads();
  if (lane == 0) shared[warp] = v;
  __syncthreads();
  const int warps = (blockDim.x + 31) >> 5;
  v = lane < warps ? shared[lane] : -INFINITY;
  for (int o = 16; o > 0; o >>= 1) v = fmaxf(v, __shfl_xor_sync(0xffffffffu, v, o));
  return v;
}

// Grid size for n elements, grid-stride loops beyond.
unsigned blocks_for(std::size_t n) {
  const std::size_t b = (n + kThreads - 1) / kThreads;
  return static_cast<unsigned>(b < 65535 * 8 ? (b > 0 ? b : 1) : 65535 * 8);
}

// Row chunks for column reductions: enough blocks to fill the GPU, each summing a slice.
unsigned row_chunks(int rows) {
  const int c = (rows + 63) / 64;
  return static_cast<unsigned>(c < 256 ? (c > 0 ? c : 1) : 256);
}

constexpr float kGeluC = 0.7978845608028654f;  // sqrt(2 / pi)

// ---------------------------------------------------------------------------------

__global__ void spin_kernel(std::uint64_t ns) {
  std::uint64_t start, now;
  asm volatile("mov.u64 %0, %%globaltimer;" : "=l"(start));
  do {
    asm volatile("mov.u64 %0, %%globaltimer;" : "=l"(now));
  } while (now - start < ns);
}

template <class T>
__global__ void fill_uniform_kernel(T* x, std::size_t n, std::uint64_t key, float lo, float hi) {
  for (std::size_t i = blockIdx.x * static_cast<std::size_t>(blockDim.x) + threadIdx.x; i < n;
       i += static_cast<std::size_t>(gridDim.x) * blockDim.x) {
    const float u = static_cast<float>(splitmix(key ^ (i * 0x9e3779b97f4a7c15ull)) >> 40) * 5.9604644775390625e-8f;
    x[i] = fromf<T>(lo + (hi - lo) * u);
  }
}

template <class T>
__global__ void fill_value_kernel(T* x, std::size_t n, float value) {
  for (std::size_t i = blockIdx.x * static_cast<std::size_t>(blockDim.x) + threadIdx.x; i < n;
       i += static_cast<std::size_t>(gridDim.x) * blockDim.x)
    x[i] = fromf<T>(value);
}

__global__ void fill_tokens_kernel(std::int32_t* ids, std::size_t n, int vocabulary, std::uint64_t key) {
  for (std::size_t i = blockIdx.x * static_cast<std::size_t>(blockDim.x) + threadIdx.x; i < n;
       i += static_cast<std::size_t>(gridDim.x) * blockDim.x)
    ids[i] = static_cast<std::int32_t>(splitmix(key ^ (i * 0x9e3779b97f4a7c15ull)) %
                                       static_cast<std::uint64_t>(vocabulary));
}

// One block per row.
template <class T>
__global__ void layernorm_forward_kernel(const T* x, const T* gamma, const T* beta, T* y, float* mean, float* rstd,
                                         int cols) {
  __shared__ float shared[32];
  const std::size_t o = static_cast<std::size_t>(blockIdx.x) * cols;
  float s = 0;
  for (int j = threadIdx.x; j < cols; j += blockDim.x) s += tof(x[o + j]);
  const float mu = block_sum(s, shared) / cols;
  float v = 0;
  for (int j = threadIdx.x; j < cols; j += blockDim.x) {
    const float d = tof(x[o + j]) - mu;
    v += d * d;
  }
  const float rs = rsqrtf(block_sum(v, shared) / cols + 1e-5f);
  for (int j = threadIdx.x; j < cols; j += blockDim.x)
    y[o + j] = fromf<T>((tof(x[o + j]) - mu) * rs * tof(gamma[j]) + tof(beta[j]));
  if (threadIdx.x == 0) {
    mean[blockIdx.x] = mu;
    rstd[blockIdx.x] = rs;
  }
}

template <class T>
__global__ void layernorm_backward_dx_kernel(const T* dy, const T* x, const float* mean, const float* rstd,
                                             const T* gamma, const T* residual, T* dx, int cols) {
  __shared__ float shared[32];
  const std::size_t o = static_cast<std::size_t>(blockIdx.x) * cols;
  const float mu = mean[blockIdx.x], rs = rstd[blockIdx.x];
  float m1 = 0, m2 = 0;
  for (int j = threadIdx.x; j < cols; j += blockDim.x) {
    const float xh = (tof(x[o + j]) - mu) * rs;
    const float dxh = tof(dy[o + j]) * tof(gamma[j]);
    m1 += dxh;
    m2 += dxh * xh;
  }
  m1 = block_sum(m1, shared) / cols;
  m2 = block_sum(m2, shared) / cols;
  for (int j = threadIdx.x; j < cols; j += blockDim.x) {
    const float xh = (tof(x[o + j]) - mu) * rs;
    const float dxh = tof(dy[o + j]) * tof(gamma[j]);
    float v = rs * (dxh - m1 - xh * m2);
    if (residual != nullptr) v += tof(residual[o + j]);
    dx[o + j] = fromf<T>(v);
  }
}

// Column reductions: block (x: 256 columns, y: a slice of rows), atomics into f32.
template <class T>
__global__ void layernorm_params_kernel(const T* dy, const T* x, const float* mean, const float* rstd, float* dgamma,
                                        float* dbeta, int rows, int cols) {
  const int c = blockIdx.x * blockDim.x + threadIdx.x;
  if (c >= cols) return;
  const int per = (rows + gridDim.y - 1) / gridDim.y;
  const int r0 = blockIdx.y * per, r1 = min(rows, r0 + per);
  float g = 0, b = 0;
  for (int r = r0; r < r1; ++r) {
    const std::size_t i = static_cast<std::size_t>(r) * cols + c;
    const float d = tof(dy[i]);
    g += d * (tof(x[i]) - mean[r]) * rstd[r];
    b += d;
  }
  if (r1 > r0) {
    atomicAdd(dgamma + c, g);
    atomicAdd(dbeta + c, b);
  }
}

template <class T>
__global__ void column_sum_kernel(const T* x, float* out, int rows, int cols) {
  const int c = blockIdx.x * blockDim.x + threadIdx.x;
  if (c >= cols) return;
  const int per = (rows + gridDim.y - 1) / gridDim.y;
  const int r0 = blockIdx.y * per, r1 = min(rows, r0 + per);
  float s = 0;
  for (int r = r0; r < r1; ++r) s += tof(x[static_cast<std::size_t>(r) * cols + c]);
  if (r1 > r0) atomicAdd(out + c, s);
}

// One block per row; row r sees columns <= r mod cols when causal.
template <class T>
__global__ void softmax_forward_kernel(T* p, int cols, float scale, bool causal) {
  __shared__ float shared[32];
  const std::size_t o = static_cast<std::size_t>(blockIdx.x) * cols;
  const int visible = causal ? static_cast<int>(blockIdx.x % static_cast<unsigned>(cols)) + 1 : cols;
  float mx = -INFINITY;
  for (int j = threadIdx.x; j < visible; j += blockDim.x) mx = fmaxf(mx, scale * tof(p[o + j]));
  mx = block_max(mx, shared);
  float s = 0;
  for (int j = threadIdx.x; j < visible; j += blockDim.x) s += __expf(scale * tof(p[o + j]) - mx);
  const float inv = 1.0f / block_sum(s, shared);
  for (int j = threadIdx.x; j < cols; j += blockDim.x)
    p[o + j] = fromf<T>(j < visible ? __expf(scale * tof(p[o + j]) - mx) * inv : 0.0f);
}

template <class T>
__global__ void softmax_backward_kernel(T* dp, const T* p, int cols, float scale) {
  __shared__ float shared[32];
  const std::size_t o = static_cast<std::size_t>(blockIdx.x) * cols;
  float dot = 0;
  for (int j = threadIdx.x; j < cols; j += blockDim.x) dot += tof(dp[o + j]) * tof(p[o + j]);
  dot = block_sum(dot, shared);
  for (int j = threadIdx.x; j < cols; j += blockDim.x)
    dp[o + j] = fromf<T>(scale * tof(p[o + j]) * (tof(dp[o + j]) - dot));
}

template <class T>
__global__ void bias_gelu_forward_kernel(T* u, const T* bias, T* g, std::size_t n, int cols) {
  for (std::size_t i = blockIdx.x * static_cast<std::size_t>(blockDim.x) + threadIdx.x; i < n;
       i += static_cast<std::size_t>(gridDim.x) * blockDim.x) {
    const float v = tof(u[i]) + tof(bias[i % cols]);
    u[i] = fromf<T>(v);
    g[i] = fromf<T>(0.5f * v * (1.0f + tanhf(kGeluC * (v + 0.044715f * v * v * v))));
  }
}

template <class T>
__global__ void gelu_backward_kernel(T* dg, const T* u, std::size_t n) {
  for (std::size_t i = blockIdx.x * static_cast<std::size_t>(blockDim.x) + threadIdx.x; i < n;
       i += static_cast<std::size_t>(gridDim.x) * blockDim.x) {
    const float v = tof(u[i]);
    const float t = tanhf(kGeluC * (v + 0.044715f * v * v * v));
    const float d = 0.5f * (1.0f + t) + 0.5f * v * (1.0f - t * t) * kGeluC * (1.0f + 3.0f * 0.044715f * v * v);
    dg[i] = fromf<T>(tof(dg[i]) * d);
  }
}

template <class T>
__global__ void copy_add_bias_kernel(T* y, const T* x, const T* bias, std::size_t n, int cols) {
  for (std::size_t i = blockIdx.x * static_cast<std::size_t>(blockDim.x) + threadIdx.x; i < n;
       i += static_cast<std::size_t>(gridDim.x) * blockDim.x)
    y[i] = fromf<T>(tof(x[i]) + tof(bias[i % cols]));
}

template <class T>
__global__ void embedding_forward_kernel(const std::int32_t* ids, const T* wte, const T* wpe, T* out, std::size_t n,
                                         int seq, int hidden) {
  for (std::size_t i = blockIdx.x * static_cast<std::size_t>(blockDim.x) + threadIdx.x; i < n;
       i += static_cast<std::size_t>(gridDim.x) * blockDim.x) {
    const std::size_t t = i / hidden, j = i % hidden;
    out[i] = fromf<T>(tof(wte[static_cast<std::size_t>(ids[t]) * hidden + j]) +
                      tof(wpe[(t % seq) * static_cast<std::size_t>(hidden) + j]));
  }
}

template <class T>
__global__ void embedding_backward_kernel(const std::int32_t* ids, const T* dout, float* dwte, float* dwpe,
                                          std::size_t n, int seq, int hidden) {
  for (std::size_t i = blockIdx.x * static_cast<std::size_t>(blockDim.x) + threadIdx.x; i < n;
       i += static_cast<std::size_t>(gridDim.x) * blockDim.x) {
    const std::size_t t = i / hidden, j = i % hidden;
    const float g = tof(dout[i]);
    atomicAdd(dwte + static_cast<std::size_t>(ids[t]) * hidden + j, g);
    atomicAdd(dwpe + (t % seq) * static_cast<std::size_t>(hidden) + j, g);
  }
}

// One block per row: probabilities in place, the row's loss into loss[0] / rows.
template <class T>
__global__ void cross_entropy_forward_kernel(T* logits, const std::int32_t* labels, float* loss, int rows,
                                             int vocabulary) {
  __shared__ float shared[32];
  const std::size_t o = static_cast<std::size_t>(blockIdx.x) * vocabulary;
  float mx = -INFINITY;
  for (int j = threadIdx.x; j < vocabulary; j += blockDim.x) mx = fmaxf(mx, tof(logits[o + j]));
  mx = block_max(mx, shared);
  float s = 0;
  for (int j = threadIdx.x; j < vocabulary; j += blockDim.x) s += __expf(tof(logits[o + j]) - mx);
  const float lse = mx + __logf(block_sum(s, shared));
  if (threadIdx.x == 0) atomicAdd(loss, (lse - tof(logits[o + labels[blockIdx.x]])) / rows);
  __syncthreads();  // the label's logit is read before it is overwritten
  for (int j = threadIdx.x; j < vocabulary; j += blockDim.x) logits[o + j] = fromf<T>(__expf(tof(logits[o + j]) - lse));
}

template <class T>
__global__ void cross_entropy_backward_kernel(T* probs, const std::int32_t* labels, std::size_t n, int vocabulary,
                                              float inv_rows) {
  for (std::size_t i = blockIdx.x * static_cast<std::size_t>(blockDim.x) + threadIdx.x; i < n;
       i += static_cast<std::size_t>(gridDim.x) * blockDim.x) {
    const std::size_t r = i / vocabulary;
    const int j = static_cast<int>(i % vocabulary);
    const float onehot = j == labels[r] ? 1.0f : 0.0f;
    probs[i] = fromf<T>((tof(probs[i]) - onehot) * inv_rows);
  }
}

template <class T>
__global__ void adam_kernel(T* w, float* master, float* g, float* m, float* v, std::size_t n, float c1, float c2) {
  constexpr float lr = 1e-4f, b1 = 0.9f, b2 = 0.999f, eps = 1e-8f;
  for (std::size_t i = blockIdx.x * static_cast<std::size_t>(blockDim.x) + threadIdx.x; i < n;
       i += static_cast<std::size_t>(gridDim.x) * blockDim.x) {
    const float gi = g[i];
    const float mi = b1 * m[i] + (1 - b1) * gi;
    const float vi = b2 * v[i] + (1 - b2) * gi * gi;
    m[i] = mi;
    v[i] = vi;
    const float p = (master != nullptr ? master[i] : tof(w[i])) - lr * (mi * c1) / (sqrtf(vi * c2) + eps);
    if (master != nullptr) master[i] = p;
    w[i] = fromf<T>(p);
    g[i] = 0.0f;
  }
}

template <class F>
cudaError_t with_type(bool half, F&& f) {
  if (half) {
    f(__half{});
  } else {
    f(float{});
  }
  return cudaGetLastError();
}

}  // namespace

cudaError_t check_image() {
  cudaFuncAttributes attr;
  return cudaFuncGetAttributes(&attr, spin_kernel);
}

cudaError_t spin(cudaStream_t s, std::uint64_t nanoseconds) {
  spin_kernel<<<1, 1, 0, s>>>(nanoseconds);
  return cudaGetLastError();
}

cudaError_t fill_uniform(cudaStream_t s, void* x, std::size_t n, bool half, std::uint64_t seed, float lo, float hi) {
  if (n == 0) return cudaSuccess;
  const std::uint64_t key = ((seed + 0x9e3779b97f4a7c15ull) ^ (seed >> 7)) * 0xbf58476d1ce4e5b9ull;
  return with_type(half, [&](auto tag) {
    using T = decltype(tag);
    fill_uniform_kernel<T><<<blocks_for(n), kThreads, 0, s>>>(static_cast<T*>(x), n, key, lo, hi);
  });
}

cudaError_t fill_value(cudaStream_t s, void* x, std::size_t n, bool half, float value) {
  if (n == 0) return cudaSuccess;
  return with_type(half, [&](auto tag) {
    using T = decltype(tag);
    fill_value_kernel<T><<<blocks_for(n), kThreads, 0, s>>>(static_cast<T*>(x), n, value);
  });
}

cudaError_t fill_float(cudaStream_t s, float* x, std::size_t n, float value) {
  if (n == 0) return cudaSuccess;
  fill_value_kernel<float><<<blocks_for(n), kThreads, 0, s>>>(x, n, value);
  return cudaGetLastError();
}

cudaError_t fill_tokens(cudaStream_t s, std::int32_t* ids, std::size_t n, int vocabulary, std::uint64_t seed) {
  if (n == 0) return cudaSuccess;
  const std::uint64_t key = ((seed + 0x9e3779b97f4a7c15ull) ^ (seed >> 7)) * 0xbf58476d1ce4e5b9ull;
  fill_tokens_kernel<<<blocks_for(n), kThreads, 0, s>>>(ids, n, vocabulary, key);
  return cudaGetLastError();
}

cudaError_t layernorm_forward(cudaStream_t s, const void* x, const void* gamma, const void* beta, void* y, float* mean,
                              float* rstd, int rows, int cols, bool half) {
  if (rows <= 0) return cudaSuccess;
  return with_type(half, [&](auto tag) {
    using T = decltype(tag);
    layernorm_forward_kernel<T><<<rows, kThreads, 0, s>>>(static_cast<const T*>(x), static_cast<const T*>(gamma),
                                                          static_cast<const T*>(beta), static_cast<T*>(y), mean, rstd,
                                                          cols);
  });
}

cudaError_t layernorm_backward(cudaStream_t s, const void* dy, const void* x, const float* mean, const float* rstd,
                               const void* gamma, const void* residual, void* dx, float* dgamma, float* dbeta, int rows,
                               int cols, bool half) {
  if (rows <= 0) return cudaSuccess;
  return with_type(half, [&](auto tag) {
    using T = decltype(tag);
    layernorm_backward_dx_kernel<T><<<rows, kThreads, 0, s>>>(
        static_cast<const T*>(dy), static_cast<const T*>(x), mean, rstd, static_cast<const T*>(gamma),
        static_cast<const T*>(residual), static_cast<T*>(dx), cols);
    const dim3 grid((cols + kThreads - 1) / kThreads, row_chunks(rows));
    layernorm_params_kernel<T><<<grid, kThreads, 0, s>>>(static_cast<const T*>(dy), static_cast<const T*>(x), mean,
                                                         rstd, dgamma, dbeta, rows, cols);
  });
}

cudaError_t softmax_forward(cudaStream_t s, void* p, int rows, int cols, float scale, bool causal, bool half) {
  if (rows <= 0) return cudaSuccess;
  return with_type(half, [&](auto tag) {
    using T = decltype(tag);
    softmax_forward_kernel<T><<<rows, kThreads, 0, s>>>(static_cast<T*>(p), cols, scale, causal);
  });
}

cudaError_t softmax_backward(cudaStream_t s, void* dp, const void* p, int rows, int cols, float scale, bool half) {
  if (rows <= 0) return cudaSuccess;
  return with_type(half, [&](auto tag) {
    using T = decltype(tag);
    softmax_backward_kernel<T><<<rows, kThreads, 0, s>>>(static_cast<T*>(dp), static_cast<const T*>(p), cols, scale);
  });
}

cudaError_t bias_gelu_forward(cudaStream_t s, void* u, const void* bias, void* g, int rows, int cols, bool half) {
  const std::size_t n = static_cast<std::size_t>(rows) * cols;
  if (n == 0) return cudaSuccess;
  return with_type(half, [&](auto tag) {
    using T = decltype(tag);
    bias_gelu_forward_kernel<T><<<blocks_for(n), kThreads, 0, s>>>(static_cast<T*>(u), static_cast<const T*>(bias),
                                                                   static_cast<T*>(g), n, cols);
  });
}

cudaError_t gelu_backward(cudaStream_t s, void* dg, const void* u, std::size_t n, bool half) {
  if (n == 0) return cudaSuccess;
  return with_type(half, [&](auto tag) {
    using T = decltype(tag);
    gelu_backward_kernel<T><<<blocks_for(n), kThreads, 0, s>>>(static_cast<T*>(dg), static_cast<const T*>(u), n);
  });
}

cudaError_t copy_add_bias(cudaStream_t s, void* y, const void* x, const void* bias, int rows, int cols, bool half) {
  const std::size_t n = static_cast<std::size_t>(rows) * cols;
  if (n == 0) return cudaSuccess;
  return with_type(half, [&](auto tag) {
    using T = decltype(tag);
    copy_add_bias_kernel<T><<<blocks_for(n), kThreads, 0, s>>>(static_cast<T*>(y), static_cast<const T*>(x),
                                                               static_cast<const T*>(bias), n, cols);
  });
}

cudaError_t column_sum(cudaStream_t s, const void* x, float* out, int rows, int cols, bool half) {
  if (rows <= 0 || cols <= 0) return cudaSuccess;
  return with_type(half, [&](auto tag) {
    using T = decltype(tag);
    const dim3 grid((cols + kThreads - 1) / kThreads, row_chunks(rows));
    column_sum_kernel<T><<<grid, kThreads, 0, s>>>(static_cast<const T*>(x), out, rows, cols);
  });
}

cudaError_t embedding_forward(cudaStream_t s, const std::int32_t* ids, const void* wte, const void* wpe, void* out,
                              int tokens, int seq, int hidden, bool half) {
  const std::size_t n = static_cast<std::size_t>(tokens) * hidden;
  if (n == 0) return cudaSuccess;
  return with_type(half, [&](auto tag) {
    using T = decltype(tag);
    embedding_forward_kernel<T><<<blocks_for(n), kThreads, 0, s>>>(ids, static_cast<const T*>(wte),
                                                                   static_cast<const T*>(wpe), static_cast<T*>(out), n,
                                                                   seq, hidden);
  });
}

cudaError_t embedding_backward(cudaStream_t s, const std::int32_t* ids, const void* dout, float* dwte, float* dwpe,
                               int tokens, int seq, int hidden, bool half) {
  const std::size_t n = static_cast<std::size_t>(tokens) * hidden;
  if (n == 0) return cudaSuccess;
  return with_type(half, [&](auto tag) {
    using T = decltype(tag);
    embedding_backward_kernel<T><<<blocks_for(n), kThreads, 0, s>>>(ids, static_cast<const T*>(dout), dwte, dwpe, n,
                                                                    seq, hidden);
  });
}

cudaError_t cross_entropy_forward(cudaStream_t s, void* logits, const std::int32_t* labels, float* loss, int rows,
                                  int vocabulary, bool half) {
  if (rows <= 0) return cudaSuccess;
  const cudaError_t err = cudaMemsetAsync(loss, 0, sizeof(float), s);
  if (err != cudaSuccess) return err;
  return with_type(half, [&](auto tag) {
    using T = decltype(tag);
    cross_entropy_forward_kernel<T><<<rows, kThreads, 0, s>>>(static_cast<T*>(logits), labels, loss, rows,
                                                              vocabulary);
  });
}

cudaError_t cross_entropy_backward(cudaStream_t s, void* probs, const std::int32_t* labels, int rows, int vocabulary,
                                   bool half) {
  const std::size_t n = static_cast<std::size_t>(rows) * vocabulary;
  if (n == 0) return cudaSuccess;
  return with_type(half, [&](auto tag) {
    using T = decltype(tag);
    cross_entropy_backward_kernel<T><<<blocks_for(n), kThreads, 0, s>>>(static_cast<T*>(probs), labels, n, vocabulary,
                                                                        1.0f / rows);
  });
}

cudaError_t adam(cudaStream_t s, void* w, float* master, float* g, float* m, float* v, std::size_t n, int step,
                 bool half) {
  if (n == 0) return cudaSuccess;
  const float c1 = 1.0f / (1.0f - powf(0.9f, static_cast<float>(step)));
  const float c2 = 1.0f / (1.0f - powf(0.999f, static_cast<float>(step)));
  return with_type(half, [&](auto tag) {
    using T = decltype(tag);
    adam_kernel<T><<<blocks_for(n), kThreads, 0, s>>>(static_cast<T*>(w), master, g, m, v, n, c1, c2);
  });
}

}  // namespace adagrouper::calib::cuda
