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
#include <filesystem>
#include <iostream>
#include <mutex>
#include <optional>
#include <stdexcept>
#include <string>
#include <system_error>
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

void bcast_string(std::string& s) {
  std::uint64_t n = s.size();
  MPI_Bcast(&n, 1, MPI_UINT64_T, 0, MPI_COMM_WORLD);
  s.resize(n);
  MPI_Bcast(s.data(), static_cast<int>(n), MPI_CHAR, 0, MPI_COMM_WORLD);
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

// Rank 0: takes runs from `next` (its threads and the chunks it hands out alike), and
// writes every row, its own and the other ranks'.
void serve(const Session& mpi, const Study& study, const Inputs& inputs, const Options& options, int jobs,
           const std::vector<std::size_t>& pending, Output& out, Progress& progress) {
  std::mutex mutex;
  std::atomic<std::size_t> next{0};
  auto take = [&]() -> std::optional<std::size_t> {
    const std::size_t i = next.fetch_add(1);
    if (i >= pending.size()) return std::nullopt;
    return pending[i];
  };
  auto write = [&](const std::string& line, bool error) {
    std::lock_guard<std::mutex> lock(mutex);
    out.append(line);
    progress.add(error);
  };
  Pool pool(study, inputs, options.format, jobs - 1, take, write);
  int active = mpi.size() - 1;
  std::string buf;
  std::vector<std::uint64_t> chunk;
  // Answers every message that has arrived; false if there was none.
  auto handle_messages = [&] {
    bool any = false;
    while (true) {
      int flag = 0;
      MPI_Status st;
      MPI_Iprobe(MPI_ANY_SOURCE, MPI_ANY_TAG, MPI_COMM_WORLD, &flag, &st);
      if (!flag) return any;
      any = true;
      if (st.MPI_TAG == kRequest) {
        int want = 0;
        MPI_Recv(&want, 1, MPI_INT, st.MPI_SOURCE, kRequest, MPI_COMM_WORLD, MPI_STATUS_IGNORE);
        // Guided: at most half of the rest spread over the ranks, so the last runs
        // are not all queued on one rank.
        const std::size_t taken = std::min(next.load(), pending.size());
        const std::size_t fair = (pending.size() - taken + 2 * static_cast<std::size_t>(mpi.size()) - 1) /
                                 (2 * static_cast<std::size_t>(mpi.size()));
        const std::size_t n = std::max<std::size_t>(1, std::min<std::size_t>(static_cast<std::size_t>(want), fair));
        chunk.clear();
        for (std::size_t i = 0; i < n; ++i) {
          const auto r = take();
          if (!r) break;
          chunk.push_back(*r);
        }
        MPI_Send(chunk.data(), static_cast<int>(chunk.size()), MPI_UINT64_T, st.MPI_SOURCE, kWork, MPI_COMM_WORLD);
      } else if (st.MPI_TAG == kRow) {
        int n = 0;
        MPI_Get_count(&st, MPI_CHAR, &n);
        buf.resize(static_cast<std::size_t>(n));
        MPI_Recv(buf.data(), n, MPI_CHAR, st.MPI_SOURCE, kRow, MPI_COMM_WORLD, MPI_STATUS_IGNORE);
        // A batch of rows: per row a flag ('1': error row), the line and '\n'.
        std::size_t pos = 0;
        while (pos < buf.size()) {
          const std::size_t end = buf.find('\n', pos);
          if (end == std::string::npos || end == pos) throw std::runtime_error("a malformed row message");
          write(buf.substr(pos + 1, end - pos - 1), buf[pos] == '1');
          pos = end + 1;
        }
      } else if (st.MPI_TAG == kDone) {
        std::uint64_t sent = 0;
        MPI_Recv(&sent, 1, MPI_UINT64_T, st.MPI_SOURCE, kDone, MPI_COMM_WORLD, MPI_STATUS_IGNORE);
        --active;
      } else {
        throw std::runtime_error(
            fmt::format("unexpected MPI message (tag {}) from rank {}", st.MPI_TAG, st.MPI_SOURCE));
      }
    }
  };
  Clock::time_point talked{};
  while (true) {
    if (Clock::now() - talked >= kTalk) {
      handle_messages();
      talked = Clock::now();
    }
    if (const auto i = take()) {
      const auto [line, error] = run_line(study, inputs, *i, options.format);
      write(line, error);
      continue;
    }
    if (active == 0 && pool.finished()) break;
    if (!handle_messages()) std::this_thread::sleep_for(kPoll);
  }
  pool.join();
}

// Ranks > 0: keep runs queued (asking rank 0 for chunks), run them on the pool and on
// this thread, and forward the rows to rank 0.
void work(const Study& study, const Inputs& inputs, const Options& options, int jobs) {
  std::mutex mutex;
  std::condition_variable work_ready;
  std::deque<std::size_t> queue;
  bool closed = false;
  std::deque<std::pair<std::string, bool>> rows;
  auto take = [&]() -> std::optional<std::size_t> {
    std::unique_lock<std::mutex> lock(mutex);
    work_ready.wait(lock, [&] { return !queue.empty() || closed; });
    if (queue.empty()) return std::nullopt;
    const std::size_t i = queue.front();
    queue.pop_front();
    return i;
  };
  auto try_take = [&]() -> std::optional<std::size_t> {
    std::lock_guard<std::mutex> lock(mutex);
    if (queue.empty()) return std::nullopt;
    const std::size_t i = queue.front();
    queue.pop_front();
    return i;
  };
  Pool pool(study, inputs, options.format, jobs - 1, take, [&](std::string line, bool error) {
    std::lock_guard<std::mutex> lock(mutex);
    rows.emplace_back(std::move(line), error);
  });
  // Whatever happens below, the workers waiting for runs must be let go before the pool
  // joins them (this is destroyed first).
  struct Release {
    std::mutex& mutex;
    bool& closed;
    std::condition_variable& ready;
    ~Release() {
      {
        std::lock_guard<std::mutex> lock(mutex);
        closed = true;
      }
      ready.notify_all();
    }
  } release{mutex, closed, work_ready};

  // Asked for when fewer than half of it is queued: enough that the round trip to rank 0
  // (which looks at its messages every kTalk, between two runs) is hidden behind runs.
  const int want = 16 * jobs;
  bool requested = false, exhausted = false;
  std::uint64_t sent = 0;
  std::vector<std::uint64_t> chunk;
  std::string msg;
  // Rows go to rank 0 in batches: per row a flag ('1': error row), the line and '\n'.
  auto add_row = [&](const std::string& line, bool error) {
    msg += error ? '1' : '0';
    msg += line;
    msg += '\n';
    ++sent;
  };
  Clock::time_point talked{}, probed{};
  auto send_rows = [&](bool now) {
    {
      std::lock_guard<std::mutex> lock(mutex);
      for (const auto& [line, error] : rows) add_row(line, error);
      rows.clear();
    }
    if (msg.empty() || (!now && Clock::now() - talked < kTalk && msg.size() < (1u << 16))) return;
    MPI_Send(msg.data(), static_cast<int>(msg.size()), MPI_CHAR, 0, kRow, MPI_COMM_WORLD);
    msg.clear();
    talked = Clock::now();
  };
  while (true) {
    send_rows(false);
    if (!exhausted) {
      std::size_t queued = 0;
      {
        std::lock_guard<std::mutex> lock(mutex);
        queued = queue.size();
      }
      if (!requested && queued < static_cast<std::size_t>(want / 2)) {
        MPI_Send(&want, 1, MPI_INT, 0, kRequest, MPI_COMM_WORLD);
        requested = true;
      }
      int flag = 0;
      MPI_Status st;
      if (requested && (queued == 0 || Clock::now() - probed >= kTalk)) {
        MPI_Iprobe(0, kWork, MPI_COMM_WORLD, &flag, &st);
        probed = Clock::now();
      }
      if (flag) {
        int n = 0;
        MPI_Get_count(&st, MPI_UINT64_T, &n);
        chunk.resize(static_cast<std::size_t>(n));
        MPI_Recv(chunk.data(), n, MPI_UINT64_T, 0, kWork, MPI_COMM_WORLD, MPI_STATUS_IGNORE);
        requested = false;
        {
          std::lock_guard<std::mutex> lock(mutex);
          if (n == 0) exhausted = closed = true;
          for (std::uint64_t i : chunk) queue.push_back(static_cast<std::size_t>(i));
        }
        work_ready.notify_all();
      }
    }
    if (const auto i = try_take()) {
      const auto [line, error] = run_line(study, inputs, *i, options.format);
      add_row(line, error);
      continue;
    }
    if (exhausted && pool.finished()) {
      send_rows(true);
      break;
    }
    send_rows(true);  // idle: nothing to wait for
    std::this_thread::sleep_for(kPoll);
  }
  pool.join();
  MPI_Send(&sent, 1, MPI_UINT64_T, 0, kDone, MPI_COMM_WORLD);
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
  std::string error;
  int status = 0;  // 2: bad input, 1: another failure
  if (rank == 0) {
    try {
      std::error_code ec;
      if (!options.dry_run && std::filesystem::exists(options.output, ec))
        out.emplace(options.output, options.format, csv_header(columns(study)));
      existing = read_existing(options.output, options.format, columns(study), options.retry_errors);
      if (out && existing.exists && options.retry_errors && existing.error_rows > 0) out->reopen();
      pending = select_runs(study, options, existing, summary);
    } catch (const InputError& e) {
      error = e.what();
      status = 2;
    } catch (const std::exception& e) {
      error = e.what();
      status = 1;
    }
  }
  MPI_Bcast(&status, 1, MPI_INT, 0, MPI_COMM_WORLD);
  bcast_string(error);
  if (status != 0) {
    if (rank == 0) {
      if (status == 2) throw InputError(error);
      throw std::runtime_error(error);
    }
    summary.status = status;
    return summary;
  }
  bcast_indices(pending);
  int jobs = options.jobs > 0 ? options.jobs : default_jobs(rank);
  const std::size_t share =
      (pending.size() + static_cast<std::size_t>(mpi.size()) - 1) / static_cast<std::size_t>(mpi.size());
  jobs = std::max(1, std::min<int>(jobs, static_cast<int>(std::max<std::size_t>(share, 1))));
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
  if (rank == 0) {
    try {
      if (!out) out.emplace(options.output, options.format, csv_header(columns(study)));
      out->start();
    } catch (const InputError& e) {
      error = e.what();
      status = 2;
    } catch (const std::exception& e) {
      error = e.what();
      status = 1;
    }
  }
  MPI_Bcast(&status, 1, MPI_INT, 0, MPI_COMM_WORLD);
  if (status != 0) {
    if (rank == 0) {
      if (status == 2) throw InputError(error);
      throw std::runtime_error(error);
    }
    summary.status = status;
    return summary;
  }
  if (rank == 0) print_plan(study, options, existing, summary, jobs);
  if (pending.empty()) {
    if (rank == 0) print_summary(options, summary);
    return summary;
  }

  try {
    if (rank == 0) {
      Progress progress(pending.size(), !options.quiet);
      serve(mpi, study, *inputs, options, jobs, pending, *out, progress);
      progress.finish();
      summary.ran = progress.done();
      summary.errors = progress.errors();
      summary.wall_s = progress.elapsed_s();
      print_summary(options, summary);
    } else {
      work(study, *inputs, options, jobs);
    }
  } catch (const std::exception& e) {
    abort_all(rank, e.what());
  }
  return summary;
}

}  // namespace adagrouper::sweep::detail
