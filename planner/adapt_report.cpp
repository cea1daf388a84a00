// The outputs of `adapt`: rows file, adagrouper.adapt/1 summary and table.
//
// Formats in docs/formats.md, "Adaptive run".
#include <algorithm>
#include <map>
#include <utility>

#include <fmt/format.h>

#include "adapt_internal.h"

namespace adagrouper::planner {

using adapt_parts::percent;
using oj = nlohmann::ordered_json;

namespace {

// The schedule column of a row: the family, with the settings of a variant that are not
// its defaults ("kfkb split-backward w-fill=dynamic"); k has its own column.
std::string schedule_column(const sim::ScheduleSpec& spec) {
  sim::ScheduleSpec variant = spec;
  variant.k.reset();
  return variant.label();
}

}  // namespace

std::string rows_csv_header() {
  return "policy,iteration,start_s,schedule,k,micro_batch_size,micro_batches,pause_s,iteration_time_s\n";
}

std::string row_csv(const std::string& policy, const IterationRow& row, const Candidate& plan) {
  return fmt::format("{},{},{},{},{},{},{},{},{}\n", policy, row.iteration, row.start_s, schedule_column(plan.spec), plan.k,
                     plan.micro_batch_size, plan.micro_batches, row.pause_s, row.time_s);
}

std::string row_jsonl(const std::string& policy, const IterationRow& row, const Candidate& plan) {
  oj j = {{"policy", policy},
          {"iteration", row.iteration},
          {"start_s", row.start_s},
          {"schedule", schedule_column(plan.spec)},
          {"k", plan.k},
          {"micro_batch_size", plan.micro_batch_size},
          {"micro_batches", plan.micro_batches},
          {"pause_s", row.pause_s},
          {"iteration_time_s", row.time_s}};
  return j.dump() + "\n";
}

namespace {

oj channels_json(const std::vector<ChannelEstimate>& est) {
  auto out = oj::array();
  for (const ChannelEstimate& c : est)
    out.push_back(
        {{"from", c.from}, {"to", c.to}, {"samples", c.samples}, {"rate_bytes_per_s", c.rate ? oj(*c.rate) : oj()}});
  return out;
}

// Runs of the same plan: [{from_iteration, plan}].
std::vector<std::pair<int, int>> plan_segments(const PolicyRun& p) {
  std::vector<std::pair<int, int>> out;
  for (const IterationRow& r : p.rows)
    if (out.empty() || out.back().second != r.plan) out.emplace_back(r.iteration, r.plan);
  return out;
}

oj optional_number(const std::optional<double>& v) { return v ? oj(*v) : oj(); }

oj inputs_json(const std::vector<InputFile>& inputs) {
  auto in = oj::array();
  for (const InputFile& f : inputs) {
    oj e = {{"role", f.role}, {"path", f.path}};
    if (!f.sha256.empty()) e["sha256"] = f.sha256;
    in.push_back(std::move(e));
  }
  return in;
}

oj candidates_json(const AdaptResult& r) {
  auto cands = oj::array();
  for (std::size_t i = 0; i < r.candidates.size(); ++i) {
    const Candidate& c = r.candidates[i];
    cands.push_back({{"plan", c.label()},
                     {"schedule", c.spec.family},
                     {"k", c.k},
                     {"micro_batch_size", c.micro_batch_size},
                     {"micro_batches", c.micro_batches},
                     {"peak_memory_bytes", c.model_memory},
                     {"static_total_time_s", r.static_total_s[i]}});
  }
  return cands;
}

oj policy_json(const AdaptResult& r, const PolicyRun& p) {
  oj e = {{"policy", p.name}, {"description", p.description}, {"available", p.available}};
  if (!p.available) {
    for (const char* key : {"total_time_s", "mean_iteration_time_s", "speedup_over_1f1b", "switches", "pause_s"})
      e[key] = nullptr;
    e["plans"] = oj::array();
    return e;
  }
  e["total_time_s"] = p.total_time_s;
  e["mean_iteration_time_s"] = p.mean_iteration_time_s();
  e["speedup_over_1f1b"] = optional_number(r.speedup_over_1f1b(p));
  e["switches"] = p.switches;
  e["pause_s"] = p.pause_s;
  auto& plans = e["plans"] = oj::array();
  for (const auto& [from, plan] : plan_segments(p)) plans.push_back({{"from_iteration", from}, {"plan", plan}});
  return e;
}

oj decision_json(const Decision& d) {
  return {{"iteration", d.iteration},
          {"time_s", d.time_s},
          {"current", d.current},
          {"best", d.best},
          {"current_predicted_s", d.current_predicted_s},
          {"best_predicted_s", d.best_predicted_s},
          {"gain", d.gain},
          {"switched", d.switched},
          {"reason", d.reason},
          {"channels", channels_json(d.channels)}};
}

// The plan column of the table: the policy's plan, or how many it used.
std::string plan_cell(const AdaptResult& r, const PolicyRun& p) {
  if (!p.available) return "does not fit";
  std::vector<int> distinct;
  for (const auto& s : plan_segments(p))
    if (std::find(distinct.begin(), distinct.end(), s.second) == distinct.end()) distinct.push_back(s.second);
  return distinct.size() == 1 ? r.candidates[distinct[0]].label() : fmt::format("{} plans", distinct.size());
}

// One line of the table: the policy's plan in a column `width` wide, totals and switches.
std::string policy_line(const AdaptResult& r, const PolicyRun& p, std::size_t width) {
  const std::string plan = plan_cell(r, p);
  if (!p.available)
    return fmt::format("  {:<13} {:<{}} {:>13} {:>11} {:>8} {:>9} {:>9}\n", p.name, plan, width, "-", "-", "-", "-",
                       "-");
  const auto sp = r.speedup_over_1f1b(p);
  return fmt::format("  {:<13} {:<{}} {:>13.6g} {:>11.6g} {:>8} {:>9} {:>9.4g}\n", p.name, plan, width,
                     p.total_time_s, p.mean_iteration_time_s(), sp ? fmt::format("{:.3f}x", *sp) : std::string("-"),
                     p.switches, p.pause_s);
}

// "kfkb k=2 b=2 for 150 iterations, 1f1b b=4 for 50 iterations": the adaptive policy's mix.
std::string adaptive_mix(const AdaptResult& r) {
  std::map<int, int> use;
  for (const IterationRow& row : r.policy("adaptive").rows) ++use[row.plan];
  std::string mix;
  for (const auto& [plan, n] : use)
    mix += fmt::format("{}{} for {} iteration{}", mix.empty() ? "" : ", ", r.candidates[plan].label(), n,
                       n == 1 ? "" : "s");
  return mix;
}

}  // namespace

oj adapt_json(const AdaptResult& r, const std::vector<InputFile>& inputs) {
  const AdaptOptions& o = r.options;
  oj doc;
  doc["schema"] = "adagrouper.adapt/1";
  doc["pipeline"] = r.pipeline;
  doc["stages"] = r.num_stages;
  doc["global_batch_size"] = o.global_batch_size;
  doc["memory_limit_bytes"] = o.memory_limit_bytes;
  doc["inputs"] = inputs_json(inputs);
  doc["settings"] = {{"iterations", o.iterations},       {"replan_every", o.replan_every},
                     {"window", o.window},               {"threshold", o.threshold},
                     {"switch_pause_s", o.switch_pause_s}, {"horizon", o.horizon}};
  doc["candidates"] = candidates_json(r);
  doc["launch"] = {{"profile_plan", r.profile_plan},
                   {"profile_iterations", r.profile_iterations},
                   {"channels", channels_json(r.launch_estimate)},
                   {"plan", r.launch_plan}};
  auto& pol = doc["policies"] = oj::array();
  for (const PolicyRun& p : r.policies) pol.push_back(policy_json(r, p));
  auto& dec = doc["decisions"] = oj::array();
  for (const Decision& d : r.decisions) dec.push_back(decision_json(d));
  return doc;
}

std::string adapt_text(const AdaptResult& r) {
  const AdaptOptions& o = r.options;
  std::string out = fmt::format(
      "{}: S={} stages, B={}, {} iterations; re-plan every {} iterations on the last {} transfer samples per "
      "channel, threshold {}, switch pause {} s; {} candidate plans fit {:.2f} GiB per stage\n",
      r.pipeline, r.num_stages, o.global_batch_size, o.iterations, o.replan_every, o.window, percent(o.threshold),
      o.switch_pause_s, r.candidates.size(), o.memory_limit_bytes / (1024.0 * 1024.0 * 1024.0));
  std::size_t width = 22;
  for (const PolicyRun& p : r.policies) width = std::max(width, plan_cell(r, p).size());
  out += fmt::format("  {:<13} {:<{}} {:>13} {:>11} {:>8} {:>9} {:>9}\n", "policy", "plan", width, "total s",
                     "mean s/it", "vs 1F1B", "switches", "pause s");
  for (const PolicyRun& p : r.policies) out += policy_line(r, p, width);
  out += fmt::format("adaptive ran {}.\n", adaptive_mix(r));
  const double adaptive = r.policy("adaptive").total_time_s;
  const double first = r.policy("first-window").total_time_s, best = r.policy("best-static").total_time_s;
  const double oracle = r.policy("oracle").total_time_s;
  auto diff = [](double x, double base) { return fmt::format("{:+.2f}%", 100.0 * (x / base - 1.0)); };
  out += fmt::format(
      "total time of adaptive: {} vs the first-window plan, {} vs the best static plan in hindsight; the oracle "
      "(which knows the trace): {} vs the best static plan.\n",
      diff(adaptive, first), diff(adaptive, best), diff(oracle, best));
  return out;
}

}  // namespace adagrouper::planner
