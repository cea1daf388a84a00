// What every mode of adagrouper-calib (replay included) shares: the MPI session and
// this process's identity, checked calls whose errors name the call, rank and host, the
// watchdog that aborts a stuck transfer after --timeout, and JSONL files flushed line
// by line.
//
//   Mpi mpi(argc, argv);                       // MPI_Init_thread(MPI_THREAD_MULTIPLE)
//   Watchdog dog(mpi, options.timeout_s);      // MPI_Abort after its abort hooks
//   { auto g = dog.guard("ncclSend", peer); ... }   // a stuck call is named
//   JsonlWriter raw(dir / "raw" / "rank-0.jsonl");  raw.write(line);   // flushed
#pragma once

#include <mpi.h>

#include <array>
#include <atomic>
#include <condition_variable>
#include <cstdint>
#include <cstdio>
#include <filesystem>
#include <functional>
#include <mutex>
#include <stdexcept>
#include <string>
#include <string_view>
#include <thread>
#include <vector>

#include <nlohmann/json.hpp>

namespace adagrouper::calib {

// Who this process is: its MPI rank, and its rank among the processes on its host
// (from a gather of host-name hashes, as nccl-tests does): the GPU it uses.
struct Identity {
  int rank = 0, size = 1;
  int local_rank = 0, local_size = 1;
  std::string host;
};

// A call that failed (MPI, CUDA, cuBLAS, NCCL) or a run that cannot go on. The message
// is one line: "CALL failed on rank R (host H): DETAIL".
class CalibError : public std::runtime_error {
 public:
  using std::runtime_error::runtime_error;
};

// Throws CalibError "CALL failed on rank R (host H): DETAIL".
[[noreturn]] void fail_call(const Identity& id, std::string_view call, std::string_view detail);

// Seconds on this host's steady clock (comparable between the processes of one host;
// between hosts, only differences are meaningful).
double now_s();

// The MPI session: MPI_Init_thread with MPI_THREAD_MULTIPLE (the CPU backend's streams
// and the p2p mode's channel threads call MPI concurrently) and MPI_Finalize. Every
// call is checked: MPI_COMM_WORLD returns errors instead of aborting.
class Mpi {
 public:
  Mpi(int& argc, char**& argv);
  ~Mpi();
  Mpi(const Mpi&) = delete;
  Mpi& operator=(const Mpi&) = delete;

  const Identity& id() const { return id_; }
  int rank() const { return id_.rank; }
  int size() const { return id_.size; }
  MPI_Comm world() const { return MPI_COMM_WORLD; }

  // Throws CalibError naming `call` when rc is not MPI_SUCCESS.
  void check(int rc, std::string_view call) const;

  void barrier() const;
  // True on every rank when `flag` is true on any rank (MPI_Allreduce, MPI_LOR).
  bool any(bool flag) const;
  double max(double x) const;
  double min(double x) const;
  void bcast(void* data, std::size_t bytes, int root) const;
  // Rank `root` gets every rank's string in rank order; the others get {}.
  std::vector<std::string> gather(const std::string& mine, int root) const;
  // Every rank gets the first non-empty `mine` in rank order ("" when all are empty):
  // lets all ranks stop together, with one message, on an error found by some.
  std::string first_error(const std::string& mine) const;
  // A communicator of the ranks that pass the same color (collective over
  // MPI_COMM_WORLD; MPI_UNDEFINED gives MPI_COMM_NULL). Errors are returned, not fatal.
  MPI_Comm split(int color, int key) const;
  void free(MPI_Comm& comm) const;
  // Ends every process of the job (MPI_Abort on MPI_COMM_WORLD).
  [[noreturn]] void abort(int code) const;

 private:
  Identity id_;
  bool finalize_ = false;
};

// Aborts the job when a guarded call (a transfer, a synchronization) takes longer than
// the timeout: prints "adagrouper-calib: rank R (host H): CALL with rank P has not
// finished after T s (--timeout T); aborting", runs the abort hooks (ncclCommAbort of
// every communicator), then MPI_Abort. A timeout <= 0 disables it.
class Watchdog {
 public:
  // Called on expiry after the hooks; by default Mpi::abort(3). Tests pass their own.
  using Abort = std::function<void()>;
  Watchdog(const Identity& id, double timeout_s, Abort abort);
  Watchdog(const Mpi& mpi, double timeout_s);
  ~Watchdog();
  Watchdog(const Watchdog&) = delete;
  Watchdog& operator=(const Watchdog&) = delete;

  // Hooks run, in order, before the abort (set them up before the guarded work).
  void add_abort_hook(std::function<void()> hook);
  double timeout_s() const { return timeout_s_; }

  class Guard {
   public:
    Guard(Guard&& other) noexcept : dog_(other.dog_), slot_(other.slot_) { other.dog_ = nullptr; }
    Guard(const Guard&) = delete;
    Guard& operator=(const Guard&) = delete;
    Guard& operator=(Guard&&) = delete;
    ~Guard();

   private:
    friend class Watchdog;
    Guard(Watchdog* dog, int slot) : dog_(dog), slot_(slot) {}
    Watchdog* dog_;
    int slot_;
  };
  // Watches `what` (a string literal: kept by pointer) until the guard goes out of
  // scope; `peer` (-1: none) is named in the message. Allocates nothing.
  [[nodiscard]] Guard guard(const char* what, int peer = -1);

 private:
  static constexpr int kSlots = 64;
  struct Slot {
    std::atomic<bool> busy{false};
    std::atomic<double> since{0};
    std::atomic<const char*> what{nullptr};
    std::atomic<int> peer{-1};
  };
  void run();
  void expire(const Slot& s, double waited);

  Identity id_;
  double timeout_s_;
  Abort abort_;
  std::vector<std::function<void()>> hooks_;
  std::array<Slot, kSlots> slots_;
  std::mutex mutex_;
  std::condition_variable wake_;
  bool stop_ = false;
  std::thread thread_;
};

// A JSONL file written one line at a time, each line flushed as it is written, so that a
// crash or a killed rank loses nothing already measured. Safe to call from several
// threads. The directory is created.
class JsonlWriter {
 public:
  explicit JsonlWriter(const std::filesystem::path& path);
  ~JsonlWriter();
  JsonlWriter(const JsonlWriter&) = delete;
  JsonlWriter& operator=(const JsonlWriter&) = delete;

  void write(const nlohmann::ordered_json& line);
  const std::filesystem::path& path() const { return path_; }

 private:
  std::filesystem::path path_;
  std::FILE* file_;
  std::mutex mutex_;
};

}  // namespace adagrouper::calib
