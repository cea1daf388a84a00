// The command-line suites' fixture: a fresh directory per test, adagrouper run with its
// stderr through it, and the checks of a refused run.
// The including test target defines ADAGROUPER_BIN and SOURCE_ROOT (see its meson.build).
#pragma once

#include <unistd.h>

#include <algorithm>
#include <filesystem>
#include <string>
#include <utility>
#include <vector>

#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include "cli_runner.h"

namespace clirunner {

// The toy example as most command-line cases run it: kFkB k = 2 over the 2 s trace.
inline const std::string kToyKfkb =
    "simulate --pipeline configs/examples/toy-4.json --network configs/examples/toy-net-2s.json --schedule kfkb "
    "--k 2 -b 1";

class DirTest : public ::testing::Test {
 protected:
  // The directory is PREFIX, the test's name, "-" and the process id, under the system's
  // temporary directory.
  explicit DirTest(std::string prefix) : prefix_(std::move(prefix)) {}

  void SetUp() override {
    const auto* info = ::testing::UnitTest::GetInstance()->current_test_info();
    dir_ = std::filesystem::temp_directory_path() / (prefix_ + info->name() + "-" + std::to_string(::getpid()));
    std::filesystem::create_directories(dir_);
  }
  void TearDown() override { std::filesystem::remove_all(dir_); }

  // Runs `adagrouper ARGS` from the source root.
  Outcome run(const std::string& args) { return run_adagrouper(args, dir_); }

  // Exit 2 and one line on stderr that contains every piece; the outcome, for more checks.
  Outcome expect_one_line_error(const std::string& args, const std::vector<std::string>& pieces) {
    const Outcome r = run(args);
    EXPECT_EQ(r.rc, 2) << args << "\n" << r.err;
    EXPECT_EQ(std::count(r.err.begin(), r.err.end(), '\n'), 1) << args << "\n" << r.err;
    for (const auto& p : pieces) EXPECT_THAT(r.err, ::testing::HasSubstr(p)) << args;
    return r;
  }

  // A bad-input run with `--output DIR/OUT_NAME`: exit 2, one line on stderr containing
  // every piece, and no output file left behind.
  void expect_refused_without_output(const std::string& args, const std::vector<std::string>& pieces,
                                     const std::string& out_name) {
    const std::filesystem::path out = dir_ / out_name;
    expect_one_line_error(args + " --output '" + out.string() + "'", pieces);
    EXPECT_FALSE(std::filesystem::exists(out));
  }

  // No FILE.tmp.PID left anywhere in the directory.
  void expect_no_temporaries() const {
    for (const auto& e : std::filesystem::recursive_directory_iterator(dir_))
      EXPECT_EQ(e.path().filename().string().find(".tmp."), std::string::npos) << "temporary left: " << e.path();
  }

  std::filesystem::path dir_;

 private:
  std::string prefix_;
};

}  // namespace clirunner
