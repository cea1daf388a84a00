// Inside run_sweep (runner.cpp, mpi.cpp): the worker pool, the output file, the progress
// line and the choice of what to run.
#pragma once

#include <algorithm>
#include <atomic>
#include <chrono>
#include <cstddef>
#include <exception>
#include <functional>
#include <mutex>
#include <optional>
#include <span>
#include <string>
#include <thread>
#include <utility>
#include <vector>

#include "sweep.h"

namespace adagrouper::sweep::detail {

// Runs one run (an index into study.runs): its row as a line, and whether it is an
// error row.
std::pair<std::string, bool> run_line(const Study& study, const Inputs& inputs, std::size_t run, Format format);

// `jobs` threads (0: none); each takes the next run (an index into study.runs) from `next` until
// it returns nullopt, runs it and hands its row to `sink` (from the worker thread; the
// sink synchronizes). A failure other than a run's own error (which is a row) stops
// every worker; join() rethrows it.
class Pool {
 public:
  using Next = std::function<std::optional<std::size_t>()>;
  using Sink = std::function<void(std::string line, bool error)>;

  Pool(const Study& study, const Inputs& inputs, Format format, int jobs, Next next, Sink sink);
  ~Pool();
  Pool(const Pool&) = delete;
  Pool& operator=(const Pool&) = delete;

  // All workers have returned (every row has been handed to the sink).
  bool finished() const { return running_.load() == 0; }
  void join();

 private:
  void work();

  const Study& study_;
  const Inputs& inputs_;
  Format format_;
  Next next_;
  Sink sink_;
  std::atomic<int> running_{0};
  std::atomic<bool> stop_{false};
  std::mutex failure_mutex_;
  std::exception_ptr failure_;
  std::vector<std::thread> threads_;
};

// The output, open for appending: a regular file (created if new) locked (flock) against
// a second sweep, a device or FIFO as it is, or stdout ("-").
class Output {
 public:
  Output(std::filesystem::path path, Format format, std::string header);
  ~Output();
  Output(const Output&) = delete;
  Output& operator=(const Output&) = delete;

  // Opens again (after read_existing rewrote the file) and writes the CSV header if
  // the file is empty.
  void reopen();
  void start();
  void append(const std::string& line);  // line + '\n' in one write

 private:
  void open();
  std::filesystem::path path_;
  Format format_;
  std::string header_;
  int fd_ = -1;
  bool owned_ = false;    // fd_ is ours to close (not stdout)
  bool regular_ = false;  // a regular file: resumable, gets the header only when empty
};

// "sweep: 340/1000 runs, 85.2 runs/s, ETA 8 s, 2 errors" on stderr: rewritten in place
// on a terminal (at most 5 times a second), a new line every 10 s otherwise.
class Progress {
 public:
  Progress(std::size_t total, bool enabled);
  void add(bool error);
  void finish();
  std::size_t done() const { return done_; }
  std::size_t errors() const { return errors_; }
  double elapsed_s() const;

 private:
  void print(bool final);
  std::size_t total_, done_ = 0, errors_ = 0;
  bool enabled_, tty_;
  std::chrono::steady_clock::time_point start_, last_;
  std::size_t last_width_ = 0;
};

// The runs to do (indices into study.runs), handed out in order to whichever thread
// asks first.
class Pending {
 public:
  explicit Pending(std::span<const std::size_t> runs) : runs_(runs) {}
  std::optional<std::size_t> take() {
    const std::size_t i = next_.fetch_add(1);
    if (i >= runs_.size()) return std::nullopt;
    return runs_[i];
  }
  // Runs not taken yet.
  std::size_t left() const { return runs_.size() - std::min(next_.load(), runs_.size()); }

 private:
  std::span<const std::size_t> runs_;
  std::atomic<std::size_t> next_{0};
};

// Appends rows to the output and counts them on the progress line, from any thread.
class Writer {
 public:
  Writer(Output& out, Progress& progress) : out_(out), progress_(progress) {}
  void operator()(const std::string& line, bool error) {
    std::lock_guard<std::mutex> lock(mutex_);
    out_.append(line);
    progress_.add(error);
  }

 private:
  std::mutex mutex_;
  Output& out_;
  Progress& progress_;
};

// Reads an existing output for resuming (scan_existing); only a regular file has one.
// Unless this is a dry run, the file is first opened into `out` and locked, then
// repaired (repair_existing) and opened again when --retry-errors rewrote it. A dry run
// changes nothing.
Existing open_existing(const Study& study, const Options& options, std::optional<Output>& out);

// Throws InputError naming --output when the output is the spec, one of its pipeline
// files or one of its network files (same device and inode).
void check_inputs(const Study& study, const Options& options);
// Creates the output if open_existing found none, and writes the CSV header into an
// empty one: once the inputs are known to be good.
void start_output(const Study& study, const Options& options, std::optional<Output>& out);

// Worker threads for `runs` runs: `jobs`, but at least 1 and at most one per run.
int clamp_jobs(int jobs, std::size_t runs);

// The runs of this shard that the output does not hold yet (indices into study.runs,
// in spec order), and the counts for the summary.
std::vector<std::size_t> select_runs(const Study& study, const Options& options, const Existing& existing,
                                     Summary& summary);

// The lines run_sweep prints: what it is about to do, and what it did.
void print_plan(const Study& study, const Options& options, const Existing& existing, const Summary& summary, int jobs);
void print_summary(const Options& options, const Summary& summary);
// After the last row: the final progress line, the counts in `summary`, the summary line.
void finish(Progress& progress, const Options& options, Summary& summary);

#ifdef ADAGROUPER_HAVE_MPI
Summary run_mpi(const Study& study, const Options& options);
#endif

}  // namespace adagrouper::sweep::detail
