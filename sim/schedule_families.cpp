// The registry of schedule families (schedule.h): one table row per family, and the
// builders behind them.
#include <algorithm>
#include <array>

#include <fmt/format.h>

#include "error.h"
#include "schedule.h"

namespace adagrouper::sim {

std::vector<std::vector<Op>> grouped_orders(int S, int M, int k, const std::vector<int>& warmup_groups) {
  std::vector<std::vector<Op>> orders(S);
  const int G = (M + k - 1) / k;
  auto group = [&](std::vector<Op>& ops, Phase ph, int g) {
    for (int m = g * k; m < std::min((g + 1) * k, M); ++m) ops.push_back({ph, m});
  };
  for (int s = 0; s < S; ++s) {
    auto& ops = orders[s];
    ops.reserve(2 * static_cast<std::size_t>(M));
    const int W = std::clamp(warmup_groups[s], 1, G);
    int next_f = 0, next_b = 0;
    for (; next_f < W; ++next_f) group(ops, Phase::Forward, next_f);
    while (next_f < G) {
      group(ops, Phase::Backward, next_b++);
      group(ops, Phase::Forward, next_f++);
    }
    while (next_b < G) group(ops, Phase::Backward, next_b++);
  }
  return orders;
}

namespace {

// Group size k with the kFkB warm-up W_s = min(S - s, G).
Schedule grouped(const ScheduleSpec& spec, int S, int M, int k) {
  const int G = (M + k - 1) / k;
  std::vector<int> w(S);
  for (int s = 0; s < S; ++s) w[s] = std::min(S - s, G);
  return Schedule{spec, k, grouped_orders(S, M, k, w)};
}

Schedule build_kfkb(const ScheduleSpec& spec, int S, int M) { return grouped(spec, S, M, *spec.k); }
Schedule build_1f1b(const ScheduleSpec& spec, int S, int M) { return grouped(spec, S, M, 1); }
Schedule build_gpipe(const ScheduleSpec& spec, int S, int M) { return grouped(spec, S, M, M); }

// DAPPLE policy B: k = 1 with a warm-up of W_s = min(2(S - s) - 1, M) micro-batches.
Schedule build_dapple_b(const ScheduleSpec& spec, int S, int M) {
  std::vector<int> w(S);
  for (int s = 0; s < S; ++s) w[s] = std::min(2 * (S - s) - 1, M);
  return Schedule{spec, 1, grouped_orders(S, M, 1, w)};
}

// clang-format off
constexpr std::array<ScheduleFamily, 4> kFamilies{{
  {"kfkb", "k forwards, then k backwards (Ada-Grouper); needs --k K, 1 <= K <= M", true, build_kfkb},
  {"1f1b", "one forward, one backward (PipeDream-Flush, DAPPLE policy A): kfkb with k = 1", false, build_1f1b},
  {"gpipe", "all forwards, then all backwards: kfkb with k = M", false, build_gpipe},
  {"dapple-b", "1F1B with a warm-up of 2(S - s) - 1 forwards (DAPPLE policy B)", false, build_dapple_b},
}};
// clang-format on

}  // namespace

std::span<const ScheduleFamily> schedule_families() { return kFamilies; }

const ScheduleFamily* find_schedule_family(std::string_view name) {
  for (const ScheduleFamily& f : kFamilies)
    if (f.name == name) return &f;
  return nullptr;
}

std::string schedule_family_names() {
  std::string out;
  for (const ScheduleFamily& f : kFamilies) out += (out.empty() ? "" : ", ") + std::string(f.name);
  return out;
}

std::string schedule_families_help() {
  std::string out;
  for (const ScheduleFamily& f : kFamilies) out += fmt::format("  {:<10} {}\n", f.name, f.help);
  return out;
}

Schedule make_schedule(const ScheduleSpec& spec, int S, int M) {
  const ScheduleFamily* family = find_schedule_family(spec.family);
  if (!family)
    throw InputError(fmt::format("--schedule: unknown schedule '{}' (expected one of: {}, or --schedule-file)",
                                 spec.family, schedule_family_names()));
  if (family->takes_k) {
    if (!spec.k)
      throw InputError(fmt::format("--k: the {} schedule needs a group size (--k K, 1 <= K <= M)", spec.family));
    if (*spec.k < 1 || *spec.k > M)
      throw InputError(fmt::format("--k: group size must be between 1 and M = {}, got {}", M, *spec.k));
  } else if (spec.k) {
    throw InputError(fmt::format("--k: only the kfkb schedule takes a group size, not {}", spec.family));
  }
  return family->build(spec, S, M);
}

Schedule make_named(std::string_view family, int S, int M, std::optional<int> k) {
  return make_schedule(ScheduleSpec::named(family, k), S, M);
}

Schedule make_kfkb(int S, int M, int k) { return make_named("kfkb", S, M, k); }

}  // namespace adagrouper::sim
