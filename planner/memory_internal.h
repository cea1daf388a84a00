// What the planner's two memory-model passes share: the pending-W bound and the cap of
// a receive slot (planner/ alone).
#pragma once

#include <algorithm>
#include <cstdint>
#include <limits>
#include <vector>

#include "planner.h"

namespace adagrouper::planner::memory_detail {

constexpr std::int64_t kUnlimited = std::numeric_limits<std::int64_t>::max();

// The bound on the pending W a stage holds under dynamic W fill (docs/model.md section
// 14): while it waits (or runs W ops) at most max(P, 1), while it runs a listed op at most
// max(P - 1, 0); unlimited P: every I so far.
struct PendingCaps {
  bool dynamic = false;
  std::int64_t gap = kUnlimited, running = kUnlimited;
  explicit PendingCaps(const sim::ScheduleSpec& spec) : dynamic(spec.w_fill == sim::WFill::Dynamic) {
    if (dynamic && spec.max_pending_w) {
      gap = std::max(*spec.max_pending_w, 1);
      running = std::max(*spec.max_pending_w - 1, 0);
    }
  }
};

// Messages waiting in a slot: never negative, at most its capacity.
inline std::int64_t capped(std::int64_t v, std::int64_t cap) { return std::min(std::max<std::int64_t>(v, 0), cap); }

// The memory model of a schedule with one model stage per stage (no placement): the
// chains run along the line of stages, so one pass per stage gives the same numbers as
// the general chain analysis, summed in the same order.
std::vector<double> line_memory_model(const std::vector<sim::StageParams>& params, const sim::Schedule& sch,
                                      const sim::Network& net);

}  // namespace adagrouper::planner::memory_detail
