// The CPU backend's replay work (calib/replay_cpu.h): sleep-then-spin ops, polled MPI transfers.
#include "replay_cpu.h"

#include <pthread.h>
#include <sched.h>
#include <sys/prctl.h>
#include <time.h>

#include <climits>
#include <cmath>
#include <cstring>
#include <utility>

#include <fmt/format.h>

namespace adagrouper::calib {

namespace {

// MPI_Test calls per poll of a transfer. Open MPI (4.1) reads its TCP sockets only on
// every 8th call of its progress engine (opal_progress), so one call per poll saw a
// message that had arrived up to 8 polls late; 8 in a row read them at every poll
// (docs/fidelity.md, "Messages that a waiting op needs").
constexpr int kTestsPerPoll = 8;

// Sleeps with a 1 us timer slack (the default 50 us would blur every wake-up).
void nap_until(double t) {
  thread_local bool slack_set = false;
  if (!slack_set) {
    ::prctl(PR_SET_TIMERSLACK, 1000UL, 0, 0, 0);
    slack_set = true;
  }
  // now_s() is std::chrono::steady_clock, which is CLOCK_MONOTONIC on Linux.
  timespec ts;
  ts.tv_sec = static_cast<time_t>(std::floor(t));
  ts.tv_nsec = static_cast<long>((t - std::floor(t)) * 1e9);
  while (::clock_nanosleep(CLOCK_MONOTONIC, TIMER_ABSTIME, &ts, nullptr) == EINTR) {
  }
}

}  // namespace

std::function<void(Kernels&)> cpu_compute_task(double seconds, double spin_s) {
  return [seconds, spin_s](Kernels&) {
    const double end = now_s() + seconds;
    if (seconds > spin_s) nap_until(end - spin_s);
    while (now_s() < end) {
    }
  };
}

std::function<void(Kernels&)> cpu_fifo_task(int priority, const Identity& id) {
  return [priority, id](Kernels&) {
    sched_param param{};
    param.sched_priority = priority;
    if (const int err = ::pthread_setschedparam(::pthread_self(), SCHED_FIFO, &param); err != 0)
      fail_call(id, "pthread_setschedparam",
                fmt::format("--compute-fifo {}: SCHED_FIFO refused ({}; needs CAP_SYS_NICE or root, and "
                            "an RLIMIT_RTPRIO of at least {})",
                            priority, std::strerror(err), priority));
  };
}

CpuWFill::CpuWFill(std::vector<double> durations, std::size_t iterations, std::size_t max_pending, double spin_s)
    : durations_(std::move(durations)), max_pending_(max_pending), spin_s_(spin_s) {
  start_.assign(iterations * durations_.size(), 0.0);
  end_ = start_;
  pending_.reserve(durations_.size());
}

void CpuWFill::run_oldest(std::size_t i, Kernels& k) {
  const std::size_t w = pending_[pending_head_++];
  if (pending_head_ == pending_.size()) {  // empty: start again at the front
    pending_.clear();
    pending_head_ = 0;
  }
  const std::size_t at = i * durations_.size() + w;
  start_[at] = now_s();
  cpu_compute_task(durations_[w], spin_s_)(k);
  end_[at] = now_s();
}

std::function<void(Kernels&)> CpuWFill::before(std::size_t i, Event* input) {
  return [this, i, input](Kernels& k) {
    for (std::size_t n = pending_.size() - pending_head_; n > 0; --n) {
      if (n < max_pending_ && (input == nullptr || input->done())) break;
      run_oldest(i, k);
    }
  };
}

std::function<void(Kernels&)> CpuWFill::pend(std::size_t w) {
  return [this, w](Kernels&) { pending_.push_back(w); };
}

std::function<void(Kernels&)> CpuWFill::drain(std::size_t i) {
  return [this, i](Kernels& k) {
    while (pending_head_ < pending_.size()) run_oldest(i, k);
  };
}

CpuReplayLinks::CpuReplayLinks(const Mpi& mpi, Watchdog& dog, const std::vector<ChannelSpec>& specs,
                               std::size_t max_bytes, double poll_s)
    : mpi_(mpi), dog_(dog), poll_s_(poll_s), ends_(specs.size()) {
  const int me = mpi.rank();
  for (std::size_t i = 0; i < specs.size(); ++i) {
    const ChannelSpec& s = specs[i];
    const bool member = me == s.from || me == s.to;
    // In each communicator the sender is rank 0, the receiver rank 1.
    MPI_Comm comm = mpi.split(member ? static_cast<int>(i) : MPI_UNDEFINED, me == s.from ? 0 : 1);
    if (!member) continue;
    End& e = ends_[i];
    e.comm = comm;
    e.sender = me == s.from;
    e.peer = e.sender ? s.to : s.from;
    e.buffer.assign(std::max<std::size_t>(max_bytes, 1), 0);
  }
}

CpuReplayLinks::~CpuReplayLinks() {
  for (End& e : ends_) mpi_.free(e.comm);
}

CpuReplayLinks::End& CpuReplayLinks::end(std::size_t i, bool send, std::size_t bytes) {
  if (i >= ends_.size() || ends_[i].comm == MPI_COMM_NULL || ends_[i].sender != send)
    fail_call(mpi_.id(), send ? "replay send" : "replay recv",
              fmt::format("this rank is not the {} of channel {}", send ? "sender" : "receiver", i));
  if (bytes > ends_[i].buffer.size() || bytes > static_cast<std::size_t>(INT_MAX))
    fail_call(mpi_.id(), send ? "replay send" : "replay recv",
              fmt::format("{} bytes on channel {}, whose buffer holds {}", bytes, i, ends_[i].buffer.size()));
  return ends_[i];
}

std::function<void(Kernels&)> CpuReplayLinks::send_task(std::size_t i, std::size_t bytes) {
  End& e = end(i, true, bytes);
  return [this, &e, bytes](Kernels&) { transfer(e, bytes); };
}

std::function<void(Kernels&)> CpuReplayLinks::recv_task(std::size_t i, std::size_t bytes) {
  End& e = end(i, false, bytes);
  return [this, &e, bytes](Kernels&) { transfer(e, bytes); };
}

void CpuReplayLinks::transfer(End& e, std::size_t bytes) {
  const char* call = e.sender ? "MPI_Isend" : "MPI_Irecv";
  auto guard = dog_.guard(call, e.peer);
  MPI_Request req = MPI_REQUEST_NULL;
  const int n = static_cast<int>(bytes);
  if (e.sender) {
    mpi_.check(MPI_Isend(e.buffer.data(), n, MPI_BYTE, 1, 0, e.comm, &req), call);
  } else {
    mpi_.check(MPI_Irecv(e.buffer.data(), n, MPI_BYTE, 0, 0, e.comm, &req), call);
  }
  MPI_Status status;
  int done = 0;
  for (;;) {
    for (int k = 0; k < kTestsPerPoll && !done; ++k) mpi_.check(MPI_Test(&req, &done, &status), "MPI_Test");
    if (done) break;
    nap_until(now_s() + poll_s_);
  }
  if (!e.sender) {
    int got = 0;
    mpi_.check(MPI_Get_count(&status, MPI_BYTE, &got), "MPI_Get_count");
    if (got != n)
      fail_call(mpi_.id(), "MPI_Irecv",
                fmt::format("a message of {} bytes from rank {} where the plan says {}", got, e.peer, n));
  }
}

}  // namespace adagrouper::calib
