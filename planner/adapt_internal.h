// The parts run_adapt is made of, internal to planner/.
//
// The candidate plans on the real network and the static policies (adapt.cpp), the
// controller (adapt_controller.cpp) and the hindsight oracle (adapt_oracle.cpp);
// docs/model.md section 13.
#pragma once

#include <algorithm>
#include <string>
#include <string_view>
#include <vector>

#include "adapt.h"

namespace adagrouper::planner::adapt_parts {

// N iterations in periods of R, the last one possibly shorter: the controller decides,
// and the oracle may switch, at the start of every period but the first.
struct Periods {
  int iterations = 0;  // N
  int every = 0;       // R
  int count = 0;       // ceil(N / R)

  Periods(int n, int r) : iterations(n), every(r), count((n + r - 1) / r) {}
  int first(int w) const { return w * every; }
  int length(int w) const { return std::min(every, iterations - w * every); }
};

// Channels are numbered 2s for s -> s+1 and 2s+1 for s+1 -> s (the plan's communicators).
int channel_index(int from, int to);

// The last `capacity` transfer samples of one channel, in time order.
class SampleWindow {
 public:
  explicit SampleWindow(std::size_t capacity) : buf_(capacity) {}
  void push(const CommSample& s);
  std::vector<CommSample> ordered() const;

 private:
  std::vector<CommSample> buf_;
  std::size_t head_ = 0, count_ = 0;
};

// The plans every policy chooses from, each run one iteration at a time on the real
// network. Plans are numbered as AdaptResult::candidates.
class Plans {
 public:
  Plans(const sim::Pipeline& pipeline, const sim::Network& network, std::vector<Candidate> candidates);

  int size() const { return static_cast<int>(candidates_.size()); }
  const Candidate& operator[](int q) const { return candidates_[static_cast<std::size_t>(q)]; }
  const std::vector<Candidate>& candidates() const { return candidates_; }
  // The first plan that runs `spec`; -1 when none does.
  int find(const sim::ScheduleSpec& spec) const;
  // The plan with c's schedule and micro-batch size; -1 when none has them.
  int index_of(const Candidate& c) const;

  // One iteration of plan q starting at `start` (absolute); returns its time.
  double iteration(int q, double start);
  // The same, recording the transfers it made into the channels' windows.
  double observe(int q, double start, std::vector<SampleWindow>& windows);

 private:
  std::vector<Candidate> candidates_;
  std::vector<sim::CompiledScenario> scenarios_;  // per plan, one iteration on the real network
};

// Where the policies' rows and the run's progress go.
class Reporter {
 public:
  Reporter(const RowSink& sink, const AdaptOptions& options, const Plans& plans)
      : sink_(sink), options_(options), plans_(plans) {}
  // Streams a row of p to the sink (p keeps its rows itself).
  void emit(const PolicyRun& p, const IterationRow& row) const;
  // Appends a row to p and streams it.
  void add(PolicyRun& p, const IterationRow& row) const;
  void progress(std::string_view phase, long done, long total) const;

 private:
  const RowSink& sink_;
  const AdaptOptions& options_;
  const Plans& plans_;
};

PolicyRun named_policy(std::string name, std::string description);

// "2.00%" for 0.02.
std::string percent(double fraction);

// --- the controller ---------------------------------------------------------------

// The controller's cost model on one estimated network.
struct Evaluation {
  std::vector<double> predicted;  // per plan, the predicted iteration time
  int best = 0;                   // the planner's choice
};

// The controller sees only the transfers of the iterations it ran: it estimates each
// channel's rate over its window and re-runs the planner on the network those rates
// describe.
class Controller {
 public:
  // `pipeline` carries the options' B and memory limit; both references must outlive it.
  Controller(const sim::Pipeline& pipeline, const sim::Network& network, const AdaptOptions& options);

  const AdaptOptions& options() const { return options_; }

  // The plans to choose from: the planner's evaluated candidates, stripped of their
  // evaluation. Which candidates fit depends on memory and channel capacities only,
  // never on rates, so the set is fixed.
  std::vector<Candidate> candidates() const;
  // An empty window per channel.
  std::vector<SampleWindow> empty_windows() const;
  // Each channel's rate over its window.
  std::vector<ChannelEstimate> estimate(const std::vector<SampleWindow>& windows) const;
  // The planner on the network of the estimate.
  Evaluation evaluate(const std::vector<ChannelEstimate>& estimate, const Plans& plans) const;
  // The decision taken at time t before iteration `iteration`, running plan `current`.
  Decision decide(int iteration, double t, int current, const std::vector<SampleWindow>& windows,
                  const Plans& plans) const;

 private:
  const sim::Pipeline& pipeline_;
  const sim::Network& network_;
  const AdaptOptions& options_;
  PlanOptions plan_options_;
  int channels_ = 0;
};

// The adaptive policy from the launch plan, with the windows the launch profile filled;
// appends the controller's decisions.
PolicyRun run_adaptive(const Controller& controller, Plans& plans, const Periods& periods, int launch,
                       std::vector<SampleWindow>& windows, std::vector<Decision>& decisions, const Reporter& reporter);

// --- the oracle ---------------------------------------------------------------------

// The best sequence of plans in hindsight, switching only at period starts and paying
// `pause_s` per change. static_ends[q][w]: the end of period w of plan q run alone from
// time 0.
PolicyRun run_oracle(Plans& plans, const Periods& periods, const std::vector<std::vector<double>>& static_ends,
                     double pause_s, const Reporter& reporter);

}  // namespace adagrouper::planner::adapt_parts
