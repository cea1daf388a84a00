// The values of command-line options: integers in range, times a double can resolve,
// no nan, inf or -0 printed, messages that blame the option, `help COMMAND`, and the
// calibration harness's command line.
#include <unistd.h>

#include <algorithm>
#include <filesystem>
#include <regex>
#include <string>
#include <vector>

#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include "../common/cli_fixture.h"

namespace fs = std::filesystem;
using ::testing::HasSubstr;
using ::testing::ContainsRegex;
using ::testing::Not;
using clirunner::Outcome;

namespace {

using clirunner::kToyKfkb;
const std::string kToyPlan = "plan --pipeline configs/examples/toy-4.json --network configs/examples/toy-net-2s.json";
const std::string kTrace = "traces/data/periodic-50pct-10s.json";

class OptionValues : public clirunner::DirTest {
 protected:
  OptionValues() : DirTest("adagrouper-options-") {}

  // Exit 2 and one line on stderr that names `option` (and contains `more`, if given).
  void expect_refused(const std::string& args, const std::string& option, const std::string& more = "") {
    std::vector<std::string> pieces{option};
    if (!more.empty()) pieces.push_back(more);
    expect_one_line_error(args, pieces);
  }
};

}  // namespace

TEST_F(OptionValues, IntegersAreRangeChecked) {
  // Text outside int is refused by the parser, naming the option.
  expect_refused(kToyPlan + " --global-batch-size 4294967304", "--global-batch-size");
  expect_refused(kToyKfkb + " --iterations 99999999999", "--iterations");
  expect_refused(kToyKfkb + " -b 4294967297", "micro-batch-size");
  // Ints the models cannot hold are refused before any work.
  expect_refused(kToyPlan + " --global-batch-size 2147483647", "--global-batch-size: must be in 1..16777216");
  expect_refused(kToyPlan + " --global-batch-size -8", "--global-batch-size");
  expect_refused(kToyPlan + " --iterations 2000000000", "--iterations: must be in 1..1000000");
  expect_refused(kToyKfkb + " --iterations 2147483647", "--iterations: must be in 1..1000000");
  expect_refused(kToyKfkb + " --iterations 0", "--iterations");
  expect_refused("schedule kfkb --k 0 --stages 4 --micro-batches 8", "--k");
  expect_refused("schedule kfkb --k 2 --stages 100000 --micro-batches 8", "--stages: must be in 1..4096");
  expect_refused("schedule kfkb --k 2 --stages 4 --micro-batches 2147483647", "--micro-batches");
  expect_refused("schedule kfkb --k 2 --stages 4096 --micro-batches 16777216", "--micro-batches", "ops per iteration");
  expect_refused("schedule 1f1b --stages 4 --micro-batches 8 --virtual-stages 0", "--virtual-stages");
  expect_refused(
      "adapt --pipeline configs/examples/toy-4.json --network configs/examples/toy-net-2s.json "
      "--global-batch-size 2147483647",
      "--global-batch-size");
  expect_refused("partition --model configs/models/gpt2-xl.json --stages 0 -b 1", "--stages");
  expect_refused("partition --model configs/models/gpt2-xl.json --stages 4 -b 2147483647", "--micro-batch-size");
  expect_refused("model --arch gpt --layers 2147483647 --hidden 1024 --heads 16 --seq-len 128 --vocab 1000",
                 "--layers: must be in 1..100000");
  expect_refused("model --preset gpt2-xl --micro-batch-sizes 1,2147483647", "--micro-batch-sizes");
  expect_refused("sweep configs/sweeps/toy-schedules.json --output x.csv --jobs -1", "--jobs");
}

TEST_F(OptionValues, TimesMustBeResolvable) {
  for (const char* t : {"1e17", "1e16", "9e9", "-1", "-1ms", "1e17us"}) {
    expect_refused(kToyKfkb + " --start-time " + t, "--start-time", "8588934592");
    expect_refused(kToyPlan + " --start-time " + t, "--start-time");
  }
  // nan and inf are no numbers to the parser of units.
  for (const char* t : {"nan", "inf"}) {
    expect_refused(kToyKfkb + " --start-time " + t, "--start-time", "is invalid: must be a number of seconds");
    expect_refused(kToyPlan + " --eval-start " + t, "--start-time");
  }
  expect_refused("partition --model configs/models/gpt2-xl.json --stages 4 -b 1 --start-time 1e17", "--start-time");
  // Just under the limit the answer is still exact: 49 s, as at time 0.
  const Outcome late = run(kToyKfkb + " --start-time 8e9 --json");
  ASSERT_EQ(late.rc, 0) << late.err;
  EXPECT_THAT(late.out, HasSubstr("\"mean_iteration_time_s\": 49.0"));
}

TEST_F(OptionValues, TraceWindowsBlameTheirOption) {
  expect_refused("trace stats " + kTrace + " --start-time nan", "--start-time");
  expect_refused("trace stats " + kTrace + " --end-time 1e300", "--end-time");
  expect_refused("trace stats " + kTrace + " --start-time 5 --end-time 5", "--end-time", "after the window's start");
  expect_refused("trace slice " + kTrace + " --start-time inf --end-time 5", "--start-time");
  expect_refused("trace slice " + kTrace + " --start-time 0 --end-time 1e9", "--end-time");
  expect_refused("trace synth periodic --high 1 --low 0.5 --period-s 1 --low-fraction 0.5 --end-time 1e9",
                 "--end-time");
  expect_refused("trace synth periodic --high 1 --low 0.5 --period-s 1 --low-fraction 0.5 --end-time -0",
                 "--end-time");
  expect_refused("trace stats " + kTrace + " --threshold-fraction nan", "--threshold-fraction");
}

// One vocabulary of options (README, "Options"): the old spellings still work, mean the
// same as the new ones, and are not in --help; a message names the new spelling.
TEST_F(OptionValues, OldSpellingsAreHiddenAliases) {
  const auto same = [&](const std::string& old_args, const std::string& new_args) {
    const Outcome a = run(old_args), b = run(new_args);
    ASSERT_EQ(a.rc, 0) << old_args << "\n" << a.err;
    ASSERT_EQ(b.rc, 0) << new_args << "\n" << b.err;
    EXPECT_EQ(a.out, b.out) << old_args;
    EXPECT_FALSE(a.out.empty()) << old_args;
  };
  same(kToyPlan + " --eval-iterations 2 --eval-start=3 --json", kToyPlan + " --iterations 2 --start-time=3 --json");
  same("trace slice " + kTrace + " --start-s 2 --end-s 8 --to json", "trace slice " + kTrace +
       " --start-time 2 --end-time 8 --output-format json");
  same("trace stats " + kTrace + " --start-s 2 --end-s 8", "trace stats " + kTrace + " --start-time 2 --end-time 8");
  same("trace synth periodic --high 2 --low 1 --period-s 4 --low-fraction 0.25 --until-s 9",
       "trace synth periodic --high 2 --low 1 --period-s 4 --low-fraction 0.25 --end-time 9");
  same("schedule zbv --stages 2 --micro-batches 4 --format json",
       "schedule zbv --stages 2 --micro-batches 4 --output-format json");
  same("trace import traces/data/bursty-onoff-25g.csv --format csv --to json",
       "trace import traces/data/bursty-onoff-25g.csv --input-format csv --output-format json");
  for (const auto& [cmd, old_names] : std::vector<std::pair<std::string, std::vector<std::string>>>{
           {"plan", {"--eval-iterations", "--eval-start"}},
           {"partition", {"--eval-iterations", "--eval-start"}},
           {"trace stats", {"--start-s", "--end-s"}},
           {"trace slice", {"--start-s", "--end-s", "--to "}},
           {"trace synth", {"--until-s", "--to "}},
           {"trace import", {"--format", "--to "}},
           {"sweep", {"--format"}},
           {"schedule", {"--format"}}}) {
    const Outcome help = run(cmd + " --help");
    for (const std::string& name : old_names) EXPECT_THAT(help.out, Not(HasSubstr(name))) << cmd << " " << name;
  }
  expect_refused(kToyPlan + " --eval-iterations 0", "--iterations");
  // Given twice, under both spellings: Boost's one line.
  expect_refused(kToyPlan + " --eval-iterations 2 --iterations 3", "--iterations", "more than once");
}

TEST_F(OptionValues, UnitsMeanTheirPlainNumbers) {
  // The outputs, less the line that records the command line (a model's generated_by).
  const auto same = [&](const std::string& plain, const std::string& units) {
    const Outcome a = run(plain), b = run(units);
    ASSERT_EQ(a.rc, 0) << plain << "\n" << a.err;
    ASSERT_EQ(b.rc, 0) << units << "\n" << b.err;
    const std::regex command_line("\n *\"generated_by\": [^\n]*");
    EXPECT_EQ(std::regex_replace(a.out, command_line, ""), std::regex_replace(b.out, command_line, "")) << units;
  };
  same(kToyPlan + " --memory-limit 17179869184 --json", kToyPlan + " --memory-limit 16GiB --json");
  same(kToyPlan + " --start-time 90 --json", kToyPlan + " --start-time 1.5min --json");
  same(kToyKfkb + " --start-time 0.0005 --json", kToyKfkb + " --start-time 500us --json");
  same("trace synth periodic --high 3.125e9 --low 3.125e8 --period-s 10 --low-fraction 0.4 --phase-s 0.25",
       "trace synth periodic --high 25Gbit/s --low '2.5 Gbps' --period-s 10s --low-fraction 0.4 --phase-s 250ms");
  same("trace synth steps --levels 1e9,2.5e8 --durations-s 60,0.5",
       "trace synth steps --levels 1GB/s,2Gbit/s --durations-s 1min,500ms");
  same("trace stats " + kTrace + " --threshold 1e9 --start-time 2 --end-time 8",
       "trace stats " + kTrace + " --threshold 8Gbit/s --start-time 2000ms --end-time 8s");
  same("model --preset gpt2-xl --memory-bytes 17179869184 --memory-bandwidth 9e11 --kernel-overhead 4e-6 "
       "--reserved-bytes 1e9",
       "model --preset gpt2-xl --memory-bytes 16GiB --memory-bandwidth 900GB/s --kernel-overhead 4us "
       "--reserved-bytes 1GB");
  // Boost's one line naming the option, exit 2.
  expect_refused(kToyPlan + " --memory-limit 40Gib", "--memory-limit",
                 "is invalid: unknown size unit \"Gib\" (B, kB, MB, GB, TB, KiB, MiB, GiB, TiB, bit, kbit, Mbit, Gbit, "
                 "Tbit)");
  expect_refused(kToyPlan + " --memory-limit 5ms", "--memory-limit", "\"ms\" is a time unit, not a size unit");
  expect_refused(kToyPlan + " --memory-limit 0GiB", "--memory-limit: must be a positive number of bytes");
  expect_refused(kToyKfkb + " --start-time 5GB", "--start-time", "not a time unit");
  expect_refused(kToyKfkb + " --start-time ''", "--start-time", "empty");
  expect_refused(kToyKfkb + " --start-time 5s5", "--start-time", "unexpected");
  expect_refused("trace synth periodic --high 25Gbit --low 1 --period-s 1 --low-fraction 0.5", "--high",
                 "\"Gbit\" is a size unit, not a rate unit");
  expect_refused("trace synth steps --levels 1,2x --durations-s 1,1", "--levels: \"2x\": unknown rate unit");
  // --help says where units are accepted.
  for (const char* cmd : {"simulate", "plan", "partition", "adapt", "model", "trace synth", "trace stats"})
    EXPECT_THAT(run(std::string(cmd) + " --help").out, HasSubstr("units accepted")) << cmd;
}

TEST_F(OptionValues, HelpCommandIsCommandDashDashHelp) {
  for (const char* cmd : {"simulate", "schedule", "trace", "trace synth", "trace import", "trace stats",
                          "trace slice", "trace import-kineto", "plan", "model", "partition", "sweep", "compare",
                          "adapt"}) {
    const Outcome help = run(std::string("help ") + cmd);
    const Outcome dash = run(std::string(cmd) + " --help");
    EXPECT_EQ(help.rc, 0) << cmd;
    EXPECT_EQ(dash.rc, 0) << cmd;
    EXPECT_EQ(help.out, dash.out) << cmd;
    EXPECT_FALSE(help.out.empty()) << cmd;
  }
  EXPECT_EQ(run("help frobnicate").rc, 2);
  EXPECT_EQ(run("help").rc, 0);
}

#ifdef CALIB_BIN
namespace {

Outcome run_calib(const std::string& args, const fs::path& dir) { return clirunner::run_program(CALIB_BIN, args, dir); }

}  // namespace

TEST_F(OptionValues, CalibrationHarnessCommandLine) {
  const Outcome version = run_calib("--version", dir_);
  EXPECT_EQ(version.rc, 0) << version.err;
  EXPECT_THAT(version.out, HasSubstr("adagrouper-calib 0.1.0"));
  const Outcome mode = run_calib("frobnicate", dir_);
  EXPECT_EQ(mode.rc, 2);
  EXPECT_THAT(mode.err, HasSubstr("replay"));
  EXPECT_EQ(std::count(mode.err.begin(), mode.err.end(), '\n'), 1) << mode.err;
  // A failure in the middle of the work: one line, no MPI_ABORT banner.
  const Outcome unwritable =
      run_calib("bandwidth --backend cpu -b 1K -e 1K --iters 1 --output-dir /proc/adagrouper-nowhere", dir_);
  EXPECT_NE(unwritable.rc, 0);
  EXPECT_THAT(unwritable.err, Not(HasSubstr("MPI_ABORT")));
  EXPECT_EQ(std::count(unwritable.err.begin(), unwritable.err.end(), '\n'), 1) << unwritable.err;
  // nccl-tests' -b, -e and -o are accepted (above) but --help shows the long names only:
  // -b is a micro-batch size and -o a file in adagrouper.
  const Outcome help = run_calib("bandwidth --help", dir_);
  EXPECT_EQ(help.rc, 0);
  EXPECT_THAT(help.out, HasSubstr("--min-bytes"));
  EXPECT_THAT(help.out, Not(HasSubstr("-b [")));
  EXPECT_THAT(help.out, Not(HasSubstr("-o [")));
}
#endif
