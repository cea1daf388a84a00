// The future-event set against a reference model: events come out by (time, order of
// scheduling), a component's new event replaces its pending one, and a popped
// component that schedules nothing disappears.
#include <gtest/gtest.h>

#include <algorithm>
#include <cstdint>
#include <optional>
#include <vector>

#include "eval/event_list.h"
#include "helpers.h"

namespace simtest {
namespace {

using sim::EventList;

TEST(EventList, TiesComeOutInSchedulingOrder) {
  EventList ev(5);
  ev.push(2.0, 4);
  ev.push(1.0, 3);
  ev.push(2.0, 0);
  ev.push(1.0, 1);
  std::vector<std::uint32_t> order;
  while (!ev.empty()) order.push_back(ev.pop().target);
  EXPECT_EQ(order, (std::vector<std::uint32_t>{3, 1, 4, 0}));
}

TEST(EventList, PoppedComponentRescheduledInPlace) {
  EventList ev(3);
  ev.push(1.0, 0);
  ev.push(3.0, 1);
  const auto e = ev.pop();
  EXPECT_EQ(e.target, 0u);
  EXPECT_EQ(e.time, 1.0);
  ev.push(5.0, 0);  // the stage starts its next op
  EXPECT_EQ(ev.pop().target, 1u);
  const auto last = ev.pop();
  EXPECT_EQ(last.target, 0u);
  EXPECT_EQ(last.time, 5.0);
  EXPECT_TRUE(ev.empty());
}

// Random scheduling, replacement and popping against a plain list of (time, seq).
TEST(EventList, MatchesReferenceOnRandomOperations) {
  for (std::uint64_t seed = 1; seed <= 20; ++seed) {
    Rng rng(seed);
    const auto n = static_cast<std::uint32_t>(rng.range(1, 300));
    EventList ev(n);
    struct Pending {
      double time;
      std::uint64_t seq;
    };
    std::vector<std::optional<Pending>> ref(n);
    std::uint64_t seq = 0;
    double now = 0;
    auto schedule = [&](std::uint32_t c) {
      const double t = now + rng.dyadic(0, 8, 4);  // many equal times
      ev.push(t, c);
      ref[c] = Pending{t, seq++};
    };
    for (int step = 0; step < 3000; ++step) {
      if (rng.chance(0.5)) {
        schedule(static_cast<std::uint32_t>(rng.below(n)));
        continue;
      }
      std::optional<std::uint32_t> want;
      for (std::uint32_t c = 0; c < n; ++c) {
        if (!ref[c]) continue;
        if (!want || ref[c]->time < ref[*want]->time ||
            (ref[c]->time == ref[*want]->time && ref[c]->seq < ref[*want]->seq))
          want = c;
      }
      ASSERT_EQ(ev.empty(), !want.has_value()) << "seed " << seed << " step " << step;
      if (!want) continue;
      const auto e = ev.pop();
      ASSERT_EQ(e.target, *want) << "seed " << seed << " step " << step;
      ASSERT_EQ(e.time, ref[*want]->time);
      now = e.time;
      ref[*want].reset();
      if (rng.chance(0.6)) schedule(*want);  // usually the popped component goes on
    }
  }
}

}  // namespace
}  // namespace simtest
