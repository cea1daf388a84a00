// Schedules (docs/model.md section 2): the op order of every named schedule.
#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <algorithm>

#include "helpers.h"

namespace simtest {
namespace {

using sim::make_named;
using sim::Op;
using sim::Phase;
using testing::HasSubstr;

TEST(Schedule, OpName) {
  EXPECT_EQ(sim::op_name({Phase::Forward, 12}), "F12");
  EXPECT_EQ(sim::op_name({Phase::Backward, 3}), "B3");
}

TEST(Schedule, SpecExampleTwoStagesFourMicroBatchesK2) {
  const auto s = make_named("kfkb", 2, 4, 2);
  EXPECT_EQ(s.name(), "kfkb");
  EXPECT_EQ(s.k, 2);
  ASSERT_EQ(s.num_stages(), 2);
  EXPECT_EQ(order_string(s.stages[0]), "F0 F1 F2 F3 B0 B1 B2 B3");
  EXPECT_EQ(order_string(s.stages[1]), "F0 F1 B0 B1 F2 F3 B2 B3");
}

TEST(Schedule, OneFOneB) {
  const auto s = make_named("1f1b", 4, 8, std::nullopt);
  EXPECT_EQ(s.name(), "1f1b");
  EXPECT_EQ(s.k, 1);
  EXPECT_EQ(order_string(s.stages[0]), "F0 F1 F2 F3 B0 F4 B1 F5 B2 F6 B3 F7 B4 B5 B6 B7");
  EXPECT_EQ(order_string(s.stages[1]), "F0 F1 F2 B0 F3 B1 F4 B2 F5 B3 F6 B4 F7 B5 B6 B7");
  EXPECT_EQ(order_string(s.stages[2]), "F0 F1 B0 F2 B1 F3 B2 F4 B3 F5 B4 F6 B5 F7 B6 B7");
  EXPECT_EQ(order_string(s.stages[3]), "F0 B0 F1 B1 F2 B2 F3 B3 F4 B4 F5 B5 F6 B6 F7 B7");
  EXPECT_EQ(s.stages, sim::make_kfkb(4, 8, 1).stages);
}

TEST(Schedule, GPipe) {
  const auto s = make_named("gpipe", 3, 4, std::nullopt);
  EXPECT_EQ(s.name(), "gpipe");
  EXPECT_EQ(s.k, 4);
  for (int st = 0; st < 3; ++st) EXPECT_EQ(order_string(s.stages[st]), "F0 F1 F2 F3 B0 B1 B2 B3");
}

TEST(Schedule, DappleB) {
  const auto s = make_named("dapple-b", 4, 8, std::nullopt);
  EXPECT_EQ(s.name(), "dapple-b");
  EXPECT_EQ(s.k, 1);
  // Warm-up 2(S - s) - 1 = 7, 5, 3, 1.
  EXPECT_EQ(order_string(s.stages[0]), "F0 F1 F2 F3 F4 F5 F6 B0 F7 B1 B2 B3 B4 B5 B6 B7");
  EXPECT_EQ(order_string(s.stages[1]), "F0 F1 F2 F3 F4 B0 F5 B1 F6 B2 F7 B3 B4 B5 B6 B7");
  EXPECT_EQ(order_string(s.stages[2]), "F0 F1 F2 B0 F3 B1 F4 B2 F5 B3 F6 B4 F7 B5 B6 B7");
  EXPECT_EQ(order_string(s.stages[3]), "F0 B0 F1 B1 F2 B2 F3 B3 F4 B4 F5 B5 F6 B6 F7 B7");
  // The warm-up is capped by M.
  const auto small = make_named("dapple-b", 4, 3, std::nullopt);
  EXPECT_EQ(order_string(small.stages[0]), "F0 F1 F2 B0 B1 B2");
  EXPECT_EQ(order_string(small.stages[2]), "F0 F1 F2 B0 B1 B2");
  EXPECT_EQ(order_string(small.stages[3]), "F0 B0 F1 B1 F2 B2");
}

TEST(Schedule, KfkbWithShortLastGroup) {
  // M = 8, k = 3: groups {0,1,2} {3,4,5} {6,7}.
  const auto s = make_named("kfkb", 2, 8, 3);
  EXPECT_EQ(order_string(s.stages[0]), "F0 F1 F2 F3 F4 F5 B0 B1 B2 F6 F7 B3 B4 B5 B6 B7");
  EXPECT_EQ(order_string(s.stages[1]), "F0 F1 F2 B0 B1 B2 F3 F4 F5 B3 B4 B5 F6 F7 B6 B7");
}

TEST(Schedule, KfkbWarmupCappedByGroupCount) {
  // S = 4 but only G = 2 groups: stage 0 warms up with both.
  const auto s = make_named("kfkb", 4, 2, 1);
  EXPECT_EQ(order_string(s.stages[0]), "F0 F1 B0 B1");
  EXPECT_EQ(order_string(s.stages[1]), "F0 F1 B0 B1");
  EXPECT_EQ(order_string(s.stages[2]), "F0 F1 B0 B1");
  EXPECT_EQ(order_string(s.stages[3]), "F0 B0 F1 B1");
  // k = M is gpipe.
  EXPECT_EQ(make_named("kfkb", 3, 5, 5).stages, make_named("gpipe", 3, 5, std::nullopt).stages);
}

TEST(Schedule, GroupedOrdersCustomWarmup) {
  const auto s = sim::grouped_orders(2, 4, 1, {3, 2});
  EXPECT_EQ(order_string(s[0]), "F0 F1 F2 B0 F3 B1 B2 B3");
  EXPECT_EQ(order_string(s[1]), "F0 F1 B0 F2 B1 F3 B2 B3");
}

// Every named schedule over a grid lists F and B of every micro-batch exactly once per
// stage, each phase in increasing micro-batch order, B(s,m) after F(s,m), and the
// warm-up is the micro-batches of the first W_s groups.
TEST(Schedule, NamedSchedulesAreCompleteOnAGrid) {
  for (int S = 1; S <= 6; ++S) {
    for (int M = 1; M <= 12; ++M) {
      std::vector<sim::Schedule> all{make_named("1f1b", S, M, std::nullopt), make_named("gpipe", S, M, std::nullopt),
                                     make_named("dapple-b", S, M, std::nullopt)};
      for (int k = 1; k <= M; ++k) all.push_back(make_named("kfkb", S, M, k));
      for (const auto& sch : all) {
        SCOPED_TRACE(testing::Message() << sch.name() << " k=" << sch.k << " S=" << S << " M=" << M);
        ASSERT_NO_THROW(sim::validate_schedule(sch, S, M, "grid"));
        const int k = sch.name() == "dapple-b" ? 1 : sch.k;
        const int G = (M + k - 1) / k;
        for (int s = 0; s < S; ++s) {
          const auto& ops = sch.stages[s];
          ASSERT_EQ(ops.size(), 2u * M);
          int nf = 0, nb = 0, inflight = 0, peak = 0;
          for (const Op& op : ops) {
            if (op.phase == Phase::Forward) {
              EXPECT_EQ(op.micro_batch, nf++);
              peak = std::max(peak, ++inflight);
            } else {
              EXPECT_EQ(op.micro_batch, nb++);
              EXPECT_LT(op.micro_batch, nf);  // its forward came first
              --inflight;
            }
          }
          int warm;
          if (sch.name() == "dapple-b") {
            warm = std::min(2 * (S - s) - 1, M);
          } else {
            const int W = std::min(S - s, G);
            warm = std::min(W * k, M);
          }
          EXPECT_EQ(peak, warm) << "stage " << s;
        }
      }
    }
  }
}

TEST(Schedule, MakeNamedRejectsBadInput) {
  EXPECT_THAT([] { make_named("zigzag", 2, 4, std::nullopt); },
              testing::ThrowsMessage<InputError>(HasSubstr("unknown schedule 'zigzag'")));
  EXPECT_THAT([] { make_named("kfkb", 2, 4, std::nullopt); }, testing::ThrowsMessage<InputError>(HasSubstr("--k")));
  EXPECT_THAT([] { make_named("kfkb", 2, 4, 0); }, testing::ThrowsMessage<InputError>(HasSubstr("--k")));
  EXPECT_THAT([] { make_named("kfkb", 2, 4, -3); }, testing::ThrowsMessage<InputError>(HasSubstr("got -3")));
  EXPECT_THAT([] { make_named("kfkb", 2, 4, 5); }, testing::ThrowsMessage<InputError>(HasSubstr("got 5")));
  EXPECT_THAT([] { make_named("1f1b", 2, 4, 2); }, testing::ThrowsMessage<InputError>(HasSubstr("--k")));
  EXPECT_NO_THROW(make_named("kfkb", 2, 4, 4));
  EXPECT_NO_THROW(make_named("kfkb", 2, 4, 1));
}

TEST(Schedule, ValidateRejectsIncompleteOrders) {
  sim::Schedule s = make_named("1f1b", 2, 2, std::nullopt);
  EXPECT_NO_THROW(sim::validate_schedule(s, 2, 2, "src"));
  EXPECT_THAT([&] { sim::validate_schedule(s, 3, 2, "src"); },
              testing::ThrowsMessage<InputError>(HasSubstr("src: stages: lists 2 stages")));

  sim::Schedule missing = s;
  missing.stages[1].pop_back();  // drops B1
  EXPECT_THAT([&] { sim::validate_schedule(missing, 2, 2, "src"); },
              testing::ThrowsMessage<InputError>(HasSubstr("src: stages[1]: misses B1")));

  sim::Schedule repeated = s;
  repeated.stages[0][1] = {Phase::Forward, 0};  // F0 F0 B0 B1
  EXPECT_THAT([&] { sim::validate_schedule(repeated, 2, 2, "src"); },
              testing::ThrowsMessage<InputError>(HasSubstr("src: stages[0][1]: F0 is repeated")));

  sim::Schedule out_of_range = s;
  out_of_range.stages[0][0] = {Phase::Forward, 2};
  EXPECT_THAT([&] { sim::validate_schedule(out_of_range, 2, 2, "src"); },
              testing::ThrowsMessage<InputError>(HasSubstr("micro-batch 2 does not exist")));
}

}  // namespace
}  // namespace simtest
