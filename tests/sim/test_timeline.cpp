// The Chrome trace / Perfetto JSON of a run (timeline_json).
#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <map>
#include <cstdio>
#include <set>
#include <string>
#include <utility>
#include <vector>

#include "helpers.h"

namespace simtest {
namespace {

using nlohmann::json;

sim::SimResult run_kfkb(int iterations, bool timeline = true) {
  // S = 3, M = 4, k = 2, 0.5 s messages, activations and static memory.
  const auto p = uniform_pipeline(3, 4, 1.0, 2.0, 0.5, /*act=*/64, /*static=*/1024);
  auto net = sim::Network::uniform(3, 1.0, 0.25);
  edit_channel(net, 1, 2, [](sim::ChannelSpec& c) { c.capacity = 1; });
  const auto sc = sim::make_scenario(p, net, sim::make_named("kfkb", 3, 4, 2), 1, iterations);
  return sim::simulate(sc, {.timeline = timeline});
}

TEST(Timeline, AbsentUnlessAskedFor) {
  EXPECT_FALSE(run_kfkb(1, false).timeline.has_value());
  const auto r = run_kfkb(1, true);
  ASSERT_TRUE(r.timeline.has_value());
  EXPECT_EQ(r.timeline->ops.size(), 3u * 8u);
  EXPECT_EQ(r.timeline->transfers.size(), 4u * 4u);
}

class TimelineJson : public testing::Test {
 protected:
  void SetUp() override {
    r_ = run_kfkb(2);
    text_ = sim::timeline_json(r_);
    doc_ = json::parse(text_);  // throws (and fails the test) on invalid JSON
    ASSERT_TRUE(doc_.is_object());
    ASSERT_TRUE(doc_.contains("traceEvents"));
    ASSERT_TRUE(doc_["traceEvents"].is_array());
    for (const auto* e : events("M"))
      if ((*e)["name"] == "process_name")
        stage_of_[(*e)["pid"].get<int>()] = std::stoi((*e)["args"]["name"].get<std::string>().substr(6));
  }
  std::vector<const json*> events(const std::string& ph) const {
    std::vector<const json*> v;
    for (const auto& e : doc_["traceEvents"])
      if (e.value("ph", "") == ph) v.push_back(&e);
    return v;
  }
  sim::SimResult r_;
  std::string text_;
  json doc_;
  std::map<int, int> stage_of_;  // pid -> stage, from the process names "stage s"
};

TEST_F(TimelineJson, OneProcessPerStage) {
  std::map<int, std::string> names;
  std::map<std::pair<int, int>, std::string> threads;
  for (const auto* e : events("M")) {
    if ((*e)["name"] == "process_name") {
      const int pid = (*e)["pid"].get<int>();
      EXPECT_EQ(names.count(pid), 0u) << "pid " << pid << " named twice";
      names[pid] = (*e)["args"]["name"].get<std::string>();
    }
    if ((*e)["name"] == "thread_name")
      threads[{(*e)["pid"].get<int>(), (*e)["tid"].get<int>()}] = (*e)["args"]["name"].get<std::string>();
  }
  ASSERT_EQ(names.size(), 3u);
  std::set<std::string> stage_names;
  for (const auto& [pid, name] : names) stage_names.insert(name);
  EXPECT_EQ(stage_names, (std::set<std::string>{"stage 0", "stage 1", "stage 2"}));
  // Every X slice lives on a named process and a named thread.
  for (const auto* e : events("X")) {
    const int pid = (*e)["pid"].get<int>(), tid = (*e)["tid"].get<int>();
    EXPECT_EQ(names.count(pid), 1u) << e->dump();
    EXPECT_EQ(threads.count({pid, tid}), 1u) << e->dump();
  }
}

TEST_F(TimelineJson, ComputeSlices) {
  const auto& stage_of = stage_of_;
  std::multiset<std::tuple<int, int, std::string, double, double>> from_json, from_result;
  int n = 0;
  for (const auto* e : events("X")) {
    if ((*e)["tid"] != 1) continue;
    ++n;
    const std::string name = (*e)["name"].get<std::string>();
    char phase = 0;
    int mb = -1, used = 0;
    ASSERT_TRUE(std::sscanf(name.c_str(), "%c%d%n", &phase, &mb, &used) == 2 &&
                used == static_cast<int>(name.size()) && (phase == 'F' || phase == 'B'))
        << name;
    EXPECT_EQ((*e)["cat"], phase == 'F' ? "forward" : "backward");
    EXPECT_EQ((*e)["args"]["micro_batch"].get<int>(), mb);
    EXPECT_GT((*e)["dur"].get<double>(), 0.0);
    from_json.insert({stage_of.at((*e)["pid"].get<int>()), (*e)["args"]["iteration"].get<int>(), name,
                      (*e)["ts"].get<double>(), (*e)["dur"].get<double>()});
  }
  EXPECT_EQ(n, 2 * 3 * 8);
  for (const auto& o : r_.timeline->ops)
    from_result.insert({o.stage, o.iteration, sim::op_name(o.op), o.start * 1e6, (o.end - o.start) * 1e6});
  EXPECT_EQ(from_json, from_result);

  // Stage 0 runs F3 on [3, 4].
  bool found = false;
  for (const auto* e : events("X"))
    if ((*e)["tid"] == 1 && (*e)["name"] == "F3" && stage_of.at((*e)["pid"].get<int>()) == 0 &&
        (*e)["args"]["iteration"] == 0) {
      found = true;
      EXPECT_DOUBLE_EQ((*e)["ts"].get<double>(), 3e6);
      EXPECT_DOUBLE_EQ((*e)["dur"].get<double>(), 1e6);
    }
  EXPECT_TRUE(found);
}

TEST_F(TimelineJson, TransfersAppearOnBothEndsWithFlows) {
  std::map<std::uint64_t, std::vector<const json*>> by_bind;
  for (const auto* e : events("X")) {
    if ((*e)["tid"] == 1) continue;
    EXPECT_EQ((*e)["cat"], "transfer");
    ASSERT_TRUE(e->contains("bind_id")) << e->dump();
    by_bind[(*e)["bind_id"].get<std::uint64_t>()].push_back(e);
  }
  EXPECT_EQ(by_bind.size(), r_.timeline->transfers.size());
  for (const auto& [id, v] : by_bind) {
    ASSERT_EQ(v.size(), 2u) << "bind_id " << id;
    const json* out = v[0]->value("flow_out", false) ? v[0] : v[1];
    const json* in = out == v[0] ? v[1] : v[0];
    EXPECT_TRUE(out->value("flow_out", false));
    EXPECT_TRUE(in->value("flow_in", false));
    EXPECT_EQ((*out)["name"], (*in)["name"]);
    EXPECT_EQ((*out)["ts"], (*in)["ts"]);
    EXPECT_EQ((*out)["dur"], (*in)["dur"]);
    EXPECT_NE((*out)["tid"], (*in)["tid"]);
    const std::string name = (*out)["name"].get<std::string>();
    char phase = 0;
    int mb = -1, from = -1, to = -1, used = 0;
    ASSERT_TRUE(std::sscanf(name.c_str(), "%c%d %d->%d%n", &phase, &mb, &from, &to, &used) == 4 &&
                used == static_cast<int>(name.size()) && (phase == 'F' || phase == 'B'))
        << name;
    EXPECT_EQ(std::abs(from - to), 1);
    EXPECT_EQ(phase == 'F', to > from);
    EXPECT_EQ(stage_of_.at((*out)["pid"].get<int>()), from);  // sent from the sender's process
    EXPECT_EQ(stage_of_.at((*in)["pid"].get<int>()), to);     // received on the receiver's
    EXPECT_EQ((*out)["args"]["micro_batch"].get<int>(), mb);
    EXPECT_DOUBLE_EQ((*out)["args"]["bytes"].get<double>(), 0.5);
    // 0.25 s latency + 0.5 s at 1 B/s.
    EXPECT_NEAR((*out)["dur"].get<double>(), 0.75e6, 1e-6);
  }
}

TEST_F(TimelineJson, SlicesOnOneThreadNeverOverlap) {
  std::map<std::pair<int, int>, std::vector<std::pair<double, double>>> threads;
  for (const auto* e : events("X"))
    threads[{(*e)["pid"].get<int>(), (*e)["tid"].get<int>()}].emplace_back((*e)["ts"].get<double>(),
                                                                           (*e)["dur"].get<double>());
  EXPECT_GE(threads.size(), 3u + 4u * 2u);  // compute x 3, send and receive ends of 4 channels
  for (auto& [key, v] : threads) {
    std::sort(v.begin(), v.end());
    for (std::size_t i = 1; i < v.size(); ++i)
      EXPECT_GE(v[i].first, v[i - 1].first + v[i - 1].second - 1e-6)
          << "pid " << key.first << " tid " << key.second << " slice " << i;
  }
}

TEST_F(TimelineJson, MemoryCounters) {
  std::map<int, int> memory_events;
  for (const auto* e : events("C")) {
    if ((*e)["name"] != "memory") continue;
    ++memory_events[(*e)["pid"].get<int>()];
    const double bytes = (*e)["args"]["bytes"].get<double>();
    EXPECT_GE(bytes, 1024.0);
    EXPECT_LE(bytes, 1024.0 + 4 * 64 + 4 * 0.5);
    EXPECT_GE((*e)["ts"].get<double>(), 0.0);
  }
  EXPECT_EQ(memory_events.size(), 3u);
  // After the run everything is released: the last sample of each stage is its static memory.
  for (int s = 0; s < 3; ++s) {
    double last_t = -1, last_v = -1;
    for (const auto* e : events("C"))
      if ((*e)["name"] == "memory" && stage_of_.at((*e)["pid"].get<int>()) == s &&
          (*e)["ts"].get<double>() >= last_t) {
        last_t = (*e)["ts"].get<double>();
        last_v = (*e)["args"]["bytes"].get<double>();
      }
    EXPECT_DOUBLE_EQ(last_v, 1024.0) << "stage " << s;
  }
  // The largest counter value of each stage is its peak memory.
  for (int s = 0; s < 3; ++s) {
    double top = 0;
    for (const auto* e : events("C"))
      if ((*e)["name"] == "memory" && stage_of_.at((*e)["pid"].get<int>()) == s) top = std::max(top, (*e)["args"]["bytes"].get<double>());
    EXPECT_DOUBLE_EQ(top, r_.stages[s].peak_memory_bytes) << "stage " << s;
  }
}

TEST_F(TimelineJson, Deterministic) {
  EXPECT_EQ(text_, sim::timeline_json(run_kfkb(2)));
}

}  // namespace
}  // namespace simtest
