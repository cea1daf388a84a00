// The device side of the calibration harness: streams, events, memory, compute kernels
// and point-to-point channels, with one implementation per backend (cpu: CPU kernels
// and MPI point-to-point; cuda: cuBLAS and our kernels, NCCL send/recv).
//
// The model is CUDA's: work is enqueued on streams and runs in order on each stream;
// events mark points in a stream, other streams wait for them, the host waits for them,
// and two reached events give the time between them. The CPU backend runs each stream
// on a worker thread of its own, so both backends overlap compute and transfers the same
// way. Streams, events, buffers and channels of one backend only work with each other.
//
// The replay of a plan's per-device programs (docs/fidelity.md) uses exactly this interface:
//
//   auto be = make_backend(BackendKind::cuda, mpi, dog);
//   auto compute = be->create_stream(), send = be->create_stream(), recv = be->create_stream();
//   auto links = be->connect(specs, max_bytes);   // one communicator per (pair, direction)
//   recv->... links[i]->recv(*recv, bytes); recv->record(*arrived);
//   compute->wait(*arrived); compute->busy(forward_s); compute->record(*produced);
//   send->wait(*produced); links[j]->send(*send, bytes);
//   compute->synchronize(); produced->seconds_since(*origin);
#pragma once

#include <cstddef>
#include <cstdint>
#include <functional>
#include <memory>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "description.h"

namespace adagrouper::calib {

class Mpi;
class Watchdog;

enum class BackendKind { cpu, cuda };
std::string_view backend_name(BackendKind k);
// True when this build has the CUDA backend (CUDA, cuBLAS and NCCL were found).
bool cuda_backend_built();

// Element types of device tensors.
enum class Elem : std::uint8_t { f16, f32, i32 };
std::size_t elem_bytes(Elem e);
inline Elem elem_of(Dtype d) { return d == Dtype::fp16 ? Elem::f16 : Elem::f32; }

// The compute kernels a stage is made of. Matrices are row-major; ld* are row strides
// in elements. Activations are of one element type `e` (f16 or f32); arithmetic is in
// f32; LayerNorm statistics and weight gradients are f32, token ids i32. A Kernels object
// belongs to one stream (Stream::submit hands it out): its calls run on that stream.
class Kernels {
 public:
  virtual ~Kernels() = default;

  // C[m x n] = alpha op(A) op(B) + beta C, op(X) = X or its transpose. A and B of type
  // `ab`, C of type `c` (f32 C with f16 A and B accumulates weight gradients).
  virtual void gemm(bool trans_a, bool trans_b, int m, int n, int k, float alpha, const void* a, int lda,
                    const void* b, int ldb, float beta, void* c, int ldc, Elem ab, Elem c_elem) = 0;
  // `batch` GEMMs of type e, the i-th on a + i*stride_a, b + i*stride_b, c + i*stride_c.
  virtual void gemm_batched(bool trans_a, bool trans_b, int m, int n, int k, float alpha, const void* a, int lda,
                            std::int64_t stride_a, const void* b, int ldb, std::int64_t stride_b, float beta, void* c,
                            int ldc, std::int64_t stride_c, int batch, Elem e) = 0;

  // x[i] = lo + (hi - lo) u(seed, i), u a hash of (seed, i) in [0, 1) (not std::).
  virtual void fill_uniform(void* x, std::size_t n, Elem e, std::uint64_t seed, float lo, float hi) = 0;
  virtual void fill_value(void* x, std::size_t n, Elem e, float value) = 0;
  // ids[i] = hash(seed, i) mod vocabulary.
  virtual void fill_tokens(std::int32_t* ids, std::size_t n, int vocabulary, std::uint64_t seed) = 0;

  // y = (x - mean) * rstd * gamma + beta per row; saves mean and rstd (f32, one per row).
  virtual void layernorm_forward(const void* x, const void* gamma, const void* beta, void* y, float* mean,
                                 float* rstd, int rows, int cols, Elem e) = 0;
  // dx = residual (may be null) + the LayerNorm input gradient of dy; dgamma and dbeta
  // (f32) accumulate.
  virtual void layernorm_backward(const void* dy, const void* x, const float* mean, const float* rstd,
                                  const void* gamma, const void* residual, void* dx, float* dgamma, float* dbeta,
                                  int rows, int cols, Elem e) = 0;
  // In place: p = softmax(scale * p) per row of `cols`; with `causal`, row r (query
  // position r mod cols) sees only columns <= r mod cols.
  virtual void softmax_forward(void* p, int rows, int cols, float scale, bool causal, Elem e) = 0;
  // In place: dp = scale * p * (dp - sum(dp * p)) per row.
  virtual void softmax_backward(void* dp, const void* p, int rows, int cols, float scale, Elem e) = 0;
  // u += bias (per column); g = gelu(u) (tanh form).
  virtual void bias_gelu_forward(void* u, const void* bias, void* g, int rows, int cols, Elem e) = 0;
  // dg *= gelu'(u).
  virtual void gelu_backward(void* dg, const void* u, int rows, int cols, Elem e) = 0;
  // y += bias (per column).
  virtual void add_bias(void* y, const void* bias, int rows, int cols, Elem e) = 0;
  // y = x + bias (per column).
  virtual void copy_add_bias(void* y, const void* x, const void* bias, int rows, int cols, Elem e) = 0;
  // out[c] += sum over rows of x[r][c] (f32 out): bias gradients.
  virtual void column_sum(const void* x, float* out, int rows, int cols, Elem e) = 0;
  // out[t] = wte[ids[t]] + wpe[t mod seq].
  virtual void embedding_forward(const std::int32_t* ids, const void* wte, const void* wpe, void* out, int tokens,
                                 int seq, int hidden, Elem e) = 0;
  // dwte[ids[t]] += dout[t]; dwpe[t mod seq] += dout[t] (f32).
  virtual void embedding_backward(const std::int32_t* ids, const void* dout, float* dwte, float* dwpe, int tokens,
                                  int seq, int hidden, Elem e) = 0;
  // In place: logits become softmax probabilities (f32 arithmetic); loss[0] = mean
  // cross-entropy against labels.
  virtual void cross_entropy_forward(void* logits, const std::int32_t* labels, float* loss, int rows, int vocabulary,
                                     Elem e) = 0;
  // In place: probs become (probs - onehot(label)) / rows, the logits' gradient.
  virtual void cross_entropy_backward(void* probs, const std::int32_t* labels, int rows, int vocabulary,
                                      Elem e) = 0;
  // One Adam step over n parameters: g (f32) updates m, v (f32) and the f32 master
  // weights (f16 parameters; for f32 parameters master is null and w is updated);
  // then g is zeroed for the next iteration.
  virtual void adam(void* w, float* master, float* g, float* m, float* v, std::size_t n, int step, Elem e) = 0;
};

// A point in a stream's work.
class Event {
 public:
  virtual ~Event() = default;
  // The host waits until the stream has reached the event's last record (watchdog-guarded).
  virtual void synchronize() = 0;
  // Reached already?
  virtual bool done() = 0;
  // Seconds from `earlier` to this event; both recorded, both reached.
  virtual double seconds_since(const Event& earlier) const = 0;
  // When it was reached on the host's clock (now_s), where the backend knows it: cpu, whose
  // streams are host threads; nullopt for cuda, whose events are on the device's clock.
  virtual std::optional<double> host_time() const { return std::nullopt; }
};

class Stream {
 public:
  virtual ~Stream() = default;
  // `e` is reached when the work enqueued so far has ended (re-recording moves it).
  virtual void record(Event& e) = 0;
  // Work enqueued after this starts after `e` (as last recorded now) is reached.
  virtual void wait(const Event& e) = 0;
  // The host waits until everything enqueued has ended (watchdog-guarded); rethrows an
  // error of the stream's work.
  virtual void synchronize() = 0;
  // Runs `work` in order with the rest of the stream, with kernels that execute on it.
  // cuda: called at once on this thread (the kernels are enqueued); cpu: later, on the
  // stream's worker thread.
  virtual void submit(std::function<void(Kernels&)> work) = 0;
  // A compute kernel that keeps the device busy for `seconds` (a replayed op).
  virtual void busy(double seconds) = 0;
};

// Device memory (cuda) or host memory (cpu), zero-filled.
class Buffer {
 public:
  virtual ~Buffer() = default;
  virtual void* data() = 0;
  virtual std::size_t bytes() const = 0;
  template <class T>
  T* as() {
    return static_cast<T*>(data());
  }
};

// A directed channel between two ranks: messages from `from` to `to`.
struct ChannelSpec {
  int from = 0, to = 0;
};

// The p2p mode's recording on one channel: `count` transfers, the k-th of
// sizes[k % sizes.size()] bytes, started at origin_s + k * interval_s (this rank's
// now_s() clock) or when the previous one ends, if later.
struct TransferPlan {
  std::vector<std::size_t> sizes;
  int count = 0;
  double interval_s = 0;
  double origin_s = 0;
};

// One measured transfer: it started at time_s (seconds since the plan's origin, on the
// measuring rank's clock), moved `bytes` and took duration_s.
struct TransferRecord {
  double time_s = 0, bytes = 0, duration_s = 0;
};

// This rank's end of a channel, over a communicator of its own (cuda: an NCCL
// communicator of the two ranks; cpu: an MPI communicator of the two ranks), reused for
// every message. Messages on one channel are matched in order: the sender's n-th send
// with the receiver's n-th recv, of the same size.
class Channel {
 public:
  virtual ~Channel() = default;
  const ChannelSpec& spec() const { return spec_; }
  bool sender() const { return sender_; }
  int peer() const { return sender_ ? spec_.to : spec_.from; }
  std::size_t max_bytes() const { return max_bytes_; }

  // Enqueue a send (sender end) or a receive (receiver end) of `bytes` <= max_bytes()
  // from / into the channel's buffer on `stream`.
  virtual void send(Stream& stream, std::size_t bytes) = 0;
  virtual void recv(Stream& stream, std::size_t bytes) = 0;

  // Both ends call it, before record_transfers and with nothing in flight on the channel:
  // cpu measures the offset between the two ends' clocks (16 round trips; the shortest
  // one's midpoint), which the receiver's timing needs; cuda does nothing (the sender
  // times). Call it again before a later recording to follow clock drift.
  virtual void align_clocks() {}

  // Runs `plan` on this end (both ends call it with the same plan) and calls `sample`
  // on the end that measures, once per transfer in order, as each is measured (cuda:
  // the sender, from CUDA events around each ncclSend, with the receives posted ahead;
  // cpu: the receiver, from the sender's start time sent in the message and the offset
  // align_clocks() measured). Blocks until the plan is done. Messages are >= 16 bytes.
  virtual void record_transfers(const TransferPlan& plan, const std::function<void(const TransferRecord&)>& sample) = 0;

 protected:
  Channel(ChannelSpec spec, bool sender, std::size_t max_bytes) : spec_(spec), sender_(sender), max_bytes_(max_bytes) {}

 private:
  ChannelSpec spec_;
  bool sender_;
  std::size_t max_bytes_;
};

class Backend {
 public:
  virtual ~Backend() = default;
  virtual BackendKind kind() const = 0;
  // "NVIDIA Tesla V100-SXM2-32GB (GPU 3, sm_70)", "cpu (x86_64, 2 threads)".
  virtual std::string device() const = 0;
  // The device's memory, when it has its own.
  virtual std::optional<double> device_memory_bytes() const = 0;

  virtual std::unique_ptr<Stream> create_stream() = 0;
  virtual std::unique_ptr<Event> create_event() = 0;
  virtual std::unique_ptr<Buffer> allocate(std::size_t bytes) = 0;

  // Collective over every rank: all pass the same specs in the same order, and each gets
  // the channels it is an end of, in that order. Every spec gets its own communicator
  // (so a pair has one per direction, and a second spec for the same pair and direction
  // gets another). `max_bytes` sizes each channel's buffer.
  virtual std::vector<std::unique_ptr<Channel>> connect(const std::vector<ChannelSpec>& specs,
                                                        std::size_t max_bytes) = 0;
};

// The backend of this rank. cuda: picks GPU local_rank (one-line error when the host has
// fewer GPUs than ranks), registers ncclCommAbort of its communicators with the watchdog.
// Throws CalibError when the backend is not built or its device cannot be used.
std::unique_ptr<Backend> make_backend(BackendKind kind, const Mpi& mpi, Watchdog& watchdog);

std::unique_ptr<Backend> make_cpu_backend(const Mpi& mpi, Watchdog& watchdog);
#ifdef ADAGROUPER_HAVE_CUDA
std::unique_ptr<Backend> make_cuda_backend(const Mpi& mpi, Watchdog& watchdog);
// The CUDA backend's kernels (cuBLAS and ours) on `stream` (a cudaStream_t) of GPU
// `device`, without MPI or a backend: the CUDA test suite holds them against the CPU
// kernels. A failed call throws CalibError.
std::unique_ptr<Kernels> make_cuda_kernels(int device, void* stream);
#endif

}  // namespace adagrouper::calib
