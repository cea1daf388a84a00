// GoogleTest suite of the CUDA backend on one GPU: its kernels against the CPU kernels, its spin timer, NCCL.
//
// Every test skips where no CUDA device is visible. The kernels are called through their
// launchers on a stream of our own (no MPI, no Backend): inputs are generated on the host,
// copied to the device, the launcher runs, the stream is synchronized and the results
// copied back and compared with what the CPU kernels (make_cpu_kernels) compute from the
// same inputs. f16 data is copied as raw bytes: the CPU's _Float16 and the GPU's __half
// are both IEEE binary16.
#include <cuda_runtime.h>
#include <gtest/gtest.h>
#include <nccl.h>

#include <algorithm>
#include <array>
#include <chrono>
#include <cmath>
#include <cstddef>
#include <cstdint>
#include <cstdio>
#include <cstring>
#include <memory>
#include <optional>
#include <random>
#include <sstream>
#include <stdexcept>
#include <string>
#include <thread>
#include <utility>
#include <vector>

#include "backend.h"
#include "cpu_kernels.h"
#include "cuda_kernels.h"

namespace cal = adagrouper::calib;
namespace cu = adagrouper::calib::cuda;
using cal::Elem;

namespace {

static_assert(sizeof(_Float16) == 2, "binary16 is 2 bytes on both sides");

// ---------------------------------------------------------------------------------
// Errors: every CUDA and NCCL call is checked; a failure throws, and GoogleTest reports
// the exception's text as the test's failure.

void check(cudaError_t e, const std::string& what) {
  if (e != cudaSuccess)
    throw std::runtime_error(what + " failed: " + cudaGetErrorName(e) + " (" + cudaGetErrorString(e) + ")");
}

void check_nccl(ncclResult_t r, const std::string& what, ncclComm_t comm) {
  if (r == ncclSuccess) return;
  std::string text = what + " failed: " + ncclGetErrorString(r);
  const char* last = ncclGetLastError(comm);
  if (last != nullptr && *last != '\0') text += std::string(" (NCCL's last error: ") + last + ")";
  throw std::runtime_error(text);
}

// ---------------------------------------------------------------------------------
// Owners of CUDA and NCCL objects.

// Device memory, filled with 0xFF bytes (NaN in f32 and f16, -1 in i32) so that an
// element a kernel fails to write shows as a mismatch.
class DeviceBuffer {
 public:
  explicit DeviceBuffer(std::size_t bytes) : bytes_(bytes) {
    void* p = nullptr;
    check(cudaMalloc(&p, bytes == 0 ? 1 : bytes), "cudaMalloc of " + std::to_string(bytes) + " bytes");
    p_.reset(p);
    check(cudaMemset(p, 0xFF, bytes), "cudaMemset of " + std::to_string(bytes) + " bytes");
    check(cudaDeviceSynchronize(), "cudaDeviceSynchronize after cudaMemset");
  }
  void* get() const { return p_.get(); }
  template <class T>
  T* as() const {
    return static_cast<T*>(p_.get());
  }
  std::size_t bytes() const { return bytes_; }

 private:
  struct Free {
    void operator()(void* p) const { cudaFree(p); }
  };
  std::unique_ptr<void, Free> p_;
  std::size_t bytes_;
};

// A CUDA handle made by Create and released by Destroy.
template <class Handle, cudaError_t (*Create)(Handle*), cudaError_t (*Destroy)(Handle)>
class CudaHandle {
 public:
  explicit CudaHandle(const char* what) { check(Create(&h_), what); }
  ~CudaHandle() {
    if (h_ != nullptr) Destroy(h_);
  }
  CudaHandle(const CudaHandle&) = delete;
  CudaHandle& operator=(const CudaHandle&) = delete;
  Handle get() const { return h_; }

 private:
  Handle h_ = nullptr;
};

// A stream that synchronizes with the legacy default stream, which cudaMemcpy uses.
struct Stream : CudaHandle<cudaStream_t, cudaStreamCreate, cudaStreamDestroy> {
  Stream() : CudaHandle("cudaStreamCreate") {}
};
struct Event : CudaHandle<cudaEvent_t, cudaEventCreate, cudaEventDestroy> {
  Event() : CudaHandle("cudaEventCreate") {}
};

class NcclComm {
 public:
  NcclComm() = default;
  ~NcclComm() {
    if (c_ != nullptr) ncclCommDestroy(c_);
  }
  NcclComm(const NcclComm&) = delete;
  NcclComm& operator=(const NcclComm&) = delete;
  ncclComm_t* out() { return &c_; }
  ncclComm_t get() const { return c_; }
  ncclResult_t destroy() { return c_ != nullptr ? ncclCommDestroy(std::exchange(c_, nullptr)) : ncclSuccess; }
  ncclResult_t abort() { return c_ != nullptr ? ncclCommAbort(std::exchange(c_, nullptr)) : ncclSuccess; }

 private:
  ncclComm_t c_ = nullptr;
};

// Waits up to 60 s for the transfers enqueued on `stream`, then checks the communicator's
// asynchronous error; a transfer that never ends aborts the communicator (destroying it
// would wait for the transfer) and throws.
void finish_transfers(cudaStream_t stream, NcclComm& comm, const std::string& what) {
  const auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(60);
  cudaError_t state = cudaStreamQuery(stream);
  while (state == cudaErrorNotReady && std::chrono::steady_clock::now() < deadline) {
    std::this_thread::sleep_for(std::chrono::milliseconds(1));
    state = cudaStreamQuery(stream);
  }
  if (state == cudaErrorNotReady) {
    ncclResult_t async = ncclSuccess;
    ncclCommGetAsyncError(comm.get(), &async);
    const char* last_error = ncclGetLastError(comm.get());
    const std::string last = last_error != nullptr ? last_error : "";
    comm.abort();
    throw std::runtime_error(what + " did not end within 60 s (async error: " + ncclGetErrorString(async) +
                             "; NCCL's last error: " + last + "); the communicator was aborted");
  }
  check(state, what + " (cudaStreamQuery)");
  ncclResult_t async = ncclSuccess;
  check_nccl(ncclCommGetAsyncError(comm.get(), &async), "ncclCommGetAsyncError", comm.get());
  check_nccl(async, what + " (ncclCommGetAsyncError)", comm.get());
}

// ---------------------------------------------------------------------------------
// Host data.

// Deterministic inputs: std::mt19937_64's output mapped to [lo, hi) here (the standard
// distributions differ between library implementations).
class Gen {
 public:
  explicit Gen(std::uint64_t seed) : g_(seed) {}
  double uniform(double lo, double hi) { return lo + (hi - lo) * (static_cast<double>(g_() >> 11) * 0x1.0p-53); }
  int below(int n) { return static_cast<int>(g_() % static_cast<std::uint64_t>(n)); }
  std::uint64_t bits() { return g_(); }

 private:
  std::mt19937_64 g_;
};

// n elements of type e (f16 or f32) as raw bytes.
class HostArray {
 public:
  HostArray(Elem e, std::size_t n) : e_(e), n_(n), bytes_(n * width(e)) {}
  Elem elem() const { return e_; }
  std::size_t size() const { return n_; }
  std::size_t bytes() const { return bytes_.size(); }
  void* data() { return bytes_.data(); }
  const void* data() const { return bytes_.data(); }
  float get(std::size_t i) const {
    if (e_ == Elem::f16) {
      _Float16 h;
      std::memcpy(&h, bytes_.data() + 2 * i, 2);
      return static_cast<float>(h);
    }
    float f;
    std::memcpy(&f, bytes_.data() + 4 * i, 4);
    return f;
  }
  void set(std::size_t i, float v) {
    if (e_ == Elem::f16) {
      const auto h = static_cast<_Float16>(v);
      std::memcpy(bytes_.data() + 2 * i, &h, 2);
    } else {
      std::memcpy(bytes_.data() + 4 * i, &v, 4);
    }
  }
  std::vector<float> floats() const {
    std::vector<float> f(n_);
    for (std::size_t i = 0; i < n_; ++i) f[i] = get(i);
    return f;
  }

 private:
  static std::size_t width(Elem e) { return e == Elem::f16 ? 2 : 4; }
  Elem e_;
  std::size_t n_;
  std::vector<unsigned char> bytes_;
};

HostArray random_array(Gen& gen, Elem e, std::size_t n, double lo, double hi) {
  HostArray a(e, n);
  for (std::size_t i = 0; i < n; ++i) a.set(i, static_cast<float>(gen.uniform(lo, hi)));
  return a;
}

std::vector<float> random_floats(Gen& gen, std::size_t n, double lo, double hi) {
  std::vector<float> v(n);
  for (auto& x : v) x = static_cast<float>(gen.uniform(lo, hi));
  return v;
}

// Copies to the device; cudaDeviceSynchronize makes sure the copy has landed before any
// stream uses it (cudaMemcpy from pageable memory may return before the DMA ends).
DeviceBuffer upload(const void* data, std::size_t bytes) {
  DeviceBuffer d(bytes);
  check(cudaMemcpy(d.get(), data, bytes, cudaMemcpyHostToDevice), "cudaMemcpy to the device");
  check(cudaDeviceSynchronize(), "cudaDeviceSynchronize after cudaMemcpy to the device");
  return d;
}
DeviceBuffer upload(const HostArray& a) { return upload(a.data(), a.bytes()); }
template <class T>
DeviceBuffer upload(const std::vector<T>& v) {
  return upload(v.data(), v.size() * sizeof(T));
}

void download(const DeviceBuffer& d, void* out, std::size_t bytes) {
  if (bytes > d.bytes()) throw std::logic_error("download of more bytes than the buffer holds");
  check(cudaMemcpy(out, d.get(), bytes, cudaMemcpyDeviceToHost), "cudaMemcpy from the device");
}
HostArray download(const DeviceBuffer& d, Elem e, std::size_t n) {
  HostArray a(e, n);
  download(d, a.data(), a.bytes());
  return a;
}
template <class T>
std::vector<T> download_vector(const DeviceBuffer& d, std::size_t n) {
  std::vector<T> v(n);
  download(d, v.data(), n * sizeof(T));
  return v;
}

// ---------------------------------------------------------------------------------
// Comparison.

// |gpu - cpu| <= rel |cpu| + abs max_j |cpu_j|: abs is relative to the array's largest
// magnitude, so that elements near zero (where a relative bound means nothing) are held
// to the precision of the array's scale.
struct Tol {
  double rel, abs;
};
// f32 results: both sides compute in f32 from identical inputs. They differ by the order
// of summation in reductions (the GPU's block trees and atomics vs. the CPU's loops),
// nvcc's contraction of a*b+c into FMAs, and the GPU's __expf / __logf / tanhf, all at
// the level of a few ulps (~1e-6 relative); 1e-4 leaves two orders of magnitude for that
// and still catches a wrong formula, index or row.
constexpr Tol kF32{1e-4, 1e-5};
// f16 results: the f32 values are rounded to binary16 (half an ulp is 2^-11 relative), so
// two f32 results a few f32-ulps apart can round to neighbouring f16 values, 2^-10 ~ 1e-3
// apart; the CPU's softmax also rounds its exponentials to f16 before normalizing them.
// 1e-2 allows about ten f16 ulps; abs 1e-3 of the scale covers values near zero and in the
// f16 subnormal range.
constexpr Tol kF16{1e-2, 1e-3};
// f32 sums (column sums, LayerNorm's dgamma and dbeta, embedding gradients): up to a few
// hundred terms of magnitude ~1 summed in different orders; the typical difference is
// ~sqrt(n) ulps of the result's scale, well within 1e-5 of the scale.
constexpr Tol kSum{1e-4, 1e-5};

Tol tol_of(Elem e) { return e == Elem::f16 ? kF16 : kF32; }

::testing::AssertionResult near(const std::string& what, const std::vector<float>& gpu, const std::vector<float>& cpu,
                                Tol tol) {
  if (gpu.size() != cpu.size())
    return ::testing::AssertionFailure() << what << ": " << gpu.size() << " GPU elements vs " << cpu.size() << " CPU";
  double scale = 0;
  for (const float c : cpu) scale = std::max(scale, std::fabs(static_cast<double>(c)));
  std::size_t bad = 0, first = 0, worst_at = 0;
  double worst = -1;
  for (std::size_t i = 0; i < gpu.size(); ++i) {
    const double g = gpu[i], c = cpu[i], d = std::fabs(g - c);
    const bool ok = std::isfinite(g) && std::isfinite(c) && d <= tol.rel * std::fabs(c) + tol.abs * scale;
    if (!ok) {
      if (bad == 0) first = i;
      ++bad;
    }
    if (!(d <= worst)) {  // NaN counts as the worst
      worst = d;
      worst_at = i;
    }
  }
  if (bad == 0) return ::testing::AssertionSuccess();
  std::ostringstream out;
  out.precision(9);
  out << what << ": " << bad << " of " << gpu.size() << " elements differ beyond |gpu - cpu| <= " << tol.rel
      << " |cpu| + " << tol.abs << " * " << scale << "; first at [" << first << "]: gpu " << gpu[first] << ", cpu "
      << cpu[first] << "; largest difference " << worst << " at [" << worst_at << "]: gpu " << gpu[worst_at]
      << ", cpu " << cpu[worst_at];
  return ::testing::AssertionFailure() << out.str();
}

::testing::AssertionResult near(const std::string& what, const HostArray& gpu, const HostArray& cpu, Tol tol) {
  return near(what, gpu.floats(), cpu.floats(), tol);
}

// Byte-for-byte equality, for results that involve no rounding difference.
::testing::AssertionResult same_bytes(const std::string& what, const void* gpu, const void* cpu, std::size_t bytes,
                                      std::size_t elem_bytes) {
  const auto* g = static_cast<const unsigned char*>(gpu);
  const auto* c = static_cast<const unsigned char*>(cpu);
  std::size_t bad = 0, first = 0;
  for (std::size_t i = 0; i < bytes / elem_bytes; ++i)
    if (std::memcmp(g + i * elem_bytes, c + i * elem_bytes, elem_bytes) != 0) {
      if (bad == 0) first = i;
      ++bad;
    }
  if (bad == 0) return ::testing::AssertionSuccess();
  std::ostringstream out;
  out << what << ": " << bad << " of " << bytes / elem_bytes << " elements differ in their bytes; the first at ["
      << first << "]: gpu 0x";
  const auto hex = [&](const unsigned char* p) {
    for (std::size_t b = elem_bytes; b-- > 0;) {  // most significant byte first (little-endian)
      const char digits[] = "0123456789abcdef";
      out << digits[p[first * elem_bytes + b] >> 4] << digits[p[first * elem_bytes + b] & 15];
    }
  };
  hex(g);
  out << ", cpu 0x";
  hex(c);
  return ::testing::AssertionFailure() << out.str();
}

// ---------------------------------------------------------------------------------
// Statistics of fill_uniform and fill_tokens (the CPU and CUDA kernels derive their hash
// keys from the seed differently, so the same seed gives different values: we compare
// distributions, not elements).

struct UniformStats {
  double mean = 0, var = 0;
  float min = 0, max = 0;
  std::vector<std::size_t> buckets;  // 10 equal buckets of [lo, hi]
};

UniformStats uniform_stats(const std::vector<float>& x, float lo, float hi) {
  UniformStats s;
  s.buckets.assign(10, 0);
  s.min = s.max = x.empty() ? 0.0f : x[0];
  double sum = 0;
  for (const float v : x) {
    sum += v;
    s.min = std::min(s.min, v);
    s.max = std::max(s.max, v);
    const int b = static_cast<int>((static_cast<double>(v) - lo) / (static_cast<double>(hi) - lo) * 10);
    ++s.buckets[static_cast<std::size_t>(std::clamp(b, 0, 9))];
  }
  s.mean = sum / static_cast<double>(x.size());
  double ss = 0;
  for (const float v : x) ss += (v - s.mean) * (v - s.mean);
  s.var = ss / static_cast<double>(x.size());
  return s;
}

// For n = 65573 uniform values: the mean's standard error is 0.0011 of the range, the
// variance's 0.35%, a bucket's 1.2%; the bounds are 4.5 to 6 of those (checked against
// both hash definitions on the host for the seeds used here).
::testing::AssertionResult looks_uniform(const std::string& who, const std::vector<float>& x, float lo, float hi) {
  const UniformStats s = uniform_stats(x, lo, hi);
  const double range = static_cast<double>(hi) - lo, expected_var = range * range / 12;
  const double per_bucket = static_cast<double>(x.size()) / 10;
  std::ostringstream why;
  // lo + (hi - lo) u with u < 1 can round to hi itself, in f32 and more so in f16.
  if (s.min < lo || s.max > hi) why << " values outside [" << lo << ", " << hi << "]: " << s.min << " .. " << s.max << ";";
  if (std::fabs(s.mean - (lo + hi) / 2.0) > 0.005 * range) why << " mean " << s.mean << ";";
  if (std::fabs(s.var / expected_var - 1) > 0.02) why << " variance " << s.var << " (expected " << expected_var << ");";
  for (std::size_t b = 0; b < s.buckets.size(); ++b)
    if (std::fabs(static_cast<double>(s.buckets[b]) / per_bucket - 1) > 0.06)
      why << " bucket " << b << " holds " << s.buckets[b] << " (expected " << per_bucket << ");";
  if (why.str().empty()) return ::testing::AssertionSuccess();
  return ::testing::AssertionFailure() << who << " does not look uniform on [" << lo << ", " << hi << "):" << why.str();
}

// ---------------------------------------------------------------------------------
// Fixtures.

class CalibCuda : public ::testing::Test {
 protected:
  void SetUp() override {
    int count = 0;
    const cudaError_t e = cudaGetDeviceCount(&count);
    if (e != cudaSuccess) GTEST_SKIP() << "no CUDA device: " << cudaGetErrorString(e);
    if (count == 0) GTEST_SKIP() << "no CUDA device: cudaGetDeviceCount found none";
    check(cudaSetDevice(0), "cudaSetDevice(0)");
    const cudaError_t image = cu::check_image();
    if (image != cudaSuccess) {
      int major = 0, minor = 0;
      cudaDeviceGetAttribute(&major, cudaDevAttrComputeCapabilityMajor, 0);
      cudaDeviceGetAttribute(&minor, cudaDevAttrComputeCapabilityMinor, 0);
      FAIL() << "the build has no code for this GPU (sm_" << major << minor << "): cuda::check_image() returned "
             << cudaGetErrorName(image) << " (" << cudaGetErrorString(image)
             << "); reconfigure with -Dcuda-arch including " << major << minor;
    }
    stream_.emplace();
  }

  cudaStream_t s() const { return stream_->get(); }

  // Checks a launcher's result, then waits for the stream: an error in the kernel's
  // execution shows at the synchronization.
  void run(const std::string& kernel, cudaError_t launched) {
    check(launched, "launching cuda::" + kernel);
    check(cudaStreamSynchronize(s()), "cudaStreamSynchronize after cuda::" + kernel);
  }

  std::unique_ptr<cal::Kernels> cpu_ = cal::make_cpu_kernels();
  std::optional<Stream> stream_;
};

// The kernel tests, once in f32 and once in f16.
class CalibCudaKernels : public CalibCuda, public ::testing::WithParamInterface<Elem> {
 protected:
  Elem e() const { return GetParam(); }
  bool half() const { return GetParam() == Elem::f16; }
  Tol tol() const { return tol_of(GetParam()); }
};

struct Shape {
  int rows, cols;
};

std::string text(const Shape& s) { return std::to_string(s.rows) + " x " + std::to_string(s.cols); }

std::size_t count(int rows, int cols) { return static_cast<std::size_t>(rows) * static_cast<std::size_t>(cols); }

}  // namespace

// ---------------------------------------------------------------------------------
// The device, for the run's log.

TEST_F(CalibCuda, ReportsTheDeviceAndVersions) {
  int device = 0, devices = 0, driver = 0, runtime = 0;
  check(cudaGetDevice(&device), "cudaGetDevice");
  check(cudaGetDeviceCount(&devices), "cudaGetDeviceCount");
  cudaDeviceProp prop{};
  check(cudaGetDeviceProperties(&prop, device), "cudaGetDeviceProperties");
  check(cudaDriverGetVersion(&driver), "cudaDriverGetVersion");
  check(cudaRuntimeGetVersion(&runtime), "cudaRuntimeGetVersion");
  std::printf("calib-cuda: device %d of %d: %s, compute capability %d.%d, %.1f GiB, %d SMs; CUDA driver %d.%d, "
              "runtime %d.%d\n",
              device, devices, prop.name, prop.major, prop.minor,
              static_cast<double>(prop.totalGlobalMem) / (1024.0 * 1024.0 * 1024.0), prop.multiProcessorCount,
              driver / 1000, driver % 1000 / 10, runtime / 1000, runtime % 1000 / 10);
  std::fflush(stdout);
  RecordProperty("device", prop.name);
  RecordProperty("compute_capability", std::to_string(prop.major) + "." + std::to_string(prop.minor));
  RecordProperty("cuda_driver", driver);
  RecordProperty("cuda_runtime", runtime);
  EXPECT_GT(prop.major, 0);
  EXPECT_GT(prop.totalGlobalMem, 0u);
}

// ---------------------------------------------------------------------------------
// Fills.

TEST_P(CalibCudaKernels, FillUniformIsUniformLikeTheCpuKernels) {
  // Not element by element: the CPU kernel's key is splitmix(seed), the CUDA kernel's
  // ((seed + 0x9e37...) ^ (seed >> 7)) * 0xbf58..., so the two sequences differ.
  const std::size_t n = 65536 + 37;
  const float lo = -2.0f, hi = 3.0f;
  HostArray cpu(e(), n);
  cpu_->fill_uniform(cpu.data(), n, e(), 12345, lo, hi);
  DeviceBuffer d(cpu.bytes()), again(cpu.bytes()), other(cpu.bytes());
  run("fill_uniform", cu::fill_uniform(s(), d.get(), n, half(), 12345, lo, hi));
  run("fill_uniform (same seed)", cu::fill_uniform(s(), again.get(), n, half(), 12345, lo, hi));
  run("fill_uniform (another seed)", cu::fill_uniform(s(), other.get(), n, half(), 12346, lo, hi));
  const HostArray gpu = download(d, e(), n), gpu_again = download(again, e(), n), gpu_other = download(other, e(), n);

  EXPECT_TRUE(looks_uniform("the CPU's fill_uniform", cpu.floats(), lo, hi));
  EXPECT_TRUE(looks_uniform("the GPU's fill_uniform", gpu.floats(), lo, hi));
  EXPECT_TRUE(looks_uniform("the GPU's fill_uniform, another seed", gpu_other.floats(), lo, hi));
  const UniformStats sc = uniform_stats(cpu.floats(), lo, hi), sg = uniform_stats(gpu.floats(), lo, hi);
  EXPECT_NEAR(sg.mean, sc.mean, 0.005 * (hi - lo)) << "means of the GPU's and the CPU's fill";
  EXPECT_TRUE(same_bytes("the same seed twice", gpu_again.data(), gpu.data(), gpu.bytes(), gpu.bytes() / n));
  std::size_t equal = 0;
  for (std::size_t i = 0; i < n; ++i) equal += gpu.get(i) == gpu_other.get(i) ? 1 : 0;
  EXPECT_LT(equal, n / 100) << "seeds 12345 and 12346 give the same values at " << equal << " of " << n << " elements";

  if (half()) {
    // The same hash in f32, rounded to f16, is the f16 fill.
    DeviceBuffer d32(n * sizeof(float));
    run("fill_uniform (f32)", cu::fill_uniform(s(), d32.get(), n, false, 12345, lo, hi));
    EXPECT_TRUE(near("f16 fill vs the f32 fill", gpu.floats(), download_vector<float>(d32, n), kF16));
  }
}

TEST_P(CalibCudaKernels, FillValueMatchesTheCpuKernels) {
  const std::size_t n = 1000 + 37;
  for (const float value : {0.3f, -1.75f, 0.0f}) {
    SCOPED_TRACE("value " + std::to_string(value));
    HostArray cpu(e(), n);
    cpu_->fill_value(cpu.data(), n, e(), value);
    DeviceBuffer d(cpu.bytes());
    run("fill_value", cu::fill_value(s(), d.get(), n, half(), value));
    const HostArray gpu = download(d, e(), n);
    // One conversion of the same float, round-to-nearest-even on both sides: same bits.
    EXPECT_TRUE(same_bytes("fill_value", gpu.data(), cpu.data(), cpu.bytes(), cpu.bytes() / n));
    if (!half()) {
      DeviceBuffer f(n * sizeof(float));
      run("fill_float", cu::fill_float(s(), f.as<float>(), n, value));
      const auto gf = download_vector<float>(f, n);
      EXPECT_TRUE(same_bytes("fill_float", gf.data(), cpu.data(), cpu.bytes(), sizeof(float)));
    }
  }
}

TEST_F(CalibCuda, FillTokensIsUniformLikeTheCpuKernels) {
  // Different hash keys (see FillUniform...), so distributions rather than ids.
  const std::size_t n = 65536 + 37;
  const int vocabulary = 1000;
  std::vector<std::int32_t> cpu(n);
  cpu_->fill_tokens(cpu.data(), n, vocabulary, 7);
  DeviceBuffer d(n * sizeof(std::int32_t)), again(n * sizeof(std::int32_t));
  run("fill_tokens", cu::fill_tokens(s(), d.as<std::int32_t>(), n, vocabulary, 7));
  run("fill_tokens (same seed)", cu::fill_tokens(s(), again.as<std::int32_t>(), n, vocabulary, 7));
  const auto gpu = download_vector<std::int32_t>(d, n), gpu_again = download_vector<std::int32_t>(again, n);
  EXPECT_TRUE(gpu == gpu_again) << "the same seed twice gave different ids";

  // 65.6 draws per id: every id appears (P(an id is missing) ~ 1e-28 for a uniform hash),
  // none more than twice as often as expected, and the mean is within 1% of the middle
  // (its standard error is 0.11%).
  const std::array<const std::vector<std::int32_t>*, 2> both{&cpu, &gpu};
  for (const auto* ids : both) {
    const std::string who = ids == &cpu ? "the CPU's fill_tokens" : "the GPU's fill_tokens";
    std::vector<std::size_t> hist(vocabulary, 0);
    std::size_t outside = 0;
    double sum = 0;
    for (const std::int32_t id : *ids) {
      if (id < 0 || id >= vocabulary) {
        ++outside;
        continue;
      }
      ++hist[static_cast<std::size_t>(id)];
      sum += id;
    }
    EXPECT_EQ(outside, 0u) << who << ": ids outside [0, " << vocabulary << ")";
    const auto [least, most] = std::minmax_element(hist.begin(), hist.end());
    EXPECT_GT(*least, 0u) << who << ": id " << (least - hist.begin()) << " never drawn";
    EXPECT_LT(static_cast<double>(*most), 2.0 * static_cast<double>(n) / vocabulary)
        << who << ": id " << (most - hist.begin()) << " drawn " << *most << " times";
    EXPECT_NEAR(sum / static_cast<double>(n), (vocabulary - 1) / 2.0, 0.01 * vocabulary) << who;
  }

  // A vocabulary of one: all zeros on both sides.
  std::vector<std::int32_t> cpu1(1037);
  cpu_->fill_tokens(cpu1.data(), cpu1.size(), 1, 3);
  DeviceBuffer d1(cpu1.size() * sizeof(std::int32_t));
  run("fill_tokens (vocabulary 1)", cu::fill_tokens(s(), d1.as<std::int32_t>(), cpu1.size(), 1, 3));
  EXPECT_TRUE(download_vector<std::int32_t>(d1, cpu1.size()) == cpu1);
}

// ---------------------------------------------------------------------------------
// LayerNorm.

TEST_P(CalibCudaKernels, LayerNormForwardMatchesTheCpuKernels) {
  // 96 columns: fewer than the 256 threads of a row's block; 600: more, with a tail.
  for (const Shape& sh : {Shape{37, 96}, Shape{37, 600}}) {
    SCOPED_TRACE(text(sh));
    const auto [rows, cols] = sh;
    const std::size_t n = count(rows, cols);
    Gen gen(11);
    const HostArray x = random_array(gen, e(), n, -3, 5), gamma = random_array(gen, e(), cols, 0.5, 1.5),
                    beta = random_array(gen, e(), cols, -0.5, 0.5);
    HostArray y(e(), n);
    std::vector<float> mean(rows), rstd(rows);
    cpu_->layernorm_forward(x.data(), gamma.data(), beta.data(), y.data(), mean.data(), rstd.data(), rows, cols, e());

    const DeviceBuffer dx = upload(x), dgamma = upload(gamma), dbeta = upload(beta), dy(y.bytes()),
                       dmean(rows * sizeof(float)), drstd(rows * sizeof(float));
    run("layernorm_forward", cu::layernorm_forward(s(), dx.get(), dgamma.get(), dbeta.get(), dy.get(),
                                                   dmean.as<float>(), drstd.as<float>(), rows, cols, half()));
    EXPECT_TRUE(near("y", download(dy, e(), n), y, tol()));
    // mean and rstd are f32, from the same inputs.
    EXPECT_TRUE(near("mean", download_vector<float>(dmean, rows), mean, kF32));
    EXPECT_TRUE(near("rstd", download_vector<float>(drstd, rows), rstd, kF32));
  }
}

TEST_P(CalibCudaKernels, LayerNormBackwardMatchesTheCpuKernels) {
  for (const Shape& sh : {Shape{37, 96}, Shape{37, 600}}) {
    SCOPED_TRACE(text(sh));
    const auto [rows, cols] = sh;
    const std::size_t n = count(rows, cols);
    Gen gen(12);
    const HostArray x = random_array(gen, e(), n, -3, 5), gamma = random_array(gen, e(), cols, 0.5, 1.5),
                    beta = random_array(gen, e(), cols, -0.5, 0.5), dy = random_array(gen, e(), n, -1, 1),
                    residual = random_array(gen, e(), n, -1, 1);
    // The CPU's statistics are the input of both sides.
    HostArray y(e(), n);
    std::vector<float> mean(rows), rstd(rows);
    cpu_->layernorm_forward(x.data(), gamma.data(), beta.data(), y.data(), mean.data(), rstd.data(), rows, cols, e());
    // dgamma and dbeta accumulate: start from values, not zeros.
    std::vector<float> dgamma = random_floats(gen, cols, -1, 1), dbeta = random_floats(gen, cols, -1, 1);

    const DeviceBuffer d_dy = upload(dy), d_x = upload(x), d_mean = upload(mean), d_rstd = upload(rstd),
                       d_gamma = upload(gamma), d_residual = upload(residual), d_dgamma = upload(dgamma),
                       d_dbeta = upload(dbeta), d_dx(dy.bytes()), d_dx_res(dy.bytes());

    HostArray dx(e(), n), dx_res(e(), n);
    cpu_->layernorm_backward(dy.data(), x.data(), mean.data(), rstd.data(), gamma.data(), nullptr, dx.data(),
                             dgamma.data(), dbeta.data(), rows, cols, e());
    cpu_->layernorm_backward(dy.data(), x.data(), mean.data(), rstd.data(), gamma.data(), residual.data(),
                             dx_res.data(), dgamma.data(), dbeta.data(), rows, cols, e());
    run("layernorm_backward (no residual)",
        cu::layernorm_backward(s(), d_dy.get(), d_x.get(), d_mean.as<float>(), d_rstd.as<float>(), d_gamma.get(),
                               nullptr, d_dx.get(), d_dgamma.as<float>(), d_dbeta.as<float>(), rows, cols, half()));
    run("layernorm_backward (residual)",
        cu::layernorm_backward(s(), d_dy.get(), d_x.get(), d_mean.as<float>(), d_rstd.as<float>(), d_gamma.get(),
                               d_residual.get(), d_dx_res.get(), d_dgamma.as<float>(), d_dbeta.as<float>(), rows, cols,
                               half()));
    EXPECT_TRUE(near("dx", download(d_dx, e(), n), dx, tol()));
    EXPECT_TRUE(near("dx with the residual", download(d_dx_res, e(), n), dx_res, tol()));
    EXPECT_TRUE(near("dgamma (initial + two calls)", download_vector<float>(d_dgamma, cols), dgamma, kSum));
    EXPECT_TRUE(near("dbeta (initial + two calls)", download_vector<float>(d_dbeta, cols), dbeta, kSum));
  }
}

// ---------------------------------------------------------------------------------
// Softmax.

namespace {

struct SoftmaxCase {
  int rows, cols;
  bool causal;
};

std::string text(const SoftmaxCase& c) {
  return std::to_string(c.rows) + " x " + std::to_string(c.cols) + (c.causal ? ", causal" : "");
}

// 3 x 64 rows of 64 columns: row r sees columns <= r mod 64, three times over; 37 rows of
// 200: rows shorter than the block, causal with fewer rows than columns; 600: longer.
const SoftmaxCase kSoftmaxCases[] = {{37, 200, false}, {37, 600, false}, {3 * 64, 64, true}, {37, 200, true}};

}  // namespace

TEST_P(CalibCudaKernels, SoftmaxForwardMatchesTheCpuKernels) {
  const float scale = 0.35f;
  for (const SoftmaxCase& c : kSoftmaxCases) {
    SCOPED_TRACE(text(c));
    const std::size_t n = count(c.rows, c.cols);
    Gen gen(13);
    const HostArray in = random_array(gen, e(), n, -8, 8);
    HostArray cpu = in;
    cpu_->softmax_forward(cpu.data(), c.rows, c.cols, scale, c.causal, e());
    const DeviceBuffer d = upload(in);
    run("softmax_forward", cu::softmax_forward(s(), d.get(), c.rows, c.cols, scale, c.causal, half()));
    const HostArray gpu = download(d, e(), n);
    EXPECT_TRUE(near("p", gpu, cpu, tol()));
    // The GPU's rows on their own: exact zeros beyond the visible columns, sums of 1.
    std::size_t nonzero_masked = 0, bad_sums = 0;
    for (int r = 0; r < c.rows; ++r) {
      const int visible = c.causal ? r % c.cols + 1 : c.cols;
      double sum = 0;
      for (int j = 0; j < c.cols; ++j) {
        const float v = gpu.get(count(r, c.cols) + static_cast<std::size_t>(j));
        if (j < visible) {
          sum += v;
        } else if (v != 0.0f) {
          ++nonzero_masked;
        }
      }
      // f16: up to 600 values each rounded by 2^-11 relative.
      if (!(std::fabs(sum - 1) <= (half() ? 2e-3 : 1e-5))) ++bad_sums;
    }
    EXPECT_EQ(nonzero_masked, 0u) << "masked (causal) elements that are not 0";
    EXPECT_EQ(bad_sums, 0u) << "rows whose visible probabilities do not sum to 1";
  }
}

TEST_P(CalibCudaKernels, SoftmaxBackwardMatchesTheCpuKernels) {
  const float scale = 0.35f;
  for (const SoftmaxCase& c : kSoftmaxCases) {
    SCOPED_TRACE(text(c));
    const std::size_t n = count(c.rows, c.cols);
    Gen gen(14);
    // p: probabilities (the CPU's forward), the input of both sides.
    HostArray p = random_array(gen, e(), n, -8, 8);
    cpu_->softmax_forward(p.data(), c.rows, c.cols, scale, c.causal, e());
    const HostArray dp = random_array(gen, e(), n, -1, 1);
    HostArray cpu = dp;
    cpu_->softmax_backward(cpu.data(), p.data(), c.rows, c.cols, scale, e());
    const DeviceBuffer d_dp = upload(dp), d_p = upload(p);
    run("softmax_backward", cu::softmax_backward(s(), d_dp.get(), d_p.get(), c.rows, c.cols, scale, half()));
    EXPECT_TRUE(near("dp", download(d_dp, e(), n), cpu, tol()));
  }
}

// ---------------------------------------------------------------------------------
// GELU and biases.

TEST_P(CalibCudaKernels, BiasGeluForwardMatchesTheCpuKernels) {
  const int rows = 37, cols = 200;
  const std::size_t n = count(rows, cols);
  Gen gen(15);
  const HostArray u = random_array(gen, e(), n, -4, 4), bias = random_array(gen, e(), cols, -1, 1);
  HostArray cpu_u = u, cpu_g(e(), n);
  cpu_->bias_gelu_forward(cpu_u.data(), bias.data(), cpu_g.data(), rows, cols, e());
  const DeviceBuffer d_u = upload(u), d_bias = upload(bias), d_g(cpu_g.bytes());
  run("bias_gelu_forward", cu::bias_gelu_forward(s(), d_u.get(), d_bias.get(), d_g.get(), rows, cols, half()));
  EXPECT_TRUE(near("u + bias", download(d_u, e(), n), cpu_u, tol()));
  EXPECT_TRUE(near("gelu(u + bias)", download(d_g, e(), n), cpu_g, tol()));
}

TEST_P(CalibCudaKernels, GeluBackwardMatchesTheCpuKernels) {
  const int rows = 37, cols = 200;
  const std::size_t n = count(rows, cols);
  Gen gen(16);
  const HostArray dg = random_array(gen, e(), n, -1, 1), u = random_array(gen, e(), n, -5, 5);
  HostArray cpu = dg;
  cpu_->gelu_backward(cpu.data(), u.data(), rows, cols, e());
  const DeviceBuffer d_dg = upload(dg), d_u = upload(u);
  // The launcher takes the element count (CudaKernels passes rows * cols).
  run("gelu_backward", cu::gelu_backward(s(), d_dg.get(), d_u.get(), n, half()));
  // f32: where tanh is within 1e-7 of +-1 (|u| near 5), an ulp or two of difference in t
  // between the GPU's tanhf and the CPU's becomes ~2e-6 in 0.5 u (1 - t^2) c (1 + 3a u^2),
  // a fifth of the default floor (1e-5 of the largest |result|, ~1.1): the floor is 3e-5.
  EXPECT_TRUE(near("dg * gelu'(u)", download(d_dg, e(), n), cpu, half() ? kF16 : Tol{1e-4, 3e-5}));
}

TEST_P(CalibCudaKernels, CopyAddBiasMatchesTheCpuKernels) {
  const int rows = 37, cols = 200;
  const std::size_t n = count(rows, cols);
  Gen gen(17);
  const HostArray x = random_array(gen, e(), n, -2, 2), bias = random_array(gen, e(), cols, -1, 1);
  HostArray cpu(e(), n);
  cpu_->copy_add_bias(cpu.data(), x.data(), bias.data(), rows, cols, e());
  const DeviceBuffer d_x = upload(x), d_bias = upload(bias), d_y(cpu.bytes());
  run("copy_add_bias", cu::copy_add_bias(s(), d_y.get(), d_x.get(), d_bias.get(), rows, cols, half()));
  EXPECT_TRUE(near("y = x + bias", download(d_y, e(), n), cpu, tol()));
  EXPECT_TRUE(near("x, untouched", download(d_x, e(), n), x, Tol{0, 0}));
}

TEST_P(CalibCudaKernels, AddBiasInPlaceMatchesTheCpuKernels) {
  // There is no add_bias launcher: CudaKernels::add_bias is copy_add_bias with x == y.
  const int rows = 37, cols = 200;
  const std::size_t n = count(rows, cols);
  Gen gen(18);
  const HostArray y = random_array(gen, e(), n, -2, 2), bias = random_array(gen, e(), cols, -1, 1);
  HostArray cpu = y;
  cpu_->add_bias(cpu.data(), bias.data(), rows, cols, e());
  const DeviceBuffer d_y = upload(y), d_bias = upload(bias);
  run("copy_add_bias (in place)", cu::copy_add_bias(s(), d_y.get(), d_y.get(), d_bias.get(), rows, cols, half()));
  EXPECT_TRUE(near("y += bias", download(d_y, e(), n), cpu, tol()));
}

TEST_P(CalibCudaKernels, ColumnSumMatchesTheCpuKernels) {
  // 300 rows: several row slices whose partial sums meet in atomics; 600 columns: several
  // column blocks, the last one partial.
  for (const Shape& sh : {Shape{37, 200}, Shape{300, 600}}) {
    SCOPED_TRACE(text(sh));
    const auto [rows, cols] = sh;
    const std::size_t n = count(rows, cols);
    Gen gen(19);
    const HostArray x = random_array(gen, e(), n, -1, 1);
    std::vector<float> out = random_floats(gen, cols, -1, 1);  // column_sum accumulates
    const DeviceBuffer d_x = upload(x), d_out = upload(out);
    cpu_->column_sum(x.data(), out.data(), rows, cols, e());
    run("column_sum", cu::column_sum(s(), d_x.get(), d_out.as<float>(), rows, cols, half()));
    EXPECT_TRUE(near("out + column sums", download_vector<float>(d_out, cols), out, kSum));
  }
}

// ---------------------------------------------------------------------------------
// Embeddings.

namespace {

// 3 sequences of 64 and 5 more tokens (t mod seq wraps), ids drawn from a vocabulary of
// 1000 with every fourth token id 7, so that embedding_backward sums duplicates.
constexpr int kSeq = 64, kTokens = 3 * kSeq + 5, kHidden = 200, kVocabulary = 1000;

std::vector<std::int32_t> embedding_ids(Gen& gen) {
  std::vector<std::int32_t> ids(kTokens);
  for (int t = 0; t < kTokens; ++t) ids[static_cast<std::size_t>(t)] = t % 4 == 0 ? 7 : gen.below(kVocabulary);
  return ids;
}

}  // namespace

TEST_P(CalibCudaKernels, EmbeddingForwardMatchesTheCpuKernels) {
  Gen gen(20);
  const auto ids = embedding_ids(gen);
  const HostArray wte = random_array(gen, e(), count(kVocabulary, kHidden), -1, 1),
                  wpe = random_array(gen, e(), count(kSeq, kHidden), -1, 1);
  HostArray cpu(e(), count(kTokens, kHidden));
  cpu_->embedding_forward(ids.data(), wte.data(), wpe.data(), cpu.data(), kTokens, kSeq, kHidden, e());
  const DeviceBuffer d_ids = upload(ids), d_wte = upload(wte), d_wpe = upload(wpe), d_out(cpu.bytes());
  run("embedding_forward", cu::embedding_forward(s(), d_ids.as<std::int32_t>(), d_wte.get(), d_wpe.get(), d_out.get(),
                                                 kTokens, kSeq, kHidden, half()));
  EXPECT_TRUE(near("wte[id] + wpe[t mod seq]", download(d_out, e(), cpu.size()), cpu, tol()));
}

TEST_P(CalibCudaKernels, EmbeddingBackwardMatchesTheCpuKernels) {
  Gen gen(21);
  const auto ids = embedding_ids(gen);
  const HostArray dout = random_array(gen, e(), count(kTokens, kHidden), -1, 1);
  // The gradients accumulate: start from values. On the GPU the duplicates' terms meet in
  // atomics, in any order: sums, compared as such.
  std::vector<float> dwte = random_floats(gen, count(kVocabulary, kHidden), -1, 1),
                     dwpe = random_floats(gen, count(kSeq, kHidden), -1, 1);
  const DeviceBuffer d_ids = upload(ids), d_dout = upload(dout), d_dwte = upload(dwte), d_dwpe = upload(dwpe);
  cpu_->embedding_backward(ids.data(), dout.data(), dwte.data(), dwpe.data(), kTokens, kSeq, kHidden, e());
  run("embedding_backward", cu::embedding_backward(s(), d_ids.as<std::int32_t>(), d_dout.get(), d_dwte.as<float>(),
                                                   d_dwpe.as<float>(), kTokens, kSeq, kHidden, half()));
  EXPECT_TRUE(near("dwte", download_vector<float>(d_dwte, dwte.size()), dwte, kSum));
  EXPECT_TRUE(near("dwpe", download_vector<float>(d_dwpe, dwpe.size()), dwpe, kSum));
}

// ---------------------------------------------------------------------------------
// Cross-entropy.

TEST_P(CalibCudaKernels, CrossEntropyForwardMatchesTheCpuKernels) {
  const int rows = 37, vocabulary = 1000;
  const std::size_t n = count(rows, vocabulary);
  // Logits in [-4, 4) and [-20, 20): the second puts probabilities down to 1e-18 (0 in
  // f16), where the GPU's __expf is least accurate.
  for (const double range : {4.0, 20.0}) {
    SCOPED_TRACE("logits in [-" + std::to_string(range) + ", " + std::to_string(range) + ")");
    Gen gen(22);
    const HostArray logits = random_array(gen, e(), n, -range, range);
    std::vector<std::int32_t> labels(rows);
    for (auto& l : labels) l = gen.below(vocabulary);
    HostArray cpu = logits;
    float cpu_loss = -1;
    cpu_->cross_entropy_forward(cpu.data(), labels.data(), &cpu_loss, rows, vocabulary, e());
    const DeviceBuffer d_logits = upload(logits), d_labels = upload(labels),
                       d_loss = upload(std::vector<float>{1e30f});  // overwritten, not accumulated
    run("cross_entropy_forward", cu::cross_entropy_forward(s(), d_logits.get(), d_labels.as<std::int32_t>(),
                                                           d_loss.as<float>(), rows, vocabulary, half()));
    // Probabilities are small (1e-3 on average): the scale-relative floor is the largest one's.
    EXPECT_TRUE(near("probabilities", download(d_logits, e(), n), cpu, tol()));
    // The loss is f32 from the same inputs (the CPU sums rows in double, the GPU in f32 atomics).
    EXPECT_TRUE(near("loss", download_vector<float>(d_loss, 1), {cpu_loss}, kF32));
  }
}

TEST_P(CalibCudaKernels, CrossEntropyBackwardMatchesTheCpuKernels) {
  const int rows = 37, vocabulary = 1000;
  const std::size_t n = count(rows, vocabulary);
  Gen gen(23);
  // Probabilities (the CPU's forward) are the input of both sides.
  HostArray probs = random_array(gen, e(), n, -4, 4);
  std::vector<std::int32_t> labels(rows);
  for (auto& l : labels) l = gen.below(vocabulary);
  float loss = 0;
  cpu_->cross_entropy_forward(probs.data(), labels.data(), &loss, rows, vocabulary, e());
  HostArray cpu = probs;
  cpu_->cross_entropy_backward(cpu.data(), labels.data(), rows, vocabulary, e());
  const DeviceBuffer d_probs = upload(probs), d_labels = upload(labels);
  run("cross_entropy_backward",
      cu::cross_entropy_backward(s(), d_probs.get(), d_labels.as<std::int32_t>(), rows, vocabulary, half()));
  EXPECT_TRUE(near("(probs - onehot) / rows", download(d_probs, e(), n), cpu, tol()));
}

// ---------------------------------------------------------------------------------
// Adam.

TEST_P(CalibCudaKernels, AdamMatchesTheCpuKernels) {
  // Enough parameters for many blocks, with a tail.
  const std::size_t n = 65536 + 37;
  Gen gen(24);
  std::vector<float> master = random_floats(gen, n, -1, 1), g = random_floats(gen, n, -0.01, 0.01),
                     m = random_floats(gen, n, -1e-3, 1e-3), v = random_floats(gen, n, 0, 1e-4);
  HostArray w(e(), n);
  for (std::size_t i = 0; i < n; ++i) w.set(i, master[i]);  // f16: the rounded master weights
  const bool with_master = half();

  const DeviceBuffer d_w = upload(w), d_master = upload(master), d_g = upload(g), d_m = upload(m), d_v = upload(v);
  float* const dev_master = with_master ? d_master.as<float>() : nullptr;
  float* const cpu_master = with_master ? master.data() : nullptr;
  // Two steps: the second runs on the gradient the first zeroed, on the first's m and v.
  for (const int step : {3, 4}) {
    cpu_->adam(w.data(), cpu_master, g.data(), m.data(), v.data(), n, step, e());
    run("adam (step " + std::to_string(step) + ")",
        cu::adam(s(), d_w.get(), dev_master, d_g.as<float>(), d_m.as<float>(), d_v.as<float>(), n, step, half()));
  }
  // A step moves a weight by ~lr = 1e-4: the f32 weights are held to 1e-6 (a few ulps of
  // weights ~1), which the update's own rounding (FMAs, IEEE sqrt and division on both
  // sides) stays far within and a wrong update does not.
  const Tol weights{1e-6, 1e-6};
  if (with_master) {
    EXPECT_TRUE(near("master weights", download_vector<float>(d_master, n), master, weights));
    EXPECT_TRUE(near("f16 weights", download(d_w, e(), n), w, kF16));
  } else {
    EXPECT_TRUE(near("weights", download(d_w, e(), n), w, weights));
  }
  EXPECT_TRUE(near("m", download_vector<float>(d_m, n), m, Tol{1e-5, 1e-5}));
  EXPECT_TRUE(near("v", download_vector<float>(d_v, n), v, Tol{1e-5, 1e-5}));
  const auto gpu_g = download_vector<float>(d_g, n);
  EXPECT_EQ(std::count(gpu_g.begin(), gpu_g.end(), 0.0f), static_cast<std::ptrdiff_t>(n)) << "g is not zeroed";
}

INSTANTIATE_TEST_SUITE_P(Elems, CalibCudaKernels, ::testing::Values(Elem::f32, Elem::f16),
                         [](const ::testing::TestParamInfo<Elem>& info) {
                           return std::string(info.param == Elem::f16 ? "f16" : "f32");
                         });

// ---------------------------------------------------------------------------------
// The spin kernel (Stream::busy).

TEST_F(CalibCuda, SpinKeepsTheStreamBusyForItsTime) {
  Event start, end;
  run("spin (warm-up)", cu::spin(s(), 1000));
  std::vector<float> measured;
  for (int i = 0; i < 3; ++i) {
    // A short spin first keeps the GPU busy while the host enqueues the timed part, so
    // that the events time the kernel and not the host's launch.
    check(cu::spin(s(), 200'000), "launching cuda::spin (200 us)");
    check(cudaEventRecord(start.get(), s()), "cudaEventRecord");
    check(cu::spin(s(), 2'000'000), "launching cuda::spin (2 ms)");
    check(cudaEventRecord(end.get(), s()), "cudaEventRecord");
    check(cudaStreamSynchronize(s()), "cudaStreamSynchronize after cuda::spin");
    float ms = 0;
    check(cudaEventElapsedTime(&ms, start.get(), end.get()), "cudaEventElapsedTime");
    measured.push_back(ms);
  }
  std::printf("calib-cuda: spin(2 ms) took %.4f, %.4f, %.4f ms\n", static_cast<double>(measured[0]),
              static_cast<double>(measured[1]), static_cast<double>(measured[2]));
  std::fflush(stdout);
  for (const float ms : measured) {
    EXPECT_GE(ms, 1.9f) << "spin(2'000'000 ns) ended early";
    EXPECT_LE(ms, 3.0f) << "spin(2'000'000 ns) ran long";
  }
}

// ---------------------------------------------------------------------------------
// NCCL: a communicator of one rank sends 1 MiB to itself (what each channel's
// communicator does, with two ranks, in the CUDA backend).

TEST_F(CalibCuda, NcclSendsToItself) {
  int version = 0;
  check_nccl(ncclGetVersion(&version), "ncclGetVersion", nullptr);
  // Version codes are major * 10000 + minor * 100 + patch since NCCL 2.9 (major * 1000
  // + minor * 100 + patch before).
  const int major = version >= 10000 ? version / 10000 : version / 1000;
  const int minor = version >= 10000 ? version % 10000 / 100 : version % 1000 / 100;
  std::printf("calib-cuda: NCCL %d.%d.%d (library), built against %d.%d.%d\n", major, minor, version % 100,
              NCCL_MAJOR, NCCL_MINOR, NCCL_PATCH);
  std::fflush(stdout);
  RecordProperty("nccl_version", version);

  ncclUniqueId id;
  check_nccl(ncclGetUniqueId(&id), "ncclGetUniqueId", nullptr);
  NcclComm comm;
  check_nccl(ncclCommInitRank(comm.out(), 1, id, 0), "ncclCommInitRank (1 rank, rank 0)", comm.get());

  constexpr std::size_t bytes = std::size_t{1} << 20;
  std::vector<unsigned char> sent(bytes);
  Gen gen(25);
  for (auto& b : sent) b = static_cast<unsigned char>(gen.bits() >> 56);
  const DeviceBuffer d_send = upload(sent), d_recv(bytes);

  // The group is closed whatever the calls in it return; then their results are checked.
  check_nccl(ncclGroupStart(), "ncclGroupStart", comm.get());
  const ncclResult_t send = ncclSend(d_send.get(), bytes, ncclUint8, 0, comm.get(), s());
  const ncclResult_t recv = ncclRecv(d_recv.get(), bytes, ncclUint8, 0, comm.get(), s());
  const ncclResult_t end = ncclGroupEnd();
  check_nccl(send, "ncclSend of 1 MiB to rank 0 (itself)", comm.get());
  check_nccl(recv, "ncclRecv of 1 MiB from rank 0 (itself)", comm.get());
  check_nccl(end, "ncclGroupEnd", comm.get());

  finish_transfers(s(), comm, "the self send/recv");

  const auto received = download_vector<unsigned char>(d_recv, bytes);
  EXPECT_TRUE(same_bytes("received vs sent", received.data(), sent.data(), bytes, 1));
  check_nccl(comm.destroy(), "ncclCommDestroy", nullptr);
}

// NCCL allows one rank per GPU: two ranks of one communicator on GPU 0 are refused (which
// is why the harness runs one rank per GPU), or, should a version accept them, move a
// message between them correctly. Either way the outcome is printed for the run's log.
TEST_F(CalibCuda, NcclTwoRanksOnOneGpuAreRefusedOrWork) {
  std::array<ncclComm_t, 2> raw{nullptr, nullptr};
  const std::array<int, 2> devices{0, 0};
  const ncclResult_t r = ncclCommInitAll(raw.data(), 2, devices.data());
  std::array<NcclComm, 2> comms;
  if (r == ncclSuccess)
    for (int i = 0; i < 2; ++i) *comms[i].out() = raw[i];
  if (r != ncclSuccess) {
    std::printf("calib-cuda: NCCL refuses two ranks on one GPU: ncclCommInitAll(2 ranks, GPU 0 twice): %s (%s)\n",
                ncclGetErrorString(r), ncclGetLastError(nullptr));
    std::fflush(stdout);
    RecordProperty("two_ranks_one_gpu", ncclGetErrorString(r));
    EXPECT_EQ(r, ncclInvalidUsage) << "refused, but not as invalid usage";
    return;
  }
  std::printf("calib-cuda: NCCL accepts two ranks on one GPU; checking a transfer between them\n");
  std::fflush(stdout);
  constexpr std::size_t bytes = std::size_t{1} << 20;
  std::vector<unsigned char> sent(bytes);
  Gen gen(26);
  for (auto& b : sent) b = static_cast<unsigned char>(gen.bits() >> 56);
  const DeviceBuffer d_send = upload(sent), d_recv(bytes);
  Stream other;
  check_nccl(ncclGroupStart(), "ncclGroupStart", nullptr);
  const ncclResult_t send = ncclSend(d_send.get(), bytes, ncclUint8, 1, comms[0].get(), s());
  const ncclResult_t recv = ncclRecv(d_recv.get(), bytes, ncclUint8, 0, comms[1].get(), other.get());
  check_nccl(ncclGroupEnd(), "ncclGroupEnd", nullptr);
  check_nccl(send, "ncclSend rank 0 -> 1", comms[0].get());
  check_nccl(recv, "ncclRecv rank 1 <- 0", comms[1].get());
  finish_transfers(s(), comms[0], "the send of rank 0");
  finish_transfers(other.get(), comms[1], "the recv of rank 1");
  const auto received = download_vector<unsigned char>(d_recv, bytes);
  EXPECT_TRUE(same_bytes("received vs sent", received.data(), sent.data(), bytes, 1));
}

// What one GPU can measure in place of a link between two: a device-to-device copy and an
// NCCL send to itself, at 1 MiB, 16 MiB and 256 MiB (the median of 5 after a warm-up),
// printed as a table; each must deliver the bytes and take a positive time.
TEST_F(CalibCuda, CopyAndNcclSelfSendBandwidth) {
  ncclUniqueId id;
  check_nccl(ncclGetUniqueId(&id), "ncclGetUniqueId", nullptr);
  NcclComm comm;
  check_nccl(ncclCommInitRank(comm.out(), 1, id, 0), "ncclCommInitRank (1 rank, rank 0)", comm.get());
  constexpr std::size_t largest = std::size_t{256} << 20;
  DeviceBuffer src(largest), dst(largest);
  check(cudaMemset(src.get(), 0x5A, largest), "cudaMemset");
  Event start, end;
  const auto median_ms = [&](const auto& enqueue) {
    enqueue();  // warm-up
    std::vector<float> ms(5);
    for (auto& m : ms) {
      check(cudaEventRecord(start.get(), s()), "cudaEventRecord");
      enqueue();
      check(cudaEventRecord(end.get(), s()), "cudaEventRecord");
      finish_transfers(s(), comm, "a timed transfer");
      check(cudaEventElapsedTime(&m, start.get(), end.get()), "cudaEventElapsedTime");
    }
    std::sort(ms.begin(), ms.end());
    return static_cast<double>(ms[2]);
  };
  std::printf("calib-cuda: %12s %14s %14s %16s %16s\n", "bytes", "copy ms", "copy GB/s", "nccl self ms",
              "nccl self GB/s");
  for (const std::size_t bytes : {std::size_t{1} << 20, std::size_t{16} << 20, largest}) {
    check(cudaMemset(dst.get(), 0, bytes), "cudaMemset");
    const double copy = median_ms([&] {
      check(cudaMemcpyAsync(dst.get(), src.get(), bytes, cudaMemcpyDeviceToDevice, s()), "cudaMemcpyAsync");
    });
    const double self = median_ms([&] {
      check_nccl(ncclGroupStart(), "ncclGroupStart", comm.get());
      const ncclResult_t a = ncclSend(src.get(), bytes, ncclUint8, 0, comm.get(), s());
      const ncclResult_t b = ncclRecv(dst.get(), bytes, ncclUint8, 0, comm.get(), s());
      check_nccl(ncclGroupEnd(), "ncclGroupEnd", comm.get());
      check_nccl(a, "ncclSend to itself", comm.get());
      check_nccl(b, "ncclRecv from itself", comm.get());
    });
    std::printf("calib-cuda: %12zu %14.4f %14.1f %16.4f %16.1f\n", bytes, copy, static_cast<double>(bytes) / copy / 1e6,
                self, static_cast<double>(bytes) / self / 1e6);
    std::fflush(stdout);
    EXPECT_GT(copy, 0.0);
    EXPECT_GT(self, 0.0);
    const auto tail = download_vector<unsigned char>(dst, bytes);
    EXPECT_TRUE(std::all_of(tail.begin(), tail.end(), [](unsigned char c) { return c == 0x5A; }))
        << "the last transfer of " << bytes << " bytes did not deliver them";
  }
  check_nccl(comm.destroy(), "ncclCommDestroy", nullptr);
}

// ---------------------------------------------------------------------------------
// GEMMs: the backend's cuBLAS calls (make_cuda_kernels) against the CPU kernels, every
// transpose, padded leading dimensions (the padding of C must stay as it was), alpha and
// beta not 1 and 0.

namespace {

struct GemmCase {
  bool ta, tb;
  Elem ab, c;
};

std::string text(const GemmCase& g) {
  return std::string(g.ta ? "T" : "N") + (g.tb ? "T" : "N") + (g.ab == Elem::f16 ? " f16" : " f32") +
         (g.c == Elem::f16 ? " -> f16" : " -> f32");
}

// Row-major op(A) m x k, op(B) k x n, C m x n, each stored with 3 elements of padding a row.
struct GemmShape {
  int m, n, k;
  bool ta, tb;
  int lda() const { return (ta ? m : k) + 3; }
  int ldb() const { return (tb ? k : n) + 3; }
  int ldc() const { return n + 3; }
  std::size_t a_elems() const { return static_cast<std::size_t>(ta ? k : m) * lda(); }
  std::size_t b_elems() const { return static_cast<std::size_t>(tb ? n : k) * ldb(); }
  std::size_t c_elems() const { return static_cast<std::size_t>(m) * ldc(); }
};

// The tolerance of a GEMM's result: f16 C is rounded once more than the f32 sum.
Tol gemm_tol(Elem c) { return c == Elem::f16 ? kF16 : kSum; }

}  // namespace

TEST_F(CalibCuda, GemmMatchesTheCpuKernels) {
  const auto gpu = cal::make_cuda_kernels(0, s());
  const float alpha = 1.25f, beta = 0.5f;
  for (const GemmCase g : {GemmCase{false, false, Elem::f32, Elem::f32}, GemmCase{false, true, Elem::f32, Elem::f32},
                           GemmCase{true, false, Elem::f32, Elem::f32}, GemmCase{true, true, Elem::f32, Elem::f32},
                           GemmCase{false, false, Elem::f16, Elem::f16}, GemmCase{false, true, Elem::f16, Elem::f16},
                           GemmCase{true, false, Elem::f16, Elem::f16}, GemmCase{true, true, Elem::f16, Elem::f16},
                           GemmCase{true, false, Elem::f16, Elem::f32}, GemmCase{false, true, Elem::f16, Elem::f32}}) {
    const GemmShape sh{37, 50, 64, g.ta, g.tb};
    Gen gen(31);
    const HostArray a = random_array(gen, g.ab, sh.a_elems(), -1, 1), b = random_array(gen, g.ab, sh.b_elems(), -1, 1);
    HostArray c = random_array(gen, g.c, sh.c_elems(), -1, 1);
    const DeviceBuffer da = upload(a), db = upload(b), dc = upload(c);
    gpu->gemm(g.ta, g.tb, sh.m, sh.n, sh.k, alpha, da.get(), sh.lda(), db.get(), sh.ldb(), beta, dc.get(), sh.ldc(),
              g.ab, g.c);
    check(cudaStreamSynchronize(s()), "cudaStreamSynchronize after gemm " + text(g));
    cpu_->gemm(g.ta, g.tb, sh.m, sh.n, sh.k, alpha, a.data(), sh.lda(), b.data(), sh.ldb(), beta, c.data(), sh.ldc(),
               g.ab, g.c);
    EXPECT_TRUE(near("gemm " + text(g), download(dc, g.c, sh.c_elems()), c, gemm_tol(g.c)));
  }
}

// Strided-batched, as attention runs it (scores Q K^T: NT; context P V: NN), f16 and f32.
TEST_F(CalibCuda, GemmBatchedMatchesTheCpuKernels) {
  const auto gpu = cal::make_cuda_kernels(0, s());
  const float alpha = 0.75f, beta = 0.25f;
  constexpr int batch = 3;
  for (const GemmCase g : {GemmCase{false, true, Elem::f32, Elem::f32}, GemmCase{false, false, Elem::f32, Elem::f32},
                           GemmCase{true, false, Elem::f16, Elem::f16}, GemmCase{false, true, Elem::f16, Elem::f16},
                           GemmCase{false, false, Elem::f16, Elem::f16}, GemmCase{true, true, Elem::f16, Elem::f16}}) {
    const GemmShape sh{29, 40, 24, g.ta, g.tb};
    // Each matrix of the batch 5 elements after the previous one ends.
    const std::int64_t sa = static_cast<std::int64_t>(sh.a_elems()) + 5, sb = static_cast<std::int64_t>(sh.b_elems()) + 5,
                       sc = static_cast<std::int64_t>(sh.c_elems()) + 5;
    Gen gen(32);
    const HostArray a = random_array(gen, g.ab, static_cast<std::size_t>(sa) * batch, -1, 1),
                    b = random_array(gen, g.ab, static_cast<std::size_t>(sb) * batch, -1, 1);
    HostArray c = random_array(gen, g.c, static_cast<std::size_t>(sc) * batch, -1, 1);
    const DeviceBuffer da = upload(a), db = upload(b), dc = upload(c);
    gpu->gemm_batched(g.ta, g.tb, sh.m, sh.n, sh.k, alpha, da.get(), sh.lda(), sa, db.get(), sh.ldb(), sb, beta,
                      dc.get(), sh.ldc(), sc, batch, g.ab);
    check(cudaStreamSynchronize(s()), "cudaStreamSynchronize after gemm_batched " + text(g));
    cpu_->gemm_batched(g.ta, g.tb, sh.m, sh.n, sh.k, alpha, a.data(), sh.lda(), sa, b.data(), sh.ldb(), sb, beta,
                       c.data(), sh.ldc(), sc, batch, g.ab);
    EXPECT_TRUE(near("gemm_batched " + text(g), download(dc, g.c, c.size()), c, gemm_tol(g.c)));
  }
}
