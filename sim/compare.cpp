// Comparing summaries: reading them (and the plan's pick), errors, rankings, the outputs.
#include "compare.h"

#include <algorithm>
#include <cmath>
#include <filesystem>
#include <iterator>
#include <string_view>
#include <utility>
#include <vector>

#include <fmt/format.h>

#include "error.h"
#include "json_util.h"
#include "pipeline.h"
#include "rate_forms.h"
#include "result.h"
#include "schedule.h"

namespace adagrouper::sim {

std::string Summary::label() const {
  ScheduleSpec spec = ScheduleSpec::named(schedule, schedule == "kfkb" ? std::optional<int>(k) : std::nullopt);
  spec.virtual_stages = virtual_stages;
  spec.split_backward = split_backward;
  spec.w_fill = w_fill;
  spec.max_pending_w = max_pending_w;
  return spec.label(micro_batch_size);
}

namespace {

// The keys of an object as check_keys takes them.
std::vector<std::string_view> keys_of(const nlohmann::ordered_json& object) {
  std::vector<std::string_view> keys;
  for (const auto& item : object.items()) keys.push_back(item.key());
  return keys;
}

// Exactly the keys summary_json writes, at the top, per stage and per channel.
void check_summary_keys(const Field& root) {
  SimResult sample;
  sample.spec.split_backward = true;  // the keys written where an option set the backward
  sample.stages.resize(1);
  sample.channels.resize(1);
  const nlohmann::ordered_json written = summary_json(sample);
  root.check_keys(keys_of(written), "a summary");
  for (const char* list : {"per_stage", "channels"}) {
    if (!root.has(list) || !root.at(list).is_array()) continue;
    const Field entries = root.at(list);
    for (std::size_t i = 0; i < entries.size(); ++i)
      if (entries.at(i).is_object()) entries.at(i).check_keys(keys_of(written[list][0]));
  }
}

// split_backward, w_fill and max_pending_w of a plan's candidate or a summary, where it
// gives them.
void read_backward_fields(const Field& c, bool& split_backward, WFill& w_fill, std::optional<int>& max_pending_w) {
  if (c.has("split_backward")) split_backward = c.at("split_backward").boolean();
  if (c.has("w_fill")) {
    const std::string w = c.at("w_fill").string();
    if (w != "static" && w != "dynamic") c.at("w_fill").fail(fmt::format("must be static or dynamic, got '{}'", w));
    w_fill = w == "dynamic" ? WFill::Dynamic : WFill::Static;
  }
  if (c.has("max_pending_w") && !c.at("max_pending_w").json().is_null())
    max_pending_w = c.at("max_pending_w").int_in(0, kMaxBatchSize);
}

// busy_s and bubble_s summed over the iterations: bounded so that the comparison's
// differences and percentages stay finite.
constexpr double kMaxTotalS = 1e15;

}  // namespace

Summary parse_summary(const nlohmann::json& doc, const std::string& source) {
  const Field root(doc, source);
  root.require_object();
  check_summary_keys(root);
  Summary s;
  s.source = utf8_safe(source);
  s.pipeline = root.has("pipeline") ? root.at("pipeline").string() : std::string();
  s.schedule = root.at("schedule").string();
  s.k = root.at("k").int_in(0, kMaxBatchSize);
  s.micro_batch_size = root.at("micro_batch_size").int_in(1, kMaxBatchSize);
  s.micro_batches = root.at("micro_batches").int_in(1, kMaxBatchSize);
  s.stages = root.at("stages").int_in(1, kMaxStages);
  if (root.has("virtual_stages")) s.virtual_stages = root.at("virtual_stages").int_in(1, kMaxStages);
  s.backward_given = root.has("w_fill");
  read_backward_fields(root, s.split_backward, s.w_fill, s.max_pending_w);
  s.iterations = root.at("iterations").int_in(1);
  const Field times = root.at("iteration_times_s");
  times.require_array();
  if (times.size() != static_cast<std::size_t>(s.iterations))
    times.fail(fmt::format("has {} entries but iterations is {}", times.size(), s.iterations));
  for (std::size_t i = 0; i < times.size(); ++i) {
    const double t = read_period(times.at(i));
    s.iteration_times_s.push_back(t);
    s.total_time_s += t;
  }
  s.bubble_fraction = root.at("bubble_fraction").number();
  const Field stages = root.at("per_stage");
  stages.require_array();
  if (stages.size() != static_cast<std::size_t>(s.stages))
    stages.fail(fmt::format("has {} entries but stages is {}", stages.size(), s.stages));
  for (std::size_t i = 0; i < stages.size(); ++i) {
    const Field e = stages.at(i);
    if (e.at("stage").integer() != static_cast<std::int64_t>(i))
      e.at("stage").fail(fmt::format("must be {} (entries are in stage order)", i));
    Summary::Stage st;
    st.busy_s = e.at("busy_s").number_in(0, kMaxTotalS);
    if (st.busy_s > 0 && st.busy_s < kTimeResolution)
      e.at("busy_s").fail(fmt::format("{} s is shorter than the time resolution of 1 ns (give 0 for none)", st.busy_s));
    st.bubble_s = e.at("bubble_s").number_in(-kMaxTotalS, kMaxTotalS);
    s.per_stage.push_back(st);
  }
  return s;
}

Summary load_summary(const std::string& path) { return parse_summary(read_json_file(path), path); }

void check_plan_keys(const Field& root) {
  // What `plan` writes, adagrouper.plan/1 and /2 (planner/plan_json.cpp; comm_profile and
  // partition: tools/cli/plan_cmd.cpp, planner/model_plan.cpp).
  static constexpr ObjectKeys kPlan[] = {
      {"", "schema, pipeline, stages, pipeline_stages, global_batch_size, memory_limit_bytes, inputs, evaluation, "
           "chosen, candidates, devices, communicators, comm_profile, partition"},
      {"inputs[]", "role, path, sha256"},
      {"evaluation", "iterations, start_time_s, rank_by"},
      {"chosen", "schedule, k, virtual_stages, split_backward, w_fill, max_pending_w, micro_batch_size, micro_batches, "
                 "predicted_iteration_time_s, deployed_iteration_time_s, throughput_samples_per_s, "
                 "peak_memory_bytes, simulated_peak_memory_bytes, speedup_over_1f1b, status, reason, order"},
      {"candidates[]", "schedule, k, virtual_stages, split_backward, w_fill, max_pending_w, micro_batch_size, "
                       "micro_batches, baseline, predicted_iteration_time_s, deployed_iteration_time_s, "
                       "throughput_samples_per_s, peak_memory_bytes, simulated_peak_memory_bytes, status, reason"},
      {"devices[]", "stage, program"},
      {"devices[].program[]", "op, stream, peer, micro_batch, model_stage, bytes, tag, communicator"},
      {"communicators[]", "id, from, to, carries"},
      {"comm_profile", "window, channels"},
      {"comm_profile.channels[]", "from, to, samples, rate_bytes_per_s"},
      {"partition", "model, stages, partition_micro_batch_size, bounds, stage_layers, trials"},
      {"partition.trials[]", "stages, virtual_stages, micro_batch_size, bounds, predicted_iteration_time_s, "
                             "throughput_per_device, chosen, note"},
  };
  root.require_object();
  check_schema(root, kPlan, "a plan");
}

PlanChoice load_plan_choice(const std::string& path) {
  const nlohmann::json doc = read_json_file(path);
  const Field root(doc, path);
  check_plan_keys(root);
  const Field chosen = root.at("chosen");
  return {chosen.at("schedule").string(), chosen.at("k").int_in(0, kMaxBatchSize),
          chosen.at("micro_batch_size").int_in(1, kMaxBatchSize)};
}

ScheduleSpec planned_spec(const Field& c) {
  const std::string family = c.at("schedule").string();
  const ScheduleFamily* f = find_schedule_family(family);
  if (!f) c.at("schedule").fail(fmt::format("unknown schedule family '{}'", family));
  ScheduleSpec spec =
      ScheduleSpec::named(family, f->takes_k ? std::optional<int>(c.at("k").int_in(1, kMaxBatchSize)) : std::nullopt);
  if (c.has("virtual_stages")) spec.virtual_stages = c.at("virtual_stages").int_in(1, kMaxStages);
  read_backward_fields(c, spec.split_backward, spec.w_fill, spec.max_pending_w);
  return spec;
}

bool is_chosen_candidate(const Field& plan, const Field& candidate) {
  const Field chosen = plan.at("chosen");
  return planned_spec(candidate) == planned_spec(chosen) &&
         candidate.at("micro_batch_size").integer() == chosen.at("micro_batch_size").integer();
}

std::string plan_input_path(const Field& plan, std::string_view role, bool required) {
  if (!plan.has("inputs")) return {};
  const Field inputs = plan.at("inputs");
  inputs.require_array();
  for (std::size_t i = 0; i < inputs.size(); ++i) {
    const Field e = inputs.at(i);
    if (e.at("role").string() != role) continue;
    const std::filesystem::path p = e.at("path").string();
    if (p.is_absolute() || std::filesystem::exists(p)) return p.string();
    const auto beside = std::filesystem::path(plan.file()).parent_path() / p;
    if (std::filesystem::exists(beside)) return beside.string();
    if (required)
      e.at("path").fail(fmt::format("the {} file {} does not exist (nor beside the plan); give --{} FILE", role,
                                    p.string(), role == "network" ? "network" : "pipeline"));
    return p.string();
  }
  return {};
}

namespace {

// A plan's `comm_profile.channels`: each channel between two of its stages, once, at a
// positive rate.
std::vector<Network::MeasuredRate> measured_rates(const Field& plan, int stages) {
  std::vector<Network::MeasuredRate> rates;
  if (!plan.has("comm_profile")) return rates;
  const Field channels = plan.at("comm_profile").at("channels");
  channels.require_array();
  for (std::size_t i = 0; i < channels.size(); ++i) {
    const Field ch = channels.at(i);
    Network::MeasuredRate m{ch.at("from").int_in(0, stages - 1), ch.at("to").int_in(0, stages - 1),
                            ch.at("rate_bytes_per_s").positive()};
    if (!std::isfinite(m.bytes_per_s)) ch.at("rate_bytes_per_s").fail("must be finite");
    if (m.from == m.to) ch.at("to").fail("is its own from: a channel joins two stages");
    for (const auto& seen : rates)
      if (seen.from == m.from && seen.to == m.to) ch.fail(fmt::format("channel {}->{} is listed twice", m.from, m.to));
    rates.push_back(m);
  }
  return rates;
}

}  // namespace

PlannedRun load_planned_run(const std::string& path, std::optional<int> candidate) {
  const nlohmann::json doc = read_json_file(path);
  const Field root(doc, path);
  check_plan_keys(root);
  const Field candidates = root.at("candidates");
  candidates.require_array();
  if (candidate && (*candidate < 0 || static_cast<std::size_t>(*candidate) >= candidates.size()))
    throw InputError(fmt::format("--candidate: {} is not the index of a candidate of {} (0 .. {})", *candidate, path,
                                 static_cast<long>(candidates.size()) - 1));
  const Field c = candidate ? candidates.at(static_cast<std::size_t>(*candidate)) : root.at("chosen");
  if (c.has("status") && c.at("status").string() == "refused")
    c.at("status").fail("this candidate was refused by its family: there is nothing to run");
  PlannedRun run;
  run.spec = planned_spec(c);
  run.micro_batch_size = c.at("micro_batch_size").int_in(1, kMaxBatchSize);
  run.global_batch_size = root.at("global_batch_size").int_in(1, kMaxBatchSize);
  run.stages = root.at("stages").int_in(1, kMaxStages);
  if (root.has("evaluation")) {
    run.iterations = root.at("evaluation").at("iterations").int_in(1, kMaxIterations);
    run.start_time_s = root.at("evaluation").at("start_time_s").number_in(0, 1e300);  // the caller checks its range
  }
  if (c.has("predicted_iteration_time_s") && !c.at("predicted_iteration_time_s").json().is_null())
    run.predicted_iteration_time_s = c.at("predicted_iteration_time_s").positive();
  run.pipeline_path = plan_input_path(root, "pipeline");
  run.network_path = plan_input_path(root, "network");
  run.chosen = is_chosen_candidate(root, c);
  run.measured_rates = measured_rates(root, run.stages);
  return run;
}

NetworkSpec load_planned_network(const PlannedRun& run, const std::string& plan_path, const RateParser& rates) {
  if (run.network_path.empty() || !std::filesystem::exists(run.network_path))
    throw InputError(fmt::format("{}: inputs: the network {} is not there (from here or beside the plan); the order "
                                 "of this candidate's W ops (dynamic W fill) is made on it: run from where the plan "
                                 "was made, or run the chosen candidate",
                                 plan_path, run.network_path.empty() ? "input" : run.network_path));
  return load_network_spec(run.network_path, rates);
}

namespace {

// Calls f(name, summary's member, comparison's member) for each field that says which run
// a summary describes: the two summaries compared must agree on them, and the comparison
// carries them.
template <class F>
void for_each_run_field(F&& f) {
  f("schedule", &Summary::schedule, &Comparison::schedule);
  f("k", &Summary::k, &Comparison::k);
  f("micro_batch_size", &Summary::micro_batch_size, &Comparison::micro_batch_size);
  f("micro_batches", &Summary::micro_batches, &Comparison::micro_batches);
  f("stages", &Summary::stages, &Comparison::stages);
  f("virtual_stages", &Summary::virtual_stages, &Comparison::virtual_stages);
}

}  // namespace

Comparison compare(const Summary& p, const Summary& m) {
  for_each_run_field([&](const char* field, auto of_summary, auto) {
    if (p.*of_summary != m.*of_summary)
      throw InputError(fmt::format("{}: {}: {} does not match {} in {}: the files describe different runs",
                                   m.source, field, m.*of_summary, p.*of_summary, p.source));
  });

  Comparison c;
  // Named as measured where the measured run says how its backward ran: a replay of a
  // dynamic W fill candidate is predicted by the static order its programs fix
  // (simulate --recorded-order), and only the replay names the candidate.
  c.label = (m.backward_given ? m : p).label();
  c.predicted_source = p.source;
  c.measured_source = m.source;
  for_each_run_field([&](const char*, auto of_summary, auto of_comparison) { c.*of_comparison = p.*of_summary; });
  c.iterations_predicted = p.iterations;
  c.iterations_measured = m.iterations;
  const std::size_t n = std::min(p.iteration_times_s.size(), m.iteration_times_s.size());
  double sum_p = 0, sum_m = 0, sum_ape = 0;
  for (std::size_t i = 0; i < n; ++i) {
    IterationError e;
    e.iteration = static_cast<int>(i);
    e.predicted_s = p.iteration_times_s[i];
    e.measured_s = m.iteration_times_s[i];
    e.error_s = e.predicted_s - e.measured_s;
    e.error_pct = 100.0 * e.error_s / e.measured_s;
    sum_p += e.predicted_s;
    sum_m += e.measured_s;
    sum_ape += std::abs(e.error_pct);
    c.max_abs_error_pct = std::max(c.max_abs_error_pct, std::abs(e.error_pct));
    c.iterations.push_back(e);
  }
  c.mean_predicted_s = sum_p / static_cast<double>(n);
  c.mean_measured_s = sum_m / static_cast<double>(n);
  c.mean_error_pct = 100.0 * (c.mean_predicted_s - c.mean_measured_s) / c.mean_measured_s;
  c.mape_pct = sum_ape / static_cast<double>(n);
  std::vector<double> ape;
  for (const auto& e : c.iterations) ape.push_back(std::abs(e.error_pct));
  std::sort(ape.begin(), ape.end());
  c.median_abs_error_pct = n % 2 ? ape[n / 2] : 0.5 * (ape[n / 2 - 1] + ape[n / 2]);
  c.bubble_fraction_predicted = p.bubble_fraction;
  c.bubble_fraction_measured = m.bubble_fraction;
  for (int s = 0; s < p.stages; ++s) {
    StageDiff d;
    d.stage = s;
    d.busy_predicted_s = p.per_stage[s].busy_s / p.iterations;
    d.busy_measured_s = m.per_stage[s].busy_s / m.iterations;
    d.busy_diff_s = d.busy_predicted_s - d.busy_measured_s;
    d.busy_error_pct = d.busy_measured_s > 0 ? 100.0 * d.busy_diff_s / d.busy_measured_s : 0.0;
    d.bubble_predicted_s = p.per_stage[s].bubble_s / p.iterations;
    d.bubble_measured_s = m.per_stage[s].bubble_s / m.iterations;
    d.bubble_diff_s = d.bubble_predicted_s - d.bubble_measured_s;
    c.per_stage.push_back(d);
  }
  return c;
}

namespace {

int sign(double x) { return (x > 0) - (x < 0); }

std::size_t argmin(const std::vector<Comparison>& cs, double Comparison::*field) {
  std::size_t best = 0;
  for (std::size_t i = 1; i < cs.size(); ++i)
    if (cs[i].*field < cs[best].*field) best = i;
  return best;
}

}  // namespace

Ranking rank_agreement(const std::vector<Comparison>& cs, std::optional<int> chosen) {
  Ranking r;
  const int n = static_cast<int>(cs.size());
  r.candidates = n;
  r.pairs = n * (n - 1) / 2;
  if (chosen && (*chosen < 0 || *chosen >= n))
    throw InputError(fmt::format("--chosen: {} is not the index of one of the {} pairs (0 .. {})", *chosen, n, n - 1));
  if (n == 0) return r;
  // Kendall tau-b: (C - D) / sqrt((P - Tp)(P - Tm)), Tp and Tm the pairs tied in the
  // prediction and in the measurement.
  int tied_p = 0, tied_m = 0;
  for (int i = 0; i < n; ++i) {
    for (int j = i + 1; j < n; ++j) {
      const int a = sign(cs[i].mean_predicted_s - cs[j].mean_predicted_s);
      const int b = sign(cs[i].mean_measured_s - cs[j].mean_measured_s);
      tied_p += a == 0;
      tied_m += b == 0;
      if (a == 0 || b == 0) {
        ++r.tied;
      } else if (a == b) {
        ++r.concordant;
      } else {
        ++r.discordant;
      }
    }
  }
  const double denom = std::sqrt(static_cast<double>(r.pairs - tied_p) * static_cast<double>(r.pairs - tied_m));
  r.kendall_tau = denom > 0 ? (r.concordant - r.discordant) / denom : 1.0;
  r.pairwise_agreement = r.concordant + r.discordant > 0
                             ? static_cast<double>(r.concordant) / (r.concordant + r.discordant)
                             : 1.0;
  r.predicted_best = static_cast<int>(argmin(cs, &Comparison::mean_predicted_s));
  r.measured_best = static_cast<int>(argmin(cs, &Comparison::mean_measured_s));
  const double fastest = cs[r.measured_best].mean_measured_s;
  r.best_holds = cs[r.predicted_best].mean_measured_s <= fastest;
  r.regret_pct = 100.0 * (cs[r.predicted_best].mean_measured_s / fastest - 1.0);
  if (chosen) {
    r.chosen = chosen;
    r.chosen_is_fastest_measured = cs[*chosen].mean_measured_s <= fastest;
    r.chosen_regret_pct = 100.0 * (cs[*chosen].mean_measured_s / fastest - 1.0);
  }
  return r;
}

nlohmann::ordered_json comparison_json(const std::vector<Comparison>& cs, const std::optional<Ranking>& ranking) {
  nlohmann::ordered_json j;
  j["schema"] = "adagrouper.compare/1";
  auto& arr = j["comparisons"] = nlohmann::ordered_json::array();
  double sum_mape = 0, max_mape = 0;
  for (const auto& c : cs) {
    nlohmann::ordered_json e;
    e["label"] = c.label;
    e["predicted"] = c.predicted_source;
    e["measured"] = c.measured_source;
    e["schedule"] = c.schedule;
    e["k"] = c.k;
    e["micro_batch_size"] = c.micro_batch_size;
    e["micro_batches"] = c.micro_batches;
    e["stages"] = c.stages;
    e["iterations_predicted"] = c.iterations_predicted;
    e["iterations_measured"] = c.iterations_measured;
    e["iterations_compared"] = c.iterations.size();
    auto& its = e["iterations"] = nlohmann::ordered_json::array();
    for (const auto& it : c.iterations)
      its.push_back({{"iteration", it.iteration},
                     {"predicted_s", it.predicted_s},
                     {"measured_s", it.measured_s},
                     {"error_s", it.error_s},
                     {"error_pct", it.error_pct}});
    e["mean_predicted_s"] = c.mean_predicted_s;
    e["mean_measured_s"] = c.mean_measured_s;
    e["mean_error_pct"] = c.mean_error_pct;
    e["mape_pct"] = c.mape_pct;
    e["max_abs_error_pct"] = c.max_abs_error_pct;
    e["median_abs_error_pct"] = c.median_abs_error_pct;
    e["bubble_fraction_predicted"] = c.bubble_fraction_predicted;
    e["bubble_fraction_measured"] = c.bubble_fraction_measured;
    e["bubble_fraction_diff"] = c.bubble_fraction_predicted - c.bubble_fraction_measured;
    auto& st = e["per_stage"] = nlohmann::ordered_json::array();
    for (const auto& d : c.per_stage)
      st.push_back({{"stage", d.stage},
                    {"busy_predicted_s", d.busy_predicted_s},
                    {"busy_measured_s", d.busy_measured_s},
                    {"busy_diff_s", d.busy_diff_s},
                    {"busy_error_pct", d.busy_error_pct},
                    {"bubble_predicted_s", d.bubble_predicted_s},
                    {"bubble_measured_s", d.bubble_measured_s},
                    {"bubble_diff_s", d.bubble_diff_s}});
    sum_mape += c.mape_pct;
    max_mape = std::max(max_mape, c.mape_pct);
    arr.push_back(std::move(e));
  }
  j["mape_pct"] = cs.empty() ? 0.0 : sum_mape / static_cast<double>(cs.size());
  j["max_mape_pct"] = max_mape;
  if (ranking) {
    const Ranking& r = *ranking;
    nlohmann::ordered_json k;
    k["candidates"] = r.candidates;
    k["pairs"] = r.pairs;
    k["concordant"] = r.concordant;
    k["discordant"] = r.discordant;
    k["tied"] = r.tied;
    k["kendall_tau"] = r.kendall_tau;
    k["pairwise_agreement"] = r.pairwise_agreement;
    k["predicted_best"] = r.predicted_best;
    k["measured_best"] = r.measured_best;
    k["best_holds"] = r.best_holds;
    k["regret_pct"] = r.regret_pct;
    if (r.chosen) {
      k["chosen"] = *r.chosen;
      k["chosen_is_fastest_measured"] = r.chosen_is_fastest_measured;
      k["chosen_regret_pct"] = r.chosen_regret_pct;
    } else {
      k["chosen"] = nullptr;
    }
    j["ranking"] = std::move(k);
  } else {
    j["ranking"] = nullptr;
  }
  return j;
}

std::string comparison_text(const std::vector<Comparison>& cs, const std::optional<Ranking>& ranking) {
  std::string out;
  if (cs.size() == 1) {
    const Comparison& c = cs[0];
    out += fmt::format("{}: predicted {} vs measured {}\n", c.label, c.predicted_source, c.measured_source);
    if (c.iterations_predicted != c.iterations_measured)
      out += fmt::format("(predicted {} iterations, measured {}: comparing the first {})\n", c.iterations_predicted,
                         c.iterations_measured, c.iterations.size());
    out += fmt::format("{:>9}  {:>12}  {:>12}  {:>9}\n", "iteration", "predicted s", "measured s", "error");
    for (const auto& it : c.iterations)
      out += fmt::format("{:>9}  {:>12.6g}  {:>12.6g}  {:>+8.2f}%\n", it.iteration, it.predicted_s, it.measured_s,
                         it.error_pct);
    out += fmt::format(
        "mean {:.6g} s predicted, {:.6g} s measured: error {:+.2f}%, MAPE {:.2f}%, median {:.2f}%, max {:.2f}%\n",
        c.mean_predicted_s, c.mean_measured_s, c.mean_error_pct, c.mape_pct, c.median_abs_error_pct,
        c.max_abs_error_pct);
    out += fmt::format("bubble fraction {:.1f}% predicted, {:.1f}% measured\n", 100 * c.bubble_fraction_predicted,
                       100 * c.bubble_fraction_measured);
    out += fmt::format("{:>5}  {:>12}  {:>12}  {:>8}  {:>12}  {:>12}   (per iteration)\n", "stage", "busy pred s",
                       "busy meas s", "busy err", "bubble pred", "bubble meas");
    for (const auto& d : c.per_stage)
      out += fmt::format("{:>5}  {:>12.6g}  {:>12.6g}  {:>+7.2f}%  {:>12.6g}  {:>12.6g}\n", d.stage,
                         d.busy_predicted_s, d.busy_measured_s, d.busy_error_pct, d.bubble_predicted_s,
                         d.bubble_measured_s);
  } else {
    std::size_t width = 18;  // the candidate column: as wide as its longest label
    for (const auto& c : cs) width = std::max(width, c.label.size());
    out += fmt::format("  {:<3} {:<{}} {:>12} {:>12} {:>8} {:>7} {:>7} {:>8} {:>8}\n", "#", "candidate", width,
                       "predicted s", "measured s", "error", "MAPE", "median", "bubble p", "bubble m");
    for (std::size_t i = 0; i < cs.size(); ++i) {
      const Comparison& c = cs[i];
      const bool pick = ranking && ranking->chosen && *ranking->chosen == static_cast<int>(i);
      out += fmt::format("{} {:<3} {:<{}} {:>12.6g} {:>12.6g} {:>+7.2f}% {:>6.2f}% {:>6.2f}% {:>7.1f}% {:>7.1f}%\n",
                         pick ? '*' : ' ', i, c.label, width, c.mean_predicted_s, c.mean_measured_s, c.mean_error_pct,
                         c.mape_pct, c.median_abs_error_pct, 100 * c.bubble_fraction_predicted,
                         100 * c.bubble_fraction_measured);
    }
    double sum = 0, mx = 0;
    for (const auto& c : cs) {
      sum += c.mape_pct;
      mx = std::max(mx, c.mape_pct);
    }
    if (!cs.empty())
      out += fmt::format("MAPE of iteration time: {:.2f}% mean over candidates, {:.2f}% worst\n",
                         sum / static_cast<double>(cs.size()), mx);
  }
  if (ranking && ranking->candidates >= 2) {
    const Ranking& r = *ranking;
    out += fmt::format("ranking: Kendall tau {:.3f}, pairwise agreement {}/{} ({} tied)\n", r.kendall_tau,
                       r.concordant, r.concordant + r.discordant, r.tied);
    out += fmt::format("predicted best #{} ({}), measured best #{} ({}): {}\n", r.predicted_best,
                       cs[r.predicted_best].label, r.measured_best, cs[r.measured_best].label,
                       r.best_holds ? "holds"
                                    : fmt::format("does not hold, {:.2f}% slower than the fastest", r.regret_pct));
    if (r.chosen)
      out += fmt::format("planner's pick #{} ({}): {}\n", *r.chosen, cs[*r.chosen].label,
                         r.chosen_is_fastest_measured
                             ? "fastest measured"
                             : fmt::format("not the fastest measured, {:.2f}% slower", r.chosen_regret_pct));
  }
  return out;
}

}  // namespace adagrouper::sim
