// The command line's outputs never damage what a user owns: devices, FIFOs, symlinks and
// file modes survive, inputs are never overwritten, failed or interrupted runs leave
// earlier outputs and no temporaries, stdout errors are failures, - is stdout.
#include <fcntl.h>
#include <signal.h>
#include <sys/file.h>
#include <sys/stat.h>
#include <sys/sysmacros.h>
#include <sys/types.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <filesystem>
#include <fstream>
#include <string>
#include <thread>
#include <vector>

#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include "../common/cli_fixture.h"
#include "error.h"
#include "io.h"

namespace fs = std::filesystem;
using ::testing::HasSubstr;
using clirunner::Outcome;
using clirunner::slurp;

namespace {

using clirunner::kToyKfkb;

class Outputs : public clirunner::DirTest {
 protected:
  Outputs() : DirTest("adagrouper-outputs-") {}

  std::string at(const std::string& name) const { return (dir_ / name).string(); }
  std::string q(const std::string& name) const { return "'" + at(name) + "'"; }
  void write(const std::string& name, const std::string& text) const { std::ofstream(dir_ / name) << text; }

};

// One command of each kind with everything but its output option; `output` is the
// option that names the file.
struct Writer {
  const char* name;
  std::string args;
  const char* output;
};

std::vector<Writer> writers(const std::string& dir) {
  const std::string pipe = "--pipeline configs/examples/toy-4.json --network configs/examples/toy-net-2s.json";
  return {
      {"simulate", kToyKfkb, "--output"},
      {"timeline", kToyKfkb, "--timeline"},
      {"export", kToyKfkb, "--export-schedule"},
      {"schedule", "schedule zbv --stages 4 --micro-batches 8", "--output"},
      {"synth", "trace synth periodic --high 2 --low 1 --period-s 10 --low-fraction 0.5", "--output"},
      {"import", "trace import traces/data/periodic-50pct-10s.json", "--output"},
      {"slice", "trace slice traces/data/periodic-50pct-10s.json --start-s 0 --end-s 5", "--output"},
      {"import-kineto", "trace import-kineto tests/traces/data/kineto/cpu-rank0.json "
                        "tests/traces/data/kineto/cpu-rank1.json --micro-batch-size 2", "--output"},
      {"kineto-stage-trace", "trace import-kineto tests/traces/data/kineto/cpu-rank0.json "
                             "tests/traces/data/kineto/cpu-rank1.json --micro-batch-size 2 --output '" + dir +
                             "/kineto.json'", "--stage-trace"},
      {"plan", "plan " + pipe, "--output"},
      {"adapt", "adapt " + pipe + " --iterations 4 --replan-every 2 --window 4 -q", "--output"},
      {"adapt-rows", "adapt " + pipe + " --iterations 4 --replan-every 2 --window 4 -q --rows-format csv", "--rows"},
      {"compare", "compare --predicted '" + dir + "/p.json' --measured '" + dir + "/p.json'", "--output"},
      {"model", "model --preset gpt2-xl", "--output"},
      {"partition", "partition --model configs/models/gpt2-xl.json --stages 4 -b 1 --global-batch-size 16 --refine 0",
       "--output"},
      {"sweep", "sweep configs/sweeps/toy-schedules.json --format csv -q", "--output"},
  };
}

bool has_toy_sweep() { return fs::exists(fs::path(SOURCE_ROOT) / "configs/sweeps/toy-schedules.json"); }

// Lets a reader of `fifo` that still waits for a writer go (a run that failed before
// opening it), so that the test ends instead of hanging.
void release_reader(const std::string& fifo) {
  const int fd = ::open(fifo.c_str(), O_WRONLY | O_NONBLOCK);
  if (fd >= 0) ::close(fd);
}

}  // namespace

// --- a device, a FIFO, a symlink, a private file, a directory --------------------------------

TEST_F(Outputs, DeviceNodeStaysADevice) {
  // A character device like /dev/null, made here: /dev itself is never touched.
  if (::mknod(at("null").c_str(), S_IFCHR | 0666, makedev(1, 3)) != 0)
    GTEST_SKIP() << "mknod is not permitted here";
  for (const char* opt : {"--output", "--timeline"}) {
    const Outcome r = run(kToyKfkb + " " + opt + " " + q("null"));
    EXPECT_EQ(r.rc, 0) << r.err;
    struct stat st {};
    ASSERT_EQ(::lstat(at("null").c_str(), &st), 0);
    EXPECT_TRUE(S_ISCHR(st.st_mode)) << opt << ": the device was replaced";
  }
  expect_no_temporaries();
}

TEST_F(Outputs, FifoIsWrittenThrough) {
  ASSERT_EQ(::mkfifo(at("fifo").c_str(), 0600), 0);
  std::string got;
  std::thread reader([&] { got = slurp(at("fifo")); });
  const Outcome r = run(kToyKfkb + " --output " + q("fifo"));
  release_reader(at("fifo"));
  reader.join();
  EXPECT_EQ(r.rc, 0) << r.err;
  EXPECT_THAT(got, HasSubstr("\"schedule\": \"kfkb\""));
  struct stat st {};
  ASSERT_EQ(::lstat(at("fifo").c_str(), &st), 0);
  EXPECT_TRUE(S_ISFIFO(st.st_mode));
}

TEST_F(Outputs, SymlinkWritesItsTargetAndStaysALink) {
  ASSERT_EQ(run(kToyKfkb + " --output " + q("p.json")).rc, 0);
  for (const Writer& w : writers(dir_.string())) {
    if (std::string(w.name) == "sweep" && !has_toy_sweep()) {
      continue;
    }
    fs::remove(at("target"));
    fs::remove(at("link"));
    write("target", "");
    fs::create_symlink("target", at("link"));
    const Outcome r = run(w.args + " " + w.output + " " + q("link"));
    EXPECT_EQ(r.rc, 0) << w.name << ": " << r.err;
    EXPECT_TRUE(fs::is_symlink(at("link"))) << w.name << ": the link was replaced";
    EXPECT_GT(fs::file_size(at("target")), 0u) << w.name << ": the target was not written";
  }
  // A dangling link creates its target.
  fs::remove(at("target"));
  ASSERT_EQ(run(kToyKfkb + " --output " + q("link")).rc, 0);
  EXPECT_TRUE(fs::is_symlink(at("link")));
  EXPECT_THAT(slurp(at("target")), HasSubstr("\"schedule\": \"kfkb\""));
  expect_no_temporaries();
}

TEST_F(Outputs, ReplacedFileKeepsItsModeAndOwner) {
  write("private.json", "secret");
  fs::permissions(at("private.json"), fs::perms::owner_read | fs::perms::owner_write);
  const bool root = ::geteuid() == 0;
  if (root) {
    ASSERT_EQ(::chown(at("private.json").c_str(), 65534, 65534), 0);
  }
  const Outcome r = run(kToyKfkb + " --output " + q("private.json"));
  ASSERT_EQ(r.rc, 0) << r.err;
  struct stat st {};
  ASSERT_EQ(::stat(at("private.json").c_str(), &st), 0);
  EXPECT_EQ(st.st_mode & 07777, 0600u);
  if (root) {
    EXPECT_EQ(st.st_uid, 65534u);
    EXPECT_EQ(st.st_gid, 65534u);
  }
  EXPECT_THAT(slurp(at("private.json")), HasSubstr("\"schedule\": \"kfkb\""));
}

TEST_F(Outputs, DirectoryIsBadInputForEveryCommand) {
  write("p.json", "{}");
  for (const Writer& w : writers(dir_.string())) {
    if (std::string(w.name) == "sweep" && !has_toy_sweep()) continue;
    const Outcome r = run(w.args + " " + w.output + " " + q(""));
    EXPECT_EQ(r.rc, 2) << w.name << ": " << r.err;
    EXPECT_THAT(r.err, HasSubstr(": is a directory")) << w.name;
    EXPECT_EQ(std::count(r.err.begin(), r.err.end(), '\n'), 1) << r.err;
  }
  expect_no_temporaries();
}

// --- outputs that are inputs, sweeps and files they did not write --------------------------

TEST_F(Outputs, AnOutputIsNeverAnInput) {
  const std::string pipeline = slurp(fs::path(SOURCE_ROOT) / "configs/examples/toy-4.json");
  write("pipe.json", pipeline);
  fs::create_symlink("pipe.json", at("alias.json"));
  const std::string cmd = "simulate --pipeline " + q("pipe.json") +
                          " --network configs/examples/toy-net-2s.json --schedule 1f1b -b 1 ";
  for (const char* opt : {"--output", "--timeline", "--export-schedule"}) {
    for (const char* name : {"pipe.json", "alias.json"}) {
      const Outcome r = run(cmd + opt + " " + q(name));
      EXPECT_EQ(r.rc, 2) << opt << " " << name;
      EXPECT_THAT(r.err, HasSubstr(std::string(opt) + ": "));
      EXPECT_THAT(r.err, HasSubstr("is also an input (--pipeline"));
    }
  }
  // Two outputs in one file.
  const Outcome two = run(kToyKfkb + " --output " + q("x.json") + " --timeline " + q("x.json"));
  EXPECT_EQ(two.rc, 2);
  EXPECT_THAT(two.err, HasSubstr("--timeline: "));
  EXPECT_EQ(slurp(at("pipe.json")), pipeline);
  EXPECT_FALSE(fs::exists(at("x.json")));
  expect_no_temporaries();
}

TEST_F(Outputs, SweepNeverCutsOrRewritesAFileItDidNotWrite) {
  if (!has_toy_sweep()) GTEST_SKIP() << "configs/sweeps/toy-schedules.json is not shipped";
  const std::string spec = "configs/sweeps/toy-schedules.json";
  // Dry runs read and change nothing, whatever the file holds.
  for (const std::string& content : {std::string("notes without a newline"), std::string("id,other\nhalf a li")}) {
    write("out.csv", content);
    const Outcome dry = run("sweep " + spec + " --output " + q("out.csv") + " --dry-run");
    EXPECT_EQ(slurp(at("out.csv")), content) << dry.err;
    const Outcome real = run("sweep " + spec + " --output " + q("out.csv") + " -q");
    EXPECT_EQ(real.rc, 2) << real.err;
    EXPECT_THAT(real.err, HasSubstr("not this spec's"));
    EXPECT_EQ(slurp(at("out.csv")), content) << "a refused file was changed";
  }
  // Its own spec as the output; no final newline, so that resuming would cut a line.
  const std::string cut = std::string("{\"defaults\": {\"pipeline\": \"") + SOURCE_ROOT +
                          "/configs/examples/toy-4.json\", \"network\": \"" + SOURCE_ROOT +
                          "/configs/examples/toy-net-2s.json\", \"micro_batch_size\": 1},\n\"grid\": "
                          "{\"schedule\": [\"1f1b\", \"gpipe\"]}}";
  write("spec.json", cut);
  for (const char* extra : {"", " --dry-run", " --retry-errors"}) {
    const Outcome r = run("sweep " + q("spec.json") + " --output " + q("spec.json") + " --format jsonl" + extra);
    EXPECT_EQ(r.rc, 2) << extra;
    EXPECT_THAT(r.err, HasSubstr("--output: "));
    EXPECT_THAT(r.err, HasSubstr("is also an input (the spec"));
    EXPECT_EQ(slurp(at("spec.json")), cut);
  }
  // A dry run leaves a resumable file's partial last line and error rows alone.
  ASSERT_EQ(run("sweep " + spec + " --output " + q("ok.csv") + " -q").rc, 0);
  const std::string full = slurp(at("ok.csv"));
  write("ok.csv", full + "0123abc,4,partial");
  run("sweep " + spec + " --output " + q("ok.csv") + " --dry-run --retry-errors");
  EXPECT_EQ(slurp(at("ok.csv")), full + "0123abc,4,partial");
}

TEST_F(Outputs, SweepLockedByAnotherIsAFailureNotBadInput) {
  if (!has_toy_sweep()) GTEST_SKIP() << "configs/sweeps/toy-schedules.json is not shipped";
  write("out.csv", "");
  const int fd = ::open(at("out.csv").c_str(), O_WRONLY);
  ASSERT_GE(fd, 0);
  ASSERT_EQ(::flock(fd, LOCK_EX), 0);
  const Outcome r = run("sweep configs/sweeps/toy-schedules.json --output " + q("out.csv") + " -q");
  ::close(fd);
  EXPECT_EQ(r.rc, 1) << r.err;
  EXPECT_THAT(r.err, HasSubstr("another adagrouper sweep is writing this file"));
}

TEST_F(Outputs, SweepToStdoutAndToADevice) {
  if (!has_toy_sweep()) GTEST_SKIP() << "configs/sweeps/toy-schedules.json is not shipped";
  const Outcome r = run("sweep configs/sweeps/toy-schedules.json --output - --format csv -q");
  ASSERT_EQ(r.rc, 0) << r.err;
  EXPECT_EQ(r.out.rfind("id,index,", 0), 0u) << r.out;
  ASSERT_EQ(::mkfifo(at("fifo").c_str(), 0600), 0);
  std::string got;
  std::thread reader([&] { got = slurp(at("fifo")); });
  const Outcome f = run("sweep configs/sweeps/toy-schedules.json --output " + q("fifo") + " --format jsonl -q");
  release_reader(at("fifo"));
  reader.join();
  EXPECT_EQ(f.rc, 0) << f.err;
  EXPECT_EQ(got.rfind("{\"id\":", 0), 0u) << got;
}

// --- failed and interrupted runs -----------------------------------------------------------

TEST_F(Outputs, AFailedRunKeepsEarlierOutputs) {
  write("ok.json", "earlier");
  write("rows.csv", "earlier rows");
  const Outcome sim = run(kToyKfkb + " --output " + q("ok.json") + " --timeline " + q("nodir/t.json"));
  EXPECT_EQ(sim.rc, 1);
  EXPECT_THAT(sim.err, HasSubstr("--timeline: "));
  EXPECT_EQ(slurp(at("ok.json")), "earlier");
  const Outcome adapt = run(
      "adapt --pipeline configs/examples/toy-4.json --network configs/examples/toy-net-2s.json --iterations 4 -q "
      "--rows " + q("rows.csv") + " --output " + q("nodir/a.json"));
  EXPECT_EQ(adapt.rc, 1);
  EXPECT_EQ(slurp(at("rows.csv")), "earlier rows");
  // Bad input found after the outputs were set up.
  write("bad.csv", "not a stage trace");
  const Outcome bad = run(kToyKfkb + " --output " + q("ok.json") + " --stage-trace " + q("bad.csv"));
  EXPECT_EQ(bad.rc, 2);
  EXPECT_EQ(slurp(at("ok.json")), "earlier");
  expect_no_temporaries();
}

namespace {

// Starts `adagrouper ARGS` (split on blanks) from the source root with the default
// action for every signal, stdout to /dev/null and stderr to `err`.
pid_t spawn(const std::vector<std::string>& args, const fs::path& err) {
  const pid_t pid = ::fork();
  if (pid != 0) return pid;
  for (int sig : {SIGINT, SIGTERM, SIGHUP, SIGPIPE}) ::signal(sig, SIG_DFL);
  if (::chdir(SOURCE_ROOT) != 0) ::_exit(127);
  const int out = ::open("/dev/null", O_WRONLY), e = ::open(err.c_str(), O_WRONLY | O_CREAT | O_TRUNC, 0644);
  ::dup2(out, 1);
  ::dup2(e, 2);
  std::vector<char*> argv{const_cast<char*>(ADAGROUPER_BIN)};
  for (const std::string& a : args) argv.push_back(const_cast<char*>(a.c_str()));
  argv.push_back(nullptr);
  ::execv(ADAGROUPER_BIN, argv.data());
  ::_exit(127);
}

// Waits (up to a minute) until `ready` holds.
template <class F>
bool wait_for(F&& ready) {
  for (int i = 0; i < 6000; ++i) {
    if (ready()) return true;
    std::this_thread::sleep_for(std::chrono::milliseconds(10));
  }
  return false;
}

bool has_temporary(const fs::path& dir) {
  for (const auto& e : fs::directory_iterator(dir))
    if (e.path().filename().string().find(".tmp.") != std::string::npos) return true;
  return false;
}

}  // namespace

TEST_F(Outputs, SignalsRemoveTemporaries) {
  for (int sig : {SIGINT, SIGTERM}) {
    write("out.json", "earlier");
    const pid_t pid = spawn({"simulate", "--pipeline", "configs/examples/toy-4.json", "--network",
                             "configs/examples/toy-net-2s.json", "--schedule", "kfkb", "--k", "2", "-b", "1",
                             "--iterations", "1000000", "--output", at("out.json")},
                            dir_ / "err.txt");
    ASSERT_GT(pid, 0);
    ASSERT_TRUE(wait_for([&] { return has_temporary(dir_); })) << "no temporary appeared";
    ::kill(pid, sig);
    int status = 0;
    ASSERT_EQ(::waitpid(pid, &status, 0), pid);
    EXPECT_TRUE(WIFSIGNALED(status) && WTERMSIG(status) == sig) << "status " << status;
    EXPECT_FALSE(has_temporary(dir_)) << "signal " << sig;
    EXPECT_EQ(slurp(at("out.json")), "earlier");
  }
}

// --- stdout ---------------------------------------------------------------------------------

TEST_F(Outputs, StdoutWriteErrorsFail) {
  if (!fs::exists("/dev/full")) GTEST_SKIP() << "no /dev/full";
  for (const std::string& args : {kToyKfkb + " --json", kToyKfkb + " --output -", std::string("schedule zbv --stages 4 "
                                                                                      "--micro-batches 8"),
                                  std::string("--help"), std::string("help plan")}) {
    const Outcome r = run(args + " >/dev/full");
    EXPECT_EQ(r.rc, 1) << args;
    EXPECT_THAT(r.err, HasSubstr("stdout: cannot write")) << args;
    EXPECT_EQ(std::count(r.err.begin(), r.err.end(), '\n'), 1) << r.err;
  }
}

TEST_F(Outputs, DashIsStdoutEverywhere) {
  ASSERT_EQ(run(kToyKfkb + " --output " + q("p.json")).rc, 0);
  for (const Writer& w : writers(dir_.string())) {
    if (std::string(w.name) == "sweep") continue;  // SweepToStdoutAndToADevice
    const Outcome file = run(w.args + " " + w.output + " " + q("out"));
    const Outcome dash = run(w.args + " " + w.output + " -");
    ASSERT_EQ(dash.rc, 0) << w.name << ": " << dash.err;
    // The timeline and the rows differ from run to run only where they record times
    // of this machine; the others are the file byte for byte.
    if (std::string(w.name) != "timeline") {
      EXPECT_EQ(dash.out, slurp(at("out"))) << w.name;
    }
    EXPECT_FALSE(dash.out.empty()) << w.name;
  }
  // Two outputs cannot both be stdout; nor can --json and one.
  EXPECT_EQ(run(kToyKfkb + " --output - --timeline -").rc, 2);
  EXPECT_EQ(run(kToyKfkb + " --output - --json").rc, 2);
}

// --- the timeline's size ----------------------------------------------------------------------

TEST_F(Outputs, TimelineLimitRefusesBeforeRunning) {
  const Outcome r = run(kToyKfkb + " --iterations 1000 --timeline " + q("t.json") + " --timeline-limit 1e6");
  EXPECT_EQ(r.rc, 2);
  EXPECT_THAT(r.err, HasSubstr("--timeline-limit: the timeline would be about"));
  EXPECT_FALSE(fs::exists(at("t.json")));
  const Outcome ok = run(kToyKfkb + " --timeline " + q("t.json") + " --timeline-limit 1e6");
  EXPECT_EQ(ok.rc, 0) << ok.err;
  EXPECT_TRUE(fs::exists(at("t.json")));
  EXPECT_EQ(run(kToyKfkb + " --timeline-limit 1e6").rc, 2);  // without --timeline
  expect_no_temporaries();
}

TEST_F(Outputs, LargeTimelineIsAnnouncedOnStderr) {
  // 500000 iterations of 64 ops: about 24 GB, announced before the run, which is stopped.
  const pid_t pid = spawn({"simulate", "--pipeline", "configs/examples/toy-4.json", "--network",
                           "configs/examples/toy-net-2s.json", "--schedule", "kfkb", "--k", "2", "-b", "1",
                           "--iterations", "500000", "--timeline", at("t.json")},
                          dir_ / "err.txt");
  ASSERT_GT(pid, 0);
  EXPECT_TRUE(wait_for([&] { return slurp(dir_ / "err.txt").find("warning: --timeline") != std::string::npos; }));
  ::kill(pid, SIGTERM);
  int status = 0;
  ::waitpid(pid, &status, 0);
  EXPECT_THAT(slurp(dir_ / "err.txt"), HasSubstr("GB ("));
  EXPECT_FALSE(fs::exists(at("t.json")));
  EXPECT_FALSE(has_temporary(dir_));
}

// --- the library ------------------------------------------------------------------------------

TEST_F(Outputs, OutputSetCommitsAllOrNothing) {
  write("a", "old a");
  {
    adagrouper::OutputSet set;
    const std::size_t a = set.add("--a", at("a"));
    const std::size_t b = set.add("--b", at("b"));
    set.write(a, "new a");
    set.write(b, "new b");
    EXPECT_TRUE(has_temporary(dir_));
  }  // not committed
  EXPECT_EQ(slurp(at("a")), "old a");
  EXPECT_FALSE(fs::exists(at("b")));
  EXPECT_FALSE(has_temporary(dir_));
  adagrouper::OutputSet set;
  set.input("--in", at("a"));
  EXPECT_THROW(set.add("--out", at("a")), adagrouper::InputError);
  const std::size_t b = set.add("--b", at("b"));
  set.write(b, "new b");
  set.commit();
  EXPECT_EQ(slurp(at("b")), "new b");
  EXPECT_FALSE(has_temporary(dir_));
}
