// The registry of schedule families (schedule.h): one table row per family, the
// builders of the section-2 families, and make_schedule, which checks a spec against
// its family and applies placement, split backward and W fill.
#include <algorithm>
#include <array>
#include <utility>
#include <vector>

#include <fmt/format.h>

#include "error.h"
#include "schedule.h"
#include "schedule_torch.h"

namespace adagrouper::sim {

std::vector<std::vector<Op>> grouped_orders(int S, int M, int k, const std::vector<int>& warmup_groups) {
  std::vector<std::vector<Op>> orders(S);
  const int G = (M + k - 1) / k;
  for (int s = 0; s < S; ++s) {
    // Written in place (no capacity check per op): schedules of 10^5 ops and more are
    // built for every candidate the planner describes.
    std::vector<Op>& ops = orders[s];
    ops.resize(2 * static_cast<std::size_t>(M));
    Op* out = ops.data();
    auto group = [&](Phase ph, int g) {
      for (int m = g * k; m < std::min((g + 1) * k, M); ++m) *out++ = {ph, m, s};
    };
    const int W = std::clamp(warmup_groups[s], 1, G);
    int next_f = 0, next_b = 0;
    for (; next_f < W; ++next_f) group(Phase::Forward, next_f);
    while (next_f < G) {
      group(Phase::Backward, next_b++);
      group(Phase::Forward, next_f++);
    }
    while (next_b < G) group(Phase::Backward, next_b++);
  }
  return orders;
}

namespace {

// Group size k with the kFkB warm-up W_s = min(S - s, G).
Schedule grouped(int S, int M, int k) {
  const int G = (M + k - 1) / k;
  std::vector<int> w(S);
  for (int s = 0; s < S; ++s) w[s] = std::min(S - s, G);
  return Schedule{{}, k, grouped_orders(S, M, k, w), {}};
}

Schedule build_kfkb(const ScheduleSpec& spec, int S, int M) { return grouped(S, M, *spec.k); }
Schedule build_1f1b(const ScheduleSpec&, int S, int M) { return grouped(S, M, 1); }
Schedule build_gpipe(const ScheduleSpec&, int S, int M) { return grouped(S, M, M); }

// DAPPLE policy B: k = 1 with a warm-up of W_s = min(2(S - s) - 1, M) micro-batches.
Schedule build_dapple_b(const ScheduleSpec&, int S, int M) {
  std::vector<int> w(S);
  for (int s = 0; s < S; ++s) w[s] = std::min(2 * (S - s) - 1, M);
  return Schedule{{}, 1, grouped_orders(S, M, 1, w), {}};
}

constexpr auto L = Placement::Loop;
constexpr auto V = Placement::V;
constexpr auto Whole = Backward::Whole;
constexpr auto Split = Backward::Split;
constexpr auto Mixed = Backward::Mixed;

// clang-format off
constexpr std::array kFamilies{
  ScheduleFamily{"kfkb", "k forwards, then k backwards (Ada-Grouper); needs --k K, 1 <= K <= M", true, L, 1, Whole, build_kfkb},
  ScheduleFamily{"1f1b", "one forward, one backward (PipeDream-Flush, DAPPLE policy A): kfkb with k = 1", false, L, 1, Whole, build_1f1b},
  ScheduleFamily{"gpipe", "all forwards, then all backwards: kfkb with k = M", false, L, 1, Whole, build_gpipe},
  ScheduleFamily{"dapple-b", "1F1B with a warm-up of 2(S - s) - 1 forwards (DAPPLE policy B)", false, L, 1, Whole, build_dapple_b},
  ScheduleFamily{"interleaved-1f1b", "Megatron-LM's interleaved 1F1B over v model stages per stage (PyTorch's ScheduleInterleaved1F1B)", false, L, 0, Whole, build_interleaved_1f1b},
  ScheduleFamily{"looped-bfs", "every forward of one model stage after another, backwards in reverse (PyTorch's ScheduleLoopedBFS)", false, L, 0, Whole, build_looped_bfs},
  ScheduleFamily{"interleaved-zb", "zero-bubble interleaved 1F1B with split backward, ZB-H1 at v = 1 (PyTorch's ScheduleInterleavedZeroBubble)", false, L, 0, Split, build_interleaved_zb},
  ScheduleFamily{"zbv", "zero-bubble V schedule, 2 model stages per stage (PyTorch's ScheduleZBVZeroBubble)", false, V, 2, Split, build_zbv},
  ScheduleFamily{"dualpipev", "DeepSeek's DualPipe on a V, 2 model stages per stage, M >= 2D (PyTorch's ScheduleDualPipeV)", false, V, 2, Mixed, build_dualpipev},
};
// clang-format on

void check_k(const ScheduleFamily& family, const ScheduleSpec& spec, int M) {
  if (family.takes_k) {
    if (!spec.k)
      throw InputError(fmt::format("--k: the {} schedule needs a group size (--k K, 1 <= K <= M)", spec.family));
    if (*spec.k < 1 || *spec.k > M)
      throw InputError(fmt::format("--k: group size must be between 1 and M = {}, got {}", M, *spec.k));
  } else if (spec.k) {
    throw InputError(fmt::format("--k: only the kfkb schedule takes a group size, not {}", spec.family));
  }
}

void check_backward_options(const ScheduleFamily& family, const ScheduleSpec& spec) {
  const int v = spec.virtual_stages;
  if (v < 1) throw InputError(fmt::format("--virtual-stages: must be >= 1, got {}", v));
  if (family.virtual_stages != 0 && v != family.virtual_stages)
    throw InputError(fmt::format("--virtual-stages: {} runs {} model stage{} per stage, got {}", spec.family,
                                 family.virtual_stages, family.virtual_stages == 1 ? "" : "s", v));
  if (spec.split_backward && family.backward == Split)
    throw InputError(fmt::format("--split-backward: {} already splits every backward into I and W", spec.family));
  const bool has_w = spec.split_backward || family.backward != Whole;
  if (spec.w_fill == WFill::Dynamic && !has_w)
    throw InputError(fmt::format(
        "--w-fill: dynamic W fill moves W ops, and {} lists whole backwards; add --split-backward", spec.family));
  if (spec.max_pending_w && spec.w_fill != WFill::Dynamic)
    throw InputError("--max-pending-w: applies with --w-fill dynamic only");
  if (spec.max_pending_w && *spec.max_pending_w < 0)
    throw InputError(fmt::format("--max-pending-w: must be >= 0, got {}", *spec.max_pending_w));
}

// Every B becomes I immediately followed by W; with dynamic W fill the W ops leave the order.
void split_backwards(std::vector<std::vector<Op>>& orders, bool split, bool drop_w) {
  for (auto& order : orders) {
    std::vector<Op> out;
    out.reserve(order.size() + (split ? order.size() / 2 : 0));
    for (const Op& op : order) {
      if (split && op.phase == Phase::Backward) {
        out.push_back({Phase::BackwardInput, op.micro_batch, op.model_stage});
        if (!drop_w) out.push_back({Phase::BackwardWeight, op.micro_batch, op.model_stage});
      } else if (!(drop_w && op.phase == Phase::BackwardWeight)) {
        out.push_back(op);
      }
    }
    order = std::move(out);
  }
}

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
  for (const ScheduleFamily& f : kFamilies) out += fmt::format("  {:<16} {}\n", f.name, f.help);
  return out;
}

std::vector<int> place_model_stages(Placement placement, int S, int v) {
  std::vector<int> stage_of(static_cast<std::size_t>(S) * v);
  for (int j = 0; j < S * v; ++j)
    stage_of[j] = placement == Placement::Loop ? j % S : (j < S ? j : 2 * S - 1 - j);
  return stage_of;
}

Schedule make_schedule(const ScheduleSpec& spec, int S, int M) {
  const ScheduleFamily* family = find_schedule_family(spec.family);
  if (!family)
    throw InputError(fmt::format("--schedule: unknown schedule '{}' (expected one of: {}, or --schedule-file)",
                                 spec.family, schedule_family_names()));
  check_k(*family, spec, M);
  check_backward_options(*family, spec);
  Schedule sch = family->build(spec, S, M);
  sch.spec = spec;
  const int v = spec.virtual_stages;
  if (v > 1 || family->placement != Placement::Loop) sch.placement = place_model_stages(family->placement, S, v);
  const bool dynamic = spec.w_fill == WFill::Dynamic;
  if (spec.split_backward || dynamic) split_backwards(sch.stages, spec.split_backward, dynamic);
  return sch;
}

Schedule fixed_order_schedule(ScheduleSpec spec, int S, int M, std::vector<std::vector<Op>> order,
                              const std::string& source) {
  spec.w_fill = WFill::Static;
  spec.max_pending_w.reset();
  Schedule sch = make_schedule(spec, S, M);
  sch.stages = std::move(order);
  normalize_schedule(sch, sch.num_model_stages(), M, source);
  return sch;
}

Schedule make_named(std::string_view family, int S, int M, std::optional<int> k) {
  return make_schedule(ScheduleSpec::named(family, k), S, M);
}

Schedule make_kfkb(int S, int M, int k) { return make_named("kfkb", S, M, k); }

}  // namespace adagrouper::sim
