// The harness's runtime (calib/runtime.h): MPI session, checked calls, watchdog, JSONL writer.
#include "runtime.h"

#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstring>
#include <functional>

#include <fmt/format.h>

namespace adagrouper::calib {

void fail_call(const Identity& id, std::string_view call, std::string_view detail) {
  throw CalibError(fmt::format("{} failed on rank {} (host {}): {}", call, id.rank, id.host, detail));
}

double now_s() {
  return std::chrono::duration<double>(std::chrono::steady_clock::now().time_since_epoch()).count();
}

namespace {

std::string host_name() {
  std::array<char, 256> buf{};
  if (::gethostname(buf.data(), buf.size() - 1) != 0) return "unknown-host";
  return std::string(buf.data());
}

// FNV-1a: equal host names give equal hashes on every rank.
std::uint64_t hash_of(std::string_view s) {
  std::uint64_t h = 1469598103934665603ull;
  for (const char c : s) {
    h ^= static_cast<unsigned char>(c);
    h *= 1099511628211ull;
  }
  return h;
}

std::string mpi_error_string(int rc) {
  std::array<char, MPI_MAX_ERROR_STRING> buf{};
  int len = 0;
  if (MPI_Error_string(rc, buf.data(), &len) != MPI_SUCCESS) return fmt::format("MPI error {}", rc);
  return std::string(buf.data(), static_cast<std::size_t>(len));
}

}  // namespace

Mpi::Mpi(int& argc, char**& argv) {
  id_.host = host_name();
  int initialized = 0;
  MPI_Initialized(&initialized);
  if (!initialized) {
    int provided = 0;
    const int rc = MPI_Init_thread(&argc, &argv, MPI_THREAD_MULTIPLE, &provided);
    if (rc != MPI_SUCCESS) fail_call(id_, "MPI_Init_thread", mpi_error_string(rc));
    finalize_ = true;
    if (provided < MPI_THREAD_MULTIPLE)
      fail_call(id_, "MPI_Init_thread",
                fmt::format("this MPI provides thread level {}, and the calibration needs MPI_THREAD_MULTIPLE "
                            "(build Open MPI with thread support)",
                            provided));
  }
  check(MPI_Comm_set_errhandler(MPI_COMM_WORLD, MPI_ERRORS_RETURN), "MPI_Comm_set_errhandler");
  check(MPI_Comm_rank(MPI_COMM_WORLD, &id_.rank), "MPI_Comm_rank");
  check(MPI_Comm_size(MPI_COMM_WORLD, &id_.size), "MPI_Comm_size");
  // Local rank, as nccl-tests computes it: the ranks below this one on the same host.
  std::vector<std::uint64_t> hashes(static_cast<std::size_t>(id_.size));
  std::uint64_t mine = hash_of(id_.host);
  check(MPI_Allgather(&mine, 1, MPI_UINT64_T, hashes.data(), 1, MPI_UINT64_T, MPI_COMM_WORLD), "MPI_Allgather");
  id_.local_rank = 0;
  id_.local_size = 0;
  for (int r = 0; r < id_.size; ++r) {
    if (hashes[static_cast<std::size_t>(r)] != mine) continue;
    if (r < id_.rank) ++id_.local_rank;
    ++id_.local_size;
  }
}

Mpi::~Mpi() {
  if (finalize_) MPI_Finalize();
}

void Mpi::check(int rc, std::string_view call) const {
  if (rc != MPI_SUCCESS) fail_call(id_, call, mpi_error_string(rc));
}

void Mpi::barrier() const { check(MPI_Barrier(MPI_COMM_WORLD), "MPI_Barrier"); }

bool Mpi::any(bool flag) const {
  int in = flag ? 1 : 0, out = 0;
  check(MPI_Allreduce(&in, &out, 1, MPI_INT, MPI_LOR, MPI_COMM_WORLD), "MPI_Allreduce");
  return out != 0;
}

double Mpi::max(double x) const {
  double out = 0;
  check(MPI_Allreduce(&x, &out, 1, MPI_DOUBLE, MPI_MAX, MPI_COMM_WORLD), "MPI_Allreduce");
  return out;
}

double Mpi::min(double x) const {
  double out = 0;
  check(MPI_Allreduce(&x, &out, 1, MPI_DOUBLE, MPI_MIN, MPI_COMM_WORLD), "MPI_Allreduce");
  return out;
}

void Mpi::bcast(void* data, std::size_t bytes, int root) const {
  if (bytes > static_cast<std::size_t>(INT32_MAX)) fail_call(id_, "MPI_Bcast", "more than 2 GiB");
  check(MPI_Bcast(data, static_cast<int>(bytes), MPI_BYTE, root, MPI_COMM_WORLD), "MPI_Bcast");
}

std::vector<std::string> Mpi::gather(const std::string& mine, int root) const {
  if (mine.size() > static_cast<std::size_t>(INT32_MAX)) fail_call(id_, "MPI_Gatherv", "more than 2 GiB");
  int len = static_cast<int>(mine.size());
  std::vector<int> lens(id_.rank == root ? static_cast<std::size_t>(id_.size) : 0);
  check(MPI_Gather(&len, 1, MPI_INT, lens.data(), 1, MPI_INT, root, MPI_COMM_WORLD), "MPI_Gather");
  std::vector<int> displs(lens.size());
  std::size_t total = 0;
  for (std::size_t r = 0; r < lens.size(); ++r) {
    if (total > static_cast<std::size_t>(INT32_MAX)) fail_call(id_, "MPI_Gatherv", "more than 2 GiB in all");
    displs[r] = static_cast<int>(total);
    total += static_cast<std::size_t>(lens[r]);
  }
  std::string all(total, '\0');
  check(MPI_Gatherv(mine.data(), len, MPI_CHAR, all.data(), lens.data(), displs.data(), MPI_CHAR, root,
                    MPI_COMM_WORLD),
        "MPI_Gatherv");
  std::vector<std::string> out;
  for (std::size_t r = 0; r < lens.size(); ++r)
    out.push_back(all.substr(static_cast<std::size_t>(displs[r]), static_cast<std::size_t>(lens[r])));
  return out;
}

std::string Mpi::first_error(const std::string& mine) const {
  const std::vector<std::string> all = gather(mine, 0);
  std::string first;
  for (const std::string& e : all)
    if (!e.empty()) {
      first = e;
      break;
    }
  std::uint64_t len = first.size();
  bcast(&len, sizeof len, 0);
  first.resize(static_cast<std::size_t>(len));
  if (len > 0) bcast(first.data(), first.size(), 0);
  return first;
}

MPI_Comm Mpi::split(int color, int key) const {
  MPI_Comm comm = MPI_COMM_NULL;
  check(MPI_Comm_split(MPI_COMM_WORLD, color, key, &comm), "MPI_Comm_split");
  if (comm != MPI_COMM_NULL) check(MPI_Comm_set_errhandler(comm, MPI_ERRORS_RETURN), "MPI_Comm_set_errhandler");
  return comm;
}

void Mpi::free(MPI_Comm& comm) const {
  if (comm != MPI_COMM_NULL) MPI_Comm_free(&comm);
  comm = MPI_COMM_NULL;
}

void Mpi::abort(int code) const {
  std::fflush(stdout);
  std::fflush(stderr);
  MPI_Abort(MPI_COMM_WORLD, code);
  std::_Exit(code);  // MPI_Abort does not return; if it does, do not hang
}

// ---------------------------------------------------------------------------------
// Watchdog

Watchdog::Watchdog(const Identity& id, double timeout_s, Abort abort)
    : id_(id), timeout_s_(timeout_s), abort_(std::move(abort)) {
  if (timeout_s_ > 0) thread_ = std::thread([this] { run(); });
}

Watchdog::Watchdog(const Mpi& mpi, double timeout_s) : Watchdog(mpi.id(), timeout_s, [&mpi] { mpi.abort(3); }) {}

Watchdog::~Watchdog() {
  {
    std::lock_guard<std::mutex> lock(mutex_);
    stop_ = true;
  }
  wake_.notify_all();
  if (thread_.joinable()) thread_.join();
}

void Watchdog::add_abort_hook(std::function<void()> hook) {
  std::lock_guard<std::mutex> lock(mutex_);
  hooks_.push_back(std::move(hook));
}

Watchdog::Guard Watchdog::guard(const char* what, int peer) {
  if (timeout_s_ <= 0) return Guard(nullptr, -1);
  for (int i = 0; i < kSlots; ++i) {
    bool expected = false;
    Slot& s = slots_[static_cast<std::size_t>(i)];
    if (!s.busy.load(std::memory_order_relaxed) && s.busy.compare_exchange_strong(expected, true)) {
      s.what.store(what);
      s.peer.store(peer);
      s.since.store(now_s());
      return Guard(this, i);
    }
  }
  // More than kSlots calls in flight at once: not watched (never happens in our modes).
  return Guard(nullptr, -1);
}

Watchdog::Guard::~Guard() {
  if (dog_ != nullptr && slot_ >= 0) dog_->slots_[static_cast<std::size_t>(slot_)].busy.store(false);
}

void Watchdog::run() {
  std::unique_lock<std::mutex> lock(mutex_);
  const auto tick = std::chrono::milliseconds(std::clamp(static_cast<int>(timeout_s_ * 100), 10, 200));
  while (!stop_) {
    wake_.wait_for(lock, tick);
    if (stop_) return;
    const double now = now_s();
    for (const Slot& s : slots_) {
      if (!s.busy.load()) continue;
      const double waited = now - s.since.load();
      if (waited > timeout_s_ && s.busy.load()) {
        lock.unlock();
        expire(s, waited);
        return;
      }
    }
  }
}

void Watchdog::expire(const Slot& s, double waited) {
  const int peer = s.peer.load();
  const std::string with = peer >= 0 ? fmt::format(" with rank {}", peer) : std::string();
  std::fprintf(stderr,
               "adagrouper-calib: rank %d (host %s): %s%s has not finished after %.1f s (--timeout %g); "
               "aborting the job\n",
               id_.rank, id_.host.c_str(), s.what.load(), with.c_str(), waited, timeout_s_);
  std::fflush(stderr);
  std::vector<std::function<void()>> hooks;
  {
    std::lock_guard<std::mutex> lock(mutex_);
    hooks = hooks_;
  }
  for (auto& h : hooks) h();
  abort_();
}

// ---------------------------------------------------------------------------------
// JsonlWriter

JsonlWriter::JsonlWriter(const std::filesystem::path& path) : path_(path) {
  std::error_code ec;
  if (path.has_parent_path()) std::filesystem::create_directories(path.parent_path(), ec);
  file_ = std::fopen(path.c_str(), "w");
  if (file_ == nullptr)
    throw CalibError(fmt::format("{}: cannot open for writing: {}", path.string(), std::strerror(errno)));
}

JsonlWriter::~JsonlWriter() {
  if (file_ != nullptr) std::fclose(file_);
}

void JsonlWriter::write(const nlohmann::ordered_json& line) {
  const std::string text = line.dump();
  std::lock_guard<std::mutex> lock(mutex_);
  if (std::fwrite(text.data(), 1, text.size(), file_) != text.size() || std::fputc('\n', file_) == EOF ||
      std::fflush(file_) != 0)
    throw CalibError(fmt::format("{}: write failed: {}", path_.string(), std::strerror(errno)));
}

}  // namespace adagrouper::calib
