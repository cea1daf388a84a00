// Model stages on stages, split backward and W fill (docs/model.md §14): the worked
// examples, exactly, from both evaluators.
#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include "helpers.h"

namespace simtest {
namespace {

using sim::Evaluator;
using sim::ScheduleSpec;
using sim::WFill;

struct Row {
  const char* label;
  ScheduleSpec spec;
  double times[3];  // messages taking 0, 0.5 and 2 s
  int inflight[4];  // peak in-flight per stage with 0.5 s messages
};

ScheduleSpec spec(const char* family, std::optional<int> k, int v, bool split, WFill fill) {
  ScheduleSpec s = ScheduleSpec::named(family, k);
  s.virtual_stages = v;
  s.split_backward = split;
  s.w_fill = fill;
  return s;
}

const Row kRows[] = {
    {"1f1b", spec("1f1b", {}, 1, false, WFill::Static), {33, 41, 65}, {4, 3, 2, 1}},
    {"kfkb k=2", spec("kfkb", 2, 1, false, WFill::Static), {33, 36, 49}, {8, 6, 4, 2}},
    {"1f1b split dynamic", spec("1f1b", {}, 1, true, WFill::Dynamic), {27, 31, 55}, {6, 5, 4, 3}},
    {"kfkb k=2 split dynamic", spec("kfkb", 2, 1, true, WFill::Dynamic), {27, 28.5, 43}, {8, 8, 8, 8}},
    {"interleaved-zb v=1", spec("interleaved-zb", {}, 1, false, WFill::Static), {27, 33, 57}, {4, 4, 4, 4}},
    {"interleaved-1f1b v=2", spec("interleaved-1f1b", {}, 2, false, WFill::Static), {28.5, 35.5, 70}, {11, 9, 7, 5}},
    {"looped-bfs v=2", spec("looped-bfs", {}, 2, false, WFill::Static), {28.5, 31.5, 78}, {16, 16, 16, 16}},
    {"interleaved-zb v=2", spec("interleaved-zb", {}, 2, false, WFill::Static), {25.5, 36, 81}, {8, 8, 8, 8}},
    {"zbv", spec("zbv", {}, 2, false, WFill::Static), {25.5, 32.5, 67.5}, {8, 8, 8, 8}},
    {"dualpipev", spec("dualpipev", {}, 2, false, WFill::Static), {25.5, 34, 70}, {9, 9, 9, 9}},
    {"zbv dynamic", spec("zbv", {}, 2, false, WFill::Dynamic), {25.5, 30, 67.5}, {9, 11, 13, 16}},
};

// The 4-stage pipeline of docs/model.md §3 (forward 1 s, backward 2 s, so I = W = 1 s), or
// each of its stages cut in two (8 model stages, forward 0.5 s, backward 1 s), with
// messages of `transit` bytes at 1 byte/s.
sim::Scenario worked(const ScheduleSpec& s, double transit) {
  const int v = s.virtual_stages, D = 4, M = 8;
  const auto p = uniform_pipeline(D * v, M, 1.0 / v, 2.0 / v, transit);
  return sim::make_scenario(p, sim::Network::uniform(D, 1.0), sim::make_schedule(s, D, M), 1, 1);
}

TEST(VirtualStages, WorkedExamplesExactly) {
  for (const Row& row : kRows) {
    SCOPED_TRACE(row.label);
    const double transits[3] = {0.0, 0.5, 2.0};
    for (int t = 0; t < 3; ++t) {
      const auto sc = worked(row.spec, transits[t]);
      for (Evaluator e : {Evaluator::Events, Evaluator::Dataflow}) {
        const auto r = sim::simulate(sc, {.evaluator = e});
        EXPECT_EQ(r.iteration_times_s[0], row.times[t]) << "messages " << transits[t] << " s, "
                                                         << (e == Evaluator::Events ? "events" : "dataflow");
        if (t != 1) continue;
        for (int d = 0; d < 4; ++d) EXPECT_EQ(r.stages[d].peak_inflight, row.inflight[d]) << "stage " << d;
      }
    }
  }
}

}  // namespace
}  // namespace simtest
