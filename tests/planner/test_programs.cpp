// Tests of device programs and their validation.
//
// Valid programs pass; deliberately broken ones (a send deleted, recvs swapped, bytes or
// tag changed, a deadlocking compute order) are caught.
#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <fmt/format.h>

#include <algorithm>
#include <map>
#include <string>
#include <vector>

#include "helpers.h"

namespace plantest {
namespace {

using Kind = planner::ProgramEntry::Kind;

std::string joined(const std::vector<std::string>& v) {
  std::string s;
  for (const auto& x : v) s += x + "\n";
  return s;
}

// Toy stages with distinct message sizes per stage.
std::vector<sim::StageParams> stages_for(int S) {
  std::vector<sim::StageParams> st(S);
  for (int s = 0; s < S; ++s) {
    st[s].fwd = 1;
    st[s].bwd = 2;
    st[s].act = 100;
    st[s].out = s + 1 < S ? 1000.0 * (s + 1) : 0.0;
    st[s].gout = s > 0 ? 10.0 * s + 1 : 0.0;
  }
  return st;
}

std::size_t find_entry(const planner::DeviceProgram& p, Kind kind, int mb, int communicator = -1) {
  for (std::size_t i = 0; i < p.entries.size(); ++i) {
    const auto& e = p.entries[i];
    if (e.kind == kind && e.micro_batch == mb && (communicator < 0 || e.communicator == communicator)) return i;
  }
  ADD_FAILURE() << "entry not found";
  return 0;
}

TEST(Programs, ShapeOfTheProgramsOfEveryNamedSchedule) {
  for (int S : {1, 2, 3, 4, 6}) {
    for (int M : {1, 3, 8}) {
      const auto st = stages_for(S);
      std::vector<sim::Schedule> schedules = {sim::make_named("1f1b", S, M, std::nullopt),
                                              sim::make_named("gpipe", S, M, std::nullopt),
                                              sim::make_named("dapple-b", S, M, std::nullopt)};
      for (int k = 1; k <= M; ++k) schedules.push_back(sim::make_kfkb(S, M, k));
      for (const auto& sch : schedules) {
        SCOPED_TRACE(fmt::format("S={} M={} {} k={}", S, M, sch.name(), sch.k));
        const auto progs = planner::device_programs(sch, st);
        ASSERT_EQ(progs.size(), static_cast<std::size_t>(S));
        EXPECT_THAT(planner::validate_programs(progs), ::testing::IsEmpty());
        for (int s = 0; s < S; ++s) {
          EXPECT_EQ(progs[s].stage, s);
          // Compute ops in schedule order (each of the stage's own model stage).
          std::vector<sim::Op> compute;
          for (const auto& e : progs[s].entries) {
            if (e.kind == Kind::Forward) compute.push_back({sim::Phase::Forward, e.micro_batch, s});
            if (e.kind == Kind::Backward) compute.push_back({sim::Phase::Backward, e.micro_batch, s});
          }
          EXPECT_EQ(compute, sch.stages[s]);
          // p2p ops: peers, tags, bytes, communicators.
          int sends = 0, recvs = 0;
          for (const auto& e : progs[s].entries) {
            if (e.kind != Kind::Send && e.kind != Kind::Recv) continue;
            (e.kind == Kind::Send ? sends : recvs)++;
            ASSERT_TRUE(e.peer == s - 1 || e.peer == s + 1) << "peer " << e.peer;
            ASSERT_TRUE(e.peer >= 0 && e.peer < S);
            const bool activation = (e.kind == Kind::Send) == (e.peer == s + 1);  // forward direction
            EXPECT_EQ(e.tag, activation ? 2 * e.micro_batch : 2 * e.micro_batch + 1);
            const int lo = std::min(s, e.peer);
            EXPECT_EQ(e.communicator, activation ? 2 * lo : 2 * lo + 1);
            EXPECT_EQ(e.bytes, activation ? st[lo].out : st[lo + 1].gout);
          }
          const int neighbours = (s > 0) + (s + 1 < S);
          EXPECT_EQ(sends, neighbours * M);
          EXPECT_EQ(recvs, neighbours * M);
        }
      }
    }
  }
}

class Broken : public ::testing::Test {
 protected:
  void SetUp() override {
    progs_ = planner::device_programs(sim::make_kfkb(4, 8, 2), stages_for(4));
    ASSERT_THAT(planner::validate_programs(progs_), ::testing::IsEmpty());
  }
  std::vector<planner::DeviceProgram> progs_;
};

TEST_F(Broken, DeletedSend) {
  auto& e = progs_[1].entries;
  e.erase(e.begin() + static_cast<long>(find_entry(progs_[1], Kind::Send, 3, 2)));
  const auto problems = planner::validate_programs(progs_);
  EXPECT_FALSE(problems.empty());
  EXPECT_THAT(joined(problems), HasSubstr("communicator 2"));
}

TEST_F(Broken, DeletedSendOnTheLastBackwardChannel) {
  auto& e = progs_[3].entries;
  e.erase(e.begin() + static_cast<long>(find_entry(progs_[3], Kind::Send, 7, 5)));
  EXPECT_FALSE(planner::validate_programs(progs_).empty());
}

TEST_F(Broken, SwappedRecvsOfOneCommunicator) {
  // Stage 2 receives activations 0 and 1 from stage 1 on communicator 2: swap them.
  auto& e = progs_[2].entries;
  const std::size_t i = find_entry(progs_[2], Kind::Recv, 0, 2), j = find_entry(progs_[2], Kind::Recv, 1, 2);
  std::swap(e[i], e[j]);
  const auto problems = planner::validate_programs(progs_);
  EXPECT_FALSE(problems.empty());
  EXPECT_THAT(joined(problems), HasSubstr("communicator 2"));
}

TEST_F(Broken, SwappedGradientRecvs) {
  auto& e = progs_[0].entries;
  const std::size_t i = find_entry(progs_[0], Kind::Recv, 4, 1), j = find_entry(progs_[0], Kind::Recv, 7, 1);
  std::swap(e[i], e[j]);
  EXPECT_FALSE(planner::validate_programs(progs_).empty());
}

TEST_F(Broken, RecvBytesChanged) {
  auto& r = progs_[3].entries[find_entry(progs_[3], Kind::Recv, 5, 4)];
  r.bytes += 1;
  const auto problems = planner::validate_programs(progs_);
  EXPECT_FALSE(problems.empty());
  EXPECT_THAT(joined(problems), HasSubstr("communicator 4"));
}

TEST_F(Broken, RecvTagChanged) {
  auto& r = progs_[1].entries[find_entry(progs_[1], Kind::Recv, 2, 3)];
  r.tag = 2 * 3 + 1;
  EXPECT_FALSE(planner::validate_programs(progs_).empty());
}

TEST_F(Broken, SendTagChanged) {
  auto& r = progs_[0].entries[find_entry(progs_[0], Kind::Send, 0, 0)];
  r.tag = 99;
  EXPECT_FALSE(planner::validate_programs(progs_).empty());
}

TEST_F(Broken, RecvPeerChanged) {
  auto& r = progs_[2].entries[find_entry(progs_[2], Kind::Recv, 6, 5)];
  r.peer = 1;
  EXPECT_FALSE(planner::validate_programs(progs_).empty());
}

// Moves entries b - 1 .. b + 1 (an op with the recv before it and the send after it) to
// the front of the program.
void move_to_front(std::vector<planner::ProgramEntry>& e, std::size_t b) {
  std::vector<planner::ProgramEntry> block(e.begin() + static_cast<long>(b - 1), e.begin() + static_cast<long>(b + 2));
  e.erase(e.begin() + static_cast<long>(b - 1), e.begin() + static_cast<long>(b + 2));
  e.insert(e.begin(), block.begin(), block.end());
}

// On the middle stage 1, move B0 (with its gradient recv and send) before the recv of
// F0's activation: per-communicator orders are unchanged, but B(1,0) now waits for
// stage 2's gradient, which needs F(1,0)'s activation: a cycle.
TEST_F(Broken, BackwardMovedBeforeItsForwardDeadlocks) {
  auto progs = planner::device_programs(sim::make_named("1f1b", 4, 8, std::nullopt), stages_for(4));
  ASSERT_THAT(planner::validate_programs(progs), ::testing::IsEmpty());
  auto& e = progs[1].entries;
  const std::size_t b = find_entry(progs[1], Kind::Backward, 0);
  ASSERT_GE(b, 1u);
  ASSERT_EQ(e[b - 1].kind, Kind::Recv);
  ASSERT_EQ(e[b + 1].kind, Kind::Send);
  move_to_front(e, b);
  const auto problems = planner::validate_programs(progs);
  ASSERT_FALSE(problems.empty());
  EXPECT_THAT(joined(problems), HasSubstr("cycle"));
}

// The same on stage 2 of the kfkb k = 2 programs: B0 moved before F0.
TEST_F(Broken, ComputeOpsReorderedDeadlock) {
  auto& e = progs_[2].entries;
  // Move the backward of micro-batch 0 (and its recv/send) to the front.
  const std::size_t b = find_entry(progs_[2], Kind::Backward, 0);
  move_to_front(e, b);
  const auto problems = planner::validate_programs(progs_);
  ASSERT_FALSE(problems.empty());
  EXPECT_THAT(joined(problems), HasSubstr("cycle"));
}

// The shipped deadlocking order (configs/schedules/toy-4-deadlock.json) gives programs
// that fail validation with a cycle; the shipped custom order passes.
TEST(Programs, ShippedCustomOrders) {
  const auto st = stages_for(4);
  const auto dead = sim::load_schedule_file(kRoot / "configs/schedules/toy-4-deadlock.json", 4, 8);
  const auto problems = planner::validate_programs(planner::device_programs(dead, st));
  ASSERT_FALSE(problems.empty());
  EXPECT_THAT(joined(problems), HasSubstr("cycle"));
  const auto ok = sim::load_schedule_file(kRoot / "configs/schedules/toy-4-custom.json", 4, 8);
  EXPECT_THAT(planner::validate_programs(planner::device_programs(ok, st)), ::testing::IsEmpty());
}

TEST(Programs, ChosenPlanProgramsValidate) {
  const sim::Pipeline p = sim::load_pipeline(kRoot / "configs/pipelines/gpt-8stage-v100.json");
  const sim::Network net = sim::load_network(kRoot / "configs/networks/eth-25g.json", p.num_stages());
  planner::PlanOptions o;
  o.global_batch_size = p.global_batch_size;
  o.memory_limit_bytes = *p.memory_limit_bytes;
  const auto plan = planner::make_plan(p, net, o);
  const auto progs = planner::device_programs(plan.chosen_schedule, plan.chosen_stages);
  EXPECT_THAT(planner::validate_programs(progs), ::testing::IsEmpty());
  EXPECT_NO_THROW(planner::plan_json(plan, {}));
}

// Programs of every family (model stages on stages, split backward, dynamic W fill as
// the simulator ran it) validate: messages between any pair of stages, none for local
// ones, each compute op once with its model stage, in the order of the schedule.
TEST(Programs, EveryFamilyValidates) {
  int checked = 0;
  for (const auto& family : sim::schedule_families()) {
    for (int D = 1; D <= 4; ++D)
      for (int M : {2, 4, 6, 8})
        for (int v = 1; v <= 3; ++v)
          for (const bool split : {false, true})
            for (const bool dynamic : {false, true}) {
              if (family.virtual_stages != 0 && v != family.virtual_stages) continue;
              sim::ScheduleSpec spec = sim::ScheduleSpec::named(family.name, family.takes_k ? std::optional<int>(2)
                                                                                            : std::nullopt);
              spec.virtual_stages = v;
              spec.split_backward = split && family.backward != sim::Backward::Split;
              if (split && family.backward == sim::Backward::Split) continue;
              if (dynamic && (split || family.backward != sim::Backward::Whole)) spec.w_fill = sim::WFill::Dynamic;
              else if (dynamic) continue;
              if (family.takes_k && M < 2) continue;
              sim::Schedule sch;
              try {
                sch = sim::make_schedule(spec, D, M);
              } catch (const InputError&) {
                continue;  // the family refuses (D, v, M)
              }
              SCOPED_TRACE(fmt::format("{} D={} M={}", spec.label(), D, M));
              const auto st = stages_for(D * v);
              if (spec.w_fill == sim::WFill::Dynamic) {
                sim::Pipeline p = sim::load_pipeline(kRoot / "configs/examples/toy-8.json");
                p.stages.resize(static_cast<std::size_t>(D * v), p.stages.back());
                p.global_batch_size = M;
                const sim::SimResult r = sim::simulate(sim::make_scenario(p, sim::Network::uniform(D, 1.0), sch, 1, 1),
                                                       {.record_order = true});
                sch.stages = r.executed.front();
              }
              const auto progs = planner::device_programs(sch, st);
              ASSERT_THAT(planner::validate_programs(progs), ::testing::IsEmpty());
              for (int d = 0; d < D; ++d) {
                std::vector<sim::Op> compute;
                for (const auto& e : progs[d].entries) {
                  if (e.kind == Kind::Send || e.kind == Kind::Recv) {
                    EXPECT_NE(e.peer, d);
                    EXPECT_NE(sch.stage_of(e.model_stage), e.peer);
                    continue;
                  }
                  static constexpr sim::Phase kPhase[] = {sim::Phase::Forward, sim::Phase::Backward, sim::Phase::Forward,
                                                          sim::Phase::Forward, sim::Phase::BackwardInput,
                                                          sim::Phase::BackwardWeight};
                  compute.push_back({kPhase[static_cast<int>(e.kind)], e.micro_batch, e.model_stage});
                }
                EXPECT_EQ(compute, sch.stages[d]) << "stage " << d;
              }
              ++checked;
            }
  }
  EXPECT_GE(checked, 200);
}

// When a receiver consumes a communicator's messages in another order than they are
// produced, the sender issues them in the receiver's order (the simulator's FIFO): a send
// waits after the producer of every message before it.
TEST(Programs, SendsFollowTheReceiversOrder) {
  using P = sim::Phase;
  sim::Schedule sch;
  sch.spec = sim::ScheduleSpec::custom();
  sch.stages = {{{P::Forward, 0, 0}, {P::Forward, 1, 0}, {P::Backward, 0, 0}, {P::Backward, 1, 0}},
                {{P::Forward, 1, 1}, {P::Forward, 0, 1}, {P::Backward, 1, 1}, {P::Backward, 0, 1}}};
  const auto progs = planner::device_programs(sch, stages_for(2));
  EXPECT_THAT(planner::validate_programs(progs), ::testing::IsEmpty());
  std::vector<std::pair<Kind, int>> stage0, stage1;
  for (const auto& e : progs[0].entries) stage0.emplace_back(e.kind, e.micro_batch);
  for (const auto& e : progs[1].entries) stage1.emplace_back(e.kind, e.micro_batch);
  EXPECT_EQ(stage0, (std::vector<std::pair<Kind, int>>{{Kind::Forward, 0},
                                                       {Kind::Forward, 1},
                                                       {Kind::Send, 1},
                                                       {Kind::Send, 0},
                                                       {Kind::Recv, 0},
                                                       {Kind::Backward, 0},
                                                       {Kind::Recv, 1},
                                                       {Kind::Backward, 1}}));
  EXPECT_EQ(stage1, (std::vector<std::pair<Kind, int>>{{Kind::Recv, 1},
                                                       {Kind::Forward, 1},
                                                       {Kind::Recv, 0},
                                                       {Kind::Forward, 0},
                                                       {Kind::Backward, 1},
                                                       {Kind::Backward, 0},
                                                       {Kind::Send, 0},
                                                       {Kind::Send, 1}}));
}

}  // namespace
}  // namespace plantest
