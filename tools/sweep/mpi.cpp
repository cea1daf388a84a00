// run_sweep under mpirun: rank 0 reads the output, decides what to run and broadcasts
// it; every rank runs runs on its threads, taking them from rank 0 in chunks; rank 0
// writes every row. Only the main thread of a rank calls MPI (MPI_THREAD_FUNNELED).
#include <fmt/format.h>
#include <mpi.h>
#include <sched.h>

#include <algorithm>
#include <chrono>
#include <condition_variable>
#include <cstdint>
#include <cstdlib>
#include <deque>
#include <functional>
#include <iostream>
#include <mutex>
#include <optional>
#include <stdexcept>
#include <string>
#include <thread>
#include <utility>
#include <vector>

#include "runner.h"

namespace adagrouper::sweep::detail {

namespace {

enum Tag : int { kRequest = 1, kWork = 2, kRow = 3, kDone = 4 };

// How long a rank's MPI thread sleeps when nothing arrived. Ranks ask for work before
// their queue runs dry, so this only adds latency to the last chunk.
constexpr auto kPoll = std::chrono::microseconds(500);
// How often a busy rank looks at its messages (rank 0) or sends its rows (the others):
// every MPI call runs Open MPI's progress engine, which costs more than nothing.
constexpr auto kTalk = std::chrono::milliseconds(1);
using Clock = std::chrono::steady_clock;

class Session {
 public:
  Session() {
    int provided = 0;
    MPI_Init_thread(nullptr, nullptr, MPI_THREAD_FUNNELED, &provided);
    MPI_Comm_rank(MPI_COMM_WORLD, &rank_);
    MPI_Comm_size(MPI_COMM_WORLD, &size_);
  }
  ~Session() { MPI_Finalize(); }
  Session(const Session&) = delete;
  Session& operator=(const Session&) = delete;
  int rank() const { return rank_; }
  int size() const { return size_; }

 private:
  int rank_ = 0, size_ = 1;
};

[[noreturn]] void abort_all(int rank, const std::string& what) {
  std::cerr << fmt::format("adagrouper sweep: rank {}: {}\n", rank, what) << std::flush;
  MPI_Abort(MPI_COMM_WORLD, 1);
  std::abort();
}

void bcast_indices(std::vector<std::size_t>& v) {
  std::vector<std::uint64_t> w(v.begin(), v.end());
  std::uint64_t n = w.size();
  MPI_Bcast(&n, 1, MPI_UINT64_T, 0, MPI_COMM_WORLD);
  w.resize(n);
  MPI_Bcast(w.data(), static_cast<int>(n), MPI_UINT64_T, 0, MPI_COMM_WORLD);
  v.assign(w.begin(), w.end());
}

// Threads per rank when --jobs is not given: the rank's CPUs, shared with the ranks
// on the same node whose CPU sets overlap it (all of them when mpirun does not bind,
// none when it binds each rank to its own cores).
int default_jobs(int rank) {
  MPI_Comm node;
  MPI_Comm_split_type(MPI_COMM_WORLD, MPI_COMM_TYPE_SHARED, rank, MPI_INFO_NULL, &node);
  int local = 1;
  MPI_Comm_size(node, &local);
  cpu_set_t mine;
  CPU_ZERO(&mine);
  if (sched_getaffinity(0, sizeof mine, &mine) != 0) CPU_SET(0, &mine);
  std::vector<cpu_set_t> all(static_cast<std::size_t>(local));
  MPI_Allgather(&mine, sizeof(cpu_set_t), MPI_BYTE, all.data(), sizeof(cpu_set_t), MPI_BYTE, node);
  MPI_Comm_free(&node);
  cpu_set_t all_cpus;
  CPU_ZERO(&all_cpus);
  double sum = 0;
  for (cpu_set_t& s : all) {
    CPU_OR(&all_cpus, &all_cpus, &s);
    sum += CPU_COUNT(&s);
  }
  const double share = CPU_COUNT(&mine) * static_cast<double>(CPU_COUNT(&all_cpus)) / std::max(sum, 1.0);
  return std::max(1, static_cast<int>(share + 0.5));
}

// The main thread of every rank runs runs too (the pool has jobs - 1 threads), and does
// the MPI traffic between two runs: no thread only waits for messages, so ranks bound to
// one core each (mpirun's default for few ranks) keep that core busy with runs, and a
// real-time scheduling policy cannot starve the messages. A rank asks for more runs
// before its queue runs dry, so the traffic waits at most one run.

// Rank 0: takes runs from `pending` (its threads and the chunks it hands out alike), and
// writes every row, its own and the other ranks'.
class Server {
 public:
  Server(const Session& mpi, const Study& study, const Inputs& inputs, const Options& options, int jobs,
         Pending& pending, Writer& write)
      : mpi_(mpi),
        study_(study),
        inputs_(inputs),
        options_(options),
        pending_(pending),
        write_(write),
        active_(mpi.size() - 1),
        pool_(study, inputs, options.format, jobs - 1, [&pending] { return pending.take(); }, std::ref(write)) {}

  void run() {
    Clock::time_point talked{};
    while (true) {
      if (Clock::now() - talked >= kTalk) {
        handle_messages();
        talked = Clock::now();
      }
      if (const auto i = pending_.take()) {
        const auto [line, error] = run_line(study_, inputs_, *i, options_.format);
        write_(line, error);
        continue;
      }
      if (active_ == 0 && pool_.finished()) break;
      if (!handle_messages()) std::this_thread::sleep_for(kPoll);
    }
    pool_.join();
  }

 private:
  // Answers every message that has arrived; false if there was none.
  bool handle_messages() {
    bool any = false;
    while (true) {
      int flag = 0;
      MPI_Status st;
      MPI_Iprobe(MPI_ANY_SOURCE, MPI_ANY_TAG, MPI_COMM_WORLD, &flag, &st);
      if (!flag) return any;
      any = true;
      if (st.MPI_TAG == kRequest) {
        give_work(st);
      } else if (st.MPI_TAG == kRow) {
        take_rows(st);
      } else if (st.MPI_TAG == kDone) {
        std::uint64_t sent = 0;
        MPI_Recv(&sent, 1, MPI_UINT64_T, st.MPI_SOURCE, kDone, MPI_COMM_WORLD, MPI_STATUS_IGNORE);
        --active_;
      } else {
        throw std::runtime_error(
            fmt::format("unexpected MPI message (tag {}) from rank {}", st.MPI_TAG, st.MPI_SOURCE));
      }
    }
  }

  // A request for runs: a chunk of them (empty when none is left).
  void give_work(const MPI_Status& st) {
    int want = 0;
    MPI_Recv(&want, 1, MPI_INT, st.MPI_SOURCE, kRequest, MPI_COMM_WORLD, MPI_STATUS_IGNORE);
    // Guided: at most half of the rest spread over the ranks, so the last runs are not
    // all queued on one rank.
    const auto ranks = static_cast<std::size_t>(mpi_.size());
    const std::size_t fair = (pending_.left() + 2 * ranks - 1) / (2 * ranks);
    const std::size_t n = std::max<std::size_t>(1, std::min<std::size_t>(static_cast<std::size_t>(want), fair));
    chunk_.clear();
    for (std::size_t i = 0; i < n; ++i) {
      const auto r = pending_.take();
      if (!r) break;
      chunk_.push_back(*r);
    }
    MPI_Send(chunk_.data(), static_cast<int>(chunk_.size()), MPI_UINT64_T, st.MPI_SOURCE, kWork, MPI_COMM_WORLD);
  }

  // A batch of rows: per row a flag ('1': error row), the line and '\n'.
  void take_rows(const MPI_Status& st) {
    int n = 0;
    MPI_Get_count(&st, MPI_CHAR, &n);
    buf_.resize(static_cast<std::size_t>(n));
    MPI_Recv(buf_.data(), n, MPI_CHAR, st.MPI_SOURCE, kRow, MPI_COMM_WORLD, MPI_STATUS_IGNORE);
    std::size_t pos = 0;
    while (pos < buf_.size()) {
      const std::size_t end = buf_.find('\n', pos);
      if (end == std::string::npos || end == pos) throw std::runtime_error("a malformed row message");
      write_(buf_.substr(pos + 1, end - pos - 1), buf_[pos] == '1');
      pos = end + 1;
    }
  }

  const Session& mpi_;
  const Study& study_;
  const Inputs& inputs_;
  const Options& options_;
  Pending& pending_;
  Writer& write_;
  int active_;  // ranks that have not said they are done
  std::string buf_;
  std::vector<std::uint64_t> chunk_;
  Pool pool_;  // last: its threads start at once and use the members above
};

// Ranks > 0: keeps runs queued (asking rank 0 for chunks), runs them on the pool and on
// this thread, and forwards the rows to rank 0.
class Worker {
 public:
  Worker(const Study& study, const Inputs& inputs, const Options& options, int jobs)
      : study_(study),
        inputs_(inputs),
        format_(options.format),
        want_(16 * jobs),
        pool_(study, inputs, options.format, jobs - 1, [this] { return wait_and_take(); },
              [this](std::string line, bool error) {
                std::lock_guard<std::mutex> lock(mutex_);
                rows_.emplace_back(std::move(line), error);
              }) {}

  // The workers waiting for runs must be let go before the pool joins them (the pool
  // is destroyed after this body), whatever happened.
  ~Worker() {
    {
      std::lock_guard<std::mutex> lock(mutex_);
      closed_ = true;
    }
    work_ready_.notify_all();
  }
  Worker(const Worker&) = delete;
  Worker& operator=(const Worker&) = delete;

  void run() {
    while (true) {
      send_rows(false);
      if (!exhausted_) fetch_work();
      if (const auto i = try_take()) {
        const auto [line, error] = run_line(study_, inputs_, *i, format_);
        add_row(line, error);
        continue;
      }
      if (exhausted_ && pool_.finished()) {
        send_rows(true);
        break;
      }
      send_rows(true);  // idle: nothing to wait for
      std::this_thread::sleep_for(kPoll);
    }
    pool_.join();
    MPI_Send(&sent_, 1, MPI_UINT64_T, 0, kDone, MPI_COMM_WORLD);
  }

 private:
  // For the pool's threads: the next queued run, waiting for one; nullopt once closed.
  std::optional<std::size_t> wait_and_take() {
    std::unique_lock<std::mutex> lock(mutex_);
    work_ready_.wait(lock, [&] { return !queue_.empty() || closed_; });
    return pop();
  }
  // For this thread: the next queued run if there is one.
  std::optional<std::size_t> try_take() {
    std::lock_guard<std::mutex> lock(mutex_);
    return pop();
  }
  std::optional<std::size_t> pop() {  // with mutex_ held
    if (queue_.empty()) return std::nullopt;
    const std::size_t i = queue_.front();
    queue_.pop_front();
    return i;
  }

  // Asks rank 0 for more when fewer than half of `want_` is queued: enough that the
  // round trip (rank 0 looks at its messages every kTalk, between two runs) is hidden
  // behind runs. Queues what arrives; an empty chunk means there is no more.
  void fetch_work() {
    std::size_t queued = 0;
    {
      std::lock_guard<std::mutex> lock(mutex_);
      queued = queue_.size();
    }
    if (!requested_ && queued < static_cast<std::size_t>(want_ / 2)) {
      MPI_Send(&want_, 1, MPI_INT, 0, kRequest, MPI_COMM_WORLD);
      requested_ = true;
    }
    int flag = 0;
    MPI_Status st;
    if (requested_ && (queued == 0 || Clock::now() - probed_ >= kTalk)) {
      MPI_Iprobe(0, kWork, MPI_COMM_WORLD, &flag, &st);
      probed_ = Clock::now();
    }
    if (!flag) return;
    int n = 0;
    MPI_Get_count(&st, MPI_UINT64_T, &n);
    chunk_.resize(static_cast<std::size_t>(n));
    MPI_Recv(chunk_.data(), n, MPI_UINT64_T, 0, kWork, MPI_COMM_WORLD, MPI_STATUS_IGNORE);
    requested_ = false;
    {
      std::lock_guard<std::mutex> lock(mutex_);
      if (n == 0) exhausted_ = closed_ = true;
      for (std::uint64_t i : chunk_) queue_.push_back(static_cast<std::size_t>(i));
    }
    work_ready_.notify_all();
  }

  // Rows go to rank 0 in batches: per row a flag ('1': error row), the line and '\n'.
  void add_row(const std::string& line, bool error) {
    msg_ += error ? '1' : '0';
    msg_ += line;
    msg_ += '\n';
    ++sent_;
  }

  // Sends the batch: now, or once it is large or kTalk has passed since the last one.
  void send_rows(bool now) {
    {
      std::lock_guard<std::mutex> lock(mutex_);
      for (const auto& [line, error] : rows_) add_row(line, error);
      rows_.clear();
    }
    if (msg_.empty() || (!now && Clock::now() - talked_ < kTalk && msg_.size() < (1u << 16))) return;
    MPI_Send(msg_.data(), static_cast<int>(msg_.size()), MPI_CHAR, 0, kRow, MPI_COMM_WORLD);
    msg_.clear();
    talked_ = Clock::now();
  }

  const Study& study_;
  const Inputs& inputs_;
  Format format_;
  const int want_;  // runs asked for at a time
  std::mutex mutex_;
  std::condition_variable work_ready_;
  std::deque<std::size_t> queue_;                   // guarded by mutex_
  bool closed_ = false;                             // guarded by mutex_
  std::deque<std::pair<std::string, bool>> rows_;  // from the pool, guarded by mutex_
  bool requested_ = false, exhausted_ = false;
  std::uint64_t sent_ = 0;
  std::vector<std::uint64_t> chunk_;
  std::string msg_;
  Clock::time_point talked_{}, probed_{};
  Pool pool_;  // last: its threads start at once and use the members above
};

// Runs `step` on rank 0 and tells every rank whether it failed: rank 0 rethrows the
// failure, the other ranks get its exit status (0: it did not fail).
template <class Step>
int on_rank0(const Session& mpi, Step&& step) {
  int status = 0;  // 2: bad input, 1: another failure
  std::string error;
  if (mpi.rank() == 0) {
    try {
      step();
    } catch (const InputError& e) {
      error = e.what();
      status = 2;
    } catch (const std::exception& e) {
      error = e.what();
      status = 1;
    }
  }
  MPI_Bcast(&status, 1, MPI_INT, 0, MPI_COMM_WORLD);
  if (status != 0 && mpi.rank() == 0) {
    if (status == 2) throw InputError(error);
    throw std::runtime_error(error);
  }
  return status;
}

// Threads per rank: --jobs, or default_jobs; at most one per run of the rank's share.
int rank_jobs(const Session& mpi, const Options& options, std::size_t runs) {
  const int jobs = options.jobs > 0 ? options.jobs : default_jobs(mpi.rank());
  const auto ranks = static_cast<std::size_t>(mpi.size());
  return clamp_jobs(jobs, (runs + ranks - 1) / ranks);
}

// Every rank runs runs; rank 0 writes the rows to `out` (open there) and reports.
void run_all(const Session& mpi, const Study& study, const Inputs& inputs, const Options& options, int jobs,
             const std::vector<std::size_t>& pending, std::optional<Output>& out, Summary& summary) {
  if (mpi.rank() != 0) {
    Worker(study, inputs, options, jobs).run();
    return;
  }
  Progress progress(pending.size(), !options.quiet);
  Writer writer(*out, progress);
  Pending queue(pending);
  Server(mpi, study, inputs, options, jobs, queue, writer).run();
  finish(progress, options, summary);
}

}  // namespace

Summary run_mpi(const Study& study, const Options& options) {
  Session mpi;
  const int rank = mpi.rank();
  Summary summary;
  summary.ranks = mpi.size();
  summary.printer = rank == 0;

  // Rank 0 opens the output and decides what to run; a problem there stops every rank.
  std::optional<Output> out;
  Existing existing;
  std::vector<std::size_t> pending;
  summary.status = on_rank0(mpi, [&] {
    existing = open_existing(study, options, out);
    pending = select_runs(study, options, existing, summary);
  });
  if (summary.status != 0) return summary;
  bcast_indices(pending);
  const int jobs = rank_jobs(mpi, options, pending.size());
  if (options.dry_run) {
    if (rank == 0) print_plan(study, options, existing, summary, jobs);
    return summary;
  }

  std::optional<Inputs> inputs;
  try {
    inputs.emplace(study, pending);
  } catch (const InputError&) {
    if (rank == 0) throw;  // every rank meets the same error; rank 0 reports it
    summary.status = 2;
    return summary;
  }
  summary.status = on_rank0(mpi, [&] { start_output(study, options, out); });
  if (summary.status != 0) return summary;
  if (rank == 0) print_plan(study, options, existing, summary, jobs);
  if (pending.empty()) {
    if (rank == 0) print_summary(options, summary);
    return summary;
  }
  try {
    run_all(mpi, study, *inputs, options, jobs, pending, out, summary);
  } catch (const std::exception& e) {
    abort_all(rank, e.what());
  }
  return summary;
}

}  // namespace adagrouper::sweep::detail
