// Output files (io.h): resolving a path, temporaries beside their files, the commit, and
// the signal handler that removes temporaries when the process is interrupted.
#include "io.h"

#include <fcntl.h>
#include <pthread.h>
#include <sys/stat.h>
#include <unistd.h>

#include <array>
#include <atomic>
#include <cerrno>
#include <climits>
#include <csignal>
#include <cstring>
#include <iostream>
#include <mutex>
#include <stdexcept>
#include <string>
#include <utility>

#include <fmt/format.h>

#include "error.h"
#include "fd.h"

namespace adagrouper {

namespace fs = std::filesystem;

namespace {

// --- temporaries the signal handler removes ---------------------------------------------
//
// The one piece of global mutable state of the output code, and on purpose: a signal
// handler can reach nothing else. A fixed array of fixed-size paths, each published by
// a lock-free atomic flag once written, so that the handler only reads complete paths
// and calls nothing but unlink, sigaction and raise (all async-signal-safe).

constexpr std::size_t kMaxTemporaries = 256;

struct Slot {
  std::atomic<int> used{0};
  char path[PATH_MAX] = {};
};
static_assert(std::atomic<int>::is_always_lock_free);

std::array<Slot, kMaxTemporaries> g_temporaries;
std::mutex g_claim_mutex;  // between threads that claim slots; never taken by the handler

constexpr std::array kCleanupSignals{SIGINT, SIGTERM, SIGHUP, SIGPIPE};

extern "C" void remove_temporaries_and_reraise(int sig) {
  for (Slot& s : g_temporaries)
    if (s.used.load(std::memory_order_acquire) != 0) ::unlink(s.path);
  struct sigaction dfl {};
  dfl.sa_handler = SIG_DFL;
  sigemptyset(&dfl.sa_mask);
  ::sigaction(sig, &dfl, nullptr);
  ::raise(sig);
}

// Installs the handler for the signals whose action is the default (one that the
// parent set to ignore, nohup's SIGHUP say, stays ignored).
void install_handlers() {
  static std::once_flag once;
  std::call_once(once, [] {
    for (int sig : kCleanupSignals) {
      struct sigaction old {};
      if (::sigaction(sig, nullptr, &old) != 0 || old.sa_handler != SIG_DFL) continue;
      struct sigaction sa {};
      sa.sa_handler = remove_temporaries_and_reraise;
      sigemptyset(&sa.sa_mask);
      ::sigaction(sig, &sa, nullptr);
    }
  });
}

// Publishes a temporary for the handler; returns its slot.
int claim_slot(const std::string& path) {
  if (path.size() >= PATH_MAX) throw std::runtime_error(fmt::format("{}: path too long", path));
  install_handlers();
  std::lock_guard<std::mutex> lock(g_claim_mutex);
  for (std::size_t i = 0; i < g_temporaries.size(); ++i) {
    Slot& s = g_temporaries[i];
    if (s.used.load(std::memory_order_relaxed) != 0) continue;
    std::memcpy(s.path, path.c_str(), path.size() + 1);
    s.used.store(1, std::memory_order_release);
    return static_cast<int>(i);
  }
  throw std::runtime_error(fmt::format("{}: more than {} temporary files at once", path, kMaxTemporaries));
}

// Holds back the cleanup signals of this thread while it lives: a temporary is created and
// published under it, so that no signal arrives between the two and leaves the file behind.
class CleanupSignalsHeld {
 public:
  CleanupSignalsHeld() {
    sigset_t set;
    sigemptyset(&set);
    for (int sig : kCleanupSignals) sigaddset(&set, sig);
    held_ = ::pthread_sigmask(SIG_BLOCK, &set, &old_) == 0;
  }
  ~CleanupSignalsHeld() {
    if (held_) ::pthread_sigmask(SIG_SETMASK, &old_, nullptr);
  }
  CleanupSignalsHeld(const CleanupSignalsHeld&) = delete;
  CleanupSignalsHeld& operator=(const CleanupSignalsHeld&) = delete;

 private:
  sigset_t old_;
  bool held_ = false;
};

void release_slot(int slot) {
  if (slot < 0) return;
  std::lock_guard<std::mutex> lock(g_claim_mutex);
  g_temporaries[static_cast<std::size_t>(slot)].used.store(0, std::memory_order_release);
}

// --- helpers ------------------------------------------------------------------------------

// "--timeline: " or "".
std::string prefix(std::string_view option) { return option.empty() ? std::string() : fmt::format("{}: ", option); }

std::runtime_error cannot_write(std::string_view option, const std::string& name, int err) {
  return std::runtime_error(fmt::format("{}{}: cannot write: {}", prefix(option), name, std::strerror(err)));
}


// The file a path names after following symlinks in its last component (the path itself
// when it names nothing), and what lstat says about it.
std::pair<fs::path, std::optional<struct stat>> follow_links(std::string_view option, const std::string& name) {
  fs::path p = name;
  for (int hops = 0;; ++hops) {
    struct stat st {};
    if (::lstat(p.c_str(), &st) != 0) return {p, std::nullopt};
    if (!S_ISLNK(st.st_mode)) return {p, st};
    if (hops >= 40) throw cannot_write(option, name, ELOOP);
    std::error_code ec;
    const fs::path link = fs::read_symlink(p, ec);
    if (ec) throw cannot_write(option, name, ec.value());
    p = link.is_absolute() ? link : p.parent_path() / link;
  }
}

}  // namespace

std::optional<FileId> file_id(const fs::path& path) {
  struct stat st {};
  if (::stat(path.c_str(), &st) != 0) return std::nullopt;
  return FileId{static_cast<std::uint64_t>(st.st_dev), static_cast<std::uint64_t>(st.st_ino)};
}

OutputTarget resolve_output(std::string_view option, const std::string& path) {
  OutputTarget t;
  t.name = path;
  if (path == "-") {
    t.kind = OutputTarget::Kind::standard_output;
    return t;
  }
  if (path.empty()) throw InputError(fmt::format("{}an empty path", prefix(option)));
  const auto [resolved, st] = follow_links(option, path);
  t.path = resolved;
  if (!st) return t;  // absent, or unreachable: creating its temporary says why
  if (S_ISDIR(st->st_mode)) throw InputError(fmt::format("{}{}: is a directory", prefix(option), path));
  t.kind = S_ISREG(st->st_mode) ? OutputTarget::Kind::regular : OutputTarget::Kind::special;
  t.id = FileId{static_cast<std::uint64_t>(st->st_dev), static_cast<std::uint64_t>(st->st_ino)};
  return t;
}

// --- OutputSet ------------------------------------------------------------------------------

struct OutputSet::Entry {
  std::string option;
  OutputTarget target;
  Fd fd;             // the temporary, or the device once opened
  std::string temp;  // the temporary's path until it is renamed or removed
  int slot = -1;     // its slot in the signal handler's list
  bool staged() const {
    return target.kind == OutputTarget::Kind::regular || target.kind == OutputTarget::Kind::absent;
  }
};

namespace {

// Gives the temporary the mode and, where permitted, the owner of the file it replaces.
void keep_mode_and_owner(int fd, const fs::path& target) {
  struct stat st {};
  if (::stat(target.c_str(), &st) != 0) return;
  if (::fchown(fd, st.st_uid, st.st_gid) != 0) (void)!::fchown(fd, static_cast<uid_t>(-1), st.st_gid);
  (void)::fchmod(fd, st.st_mode & 07777);
}

}  // namespace

OutputSet::OutputSet() = default;

OutputSet::~OutputSet() {
  for (Entry& e : entries_) {
    e.fd.reset();
    if (!e.temp.empty()) ::unlink(e.temp.c_str());
    release_slot(e.slot);
  }
}

void OutputSet::input(std::string_view option, const std::string& path) {
  const std::optional<FileId> id = file_id(path);
  if (!id) return;
  for (const Entry& e : entries_)
    if (e.target.kind == OutputTarget::Kind::regular && e.target.id == id)
      throw InputError(fmt::format("{}: {} is also an input ({} {}); write to another file", e.option,
                                   e.target.name, option, path));
  inputs_.emplace_back(std::string(option) + " " + path, *id);
}

void OutputSet::check_identity(std::string_view option, const OutputTarget& t) const {
  using Kind = OutputTarget::Kind;
  if (t.kind == Kind::standard_output) {
    if (has_stdout())
      throw InputError(fmt::format("{}: - (stdout) is already {}'s output; only one output can go to stdout",
                                   option, stdout_option()));
    return;
  }
  if (t.kind == Kind::special) return;  // devices and FIFOs may be shared
  for (const auto& [what, id] : inputs_)
    if (t.id == id)
      throw InputError(fmt::format("{}{} is also an input ({}); write to another file", prefix(option), t.name, what));
  std::error_code ec;
  const fs::path canonical = fs::weakly_canonical(t.path, ec);
  for (const Entry& e : entries_) {
    if (!e.staged()) continue;
    std::error_code other;
    const bool same = t.id ? e.target.id == t.id : !ec && fs::weakly_canonical(e.target.path, other) == canonical;
    if (same)
      throw InputError(fmt::format("{}{} is also the file of {}; give each output its own file", prefix(option),
                                   t.name, e.option));
  }
}

std::size_t OutputSet::add(std::string_view option, const std::string& path) {
  Entry e{std::string(option), resolve_output(option, path), Fd(), {}, -1};
  check_identity(option, e.target);
  if (e.staged()) {
    const bool exists = e.target.kind == OutputTarget::Kind::regular;
    const std::string base = fmt::format("{}.tmp.{}", e.target.path.string(), ::getpid());
    install_handlers();
    const CleanupSignalsHeld held;  // until the temporary is in the handler's list
    for (int n = 0;; ++n) {
      std::string name = n == 0 ? base : fmt::format("{}.{}", base, n);
      const int fd = ::open(name.c_str(), O_WRONLY | O_CREAT | O_EXCL | O_CLOEXEC, exists ? 0600 : 0666);
      if (fd >= 0) {
        e.fd = Fd(fd);
        e.temp = std::move(name);
        break;
      }
      if (errno != EEXIST || n >= 100) throw cannot_write(option, path, errno);
    }
    e.slot = claim_slot(e.temp);
    if (exists) keep_mode_and_owner(e.fd.get(), e.target.path);
  }
  entries_.push_back(std::move(e));
  return entries_.size() - 1;
}

bool OutputSet::has_stdout() const { return !stdout_option().empty(); }

std::string OutputSet::stdout_option() const {
  for (const Entry& e : entries_)
    if (e.target.kind == OutputTarget::Kind::standard_output) return e.option.empty() ? "-" : e.option;
  return {};
}

void OutputSet::open_special(Entry& e) {
  if (e.fd.open()) return;
  const int fd = ::open(e.target.path.c_str(), O_WRONLY | O_CLOEXEC | O_NOCTTY);
  if (fd < 0) throw cannot_write(e.option, e.target.name, errno);
  e.fd = Fd(fd);
}

void OutputSet::write_fd(Entry& e, std::string_view bytes) {
  const char* p = bytes.data();
  std::size_t left = bytes.size();
  while (left > 0) {
    const ssize_t n = ::write(e.fd.get(), p, left);
    if (n < 0) {
      if (errno == EINTR) continue;
      throw cannot_write(e.option, e.target.name, errno);
    }
    p += n;
    left -= static_cast<std::size_t>(n);
  }
}

void OutputSet::write(std::size_t output, std::string_view bytes) {
  Entry& e = entries_.at(output);
  if (e.target.kind == OutputTarget::Kind::standard_output) {
    std::cout.write(bytes.data(), static_cast<std::streamsize>(bytes.size()));
    return;
  }
  if (e.target.kind == OutputTarget::Kind::special) open_special(e);
  write_fd(e, bytes);
}

void OutputSet::flush(std::size_t output) {
  if (entries_.at(output).target.kind == OutputTarget::Kind::standard_output) std::cout.flush();
}

void OutputSet::commit() {
  for (Entry& e : entries_) {
    if (!e.staged()) continue;
    // On disk before the rename: a crash leaves the old file or the new one.
    if (::fsync(e.fd.get()) != 0 && errno != EINVAL && errno != EROFS) throw cannot_write(e.option, e.target.name, errno);
    if (const int err = e.fd.close()) throw cannot_write(e.option, e.target.name, err);
  }
  for (Entry& e : entries_) {
    if (e.staged()) {
      if (::rename(e.temp.c_str(), e.target.path.c_str()) != 0) throw cannot_write(e.option, e.target.name, errno);
      e.temp.clear();
      release_slot(std::exchange(e.slot, -1));
    } else if (e.target.kind == OutputTarget::Kind::special) {
      open_special(e);  // an empty output still opens and closes its device
      if (const int err = e.fd.close()) throw cannot_write(e.option, e.target.name, err);
    } else {
      std::cout.flush();
      if (!std::cout) throw cannot_write(e.option, "stdout", errno);
    }
  }
}

void write_file_atomic(const fs::path& path, std::string_view content) {
  OutputSet set;
  set.write(set.add("", path.string()), content);
  set.commit();
}

}  // namespace adagrouper
