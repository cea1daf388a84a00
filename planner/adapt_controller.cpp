// The adaptive controller: sample windows, the rate estimate, and the decision to switch plan.
//
// Per channel the last W transfer samples; the planner re-run on the network their
// rates describe; and the switch rule (docs/model.md section 13).
#include <cmath>
#include <limits>
#include <stdexcept>
#include <utility>

#include <fmt/format.h>

#include "adapt_internal.h"

namespace adagrouper::planner::adapt_parts {

int channel_index(int from, int to) { return to == from + 1 ? 2 * from : 2 * to + 1; }

void SampleWindow::push(const CommSample& s) {
  if (count_ < buf_.size()) {
    buf_[(head_ + count_) % buf_.size()] = s;
    ++count_;
  } else {
    buf_[head_] = s;
    head_ = (head_ + 1) % buf_.size();
  }
}

std::vector<CommSample> SampleWindow::ordered() const {
  std::vector<CommSample> out;
  out.reserve(count_);
  for (std::size_t i = 0; i < count_; ++i) out.push_back(buf_[(head_ + i) % buf_.size()]);
  return out;
}

namespace {

const sim::ChannelSpec& channel_spec(const sim::Network& n, int c) {
  return c % 2 == 0 ? n.channel(c / 2, c / 2 + 1) : n.channel(c / 2 + 1, c / 2);
}

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

std::string adaptive_description(const AdaptOptions& o) {
  return fmt::format(
      "re-plans every {} iterations on the moving average of the last {} transfer samples per channel; switches "
      "when the predicted gain exceeds {} and the saving over {} pays for the {} s pause",
      o.replan_every, o.window, percent(o.threshold),
      o.horizon > 0 ? fmt::format("{} iterations", o.horizon) : std::string("the rest of the run"), o.switch_pause_s);
}

}  // namespace

Controller::Controller(const sim::Pipeline& pipeline, const sim::Network& network, const AdaptOptions& options)
    : pipeline_(pipeline), network_(network), options_(options), channels_(2 * (pipeline.num_stages() - 1)) {
  plan_options_.memory_limit_bytes = options.memory_limit_bytes;
  plan_options_.global_batch_size = options.global_batch_size;
  plan_options_.eval_iterations = 1;  // the estimated network is constant: one iteration says everything
  plan_options_.eval_start_s = 0;
  plan_options_.families = options.families;
}

std::vector<Candidate> Controller::candidates() const {
  const PlanResult set =
      make_plan(pipeline_, observed_network(network_, std::vector<ChannelEstimate>(channels_)), plan_options_);
  std::vector<Candidate> out;
  for (const Candidate& c : set.candidates) {
    if (!c.evaluated) continue;
    Candidate d = c;
    d.evaluated = false;
    d.predicted_iteration_time_s = 0;
    d.throughput_samples_per_s = 0;
    d.simulated_memory.clear();
    d.status = Status::Lost;
    d.reason.clear();
    out.push_back(std::move(d));
  }
  return out;
}

std::vector<SampleWindow> Controller::empty_windows() const {
  return std::vector<SampleWindow>(channels_, SampleWindow(static_cast<std::size_t>(options_.window)));
}

std::vector<ChannelEstimate> Controller::estimate(const std::vector<SampleWindow>& windows) const {
  std::vector<ChannelEstimate> out(channels_);
  for (int c = 0; c < channels_; ++c) {
    const sim::ChannelSpec& spec = channel_spec(network_, c);
    const std::vector<CommSample> samples = windows[c].ordered();
    const WindowRate w = window_rate(samples, static_cast<std::size_t>(options_.window), spec.latency_s);
    const bool forward = c % 2 == 0;
    out[c] = {forward ? c / 2 : c / 2 + 1, forward ? c / 2 + 1 : c / 2, w.used, w.rate()};
  }
  return out;
}

Evaluation Controller::evaluate(const std::vector<ChannelEstimate>& est, const Plans& plans) const {
  const PlanResult pr = make_plan(pipeline_, observed_network(network_, est), plan_options_);
  Evaluation ev;
  ev.predicted.assign(plans.candidates().size(), std::numeric_limits<double>::quiet_NaN());
  for (const Candidate& c : pr.candidates) {
    if (!c.evaluated) continue;
    const int q = plans.index_of(c);
    if (q < 0) throw std::logic_error("adapt: the planner's candidate set changed with the rates");
    ev.predicted[static_cast<std::size_t>(q)] = c.predicted_iteration_time_s;
  }
  for (double p : ev.predicted)
    if (std::isnan(p)) throw std::logic_error("adapt: a candidate was not evaluated");
  ev.best = plans.index_of(pr.candidates[pr.chosen]);
  if (ev.best < 0) throw std::logic_error("adapt: the planner chose a plan outside the candidate set");
  return ev;
}

Decision Controller::decide(int iteration, double t, int current, const std::vector<SampleWindow>& windows,
                            const Plans& plans) const {
  const AdaptOptions& o = options_;
  Decision d;
  d.iteration = iteration;
  d.time_s = t;
  d.channels = estimate(windows);
  const Evaluation ev = evaluate(d.channels, plans);
  d.current = current;
  d.best = ev.best;
  d.current_predicted_s = ev.predicted[current];
  d.best_predicted_s = ev.predicted[ev.best];
  d.gain = 1.0 - d.best_predicted_s / d.current_predicted_s;
  const int rest = o.iterations - iteration;  // iterations left in the run
  const int horizon = o.horizon > 0 ? std::min(o.horizon, rest) : rest;
  const double saving = horizon * (d.current_predicted_s - d.best_predicted_s);
  if (ev.best == current) {
    d.reason = "stay: the current plan is the best predicted";
  } else if (!(d.gain > o.threshold)) {
    d.reason = fmt::format("stay: predicted gain {} of {} is not above the threshold {}", percent(d.gain),
                           plans[ev.best].label(), percent(o.threshold));
  } else if (!(saving > o.switch_pause_s)) {
    d.reason = fmt::format("stay: {} would save {:.4g} s over the next {} iterations, not more than the {} s pause",
                           plans[ev.best].label(), saving, horizon, o.switch_pause_s);
  } else {
    d.switched = true;
    d.reason = fmt::format("switch: predicted gain {} (threshold {}), saving {:.4g} s over the next {} iterations",
                           percent(d.gain), percent(o.threshold), saving, horizon);
  }
  return d;
}

PolicyRun run_adaptive(const Controller& controller, Plans& plans, const Periods& periods, int launch,
                       std::vector<SampleWindow>& windows, std::vector<Decision>& decisions, const Reporter& reporter) {
  const AdaptOptions& o = controller.options();
  PolicyRun p = named_policy("adaptive", adaptive_description(o));
  p.rows.reserve(static_cast<std::size_t>(periods.iterations));
  int cur = launch;
  double t = 0;
  for (int w = 0; w < periods.count; ++w) {
    const int first = periods.first(w);
    double pause = 0;
    if (w > 0) {
      Decision d = controller.decide(first, t, cur, windows, plans);
      if (d.switched) {
        pause = o.switch_pause_s;
        cur = d.best;
        ++p.switches;
        p.pause_s += pause;
      }
      decisions.push_back(std::move(d));
    }
    t += pause;
    for (int i = 0; i < periods.length(w); ++i) {
      const IterationRow row{first + i, t, cur, i == 0 ? pause : 0.0, plans.observe(cur, t, windows)};
      reporter.add(p, row);
      t += row.time_s;
    }
    reporter.progress("adaptive", first + periods.length(w), periods.iterations);
  }
  p.total_time_s = t;
  return p;
}

}  // namespace adagrouper::planner::adapt_parts
