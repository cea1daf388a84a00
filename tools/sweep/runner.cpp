// run_sweep in one process: resume, shard, a pool of threads, the streamed output.
#include "runner.h"

#include <fcntl.h>
#include <fmt/format.h>
#include <sched.h>
#include <sys/file.h>
#include <unistd.h>

#include <cerrno>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <iostream>
#include <stdexcept>
#include <system_error>
#include <unordered_set>

namespace adagrouper::sweep {

namespace fs = std::filesystem;

int available_cpus() {
  cpu_set_t set;
  CPU_ZERO(&set);
  if (sched_getaffinity(0, sizeof set, &set) == 0) return std::max(1, CPU_COUNT(&set));
  return std::max(1u, std::thread::hardware_concurrency());
}

bool built_with_mpi() {
#ifdef ADAGROUPER_HAVE_MPI
  return true;
#else
  return false;
#endif
}

int launcher_rank() {
  for (const char* name : {"OMPI_COMM_WORLD_RANK", "PMIX_RANK"}) {
    if (const char* v = std::getenv(name)) {
      char* end = nullptr;
      const long r = std::strtol(v, &end, 10);
      if (end != v && *end == '\0' && r >= 0) return static_cast<int>(r);
    }
  }
  return -1;
}

namespace detail {

std::pair<std::string, bool> run_line(const Study& study, const Inputs& inputs, std::size_t run, Format format) {
  const nlohmann::ordered_json row = run_row(study, inputs, study.runs[run]);
  return {format_row(row, format), !row["error"].is_null()};
}

// --- Pool ------------------------------------------------------------------------------

Pool::Pool(const Study& study, const Inputs& inputs, Format format, int jobs, Next next, Sink sink)
    : study_(study), inputs_(inputs), format_(format), next_(std::move(next)), sink_(std::move(sink)) {
  running_ = jobs;
  threads_.reserve(static_cast<std::size_t>(jobs));
  for (int j = 0; j < jobs; ++j) threads_.emplace_back([this] { work(); });
}

Pool::~Pool() {
  stop_ = true;
  for (auto& t : threads_)
    if (t.joinable()) t.join();
}

void Pool::work() {
  try {
    while (!stop_) {
      const std::optional<std::size_t> i = next_();
      if (!i) break;
      auto [line, error] = run_line(study_, inputs_, *i, format_);
      sink_(std::move(line), error);
    }
  } catch (...) {
    std::lock_guard<std::mutex> lock(failure_mutex_);
    if (!failure_) failure_ = std::current_exception();
    stop_ = true;
  }
  --running_;
}

void Pool::join() {
  for (auto& t : threads_)
    if (t.joinable()) t.join();
  if (failure_) std::rethrow_exception(failure_);
}

// --- Output ------------------------------------------------------------------------------

Output::Output(fs::path path, Format format, std::string header)
    : path_(std::move(path)), format_(format), header_(std::move(header)) {
  open();
}

Output::~Output() {
  if (fd_ >= 0 && owned_) ::close(fd_);
}

void Output::open() {
  const OutputTarget target = resolve_output("--output", path_.string());
  regular_ = target.kind == OutputTarget::Kind::regular || target.kind == OutputTarget::Kind::absent;
  if (target.kind == OutputTarget::Kind::standard_output) {
    fd_ = STDOUT_FILENO;
    owned_ = false;
    return;
  }
  // A regular file is appended to (created if new); a device or FIFO is written as it is.
  const int flags = O_WRONLY | O_APPEND | O_CLOEXEC | O_NOCTTY | (regular_ ? O_CREAT : 0);
  fd_ = ::open(target.path.c_str(), flags, 0666);
  if (fd_ < 0) throw std::runtime_error(fmt::format("{}: cannot write: {}", path_.string(), std::strerror(errno)));
  owned_ = true;
  // A lock held elsewhere is a failure of this run (status 1), not bad input; a file
  // system without locks does without.
  if (::flock(fd_, LOCK_EX | LOCK_NB) != 0 && errno == EWOULDBLOCK) {
    ::close(fd_);
    fd_ = -1;
    throw std::runtime_error(
        fmt::format("{}: another adagrouper sweep is writing this file (give each shard its own output)",
                    path_.string()));
  }
}

void Output::reopen() {
  if (fd_ >= 0 && owned_) ::close(fd_);
  fd_ = -1;
  open();
}

void Output::start() {
  if (format_ != Format::csv) return;
  // A regular file gets the header when it is empty; a device or stdout always.
  if (!regular_ || ::lseek(fd_, 0, SEEK_END) == 0) append(header_);
}

void Output::append(const std::string& line) {
  std::string buf;
  buf.reserve(line.size() + 1);
  buf += line;
  buf += '\n';
  const char* p = buf.data();
  std::size_t left = buf.size();
  while (left > 0) {
    const ssize_t n = ::write(fd_, p, left);
    if (n < 0) {
      if (errno == EINTR) continue;
      throw std::runtime_error(fmt::format("{}: cannot write: {}", path_.string(), std::strerror(errno)));
    }
    p += n;
    left -= static_cast<std::size_t>(n);
  }
}

// --- Progress ----------------------------------------------------------------------------

Progress::Progress(std::size_t total, bool enabled)
    : total_(total), enabled_(enabled), tty_(::isatty(STDERR_FILENO) != 0) {
  start_ = last_ = std::chrono::steady_clock::now();
}

double Progress::elapsed_s() const {
  return std::chrono::duration<double>(std::chrono::steady_clock::now() - start_).count();
}

namespace {

std::string duration_text(double s) {
  if (!std::isfinite(s)) return "?";
  const long t = std::lround(s);
  if (t < 60) return fmt::format("{} s", t);
  if (t < 3600) return fmt::format("{} min {} s", t / 60, t % 60);
  return fmt::format("{} h {} min", t / 3600, (t % 3600) / 60);
}

}  // namespace

void Progress::add(bool error) {
  ++done_;
  if (error) ++errors_;
  if (!enabled_) return;
  const auto now = std::chrono::steady_clock::now();
  const double since = std::chrono::duration<double>(now - last_).count();
  if (since < (tty_ ? 0.2 : 10.0)) return;
  last_ = now;
  print(false);
}

void Progress::print(bool final) {
  const double t = elapsed_s();
  const double rate = t > 0 ? static_cast<double>(done_) / t : 0.0;
  std::string line = fmt::format("sweep: {}/{} runs, {:.1f} runs/s", done_, total_, rate);
  if (!final) line += ", ETA " + duration_text(rate > 0 ? static_cast<double>(total_ - done_) / rate : NAN);
  if (errors_ > 0) line += fmt::format(", {} error{}", errors_, errors_ == 1 ? "" : "s");
  if (tty_) {
    const std::size_t width = line.size();
    if (width < last_width_) line.append(last_width_ - width, ' ');
    last_width_ = width;
    std::cerr << '\r' << line << (final ? "\n" : "") << std::flush;
  } else if (!final) {
    std::cerr << line << '\n' << std::flush;
  }
}

void Progress::finish() {
  if (enabled_ && tty_ && done_ > 0) print(true);
}

// --- the output and what to run ---------------------------------------------------------

Existing open_existing(const Study& study, const Options& options, std::optional<Output>& out) {
  // Only a regular file can hold rows to resume from; stdout, a device or a FIFO is
  // written as it is, and nothing is read from it.
  check_inputs(study, options);
  const OutputTarget target = resolve_output("--output", options.output.string());
  if (target.kind != OutputTarget::Kind::regular) return {};
  // Locked before it is read; changed only once it is known to be this spec's output,
  // and never by a dry run.
  if (!options.dry_run) out.emplace(options.output, options.format, csv_header(columns(study)));
  Existing existing = scan_existing(target.path, options.format, columns(study), options.retry_errors);
  if (out && repair_existing(target.path, existing)) out->reopen();
  return existing;
}

void check_inputs(const Study& study, const Options& options) {
  const OutputTarget target = resolve_output("--output", options.output.string());
  if (target.kind != OutputTarget::Kind::regular) return;
  auto refuse = [&](const std::string& what, const fs::path& path) {
    if (file_id(path) == target.id)
      throw InputError(fmt::format("--output: {} is also an input ({} {}); write to another file",
                                   options.output.string(), what, path.string()));
  };
  refuse("the spec", study.source);
  const fs::path dir = fs::path(study.source).parent_path();
  for (const PipelineInput& p : study.pipelines)
    refuse("pipeline", fs::path(p.label).is_absolute() ? fs::path(p.label) : dir / p.label);
  for (const NetworkInput& n : study.networks) refuse("network", n.source);
}

void start_output(const Study& study, const Options& options, std::optional<Output>& out) {
  if (!out) out.emplace(options.output, options.format, csv_header(columns(study)));
  out->start();
}

int clamp_jobs(int jobs, std::size_t runs) {
  return std::max(1, std::min<int>(jobs, static_cast<int>(std::max<std::size_t>(runs, 1))));
}


std::vector<std::size_t> select_runs(const Study& study, const Options& options, const Existing& existing,
                                     Summary& summary) {
  summary.runs = study.runs.size();
  if (!existing.done.empty()) {
    std::unordered_set<std::string> ids;
    for (const RunSpec& run : study.runs) ids.insert(run.id);
    for (const std::string& id : existing.done) summary.foreign += ids.count(id) ? 0 : 1;
  }
  std::vector<std::size_t> pending;
  for (const RunSpec& run : study.runs) {
    if (run.index % static_cast<std::size_t>(options.shard.count) != static_cast<std::size_t>(options.shard.index))
      continue;
    ++summary.selected;
    if (existing.done.count(run.id)) {
      ++summary.skipped;
      continue;
    }
    pending.push_back(run.index);
  }
  return pending;
}

void print_plan(const Study& study, const Options& options, const Existing& existing, const Summary& summary,
                int jobs) {
  if (options.quiet && !options.dry_run) return;
  std::string line = fmt::format("sweep: {}: {} runs", study.source, summary.runs);
  if (options.shard.count > 1)
    line += fmt::format(", {} in shard {}/{}", summary.selected, options.shard.index, options.shard.count);
  if (existing.exists) {
    line += fmt::format("; {} already in {}", summary.skipped, options.output.string());
    if (existing.truncated) line += " (its partial last line was cut off)";
    if (summary.foreign > 0) line += fmt::format(", and {} rows of runs not in this spec (kept)", summary.foreign);
  }
  const std::size_t remaining = summary.selected - summary.skipped;
  if (options.dry_run) {
    line += fmt::format("; would run {}", remaining);
  } else {
    line += fmt::format("; running {} on {} thread{}", remaining, jobs, jobs == 1 ? "" : "s");
    if (summary.ranks > 1) line += fmt::format(" per rank x {} MPI ranks", summary.ranks);
  }
  std::cerr << line << '\n';
}

void print_summary(const Options& options, const Summary& summary) {
  if (options.quiet || options.dry_run) return;
  std::string line = fmt::format("sweep: {} runs in {:.2f} s ({:.1f} runs/s)", summary.ran, summary.wall_s,
                                 summary.wall_s > 0 ? static_cast<double>(summary.ran) / summary.wall_s : 0.0);
  if (summary.errors > 0) line += fmt::format(", {} with an error (see the error column)", summary.errors);
  line += fmt::format("; {} has {} of the {} runs{}", options.output.string(), summary.skipped + summary.ran,
                      summary.selected, options.shard.count > 1 ? " of this shard" : "");
  std::cerr << line << '\n';
}

void finish(Progress& progress, const Options& options, Summary& summary) {
  progress.finish();
  summary.ran = progress.done();
  summary.errors = progress.errors();
  summary.wall_s = progress.elapsed_s();
  print_summary(options, summary);
}

}  // namespace detail

#ifndef ADAGROUPER_HAVE_MPI
namespace {

// A rank other than 0 under mpirun in a build without MPI: rank 0 runs everything.
Summary idle_rank(int rank) {
  std::cerr << fmt::format(
      "adagrouper sweep: rank {}: this build has no MPI; rank 0 runs every run, this rank "
      "does nothing\n",
      rank);
  Summary s;
  s.printer = false;
  return s;
}

}  // namespace
#endif

Summary run_sweep(const Study& study, const Options& options) {
  using namespace detail;
  const int rank = launcher_rank();
  if (rank >= 0) {
#ifdef ADAGROUPER_HAVE_MPI
    return run_mpi(study, options);
#else
    if (rank > 0) return idle_rank(rank);
    std::cerr << "adagrouper sweep: started by mpirun, but this build has no MPI (install libopenmpi-dev and "
                 "reconfigure with -Dmpi=enabled); running every run in this process\n";
#endif
  }

  Summary summary;
  // An existing output is locked before it is read; a new one is created only once the
  // inputs are known to be good.
  std::optional<Output> out;
  const Existing existing = open_existing(study, options, out);
  const std::vector<std::size_t> pending = select_runs(study, options, existing, summary);
  const int jobs = clamp_jobs(options.jobs > 0 ? options.jobs : available_cpus(), pending.size());
  if (options.dry_run) {
    print_plan(study, options, existing, summary, jobs);
    return summary;
  }
  const Inputs inputs(study, pending);
  start_output(study, options, out);
  print_plan(study, options, existing, summary, jobs);
  if (pending.empty()) {
    print_summary(options, summary);
    return summary;
  }

  Progress progress(pending.size(), !options.quiet);
  Writer writer(*out, progress);
  Pending queue(pending);
  Pool pool(study, inputs, options.format, jobs, [&queue] { return queue.take(); }, std::ref(writer));
  pool.join();
  finish(progress, options, summary);
  return summary;
}

}  // namespace adagrouper::sweep
