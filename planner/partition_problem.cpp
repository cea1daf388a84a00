// The partitioning problem at one micro-batch size, and the latency model and memory of a cut.
//
// Its prefix sums, memory coefficients and channel costs (docs/model.md section 12).
#include <algorithm>
#include <cstdint>
#include <limits>
#include <set>
#include <stdexcept>
#include <tuple>

#include <fmt/format.h>

#include "partition.h"
#include "partition_internal.h"

namespace adagrouper::planner {

namespace {

using partition_parts::kInf;

// Mean rate of a channel as the DP sees it: one period of a repeating trace, the
// recorded span [t0, last point] of a non-repeating one, the constant otherwise.
// Unlimited channels (no rate): infinity.
double mean_rate(const sim::ChannelSpec& ch, double t0) {
  if (ch.unlimited()) return kInf;
  const sim::RateTrace& r = *ch.rate;
  if (r.is_constant()) return r.value_at(0);
  if (r.repeat_s() > 0) return r.integral(t0, t0 + r.repeat_s()) / r.repeat_s();
  const double last = r.times().back();
  if (t0 < last) return r.integral(t0, last) / (last - t0);
  return r.value_at(t0);
}

double transfer_time(double latency, double bytes, double rate) {
  return bytes > 0 ? latency + bytes / rate : latency;
}

// Where each op of every stage's order stands: pos[s][2m + backward] is the position of
// micro-batch m's op on stage s; fwd_done[s][i] and bwd_done[s][i] count the forward and
// backward ops stage s runs before position i.
struct OrderIndex {
  std::vector<std::vector<std::uint32_t>> pos, fwd_done, bwd_done;

  explicit OrderIndex(const sim::Schedule& schedule) {
    const int S = schedule.num_stages();
    pos.resize(S);
    fwd_done.resize(S);
    bwd_done.resize(S);
    for (int s = 0; s < S; ++s) {
      const auto& order = schedule.stages[s];
      pos[s].resize(order.size());
      fwd_done[s].assign(order.size() + 1, 0);
      bwd_done[s].assign(order.size() + 1, 0);
      for (std::size_t i = 0; i < order.size(); ++i) {
        const bool bwd = order[i].phase == sim::Phase::Backward;
        pos[s][2 * static_cast<std::size_t>(order[i].micro_batch) + bwd] = static_cast<std::uint32_t>(i);
        fwd_done[s][i + 1] = fwd_done[s][i] + !bwd;
        bwd_done[s][i + 1] = bwd_done[s][i] + bwd;
      }
    }
  }
};

// Per position i of stage s: the first op of the stage below (down) and above (up) that
// consumes a message of op i or a later one (none: the largest value).
struct FirstConsumers {
  std::vector<std::uint32_t> down, up;
};

FirstConsumers first_consumers(const sim::Schedule& schedule, const OrderIndex& index, int s) {
  constexpr std::uint32_t none = std::numeric_limits<std::uint32_t>::max();
  const int S = schedule.num_stages();
  const auto& order = schedule.stages[s];
  const std::size_t n = order.size();
  FirstConsumers fc{std::vector<std::uint32_t>(n + 1, none), std::vector<std::uint32_t>(n + 1, none)};
  for (std::size_t i = n; i-- > 0;) {
    fc.down[i] = fc.down[i + 1];
    fc.up[i] = fc.up[i + 1];
    const sim::Op& op = order[i];
    const std::size_t m = static_cast<std::size_t>(op.micro_batch);
    if (op.phase == sim::Phase::Backward && s > 0) fc.down[i] = std::min(fc.down[i], index.pos[s - 1][2 * m + 1]);
    if (op.phase == sim::Phase::Forward && s + 1 < S) fc.up[i] = std::min(fc.up[i], index.pos[s + 1][2 * m]);
  }
  return fc;
}

// The memory coefficients (micro-batches in flight, activations waiting, gradients
// waiting) of stage s, waiting before each op of its order and running it
// (planner/memory.cpp computes the same bound with the values filled in). cap_f and
// cap_b: the capacities of the channels into the stage from below and from above.
std::set<std::tuple<double, double, double>> memory_coefficients(const sim::Schedule& schedule,
                                                                  const OrderIndex& index, int s, int cap_f,
                                                                  int cap_b) {
  const int S = schedule.num_stages();
  const auto& order = schedule.stages[s];
  const FirstConsumers fc = first_consumers(schedule, index, s);
  auto capped = [](std::int64_t v, int cap) {
    v = std::max<std::int64_t>(v, 0);
    return static_cast<double>(cap > 0 ? std::min<std::int64_t>(v, cap) : v);
  };
  std::set<std::tuple<double, double, double>> raw;
  int inflight = 0;
  for (std::size_t i = 0; i < order.size(); ++i) {
    std::int64_t wf = 0, wb = 0;
    if (s > 0) {
      const auto lim = std::min<std::uint32_t>(fc.down[i], static_cast<std::uint32_t>(schedule.stages[s - 1].size()));
      wf = static_cast<std::int64_t>(index.fwd_done[s - 1][lim]) - index.fwd_done[s][i];
    }
    if (s + 1 < S) {
      const auto lim = std::min<std::uint32_t>(fc.up[i], static_cast<std::uint32_t>(schedule.stages[s + 1].size()));
      wb = static_cast<std::int64_t>(index.bwd_done[s + 1][lim]) - index.bwd_done[s][i];
    }
    const bool fwd = order[i].phase == sim::Phase::Forward;
    raw.emplace(inflight, capped(wf, cap_f), capped(wb, cap_b));
    raw.emplace(inflight + (fwd ? 1 : 0), capped(wf - (fwd && s > 0 ? 1 : 0), cap_f),
                capped(wb - (!fwd && s + 1 < S ? 1 : 0), cap_b));
    inflight += fwd ? 1 : -1;
  }
  return raw;
}

}  // namespace

PartitionProblem::PartitionProblem(const Model& model, const sim::Network& network, const PartitionOptions& o)
    : L_(model.num_layers()), S_(o.stages) {
  if (S_ < 1) throw InputError(fmt::format("--stages: must be >= 1, got {}", S_));
  if (S_ > L_)
    throw InputError(fmt::format("--stages: {} stages need at least {} layers; {} has {}", S_, S_, model.source_file, L_));
  if (o.global_batch_size < 1) throw InputError(fmt::format("--global-batch-size: must be >= 1, got {}", o.global_batch_size));
  const int b = o.micro_batch_size;
  if (b < 1 || o.global_batch_size % b != 0)
    throw InputError(fmt::format("--micro-batch-size: must be >= 1 and divide the global batch {}, got {}",
                                 o.global_batch_size, b));
  if (!(o.memory_limit_bytes > 0))
    throw InputError(fmt::format("--memory-limit: must be > 0 bytes, got {}", o.memory_limit_bytes));
  if (network.num_stages() != S_)
    throw std::invalid_argument(fmt::format("network for {} stages, partition into {}", network.num_stages(), S_));
  M_ = o.global_batch_size / b;
  limit_ = o.memory_limit_bytes;
  schedule_ = sim::make_schedule(o.schedule, S_, M_);
  sum_layers(model, b);
  derive_memory_terms(network);
  derive_channel_costs(network, o.eval_start_s);
}

// Prefix sums at b over the layers, and what crosses a cut after each layer.
void PartitionProblem::sum_layers(const Model& model, int b) {
  const double ratio = 1.0 + model.optimizer_bytes_per_parameter_byte;
  reserved_ = model.device.reserved_bytes;
  time_.assign(L_ + 1, 0.0);
  act_.assign(L_ + 1, 0.0);
  static_.assign(L_ + 1, 0.0);
  out_.resize(L_);
  gout_.resize(L_);
  for (int l = 0; l < L_; ++l) {
    const LayerAt v = layer_at(model, l, b);
    time_[l + 1] = time_[l] + (v.fwd + v.bwd);
    act_[l + 1] = act_[l] + v.act;
    static_[l + 1] = static_[l] + model.layers[l].parameter_bytes * ratio;
    out_[l] = v.out;
    gout_[l] = v.gout;
  }
}

// Memory coefficients per stage: the non-dominated triples of memory_coefficients.
void PartitionProblem::derive_memory_terms(const sim::Network& network) {
  const OrderIndex index(schedule_);
  terms_.resize(S_);
  max_a_.assign(S_, 0.0);
  for (int s = 0; s < S_; ++s) {
    const int cap_f = s > 0 ? network.channel(s - 1, s).capacity : 0;
    const int cap_b = s + 1 < S_ ? network.channel(s + 1, s).capacity : 0;
    const auto raw = memory_coefficients(schedule_, index, s, cap_f, cap_b);
    // Keep the non-dominated coefficient triples (all bytes are >= 0). In decreasing
    // order a triple can only be dominated by an earlier one, and then by a kept one.
    for (auto it = raw.rbegin(); it != raw.rend(); ++it) {
      const auto& [a, f, g] = *it;
      const bool dominated = std::any_of(terms_[s].begin(), terms_[s].end(),
                                         [&](const Term& y) { return y.a >= a && y.f >= f && y.g >= g; });
      if (!dominated) terms_[s].push_back({a, f, g});
    }
    for (const Term& t : terms_[s]) max_a_[s] = std::max(max_a_[s], t.a);
  }
}

// Latency and mean rate of every channel from t0 on, as the latency model uses them.
void PartitionProblem::derive_channel_costs(const sim::Network& network, double t0) {
  lat_f_.resize(S_ > 0 ? S_ - 1 : 0);
  lat_b_.resize(lat_f_.size());
  rate_f_.resize(lat_f_.size());
  rate_b_.resize(lat_f_.size());
  for (int s = 0; s + 1 < S_; ++s) {
    lat_f_[s] = network.channel(s, s + 1).latency_s;
    lat_b_[s] = network.channel(s + 1, s).latency_s;
    rate_f_[s] = mean_rate(network.channel(s, s + 1), t0);
    rate_b_[s] = mean_rate(network.channel(s + 1, s), t0);
    for (const auto& [rate, from, to] : {std::tuple{rate_f_[s], s, s + 1}, std::tuple{rate_b_[s], s + 1, s}})
      if (!(rate > 0))
        throw InputError(fmt::format("{}: channel {} -> {}: its rate averages 0 from t = {} s; no message can cross it",
                                     network.source, from, to, t0));
  }
}


double PartitionProblem::transfer_fwd(int boundary, int cut) const {
  return transfer_time(lat_f_[boundary], out_[cut - 1], rate_f_[boundary]);
}

double PartitionProblem::transfer_bwd(int boundary, int cut) const {
  return transfer_time(lat_b_[boundary], gout_[cut - 1], rate_b_[boundary]);
}

double PartitionProblem::stage_memory(int s, int i, int j) const {
  const double act = act_[j] - act_[i];
  const double in_f = s > 0 ? out_[i - 1] : 0.0;
  const double in_b = s + 1 < S_ ? gout_[j - 1] : 0.0;
  double peak = 0;
  for (const Term& t : terms_[s]) peak = std::max(peak, act * t.a + in_f * t.f + in_b * t.g);
  return reserved_ + (static_[j] - static_[i]) + peak;
}

CutScore PartitionProblem::evaluate(const std::vector<int>& bounds) const {
  if (static_cast<int>(bounds.size()) != S_ + 1 || bounds.front() != 0 || bounds.back() != L_)
    throw std::invalid_argument("bounds must have S + 1 entries from 0 to L");
  for (int s = 0; s < S_; ++s)
    if (bounds[s] >= bounds[s + 1]) throw std::invalid_argument("bounds must be strictly increasing");
  CutScore c;
  c.bounds = bounds;
  c.fits = true;
  double bottleneck = 0, transfers = 0;
  for (int s = 0; s < S_; ++s) {
    const int i = bounds[s], j = bounds[s + 1];
    const double mem = stage_memory(s, i, j);
    c.memory_bytes.push_back(mem);
    c.fits = c.fits && mem <= limit_;
    bottleneck = std::max(bottleneck, time_[j] - time_[i]);
    if (s > 0) {
      const double tf = transfer_fwd(s - 1, i), tb = transfer_bwd(s - 1, i);
      bottleneck = std::max({bottleneck, tf, tb});
      transfers += tf + tb;
    }
  }
  c.bottleneck_s = bottleneck;
  c.transfer_s = transfers;
  c.predicted_s = time_[L_] + transfers + (M_ - 1) * bottleneck;
  return c;
}

}  // namespace adagrouper::planner
