// The CPU backend's replay work (docs/fidelity.md): what runs on the CPU streams'
// worker threads (Stream::submit) in place of the backend's busy kernel and blocking
// channel calls, so that the replay leaves the CPU to the other ranks on the same host.
//
//   compute op: sleeps until its spin (default 200 us) before its end, then spins: it lasts its
//               duration to a few microseconds and occupies no core while it waits;
//   send/recv:  MPI_Isend / MPI_Irecv on a communicator of the channel's two ranks,
//               completed by MPI_Test every poll period (default 20 us; a sleep in
//               between, so a transfer ends up to one period late, plus the thread's
//               wake-up: 65 us at least on the test VM): separate
//               send and recv threads (the streams' workers) under MPI_THREAD_MULTIPLE.
//
// A busy spin and blocking MPI calls (what the backend's own Stream::busy and Channel do)
// poll a core each; with several ranks on one host, they take turns on the cores and
// every op ends a scheduler time slice late.
#pragma once

#include <cstddef>
#include <functional>
#include <memory>
#include <vector>

#include <mpi.h>

#include "backend.h"
#include "runtime.h"

namespace adagrouper::calib {

// Work for the compute stream: ends `seconds` after it starts; sleeps until `spin_s`
// before its end and spins the rest (the wake-up of a sleep is late by tens of us).
std::function<void(Kernels&)> cpu_compute_task(double seconds, double spin_s);

// Work that puts the thread running it (a stream's worker) under SCHED_FIFO at
// `priority`; throws CalibError naming `id` where the system refuses.
std::function<void(Kernels&)> cpu_fifo_task(int priority, const Identity& id);

// Dynamic W fill at run time (`replay --w-fill runtime`), by the simulator's rule
// (docs/model.md section 14): before each listed op (every op of the program but the W
// ops), the compute stream's worker runs the oldest pending W ops while it holds
// `max_pending` of them or the listed op's input has not arrived yet; an I op's W
// becomes pending when the I ends, and the iteration's last ones run before its
// optimizer step. Each decision is made on the worker, when the stage is free, from
// whether the event that marks the input's arrival has been reached. The W ops' starts
// and ends are read from the worker's clock (now_s), the clock of the cpu backend's
// events. Only the compute stream's tasks touch it while the stream runs.
class CpuWFill {
 public:
  // `durations`: per compute op of the stage's program; times are kept for `iterations`
  // iterations; `max_pending`: P (the largest size_t: unlimited); `spin_s` as cpu_compute_task.
  CpuWFill(std::vector<double> durations, std::size_t iterations, std::size_t max_pending, double spin_s);

  // Work for the compute stream before a listed op of iteration i whose input arrives
  // with `input` (null: it has none to wait for, or a local one).
  std::function<void(Kernels&)> before(std::size_t i, Event* input);
  // Work after an I op: W op w becomes pending.
  std::function<void(Kernels&)> pend(std::size_t w);
  // Work at the end of iteration i: the pending W ops, back to back.
  std::function<void(Kernels&)> drain(std::size_t i);

  // When W op w of iteration i started and ended (now_s); read once the stream is synchronized.
  double start(std::size_t i, std::size_t w) const { return start_[i * durations_.size() + w]; }
  double end(std::size_t i, std::size_t w) const { return end_[i * durations_.size() + w]; }

 private:
  void run_oldest(std::size_t i, Kernels& k);

  std::vector<double> durations_;
  std::size_t max_pending_;
  double spin_s_;
  std::vector<std::size_t> pending_;  // a FIFO: the W ops from pending_head_ on
  std::size_t pending_head_ = 0;
  std::vector<double> start_, end_;   // per (iteration, compute op), W ops only
};

// Directed channels between ranks, each over a communicator of its own (collective:
// every rank constructs it with the same specs), used from stream workers.
class CpuReplayLinks {
 public:
  // `poll_s`: the period of MPI_Test on a transfer in flight.
  CpuReplayLinks(const Mpi& mpi, Watchdog& watchdog, const std::vector<ChannelSpec>& specs, std::size_t max_bytes,
                 double poll_s);
  ~CpuReplayLinks();
  CpuReplayLinks(const CpuReplayLinks&) = delete;
  CpuReplayLinks& operator=(const CpuReplayLinks&) = delete;

  // Work for a send (recv) stream: moves `bytes` over channel specs[i], of which this
  // rank is the sender (receiver).
  std::function<void(Kernels&)> send_task(std::size_t i, std::size_t bytes);
  std::function<void(Kernels&)> recv_task(std::size_t i, std::size_t bytes);

 private:
  struct End {
    MPI_Comm comm = MPI_COMM_NULL;
    bool sender = false;
    int peer = -1;  // the other end's world rank
    std::vector<char> buffer;
  };
  End& end(std::size_t i, bool send, std::size_t bytes);
  void transfer(End& end, std::size_t bytes);

  const Mpi& mpi_;
  Watchdog& dog_;
  const double poll_s_;
  std::vector<End> ends_;  // one per spec (comm null where this rank is no end)
};

}  // namespace adagrouper::calib
