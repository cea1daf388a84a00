// RateTrace and RateCursor against hand-computed integrals, and one transfer through
// a piecewise channel.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <stdexcept>

#include "eval/token_bucket.h"
#include "helpers.h"

namespace simtest {
namespace {

using sim::kNever;
using sim::RateCursor;
using sim::RateTrace;

// 2 B/s on [0,3), 0 on [3,5), 1 from 5 on.
RateTrace trace_a() { return RateTrace::piecewise({0, 3, 5}, {2, 0, 1}); }
// The same shape repeating with period 8: one period integrates to 6 + 0 + 3 = 9.
RateTrace trace_b() { return RateTrace::piecewise({0, 3, 5}, {2, 0, 1}, 8); }

TEST(RateTrace, DefaultIsConstantOne) {
  RateTrace t;
  EXPECT_TRUE(t.is_constant());
  EXPECT_DOUBLE_EQ(t.value_at(123.0), 1.0);
  EXPECT_DOUBLE_EQ(t.integral(2, 7), 5.0);
  EXPECT_DOUBLE_EQ(t.finish(2, 7), 9.0);
}

TEST(RateTrace, Constant) {
  const RateTrace t = RateTrace::constant(4);
  EXPECT_TRUE(t.is_constant());
  EXPECT_DOUBLE_EQ(t.value_at(0), 4.0);
  EXPECT_DOUBLE_EQ(t.integral(1, 3), 8.0);
  EXPECT_DOUBLE_EQ(t.finish(1, 2), 1.5);
  EXPECT_EQ(t.integral(1, kNever), kNever);
  double from = -1;
  EXPECT_FALSE(t.zero_forever_after(&from));
}

TEST(RateTrace, PiecewiseValueAt) {
  const RateTrace a = trace_a();
  EXPECT_FALSE(a.is_constant());
  EXPECT_EQ(a.size(), 3u);
  EXPECT_DOUBLE_EQ(a.value_at(0), 2);
  EXPECT_DOUBLE_EQ(a.value_at(2.9), 2);
  EXPECT_DOUBLE_EQ(a.value_at(3), 0);
  EXPECT_DOUBLE_EQ(a.value_at(4.99), 0);
  EXPECT_DOUBLE_EQ(a.value_at(5), 1);
  EXPECT_DOUBLE_EQ(a.value_at(1000), 1);

  const RateTrace b = trace_b();
  EXPECT_DOUBLE_EQ(b.repeat_s(), 8);
  EXPECT_DOUBLE_EQ(b.value_at(7.5), 1);
  EXPECT_DOUBLE_EQ(b.value_at(8), 2);
  EXPECT_DOUBLE_EQ(b.value_at(11), 0);
  EXPECT_DOUBLE_EQ(b.value_at(13.5), 1);
  EXPECT_DOUBLE_EQ(b.value_at(16), 2);
  EXPECT_DOUBLE_EQ(b.value_at(8000 + 4), 0);
}

TEST(RateTrace, PiecewiseIntegralWithoutRepeat) {
  const RateTrace a = trace_a();
  EXPECT_DOUBLE_EQ(a.integral(0, 10), 11.0);  // 6 + 0 + 5
  EXPECT_DOUBLE_EQ(a.integral(1, 4), 4.0);
  EXPECT_DOUBLE_EQ(a.integral(4, 6), 1.0);
  EXPECT_DOUBLE_EQ(a.integral(3, 5), 0.0);
  EXPECT_DOUBLE_EQ(a.integral(2, 2), 0.0);
  EXPECT_DOUBLE_EQ(a.integral(0, 3), 6.0);
  EXPECT_EQ(a.integral(0, kNever), kNever);
  double from = -1;
  EXPECT_FALSE(a.zero_forever_after(&from));
}

TEST(RateTrace, PiecewiseIntegralWithRepeat) {
  const RateTrace b = trace_b();
  EXPECT_DOUBLE_EQ(b.integral(0, 8), 9.0);
  EXPECT_DOUBLE_EQ(b.integral(0, 16), 18.0);
  EXPECT_DOUBLE_EQ(b.integral(7, 12), 7.0);  // 1 + 6 + 0
  EXPECT_DOUBLE_EQ(b.integral(6, 8006), 9000.0);  // any window of 1000 periods
  EXPECT_DOUBLE_EQ(b.integral(8003, 8005), 0.0);
  EXPECT_DOUBLE_EQ(b.integral(8002, 8006), 2.0 + 1.0);
  EXPECT_EQ(b.integral(0, kNever), kNever);
  double from = -1;
  EXPECT_FALSE(b.zero_forever_after(&from));
}

TEST(RateTrace, FinishWithoutRepeat) {
  const RateTrace a = trace_a();
  EXPECT_DOUBLE_EQ(a.finish(0, 6), 3.0);     // exactly at the end of the first segment
  EXPECT_DOUBLE_EQ(a.finish(0, 6.5), 5.5);   // across the zero segment
  EXPECT_DOUBLE_EQ(a.finish(1, 1), 1.5);
  EXPECT_DOUBLE_EQ(a.finish(2.5, 1.5), 5.5);
  EXPECT_DOUBLE_EQ(a.finish(3.5, 1), 6.0);   // starts inside the zero segment
  EXPECT_DOUBLE_EQ(a.finish(100, 4), 104.0);
}

TEST(RateTrace, FinishWithRepeat) {
  const RateTrace b = trace_b();
  EXPECT_DOUBLE_EQ(b.finish(0, 9), 8.0);
  EXPECT_DOUBLE_EQ(b.finish(7, 7), 11.0);
  EXPECT_DOUBLE_EQ(b.finish(3.5, 1), 6.0);
  EXPECT_DOUBLE_EQ(b.finish(80003, 2), 80007.0);  // period 10000, inside the zero segment
  EXPECT_DOUBLE_EQ(b.finish(8, 0.5), 8.25);
}

TEST(RateTrace, FinishAcrossManyPeriods) {
  const RateTrace b = trace_b();
  // 1000 periods of work from a period boundary end exactly 1000 periods later.
  EXPECT_DOUBLE_EQ(b.finish(0, 9000), 8000.0);
  // From t0 = 1, 1000 periods later is 8001 (9000 done), then 0.5 more at rate 2.
  EXPECT_DOUBLE_EQ(b.finish(1, 9000.5), 8001.25);
  // From inside the zero segment: 1000 windows of 9 end at 8004 (still zero), then
  // 3 more bytes need [8005, 8008).
  EXPECT_DOUBLE_EQ(b.finish(4, 9003), 8008.0);

  RateCursor c(b);
  EXPECT_DOUBLE_EQ(c.finish(0, 9000), 8000.0);
  EXPECT_DOUBLE_EQ(c.finish(8000, 9000.5), 16000.25);

  // A period that ends with a zero segment: 1 B/s on [0, 1), 0 on [1, 2).
  const RateTrace gap = RateTrace::piecewise({0, 1}, {1, 0}, 2);
  EXPECT_DOUBLE_EQ(gap.finish(0, 1000), 1999.0);      // the first time the work is done
  EXPECT_DOUBLE_EQ(gap.finish(0.5, 1000), 2000.5);    // 999 windows, 0.5, the gap, 0.5
  EXPECT_DOUBLE_EQ(gap.finish(1.5, 1000), 2001.0);    // starts in the gap
  EXPECT_DOUBLE_EQ(gap.integral(0.5, 2000.5), 1000.0);
}

TEST(RateTrace, WorkZeroReturnsStart) {
  EXPECT_DOUBLE_EQ(trace_a().finish(3.5, 0), 3.5);
  EXPECT_DOUBLE_EQ(trace_b().finish(11, 0), 11.0);
  EXPECT_DOUBLE_EQ(RateTrace::constant(0).finish(7, 0), 7.0);
  EXPECT_DOUBLE_EQ(RateTrace::piecewise({0, 1}, {1, 0}).finish(5, 0), 5.0);
}

TEST(RateTrace, ZeroForeverIsNever) {
  const RateTrace z = RateTrace::piecewise({0, 5}, {1, 0});
  EXPECT_EQ(z.finish(6, 1), kNever);
  EXPECT_EQ(z.finish(4, 2), kNever);  // only 1 byte left before the rate drops to 0
  EXPECT_DOUBLE_EQ(z.finish(4, 1), 5.0);
  double from = -1;
  EXPECT_TRUE(z.zero_forever_after(&from));
  EXPECT_DOUBLE_EQ(from, 5.0);
  EXPECT_DOUBLE_EQ(z.integral(0, 100), 5.0);
  EXPECT_DOUBLE_EQ(z.integral(6, kNever), 0.0);

  const RateTrace z2 = RateTrace::piecewise({0, 2, 4}, {1, 0, 0});
  EXPECT_TRUE(z2.zero_forever_after(&from));
  EXPECT_DOUBLE_EQ(from, 2.0);
  EXPECT_EQ(z2.finish(0, 3), kNever);

  const RateTrace zero = RateTrace::constant(0);
  EXPECT_TRUE(zero.zero_forever_after(&from));
  EXPECT_DOUBLE_EQ(from, 0.0);
  EXPECT_EQ(zero.finish(3, 1), kNever);
  EXPECT_DOUBLE_EQ(zero.integral(0, kNever), 0.0);

  const RateTrace zero_rep = RateTrace::piecewise({0, 1}, {0, 0}, 2);
  EXPECT_TRUE(zero_rep.zero_forever_after(&from));
  EXPECT_EQ(zero_rep.finish(0, 1), kNever);
  EXPECT_EQ(zero_rep.finish(1e6, 1), kNever);

  RateCursor c(z);
  EXPECT_DOUBLE_EQ(c.finish(0, 1), 1.0);
  EXPECT_EQ(c.finish(1, 10), kNever);
  EXPECT_EQ(c.finish(100, 1e-9), kNever);

  // A repeating trace with zero segments is not zero forever.
  const RateTrace gaps = RateTrace::piecewise({0, 1}, {0, 4}, 2);
  EXPECT_FALSE(gaps.zero_forever_after(&from));
  EXPECT_DOUBLE_EQ(gaps.finish(0, 4), 2.0);
  EXPECT_DOUBLE_EQ(gaps.finish(0, 6), 3.5);
}

// Contract (rate.h): integral(t0, t1) is the integral over [t0, t1], with kNever
// allowed for t1. A rate that is 1 on [0, 5) and then 0 forever integrates to 5 over
// [0, inf).
// Regression test: RateTrace::integral (sim/rate.cpp) returned kNever whenever t0 was
// before the time from which the rate stays 0.
TEST(RateTrace, IntegralToInfinityOfRateThatDropsToZero) {
  const RateTrace z = RateTrace::piecewise({0, 5}, {1, 0});
  EXPECT_DOUBLE_EQ(z.integral(0, kNever), 5.0);
  EXPECT_DOUBLE_EQ(z.integral(4, kNever), 1.0);
  const RateTrace z2 = RateTrace::piecewise({0, 2, 4}, {1, 3, 0});
  EXPECT_DOUBLE_EQ(z2.integral(1, kNever), 1.0 + 6.0);
}

TEST(RateCursor, NonDecreasingStarts) {
  const RateTrace b = trace_b();
  RateCursor c(b);
  EXPECT_DOUBLE_EQ(c.finish(0, 9), 8.0);
  EXPECT_DOUBLE_EQ(c.finish(7, 7), 11.0);
  EXPECT_DOUBLE_EQ(c.finish(11, 1), 14.0);   // zero on [11, 13), then 1 B/s
  EXPECT_DOUBLE_EQ(c.finish(13.5, 3.5), 16.5);  // 2.5 by 16, then 2 B/s
  EXPECT_DOUBLE_EQ(c.finish(100, 1), 102.0);  // 100 = 12 periods + 4: zero until 101
  EXPECT_DOUBLE_EQ(c.finish(100, 1), 102.0);  // same start again
  EXPECT_DOUBLE_EQ(c.finish(104, 0.5), 104.25);
}

// Queries in order that leave the cursor's segment: into the next one (ending inside it
// or on its end), into the next period, past a segment of rate 0, across two segments,
// and with more work than a period holds. Dyadic numbers: every route is exact.
TEST(RateCursor, QueriesThatCrossIntoTheNextSegment) {
  const RateTrace c = RateTrace::piecewise({0, 2, 4, 6}, {4, 2, 1, 8}, 8);  // 30 per period
  RateCursor cur(c);
  EXPECT_EQ(cur.finish(1, 2), 1.5);     // inside [0, 2)
  EXPECT_EQ(cur.finish(1.5, 6), 4.0);   // 2 by 2, then 4 at 2 B/s: on the next one's end
  EXPECT_EQ(cur.finish(3, 4), 6.0);     // 2 by 4, then 2 at 1 B/s
  EXPECT_EQ(cur.finish(5, 9), 7.0);     // 1 by 6, then 8 at 8 B/s in the last segment
  EXPECT_EQ(cur.finish(7.5, 8), 9.0);   // 4 by 8, then 4 at 4 B/s in the next period
  EXPECT_EQ(cur.finish(9, 40), 22.0);   // one whole period (30), then 4 by 18, 4 by 20, 2 at 1 B/s
  EXPECT_EQ(cur.finish(25, 14), 30.5);  // 25 = 3 periods + 1: 4 + 4 + 2, then 4 at 8 B/s

  const RateTrace b = trace_b();  // {2, 0, 1} on [0, 3), [3, 5), [5, 8)
  RateCursor zero(b);
  EXPECT_EQ(zero.finish(2, 4), 7.0);  // 2 by 3, nothing until 5, then 2 at 1 B/s
}

TEST(RateCursor, DecreasingStartsStillCorrect) {
  const RateTrace b = trace_b();
  RateCursor c(b);
  EXPECT_DOUBLE_EQ(c.finish(100, 1), 102.0);
  EXPECT_DOUBLE_EQ(c.finish(2, 1), 2.5);
  EXPECT_DOUBLE_EQ(c.finish(1, 18), 17.0);    // two whole windows
  EXPECT_DOUBLE_EQ(c.finish(50, 0.5), 50.25);  // 50 = 6 periods + 2
  EXPECT_DOUBLE_EQ(c.finish(4, 2), 7.0);
  EXPECT_DOUBLE_EQ(c.finish(0, 9000), 8000.0);
  EXPECT_DOUBLE_EQ(c.finish(3, 0), 3.0);

  const RateTrace a = trace_a();
  RateCursor d(a);
  EXPECT_DOUBLE_EQ(d.finish(10, 1), 11.0);
  EXPECT_DOUBLE_EQ(d.finish(0, 2), 1.0);
  EXPECT_DOUBLE_EQ(d.finish(4, 1), 6.0);
  EXPECT_DOUBLE_EQ(d.finish(2, 3), 6.0);
  EXPECT_DOUBLE_EQ(d.finish(0.5, 0.5), 0.75);
}

// Random traces: the cursor (in order, out of order) agrees with the stateless finish,
// and the integral up to the finish time is the work.
TEST(RateCursor, AgreesWithStatelessFinishOnRandomTraces) {
  for (std::uint64_t seed = 1; seed <= 200; ++seed) {
    Rng rng(seed);
    const int n = rng.range(1, 6);
    std::vector<double> times{0.0}, values;
    for (int i = 1; i < n; ++i) times.push_back(times.back() + rng.dyadic(1, 16, 4));
    for (int i = 0; i < n; ++i) values.push_back(rng.chance(0.3) ? 0.0 : rng.dyadic(1, 16, 8));
    double repeat = 0;
    if (rng.chance(0.5)) repeat = times.back() + rng.dyadic(1, 8, 4);
    // Never zero forever.
    if (repeat == 0) values.back() = rng.dyadic(1, 16, 8);
    if (repeat > 0 && std::all_of(values.begin(), values.end(), [](double v) { return v == 0; }))
      values[0] = 1.0;
    const RateTrace tr = RateTrace::piecewise(times, values, repeat);
    RateCursor cur(tr);
    double t = 0;
    for (int q = 0; q < 50; ++q) {
      const bool back = rng.chance(0.2);
      const double t0 = back ? rng.uniform() * t : t + rng.uniform() * 5;
      const double work = rng.chance(0.1) ? 0.0 : rng.uniform() * 20;
      const double got = cur.finish(t0, work);
      const double want = tr.finish(t0, work);
      SCOPED_TRACE(testing::Message() << "seed " << seed << " query " << q << " t0 " << t0 << " work " << work);
      ASSERT_NE(got, kNever);
      ASSERT_GE(got, t0);
      EXPECT_NEAR(got, want, 1e-9 * (1 + std::fabs(want)));
      EXPECT_NEAR(tr.integral(t0, got), work, 1e-9 * (1 + work + std::fabs(got)));
      if (!back) t = got;
    }
  }
}

TEST(RateTrace, PiecewiseRejectsBadInput) {
  EXPECT_THROW(RateTrace::piecewise({}, {}), std::invalid_argument);
  EXPECT_THROW(RateTrace::piecewise({0, 1}, {1}), std::invalid_argument);
  EXPECT_THROW(RateTrace::piecewise({1}, {1}), std::invalid_argument);
  EXPECT_THROW(RateTrace::piecewise({0, 2, 2}, {1, 1, 1}), std::invalid_argument);
  EXPECT_THROW(RateTrace::piecewise({0, 2, 1}, {1, 1, 1}), std::invalid_argument);
  EXPECT_THROW(RateTrace::piecewise({0, 1}, {1, -1}), std::invalid_argument);
  EXPECT_THROW(RateTrace::piecewise({0}, {std::nan("")}), std::invalid_argument);
  EXPECT_THROW(RateTrace::piecewise({0}, {kNever}), std::invalid_argument);
  EXPECT_THROW(RateTrace::piecewise({0, 2}, {1, 1}, 2), std::invalid_argument);
  EXPECT_THROW(RateTrace::piecewise({0, 2}, {1, 1}, 1), std::invalid_argument);
  EXPECT_THROW(RateTrace::piecewise({0, 2}, {1, 1}, -1), std::invalid_argument);
  EXPECT_NO_THROW(RateTrace::piecewise({0, 2}, {1, 1}, 2.5));
}

// A message of 5 bytes leaves at t = 8 on a channel of 1 B/s that drops to 0.25 B/s on
// [10, 20): 2 bytes by 10, 2.5 bytes by 20, the last 0.5 byte at 1 B/s: ends at 20.5.
TEST(RateTransfer, MessageStraddlesBandwidthDrop) {
  const auto pipe = nlohmann::json::parse(R"({
    "global_batch_size": 1,
    "stages": [
      {"profile": [{"micro_batch_size": 1, "forward_s": 8, "backward_s": 1, "activation_bytes": 0,
                    "output_bytes": 5}]},
      {"profile": [{"micro_batch_size": 1, "forward_s": 1, "backward_s": 1, "activation_bytes": 0}]}
    ]})");
  const sim::Pipeline p = sim::parse_pipeline(pipe, "p.json");
  for (double latency : {0.0, 1.0}) {
    SCOPED_TRACE(testing::Message() << "latency " << latency);
    const nlohmann::json net = {
        {"channels",
         {{{"from", 0}, {"to", 1}, {"latency_s", latency}, {"rate", {{"points", {{0, 1}, {10, 0.25}, {20, 1}}}}}}}}};
    const auto sc = sim::make_scenario(p, sim::parse_network(net, "net.json", 2), sim::make_named("1f1b", 2, 1, {}),
                                       1, 2);
    const auto r = sim::simulate(sc, {.timeline = true});
    ASSERT_TRUE(r.timeline);
    const auto& tr = r.timeline->transfers;
    ASSERT_EQ(tr.size(), 4u);
    const auto& fwd = tr[0];
    EXPECT_EQ(fwd.from, 0);
    EXPECT_EQ(fwd.to, 1);
    EXPECT_DOUBLE_EQ(fwd.start, 8.0);
    // With latency 1 the bytes start flowing at 9: 1 byte by 10, 2.5 by 20, 1.5 more.
    EXPECT_DOUBLE_EQ(fwd.end, 20.5 + latency);
    EXPECT_DOUBLE_EQ(fwd.bytes, 5.0);
    // F(1,0) 1 s, B(1,0) 1 s, the gradient (5 bytes, unlimited channel) 0 s, B(0,0) 1 s.
    const double t1 = 20.5 + latency + 3;
    ASSERT_EQ(r.iteration_times_s.size(), 2u);
    EXPECT_DOUBLE_EQ(r.iteration_times_s[0], t1);
    // Iteration 1 starts at t1 (> 20): F(0,0) ends at t1 + 8, the channel runs at 1 B/s.
    EXPECT_DOUBLE_EQ(tr[2].start, t1 + 8);
    EXPECT_DOUBLE_EQ(tr[2].end, t1 + 8 + latency + 5);
    EXPECT_DOUBLE_EQ(r.iteration_times_s[1], 8 + latency + 5 + 3);
    EXPECT_DOUBLE_EQ(r.total_time_s, r.iteration_times_s[0] + r.iteration_times_s[1]);
  }
}

// A token bucket of 25 bytes in front of 100 bytes/s (docs/model.md, "Shaped links"):
// full at the start, 0 after a transfer it could not cover, refilled by idle time.
TEST(TokenBucket, GivesIdleChannelsAHeadStart) {
  sim::ChannelSpec spec;
  spec.set_rate(RateTrace::constant(100));
  spec.burst_bytes = 25;
  sim::eval::TokenBucket bucket(spec, 0.0);
  sim::RateCursor rate(*spec.rate);
  EXPECT_DOUBLE_EQ(bucket.finish(rate, 0.0, 100), 0.75);   // 25 at once, 75 at the rate
  EXPECT_DOUBLE_EQ(bucket.finish(rate, 0.75, 100), 1.75);  // back to back: no tokens
  EXPECT_DOUBLE_EQ(bucket.finish(rate, 2.0, 10), 2.0);     // 0.25 s idle: 25 tokens, 10 of them used
  EXPECT_DOUBLE_EQ(bucket.finish(rate, 2.05, 50), 2.35);   // 15 left + 5 accrued: 30 at the rate
  EXPECT_DOUBLE_EQ(bucket.finish(rate, 10.0, 0), 10.0);    // nothing to send
}

// Tokens accrue at the rate in force: nothing while it is 0 (100 bytes/s on [0, 1),
// 0 on [1, 2), then 100 again; an 80-byte bucket).
TEST(TokenBucket, TokensAccrueAtTheRateInForce) {
  sim::ChannelSpec spec;
  spec.set_rate(RateTrace::piecewise({0.0, 1.0, 2.0}, {100.0, 0.0, 100.0}));
  spec.burst_bytes = 80;
  sim::eval::TokenBucket bucket(spec, 0.0);
  sim::RateCursor rate(*spec.rate);
  EXPECT_DOUBLE_EQ(bucket.finish(rate, 0.0, 80), 0.0);   // the full bucket, at once
  EXPECT_DOUBLE_EQ(bucket.finish(rate, 0.5, 50), 0.5);   // 50 accrued over [0, 0.5]
  EXPECT_DOUBLE_EQ(bucket.finish(rate, 1.5, 60), 2.1);   // 50 accrued over [0.5, 1.5]; 10 wait for the rate at 2
}

}  // namespace
}  // namespace simtest
