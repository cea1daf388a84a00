// Inside run_sweep (runner.cpp, mpi.cpp): the worker pool, the output file, the progress
// line and the choice of what to run.
#pragma once

#include <atomic>
#include <chrono>
#include <cstddef>
#include <exception>
#include <functional>
#include <mutex>
#include <optional>
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

// The output file, open for appending and locked (flock) against a second sweep.
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

// The runs of this shard that the output does not hold yet (indices into study.runs,
// in spec order), and the counts for the summary.
std::vector<std::size_t> select_runs(const Study& study, const Options& options, const Existing& existing,
                                     Summary& summary);

// The lines run_sweep prints: what it is about to do, and what it did.
void print_plan(const Study& study, const Options& options, const Existing& existing, const Summary& summary, int jobs);
void print_summary(const Options& options, const Summary& summary);

#ifdef ADAGROUPER_HAVE_MPI
Summary run_mpi(const Study& study, const Options& options);
#endif

}  // namespace adagrouper::sweep::detail
