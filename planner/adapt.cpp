// run_adapt: every policy of the adaptive study on the same plans, periods and network.
//
// The launch profile, the static policies and the best static plan in hindsight are
// here; the controller and the oracle are in adapt_controller.cpp and adapt_oracle.cpp
// (docs/model.md section 13).
#include "adapt.h"

#include <algorithm>
#include <cmath>
#include <map>
#include <stdexcept>
#include <utility>

#include <fmt/format.h>

#include "adapt_internal.h"

namespace adagrouper::planner {

double PolicyRun::mean_iteration_time_s() const {
  if (rows.empty()) return 0.0;
  double sum = 0;
  for (const IterationRow& r : rows) sum += r.time_s;
  return sum / static_cast<double>(rows.size());
}

const PolicyRun& AdaptResult::policy(std::string_view name) const {
  for (const PolicyRun& p : policies)
    if (p.name == name) return p;
  throw std::out_of_range(fmt::format("no policy named {}", name));
}

std::optional<double> AdaptResult::speedup_over_1f1b(const PolicyRun& p) const {
  const PolicyRun& base = policy("1f1b");
  if (!base.available || !p.available || !(p.total_time_s > 0)) return std::nullopt;
  return base.total_time_s / p.total_time_s;
}

namespace adapt_parts {

Plans::Plans(const sim::Pipeline& pipeline, const sim::Network& network, std::vector<Candidate> candidates)
    : candidates_(std::move(candidates)) {
  for (const Candidate& c : candidates_)
    scenarios_.emplace_back(sim::make_scenario(
        pipeline, network, sim::make_schedule(c.spec, pipeline.num_stages(), c.micro_batches), c.micro_batch_size, 1));
}

int Plans::find(const sim::ScheduleSpec& spec) const {
  for (int q = 0; q < size(); ++q)
    if ((*this)[q].spec == spec) return q;
  return -1;
}

int Plans::index_of(const Candidate& c) const {
  for (int q = 0; q < size(); ++q)
    if ((*this)[q].spec == c.spec && (*this)[q].micro_batch_size == c.micro_batch_size) return q;
  return -1;
}

double Plans::iteration(int q, double start) {
  sim::CompiledScenario& sc = scenarios_[static_cast<std::size_t>(q)];
  sc.set_start_time(start);
  return sc.simulate().total_time_s;
}

double Plans::observe(int q, double start, std::vector<SampleWindow>& windows) {
  sim::CompiledScenario& sc = scenarios_[static_cast<std::size_t>(q)];
  sc.set_start_time(start);
  const sim::SimResult r = sc.simulate({.timeline = true});
  for (const auto& x : r.timeline->transfers)
    windows[static_cast<std::size_t>(channel_index(x.from, x.to))].push({x.start, x.bytes, x.end - x.start});
  return r.total_time_s;
}

void Reporter::emit(const PolicyRun& p, const IterationRow& row) const {
  if (sink_) sink_(p.name, row, plans_[row.plan]);
}

void Reporter::add(PolicyRun& p, const IterationRow& row) const {
  p.rows.push_back(row);
  emit(p, row);
}

void Reporter::progress(std::string_view phase, long done, long total) const {
  if (options_.progress) options_.progress(phase, done, total);
}

PolicyRun named_policy(std::string name, std::string description) {
  PolicyRun p;
  p.name = std::move(name);
  p.description = std::move(description);
  return p;
}

std::string percent(double fraction) { return fmt::format("{:.2f}%", 100.0 * fraction); }

}  // namespace adapt_parts

namespace {

using namespace adapt_parts;

using sim::kMaxIterations;
constexpr int kMaxWindow = 1'000'000;

void check_options(const AdaptOptions& o) {
  if (o.iterations < 1 || o.iterations > kMaxIterations)
    throw InputError(fmt::format("--iterations: must be in 1..{}, got {}", kMaxIterations, o.iterations));
  if (o.replan_every < 1) throw InputError(fmt::format("--replan-every: must be >= 1, got {}", o.replan_every));
  if (o.window < 1 || o.window > kMaxWindow)
    throw InputError(fmt::format("--window: must be in 1..{} samples, got {}", kMaxWindow, o.window));
  if (!(o.threshold >= 0) || !std::isfinite(o.threshold))
    throw InputError(fmt::format("--threshold: must be a finite fraction >= 0 (0.02 = 2%), got {}", o.threshold));
  if (o.horizon < 0)
    throw InputError(fmt::format("--horizon: must be >= 0 iterations (0: the rest of the run), got {}", o.horizon));
  if (!(o.switch_pause_s >= 0) || !std::isfinite(o.switch_pause_s))
    throw InputError(fmt::format("--switch-pause: must be a finite time >= 0 s, got {}", o.switch_pause_s));
}

sim::Pipeline with_options(const sim::Pipeline& pipeline, const AdaptOptions& o) {
  sim::Pipeline p = pipeline;
  p.global_batch_size = o.global_batch_size;
  p.memory_limit_bytes = o.memory_limit_bytes;
  return p;
}

// The static policies named in the summary.
struct NamedStatics {
  PolicyRun one_f_one_b, dapple_b, first_window;
};

using KeptRows = std::map<int, std::vector<IterationRow>>;  // plan -> its rows as a static plan

// Every policy over the same plans, network and periods.
class AdaptRun {
 public:
  AdaptRun(const sim::Pipeline& pipeline, const sim::Network& network, const AdaptOptions& options,
           const RowSink& sink)
      : options_(options), pipeline_(with_options(pipeline, options)), controller_(pipeline_, network, options),
        plans_(pipeline_, network, controller_.candidates()), periods_(options.iterations, options.replan_every),
        reporter_(sink, options, plans_) {}

  AdaptResult run() {
    AdaptResult res;
    res.pipeline = pipeline_.name;
    res.num_stages = pipeline_.num_stages();
    res.options = options_;
    res.options.progress = nullptr;
    std::vector<SampleWindow> windows = controller_.empty_windows();
    launch_profile(res, windows);
    KeptRows kept;
    NamedStatics statics = static_policies(res, kept);
    PolicyRun adaptive =
        run_adaptive(controller_, plans_, periods_, res.launch_plan, windows, res.decisions, reporter_);
    PolicyRun best = best_static(res, kept);
    PolicyRun oracle = run_oracle(plans_, periods_, static_ends_, options_.switch_pause_s, reporter_);
    for (PolicyRun* p : {&statics.one_f_one_b, &statics.dapple_b, &statics.first_window, &best, &adaptive, &oracle})
      res.policies.push_back(std::move(*p));
    res.candidates = plans_.candidates();
    return res;
  }

 private:
  // 1F1B when it fits (the curve's first point), else the least memory-hungry plan.
  int profile_plan() const {
    const int q = plans_.find(sim::ScheduleSpec::named("1f1b"));
    if (q >= 0) return q;
    int best = 0;
    for (int i = 1; i < plans_.size(); ++i)
      if (plans_[i].peak_model_memory() < plans_[best].peak_model_memory()) best = i;
    return best;
  }

  // The launch profile: the least memory-hungry plan run for just enough iterations to
  // fill the window, from time 0 (its time is not charged to anyone), and the plan
  // chosen on it.
  void launch_profile(AdaptResult& res, std::vector<SampleWindow>& windows) {
    res.profile_plan = profile_plan();
    const int m = plans_[res.profile_plan].micro_batches;
    res.profile_iterations = (options_.window + m - 1) / m;
    double t = 0;
    for (int i = 0; i < res.profile_iterations; ++i) t += plans_.observe(res.profile_plan, t, windows);
    res.launch_estimate = controller_.estimate(windows);
    res.launch_plan = controller_.evaluate(res.launch_estimate, plans_).best;
  }

  // Plan q from time 0 over every period; fills static_ends_[q] and `rows` (if given).
  double run_static(int q, std::vector<IterationRow>* rows, bool report = true) {
    const long total = static_cast<long>(plans_.size()) * periods_.iterations;
    std::vector<double>& ends = static_ends_[static_cast<std::size_t>(q)];
    ends.assign(static_cast<std::size_t>(periods_.count), 0.0);
    double t = 0;
    for (int w = 0; w < periods_.count; ++w) {
      for (int i = 0; i < periods_.length(w); ++i) {
        const double dt = plans_.iteration(q, t);
        if (rows) rows->push_back({periods_.first(w) + i, t, q, 0.0, dt});
        t += dt;
      }
      ends[static_cast<std::size_t>(w)] = t;
      if (!report) continue;
      static_done_ += periods_.length(w);
      reporter_.progress("static plans", static_done_, total);
    }
    return t;
  }

  static PolicyRun baseline_policy(const char* name, const char* description, int q) {
    PolicyRun p = named_policy(name, description);
    if (q < 0) {
      p.available = false;
      p.description += ": does not fit the memory limit at any micro-batch size";
    }
    return p;
  }

  void finish_static(PolicyRun& p, const std::vector<IterationRow>& rows) const {
    p.rows = rows;
    p.total_time_s = rows.empty() ? 0.0 : rows.back().start_s + rows.back().time_s;
    for (const IterationRow& r : p.rows) reporter_.emit(p, r);
  }

  // Runs every plan as a static plan (res.static_total_s, static_ends_): the named ones
  // first, keeping their rows and streaming their policies as soon as they are done.
  NamedStatics static_policies(AdaptResult& res, KeptRows& kept) {
    const int one_f_one_b = plans_.find(sim::ScheduleSpec::named("1f1b"));
    const int dapple_b = plans_.find(sim::ScheduleSpec::named("dapple-b"));
    NamedStatics named{
        baseline_policy("1f1b", "static 1F1B at its largest feasible micro-batch size", one_f_one_b),
        baseline_policy("dapple-b", "static DAPPLE policy B at its largest feasible micro-batch size", dapple_b),
        named_policy("first-window",
                     "static: the plan chosen on the launch profile (the first window), never re-planned")};
    std::vector<int> order;
    for (int q : {one_f_one_b, dapple_b, res.launch_plan})
      if (q >= 0 && std::find(order.begin(), order.end(), q) == order.end()) order.push_back(q);
    const std::size_t named_count = order.size();
    for (int q = 0; q < plans_.size(); ++q)
      if (std::find(order.begin(), order.end(), q) == order.end()) order.push_back(q);
    static_ends_.assign(static_cast<std::size_t>(plans_.size()), {});
    res.static_total_s.assign(static_cast<std::size_t>(plans_.size()), 0.0);
    for (std::size_t i = 0; i < order.size(); ++i) {
      const int q = order[i];
      std::vector<IterationRow>* rows = i < named_count ? &kept[q] : nullptr;
      if (rows) rows->reserve(static_cast<std::size_t>(periods_.iterations));
      res.static_total_s[static_cast<std::size_t>(q)] = run_static(q, rows);
      if (i + 1 != named_count) continue;
      if (one_f_one_b >= 0) finish_static(named.one_f_one_b, kept[one_f_one_b]);
      if (dapple_b >= 0) finish_static(named.dapple_b, kept[dapple_b]);
      finish_static(named.first_window, kept[res.launch_plan]);
    }
    return named;
  }

  // The static plan with the smallest total, chosen in hindsight (the first in the
  // planner's order on a tie).
  PolicyRun best_static(const AdaptResult& res, const KeptRows& kept) {
    int best = 0;
    for (int q = 1; q < plans_.size(); ++q)
      if (res.static_total_s[q] < res.static_total_s[best]) best = q;
    PolicyRun p = named_policy("best-static", "the static plan with the smallest total time, chosen in hindsight");
    std::vector<IterationRow> rows;
    if (const auto it = kept.find(best); it != kept.end()) {
      rows = it->second;
    } else {
      rows.reserve(static_cast<std::size_t>(periods_.iterations));
      run_static(best, &rows, false);
    }
    finish_static(p, rows);
    return p;
  }

  const AdaptOptions& options_;
  const sim::Pipeline pipeline_;  // with the options' B and memory limit
  const Controller controller_;
  Plans plans_;
  const Periods periods_;
  const Reporter reporter_;
  std::vector<std::vector<double>> static_ends_;  // [plan][period]: end time as a static plan
  long static_done_ = 0;
};

}  // namespace

AdaptResult run_adapt(const sim::Pipeline& pipeline, const sim::Network& network, const AdaptOptions& options,
                      const RowSink& sink) {
  check_options(options);
  if (pipeline.num_stages() < 2)
    throw InputError(fmt::format("{}: stages: adapt needs at least 2 stages (channels to measure), got {}",
                                 pipeline.source, pipeline.num_stages()));
  if (network.num_stages() != pipeline.num_stages())
    throw InputError(fmt::format("{}: describes {} stages, {} has {}", network.source, network.num_stages(),
                                 pipeline.source, pipeline.num_stages()));
  return AdaptRun(pipeline, network, options, sink).run();
}

}  // namespace adagrouper::planner
