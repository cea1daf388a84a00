// End-to-end tests of virtual stages, split backward, W fill and PyTorch schedule files
// on the command line: adagrouper schedule, simulate, and their bad inputs.
#include <filesystem>
#include <fstream>
#include <string>
#include <vector>

#include <gmock/gmock.h>
#include <gtest/gtest.h>
#include <nlohmann/json.hpp>

#include "../common/cli_fixture.h"

namespace fs = std::filesystem;
using ::testing::HasSubstr;

namespace {

class VirtualStagesCli : public clirunner::DirTest {
 protected:
  VirtualStagesCli() : DirTest("adagrouper-vs-") {}
  fs::path write(const std::string& name, const std::string& text) {
    std::ofstream(dir_ / name) << text;
    return dir_ / name;
  }
  // Exit 2, one line naming every piece, no output file left.
  void expect_bad(const std::string& args, const std::vector<std::string>& pieces) {
    expect_refused_without_output(args, pieces, "out.json");
  }
};

const std::string kToy8 = "simulate --pipeline configs/examples/toy-8.json --network configs/examples/toy-net-0.5s.json -b 1 ";

TEST_F(VirtualStagesCli, SimulateNamedSchedulesOfTodaysRuntimes) {
  const std::pair<const char*, double> runs[] = {{"--schedule zbv", 32.5},
                                                 {"--schedule dualpipev", 34},
                                                 {"--schedule interleaved-1f1b --virtual-stages 2", 35.5},
                                                 {"--schedule looped-bfs -v 2", 31.5},
                                                 {"--schedule zbv --w-fill dynamic", 30}};
  for (const auto& [args, time] : runs) {
    const auto r = run(kToy8 + args + " --json");
    ASSERT_EQ(r.rc, 0) << args << r.err;
    const auto j = nlohmann::json::parse(r.out);
    EXPECT_EQ(j["iteration_times_s"][0].get<double>(), time) << args;
    EXPECT_EQ(j["stages"], 4);
    EXPECT_EQ(j["virtual_stages"], 2);
    EXPECT_EQ(j["model_stages"], 8);
  }
  const auto text = run(kToy8 + "--schedule zbv");
  EXPECT_THAT(text.out, HasSubstr("S=4 stages x v=2 model stages (V placement)"));
}

TEST_F(VirtualStagesCli, KfkbWithDynamicWFill) {
  const auto r = run("simulate --pipeline configs/examples/toy-4.json --network configs/examples/toy-net-0.5s.json -b 1 "
                     "--schedule kfkb --k 2 --split-backward --w-fill dynamic --json");
  ASSERT_EQ(r.rc, 0) << r.err;
  EXPECT_EQ(nlohmann::json::parse(r.out)["iteration_times_s"][0].get<double>(), 28.5);
}

// A schedule printed as PyTorch's CSV, read back as a schedule file, runs the same; the
// order a dynamic-fill run executed exports and reruns the same too.
TEST_F(VirtualStagesCli, PyTorchCsvRoundTrips) {
  const auto csv = run("schedule zbv --stages 4 --micro-batches 8 --format torch-csv --output '" +
                       (dir_ / "zbv.csv").string() + "'");
  ASSERT_EQ(csv.rc, 0) << csv.err;
  const auto named = run(kToy8 + "--schedule zbv --json");
  const auto imported = run(kToy8 + "--schedule-file '" + (dir_ / "zbv.csv").string() + "' --json");
  ASSERT_EQ(imported.rc, 0) << imported.err;
  EXPECT_EQ(nlohmann::json::parse(named.out)["iteration_times_s"], nlohmann::json::parse(imported.out)["iteration_times_s"]);

  const auto dynamic = run(kToy8 + "--schedule zbv --w-fill dynamic --json --export-schedule '" +
                           (dir_ / "ran.csv").string() + "'");
  ASSERT_EQ(dynamic.rc, 0) << dynamic.err;
  const auto rerun = run(kToy8 + "--schedule-file '" + (dir_ / "ran.csv").string() + "' --json");
  ASSERT_EQ(rerun.rc, 0) << rerun.err;
  EXPECT_EQ(nlohmann::json::parse(dynamic.out)["iteration_times_s"], nlohmann::json::parse(rerun.out)["iteration_times_s"]);
}

TEST_F(VirtualStagesCli, ScheduleCommandFormats) {
  const auto grid = run("schedule interleaved-zb --stages 2 --micro-batches 4");
  ASSERT_EQ(grid.rc, 0) << grid.err;
  EXPECT_THAT(grid.out, HasSubstr("Rank 0"));
  const auto json = run("schedule dualpipev --stages 2 --micro-batches 4 --format json");
  ASSERT_EQ(json.rc, 0) << json.err;
  const auto j = nlohmann::json::parse(json.out);
  EXPECT_EQ(j["placement"], nlohmann::json::parse("[0, 1, 1, 0]"));
  EXPECT_EQ(j["orders"].size(), 2u);
}

TEST_F(VirtualStagesCli, BadInputsSayWhatAndWhere) {
  expect_bad(kToy8 + "--schedule interleaved-1f1b -v 3", {"--virtual-stages", "8 model stages", "v = 3"});
  expect_bad(kToy8 + "--schedule zbv -v 1", {"--virtual-stages", "zbv runs 2 model stages per stage"});
  expect_bad(kToy8 + "--schedule kfkb --k 2 -v 2", {"--virtual-stages", "kfkb runs 1 model stage per stage"});
  expect_bad(kToy8 + "--schedule zbv --split-backward", {"--split-backward", "already splits"});
  expect_bad(kToy8 + "--schedule interleaved-1f1b -v 2 --w-fill dynamic", {"--w-fill", "--split-backward"});
  expect_bad(kToy8 + "--schedule zbv --max-pending-w 2", {"--max-pending-w", "dynamic"});
  const auto heavy = write("heavy.json", R"({"global_batch_size": 2, "stages": [{"profile": [
      {"micro_batch_size": 1, "forward_s": 1, "backward_s": 2, "activation_bytes": 10, "weight_grad_bytes": 11}]}]})");
  expect_bad("simulate --network configs/examples/toy-net-0.5s.json -b 1 --schedule 1f1b --pipeline '" + heavy.string() +
                 "'",
             {heavy.string(), "weight_grad_bytes", "activation_bytes"});
  const auto twice = write("twice.csv", "0F0,1F0\n1F1\n");
  expect_bad(kToy8 + "--schedule-file '" + twice.string() + "'", {twice.string(), "row 2", "model stage 1"});
  const auto unknown = write("unknown.csv", "0F0,0X1\n");
  expect_bad(kToy8 + "--schedule-file '" + unknown.string() + "'", {unknown.string(), "row 1, cell 2", "X1"});
  // 1F1B on toy-4 with stage 0's B0 replaced by a second F1.
  std::string csv = run("schedule 1f1b --stages 4 --micro-batches 8 --format torch-csv").out;
  csv.replace(csv.find("0B0"), 3, "0F1");
  const auto dup = write("dup.csv", csv);
  expect_bad("simulate --pipeline configs/examples/toy-4.json --network configs/examples/toy-net-0.5s.json -b 1 "
             "--schedule-file '" + dup.string() + "'",
             {dup.string(), "row 1", "0F1"});
}

}  // namespace
