// Adaptive re-planning: the controller, the static and hindsight policies it is compared
// with, and their outputs (docs/model.md "Adaptive re-planning", docs/formats.md "Adaptive run").
#include "adapt.h"

#include <algorithm>
#include <cmath>
#include <limits>
#include <map>
#include <stdexcept>
#include <tuple>
#include <utility>

#include <fmt/format.h>

namespace adagrouper::planner {

// --- small helpers ----------------------------------------------------------------

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

std::string plan_name(const Candidate& c) {
  if (c.schedule == "kfkb") return fmt::format("kfkb k={} b={}", c.k, c.micro_batch_size);
  return fmt::format("{} b={}", c.schedule, c.micro_batch_size);
}

namespace {

constexpr int kMaxIterations = 1'000'000;
constexpr int kMaxWindow = 1'000'000;

using Key = std::tuple<std::string, int, int>;  // schedule, k, b
Key key_of(const Candidate& c) { return {c.schedule, c.k, c.micro_batch_size}; }

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

// Channels are numbered 2s for s -> s+1 and 2s+1 for s+1 -> s (the plan's communicators).
int channel_index(int from, int to) { return to == from + 1 ? 2 * from : 2 * to + 1; }

const sim::ChannelSpec& channel_spec(const sim::Network& n, int c) {
  return c % 2 == 0 ? n.channel(c / 2, c / 2 + 1) : n.channel(c / 2 + 1, c / 2);
}

// The last `capacity` samples of one channel, in time order.
class SampleWindow {
 public:
  explicit SampleWindow(std::size_t capacity) : buf_(capacity) {}
  void push(const CommSample& s) {
    if (count_ < buf_.size()) {
      buf_[(head_ + count_) % buf_.size()] = s;
      ++count_;
    } else {
      buf_[head_] = s;
      head_ = (head_ + 1) % buf_.size();
    }
  }
  std::vector<CommSample> ordered() const {
    std::vector<CommSample> out;
    out.reserve(count_);
    for (std::size_t i = 0; i < count_; ++i) out.push_back(buf_[(head_ + i) % buf_.size()]);
    return out;
  }

 private:
  std::vector<CommSample> buf_;
  std::size_t head_ = 0, count_ = 0;
};

// The network the controller's cost model sees: the file's latencies and capacities
// (configuration it knows), a constant rate per channel from its measurements (latency
// only where it has no rate), and the profiled compute speed (constant 1).
sim::Network observed_network(const sim::Network& real, const std::vector<ChannelEstimate>& est) {
  sim::Network n = real;
  for (int s = 0; s < n.num_stages(); ++s) n.set_speed(s, sim::RateTrace());
  n.rewrite_channels([&](sim::ChannelSpec& spec) {
    spec.rate = nullptr;
    if (std::abs(spec.from - spec.to) != 1) return;
    const std::optional<double> rate = est[static_cast<std::size_t>(channel_index(spec.from, spec.to))].rate;
    if (rate) spec.set_rate(sim::RateTrace::constant(*rate));
  });
  return n;
}

PolicyRun named_policy(std::string name, std::string description) {
  PolicyRun p;
  p.name = std::move(name);
  p.description = std::move(description);
  return p;
}

std::string percent(double f) { return fmt::format("{:.2f}%", 100.0 * f); }

class Study {
 public:
  Study(const sim::Pipeline& pipeline, const sim::Network& network, const AdaptOptions& opt, const RowSink& sink)
      : opt_(opt), network_(network), sink_(sink), S_(pipeline.num_stages()), N_(opt.iterations),
        R_(opt.replan_every), periods_((opt.iterations + opt.replan_every - 1) / opt.replan_every),
        channels_(2 * (pipeline.num_stages() - 1)) {
    pipeline_ = pipeline;
    pipeline_.global_batch_size = opt.global_batch_size;
    pipeline_.memory_limit_bytes = opt.memory_limit_bytes;
    plan_options_.memory_limit_bytes = opt.memory_limit_bytes;
    plan_options_.global_batch_size = opt.global_batch_size;
    plan_options_.eval_iterations = 1;  // the estimated network is constant: one iteration says everything
    plan_options_.eval_start_s = 0;
  }

  AdaptResult run() {
    AdaptResult res;
    res.pipeline = pipeline_.name;
    res.num_stages = S_;
    res.options = opt_;
    res.options.progress = nullptr;
    make_candidates();
    const int C = static_cast<int>(cands_.size());

    // The launch profile: the least memory-hungry plan (1F1B) run for just enough
    // iterations to fill the window, from time 0; its time is not charged to anyone.
    std::vector<SampleWindow> windows(channels_, SampleWindow(static_cast<std::size_t>(opt_.window)));
    res.profile_plan = profile_plan();
    const int m = cands_[res.profile_plan].micro_batches;
    res.profile_iterations = (opt_.window + m - 1) / m;
    {
      double t = 0;
      for (int i = 0; i < res.profile_iterations; ++i) t += observe(res.profile_plan, t, windows);
    }
    res.launch_estimate = estimate(windows);
    res.launch_plan = evaluate(res.launch_estimate).best;

    // The static plans, all on the same periods; rows kept for the named policies.
    const int one_f_one_b = find("1f1b"), dapple_b = find("dapple-b");
    static_ends_.assign(C, {});
    res.static_total_s.assign(C, 0.0);
    static_done_ = 0;
    std::map<int, std::vector<IterationRow>> kept;
    std::vector<int> order;  // named policies first, so their rows stream early
    for (int q : {one_f_one_b, dapple_b, res.launch_plan})
      if (q >= 0 && std::find(order.begin(), order.end(), q) == order.end()) order.push_back(q);
    const std::size_t named = order.size();
    for (int q = 0; q < C; ++q)
      if (std::find(order.begin(), order.end(), q) == order.end()) order.push_back(q);

    PolicyRun p1f1b = baseline_policy("1f1b", "static 1F1B at its largest feasible micro-batch size", one_f_one_b);
    PolicyRun pdb = baseline_policy("dapple-b", "static DAPPLE policy B at its largest feasible micro-batch size",
                                    dapple_b);
    PolicyRun pfirst = named_policy(
        "first-window", "static: the plan chosen on the launch profile (the first window), never re-planned");
    for (std::size_t i = 0; i < order.size(); ++i) {
      const int q = order[i];
      std::vector<IterationRow>* rows = i < named ? &kept[q] : nullptr;
      if (rows) rows->reserve(N_);
      res.static_total_s[q] = run_static(q, rows);
      if (i + 1 == named) {  // stream the named static policies
        if (one_f_one_b >= 0) finish_static(p1f1b, kept[one_f_one_b]);
        if (dapple_b >= 0) finish_static(pdb, kept[dapple_b]);
        finish_static(pfirst, kept[res.launch_plan]);
      }
    }

    PolicyRun adaptive = run_adaptive(res.launch_plan, windows, res.decisions);

    // Best static in hindsight: the smallest total (first in the planner's order on a tie).
    int best = 0;
    for (int q = 1; q < C; ++q)
      if (res.static_total_s[q] < res.static_total_s[best]) best = q;
    PolicyRun pbest = named_policy("best-static", "the static plan with the smallest total time, chosen in hindsight");
    {
      auto it = kept.find(best);
      std::vector<IterationRow> rows;
      if (it != kept.end()) {
        rows = it->second;
      } else {
        rows.reserve(N_);
        run_static(best, &rows, false);
      }
      finish_static(pbest, rows);
    }

    PolicyRun oracle = run_oracle();

    res.policies.push_back(std::move(p1f1b));
    res.policies.push_back(std::move(pdb));
    res.policies.push_back(std::move(pfirst));
    res.policies.push_back(std::move(pbest));
    res.policies.push_back(std::move(adaptive));
    res.policies.push_back(std::move(oracle));
    res.candidates = cands_;
    return res;
  }

 private:
  struct Evaluation {
    std::vector<double> predicted;  // per candidate, on the estimated network
    int best = 0;                   // the planner's choice
  };

  // The planner's evaluated candidates, stripped of their evaluation.
  void make_candidates() {
    const PlanResult set =
        make_plan(pipeline_, observed_network(network_, std::vector<ChannelEstimate>(channels_)), plan_options_);
    for (const Candidate& c : set.candidates) {
      if (!c.evaluated) continue;
      Candidate d = c;
      d.evaluated = false;
      d.predicted_iteration_time_s = 0;
      d.throughput_samples_per_s = 0;
      d.simulated_memory.clear();
      d.status = Status::Lost;
      d.reason.clear();
      index_[key_of(d)] = static_cast<int>(cands_.size());
      cands_.push_back(std::move(d));
    }
    for (const Candidate& c : cands_)
      scenarios_.push_back(sim::make_scenario(
          pipeline_, network_,
          sim::make_named(c.schedule, S_, c.micro_batches,
                          c.schedule == "kfkb" ? std::optional<int>(c.k) : std::nullopt),
          c.micro_batch_size, 1));
  }

  int find(std::string_view schedule) const {
    for (std::size_t q = 0; q < cands_.size(); ++q)
      if (cands_[q].schedule == schedule) return static_cast<int>(q);
    return -1;
  }

  // 1F1B when it fits (the curve's first point), else the least memory-hungry plan.
  int profile_plan() const {
    const int q = find("1f1b");
    if (q >= 0) return q;
    int best = 0;
    for (std::size_t i = 1; i < cands_.size(); ++i)
      if (cands_[i].peak_model_memory() < cands_[best].peak_model_memory()) best = static_cast<int>(i);
    return best;
  }

  // One iteration of plan q starting at `start` on the real network; returns its time.
  double iteration(int q, double start) {
    sim::Scenario& sc = scenarios_[q];
    sc.start_time_s = start;
    return sim::simulate(sc).total_time_s;
  }

  // The same, recording the transfers it made into the channels' windows.
  double observe(int q, double start, std::vector<SampleWindow>& windows) {
    sim::Scenario& sc = scenarios_[q];
    sc.start_time_s = start;
    const sim::SimResult r = sim::simulate(sc, {.timeline = true});
    for (const auto& x : r.timeline->transfers)
      windows[channel_index(x.from, x.to)].push({x.start, x.bytes, x.end - x.start});
    return r.total_time_s;
  }

  std::vector<ChannelEstimate> estimate(const std::vector<SampleWindow>& windows) const {
    std::vector<ChannelEstimate> out(channels_);
    for (int c = 0; c < channels_; ++c) {
      const sim::ChannelSpec& spec = channel_spec(network_, c);
      const std::vector<CommSample> samples = windows[c].ordered();
      const WindowRate w = window_rate(samples, static_cast<std::size_t>(opt_.window), spec.latency_s);
      out[c] = {c % 2 == 0 ? c / 2 : c / 2 + 1, c % 2 == 0 ? c / 2 + 1 : c / 2, w.used, w.rate()};
    }
    return out;
  }

  // The cost model: the planner on the estimated network.
  Evaluation evaluate(const std::vector<ChannelEstimate>& est) {
    const PlanResult pr = make_plan(pipeline_, observed_network(network_, est), plan_options_);
    Evaluation ev;
    ev.predicted.assign(cands_.size(), std::numeric_limits<double>::quiet_NaN());
    for (const Candidate& c : pr.candidates) {
      if (!c.evaluated) continue;
      const auto it = index_.find(key_of(c));
      if (it == index_.end()) throw std::logic_error("adapt: the planner's candidate set changed with the rates");
      ev.predicted[it->second] = c.predicted_iteration_time_s;
    }
    for (double p : ev.predicted)
      if (std::isnan(p)) throw std::logic_error("adapt: a candidate was not evaluated");
    ev.best = index_.at(key_of(pr.candidates[pr.chosen]));
    return ev;
  }

  int period_length(int w) const { return std::min(R_, N_ - w * R_); }

  void progress(std::string_view phase, long done, long total) const {
    if (opt_.progress) opt_.progress(phase, done, total);
  }

  // Plan q from time 0 over every period; fills static_ends_[q] and `rows` (if given).
  double run_static(int q, std::vector<IterationRow>* rows, bool report = true) {
    const long total = static_cast<long>(cands_.size()) * N_;
    std::vector<double>& ends = static_ends_[q];
    ends.assign(periods_, 0.0);
    double t = 0;
    for (int w = 0; w < periods_; ++w) {
      for (int i = 0; i < period_length(w); ++i) {
        const double dt = iteration(q, t);
        if (rows) rows->push_back({w * R_ + i, t, q, 0.0, dt});
        t += dt;
      }
      ends[w] = t;
      if (!report) continue;
      static_done_ += period_length(w);
      progress("static plans", static_done_, total);
    }
    return t;
  }

  PolicyRun baseline_policy(const char* name, const char* description, int q) const {
    PolicyRun p = named_policy(name, description);
    if (q < 0) {
      p.available = false;
      p.description += ": does not fit the memory limit at any micro-batch size";
    }
    return p;
  }

  void emit(const PolicyRun& p, const IterationRow& row) const {
    if (sink_) sink_(p.name, row, cands_[row.plan]);
  }

  void finish_static(PolicyRun& p, const std::vector<IterationRow>& rows) const {
    p.rows = rows;
    p.total_time_s = rows.empty() ? 0.0 : rows.back().start_s + rows.back().time_s;
    for (const IterationRow& r : p.rows) emit(p, r);
  }

  PolicyRun run_adaptive(int launch, std::vector<SampleWindow>& windows, std::vector<Decision>& decisions) {
    PolicyRun p = named_policy("adaptive", fmt::format("re-plans every {} iterations on the moving average of the last {} "
                                        "transfer samples per channel; switches when the predicted gain exceeds {} "
                                        "and the saving over {} pays for the {} s pause",
                                        R_, opt_.window, percent(opt_.threshold),
                                        opt_.horizon > 0 ? fmt::format("{} iterations", opt_.horizon)
                                                         : std::string("the rest of the run"),
                                        opt_.switch_pause_s));
    p.rows.reserve(N_);
    int cur = launch;
    double t = 0;
    for (int w = 0; w < periods_; ++w) {
      const int first = w * R_;
      double pause = 0;
      if (w > 0) {
        Decision d;
        d.iteration = first;
        d.time_s = t;
        d.channels = estimate(windows);
        const Evaluation ev = evaluate(d.channels);
        d.current = cur;
        d.best = ev.best;
        d.current_predicted_s = ev.predicted[cur];
        d.best_predicted_s = ev.predicted[ev.best];
        d.gain = 1.0 - d.best_predicted_s / d.current_predicted_s;
        const int rest = N_ - first;  // iterations left in the run
        const int horizon = opt_.horizon > 0 ? std::min(opt_.horizon, rest) : rest;
        const double saving = horizon * (d.current_predicted_s - d.best_predicted_s);
        if (ev.best == cur) {
          d.reason = "stay: the current plan is the best predicted";
        } else if (!(d.gain > opt_.threshold)) {
          d.reason = fmt::format("stay: predicted gain {} of {} is not above the threshold {}", percent(d.gain),
                                 plan_name(cands_[ev.best]), percent(opt_.threshold));
        } else if (!(saving > opt_.switch_pause_s)) {
          d.reason = fmt::format("stay: {} would save {:.4g} s over the next {} iterations, not more than the {} s pause",
                                 plan_name(cands_[ev.best]), saving, horizon, opt_.switch_pause_s);
        } else {
          d.switched = true;
          d.reason = fmt::format("switch: predicted gain {} (threshold {}), saving {:.4g} s over the next {} iterations",
                                 percent(d.gain), percent(opt_.threshold), saving, horizon);
          pause = opt_.switch_pause_s;
          cur = ev.best;
          ++p.switches;
          p.pause_s += pause;
        }
        decisions.push_back(std::move(d));
      }
      t += pause;
      for (int i = 0; i < period_length(w); ++i) {
        const IterationRow row{first + i, t, cur, i == 0 ? pause : 0.0, observe(cur, t, windows)};
        p.rows.push_back(row);
        emit(p, row);
        t += row.time_s;
      }
      progress("adaptive", first + period_length(w), N_);
    }
    p.total_time_s = t;
    return p;
  }

  // The best sequence of plans in hindsight, switching only at period boundaries and
  // paying the pause for each change. Exact: an iteration that starts later never ends
  // earlier (every op and transfer end is a non-decreasing function of when its inputs
  // are ready), so per plan only the earliest arrival at each boundary matters:
  //   E[w][q] = f_q,w( min(E[w-1][q], min_{p != q} E[w-1][p] + pause) ).
  PolicyRun run_oracle() {
    const int C = static_cast<int>(cands_.size());
    const double P = opt_.switch_pause_s;
    const long total = static_cast<long>(C) * N_;
    long done = 0;
    std::vector<double> E(C, 0.0), next(C, 0.0);
    std::vector<std::vector<int>> from(periods_, std::vector<int>(C));
    std::vector<char> pure(C, 1);  // still on the static plan's own path (its ends are known)
    for (int w = 0; w < periods_; ++w) {
      int m1 = -1, m2 = -1;  // the earliest and second earliest arrivals
      for (int q = 0; q < C; ++q) {
        if (m1 < 0 || E[q] < E[m1]) {
          m2 = m1;
          m1 = q;
        } else if (m2 < 0 || E[q] < E[m2]) {
          m2 = q;
        }
      }
      for (int q = 0; q < C; ++q) {
        double start = E[q];
        from[w][q] = q;
        if (w > 0) {
          const int other = m1 != q ? m1 : m2;
          if (other >= 0 && E[other] + P < E[q]) {
            start = E[other] + P;
            from[w][q] = other;
            pure[q] = 0;
          }
        }
        if (pure[q]) {
          next[q] = static_ends_[q][w];
        } else {
          double t = start;
          for (int i = 0; i < period_length(w); ++i) t += iteration(q, t);
          next[q] = t;
        }
        done += period_length(w);
        progress("oracle", done, total);
      }
      std::swap(E, next);
    }
    int q = 0;
    for (int i = 1; i < C; ++i)
      if (E[i] < E[q]) q = i;
    std::vector<int> path(periods_);
    for (int w = periods_ - 1; w >= 0; --w) {
      path[w] = q;
      q = from[w][q];
    }
    PolicyRun p = named_policy("oracle", fmt::format("the best plan per period of {} iterations in hindsight (the optimal sequence, "
                                      "{} s pause per change)",
                                      R_, P));
    p.rows.reserve(N_);
    double t = 0;
    for (int w = 0; w < periods_; ++w) {
      double pause = 0;
      if (w > 0 && path[w] != path[w - 1]) {
        pause = P;
        ++p.switches;
        p.pause_s += P;
      }
      t += pause;
      for (int i = 0; i < period_length(w); ++i) {
        const IterationRow row{w * R_ + i, t, path[w], i == 0 ? pause : 0.0, iteration(path[w], t)};
        p.rows.push_back(row);
        emit(p, row);
        t += row.time_s;
      }
    }
    p.total_time_s = t;
    if (t != *std::min_element(E.begin(), E.end()))
      throw std::logic_error(fmt::format("adapt: the oracle's replay ends at {} s, its search at {} s", t,
                                         *std::min_element(E.begin(), E.end())));
    return p;
  }

  const AdaptOptions& opt_;
  const sim::Network& network_;
  const RowSink& sink_;
  const int S_, N_, R_, periods_, channels_;
  sim::Pipeline pipeline_;
  PlanOptions plan_options_;
  std::vector<Candidate> cands_;
  std::map<Key, int> index_;
  std::vector<sim::Scenario> scenarios_;             // per candidate, one iteration on the real network
  std::vector<std::vector<double>> static_ends_;     // [candidate][period]: end time as a static plan
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
  Study study(pipeline, network, options, sink);
  return study.run();
}

// --- outputs ----------------------------------------------------------------------

std::string rows_csv_header() {
  return "policy,iteration,start_s,schedule,k,micro_batch_size,micro_batches,pause_s,iteration_time_s\n";
}

std::string row_csv(const std::string& policy, const IterationRow& row, const Candidate& plan) {
  return fmt::format("{},{},{},{},{},{},{},{},{}\n", policy, row.iteration, row.start_s, plan.schedule, plan.k,
                     plan.micro_batch_size, plan.micro_batches, row.pause_s, row.time_s);
}

std::string row_jsonl(const std::string& policy, const IterationRow& row, const Candidate& plan) {
  nlohmann::ordered_json j = {{"policy", policy},
                              {"iteration", row.iteration},
                              {"start_s", row.start_s},
                              {"schedule", plan.schedule},
                              {"k", plan.k},
                              {"micro_batch_size", plan.micro_batch_size},
                              {"micro_batches", plan.micro_batches},
                              {"pause_s", row.pause_s},
                              {"iteration_time_s", row.time_s}};
  return j.dump() + "\n";
}

namespace {

nlohmann::ordered_json channels_json(const std::vector<ChannelEstimate>& est) {
  auto out = nlohmann::ordered_json::array();
  for (const ChannelEstimate& c : est)
    out.push_back({{"from", c.from},
                   {"to", c.to},
                   {"samples", c.samples},
                   {"rate_bytes_per_s", c.rate ? nlohmann::ordered_json(*c.rate) : nlohmann::ordered_json()}});
  return out;
}

// Runs of the same plan: [{from_iteration, plan}].
std::vector<std::pair<int, int>> plan_segments(const PolicyRun& p) {
  std::vector<std::pair<int, int>> out;
  for (const IterationRow& r : p.rows)
    if (out.empty() || out.back().second != r.plan) out.emplace_back(r.iteration, r.plan);
  return out;
}

nlohmann::ordered_json optional_number(const std::optional<double>& v) {
  return v ? nlohmann::ordered_json(*v) : nlohmann::ordered_json();
}

}  // namespace

nlohmann::ordered_json adapt_json(const AdaptResult& r, const std::vector<InputFile>& inputs) {
  using oj = nlohmann::ordered_json;
  const AdaptOptions& o = r.options;
  oj doc;
  doc["schema"] = "adagrouper.adapt/1";
  doc["pipeline"] = r.pipeline;
  doc["stages"] = r.num_stages;
  doc["global_batch_size"] = o.global_batch_size;
  doc["memory_limit_bytes"] = o.memory_limit_bytes;
  auto& in = doc["inputs"] = oj::array();
  for (const InputFile& f : inputs) {
    oj e = {{"role", f.role}, {"path", f.path}};
    if (!f.sha256.empty()) e["sha256"] = f.sha256;
    in.push_back(std::move(e));
  }
  doc["settings"] = {{"iterations", o.iterations},
                     {"replan_every", o.replan_every},
                     {"window", o.window},
                     {"threshold", o.threshold},
                     {"switch_pause_s", o.switch_pause_s},
                     {"horizon", o.horizon}};
  auto& cands = doc["candidates"] = oj::array();
  for (std::size_t i = 0; i < r.candidates.size(); ++i) {
    const Candidate& c = r.candidates[i];
    cands.push_back({{"plan", plan_name(c)},
                     {"schedule", c.schedule},
                     {"k", c.k},
                     {"micro_batch_size", c.micro_batch_size},
                     {"micro_batches", c.micro_batches},
                     {"peak_memory_bytes", c.model_memory},
                     {"static_total_time_s", r.static_total_s[i]}});
  }
  doc["launch"] = {{"profile_plan", r.profile_plan},
                   {"profile_iterations", r.profile_iterations},
                   {"channels", channels_json(r.launch_estimate)},
                   {"plan", r.launch_plan}};
  auto& pol = doc["policies"] = oj::array();
  for (const PolicyRun& p : r.policies) {
    oj e = {{"policy", p.name}, {"description", p.description}, {"available", p.available}};
    if (p.available) {
      e["total_time_s"] = p.total_time_s;
      e["mean_iteration_time_s"] = p.mean_iteration_time_s();
      e["speedup_over_1f1b"] = optional_number(r.speedup_over_1f1b(p));
      e["switches"] = p.switches;
      e["pause_s"] = p.pause_s;
      auto& plans = e["plans"] = oj::array();
      for (const auto& [from, plan] : plan_segments(p)) plans.push_back({{"from_iteration", from}, {"plan", plan}});
    } else {
      e["total_time_s"] = nullptr;
      e["mean_iteration_time_s"] = nullptr;
      e["speedup_over_1f1b"] = nullptr;
      e["switches"] = nullptr;
      e["pause_s"] = nullptr;
      e["plans"] = oj::array();
    }
    pol.push_back(std::move(e));
  }
  auto& dec = doc["decisions"] = oj::array();
  for (const Decision& d : r.decisions)
    dec.push_back({{"iteration", d.iteration},
                   {"time_s", d.time_s},
                   {"current", d.current},
                   {"best", d.best},
                   {"current_predicted_s", d.current_predicted_s},
                   {"best_predicted_s", d.best_predicted_s},
                   {"gain", d.gain},
                   {"switched", d.switched},
                   {"reason", d.reason},
                   {"channels", channels_json(d.channels)}});
  return doc;
}

std::string adapt_text(const AdaptResult& r) {
  const AdaptOptions& o = r.options;
  std::string out = fmt::format(
      "{}: S={} stages, B={}, {} iterations; re-plan every {} iterations on the last {} transfer samples per "
      "channel, threshold {}, switch pause {} s; {} candidate plans fit {:.2f} GiB per stage\n",
      r.pipeline, r.num_stages, o.global_batch_size, o.iterations, o.replan_every, o.window, percent(o.threshold),
      o.switch_pause_s, r.candidates.size(), o.memory_limit_bytes / (1024.0 * 1024.0 * 1024.0));
  out += fmt::format("  {:<13} {:<22} {:>13} {:>11} {:>8} {:>9} {:>9}\n", "policy", "plan", "total s", "mean s/it",
                     "vs 1F1B", "switches", "pause s");
  for (const PolicyRun& p : r.policies) {
    if (!p.available) {
      out += fmt::format("  {:<13} {:<22} {:>13} {:>11} {:>8} {:>9} {:>9}\n", p.name, "does not fit", "-", "-", "-",
                         "-", "-");
      continue;
    }
    const auto segs = plan_segments(p);
    std::vector<int> distinct;
    for (const auto& s : segs)
      if (std::find(distinct.begin(), distinct.end(), s.second) == distinct.end()) distinct.push_back(s.second);
    const std::string plan =
        distinct.size() == 1 ? plan_name(r.candidates[distinct[0]]) : fmt::format("{} plans", distinct.size());
    const auto sp = r.speedup_over_1f1b(p);
    out += fmt::format("  {:<13} {:<22} {:>13.6g} {:>11.6g} {:>8} {:>9} {:>9.4g}\n", p.name, plan, p.total_time_s,
                       p.mean_iteration_time_s(), sp ? fmt::format("{:.3f}x", *sp) : std::string("-"), p.switches,
                       p.pause_s);
  }
  const PolicyRun& a = r.policy("adaptive");
  std::map<int, int> use;
  for (const IterationRow& row : a.rows) ++use[row.plan];
  std::string mix;
  for (const auto& [plan, n] : use)
    mix += fmt::format("{}{} for {} iteration{}", mix.empty() ? "" : ", ", plan_name(r.candidates[plan]), n,
                       n == 1 ? "" : "s");
  out += fmt::format("adaptive ran {}.\n", mix);
  const double first = r.policy("first-window").total_time_s, best = r.policy("best-static").total_time_s;
  const double oracle = r.policy("oracle").total_time_s;
  auto diff = [](double x, double base) { return fmt::format("{:+.2f}%", 100.0 * (x / base - 1.0)); };
  out += fmt::format(
      "total time of adaptive: {} vs the first-window plan, {} vs the best static plan in hindsight; the oracle "
      "(which knows the trace): {} vs the best static plan.\n",
      diff(a.total_time_s, first), diff(a.total_time_s, best), diff(oracle, best));
  return out;
}

}  // namespace adagrouper::planner
