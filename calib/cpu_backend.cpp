// The CPU backend: each stream is a worker thread running its queue in order; events
// are reached by the worker and stamped with now_s(); channels are MPI communicators of
// two ranks (MPI_Send / MPI_Recv from the stream's worker thread).
#include <algorithm>
#include <chrono>
#include <climits>
#include <condition_variable>
#include <cstring>
#include <deque>
#include <exception>
#include <mutex>
#include <new>
#include <thread>

#include <fmt/format.h>

#include "backend.h"
#include "cpu_kernels.h"
#include "runtime.h"

namespace adagrouper::calib {

namespace {

// ---------------------------------------------------------------------------------
// Events

class CpuEvent final : public Event {
 public:
  explicit CpuEvent(Watchdog& dog) : st_(std::make_shared<State>()), dog_(dog) {}

  struct State {
    std::mutex mutex;
    std::condition_variable cv;
    std::uint64_t recorded = 0, reached = 0;
    double time = 0;
  };

  // A new record: the generation the stream will reach.
  std::uint64_t arm() {
    std::lock_guard<std::mutex> lock(st_->mutex);
    return ++st_->recorded;
  }
  std::uint64_t armed() const {
    std::lock_guard<std::mutex> lock(st_->mutex);
    return st_->recorded;
  }
  static void reach(State& st, std::uint64_t gen) {
    const double t = now_s();
    {
      std::lock_guard<std::mutex> lock(st.mutex);
      if (gen > st.reached) {
        st.reached = gen;
        st.time = t;
      }
    }
    st.cv.notify_all();
  }
  static void wait_for(State& st, std::uint64_t gen) {
    std::unique_lock<std::mutex> lock(st.mutex);
    st.cv.wait(lock, [&] { return st.reached >= gen; });
  }
  const std::shared_ptr<State>& state() const { return st_; }

  void synchronize() override {
    const std::uint64_t gen = armed();
    auto g = dog_.guard("waiting for an event of a CPU stream");
    wait_for(*st_, gen);
  }
  bool done() override {
    std::lock_guard<std::mutex> lock(st_->mutex);
    return st_->reached >= st_->recorded;
  }
  double seconds_since(const Event& earlier) const override {
    const auto& o = static_cast<const CpuEvent&>(earlier);
    std::scoped_lock lock(st_->mutex, o.st_->mutex);
    return st_->time - o.st_->time;
  }
  std::optional<double> host_time() const override {
    std::lock_guard<std::mutex> lock(st_->mutex);
    return st_->time;
  }

 private:
  std::shared_ptr<State> st_;
  Watchdog& dog_;
};

// ---------------------------------------------------------------------------------
// Streams

class CpuStream final : public Stream {
 public:
  explicit CpuStream(Watchdog& dog) : q_(std::make_shared<Queue>()), dog_(dog) {
    q_->worker = std::thread([q = q_] { run(*q); });
  }

  ~CpuStream() override {
    {
      std::lock_guard<std::mutex> lock(q_->mutex);
      q_->stop = true;
    }
    q_->cv.notify_all();
    // After an error the worker may be blocked in a transfer whose peer is gone: leave it
    // (the job is being aborted); the queue outlives this object through the worker's
    // reference.
    bool failed;
    {
      std::lock_guard<std::mutex> lock(q_->mutex);
      failed = q_->error != nullptr;
    }
    if (failed || std::uncaught_exceptions() > 0) {
      q_->worker.detach();
    } else {
      q_->worker.join();
    }
  }

  void post(std::function<void()> task) {
    {
      std::lock_guard<std::mutex> lock(q_->mutex);
      q_->tasks.push_back(std::move(task));
    }
    q_->cv.notify_all();
  }

  void record(Event& e) override {
    auto& ce = static_cast<CpuEvent&>(e);
    const std::uint64_t gen = ce.arm();
    post([st = ce.state(), gen] { CpuEvent::reach(*st, gen); });
  }

  void wait(const Event& e) override {
    const auto& ce = static_cast<const CpuEvent&>(e);
    const std::uint64_t gen = ce.armed();
    post([st = ce.state(), gen] { CpuEvent::wait_for(*st, gen); });
  }

  void synchronize() override {
    std::unique_lock<std::mutex> lock(q_->mutex);
    {
      auto g = dog_.guard("synchronizing a CPU stream");
      q_->cv.wait(lock, [&] { return (q_->tasks.empty() && !q_->running) || q_->error != nullptr; });
    }
    if (q_->error) std::rethrow_exception(q_->error);
  }

  void submit(std::function<void(Kernels&)> work) override {
    post([q = q_.get(), w = std::move(work)] { w(*q->kernels); });
  }

  void busy(double seconds) override {
    post([seconds] {
      const double end = now_s() + seconds;
      while (now_s() < end) {
      }
    });
  }

 private:
  struct Queue {
    std::mutex mutex;
    std::condition_variable cv;
    std::deque<std::function<void()>> tasks;
    bool running = false, stop = false;
    std::exception_ptr error;
    std::unique_ptr<Kernels> kernels = make_cpu_kernels();
    std::thread worker;
  };

  // The worker: runs tasks in order; after a task throws, the rest are dropped and the
  // error is rethrown by synchronize().
  static void run(Queue& q) {
    cpu_flush_denormals();
    std::unique_lock<std::mutex> lock(q.mutex);
    for (;;) {
      q.cv.wait(lock, [&] { return q.stop || !q.tasks.empty(); });
      if (q.tasks.empty()) return;  // stop, and nothing left
      std::function<void()> task = std::move(q.tasks.front());
      q.tasks.pop_front();
      if (q.error) continue;
      q.running = true;
      lock.unlock();
      std::exception_ptr err;
      try {
        task();
      } catch (...) {
        err = std::current_exception();
      }
      lock.lock();
      q.running = false;
      if (err && !q.error) q.error = err;
      q.cv.notify_all();
    }
  }

  std::shared_ptr<Queue> q_;
  Watchdog& dog_;
};

// ---------------------------------------------------------------------------------
// Memory

class CpuBuffer final : public Buffer {
 public:
  explicit CpuBuffer(std::size_t bytes) : bytes_(bytes) {
    data_ = ::operator new(std::max<std::size_t>(bytes, 1), std::align_val_t{64}, std::nothrow);
    if (data_ == nullptr) throw std::bad_alloc();
    std::memset(data_, 0, bytes);
  }
  ~CpuBuffer() override { ::operator delete(data_, std::align_val_t{64}); }
  void* data() override { return data_; }
  std::size_t bytes() const override { return bytes_; }

 private:
  void* data_;
  std::size_t bytes_;
};

// ---------------------------------------------------------------------------------
// Channels

constexpr int kDataTag = 0, kClockTag = 1;
constexpr std::size_t kChunk = std::size_t{1} << 30;  // MPI counts are ints

class CpuChannel final : public Channel {
 public:
  CpuChannel(const Mpi& mpi, Watchdog& dog, ChannelSpec spec, bool sender, std::size_t max_bytes, MPI_Comm comm)
      : Channel(spec, sender, max_bytes), mpi_(mpi), dog_(dog), comm_(comm), buf_(std::max<std::size_t>(max_bytes, 16)) {}
  ~CpuChannel() override { mpi_.free(comm_); }

  void send(Stream& stream, std::size_t bytes) override {
    check_size(bytes, "send");
    static_cast<CpuStream&>(stream).post([this, bytes] { send_now(bytes); });
  }
  void recv(Stream& stream, std::size_t bytes) override {
    check_size(bytes, "recv");
    static_cast<CpuStream&>(stream).post([this, bytes] { recv_now(bytes); });
  }

  // The sender's clock minus the receiver's, from 16 round trips (the one with the
  // shortest round trip wins; its error is at most half of it). 0 on the sender.
  void align_clocks() override {
    constexpr int rounds = 16;
    double best_rtt = 1e300, offset = 0;
    auto g = dog_.guard("clock alignment", peer());
    for (int r = 0; r < rounds; ++r) {
      if (sender()) {
        char ping = 0;
        mpi_.check(MPI_Recv(&ping, 1, MPI_CHAR, 1, kClockTag, comm_, MPI_STATUS_IGNORE), "MPI_Recv");
        const double t = now_s();
        mpi_.check(MPI_Send(&t, 1, MPI_DOUBLE, 1, kClockTag, comm_), "MPI_Send");
      } else {
        const char ping = 0;
        const double t0 = now_s();
        mpi_.check(MPI_Send(&ping, 1, MPI_CHAR, 0, kClockTag, comm_), "MPI_Send");
        double ts = 0;
        mpi_.check(MPI_Recv(&ts, 1, MPI_DOUBLE, 0, kClockTag, comm_, MPI_STATUS_IGNORE), "MPI_Recv");
        const double t1 = now_s();
        if (t1 - t0 < best_rtt) {
          best_rtt = t1 - t0;
          offset = ts - 0.5 * (t0 + t1);
        }
      }
    }
    offset_ = sender() ? 0.0 : offset;
  }

  void record_transfers(const TransferPlan& plan,
                        const std::function<void(const TransferRecord&)>& sample) override {
    if (plan.count <= 0 || plan.sizes.empty()) return;
    for (const std::size_t b : plan.sizes) {
      check_size(b, "record_transfers");
      if (b < 16) fail_call(mpi_.id(), "record_transfers", fmt::format("a message of {} bytes: at least 16", b));
    }
    const double offset = offset_;  // the sender's clock minus ours (receiver), from align_clocks()
    double prev_end = -1e300;
    for (int i = 0; i < plan.count; ++i) {
      const std::size_t bytes = plan.sizes[static_cast<std::size_t>(i) % plan.sizes.size()];
      if (sender()) {
        const double due = plan.origin_s + i * plan.interval_s;
        while (now_s() < due) std::this_thread::sleep_for(std::chrono::duration<double>(std::min(due - now_s(), 0.01)));
        const double header[2] = {now_s(), static_cast<double>(i)};
        std::memcpy(buf_.data(), header, sizeof header);
        send_now(bytes);
      } else {
        recv_now(bytes);
        const double end = now_s();
        double header[2];
        std::memcpy(header, buf_.data(), sizeof header);
        if (header[1] != static_cast<double>(i))
          fail_call(mpi_.id(), "MPI_Recv",
                    fmt::format("channel {} -> {}: transfer {} arrived out of order (got {})", spec().from, spec().to,
                                i, header[1]));
        // The transfer started when the sender started it, or when the previous one
        // ended if later (messages on a channel move one at a time).
        const double start = std::max(header[0] - offset, prev_end);
        prev_end = end;
        sample({start - plan.origin_s, static_cast<double>(bytes), std::max(end - start, 1e-9)});
      }
    }
  }

 private:
  void check_size(std::size_t bytes, const char* what) const {
    if (bytes > max_bytes())
      fail_call(mpi_.id(), what, fmt::format("{} bytes on channel {} -> {}, whose buffer holds {}", bytes,
                                             spec().from, spec().to, max_bytes()));
  }

  void send_now(std::size_t bytes) {
    auto g = dog_.guard("MPI_Send", spec().to);
    std::size_t done = 0;
    do {
      const std::size_t n = std::min(kChunk, bytes - done);
      mpi_.check(MPI_Send(buf_.data() + done, static_cast<int>(n), MPI_BYTE, 1, kDataTag, comm_), "MPI_Send");
      done += n;
    } while (done < bytes);
  }

  void recv_now(std::size_t bytes) {
    auto g = dog_.guard("MPI_Recv", spec().from);
    std::size_t done = 0;
    do {
      const std::size_t n = std::min(kChunk, bytes - done);
      MPI_Status status;
      mpi_.check(MPI_Recv(buf_.data() + done, static_cast<int>(n), MPI_BYTE, 0, kDataTag, comm_, &status), "MPI_Recv");
      int got = 0;
      mpi_.check(MPI_Get_count(&status, MPI_BYTE, &got), "MPI_Get_count");
      if (static_cast<std::size_t>(got) != n)
        fail_call(mpi_.id(), "MPI_Recv",
                  fmt::format("channel {} -> {}: a message of {} bytes where {} were expected (the two ends disagree "
                              "on the message sizes)",
                              spec().from, spec().to, got, n));
      done += n;
    } while (done < bytes);
  }

  const Mpi& mpi_;
  Watchdog& dog_;
  MPI_Comm comm_;
  std::vector<char> buf_;
  double offset_ = 0;
};

// ---------------------------------------------------------------------------------
// The backend

class CpuBackend final : public Backend {
 public:
  CpuBackend(const Mpi& mpi, Watchdog& dog) : mpi_(mpi), dog_(dog) {}

  BackendKind kind() const override { return BackendKind::cpu; }
  std::string device() const override {
#if defined(__x86_64__)
    const char* arch = "x86_64";
#elif defined(__aarch64__)
    const char* arch = "aarch64";
#else
    const char* arch = "cpu";
#endif
    return fmt::format("cpu ({}, {} hardware threads on the host)", arch, std::thread::hardware_concurrency());
  }
  std::optional<double> device_memory_bytes() const override { return std::nullopt; }

  std::unique_ptr<Stream> create_stream() override { return std::make_unique<CpuStream>(dog_); }
  std::unique_ptr<Event> create_event() override { return std::make_unique<CpuEvent>(dog_); }
  std::unique_ptr<Buffer> allocate(std::size_t bytes) override {
    try {
      return std::make_unique<CpuBuffer>(bytes);
    } catch (const std::bad_alloc&) {
      fail_call(mpi_.id(), "allocate", fmt::format("out of host memory allocating {} bytes", bytes));
    }
  }

  std::vector<std::unique_ptr<Channel>> connect(const std::vector<ChannelSpec>& specs,
                                                std::size_t max_bytes) override {
    std::vector<std::unique_ptr<Channel>> out;
    const int me = mpi_.rank();
    for (std::size_t i = 0; i < specs.size(); ++i) {
      const ChannelSpec& s = specs[i];
      if (s.from == s.to || s.from < 0 || s.to < 0 || s.from >= mpi_.size() || s.to >= mpi_.size())
        fail_call(mpi_.id(), "connect", fmt::format("channel {} -> {} does not join two of the {} ranks", s.from,
                                                    s.to, mpi_.size()));
      const bool member = me == s.from || me == s.to;
      // One communicator per spec; the sender is rank 0 in it, the receiver rank 1.
      MPI_Comm comm = mpi_.split(member ? static_cast<int>(i) : MPI_UNDEFINED, me == s.from ? 0 : 1);
      if (member) out.push_back(std::make_unique<CpuChannel>(mpi_, dog_, s, me == s.from, max_bytes, comm));
    }
    return out;
  }

 private:
  const Mpi& mpi_;
  Watchdog& dog_;
};

}  // namespace

std::unique_ptr<Backend> make_cpu_backend(const Mpi& mpi, Watchdog& watchdog) {
  return std::make_unique<CpuBackend>(mpi, watchdog);
}

}  // namespace adagrouper::calib
