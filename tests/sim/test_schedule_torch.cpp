// PyTorch's schedules (interleaved-1f1b, looped-bfs, interleaved-zb, zbv, dualpipev) and
// PyTorch's compute-only schedule CSV: the orders against PyTorch's own artifacts, their
// properties over a grid, the refusals, reading, writing and the grid view.
#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <algorithm>
#include <array>
#include <string>
#include <string_view>

#include "helpers.h"

namespace simtest {
namespace {

using sim::Op;
using sim::Phase;
using testing::HasSubstr;
using testutil::input_error;

const std::filesystem::path kArtifacts = std::filesystem::path(SOURCE_ROOT) / "tests/sim/data/torch";

// The named family with v model stages per stage, for D stages and M micro-batches.
sim::Schedule torch_schedule(std::string_view family, int D, int v, int M) {
  sim::ScheduleSpec spec = sim::ScheduleSpec::named(family);
  spec.virtual_stages = v;
  return sim::make_schedule(spec, D, M);
}

// The orders in PyTorch's notation, one string per stage: "0F0 0F1 2F0 ...".
std::vector<std::string> actions(const sim::Schedule& s) {
  std::vector<std::string> out;
  for (const auto& ops : s.stages) {
    std::string line;
    for (const Op& op : ops) line += (line.empty() ? "" : " ") + sim::action_name(op);
    out.push_back(line);
  }
  return out;
}

// The stage of every model stage, whether or not the schedule keeps placement.
std::vector<int> stage_of_all(const sim::Schedule& s) {
  std::vector<int> out;
  for (int j = 0; j < s.num_model_stages(); ++j) out.push_back(s.stage_of(j));
  return out;
}

// --- the orders equal PyTorch's artifacts --------------------------------------------

TEST(TorchSchedule, DualPipeVEqualsPyTorchArtifact) {
  const auto artifact = sim::load_torch_csv(kArtifacts / "dualpipev_4rank_10mb.csv", 8, 10);
  const auto built = torch_schedule("dualpipev", 4, 2, 10);
  EXPECT_EQ(built.stages, artifact.stages);
  EXPECT_EQ(built.placement, artifact.placement);
  EXPECT_EQ(built.placement, (std::vector<int>{0, 1, 2, 3, 3, 2, 1, 0}));
  EXPECT_EQ(artifact.spec.virtual_stages, 2);
  EXPECT_TRUE(artifact.spec.is_custom());
  EXPECT_EQ(built.k, 1);
  // An overlapped pair runs forward then backward: (0F7;7B3)OVERLAP_F_B on rank 0.
  EXPECT_THAT(actions(built)[0], HasSubstr("7F3 0F7 7B3 7F4 0B0"));
}

TEST(TorchSchedule, InterleavedZeroBubbleEqualsPyTorchArtifact) {
  const auto artifact = sim::load_torch_csv(kArtifacts / "zb1p_2rank_2stagep_compute.csv", 4, 8);
  const auto built = torch_schedule("interleaved-zb", 2, 2, 8);
  EXPECT_EQ(built.stages, artifact.stages);
  EXPECT_EQ(built.placement, artifact.placement);
  EXPECT_EQ(built.placement, (std::vector<int>{0, 1, 0, 1}));
}

// The older artifact writes B where today's PyTorch writes I: B with W is read as I and W.
TEST(TorchSchedule, OlderArtifactWithBAndWReadsAsIAndW) {
  const auto older = sim::load_torch_csv(kArtifacts / "zb1p_2rank_2stagep_compute_b.csv", 4, 8);
  const auto today = sim::load_torch_csv(kArtifacts / "zb1p_2rank_2stagep_compute.csv", 4, 8);
  EXPECT_EQ(older.stages, today.stages);
  for (const auto& ops : older.stages)
    for (const Op& op : ops) EXPECT_NE(op.phase, Phase::Backward);
}

// Small orders worked out by hand from PyTorch's algorithms.
TEST(TorchSchedule, InterleavedOneFOneBByHand) {
  // D = 2, v = 2, M = 4: two rounds of 2; rank 0 warms up with 4 forwards, rank 1 with 2.
  const auto s = torch_schedule("interleaved-1f1b", 2, 2, 4);
  EXPECT_EQ(actions(s), (std::vector<std::string>{
                            "0F0 0F1 2F0 2F1 0F2 2B0 0F3 2B1 2F2 0B0 2F3 0B1 2B2 2B3 0B2 0B3",
                            "1F0 1F1 3F0 3B0 3F1 3B1 1F2 1B0 1F3 1B1 3F2 3B2 3F3 3B3 1B2 1B3",
                        }));
}

TEST(TorchSchedule, LoopedBfsByHand) {
  // Every forward of each model stage in turn, then the backwards, last first.
  const auto s = torch_schedule("looped-bfs", 2, 2, 2);
  EXPECT_EQ(actions(s),
            (std::vector<std::string>{"0F0 0F1 2F0 2F1 2B1 2B0 0B1 0B0", "1F0 1F1 3F0 3F1 3B1 3B0 1B1 1B0"}));
}

TEST(TorchSchedule, ZbvByHand) {
  // D = 2, M = 2: built for max(2D - 1, M) = 3 micro-batches, the ops of micro-batch 2 dropped.
  const auto s = torch_schedule("zbv", 2, 2, 2);
  EXPECT_EQ(actions(s), (std::vector<std::string>{"0F0 0F1 3F0 3I0 3W0 3F1 3I1 3W1 0I0 0W0 0I1 0W1",
                                                  "1F0 2F0 1F1 2F1 2I0 2W0 1I0 1W0 2I1 2W1 1I1 1W1"}));
}

TEST(TorchSchedule, InterleavedZeroBubbleWithOneModelStageIsZbH1) {
  // v = 1: rank d runs 1F1B with I ops and defers its W ops by d.
  const auto s = torch_schedule("interleaved-zb", 2, 1, 3);
  EXPECT_TRUE(s.placement.empty());
  EXPECT_EQ(actions(s),
            (std::vector<std::string>{"0F0 0F1 0I0 0W0 0F2 0I1 0W1 0I2 0W2", "1F0 1I0 1F1 1I1 1W0 1F2 1I2 1W1 1W2"}));
}

// --- properties over a grid ----------------------------------------------------------

// What the family's orders list for a backward.
enum class Lists { B, IW, Both };

// Each (model stage, micro-batch) of the schedule: F and either B or I and W, all on its
// stage, F before the backward, I before W; and the phases the family lists.
void expect_well_formed(const sim::Schedule& s, int D, int M, Lists lists) {
  ASSERT_NO_THROW(sim::validate_schedule(s, D, M, "grid"));
  bool saw_b = false, saw_iw = false;
  for (int d = 0; d < D; ++d) {
    std::vector<std::array<int, 4>> at(static_cast<std::size_t>(s.num_model_stages()) * M, {-1, -1, -1, -1});
    for (int i = 0; i < static_cast<int>(s.stages[d].size()); ++i) {
      const Op& op = s.stages[d][i];
      ASSERT_EQ(s.stage_of(op.model_stage), d) << sim::action_name(op);
      at[static_cast<std::size_t>(op.model_stage) * M + op.micro_batch][static_cast<int>(op.phase)] = i;
      saw_b |= op.phase == Phase::Backward;
      saw_iw |= op.phase == Phase::BackwardInput;
    }
    for (const auto& [f, b, in, w] : at) {
      if (f < 0) continue;  // not this stage's
      EXPECT_LT(f, std::max(b, in));
      if (in >= 0) {
        EXPECT_LT(in, w);
      }
    }
  }
  EXPECT_EQ(saw_b, lists != Lists::IW);
  EXPECT_EQ(saw_iw, lists != Lists::B);
}

// One line, naming the option.
void expect_refusal(const std::string& message, std::string_view option) {
  EXPECT_TRUE(message.starts_with(std::string(option) + ": ")) << message;
  EXPECT_EQ(message.find('\n'), std::string::npos) << message;
}

TEST(TorchSchedule, LoopFamiliesOnAGrid) {
  for (int D = 1; D <= 6; ++D)
    for (int v = 1; v <= 4; ++v)
      for (int M = 1; M <= 16; ++M) {
        SCOPED_TRACE(testing::Message() << "D=" << D << " v=" << v << " M=" << M);
        expect_well_formed(torch_schedule("looped-bfs", D, v, M), D, M, Lists::B);
        const int rounds = std::max(1, M / D);
        for (const auto& [family, lists] : {std::pair{"interleaved-1f1b", Lists::B}, {"interleaved-zb", Lists::IW}}) {
          SCOPED_TRACE(family);
          if (M % rounds != 0) {
            const std::string e = input_error([&] { torch_schedule(family, D, v, M); });
            expect_refusal(e, "--micro-batches");
            EXPECT_THAT(e, HasSubstr(fmt::format("rounds of max(1, floor(M / D)) = {}", rounds)));
            continue;
          }
          const auto s = torch_schedule(family, D, v, M);
          EXPECT_EQ(s.k, 1);
          EXPECT_EQ(stage_of_all(s), sim::place_model_stages(sim::Placement::Loop, D, v));
          expect_well_formed(s, D, M, lists);
        }
      }
}

TEST(TorchSchedule, VFamiliesOnAGrid) {
  for (int D = 1; D <= 6; ++D)
    for (int M = 1; M <= 16; ++M) {
      SCOPED_TRACE(testing::Message() << "D=" << D << " M=" << M);
      const auto zbv = torch_schedule("zbv", D, 2, M);
      EXPECT_EQ(zbv.placement, sim::place_model_stages(sim::Placement::V, D, 2));
      expect_well_formed(zbv, D, M, Lists::IW);
      if (M < 2 * D) {
        const std::string e = input_error([&] { torch_schedule("dualpipev", D, 2, M); });
        expect_refusal(e, "--micro-batches");
        EXPECT_THAT(e, HasSubstr(fmt::format("(2D = {}), got M = {}", 2 * D, M)));
        continue;
      }
      const auto dual = torch_schedule("dualpipev", D, 2, M);
      EXPECT_EQ(dual.placement, sim::place_model_stages(sim::Placement::V, D, 2));
      expect_well_formed(dual, D, M, Lists::Both);
    }
}

TEST(TorchSchedule, Refusals) {
  EXPECT_EQ(input_error([] { torch_schedule("interleaved-1f1b", 4, 2, 9); }),
            "--micro-batches: interleaved-1f1b runs the micro-batches in rounds of max(1, floor(M / D)) = 2 (D = 4), "
            "so M must be a multiple of 2, got 9");
  EXPECT_EQ(input_error([] { torch_schedule("dualpipev", 4, 2, 7); }),
            "--micro-batches: dualpipev needs at least as many micro-batches as model stages (2D = 8), got M = 7");
  EXPECT_EQ(input_error([] { torch_schedule("zbv", 4, 3, 8); }),
            "--virtual-stages: zbv runs 2 model stages per stage, got 3");
  sim::ScheduleSpec three = sim::ScheduleSpec::named("dualpipev");
  three.virtual_stages = 3;
  EXPECT_EQ(input_error([&] { sim::build_dualpipev(three, 4, 8); }),
            "--virtual-stages: dualpipev runs exactly 2 model stages per stage, got 3");
  EXPECT_EQ(input_error([] { torch_schedule("looped-bfs", 0, 2, 8); }),
            "--stages: looped-bfs needs at least one stage, got 0");
  EXPECT_EQ(input_error([] { torch_schedule("interleaved-zb", 2, 2, 0); }),
            "--micro-batches: interleaved-zb needs at least one micro-batch, got 0");
  // The families that split every backward refuse --split-backward; the others take it.
  sim::ScheduleSpec split = sim::ScheduleSpec::named("interleaved-zb");
  split.split_backward = true;
  expect_refusal(input_error([&] { sim::make_schedule(split, 2, 4); }), "--split-backward");
  split.family = "interleaved-1f1b";
  split.virtual_stages = 2;
  expect_well_formed(sim::make_schedule(split, 2, 4), 2, 4, Lists::IW);
}

TEST(TorchSchedule, FamiliesAreRegistered) {
  for (const char* name : {"interleaved-1f1b", "looped-bfs", "interleaved-zb", "zbv", "dualpipev"}) {
    const sim::ScheduleFamily* f = sim::find_schedule_family(name);
    ASSERT_NE(f, nullptr) << name;
    EXPECT_FALSE(f->takes_k);
    EXPECT_THAT(sim::schedule_families_help(), HasSubstr(name));
  }
  EXPECT_EQ(sim::find_schedule_family("zbv")->placement, sim::Placement::V);
  EXPECT_EQ(sim::find_schedule_family("dualpipev")->virtual_stages, 2);
  EXPECT_EQ(sim::find_schedule_family("interleaved-1f1b")->virtual_stages, 0);
  EXPECT_EQ(sim::find_schedule_family("interleaved-zb")->backward, sim::Backward::Split);
}

// --- the CSV ---------------------------------------------------------------------------

TEST(TorchCsv, RoundTrip) {
  const std::vector<std::pair<sim::Schedule, int>> all{{torch_schedule("interleaved-1f1b", 3, 2, 6), 6},
                                                       {torch_schedule("looped-bfs", 2, 3, 4), 4},
                                                       {torch_schedule("interleaved-zb", 4, 2, 8), 8},
                                                       {torch_schedule("interleaved-zb", 3, 1, 5), 5},
                                                       {torch_schedule("zbv", 3, 2, 7), 7},
                                                       {torch_schedule("dualpipev", 3, 2, 9), 9},
                                                       {sim::make_kfkb(4, 8, 2), 8}};
  for (const auto& [s, M] : all) {
    SCOPED_TRACE(s.spec.label());
    const std::string csv = sim::torch_csv(s);
    EXPECT_EQ(csv.find(",,"), std::string::npos);
    EXPECT_EQ(csv.find(",\n"), std::string::npos);
    EXPECT_EQ(std::count(csv.begin(), csv.end(), '\n'), s.num_stages());
    const auto back = sim::parse_torch_csv(csv, "rt.csv", s.num_model_stages(), M);
    EXPECT_EQ(back.stages, s.stages);
    EXPECT_EQ(back.placement, s.placement);
    EXPECT_EQ(back.spec.virtual_stages, s.spec.virtual_stages);
  }
}

TEST(TorchCsv, WritesPyTorchNotation) {
  EXPECT_EQ(sim::torch_csv(torch_schedule("looped-bfs", 2, 2, 1)), "0F0,2F0,2B0,0B0\n1F0,3F0,3B0,1B0\n");
  // Model stage -1 (the stage's own) is written as the stage.
  sim::Schedule own;
  own.stages = {{{Phase::Forward, 0}, {Phase::Backward, 0}}, {{Phase::Forward, 0}, {Phase::Backward, 0}}};
  EXPECT_EQ(sim::torch_csv(own), "0F0,0B0\n1F0,1B0\n");
}

TEST(TorchCsv, ReadsIdleCellsQuotesAndLineEnds) {
  const auto s =
      sim::parse_torch_csv("1F0,,\"(1F1;1B0)OVERLAP_F_B\" , 1B1 ,\r\n ,0F0,0B0,0F1,0B1\r\n\r\n", "x.csv", 2, 2);
  EXPECT_EQ(actions(s), (std::vector<std::string>{"1F0 1F1 1B0 1B1", "0F0 0B0 0F1 0B1"}));
  // Model stage 1 runs on row 1, 0 on row 2: placement kept; v = 1.
  EXPECT_EQ(s.placement, (std::vector<int>{1, 0}));
  EXPECT_EQ(s.spec.virtual_stages, 1);
  EXPECT_EQ(s.k, 0);
  // With model stage d on row d, placement stays empty, as make_schedule leaves it.
  EXPECT_TRUE(sim::parse_torch_csv("0F0,0B0\n1F0,1B0\n", "x.csv", 2, 1).placement.empty());
}

TEST(TorchCsv, BadFilesNameRowAndCell) {
  auto error = [](std::string_view text, int J = 2, int M = 2) {
    return input_error([&] { sim::parse_torch_csv(text, "sched.csv", J, M); });
  };
  const std::string rank1 = "\n1F0,1I0,1W0,1F1,1I1,1W1\n";
  EXPECT_EQ(error("0F0,0F1,0B0,0B1,X3" + rank1),
            "sched.csv: row 1, cell 5: unknown action 'X3' (expected jFm, jBm, jIm, jWm or (a;b)OVERLAP_F_B)");
  EXPECT_THAT(error("0F0,0SEND_F0" + rank1), HasSubstr("row 1, cell 2: unknown action '0SEND_F0'"));
  EXPECT_THAT(error("(0F0;1B0)OVERLAP" + rank1), HasSubstr("row 1, cell 1: unknown action '(0F0;1B0)OVERLAP'"));
  EXPECT_EQ(error("0F0,0F1,0B0,0B1,1F2" + rank1, 2, 3),
            "sched.csv: row 2, cell 1: model stage 1 is on row 1 (cell 5) too; a model stage runs on one rank");
  EXPECT_EQ(error("0F0,0B0\n1F0,1B0,2F0,2B0\n", 3, 1),
            "sched.csv: row 2: runs 2 model stages, row 1 runs 1; every rank runs the same number");
  EXPECT_EQ(error("0F0,0F1,0B0" + rank1), "sched.csv: row 1: misses 0B1");
  EXPECT_EQ(error("0F0,0F1,0B0,0B1\n1F0,1I0,1F1,1I1,1W1\n"), "sched.csv: row 2: misses 1W0");
  EXPECT_EQ(error("0F0,0F1,0B0,0B1,0F1" + rank1), "sched.csv: row 1, cell 5: 0F1 is repeated (first at cell 2)");
  EXPECT_EQ(error("0F0,0F1,0B0,0B1,0F2" + rank1), "sched.csv: row 1, cell 5: micro-batch 2 does not exist (M = 2)");
  EXPECT_EQ(error("0F0,0B1,0F1,0B0" + rank1), "sched.csv: row 1, cell 2: 0B1 comes before 0F1");
  EXPECT_EQ(error("0F0,0F1,0B0,0B1\n1F0,1W0,1I0,1F1,1I1,1W1\n"), "sched.csv: row 2, cell 2: 1W0 comes before 1I0");
  EXPECT_EQ(error("0F0,0F1,0B0,0B1\n1F0,1I0,1B0,1W0,1F1,1I1,1W1\n"),
            "sched.csv: row 2, cell 3: lists 1B0 and 1I0; a backward is B, or I and W");
  EXPECT_EQ(error("0F0,0F1,0B0,0B1" + rank1, 3), "sched.csv: lists 2 model stages, the pipeline has 3");
  EXPECT_EQ(error("0F0,0B0\n2F0,2B0\n", 3, 1), "sched.csv: model stage 1 is on no row, but model stage 2 is");
  EXPECT_EQ(error(",,\n"), "sched.csv: lists no action");
}

TEST(TorchCsv, ScheduleFileAcceptsBothForms) {
  TempDir dir;
  const std::string csv = "0F0,0F1,0B0,0B1\n1F0,1B0,1F1,1B1\n";
  const auto by_name = sim::load_schedule_file(dir.write("order.csv", csv), 2, 2);
  const auto by_look = sim::load_schedule_file(dir.write("order.txt", "  " + csv), 2, 2);
  const auto json = sim::load_schedule_file(
      dir.write("order.json", R"({"stages": [["F0", "F1", "B0", "B1"], ["F0", "B0", "F1", "B1"]]})"), 2, 2);
  EXPECT_TRUE(by_name.spec.is_custom());
  EXPECT_EQ(by_name.stages, by_look.stages);
  sim::Schedule resolved = json;
  sim::normalize_schedule(resolved, 2, 2, "order.json");
  EXPECT_EQ(by_name.stages, resolved.stages);
  EXPECT_THAT(input_error([&] { sim::load_schedule_file(dir.write("bad.csv", "0F0,0Q0\n"), 1, 1); }),
              HasSubstr("bad.csv: row 1, cell 2: unknown action '0Q0'"));
  // The artifact by way of --schedule-file.
  EXPECT_EQ(sim::load_schedule_file(kArtifacts / "dualpipev_4rank_10mb.csv", 8, 10).stages,
            torch_schedule("dualpipev", 4, 2, 10).stages);
}

TEST(TorchCsv, Grid) {
  EXPECT_EQ(sim::schedule_grid(sim::make_named("1f1b", 2, 2, std::nullopt)),
            "        Rank 0 Rank 1\n"
            "Step 0: 0F0    1F0\n"
            "Step 1: 0F1    1B0\n"
            "Step 2: 0B0    1F1\n"
            "Step 3: 0B1    1B1\n");
  const std::string grid = sim::schedule_grid(torch_schedule("dualpipev", 4, 2, 10));
  EXPECT_TRUE(grid.starts_with("         Rank 0 Rank 1 Rank 2 Rank 3\nStep 00: 0F0    1F0    2F0    3F0\n"));
  EXPECT_TRUE(grid.ends_with("Step 45: 0I9    1W9\nStep 46: 0W9\n"));
}

}  // namespace
}  // namespace simtest
