// Row-oriented CSV readers: stage timing traces and raw transfer samples.
#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include "helpers.h"

namespace {

using namespace tracestest;
using ::testing::HasSubstr;
namespace sim = adagrouper::sim;

}  // namespace

TEST(StageTrace, ParsesRowsWithHeaderCommentsAndBothPhaseSpellings) {
  const auto rows = tr::parse_stage_trace(
      "# measured on node 3\niteration,stage,micro_batch,phase,duration_s\n\n0,1,3,B,0.25\n2, 0, 7, forward, 1e-3\n",
      "st.csv");
  ASSERT_EQ(rows.size(), 2u);
  EXPECT_EQ(rows[0].iteration, 0);
  EXPECT_EQ(rows[0].stage, 1);
  EXPECT_EQ(rows[0].micro_batch, 3);
  EXPECT_EQ(rows[0].phase, sim::Phase::Backward);
  EXPECT_DOUBLE_EQ(rows[0].duration_s, 0.25);
  EXPECT_EQ(rows[0].line, 4);
  EXPECT_EQ(rows[1].phase, sim::Phase::Forward);
  EXPECT_EQ(rows[1].line, 5);
}

TEST(StageTrace, BadRowsNameFileAndLine) {
  EXPECT_THAT(input_error([] { tr::parse_stage_trace("0,1,3,B\n", "st.csv"); }), HasSubstr("st.csv:1: expected 5 columns"));
  EXPECT_THAT(input_error([] { tr::parse_stage_trace("0,1,3,X,1\n", "st.csv"); }), HasSubstr("st.csv:1: phase"));
  EXPECT_THAT(input_error([] { tr::parse_stage_trace("\n0,1.5,3,F,1\n", "st.csv"); }), HasSubstr("st.csv:2: stage"));
  EXPECT_THAT(input_error([] { tr::parse_stage_trace("0,1,3,F,-1\n", "st.csv"); }), HasSubstr("st.csv:1: duration_s"));
  EXPECT_THAT(input_error([] { tr::parse_stage_trace("0,1,3,F,nan\n", "st.csv"); }), HasSubstr("st.csv:1: duration_s"));
  EXPECT_THAT(input_error([] { tr::parse_stage_trace("# nothing\n", "st.csv"); }), HasSubstr("st.csv: no data rows"));
}

TEST(TransferSamples, ThreeAndFourColumns) {
  const auto plain = tr::parse_transfer_samples("time_s,bytes,duration_s\n0,100,0.5\n1,100,0.25\n", "s.csv");
  ASSERT_EQ(plain.size(), 2u);
  EXPECT_FALSE(plain[0].channel);
  EXPECT_DOUBLE_EQ(plain[1].duration_s, 0.25);
  const auto named = tr::parse_transfer_samples("channel,time_s,bytes,duration_s\n0->1,0,100,0.5\n2->1,0,50,1\n", "s.csv");
  ASSERT_EQ(named.size(), 2u);
  EXPECT_EQ(named[1].channel, (std::pair{2, 1}));
  EXPECT_EQ(named[1].line, 3);
}

TEST(TransferSamples, BadRowsNameFileAndLine) {
  EXPECT_THAT(input_error([] { tr::parse_transfer_samples("0,100,0\n", "s.csv"); }), HasSubstr("s.csv:1: duration_s"));
  EXPECT_THAT(input_error([] { tr::parse_transfer_samples("0,-1,1\n", "s.csv"); }), HasSubstr("s.csv:1: bytes"));
  EXPECT_THAT(input_error([] { tr::parse_transfer_samples("1,1,1\n0,1,1\n", "s.csv"); }),
              HasSubstr("s.csv:2: time_s: 0 goes backwards"));
  EXPECT_THAT(input_error([] { tr::parse_transfer_samples("0-1,0,1,1\n", "s.csv"); }), HasSubstr("s.csv:1: channel"));
}
