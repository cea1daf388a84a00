// The CUDA backend's own kernels (everything but the GEMMs, which are cuBLAS): launchers
// callable from host C++, each enqueued on `stream`, returning the launch's error.
// `half`: activations are __half (else float); arithmetic is in float. Compiled by nvcc
// for the architectures of -Dcuda-arch (calib/meson.build).
#pragma once

#include <cuda_runtime.h>

#include <cstddef>
#include <cstdint>

namespace adagrouper::calib::cuda {

// cudaSuccess when this build has code the current device can run (else the error, e.g.
// cudaErrorNoKernelImageForDevice).
cudaError_t check_image();

cudaError_t fill_uniform(cudaStream_t s, void* x, std::size_t n, bool half, std::uint64_t seed, float lo, float hi);
cudaError_t fill_value(cudaStream_t s, void* x, std::size_t n, bool half, float value);
cudaError_t fill_float(cudaStream_t s, float* x, std::size_t n, float value);
cudaError_t fill_tokens(cudaStream_t s, std::int32_t* ids, std::size_t n, int vocabulary, std::uint64_t seed);

cudaError_t layernorm_forward(cudaStream_t s, const void* x, const void* gamma, const void* beta, void* y, float* mean,
                              float* rstd, int rows, int cols, bool half);
// dx = residual (may be null) + d LayerNorm / dx (dy); dgamma, dbeta accumulate.
cudaError_t layernorm_backward(cudaStream_t s, const void* dy, const void* x, const float* mean, const float* rstd,
                               const void* gamma, const void* residual, void* dx, float* dgamma, float* dbeta, int rows,
                               int cols, bool half);
cudaError_t softmax_forward(cudaStream_t s, void* p, int rows, int cols, float scale, bool causal, bool half);
cudaError_t softmax_backward(cudaStream_t s, void* dp, const void* p, int rows, int cols, float scale, bool half);
cudaError_t bias_gelu_forward(cudaStream_t s, void* u, const void* bias, void* g, int rows, int cols, bool half);
cudaError_t gelu_backward(cudaStream_t s, void* dg, const void* u, std::size_t n, bool half);
// y = x + bias (x may equal y).
cudaError_t copy_add_bias(cudaStream_t s, void* y, const void* x, const void* bias, int rows, int cols, bool half);
cudaError_t column_sum(cudaStream_t s, const void* x, float* out, int rows, int cols, bool half);
cudaError_t embedding_forward(cudaStream_t s, const std::int32_t* ids, const void* wte, const void* wpe, void* out,
                              int tokens, int seq, int hidden, bool half);
cudaError_t embedding_backward(cudaStream_t s, const std::int32_t* ids, const void* dout, float* dwte, float* dwpe,
                               int tokens, int seq, int hidden, bool half);
// loss[0] is overwritten with the mean cross-entropy.
cudaError_t cross_entropy_forward(cudaStream_t s, void* logits, const std::int32_t* labels, float* loss, int rows,
                                  int vocabulary, bool half);
cudaError_t cross_entropy_backward(cudaStream_t s, void* probs, const std::int32_t* labels, int rows, int vocabulary,
                                   bool half);
cudaError_t adam(cudaStream_t s, void* w, float* master, float* g, float* m, float* v, std::size_t n, int step,
                 bool half);
// One thread spinning on the GPU's global timer for `nanoseconds`.
cudaError_t spin(cudaStream_t s, std::uint64_t nanoseconds);

}  // namespace adagrouper::calib::cuda
