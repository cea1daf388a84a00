// delivery_probe: how long after its last packet a message reaches the program that
// receives it, by how the program receives (MPI polled as the replay does, MPI blocking,
// a TCP socket or UDP datagrams that the kernel wakes the receiver for), with one or both
// directions of a link busy (docs/fidelity.md, "Where the waiting messages' delay is").
//
//   mpirun -np 2 delivery_probe --transport tcp --addresses 10.78.0.1,10.78.0.2
//
// Each rank sends --count messages of --bytes to the other from one thread, the k-th at
// k x --period (rank 1 later by --offset), and receives the other's on another thread.
// Rank 0 prints, per direction, the one-way time (send's start to receive's return; both
// ranks must share a clock: one host, as the namespace testbed) and, for tcp and udp,
// the delivery delay: the receive's return minus the kernel's arrival time of the
// message's last packet (SO_TIMESTAMPNS).
#include <arpa/inet.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <sys/prctl.h>
#include <sys/socket.h>
#include <time.h>
#include <unistd.h>

#include <mpi.h>

#include <algorithm>
#include <cerrno>
#include <cmath>
#include <cstdint>
#include <cstdio>
#include <cstring>
#include <stdexcept>
#include <string>
#include <thread>
#include <utility>
#include <vector>

#include <boost/program_options.hpp>
#include <fmt/format.h>

#include "../cli/cli_util.h"
#include "fd.h"
#include "unit_options.h"

namespace {

namespace po = boost::program_options;
using adagrouper::SizeArg;
using adagrouper::TimeArg;

struct ProbeError : std::runtime_error {
  using std::runtime_error::runtime_error;
};
// Seconds a receive, an accept or a connect may wait: a run ends, never hangs.
constexpr int kLimitS = 10;

// The other rank failed (and says why); this one stops without a message of its own.
struct PeerFailed {};

// Whether both ranks got here without a failure: each passes its own (empty if none);
// throws the own failure, or PeerFailed, so that neither rank waits on the other forever.
void agree(const std::string& failure) {
  int failed = failure.empty() ? 0 : 1, any = 0;
  MPI_Allreduce(&failed, &any, 1, MPI_INT, MPI_MAX, MPI_COMM_WORLD);
  if (failed) throw ProbeError(failure);
  if (any) throw PeerFailed{};
}

// Runs `body`, returning what it threw as a ProbeError's message (empty if nothing).
template <typename F>
std::string failure_of(F&& body) {
  try {
    body();
  } catch (const ProbeError& e) {
    return e.what();
  }
  return {};
}

double clock_s(clockid_t id) {
  timespec ts;
  ::clock_gettime(id, &ts);
  return static_cast<double>(ts.tv_sec) + static_cast<double>(ts.tv_nsec) * 1e-9;
}
double now_s() { return clock_s(CLOCK_MONOTONIC); }

// Sleeps until monotonic time t, with a 1 us timer slack (as the replay's CPU backend).
void nap_until(double t) {
  timespec ts;
  ts.tv_sec = static_cast<time_t>(std::floor(t));
  ts.tv_nsec = static_cast<long>((t - std::floor(t)) * 1e9);
  while (::clock_nanosleep(CLOCK_MONOTONIC, TIMER_ABSTIME, &ts, nullptr) == EINTR) {
  }
}

std::string sys_error(const std::string& call) { return fmt::format("{}: {}", call, std::strerror(errno)); }

using adagrouper::Fd;

// A new socket's descriptor, owned.
Fd new_socket(int type) {
  Fd fd(::socket(AF_INET, type, 0));
  if (!fd.open()) throw ProbeError(sys_error("socket"));
  return fd;
}

// How messages move and are received; the names are --transport's.
enum class Transport { mpi_poll, mpi_wait, tcp, udp };
constexpr std::pair<const char*, Transport> kTransports[] = {
    {"mpi-poll", Transport::mpi_poll}, {"mpi-wait", Transport::mpi_wait}, {"tcp", Transport::tcp}, {"udp", Transport::udp}};

struct Options {
  std::string name;  // of the transport
  Transport transport = Transport::tcp;
  std::size_t bytes = 0;
  int count = 0;
  double period = 0, offset = 0, poll = 0;
  bool one_way = false;
  std::string address[2];
};

sockaddr_in ipv4(const std::string& address, int port) {
  sockaddr_in a{};
  a.sin_family = AF_INET;
  a.sin_port = htons(static_cast<std::uint16_t>(port));
  if (::inet_pton(AF_INET, address.c_str(), &a.sin_addr) != 1)
    throw ProbeError(fmt::format("--addresses: '{}' is not an IPv4 address", address));
  return a;
}

void bind_to(const Fd& fd, const std::string& address, int port) {
  const sockaddr_in a = ipv4(address, port);
  if (::bind(fd.get(), reinterpret_cast<const sockaddr*>(&a), sizeof a) != 0)
    throw ProbeError(sys_error(fmt::format("bind to {}", address)));
}

int port_of(const Fd& fd) {
  sockaddr_in a{};
  socklen_t len = sizeof a;
  ::getsockname(fd.get(), reinterpret_cast<sockaddr*>(&a), &len);
  return ntohs(a.sin_port);
}

// This rank's port swapped for the other's.
int exchange_port(int mine, int peer) {
  int theirs = 0;
  MPI_Sendrecv(&mine, 1, MPI_INT, peer, 0, &theirs, 1, MPI_INT, peer, 0, MPI_COMM_WORLD, MPI_STATUS_IGNORE);
  return theirs;
}

void set_int(const Fd& fd, int level, int name, int value) { ::setsockopt(fd.get(), level, name, &value, sizeof value); }

// Reads into [data, data + size) with recvmsg; returns the bytes read and, where the
// kernel attached one, the arrival time (CLOCK_REALTIME) of the last packet read.
std::size_t read_stamped(const Fd& fd, char* data, std::size_t size, double& arrival, const char* what) {
  iovec iov{data, size};
  char control[256];
  msghdr mh{};
  mh.msg_iov = &iov;
  mh.msg_iovlen = 1;
  mh.msg_control = control;
  mh.msg_controllen = sizeof control;
  const ssize_t n = ::recvmsg(fd.get(), &mh, 0);
  if (n < 0 && (errno == EAGAIN || errno == EWOULDBLOCK))
    throw ProbeError(fmt::format("{}: nothing arrived for {} s (a datagram lost, or the other rank stopped)", what,
                                 kLimitS));
  if (n <= 0) throw ProbeError(n == 0 ? fmt::format("{}: the other rank closed the connection", what)
                                      : sys_error(fmt::format("{} recvmsg", what)));
  for (cmsghdr* c = CMSG_FIRSTHDR(&mh); c != nullptr; c = CMSG_NXTHDR(&mh, c))
    if (c->cmsg_level == SOL_SOCKET && c->cmsg_type == SO_TIMESTAMPNS) {
      timespec ts;
      std::memcpy(&ts, CMSG_DATA(c), sizeof ts);
      arrival = static_cast<double>(ts.tv_sec) + static_cast<double>(ts.tv_nsec) * 1e-9;
    }
  return static_cast<std::size_t>(n);
}

// One direction each way between the two ranks, by one transport. send and receive run
// on different threads at once; each moves one message of `bytes`.
class Link {
 public:
  Link(const Options& o, int me) : o_(o), me_(me), peer_(1 - me), out_(o.bytes, 1), in_(o.bytes) {
    if (o.transport == Transport::tcp) connect_tcp();
    if (o.transport == Transport::udp) open_udp();
  }

  void send(std::uint32_t k) {
    if (is_mpi()) return send_mpi();
    if (o_.transport == Transport::tcp) return write_all(out_.data(), o_.bytes);
    for (std::size_t at = 0; at < o_.bytes; at += kPayload) {  // udp
      const std::size_t n = std::min(kPayload, o_.bytes - at);
      const Header h{k, static_cast<std::uint32_t>(at)};
      std::memcpy(datagram_.data(), &h, sizeof h);
      std::memcpy(datagram_.data() + sizeof h, out_.data() + at, n);
      while (::send(send_.get(), datagram_.data(), sizeof h + n, 0) < 0)
        if (errno != ENOBUFS && errno != EAGAIN) throw ProbeError(sys_error("udp send"));
    }
  }

  // Returns the last packet's arrival in monotonic time, or NaN where it cannot be read.
  double receive(std::uint32_t k) {
    if (is_mpi()) {
      receive_mpi();
      return std::nan("");
    }
    double arrival = std::nan("");
    if (o_.transport == Transport::tcp) {
      for (std::size_t got = 0; got < o_.bytes;)
        got += read_stamped(recv_, in_.data() + got, o_.bytes - got, arrival, "tcp");
    } else {
      for (std::size_t at = 0; at < o_.bytes; at += kPayload) {
        const std::size_t n = read_stamped(recv_, datagram_in_.data(), datagram_in_.size(), arrival, "udp");
        Header h{};
        std::memcpy(&h, datagram_in_.data(), sizeof h);
        if (n != sizeof h + std::min(kPayload, o_.bytes - at) || h.message != k || h.offset != at)
          throw ProbeError(fmt::format("udp: message {} byte {} expected, message {} byte {} came: datagrams were "
                                       "lost or reordered (use --transport tcp, or a lower rate)",
                                       k, at, h.message, h.offset));
      }
    }
    // SO_TIMESTAMPNS is CLOCK_REALTIME; the offset to CLOCK_MONOTONIC read now.
    return arrival - (clock_s(CLOCK_REALTIME) - now_s());
  }

 private:
  struct Header {
    std::uint32_t message, offset;
  };
  static constexpr std::size_t kPayload = 1400 - sizeof(Header);  // one datagram in a 1500-byte frame

  bool is_mpi() const { return o_.transport == Transport::mpi_poll || o_.transport == Transport::mpi_wait; }

  void send_mpi() {
    const int n = static_cast<int>(o_.bytes);
    if (o_.transport == Transport::mpi_wait) {
      MPI_Send(out_.data(), n, MPI_BYTE, peer_, 1, MPI_COMM_WORLD);
      return;
    }
    MPI_Request req;
    MPI_Isend(out_.data(), n, MPI_BYTE, peer_, 1, MPI_COMM_WORLD, &req);
    poll(req);
  }

  void receive_mpi() {
    const int n = static_cast<int>(o_.bytes);
    if (o_.transport == Transport::mpi_wait) {
      MPI_Recv(in_.data(), n, MPI_BYTE, peer_, 1, MPI_COMM_WORLD, MPI_STATUS_IGNORE);
      return;
    }
    MPI_Request req;
    MPI_Irecv(in_.data(), n, MPI_BYTE, peer_, 1, MPI_COMM_WORLD, &req);
    poll(req);
  }

  // As the replay's CPU backend: 8 MPI_Test calls (Open MPI reads its sockets on every
  // 8th progress call), then a nap of --poll.
  void poll(MPI_Request& req) const {
    for (int done = 0;;) {
      for (int i = 0; i < 8 && !done; ++i) MPI_Test(&req, &done, MPI_STATUS_IGNORE);
      if (done) return;
      nap_until(now_s() + o_.poll);
    }
  }

  void write_all(const char* data, std::size_t size) {
    for (std::size_t at = 0; at < size;) {
      const ssize_t n = ::send(send_.get(), data + at, size - at, 0);
      if (n <= 0) throw ProbeError(sys_error("tcp send"));
      at += static_cast<std::size_t>(n);
    }
  }

  // A connection per direction: this rank connects to the other's listener for its sends
  // and accepts the other's connection for its receives (rank 0 connects first).
  void connect_tcp() {
    Fd listener;
    agree(failure_of([&] {
      listener = new_socket(SOCK_STREAM);
      set_int(listener, SOL_SOCKET, SO_REUSEADDR, 1);
      bind_to(listener, o_.address[me_], 0);
      if (::listen(listener.get(), 1) != 0) throw ProbeError(sys_error("listen"));
      set_limit(listener, SO_RCVTIMEO);  // accept
      send_ = new_socket(SOCK_STREAM);
      bind_to(send_, o_.address[me_], 0);
      set_limit(send_, SO_SNDTIMEO);  // connect
    }));
    const int port = exchange_port(port_of(listener), peer_);
    const auto dial = [&] {
      const sockaddr_in to = ipv4(o_.address[peer_], port);
      if (::connect(send_.get(), reinterpret_cast<const sockaddr*>(&to), sizeof to) != 0)
        throw ProbeError(sys_error(fmt::format("connect to {}:{}", o_.address[peer_], port)));
      set_int(send_, IPPROTO_TCP, TCP_NODELAY, 1);
    };
    const auto accept = [&] {
      const int fd = ::accept(listener.get(), nullptr, nullptr);
      if (fd < 0) throw ProbeError(sys_error(fmt::format("accept on {}", o_.address[me_])));
      recv_ = Fd(fd);
      stamp_receives();
    };
    agree(failure_of([&] {
      if (me_ == 0) {
        dial();
        accept();
      } else {
        accept();
        dial();
      }
    }));
  }

  void open_udp() {
    agree(failure_of([&] {
      recv_ = new_socket(SOCK_DGRAM);
      bind_to(recv_, o_.address[me_], 0);
      set_int(recv_, SOL_SOCKET, SO_RCVBUF, 8 << 20);
      stamp_receives();
      send_ = new_socket(SOCK_DGRAM);
      bind_to(send_, o_.address[me_], 0);
      set_int(send_, SOL_SOCKET, SO_SNDBUF, 8 << 20);
    }));
    const int port = exchange_port(port_of(recv_), peer_);
    agree(failure_of([&] {
      const sockaddr_in to = ipv4(o_.address[peer_], port);
      if (::connect(send_.get(), reinterpret_cast<const sockaddr*>(&to), sizeof to) != 0)
        throw ProbeError(sys_error("udp connect"));
    }));
    datagram_.resize(kPayload + sizeof(Header));
    datagram_in_.resize(kPayload + sizeof(Header));
  }

  void stamp_receives() {
    set_int(recv_, SOL_SOCKET, SO_TIMESTAMPNS, 1);
    set_limit(recv_, SO_RCVTIMEO);  // a lost datagram or a stopped rank ends the run
  }

  static void set_limit(const Fd& fd, int which) {
    timeval limit{kLimitS, 0};
    ::setsockopt(fd.get(), SOL_SOCKET, which, &limit, sizeof limit);
  }

  const Options& o_;
  const int me_, peer_;
  std::vector<char> out_, in_, datagram_, datagram_in_;
  Fd send_, recv_;
};

struct Quantiles {
  double p10, p50, p90, max;
};

// Nearest-rank quantiles of the finite values, in ms (NaN where there are none).
Quantiles quantiles_ms(std::vector<double> v) {
  std::erase_if(v, [](double x) { return !std::isfinite(x); });
  if (v.empty()) return {NAN, NAN, NAN, NAN};
  std::sort(v.begin(), v.end());
  const auto at = [&](double q) { return 1e3 * v[static_cast<std::size_t>(q * static_cast<double>(v.size() - 1))]; };
  return {at(0.1), at(0.5), at(0.9), 1e3 * v.back()};
}

std::string ms(double v) { return std::isnan(v) ? "-" : fmt::format("{:.3f}", v); }

// The rank's sends and receives, run; returns what its receives saw: per message, the
// one-way time and the delivery delay (NaN where not measurable).
std::pair<std::vector<double>, std::vector<double>> run(const Options& o, int me) {
  Link link(o, me);
  const int peer = 1 - me;
  const bool sends = !(o.one_way && me == 1), receives = !(o.one_way && me == 0);
  double t0 = now_s() + 0.5;
  MPI_Bcast(&t0, 1, MPI_DOUBLE, 0, MPI_COMM_WORLD);
  agree(std::abs(t0 - now_s()) > 10.0 ? "the ranks' clocks are more than 10 s apart: run both ranks on one host" : "");
  const auto n = static_cast<std::size_t>(o.count);
  std::vector<double> started(n, NAN), done(n, NAN), arrived(n, NAN);
  std::string failures[2];  // the sender's, the receiver's
  auto guarded = [&failures](int i, auto&& body) {
    return [&failures, i, body] {
      ::prctl(PR_SET_TIMERSLACK, 1000UL, 0, 0, 0);
      failures[i] = failure_of(body);
    };
  };
  std::thread sender(guarded(0, [&] {
    for (std::size_t k = 0; sends && k < n; ++k) {
      nap_until(t0 + static_cast<double>(k) * o.period + (me == 1 ? o.offset : 0.0));
      started[k] = now_s();
      link.send(static_cast<std::uint32_t>(k));
    }
  }));
  std::thread receiver(guarded(1, [&] {
    for (std::size_t k = 0; receives && k < n; ++k) {
      arrived[k] = link.receive(static_cast<std::uint32_t>(k));
      done[k] = now_s();
    }
  }));
  sender.join();
  receiver.join();
  agree(failures[1].empty() ? failures[0] : failures[1]);
  std::vector<double> peer_started(n);
  MPI_Sendrecv(started.data(), o.count, MPI_DOUBLE, peer, 2, peer_started.data(), o.count, MPI_DOUBLE, peer, 2,
               MPI_COMM_WORLD, MPI_STATUS_IGNORE);
  std::vector<double> one_way(n), delay(n);
  for (std::size_t k = 0; k < n; ++k) {
    one_way[k] = done[k] - peer_started[k];
    delay[k] = done[k] - arrived[k];
  }
  return {one_way, delay};
}

void report(const std::vector<double>& one_way, const std::vector<double>& delay, int from, int to) {
  const Quantiles a = quantiles_ms(one_way), d = quantiles_ms(delay);
  fmt::print("{} -> {}     {:>8} {:>8} {:>8} {:>8}    {:>8} {:>8} {:>8}\n", from, to, ms(a.p10), ms(a.p50), ms(a.p90),
             ms(a.max), ms(d.p50), ms(d.p90), ms(d.max));
}

std::vector<std::string> split_addresses(const std::string& text) {
  const auto comma = text.find(',');
  if (comma == std::string::npos || text.find(',', comma + 1) != std::string::npos)
    throw ProbeError(fmt::format("--addresses: two addresses, rank 0's and rank 1's (A0,A1), got '{}'", text));
  return {text.substr(0, comma), text.substr(comma + 1)};
}

}  // namespace

int main(int argc, char** argv) {
  po::options_description opts(
      "delivery_probe: how long after its last packet a message reaches the program that receives it\n"
      "Usage: mpirun -np 2 delivery_probe [OPTIONS]\n\n"
      "Each rank sends --count messages of --bytes to the other from one thread, the k-th at\n"
      "k x --period (rank 1 later by --offset; with --one-way rank 1 sends nothing), and receives\n"
      "the other's on a second thread. Rank 0 prints, per direction, the one-way time (the send's\n"
      "start to the receive's return; the ranks must share a clock: one host) and, for tcp and\n"
      "udp, the delivery delay: the receive's return minus the kernel's arrival time of the\n"
      "message's last packet (SO_TIMESTAMPNS). On the namespace testbed (tools/scripts/netns.sh):\n"
      "  tools/scripts/netns.sh mpirun -np 2 -- build/tools/bench/delivery_probe --transport tcp \\\n"
      "      --addresses 10.78.0.1,10.78.0.2\n\nOptions");
  // clang-format off
  opts.add_options()
    ("help,h", "show this help")
    ("transport", po::value<std::string>()->default_value("tcp"),
     "how messages move and are received: mpi-poll (MPI_Irecv, then 8 MPI_Test calls every --poll: "
     "the replay's CPU backend), mpi-wait (MPI_Send, MPI_Recv), tcp (a connection per direction, "
     "blocking recv), udp (1400-byte datagrams, blocking recv; a lost one ends the run)")
    ("bytes", po::value<SizeArg>()->default_value(SizeArg{160000}), "message size (units accepted: 160kB)")
    ("count", po::value<int>()->default_value(200), "messages each way")
    ("period", po::value<TimeArg>()->default_value(TimeArg{0.01}, "10ms"), "time between a rank's sends")
    ("offset", po::value<TimeArg>()->default_value(TimeArg{0.005}, "5ms"),
     "rank 1's sends start this much after rank 0's (units accepted: 500us)")
    ("one-way", po::bool_switch(), "only rank 0 sends")
    ("poll", po::value<TimeArg>()->default_value(TimeArg{20e-6}, "20us"), "mpi-poll: the nap between polls")
    ("addresses", po::value<std::string>()->default_value("127.0.0.1,127.0.0.1"),
     "tcp, udp: the addresses rank 0 and rank 1 listen and send from (A0,A1)");
  // clang-format on
  po::variables_map vm;
  if (const int rc = adagrouper::cli::parse_main_options(argc, argv, opts, "delivery_probe", vm); rc >= 0) return rc;
  Options o;
  try {
    o.name = vm["transport"].as<std::string>();
    const auto* t = std::find_if(std::begin(kTransports), std::end(kTransports),
                                 [&](const auto& entry) { return o.name == entry.first; });
    if (t == std::end(kTransports))
      throw ProbeError(fmt::format("--transport: mpi-poll, mpi-wait, tcp or udp, got '{}'", o.name));
    o.transport = t->second;
    const double bytes = vm["bytes"].as<SizeArg>().value;
    if (!(bytes >= 1 && bytes <= 1 << 30)) throw ProbeError("--bytes: from 1 byte to 1 GiB");
    o.bytes = static_cast<std::size_t>(bytes);
    o.count = vm["count"].as<int>();
    if (o.count < 1 || o.count > 1000000) throw ProbeError("--count: from 1 to 1000000");
    o.period = vm["period"].as<TimeArg>().value;
    o.offset = vm["offset"].as<TimeArg>().value;
    o.poll = vm["poll"].as<TimeArg>().value;
    if (!(o.period > 0) || !(o.offset >= 0) || !(o.poll >= 0))
      throw ProbeError("--period must be positive, --offset and --poll at least 0");
    o.one_way = vm["one-way"].as<bool>();
    const auto addresses = split_addresses(vm["addresses"].as<std::string>());
    for (int r = 0; r < 2; ++r) {
      ipv4(addresses[static_cast<std::size_t>(r)], 0);
      o.address[r] = addresses[static_cast<std::size_t>(r)];
    }
  } catch (const ProbeError& e) {
    std::fprintf(stderr, "delivery_probe: %s\n", e.what());
    return 2;
  }

  int provided = 0;
  MPI_Init_thread(&argc, &argv, MPI_THREAD_MULTIPLE, &provided);
  int me = 0, size = 0;
  MPI_Comm_rank(MPI_COMM_WORLD, &me);
  MPI_Comm_size(MPI_COMM_WORLD, &size);
  int rc = 0;
  try {
    if (size != 2) throw ProbeError(fmt::format("runs on 2 ranks (mpirun -np 2), not {}", size));
    if (provided < MPI_THREAD_MULTIPLE) throw ProbeError("the MPI library does not provide MPI_THREAD_MULTIPLE");
    const auto [one_way, delay] = run(o, me);
    std::vector<double> theirs(2 * one_way.size());
    if (me == 1) {
      std::vector<double> both(one_way);
      both.insert(both.end(), delay.begin(), delay.end());
      MPI_Send(both.data(), static_cast<int>(both.size()), MPI_DOUBLE, 0, 3, MPI_COMM_WORLD);
    } else {
      MPI_Recv(theirs.data(), static_cast<int>(theirs.size()), MPI_DOUBLE, 1, 3, MPI_COMM_WORLD, MPI_STATUS_IGNORE);
      fmt::print("delivery_probe: {}, {} messages of {} bytes each way every {} s, rank 1 {}\n", o.name, o.count,
                 o.bytes, o.period, o.one_way ? "receiving only" : fmt::format("{} s later", o.offset));
      fmt::print("           one-way ms                             delivery after the last packet, ms\n"
                 "direction       p10      p50      p90      max         p50      p90      max\n");
      const auto half = theirs.begin() + static_cast<std::ptrdiff_t>(one_way.size());
      report({theirs.begin(), half}, {half, theirs.end()}, 0, 1);
      if (!o.one_way) report(one_way, delay, 1, 0);
    }
  } catch (const ProbeError& e) {
    if (size == 2)
      std::fprintf(stderr, "delivery_probe: rank %d: %s\n", me, e.what());
    else if (me == 0)
      std::fprintf(stderr, "delivery_probe: %s\n", e.what());
    rc = 2;
  } catch (const PeerFailed&) {
    rc = 2;
  }
  MPI_Finalize();
  return rc;
}
