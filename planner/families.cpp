// The candidates beyond kFkB: kFkB with split backward and dynamic W fill, and the
// schedules of today's runtimes, at the micro-batch sizes of the memory-limit curve.
//
// docs/model.md sections 11 and 14.
#include <algorithm>
#include <set>
#include <utility>

#include <fmt/format.h>

#include "plan_steps.h"

namespace adagrouper::planner {

namespace {

// The families the memory-limit curve and the baselines cover (section 2 of the model).
bool always_considered(std::string_view name) {
  return name == "kfkb" || name == "1f1b" || name == "gpipe" || name == "dapple-b";
}

// The pieces of a comma-separated list, without surrounding spaces.
std::vector<std::string> split_list(std::string_view list) {
  std::vector<std::string> out;
  std::size_t at = 0;
  while (at <= list.size()) {
    const std::size_t comma = std::min(list.find(',', at), list.size());
    std::string_view item = list.substr(at, comma - at);
    while (!item.empty() && item.front() == ' ') item.remove_prefix(1);
    while (!item.empty() && item.back() == ' ') item.remove_suffix(1);
    out.emplace_back(item);
    at = comma + 1;
  }
  return out;
}

}  // namespace

std::vector<std::string> extra_families() {
  std::vector<std::string> out{std::string(kKfkbDynamic)};
  for (const sim::ScheduleFamily& f : sim::schedule_families())
    if (!always_considered(f.name)) out.emplace_back(f.name);
  return out;
}

std::vector<std::string> parse_families(std::string_view list) {
  const std::vector<std::string> known = extra_families();
  if (list == "all") return known;
  std::set<std::string> wanted;
  for (const std::string& name : split_list(list)) {
    if (always_considered(name)) continue;
    if (std::find(known.begin(), known.end(), name) == known.end()) {
      std::string names = "all, kfkb, 1f1b, gpipe, dapple-b";
      for (const std::string& k : known) names += ", " + k;
      throw InputError(fmt::format("--families: unknown family '{}' (expected a comma-separated list of: {})", name,
                                   names));
    }
    wanted.insert(name);
  }
  std::vector<std::string> out;
  for (const std::string& k : known)
    if (wanted.count(k)) out.push_back(k);
  return out;
}

std::vector<int> parse_virtual_stages(std::string_view list) {
  std::set<int> vs;
  for (const std::string& item : split_list(list)) {
    int v = 0;
    std::size_t used = 0;
    try {
      v = std::stoi(item, &used);
    } catch (const std::exception&) {
      used = 0;
    }
    if (used == 0 || used != item.size() || v < 1 || v > sim::kMaxStages)
      throw InputError(fmt::format("--virtual-stages: '{}' is not a number of model stages per device >= 1 (give a "
                                   "comma-separated list, e.g. 1,2)",
                                   item));
    vs.insert(v);
  }
  return {vs.begin(), vs.end()};
}

RankBy parse_rank_by(std::string_view name) {
  if (name == "predicted") return RankBy::Predicted;
  if (name == "deployed") return RankBy::Deployed;
  throw InputError(fmt::format("--rank-by: must be predicted or deployed, got '{}'", name));
}

const char* to_string(RankBy r) { return r == RankBy::Deployed ? "deployed" : "predicted"; }

namespace plan_steps {

namespace {

// One point of the memory-limit curve.
struct CurvePoint {
  int k, b;
};

// The evaluated kFkB points of the curve in `out`, in curve order.
std::vector<CurvePoint> curve_points(const std::vector<Candidate>& out) {
  std::vector<CurvePoint> points;
  for (const Candidate& c : out)
    if (c.evaluated && (c.spec.family == "kfkb" || c.spec.family == "1f1b") && c.spec.virtual_stages == 1 &&
        !c.spec.split_backward)
      points.push_back({c.k, c.micro_batch_size});
  return points;
}

// Describes `spec` at b and evaluates it when it fits: evaluated, infeasible or refused.
Candidate consider(const PlanContext& cx, const sim::ScheduleSpec& spec, int b) {
  Candidate c;
  try {
    c = describe(cx, spec, b, false);
  } catch (const InputError& e) {
    c.spec = spec;
    c.k = spec.k.value_or(1);
    c.micro_batch_size = b;
    c.micro_batches = cx.options.global_batch_size / b;
    c.status = Status::Refused;
    c.reason = e.what();
    return c;
  }
  if (fits(cx, c)) {
    evaluate(cx, c);
  } else {
    c.status = Status::Infeasible;
    c.reason = fmt::format("needs {} on stage {}, over the limit", gib_text(c.peak_model_memory()), c.peak_stage());
  }
  return c;
}

// kFkB with split backward and dynamic W fill at every curve point: P unlimited and P = k.
void add_kfkb_dynamic(const PlanContext& cx, const std::vector<CurvePoint>& points, std::vector<Candidate>& out) {
  for (const CurvePoint& pt : points) {
    sim::ScheduleSpec spec = pt.k == 1 ? sim::ScheduleSpec::named("1f1b") : sim::ScheduleSpec::named("kfkb", pt.k);
    spec.split_backward = true;
    spec.w_fill = sim::WFill::Dynamic;
    for (const std::optional<int> P : {std::optional<int>(), std::optional<int>(pt.k)}) {
      spec.max_pending_w = P;
      out.push_back(consider(cx, spec, pt.b));
    }
  }
}

// A family of the registry at every distinct size of the curve, for each v it runs with.
void add_family(const PlanContext& cx, const sim::ScheduleFamily& family, const std::vector<CurvePoint>& points,
                std::vector<Candidate>& out) {
  std::vector<int> sizes;
  for (const CurvePoint& pt : points)
    if (std::find(sizes.begin(), sizes.end(), pt.b) == sizes.end()) sizes.push_back(pt.b);
  for (const int b : sizes)
    for (const int v : cx.virtual_stages) {
      if (family.virtual_stages != 0 && family.virtual_stages != v) continue;
      sim::ScheduleSpec spec = sim::ScheduleSpec::named(family.name);
      spec.virtual_stages = v;
      out.push_back(consider(cx, spec, b));
    }
}

}  // namespace

void add_families(const PlanContext& cx, std::vector<Candidate>& out) {
  const std::vector<CurvePoint> points = curve_points(out);
  for (const std::string& name : cx.options.families) {
    if (always_considered(name)) continue;
    if (name == kKfkbDynamic) {
      add_kfkb_dynamic(cx, points, out);
    } else if (const sim::ScheduleFamily* family = sim::find_schedule_family(name)) {
      add_family(cx, *family, points, out);
    } else {
      throw InputError(fmt::format("--families: unknown family '{}'", name));
    }
  }
}

}  // namespace plan_steps

}  // namespace adagrouper::planner
