// The CUDA backend: one GPU per rank (its local rank), CUDA streams and events, cuBLAS
// GEMMs, our kernels (cuda_kernels.cu), NCCL send/recv on one communicator per channel.
#include <cublas_v2.h>
#include <cuda_runtime.h>
#include <nccl.h>

#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdlib>
#include <cstring>
#include <mutex>
#include <set>
#include <thread>
#include <utility>

#include <fmt/format.h>

#include "backend.h"
#include "cuda_kernels.h"
#include "runtime.h"

#if !defined(NCCL_VERSION_CODE) || NCCL_VERSION_CODE < 2700
#error "the CUDA backend needs NCCL >= 2.7 (ncclSend / ncclRecv)"
#endif

namespace adagrouper::calib {

namespace {

const char* cublas_error(cublasStatus_t s) {
  switch (s) {
    case CUBLAS_STATUS_SUCCESS: return "success";
    case CUBLAS_STATUS_NOT_INITIALIZED: return "CUBLAS_STATUS_NOT_INITIALIZED";
    case CUBLAS_STATUS_ALLOC_FAILED: return "CUBLAS_STATUS_ALLOC_FAILED";
    case CUBLAS_STATUS_INVALID_VALUE: return "CUBLAS_STATUS_INVALID_VALUE";
    case CUBLAS_STATUS_ARCH_MISMATCH: return "CUBLAS_STATUS_ARCH_MISMATCH";
    case CUBLAS_STATUS_MAPPING_ERROR: return "CUBLAS_STATUS_MAPPING_ERROR";
    case CUBLAS_STATUS_EXECUTION_FAILED: return "CUBLAS_STATUS_EXECUTION_FAILED";
    case CUBLAS_STATUS_INTERNAL_ERROR: return "CUBLAS_STATUS_INTERNAL_ERROR";
    case CUBLAS_STATUS_NOT_SUPPORTED: return "CUBLAS_STATUS_NOT_SUPPORTED";
    default: return "cuBLAS error";
  }
}

// The device, and checks whose errors name the call, rank, host and GPU.
struct Gpu {
  Identity id;
  int device = 0;

  void check(cudaError_t e, std::string_view call) const {
    if (e != cudaSuccess)
      fail_call(id, call, fmt::format("GPU {}: {} ({})", device, cudaGetErrorString(e), cudaGetErrorName(e)));
  }
  void check(cublasStatus_t s, std::string_view call) const {
    if (s != CUBLAS_STATUS_SUCCESS) fail_call(id, call, fmt::format("GPU {}: {}", device, cublas_error(s)));
  }
  void check(ncclResult_t r, std::string_view call, ncclComm_t comm = nullptr) const {
    if (r == ncclSuccess) return;
    std::string detail = ncclGetErrorString(r);
#if NCCL_VERSION_CODE >= NCCL_VERSION(2, 13, 0)
    if (comm != nullptr) {
      const char* last = ncclGetLastError(comm);
      if (last != nullptr && *last != '\0') detail += fmt::format(" ({})", last);
    }
#else
    (void)comm;
#endif
    fail_call(id, call, fmt::format("GPU {}: {}", device, detail));
  }
  void use() const { check(cudaSetDevice(device), "cudaSetDevice"); }
};

cudaDataType_t cuda_type(Elem e) { return e == Elem::f16 ? CUDA_R_16F : CUDA_R_32F; }

// ---------------------------------------------------------------------------------

class CudaKernels final : public Kernels {
 public:
  CudaKernels(Gpu gpu, cudaStream_t stream) : gpu_(std::move(gpu)), s_(stream) {
    gpu_.check(cublasCreate(&blas_), "cublasCreate");
    gpu_.check(cublasSetStream(blas_, s_), "cublasSetStream");
  }
  ~CudaKernels() override { cublasDestroy(blas_); }

  // Row-major C = op(A) op(B) is column-major C^T = op(B)^T op(A)^T: B first.
  void gemm(bool ta, bool tb, int m, int n, int k, float alpha, const void* a, int lda, const void* b, int ldb,
            float beta, void* c, int ldc, Elem ab, Elem ce) override {
    gpu_.check(cublasGemmEx(blas_, tb ? CUBLAS_OP_T : CUBLAS_OP_N, ta ? CUBLAS_OP_T : CUBLAS_OP_N, n, m, k, &alpha, b,
                            cuda_type(ab), ldb, a, cuda_type(ab), lda, &beta, c, cuda_type(ce), ldc,
                            CUBLAS_COMPUTE_32F, CUBLAS_GEMM_DEFAULT),
               "cublasGemmEx");
  }
  void gemm_batched(bool ta, bool tb, int m, int n, int k, float alpha, const void* a, int lda, std::int64_t sa,
                    const void* b, int ldb, std::int64_t sb, float beta, void* c, int ldc, std::int64_t sc, int batch,
                    Elem e) override {
    gpu_.check(cublasGemmStridedBatchedEx(blas_, tb ? CUBLAS_OP_T : CUBLAS_OP_N, ta ? CUBLAS_OP_T : CUBLAS_OP_N, n, m,
                                          k, &alpha, b, cuda_type(e), ldb, sb, a, cuda_type(e), lda, sa, &beta, c,
                                          cuda_type(e), ldc, sc, batch, CUBLAS_COMPUTE_32F, CUBLAS_GEMM_DEFAULT),
               "cublasGemmStridedBatchedEx");
  }
  void fill_uniform(void* x, std::size_t n, Elem e, std::uint64_t seed, float lo, float hi) override {
    gpu_.check(cuda::fill_uniform(s_, x, n, e == Elem::f16, seed, lo, hi), "fill_uniform kernel");
  }
  void fill_value(void* x, std::size_t n, Elem e, float value) override {
    gpu_.check(cuda::fill_value(s_, x, n, e == Elem::f16, value), "fill_value kernel");
  }
  void fill_tokens(std::int32_t* ids, std::size_t n, int vocabulary, std::uint64_t seed) override {
    gpu_.check(cuda::fill_tokens(s_, ids, n, vocabulary, seed), "fill_tokens kernel");
  }
  void layernorm_forward(const void* x, const void* gamma, const void* beta, void* y, float* mean, float* rstd,
                         int rows, int cols, Elem e) override {
    gpu_.check(cuda::layernorm_forward(s_, x, gamma, beta, y, mean, rstd, rows, cols, e == Elem::f16),
               "layernorm_forward kernel");
  }
  void layernorm_backward(const void* dy, const void* x, const float* mean, const float* rstd, const void* gamma,
                          const void* residual, void* dx, float* dgamma, float* dbeta, int rows, int cols,
                          Elem e) override {
    gpu_.check(cuda::layernorm_backward(s_, dy, x, mean, rstd, gamma, residual, dx, dgamma, dbeta, rows, cols,
                                        e == Elem::f16),
               "layernorm_backward kernel");
  }
  void softmax_forward(void* p, int rows, int cols, float scale, bool causal, Elem e) override {
    gpu_.check(cuda::softmax_forward(s_, p, rows, cols, scale, causal, e == Elem::f16), "softmax_forward kernel");
  }
  void softmax_backward(void* dp, const void* p, int rows, int cols, float scale, Elem e) override {
    gpu_.check(cuda::softmax_backward(s_, dp, p, rows, cols, scale, e == Elem::f16), "softmax_backward kernel");
  }
  void bias_gelu_forward(void* u, const void* bias, void* g, int rows, int cols, Elem e) override {
    gpu_.check(cuda::bias_gelu_forward(s_, u, bias, g, rows, cols, e == Elem::f16), "bias_gelu_forward kernel");
  }
  void gelu_backward(void* dg, const void* u, int rows, int cols, Elem e) override {
    gpu_.check(cuda::gelu_backward(s_, dg, u, static_cast<std::size_t>(rows) * static_cast<std::size_t>(cols),
                                   e == Elem::f16),
               "gelu_backward kernel");
  }
  void add_bias(void* y, const void* bias, int rows, int cols, Elem e) override {
    gpu_.check(cuda::copy_add_bias(s_, y, y, bias, rows, cols, e == Elem::f16), "add_bias kernel");
  }
  void copy_add_bias(void* y, const void* x, const void* bias, int rows, int cols, Elem e) override {
    gpu_.check(cuda::copy_add_bias(s_, y, x, bias, rows, cols, e == Elem::f16), "copy_add_bias kernel");
  }
  void column_sum(const void* x, float* out, int rows, int cols, Elem e) override {
    gpu_.check(cuda::column_sum(s_, x, out, rows, cols, e == Elem::f16), "column_sum kernel");
  }
  void embedding_forward(const std::int32_t* ids, const void* wte, const void* wpe, void* out, int tokens, int seq,
                         int hidden, Elem e) override {
    gpu_.check(cuda::embedding_forward(s_, ids, wte, wpe, out, tokens, seq, hidden, e == Elem::f16),
               "embedding_forward kernel");
  }
  void embedding_backward(const std::int32_t* ids, const void* dout, float* dwte, float* dwpe, int tokens, int seq,
                          int hidden, Elem e) override {
    gpu_.check(cuda::embedding_backward(s_, ids, dout, dwte, dwpe, tokens, seq, hidden, e == Elem::f16),
               "embedding_backward kernel");
  }
  void cross_entropy_forward(void* logits, const std::int32_t* labels, float* loss, int rows, int vocabulary,
                             Elem e) override {
    gpu_.check(cuda::cross_entropy_forward(s_, logits, labels, loss, rows, vocabulary, e == Elem::f16),
               "cross_entropy_forward kernel");
  }
  void cross_entropy_backward(void* probs, const std::int32_t* labels, int rows, int vocabulary, Elem e) override {
    gpu_.check(cuda::cross_entropy_backward(s_, probs, labels, rows, vocabulary, e == Elem::f16),
               "cross_entropy_backward kernel");
  }
  void adam(void* w, float* master, float* g, float* m, float* v, std::size_t n, int step, Elem e) override {
    gpu_.check(cuda::adam(s_, w, master, g, m, v, n, step, e == Elem::f16), "adam kernel");
  }

 private:
  Gpu gpu_;
  cudaStream_t s_;
  cublasHandle_t blas_ = nullptr;
};

// ---------------------------------------------------------------------------------

class CudaEvent final : public Event {
 public:
  CudaEvent(const Gpu& gpu, Watchdog& dog) : gpu_(gpu), dog_(dog) {
    gpu_.use();
    gpu_.check(cudaEventCreate(&ev_), "cudaEventCreate");
  }
  ~CudaEvent() override { cudaEventDestroy(ev_); }
  cudaEvent_t get() const { return ev_; }

  void synchronize() override {
    auto g = dog_.guard("cudaEventSynchronize");
    gpu_.check(cudaEventSynchronize(ev_), "cudaEventSynchronize");
  }
  bool done() override {
    const cudaError_t e = cudaEventQuery(ev_);
    if (e == cudaErrorNotReady) return false;
    gpu_.check(e, "cudaEventQuery");
    return true;
  }
  double seconds_since(const Event& earlier) const override {
    float ms = 0;
    gpu_.check(cudaEventElapsedTime(&ms, static_cast<const CudaEvent&>(earlier).ev_, ev_), "cudaEventElapsedTime");
    return ms * 1e-3;
  }

 private:
  const Gpu& gpu_;
  Watchdog& dog_;
  cudaEvent_t ev_ = nullptr;
};

class CudaStream final : public Stream {
 public:
  CudaStream(const Gpu& gpu, Watchdog& dog) : gpu_(gpu), dog_(dog) {
    gpu_.use();
    gpu_.check(cudaStreamCreateWithFlags(&s_, cudaStreamNonBlocking), "cudaStreamCreateWithFlags");
  }
  ~CudaStream() override {
    kernels_.reset();
    cudaStreamDestroy(s_);
  }
  cudaStream_t get() const { return s_; }

  void record(Event& e) override {
    gpu_.use();
    gpu_.check(cudaEventRecord(static_cast<CudaEvent&>(e).get(), s_), "cudaEventRecord");
  }
  void wait(const Event& e) override {
    gpu_.use();
    gpu_.check(cudaStreamWaitEvent(s_, static_cast<const CudaEvent&>(e).get(), 0), "cudaStreamWaitEvent");
  }
  void synchronize() override {
    auto g = dog_.guard("cudaStreamSynchronize");
    gpu_.check(cudaStreamSynchronize(s_), "cudaStreamSynchronize");
  }
  void submit(std::function<void(Kernels&)> work) override {
    gpu_.use();
    if (!kernels_) kernels_ = std::make_unique<CudaKernels>(gpu_, s_);
    work(*kernels_);
  }
  void busy(double seconds) override {
    gpu_.use();
    const double ns = std::max(0.0, seconds) * 1e9;
    gpu_.check(cuda::spin(s_, static_cast<std::uint64_t>(std::llround(ns))), "spin kernel");
  }

 private:
  const Gpu& gpu_;
  Watchdog& dog_;
  cudaStream_t s_ = nullptr;
  std::unique_ptr<CudaKernels> kernels_;
};

class CudaBuffer final : public Buffer {
 public:
  CudaBuffer(const Gpu& gpu, std::size_t bytes) : bytes_(bytes) {
    gpu.use();
    const cudaError_t e = cudaMalloc(&data_, std::max<std::size_t>(bytes, 1));
    if (e == cudaErrorMemoryAllocation) {
      cudaGetLastError();
      std::size_t free = 0, total = 0;
      cudaMemGetInfo(&free, &total);
      fail_call(gpu.id, "cudaMalloc",
                fmt::format("GPU {}: out of memory allocating {} bytes ({} of {} bytes free): use smaller micro-batch "
                            "sizes (-e) or a smaller stage",
                            gpu.device, bytes, free, total));
    }
    gpu.check(e, "cudaMalloc");
    // On the legacy default stream, which our non-blocking streams do not wait for:
    // finished before the buffer is handed out.
    gpu.check(cudaMemset(data_, 0, bytes), "cudaMemset");
    gpu.check(cudaDeviceSynchronize(), "cudaDeviceSynchronize (after cudaMemset)");
  }
  ~CudaBuffer() override { cudaFree(data_); }
  void* data() override { return data_; }
  std::size_t bytes() const override { return bytes_; }

 private:
  void* data_ = nullptr;
  std::size_t bytes_;
};

// The communicators alive now, for the watchdog's ncclCommAbort.
struct CommRegistry {
  std::mutex mutex;
  std::set<ncclComm_t> comms;
};

// ---------------------------------------------------------------------------------

class NcclChannel final : public Channel {
 public:
  NcclChannel(const Gpu& gpu, Watchdog& dog, std::shared_ptr<CommRegistry> registry, ChannelSpec spec, bool sender,
              std::size_t max_bytes, ncclComm_t comm)
      : Channel(spec, sender, max_bytes),
        gpu_(gpu),
        dog_(dog),
        registry_(std::move(registry)),
        comm_(comm),
        buf_(gpu, std::max<std::size_t>(max_bytes, 16)),
        own_(gpu, dog) {}

  ~NcclChannel() override {
    {
      std::lock_guard<std::mutex> lock(registry_->mutex);
      registry_->comms.erase(comm_);
    }
    ncclCommDestroy(comm_);
  }

  void send(Stream& stream, std::size_t bytes) override {
    check_size(bytes);
    gpu_.use();
    gpu_.check(ncclSend(buf_.data(), bytes, ncclUint8, 1, comm_, static_cast<CudaStream&>(stream).get()), "ncclSend",
               comm_);
  }
  void recv(Stream& stream, std::size_t bytes) override {
    check_size(bytes);
    gpu_.use();
    gpu_.check(ncclRecv(buf_.data(), bytes, ncclUint8, 0, comm_, static_cast<CudaStream&>(stream).get()), "ncclRecv",
               comm_);
  }

  // Measured on the sender, from events around each ncclSend on the channel's own
  // stream; the receiver keeps kAhead receives posted, so a send never waits for one.
  void record_transfers(const TransferPlan& plan,
                        const std::function<void(const TransferRecord&)>& sample) override {
    if (plan.count <= 0 || plan.sizes.empty()) return;
    for (const std::size_t b : plan.sizes) check_size(b);
    gpu_.use();
    constexpr int kAhead = 8;
    std::vector<std::unique_ptr<CudaEvent>> start, end;
    for (int i = 0; i < kAhead; ++i) {
      start.push_back(std::make_unique<CudaEvent>(gpu_, dog_));
      end.push_back(std::make_unique<CudaEvent>(gpu_, dog_));
    }
    own_.synchronize();
    CudaEvent origin(gpu_, dog_);
    own_.record(origin);
    origin.synchronize();
    const double host_origin = now_s();  // the host's clock when the GPU reached `origin`
    auto finish = [&](int i) {
      const std::size_t slot = static_cast<std::size_t>(i % kAhead);
      end[slot]->synchronize();
      if (!sender()) return;
      const double t = host_origin + start[slot]->seconds_since(origin) - plan.origin_s;
      const double d = end[slot]->seconds_since(*start[slot]);
      sample({t, static_cast<double>(plan.sizes[static_cast<std::size_t>(i) % plan.sizes.size()]),
              std::max(d, 1e-9)});
    };
    for (int i = 0; i < plan.count; ++i) {
      if (i >= kAhead) finish(i - kAhead);
      const std::size_t slot = static_cast<std::size_t>(i % kAhead);
      const std::size_t bytes = plan.sizes[static_cast<std::size_t>(i) % plan.sizes.size()];
      if (sender()) {
        const double due = plan.origin_s + i * plan.interval_s;
        while (now_s() < due) std::this_thread::sleep_for(std::chrono::duration<double>(std::min(due - now_s(), 0.01)));
        own_.record(*start[slot]);
        send(own_, bytes);
      } else {
        own_.record(*start[slot]);
        recv(own_, bytes);
      }
      own_.record(*end[slot]);
    }
    for (int i = std::max(0, plan.count - kAhead); i < plan.count; ++i) finish(i);
  }

 private:
  void check_size(std::size_t bytes) const {
    if (bytes > max_bytes())
      fail_call(gpu_.id, sender() ? "ncclSend" : "ncclRecv",
                fmt::format("{} bytes on channel {} -> {}, whose buffer holds {}", bytes, spec().from, spec().to,
                            max_bytes()));
  }

  const Gpu& gpu_;
  Watchdog& dog_;
  std::shared_ptr<CommRegistry> registry_;
  ncclComm_t comm_;
  CudaBuffer buf_;
  CudaStream own_;  // record_transfers' stream
};

// ---------------------------------------------------------------------------------

class CudaBackend final : public Backend {
 public:
  CudaBackend(const Mpi& mpi, Watchdog& dog) : mpi_(mpi), dog_(dog), registry_(std::make_shared<CommRegistry>()) {
    gpu_.id = mpi.id();
    int count = 0;
    const cudaError_t e = cudaGetDeviceCount(&count);
    if (e != cudaSuccess || count == 0) {
      const char* visible = std::getenv("CUDA_VISIBLE_DEVICES");
      fail_call(mpi.id(), "cudaGetDeviceCount",
                fmt::format("no usable GPU ({}; CUDA_VISIBLE_DEVICES={}); use --backend cpu without GPUs",
                            e != cudaSuccess ? cudaGetErrorString(e) : "0 devices", visible ? visible : "unset"));
    }
    if (mpi.id().local_rank >= count)
      fail_call(mpi.id(), "cudaSetDevice",
                fmt::format("this is local rank {} of {} on the host, which has {} GPU(s): start at most {} ranks per "
                            "host",
                            mpi.id().local_rank, mpi.id().local_size, count, count));
    gpu_.device = mpi.id().local_rank;  // as nccl-tests: the local rank picks the GPU
    gpu_.use();
    gpu_.check(cudaFree(nullptr), "cudaFree (context creation)");
    gpu_.check(cudaGetDeviceProperties(&props_, gpu_.device), "cudaGetDeviceProperties");
    const cudaError_t image = cuda::check_image();
    if (image != cudaSuccess)
      fail_call(mpi.id(), "cudaFuncGetAttributes",
                fmt::format("GPU {} ({}, sm_{}{}) cannot run this build's kernels: {}. Rebuild with "
                            "-Dcuda-arch={}{} (V100, sm_70, needs CUDA <= 12.9)",
                            gpu_.device, props_.name, props_.major, props_.minor, cudaGetErrorString(image),
                            props_.major, props_.minor));
    // On a timeout, abort every communicator first (unblocks the kernels), then MPI.
    dog_.add_abort_hook([registry = registry_] {
      std::lock_guard<std::mutex> lock(registry->mutex);
      for (ncclComm_t c : registry->comms) ncclCommAbort(c);
      registry->comms.clear();
    });
  }

  BackendKind kind() const override { return BackendKind::cuda; }
  std::string device() const override {
    return fmt::format("{} (GPU {}, sm_{}{})", props_.name, gpu_.device, props_.major, props_.minor);
  }
  std::optional<double> device_memory_bytes() const override { return static_cast<double>(props_.totalGlobalMem); }

  std::unique_ptr<Stream> create_stream() override { return std::make_unique<CudaStream>(gpu_, dog_); }
  std::unique_ptr<Event> create_event() override { return std::make_unique<CudaEvent>(gpu_, dog_); }
  std::unique_ptr<Buffer> allocate(std::size_t bytes) override { return std::make_unique<CudaBuffer>(gpu_, bytes); }

  std::vector<std::unique_ptr<Channel>> connect(const std::vector<ChannelSpec>& specs,
                                                std::size_t max_bytes) override {
    const int me = mpi_.rank();
    for (const ChannelSpec& s : specs)
      if (s.from == s.to || s.from < 0 || s.to < 0 || s.from >= mpi_.size() || s.to >= mpi_.size())
        fail_call(mpi_.id(), "connect", fmt::format("channel {} -> {} does not join two of the {} ranks", s.from,
                                                    s.to, mpi_.size()));
    // Rank 0 makes one ncclUniqueId per channel and broadcasts them all.
    std::vector<ncclUniqueId> ids(specs.size());
    if (me == 0)
      for (auto& id : ids) gpu_.check(ncclGetUniqueId(&id), "ncclGetUniqueId");
    if (!ids.empty()) mpi_.bcast(ids.data(), ids.size() * sizeof(ncclUniqueId), 0);
    // Every rank joins its communicators in the same global order, so the two-rank
    // initializations never wait on each other in a cycle.
    std::vector<std::unique_ptr<Channel>> out;
    gpu_.use();
    for (std::size_t i = 0; i < specs.size(); ++i) {
      const ChannelSpec& s = specs[i];
      if (me != s.from && me != s.to) continue;
      ncclComm_t comm = nullptr;
      {
        auto g = dog_.guard("ncclCommInitRank", me == s.from ? s.to : s.from);
        gpu_.check(ncclCommInitRank(&comm, 2, ids[i], me == s.from ? 0 : 1), "ncclCommInitRank");
      }
      {
        std::lock_guard<std::mutex> lock(registry_->mutex);
        registry_->comms.insert(comm);
      }
      out.push_back(std::make_unique<NcclChannel>(gpu_, dog_, registry_, s, me == s.from, max_bytes, comm));
    }
    return out;
  }

 private:
  const Mpi& mpi_;
  Watchdog& dog_;
  Gpu gpu_;
  cudaDeviceProp props_{};
  std::shared_ptr<CommRegistry> registry_;
};

}  // namespace

std::unique_ptr<Kernels> make_cuda_kernels(int device, void* stream) {
  Gpu gpu{Identity{}, device};
  gpu.use();
  return std::make_unique<CudaKernels>(std::move(gpu), static_cast<cudaStream_t>(stream));
}

std::unique_ptr<Backend> make_cuda_backend(const Mpi& mpi, Watchdog& watchdog) {
  return std::make_unique<CudaBackend>(mpi, watchdog);
}

}  // namespace adagrouper::calib
