// The Chrome trace / Perfetto JSON of a run (timeline_json).
#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <map>
#include <set>
#include <string>
#include <tuple>
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
    // The slice is when the bytes move: 0.5 s at 1 B/s, after the 0.25 s latency.
    EXPECT_NEAR((*out)["dur"].get<double>(), 0.5e6, 1e-6);
  }
  for (const auto& t : r_.timeline->transfers) {
    const auto& e = *by_bind.at(static_cast<std::uint64_t>(&t - r_.timeline->transfers.data()) + 1)[0];
    EXPECT_DOUBLE_EQ(e["ts"].get<double>(), t.moving * 1e6);
    EXPECT_DOUBLE_EQ(e["dur"].get<double>(), (t.end - t.moving) * 1e6);
  }
}

// ready: the producing op's end; start: when the channel took the message; moving:
// start + latency; end: start + latency + bytes / rate.
TEST_F(TimelineJson, TransferTimesInTheResult) {
  std::map<std::tuple<int, int, int, bool>, double> op_end;  // (stage, iteration, micro-batch, backward)
  for (const auto& o : r_.timeline->ops)
    op_end[{o.stage, o.iteration, o.op.micro_batch, o.op.phase != sim::Phase::Forward}] = o.end;
  int waited = 0;
  for (const auto& t : r_.timeline->transfers) {
    EXPECT_EQ(t.ready, op_end.at({t.from, t.iteration, t.micro_batch, t.gradient}));
    EXPECT_LE(t.ready, t.start);
    EXPECT_DOUBLE_EQ(t.moving, t.start + 0.25);
    EXPECT_DOUBLE_EQ(t.end, t.moving + 0.5);
    waited += t.ready < t.start;
  }
  EXPECT_GT(waited, 0);  // the channel of capacity 1 makes messages wait
}

// A message that waited for its channel: an async "queued to N" slice (b and e with one
// id) on the sender's send thread, from ready to start, naming the message.
TEST_F(TimelineJson, QueuedSlices) {
  std::map<std::uint64_t, const json*> begins, ends;
  for (const auto* e : events("b")) begins[(*e)["id"].get<std::uint64_t>()] = e;
  for (const auto* e : events("e")) ends[(*e)["id"].get<std::uint64_t>()] = e;
  std::map<std::uint64_t, const json*> sends;  // bind_id -> the send slice
  for (const auto* e : events("X"))
    if (e->value("flow_out", false)) sends[(*e)["bind_id"].get<std::uint64_t>()] = e;
  std::size_t waited = 0;
  for (std::size_t i = 0; i < r_.timeline->transfers.size(); ++i) {
    const auto& t = r_.timeline->transfers[i];
    const std::uint64_t id = i + 1;
    if (!(t.ready < t.start)) {
      EXPECT_EQ(begins.count(id), 0u) << id;
      continue;
    }
    ++waited;
    ASSERT_EQ(begins.count(id), 1u) << id;
    ASSERT_EQ(ends.count(id), 1u) << id;
    const json& b = *begins[id];
    const json& e = *ends[id];
    const json& send = *sends.at(id);
    EXPECT_EQ(b["cat"], "queued");
    EXPECT_EQ(b["name"], "queued to " + std::to_string(t.to));
    EXPECT_EQ(e["name"], b["name"]);
    EXPECT_EQ(b["pid"], send["pid"]);
    EXPECT_EQ(b["tid"], send["tid"]);
    EXPECT_EQ(e["pid"], send["pid"]);
    EXPECT_EQ(b["args"]["message"], send["name"]);
    EXPECT_EQ(b["args"]["iteration"].get<int>(), t.iteration);
    EXPECT_DOUBLE_EQ(b["ts"].get<double>(), t.ready * 1e6);
    EXPECT_DOUBLE_EQ(e["ts"].get<double>(), t.start * 1e6);
  }
  EXPECT_GT(waited, 0u);
  EXPECT_EQ(begins.size(), waited);
  EXPECT_EQ(ends.size(), waited);
}

// Without a rate trace: one sample per channel, the constant rate, at the run's start.
TEST_F(TimelineJson, BandwidthOfAConstantChannel) {
  std::map<std::pair<int, std::string>, int> samples;
  for (const auto* e : events("C")) {
    const std::string name = (*e)["name"].get<std::string>();
    if (name.rfind("bandwidth to ", 0) != 0) continue;
    ++samples[{stage_of_.at((*e)["pid"].get<int>()), name}];
    EXPECT_DOUBLE_EQ((*e)["args"]["bytes_per_s"].get<double>(), 1.0);
    EXPECT_DOUBLE_EQ((*e)["ts"].get<double>(), 0.0);
  }
  EXPECT_EQ(samples, (std::map<std::pair<int, std::string>, int>{
                         {{0, "bandwidth to 1"}, 1}, {{1, "bandwidth to 0"}, 1},
                         {{1, "bandwidth to 2"}, 1}, {{2, "bandwidth to 1"}, 1}}));
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

// The rate of channel 0 -> 1 over a run starting at t = 5: repeating [0, 1) at rate 2,
// [1, 4) at 0.5, period 4.
sim::SimResult run_preempted(double period_scale, int iterations) {
  const auto p = uniform_pipeline(3, 4, 1.0, 2.0, 0.5);
  auto net = sim::Network::uniform(3, 1.0, 0.0);
  edit_channel(net, 0, 1, [&](sim::ChannelSpec& c) {
    c.set_rate(sim::RateTrace::piecewise({0.0, 1.0 * period_scale}, {2.0, 0.5}, 4.0 * period_scale));
  });
  auto sc = sim::make_scenario(p, net, sim::make_named("1f1b", 3, 4, std::nullopt), 1, iterations);
  sc.start_time_s = 5.0;
  return sim::simulate(sc, {.timeline = true});
}

std::vector<sim::Timeline::RateSample> rates_of(const sim::SimResult& r, int from, int to) {
  std::vector<sim::Timeline::RateSample> v;
  for (const auto& x : r.timeline->rates)
    if (x.from == from && x.to == to) v.push_back(x);
  return v;
}

TEST(TimelineRates, EveryChangeWithinTheRun) {
  const auto r = run_preempted(1.0, 2);
  const double end = 5.0 + r.total_time_s;
  const auto v = rates_of(r, 0, 1);
  ASSERT_FALSE(v.empty());
  EXPECT_DOUBLE_EQ(v[0].time, 5.0);  // in [4, 5): the preempted rate
  EXPECT_DOUBLE_EQ(v[0].value, 0.5);
  for (std::size_t i = 1; i < v.size(); ++i) {
    const double t = v[i].time;
    EXPECT_GT(t, v[i - 1].time);
    EXPECT_LE(t, end);
    const double in_period = std::fmod(t, 4.0);
    EXPECT_TRUE(in_period == 0.0 || in_period == 1.0) << t;
    EXPECT_DOUBLE_EQ(v[i].value, in_period == 0.0 ? 2.0 : 0.5) << t;
    EXPECT_NE(v[i].value, v[i - 1].value);
  }
  // Every change in (5, end]: two per period of 4 s.
  std::size_t changes = 0;
  for (double t = 8.0; t <= end; t += 4.0) changes += 1 + (t + 1.0 <= end);
  EXPECT_EQ(v.size(), 1 + changes);
  EXPECT_EQ(rates_of(r, 1, 2).size(), 1u);  // the constant channels: one sample
  EXPECT_EQ(rates_of(r, 1, 0).size(), 1u);
}

// A trace that changes more often than kMaxRateSamples times during the run: at most
// that many samples, each the mean over its bucket.
TEST(TimelineRates, FineTracesAreBucketed) {
  const auto r = run_preempted(1e-4, 3);  // a period of 0.4 ms: about 10^5 changes
  const double end = 5.0 + r.total_time_s;
  const auto v = rates_of(r, 0, 1);
  ASSERT_GE(v.size(), 1u);
  EXPECT_LE(v.size(), sim::Timeline::kMaxRateSamples);
  EXPECT_DOUBLE_EQ(v[0].time, 5.0);
  for (std::size_t i = 0; i < v.size(); ++i) {
    if (i > 0) {
      EXPECT_GT(v[i].time, v[i - 1].time);
    }
    EXPECT_LE(v[i].time, end);
    // The mean of 2 for a quarter and 0.5 for three quarters of each period, give or
    // take the part of a period a bucket cuts.
    EXPECT_NEAR(v[i].value, 0.875, 0.2) << i;
  }
}

TEST(TimelineRates, BoundedOnLongRuns) {
  const auto r = run_preempted(1.0, 400);  // about 10,000 s: thousands of changes, not 10^4
  const auto v = rates_of(r, 0, 1);
  EXPECT_LE(v.size(), sim::Timeline::kMaxRateSamples);
  EXPECT_GT(v.size(), 1000u);
}

// Optimizer steps: a slice per stage and iteration on the compute thread, right after
// the stage's last op of the iteration, lasting opt; none where opt is 0.
TEST(TimelineOptimizer, OneSlicePerStageAndIteration) {
  std::vector<sim::StageParams> st(3, sim::StageParams{.fwd = 1, .bwd = 2, .out = 0.5, .gout = 0.5});
  st[0].opt = 1.5;
  st[2].opt = 0.25;
  const auto sc = sim::make_scenario(pipeline_from(st, 4), sim::Network::uniform(3, 1.0),
                                     sim::make_named("kfkb", 3, 4, 2), 1, 2);
  const auto r = sim::simulate(sc, {.timeline = true});
  ASSERT_EQ(r.timeline->optimizer.size(), 4u);
  for (const auto& o : r.timeline->optimizer) {
    double last = 0;
    for (const auto& op : r.timeline->ops)
      if (op.stage == o.stage && op.iteration == o.iteration) last = std::max(last, op.end);
    EXPECT_EQ(o.start, last);
    EXPECT_DOUBLE_EQ(o.end - o.start, o.stage == 0 ? 1.5 : 0.25);
    EXPECT_NE(o.stage, 1);
  }
  const json doc = json::parse(sim::timeline_json(r));
  int slices = 0;
  std::map<int, std::vector<std::pair<double, double>>> compute;  // pid -> (ts, dur) on tid 1
  for (const auto& e : doc["traceEvents"]) {
    if (e["ph"] != "X" || e["tid"] != 1) continue;
    compute[e["pid"].get<int>()].emplace_back(e["ts"].get<double>(), e["dur"].get<double>());
    if (e["name"] != "optimizer") continue;
    ++slices;
    EXPECT_EQ(e["cat"], "optimizer");
    EXPECT_TRUE(e["args"].contains("iteration"));
  }
  EXPECT_EQ(slices, 4);
  for (auto& [pid, v] : compute) {  // the steps never overlap the next iteration's ops
    std::sort(v.begin(), v.end());
    for (std::size_t i = 1; i < v.size(); ++i) EXPECT_GE(v[i].first, v[i - 1].first + v[i - 1].second - 1e-6);
  }
}

TEST_F(TimelineJson, Deterministic) {
  EXPECT_EQ(text_, sim::timeline_json(run_kfkb(2)));
}

}  // namespace
}  // namespace simtest
