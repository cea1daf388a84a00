// Seeded random scenarios checked against the execution model (docs/model.md section 3) through
// the timeline: every op once, in schedule order, each started exactly when it may
// start; transfers FIFO in the receiver's order, started exactly when allowed (producer,
// previous transfer, capacity); memory and in-flight levels recomputed independently;
// determinism.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <map>
#include <string>
#include <vector>

#include "helpers.h"

namespace simtest {
namespace {

using sim::Phase;
using sim::RateTrace;

// A bandwidth or speed trace: constant, or piecewise with zero segments and a repeat at
// probability 0.5, never zero forever.
RateTrace random_trace(Rng& rng, int lo_units, int hi_units, double denom) {
  return testutil::random_trace(rng, lo_units, hi_units, denom, 0.5);
}

// A random per-stage order: F and B each in a slightly shuffled micro-batch order (a few
// random adjacent swaps), merged at random with B(s,m) after F(s,m). Such orders may or
// may not deadlock.
sim::Schedule random_order(Rng& rng, int S, int M) {
  sim::Schedule sch;
  sch.spec = sim::ScheduleSpec::custom();
  sch.k = 0;
  auto perm = [&] {
    std::vector<int> p(M);
    for (int m = 0; m < M; ++m) p[m] = m;
    const int swaps = rng.range(0, 2);
    for (int i = 0; i < swaps && M > 1; ++i) {
      const int j = rng.range(0, M - 2);
      std::swap(p[j], p[j + 1]);
    }
    return p;
  };
  for (int s = 0; s < S; ++s) {
    const auto f = perm(), b = perm();
    std::vector<bool> started(M, false);
    std::vector<sim::Op> ops;
    std::size_t i = 0, j = 0;
    while (i < f.size() || j < b.size()) {
      const bool can_f = i < f.size();
      const bool can_b = j < b.size() && started[b[j]];
      if (can_f && (!can_b || rng.chance(0.5))) {
        started[f[i]] = true;
        ops.push_back({Phase::Forward, f[i++]});
      } else {
        ops.push_back({Phase::Backward, b[j++]});
      }
    }
    sch.stages.push_back(std::move(ops));
  }
  return sch;
}

struct RandomCase {
  sim::Scenario sc;
  bool free_unit = false;  // free communication, unit speeds
  std::string desc;
};

RandomCase random_case(std::uint64_t seed) {
  Rng rng(seed);
  RandomCase rc;
  const int S = rng.range(1, 6);
  const int M = rng.range(1, 12);
  rc.free_unit = seed % 4 == 0;

  sim::Pipeline p;
  p.name = "random";
  p.source = "random.json";
  p.global_batch_size = M;
  const bool explicit_gout = rng.chance(0.5);
  for (int s = 0; s < S; ++s) {
    sim::StageSpec spec;
    spec.static_bytes = rng.dyadic(0, 4, 1) * 1024;
    spec.optimizer_s = rng.chance(0.7) ? 0.0 : rng.dyadic(1, 4, 4);
    sim::ProfilePoint pt;
    pt.micro_batch_size = 1;
    pt.forward_s = rng.dyadic(1, 16, 8);
    pt.backward_s = rng.dyadic(1, 24, 8);
    pt.activation_bytes = rng.dyadic(0, 8, 1) * 64;
    pt.output_bytes = rng.dyadic(0, 8, 4);
    if (explicit_gout) pt.grad_output_bytes = rng.dyadic(0, 8, 4);
    spec.profile.push_back(pt);
    p.stages.push_back(spec);
  }

  sim::Network net = sim::Network::uniform(S, std::nullopt);
  // One case in four has token buckets of up to a message and a half on its channels,
  // drawn from a generator of their own so that the other numbers stay as they were.
  Rng bucket_rng(seed * 7919 + 17);
  const bool buckets = bucket_rng.chance(0.25);
  if (!rc.free_unit) {
    net.rewrite_channels([&](sim::ChannelSpec& ch) {
      ch.latency_s = rng.chance(0.5) ? 0.0 : rng.dyadic(1, 4, 8);
      if (!rng.chance(0.2)) ch.set_rate(random_trace(rng, 1, 16, 4));
      ch.capacity = rng.chance(0.5) ? 0 : rng.range(1, 3);
      if (buckets) ch.burst_bytes = bucket_rng.dyadic(0, 12, 4);
    });
    for (int s = 0; s < S; ++s) {
      const double u = rng.uniform();
      if (u < 0.5) {
        net.set_speed(s, RateTrace::constant(1.0));
      } else if (u < 0.7) {
        net.set_speed(s, RateTrace::constant(rng.dyadic(2, 8, 4)));
      } else {
        net.set_speed(s, random_trace(rng, 1, 8, 4));
      }
    }
  }

  sim::Schedule sch;
  switch (rng.below(6)) {
    case 0: sch = sim::make_named("1f1b", S, M, std::nullopt); break;
    case 1: sch = sim::make_named("gpipe", S, M, std::nullopt); break;
    case 2: sch = sim::make_named("dapple-b", S, M, std::nullopt); break;
    case 3: sch = sim::make_named("kfkb", S, M, rng.range(1, M)); break;
    case 4: sch = random_order(rng, S, M); break;
    default: {
      // A grouped order with random non-increasing warm-ups (a valid custom order).
      const int k = rng.range(1, M);
      const int G = (M + k - 1) / k;
      std::vector<int> w(S);
      int prev = G;
      for (int s = 0; s < S; ++s) prev = w[s] = rng.range(1, prev);
      sch.spec = sim::ScheduleSpec::custom();
      sch.stages = sim::grouped_orders(S, M, k, w);
      sch.k = 0;
    }
  }
  const int iterations = rng.range(1, 3);
  rc.desc = "seed " + std::to_string(seed) + ": S=" + std::to_string(S) + " M=" + std::to_string(M) + " " +
            sch.name() + " k=" + std::to_string(sch.k) + " iterations=" + std::to_string(iterations) +
            (rc.free_unit ? " free" : "");
  rc.sc = sim::make_scenario(p, std::move(net), std::move(sch), 1, iterations);
  return rc;
}

// Peak of "F started, B not ended" along one stage's order (ops of positive duration).
int order_peak(const std::vector<sim::Op>& ops) {
  int cur = 0, peak = 0;
  for (const auto& op : ops) {
    cur += op.phase == Phase::Forward ? 1 : -1;
    peak = std::max(peak, cur);
  }
  return peak;
}

// The warm-up count of a named schedule: micro-batches in the first W_s groups.
int warmup_count(const sim::Schedule& sch, int S, int M, int s) {
  if (sch.name() == "dapple-b") return std::min(2 * (S - s) - 1, M);
  const int k = sch.k;
  const int G = (M + k - 1) / k;
  return std::min(std::min(S - s, G) * k, M);
}

double tol(double x) { return 1e-9 * (1.0 + std::fabs(x)); }

struct Level {
  // (time, delta) changes; settled values are what remains after all changes at a time.
  std::vector<std::pair<double, double>> changes;
  std::vector<std::pair<double, double>> settled;  // (time, value) after each instant
  double initial = 0;
  double peak = 0;
  void settle() {
    std::sort(changes.begin(), changes.end(),
              [](const auto& a, const auto& b) { return a.first < b.first; });
    double cur = initial;
    peak = initial;
    for (std::size_t i = 0; i < changes.size();) {
      const double t = changes[i].first;
      for (; i < changes.size() && changes[i].first == t; ++i) cur += changes[i].second;
      settled.emplace_back(t, cur);
      peak = std::max(peak, cur);
    }
  }
  double at(double t) const {  // settled value at time t
    auto it = std::upper_bound(settled.begin(), settled.end(), t,
                               [](double v, const auto& e) { return v < e.first; });
    return it == settled.begin() ? initial : std::prev(it)->second;
  }
};

// The properties of one random case, checked on its timeline; each check below is one
// of them. The indexes built by index_ops and index_transfers are what the later checks
// look ops and transfers up in.
class CaseCheck {
 public:
  CaseCheck(const RandomCase& rc, const sim::SimResult& r)
      : rc_(rc), sc_(rc.sc), r_(r), tl_(*r.timeline), S(sc_.num_stages()), M(sc_.micro_batches()),
        I(sc_.iterations), C(2 * (S - 1)) {}

  // Every op exactly once per iteration per stage, in schedule order.
  void index_ops() {
    ASSERT_EQ(tl_.ops.size(), static_cast<std::size_t>(I) * S * 2 * M);
    op_at_.assign(static_cast<std::size_t>(I) * S * 2 * M, nullptr);
    runs_.assign(I, std::vector<std::vector<const sim::Timeline::OpSlice*>>(S));
    for (const auto& o : tl_.ops) {
      ASSERT_GE(o.stage, 0);
      ASSERT_LT(o.stage, S);
      ASSERT_GE(o.iteration, 0);
      ASSERT_LT(o.iteration, I);
      ASSERT_GE(o.op.micro_batch, 0);
      ASSERT_LT(o.op.micro_batch, M);
      auto& slot = op_at_[op_index(o.iteration, o.stage, o.op.phase, o.op.micro_batch)];
      ASSERT_EQ(slot, nullptr) << "op " << sim::op_name(o.op) << " of stage " << o.stage << " twice";
      slot = &o;
      runs_[o.iteration][o.stage].push_back(&o);
    }
    for (int it = 0; it < I; ++it) {
      for (int s = 0; s < S; ++s) {
        std::vector<sim::Op> ran;
        for (const auto* o : runs_[it][s]) ran.push_back(o->op);
        ASSERT_EQ(order_string(ran), order_string(sc_.schedule.stages[s])) << "iteration " << it << " stage " << s;
      }
    }
  }

  // Iteration boundaries: each ends when its last op and optimizer step do.
  void iteration_boundaries() {
    T_.assign(I + 1, 0.0);
    for (int it = 0; it < I; ++it) {
      double end = T_[it];
      for (int s = 0; s < S; ++s) end = std::max(end, runs_[it][s].back()->end + sc_.model_stages[s].opt);
      T_[it + 1] = end;
    }
    ASSERT_EQ(r_.iteration_times_s.size(), static_cast<std::size_t>(I));
    double sum = 0;
    for (int it = 0; it < I; ++it) {
      EXPECT_DOUBLE_EQ(r_.iteration_times_s[it], T_[it + 1] - T_[it]) << "iteration " << it;
      sum += r_.iteration_times_s[it];
    }
    EXPECT_DOUBLE_EQ(r_.total_time_s, T_[I]);
    EXPECT_NEAR(sum, r_.total_time_s, tol(r_.total_time_s));
  }

  // One transfer per message; lists_[it][c] in recorded (= completion) order.
  void index_transfers() {
    ASSERT_EQ(tl_.transfers.size(), static_cast<std::size_t>(I) * C * M);
    lists_.assign(I, std::vector<std::vector<const sim::Timeline::TransferSlice*>>(C));
    xfer_at_.assign(static_cast<std::size_t>(I) * C * M, nullptr);
    for (const auto& t : tl_.transfers) {
      ASSERT_TRUE(std::abs(t.from - t.to) == 1 && t.from >= 0 && t.to >= 0 && t.from < S && t.to < S);
      ASSERT_GE(t.iteration, 0);
      ASSERT_LT(t.iteration, I);
      const int c = channel_of(t.from, t.to);
      lists_[t.iteration][c].push_back(&t);
      auto& slot = xfer_at_[(static_cast<std::size_t>(t.iteration) * C + c) * M + t.micro_batch];
      ASSERT_EQ(slot, nullptr) << "micro-batch " << t.micro_batch << " sent twice on " << t.from << "->" << t.to;
      slot = &t;
    }
  }

  // Transfers: FIFO in the receiver's order, each starting when its message, the channel
  // and the receiver's buffer allow; the channel statistics.
  void transfers() {
    for (int c = 0; c < C; ++c) {
      channel(c);
      if (testing::Test::HasFatalFailure()) return;
    }
  }

  // Ops: each starts exactly when both the stage and its input are ready.
  void ops() {
    for (int s = 0; s < S; ++s) stage_ops(s);
  }

  // Memory and in flight, recomputed from the timeline.
  void levels() {
    std::vector<Level> mem(S), inflight(S);
    recompute_levels(mem, inflight);
    for (int s = 0; s < S; ++s) {
      EXPECT_DOUBLE_EQ(r_.stages[s].peak_memory_bytes, mem[s].peak) << "stage " << s;
      EXPECT_EQ(r_.stages[s].peak_inflight, static_cast<int>(inflight[s].peak)) << "stage " << s;
      EXPECT_EQ(r_.stages[s].peak_inflight, order_peak(sc_.schedule.stages[s])) << "stage " << s;
      if (rc_.free_unit && sc_.schedule.name() != "custom") {
        EXPECT_EQ(r_.stages[s].peak_inflight, warmup_count(sc_.schedule, S, M, s)) << "stage " << s;
      }
    }
    for (const auto& c : tl_.counters) {
      ASSERT_GE(c.stage, 0);
      ASSERT_LT(c.stage, S);
      EXPECT_GE(c.value, 0.0);
      if (c.kind == sim::Counter::Memory) {
        EXPECT_GE(c.value, sc_.model_stages[c.stage].static_bytes) << "memory of stage " << c.stage << " at " << c.time;
        EXPECT_DOUBLE_EQ(c.value, mem[c.stage].at(c.time)) << "memory of stage " << c.stage << " at " << c.time;
      }
    }
  }

  // The summary's counts.
  void summary() {
    EXPECT_EQ(r_.compute_ops, static_cast<std::uint64_t>(I) * S * 2 * M);
    EXPECT_EQ(r_.transfers, static_cast<std::uint64_t>(I) * C * M);
    EXPECT_EQ(r_.num_stages, S);
    EXPECT_EQ(r_.micro_batches, M);
    EXPECT_EQ(r_.iterations, I);
    EXPECT_GE(r_.bubble_fraction(), 0.0);
    EXPECT_LT(r_.bubble_fraction(), 1.0);
  }

 private:
  std::size_t op_index(int it, int s, Phase ph, int m) const {
    return ((static_cast<std::size_t>(it) * S + s) * 2 + (ph == Phase::Backward)) * M + m;
  }
  const sim::Timeline::OpSlice& op(int it, int s, Phase ph, int m) const { return *op_at_[op_index(it, s, ph, m)]; }
  int channel_of(int from, int to) const { return to > from ? from : (S - 1) + to; }
  const sim::Timeline::TransferSlice& xfer(int it, int c, int m) const {
    return *xfer_at_[(static_cast<std::size_t>(it) * C + c) * M + m];
  }

  void channel(int c) {
    const bool fwd = c < S - 1;
    const int s = fwd ? c : c - (S - 1);
    const int from = fwd ? s : s + 1, to = fwd ? s + 1 : s;
    const Phase ph = fwd ? Phase::Forward : Phase::Backward;
    const sim::ChannelSpec& spec = sc_.network.channel(from, to);
    const double bytes = fwd ? sc_.model_stages[s].out : sc_.model_stages[s + 1].gout;
    std::vector<int> consumption;
    for (const auto& o : sc_.schedule.stages[to])
      if (o.phase == ph) consumption.push_back(o.micro_batch);
    double prev_end = 0;
    // The channel's token bucket, followed independently (docs/model.md, "Shaped links"):
    // full at the start, refilled at the rate while idle, spent first.
    double tokens = spec.burst_bytes, since = sc_.start_time_s;
    for (int it = 0; it < I; ++it) {
      const auto& list = lists_[it][c];
      ASSERT_EQ(list.size(), static_cast<std::size_t>(M));
      for (int n = 0; n < M; ++n) {
        const auto& t = *list[n];
        SCOPED_TRACE(testing::Message() << "iteration " << it << " channel " << from << "->" << to << " message "
                                        << n << " (micro-batch " << t.micro_batch << ")");
        ASSERT_EQ(t.micro_batch, consumption[n]);
        EXPECT_EQ(t.bytes, bytes);
        const double produced = op(it, from, ph, t.micro_batch).end;
        double want = std::max(produced, prev_end);
        if (spec.capacity > 0 && n >= spec.capacity)
          want = std::max(want, op(it, to, ph, consumption[n - spec.capacity]).start);
        EXPECT_GE(t.start, produced);
        EXPECT_GE(t.start, prev_end);  // one message at a time
        EXPECT_DOUBLE_EQ(t.start, want);
        if (spec.unlimited() || bytes == 0) {
          EXPECT_DOUBLE_EQ(t.end, t.start + spec.latency_s);
        } else {
          const double flow = t.start + spec.latency_s;
          const double held = std::min(spec.burst_bytes, tokens + spec.rate->integral(since, flow));
          const double at_once = spec.burst_bytes > 0 ? std::min(held, bytes) : 0.0;
          const double e = spec.rate->finish(flow, bytes - at_once);
          EXPECT_NEAR(t.end, e, tol(e));
          tokens = held - at_once;
          since = t.end;
        }
        prev_end = t.end;
      }
    }
    const auto& cr = r_.channels[c];
    EXPECT_EQ(cr.from, from);
    EXPECT_EQ(cr.to, to);
    EXPECT_EQ(cr.messages, static_cast<std::uint64_t>(M) * I);
    if (spec.capacity > 0) {
      EXPECT_LE(cr.peak_queue_depth, spec.capacity);
    }
  }

  void stage_ops(int s) {
    const RateTrace& speed = sc_.network.speed(s);
    const bool unit = speed.is_constant() && speed.values()[0] == 1.0;
    double prev_end = 0;
    double busy = 0;
    for (int it = 0; it < I; ++it) {
      prev_end = std::max(prev_end, T_[it]);
      for (const auto* o : runs_[it][s]) {
        const int m = o->op.micro_batch;
        SCOPED_TRACE(testing::Message() << "iteration " << it << " stage " << s << " " << sim::op_name(o->op));
        double ready;
        if (o->op.phase == Phase::Forward) {
          ready = s == 0 ? T_[it] : xfer(it, channel_of(s - 1, s), m).end;
        } else {
          ready = s == S - 1 ? op(it, s, Phase::Forward, m).end : xfer(it, channel_of(s + 1, s), m).end;
        }
        EXPECT_GE(o->start, ready);
        EXPECT_GE(o->start, prev_end);  // non-overlapping on the stage
        EXPECT_DOUBLE_EQ(o->start, std::max(prev_end, ready));
        const double d = o->op.phase == Phase::Forward ? sc_.model_stages[s].fwd : sc_.model_stages[s].bwd;
        if (unit) {
          EXPECT_DOUBLE_EQ(o->end, o->start + d);
        } else {
          const double e = speed.finish(o->start, d);
          EXPECT_NEAR(o->end, e, tol(e));
        }
        prev_end = o->end;
        busy += o->end - o->start;
      }
    }
    EXPECT_DOUBLE_EQ(r_.stages[s].busy_s, busy) << "stage " << s;
    EXPECT_DOUBLE_EQ(r_.stages[s].bubble_s, r_.total_time_s - r_.stages[s].busy_s);
  }

  void recompute_levels(std::vector<Level>& mem, std::vector<Level>& inflight) const {
    for (int s = 0; s < S; ++s) mem[s].initial = sc_.model_stages[s].static_bytes;
    for (const auto& o : tl_.ops) {
      const double act = sc_.model_stages[o.stage].act;
      if (o.op.phase == Phase::Forward) {
        mem[o.stage].changes.emplace_back(o.start, act);
        inflight[o.stage].changes.emplace_back(o.start, 1);
      } else {
        mem[o.stage].changes.emplace_back(o.end, -act);
        inflight[o.stage].changes.emplace_back(o.end, -1);
      }
    }
    for (const auto& t : tl_.transfers) {
      const Phase ph = t.to > t.from ? Phase::Forward : Phase::Backward;
      mem[t.to].changes.emplace_back(t.end, t.bytes);
      mem[t.to].changes.emplace_back(op(t.iteration, t.to, ph, t.micro_batch).start, -t.bytes);
    }
    for (int s = 0; s < S; ++s) {
      mem[s].settle();
      inflight[s].settle();
    }
  }

  const RandomCase& rc_;
  const sim::Scenario& sc_;
  const sim::SimResult& r_;
  const sim::Timeline& tl_;
  const int S, M, I, C;
  std::vector<const sim::Timeline::OpSlice*> op_at_;
  std::vector<std::vector<std::vector<const sim::Timeline::OpSlice*>>> runs_;
  std::vector<double> T_;
  std::vector<std::vector<std::vector<const sim::Timeline::TransferSlice*>>> lists_;
  std::vector<const sim::Timeline::TransferSlice*> xfer_at_;
};

void check_case(const RandomCase& rc) {
  const auto r = sim::simulate(rc.sc, {.timeline = true});
  ASSERT_TRUE(r.timeline.has_value());
  CaseCheck check(rc, r);
  // A fatal failure in one check leaves the indexes the next ones use incomplete.
  for (void (CaseCheck::*step)() : {&CaseCheck::index_ops, &CaseCheck::iteration_boundaries,
                                    &CaseCheck::index_transfers, &CaseCheck::transfers, &CaseCheck::ops,
                                    &CaseCheck::levels, &CaseCheck::summary}) {
    (check.*step)();
    if (testing::Test::HasFatalFailure()) return;
  }
  // Determinism: a rerun gives the same outputs, and recording the timeline changes no result.
  const auto again = sim::simulate(rc.sc, {.timeline = true});
  EXPECT_EQ(sim::summary_json(r).dump(), sim::summary_json(again).dump());
  EXPECT_EQ(sim::timeline_json(r), sim::timeline_json(again));
  EXPECT_EQ(sim::summary_json(r).dump(), sim::summary_json(sim::simulate(rc.sc)).dump());
}

TEST(Properties, RandomScenarios) {
  int custom = 0, deadlocks = 0, free_unit = 0, capacity = 0, traces = 0;
  for (std::uint64_t seed = 1; seed <= 600; ++seed) {
    const RandomCase rc = random_case(seed);
    SCOPED_TRACE(rc.desc);
    const auto cycle = sim::find_dependency_cycle(rc.sc);
    if (!cycle.empty()) {
      // Only the randomly shuffled orders may deadlock; the engine must say so.
      ASSERT_EQ(rc.sc.schedule.name(), "custom");
      ASSERT_EQ(cycle.front(), cycle.back());
      ++deadlocks;
      try {
        sim::simulate(rc.sc);
        ADD_FAILURE() << "find_dependency_cycle found a cycle but the run finished";
      } catch (const SimError& e) {
        EXPECT_NE(std::string(e.what()).find("deadlock"), std::string::npos) << e.what();
      }
      continue;
    }
    custom += rc.sc.schedule.name() == "custom";
    free_unit += rc.free_unit;
    for (int s = 0; s + 1 < rc.sc.num_stages(); ++s)
      for (const auto* ch : {&rc.sc.network.channel(s, s + 1), &rc.sc.network.channel(s + 1, s)}) {
        capacity += ch->capacity > 0;
        traces += !ch->unlimited() && !ch->rate->is_constant();
      }
    check_case(rc);
    if (testing::Test::HasFatalFailure()) return;
  }
  // The generator covers what it should.
  EXPECT_GT(custom, 50);
  EXPECT_GT(deadlocks, 20);
  EXPECT_GT(free_unit, 50);
  EXPECT_GT(capacity, 100);
  EXPECT_GT(traces, 100);
}

// Positive-duration scenarios with free communication and unit speed: the peak
// in-flight count of each stage is its warm-up count, whatever the durations.
TEST(Properties, PeakInflightIsWarmupWithFreeCommunication) {
  for (std::uint64_t seed = 1000; seed < 1150; ++seed) {
    Rng rng(seed);
    const int S = rng.range(1, 6), M = rng.range(1, 12);
    std::vector<sim::StageParams> st(S);
    for (auto& p : st) {
      p.fwd = rng.dyadic(1, 16, 8);
      p.bwd = rng.dyadic(1, 16, 8);
      p.act = 1;
      p.out = rng.dyadic(0, 4, 1);
      p.gout = rng.dyadic(0, 4, 1);
    }
    const char* names[] = {"1f1b", "gpipe", "dapple-b", "kfkb"};
    const char* name = names[rng.below(4)];
    const std::optional<int> k = std::string(name) == "kfkb" ? std::optional<int>(rng.range(1, M)) : std::nullopt;
    const auto sch = sim::make_named(name, S, M, k);
    const auto sc = sim::make_scenario(pipeline_from(st, M), sim::Network::uniform(S, std::nullopt), sch, 1, 1);
    const auto r = sim::simulate(sc);
    for (int s = 0; s < S; ++s)
      EXPECT_EQ(r.stages[s].peak_inflight, warmup_count(sch, S, M, s))
          << "seed " << seed << " " << name << " S=" << S << " M=" << M << " stage " << s;
  }
}

}  // namespace
}  // namespace simtest
