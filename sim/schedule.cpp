#include "schedule.h"

#include <algorithm>
#include <charconv>

#include <fmt/format.h>

#include "error.h"
#include "json_util.h"

namespace adagrouper::sim {

std::string op_name(const Op& op) {
  return fmt::format("{}{}", op.phase == Phase::Forward ? 'F' : 'B', op.micro_batch);
}

Schedule make_grouped(std::string name, int S, int M, int k, const std::vector<int>& warmup_groups) {
  Schedule sch;
  sch.name = std::move(name);
  sch.k = k;
  sch.stages.resize(S);
  const int G = (M + k - 1) / k;
  auto group = [&](std::vector<Op>& ops, Phase ph, int g) {
    for (int m = g * k; m < std::min((g + 1) * k, M); ++m) ops.push_back({ph, m});
  };
  for (int s = 0; s < S; ++s) {
    auto& ops = sch.stages[s];
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
  return sch;
}

Schedule make_kfkb(int S, int M, int k) {
  const int G = (M + k - 1) / k;
  std::vector<int> w(S);
  for (int s = 0; s < S; ++s) w[s] = std::min(S - s, G);
  return make_grouped("kfkb", S, M, k, w);
}

Schedule make_dapple_b(int S, int M) {
  std::vector<int> w(S);
  for (int s = 0; s < S; ++s) w[s] = std::min(2 * (S - s) - 1, M);
  return make_grouped("dapple-b", S, M, 1, w);
}

Schedule make_named(std::string_view name, int S, int M, std::optional<int> k) {
  if (name == "kfkb") {
    if (!k) throw InputError("--k: the kfkb schedule needs a group size (--k K, 1 <= K <= M)");
    if (*k < 1 || *k > M)
      throw InputError(fmt::format("--k: group size must be between 1 and M = {}, got {}", M, *k));
    return make_kfkb(S, M, *k);
  }
  if (name == "1f1b" || name == "gpipe" || name == "dapple-b") {
    if (k) throw InputError(fmt::format("--k: only the kfkb schedule takes a group size, not {}", name));
    if (name == "1f1b") {
      Schedule s = make_kfkb(S, M, 1);
      s.name = "1f1b";
      return s;
    }
    if (name == "gpipe") {
      Schedule s = make_kfkb(S, M, M);
      s.name = "gpipe";
      return s;
    }
    return make_dapple_b(S, M);
  }
  throw InputError(fmt::format("--schedule: unknown schedule '{}' (expected one of: {}, or --schedule-file)",
                               name, kScheduleNames));
}

void validate_schedule(const Schedule& sch, int S, int M, const std::string& source) {
  if (sch.num_stages() != S)
    throw InputError(fmt::format("{}: stages: lists {} stages, the pipeline has {}", source,
                                 sch.num_stages(), S));
  std::vector<std::uint8_t> seen(2 * static_cast<std::size_t>(M));
  for (int s = 0; s < S; ++s) {
    std::fill(seen.begin(), seen.end(), 0);
    for (std::size_t i = 0; i < sch.stages[s].size(); ++i) {
      const Op& op = sch.stages[s][i];
      if (op.micro_batch < 0 || op.micro_batch >= M)
        throw InputError(fmt::format("{}: stages[{}][{}]: micro-batch {} does not exist (M = {})", source,
                                     s, i, op.micro_batch, M));
      auto& f = seen[2 * op.micro_batch + (op.phase == Phase::Backward)];
      if (f) throw InputError(fmt::format("{}: stages[{}][{}]: {} is repeated", source, s, i, op_name(op)));
      f = 1;
    }
    for (int m = 0; m < M; ++m)
      for (Phase ph : {Phase::Forward, Phase::Backward})
        if (!seen[2 * m + (ph == Phase::Backward)])
          throw InputError(fmt::format("{}: stages[{}]: misses {}", source, s, op_name({ph, m})));
  }
}

namespace {
Op parse_op(const Field& f) {
  if (f.json().is_string()) {
    const std::string s = f.string();
    if (s.size() >= 2 && (s[0] == 'F' || s[0] == 'B')) {
      int m = -1;
      auto [p, ec] = std::from_chars(s.data() + 1, s.data() + s.size(), m);
      if (ec == std::errc() && p == s.data() + s.size() && m >= 0)
        return {s[0] == 'F' ? Phase::Forward : Phase::Backward, m};
    }
    f.fail(fmt::format("op '{}' is not of the form F<m> or B<m>", s));
  }
  f.require_object();
  const std::string kind = f.at("op").string();
  if (kind != "forward" && kind != "backward") f.at("op").fail("must be \"forward\" or \"backward\"");
  const auto m = f.at("micro_batch").integer_at_least(0);
  return {kind == "forward" ? Phase::Forward : Phase::Backward, static_cast<std::int32_t>(m)};
}
}  // namespace

Schedule load_schedule_file(const std::filesystem::path& path, int S, int M) {
  const auto doc = read_json_file(path);
  Field root(doc, path.string());
  root.require_object();
  Schedule sch;
  sch.name = "custom";
  sch.k = 0;
  Field stages = root.at("stages");
  for (std::size_t s = 0; s < stages.size(); ++s) {
    Field ops = stages.at(s);
    std::vector<Op> order;
    order.reserve(ops.size());
    for (std::size_t i = 0; i < ops.size(); ++i) order.push_back(parse_op(ops.at(i)));
    sch.stages.push_back(std::move(order));
  }
  validate_schedule(sch, S, M, path.string());
  return sch;
}

}  // namespace adagrouper::sim
