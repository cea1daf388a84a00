// Stage partitioning: the DP over contiguous layer ranges, refinement with the
// simulator, the pipeline file of a cut, and model -> plan (see partition.h and
// docs/model.md, "Stage partitioning").
#include "partition.h"

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <limits>
#include <map>
#include <set>
#include <stdexcept>

#include <fmt/format.h>
#include <fmt/ranges.h>

namespace adagrouper::planner {

namespace {

constexpr double kInf = std::numeric_limits<double>::infinity();
constexpr double kGiB = 1024.0 * 1024.0 * 1024.0;

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

sim::Schedule schedule_for(const PartitionOptions& o, int S, int M) { return sim::make_named(o.schedule, S, M, o.k); }

}  // namespace

// --- the problem ---------------------------------------------------------------------

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
  schedule_ = schedule_for(o, S_, M_);

  // Prefix sums at b.
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

  // Memory coefficients per stage: for each op of the order, waiting before it and
  // running it (planner/memory.cpp computes the same bound with the values filled in).
  const int S = S_;
  std::vector<std::vector<std::uint32_t>> pos(S), fwd_done(S), bwd_done(S);
  for (int s = 0; s < S; ++s) {
    const auto& order = schedule_.stages[s];
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
  terms_.resize(S);
  max_a_.assign(S, 0.0);
  const std::uint32_t none = std::numeric_limits<std::uint32_t>::max();
  for (int s = 0; s < S; ++s) {
    const auto& order = schedule_.stages[s];
    const std::size_t n = order.size();
    std::vector<std::uint32_t> first_down(n + 1, none), first_up(n + 1, none);
    for (std::size_t i = n; i-- > 0;) {
      first_down[i] = first_down[i + 1];
      first_up[i] = first_up[i + 1];
      const sim::Op& op = order[i];
      const std::size_t m = static_cast<std::size_t>(op.micro_batch);
      if (op.phase == sim::Phase::Backward && s > 0) first_down[i] = std::min(first_down[i], pos[s - 1][2 * m + 1]);
      if (op.phase == sim::Phase::Forward && s + 1 < S) first_up[i] = std::min(first_up[i], pos[s + 1][2 * m]);
    }
    const int cap_f = s > 0 ? network.channel(s - 1, s).capacity : 0;
    const int cap_b = s + 1 < S ? network.channel(s + 1, s).capacity : 0;
    auto capped = [](std::int64_t v, int cap) {
      v = std::max<std::int64_t>(v, 0);
      return static_cast<double>(cap > 0 ? std::min<std::int64_t>(v, cap) : v);
    };
    std::set<std::tuple<double, double, double>> raw;
    int inflight = 0;
    for (std::size_t i = 0; i < n; ++i) {
      const sim::Op& op = order[i];
      std::int64_t wf = 0, wb = 0;
      if (s > 0) {
        const auto lim = std::min<std::uint32_t>(first_down[i], static_cast<std::uint32_t>(schedule_.stages[s - 1].size()));
        wf = static_cast<std::int64_t>(fwd_done[s - 1][lim]) - fwd_done[s][i];
      }
      if (s + 1 < S) {
        const auto lim = std::min<std::uint32_t>(first_up[i], static_cast<std::uint32_t>(schedule_.stages[s + 1].size()));
        wb = static_cast<std::int64_t>(bwd_done[s + 1][lim]) - bwd_done[s][i];
      }
      const bool fwd = op.phase == sim::Phase::Forward;
      raw.emplace(inflight, capped(wf, cap_f), capped(wb, cap_b));
      raw.emplace(inflight + (fwd ? 1 : 0), capped(wf - (fwd && s > 0 ? 1 : 0), cap_f),
                  capped(wb - (!fwd && s + 1 < S ? 1 : 0), cap_b));
      inflight += fwd ? 1 : -1;
    }
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

  // Channels.
  lat_f_.resize(S_ > 0 ? S_ - 1 : 0);
  lat_b_.resize(lat_f_.size());
  rate_f_.resize(lat_f_.size());
  rate_b_.resize(lat_f_.size());
  for (int s = 0; s + 1 < S_; ++s) {
    lat_f_[s] = network.channel(s, s + 1).latency_s;
    lat_b_[s] = network.channel(s + 1, s).latency_s;
    rate_f_[s] = mean_rate(network.channel(s, s + 1), o.eval_start_s);
    rate_b_[s] = mean_rate(network.channel(s + 1, s), o.eval_start_s);
    for (const auto& [rate, from, to] : {std::tuple{rate_f_[s], s, s + 1}, std::tuple{rate_b_[s], s + 1, s}})
      if (!(rate > 0))
        throw InputError(fmt::format("{}: channel {} -> {}: its rate averages 0 from t = {} s; no message can cross it",
                                     network.source, from, to, o.eval_start_s));
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

std::vector<std::vector<int>> PartitionProblem::solve() const {
  // State (s, j): stages 0..s cover layers [0, j). Its front holds the non-dominated
  // (bottleneck, transfer sum) pairs of the ways to get there, sorted by bottleneck
  // ascending (so transfer sums strictly descending), with back pointers. The latency
  // model is increasing in both, so the optimum of the last state is on its front.
  //
  // Two passes. The first keeps one entry per state, the smallest (bottleneck, transfer
  // sum): a feasible cut whose score bounds the optimum from above (ub). The second
  // keeps whole fronts but drops what cannot reach ub: an entry's score so far,
  // sum(fwd + bwd) + transfers + (M - 1) x bottleneck, only grows; and a stage slower
  // than (ub - sum) / (M - 1) can never be part of the optimum.
  struct Entry {
    double bott, comm;
    std::int32_t prev_i, prev_k;
  };
  const int S = S_, L = L_;
  const double total = time_[L];
  std::vector<std::vector<Entry>> arena(S);
  std::vector<std::vector<std::pair<std::uint32_t, std::uint32_t>>> span(
      S, std::vector<std::pair<std::uint32_t, std::uint32_t>>(L + 1, {0, 0}));
  std::vector<Entry> scratch;
  scratch.reserve(static_cast<std::size_t>(L) * 4);
  auto before = [](const Entry& x, const Entry& y) {
    if (x.bott != y.bott) return x.bott < y.bott;
    if (x.comm != y.comm) return x.comm < y.comm;
    if (x.prev_i != y.prev_i) return x.prev_i > y.prev_i;
    return x.prev_k < y.prev_k;
  };
  auto too_big = [&](int s, int i, int j) {  // a lower bound of the memory already exceeds the limit
    return reserved_ + (static_[j] - static_[i]) + (act_[j] - act_[i]) * max_a_[s] > limit_;
  };

  auto run = [&](bool single, double ub) {
    const double slack = ub + 1e-9 * std::fabs(ub);  // rounding must not drop the optimum
    auto hopeless = [&](double bott, double comm) { return total + comm + (M_ - 1) * bott > slack; };
    for (auto& a : arena) a.clear();
    for (auto& sp : span) std::fill(sp.begin(), sp.end(), std::pair<std::uint32_t, std::uint32_t>{0, 0});
    for (int j = 1; j <= L - (S - 1); ++j) {
      if (S == 1 && j != L) continue;
      if (too_big(0, 0, j) || hopeless(time_[j], 0.0)) break;
      if (stage_memory(0, 0, j) > limit_) continue;
      span[0][j] = {static_cast<std::uint32_t>(arena[0].size()), static_cast<std::uint32_t>(arena[0].size() + 1)};
      arena[0].push_back({time_[j], 0.0, -1, -1});
    }
    for (int s = 1; s < S; ++s) {
      const int j_lo = s + 1, j_hi = L - (S - 1 - s);
      for (int j = s + 1 == S ? L : j_lo; j <= j_hi; ++j) {
        scratch.clear();
        for (int i = j - 1; i >= s; --i) {
          if (too_big(s, i, j) || hopeless(time_[j] - time_[i], 0.0)) break;
          const auto [b0, e0] = span[s - 1][i];
          if (b0 == e0) continue;
          if (stage_memory(s, i, j) > limit_) continue;
          const double tf = transfer_fwd(s - 1, i), tb = transfer_bwd(s - 1, i);
          const double bm = std::max({time_[j] - time_[i], tf, tb}), cs = tf + tb;
          // Entries whose bottleneck is below bm collapse onto bm: only the last of them
          // (the smallest transfer sum) survives.
          const auto& prev = arena[s - 1];
          std::uint32_t k = b0;
          while (k + 1 < e0 && prev[k + 1].bott <= bm) ++k;
          for (; k < e0; ++k) {
            const Entry e{std::max(prev[k].bott, bm), prev[k].comm + cs, i, static_cast<std::int32_t>(k)};
            if (hopeless(e.bott, e.comm)) continue;
            if (single) {
              if (scratch.empty()) {
                scratch.push_back(e);
              } else if (before(e, scratch[0])) {
                scratch[0] = e;
              }
              break;  // the first entry not collapsed has the smallest bottleneck
            }
            scratch.push_back(e);
          }
        }
        if (scratch.empty()) continue;
        const auto begin = static_cast<std::uint32_t>(arena[s].size());
        if (single) {
          arena[s].push_back(scratch[0]);
        } else {
          std::sort(scratch.begin(), scratch.end(), before);
          double best = kInf;
          for (const Entry& e : scratch)
            if (e.comm < best) {
              arena[s].push_back(e);
              best = e.comm;
            }
        }
        span[s][j] = {begin, static_cast<std::uint32_t>(arena[s].size())};
      }
    }
  };

  // The equal split (as many layers per stage as possible), when it fits, bounds the
  // first pass too.
  double ub = kInf;
  std::vector<int> equal(S + 1);
  for (int s = 0; s <= S; ++s) equal[s] = static_cast<int>(static_cast<std::int64_t>(s) * L / S);
  if (const CutScore c = evaluate(equal); c.fits) ub = c.predicted_s;
  auto found = [&] { return span[S - 1][L].first != span[S - 1][L].second; };
  run(true, ub);
  if (!found() && ub < kInf) run(true, kInf);  // the single entries kept may all have run past ub
  if (!found()) return {};                     // nothing fits
  const Entry& first = arena[S - 1][span[S - 1][L].first];
  run(false, std::min(ub, total + first.comm + (M_ - 1) * first.bott));

  const auto [fb, fe] = span[S - 1][L];
  if (fb == fe) return {};
  // Best first: the latency model, ties to the smaller bottleneck (earlier on the front).
  std::vector<std::uint32_t> order;
  for (std::uint32_t k = fb; k < fe; ++k) order.push_back(k);
  const auto& last = arena[S - 1];
  auto score = [&](std::uint32_t k) { return time_[L] + last[k].comm + (M_ - 1) * last[k].bott; };
  std::stable_sort(order.begin(), order.end(), [&](std::uint32_t x, std::uint32_t y) { return score(x) < score(y); });
  std::vector<std::vector<int>> cuts;
  for (std::uint32_t k : order) {
    std::vector<int> bounds(S + 1);
    bounds[S] = L;
    std::int32_t idx = static_cast<std::int32_t>(k);
    for (int s = S - 1; s >= 0; --s) {
      const Entry& e = arena[s][static_cast<std::size_t>(idx)];
      bounds[s] = s == 0 ? 0 : e.prev_i;
      idx = e.prev_k;
    }
    cuts.push_back(std::move(bounds));
  }
  return cuts;
}

// --- the pipeline of a cut ---------------------------------------------------------------

sim::Pipeline pipeline_of(const Model& model, const std::vector<int>& bounds, int global_batch_size,
                          double memory_limit_bytes) {
  sim::Pipeline p;
  const int S = static_cast<int>(bounds.size()) - 1;
  p.name = fmt::format("{}-{}stage", model.name, S);
  p.source = fmt::format("{} cut into {} stages", model.source_file, S);
  p.global_batch_size = global_batch_size;
  p.memory_limit_bytes = memory_limit_bytes;
  const std::vector<int> sizes = model.micro_batch_sizes();
  const double ratio = 1.0 + model.optimizer_bytes_per_parameter_byte;
  for (int s = 0; s < S; ++s) {
    const int lo = bounds[s], hi = bounds[s + 1];
    sim::StageSpec st;
    st.static_bytes = model.device.reserved_bytes;
    for (int l = lo; l < hi; ++l) {
      st.static_bytes += model.layers[l].parameter_bytes * ratio;
      st.optimizer_s += model.layers[l].optimizer_s;
    }
    for (int b : sizes) {
      sim::ProfilePoint pt;
      pt.micro_batch_size = b;
      for (int l = lo; l < hi; ++l) {
        const LayerAt v = layer_at(model, l, b);
        pt.forward_s += v.fwd;
        pt.backward_s += v.bwd;
        pt.activation_bytes += v.act;
      }
      if (s + 1 < S) pt.output_bytes = layer_at(model, hi - 1, b).out;
      if (s > 0) pt.grad_output_bytes = layer_at(model, lo - 1, b).gout;
      st.profile.push_back(pt);
    }
    p.stages.push_back(std::move(st));
  }
  return p;
}

// --- partition ---------------------------------------------------------------------------

PartitionResult partition(const Model& model, const sim::Network& network, const PartitionOptions& o) {
  if (o.refine < 0) throw InputError(fmt::format("--refine: must be >= 0, got {}", o.refine));
  if (o.eval_iterations < 1) throw InputError(fmt::format("--eval-iterations: must be >= 1, got {}", o.eval_iterations));
  const PartitionProblem problem(model, network, o);
  const int S = problem.num_stages(), L = problem.num_layers();
  const std::vector<std::vector<int>> front = problem.solve();
  if (front.empty()) {
    // Nothing fits: name the smallest need of the tightest stage (every stage holds at
    // least one layer: stage 0 starts with layer 0, the last stage ends with layer L-1,
    // a middle stage can do no better than one of the layers it could hold).
    double worst = 0;
    int worst_stage = 0, worst_layer = 0;
    for (int s = 0; s < S; ++s) {
      double best = kInf;
      int best_layer = s;
      const int lo = s == 0 ? 0 : (s == S - 1 ? L - 1 : s), hi = s == 0 ? 0 : L - S + s;
      for (int l = lo; l <= hi; ++l) {
        const double m = problem.stage_memory(s, l, l + 1);
        if (m < best) best = m, best_layer = l;
      }
      if (best > worst) worst = best, worst_stage = s, worst_layer = best_layer;
    }
    std::string why =
        worst > o.memory_limit_bytes
            ? fmt::format("stage {} needs at least {:.2f} GiB even holding only layer {} ('{}')", worst_stage,
                          worst / kGiB, worst_layer, model.layers[worst_layer].name)
            : std::string("every stage could hold some layer, but no contiguous cut fits all of them at once");
    throw InputError(fmt::format(
        "{}: no cut into {} stages fits the memory limit of {:.2f} GiB per stage with {} at micro-batch size {} "
        "(M = {}): {}; use more stages, a smaller micro-batch size or another schedule",
        model.source_file, S, o.memory_limit_bytes / kGiB, o.schedule, o.micro_batch_size, problem.micro_batches(),
        why));
  }

  // Candidates: the DP optimum, the other Pareto-optimal cuts, and the optimum with one
  // cut moved by up to two layers.
  std::vector<CutScore> cands;
  std::set<std::vector<int>> seen;
  auto add = [&](const std::vector<int>& b, std::string origin) {
    if (!seen.insert(b).second) return;
    CutScore c = problem.evaluate(b);
    if (!c.fits) return;
    c.origin = std::move(origin);
    cands.push_back(std::move(c));
  };
  add(front[0], "dp optimum");
  for (std::size_t i = 1; i < front.size(); ++i) add(front[i], "pareto (bottleneck vs transfers)");
  for (int t = 1; t < S; ++t)
    for (int delta : {-2, -1, 1, 2}) {
      std::vector<int> b = front[0];
      b[t] += delta;
      if (b[t] <= b[t - 1] || b[t] >= b[t + 1]) continue;
      add(b, fmt::format("cut {} moved by {:+d}", t, delta));
    }
  std::stable_sort(cands.begin(), cands.end(), [](const CutScore& x, const CutScore& y) {
    if (x.predicted_s != y.predicted_s) return x.predicted_s < y.predicted_s;
    return x.bounds < y.bounds;
  });

  PartitionResult r;
  r.options = o;
  r.model_name = model.name;
  for (const Layer& l : model.layers) r.layer_names.push_back(l.name);
  // Refine: simulate the best few by the latency model, keep the fastest simulated.
  const std::size_t n_sim = std::min<std::size_t>(static_cast<std::size_t>(o.refine), cands.size());
  for (std::size_t i = 0; i < n_sim; ++i) {
    CutScore& c = cands[i];
    const sim::Pipeline p = pipeline_of(model, c.bounds, o.global_batch_size, o.memory_limit_bytes);
    sim::Scenario sc = sim::make_scenario(p, network, problem.schedule(), o.micro_batch_size, o.eval_iterations);
    sc.start_time_s = o.eval_start_s;
    c.simulated_s = sim::simulate(sc).mean_iteration_time_s();
  }
  // Simulated ones first (fastest first; ties keep the better model score), then the
  // rest by the latency model.
  if (n_sim > 0) {
    std::stable_sort(cands.begin(), cands.begin() + static_cast<std::ptrdiff_t>(n_sim),
                     [](const CutScore& x, const CutScore& y) { return *x.simulated_s < *y.simulated_s; });
  }
  for (std::size_t i = 0; i < cands.size(); ++i)
    if (cands[i].origin == "dp optimum") r.dp_index = i;
  r.candidates = std::move(cands);
  r.chosen = r.candidates.front();
  r.pipeline = pipeline_of(model, r.chosen.bounds, o.global_batch_size, o.memory_limit_bytes);
  r.stages = r.pipeline.at(o.micro_batch_size);
  // Report memory with the planner's own model on the pipeline (the DP used the same
  // coefficients; this is what `plan` will check).
  r.chosen.memory_bytes = memory_model(r.stages, problem.schedule(), network);
  return r;
}

// --- output ------------------------------------------------------------------------------

namespace {

nlohmann::ordered_json cut_json(const CutScore& c) {
  nlohmann::ordered_json j;
  j["bounds"] = c.bounds;
  std::vector<int> per;
  for (std::size_t s = 0; s + 1 < c.bounds.size(); ++s) per.push_back(c.bounds[s + 1] - c.bounds[s]);
  j["layers_per_stage"] = per;
  j["origin"] = c.origin;
  j["predicted_iteration_time_s"] = c.predicted_s;
  if (c.simulated_s) {
    j["simulated_iteration_time_s"] = *c.simulated_s;
  } else {
    j["simulated_iteration_time_s"] = nullptr;
  }
  j["bottleneck_s"] = c.bottleneck_s;
  j["transfer_s"] = c.transfer_s;
  j["peak_memory_bytes"] = c.memory_bytes;
  return j;
}

std::string schedule_label(const PartitionOptions& o) {
  return o.schedule == "kfkb" ? fmt::format("kfkb k = {}", o.k.value_or(1)) : o.schedule;
}

}  // namespace

nlohmann::ordered_json pipeline_json(const PartitionResult& r, const Model& model) {
  const auto& o = r.options;
  const auto& b = r.chosen.bounds;
  const int S = static_cast<int>(b.size()) - 1;
  nlohmann::ordered_json j;
  j["name"] = r.pipeline.name;
  std::vector<std::string> parts;
  for (int s = 0; s < S; ++s)
    parts.push_back(fmt::format("stage {}: layers {}-{} ({} .. {})", s, b[s], b[s + 1] - 1, r.layer_names[b[s]],
                                r.layer_names[b[s + 1] - 1]));
  j["description"] = fmt::format(
      "{} ({}) cut into {} stages by `adagrouper partition` at micro-batch size {} for {}: {}. Per stage: sums of "
      "the layers' times and activation bytes, static = reserved {:.3g} bytes + parameter bytes x {}, messages from "
      "the layer at each cut (docs/model.md, 'Stage partitioning').",
      model.name, model.source_file, S, o.micro_batch_size, schedule_label(o), fmt::join(parts, "; "),
      model.device.reserved_bytes, 1.0 + model.optimizer_bytes_per_parameter_byte);
  j["global_batch_size"] = r.pipeline.global_batch_size;
  j["memory_limit_bytes"] = *r.pipeline.memory_limit_bytes;
  nlohmann::ordered_json part;
  part["model"] = model.source_file;
  part["micro_batch_size"] = o.micro_batch_size;
  part["schedule"] = o.schedule;
  if (o.k) part["k"] = *o.k;
  part["bounds"] = b;
  part["predicted_iteration_time_s"] = r.chosen.predicted_s;
  if (r.chosen.simulated_s) part["simulated_iteration_time_s"] = *r.chosen.simulated_s;
  j["partition"] = std::move(part);
  auto& st = j["stages"] = nlohmann::ordered_json::array();
  for (int s = 0; s < S; ++s) {
    const sim::StageSpec& spec = r.pipeline.stages[s];
    nlohmann::ordered_json sj;
    sj["layers"] = {b[s], b[s + 1] - 1};
    sj["layer_names"] = {r.layer_names[b[s]], r.layer_names[b[s + 1] - 1]};
    sj["static_bytes"] = spec.static_bytes;
    sj["optimizer_s"] = spec.optimizer_s;
    auto& prof = sj["profile"] = nlohmann::ordered_json::array();
    for (const sim::ProfilePoint& p : spec.profile) {
      nlohmann::ordered_json e;
      e["micro_batch_size"] = p.micro_batch_size;
      e["forward_s"] = p.forward_s;
      e["backward_s"] = p.backward_s;
      e["activation_bytes"] = p.activation_bytes;
      if (s + 1 < S) e["output_bytes"] = p.output_bytes;
      if (p.grad_output_bytes) e["grad_output_bytes"] = *p.grad_output_bytes;
      prof.push_back(std::move(e));
    }
    st.push_back(std::move(sj));
  }
  return j;
}

nlohmann::ordered_json partition_json(const PartitionResult& r) {
  const auto& o = r.options;
  nlohmann::ordered_json j;
  j["schema"] = "adagrouper.partition/1";
  j["model"] = r.model_name;
  j["layers"] = r.layer_names.size();
  j["stages"] = r.chosen.bounds.size() - 1;
  j["micro_batch_size"] = o.micro_batch_size;
  j["micro_batches"] = o.global_batch_size / o.micro_batch_size;
  j["global_batch_size"] = o.global_batch_size;
  j["schedule"] = o.schedule;
  j["k"] = o.k ? nlohmann::ordered_json(*o.k) : nlohmann::ordered_json(nullptr);
  j["memory_limit_bytes"] = o.memory_limit_bytes;
  j["evaluation"] = {{"iterations", o.eval_iterations}, {"start_time_s", o.eval_start_s}, {"refine", o.refine}};
  nlohmann::ordered_json chosen = cut_json(r.chosen);
  auto& st = chosen["stages"] = nlohmann::ordered_json::array();
  const auto& b = r.chosen.bounds;
  for (std::size_t s = 0; s < r.stages.size(); ++s) {
    const sim::StageParams& p = r.stages[s];
    nlohmann::ordered_json sj;
    sj["stage"] = s;
    sj["first_layer"] = b[s];
    sj["last_layer"] = b[s + 1] - 1;
    sj["first_name"] = r.layer_names[b[s]];
    sj["last_name"] = r.layer_names[b[s + 1] - 1];
    sj["forward_s"] = p.fwd;
    sj["backward_s"] = p.bwd;
    sj["activation_bytes"] = p.act;
    sj["static_bytes"] = p.static_bytes;
    sj["optimizer_s"] = p.opt;
    sj["peak_memory_bytes"] = r.chosen.memory_bytes[s];
    sj["output_bytes"] = p.out;
    sj["grad_output_bytes"] = p.gout;
    st.push_back(std::move(sj));
  }
  j["chosen"] = std::move(chosen);
  j["dp_optimum_bounds"] = r.candidates[r.dp_index].bounds;
  auto& cs = j["candidates"] = nlohmann::ordered_json::array();
  for (const auto& c : r.candidates) cs.push_back(cut_json(c));
  return j;
}

std::string partition_text(const PartitionResult& r) {
  const auto& o = r.options;
  const auto& b = r.chosen.bounds;
  const int S = static_cast<int>(b.size()) - 1;
  const int M = o.global_batch_size / o.micro_batch_size;
  std::string out = fmt::format(
      "{}: {} layers into {} stage{} at b = {} (M = {}, B = {}), {}, memory limit {:.2f} GiB per stage\n", r.model_name,
      r.layer_names.size(), S, S == 1 ? "" : "s", o.micro_batch_size, M, o.global_batch_size, schedule_label(o), o.memory_limit_bytes / kGiB);
  std::size_t name_w = 12;
  for (int s = 0; s < S; ++s)
    name_w = std::max(name_w, r.layer_names[b[s]].size() + r.layer_names[b[s + 1] - 1].size() + 4);
  out += fmt::format("  {:>5}  {:>7}  {:<{}}  {:>9}  {:>9}  {:>11}  {:>10}  {:>9}\n", "stage", "layers", "first .. last",
                     name_w, "fwd s", "bwd s", "memory", "static", "message");
  int slowest = 0;
  for (int s = 0; s < S; ++s) {
    const sim::StageParams& p = r.stages[s];
    if (p.fwd + p.bwd > r.stages[slowest].fwd + r.stages[slowest].bwd) slowest = s;
    const std::string names = fmt::format("{} .. {}", r.layer_names[b[s]], r.layer_names[b[s + 1] - 1]);
    out += fmt::format("  {:>5}  {:>7}  {:<{}}  {:>9.4g}  {:>9.4g}  {:>7.2f} GiB  {:>6.2f} GiB  {:>6.2f} MB\n", s,
                       fmt::format("{}-{}", b[s], b[s + 1] - 1), names, name_w, p.fwd, p.bwd,
                       r.chosen.memory_bytes[s] / kGiB, p.static_bytes / kGiB, (s + 1 < S ? p.out : 0.0) / 1e6);
  }
  out += fmt::format(
      "latency model: {:.6g} s per iteration (slowest stage {}: {:.4g} s per micro-batch; bottleneck {:.4g} s; "
      "transfers {:.4g} s)\n",
      r.chosen.predicted_s, slowest, r.stages[slowest].fwd + r.stages[slowest].bwd, r.chosen.bottleneck_s,
      r.chosen.transfer_s);
  const std::size_t simulated =
      std::count_if(r.candidates.begin(), r.candidates.end(), [](const CutScore& c) { return c.simulated_s.has_value(); });
  if (r.chosen.simulated_s) {
    const CutScore& dp = r.candidates[r.dp_index];
    std::string vs = r.dp_index == 0 ? std::string("the DP optimum")
                                     : fmt::format("{}; the DP optimum {} simulates {:.6g} s", r.chosen.origin,
                                                   fmt::join(dp.bounds, ","),
                                                   dp.simulated_s ? *dp.simulated_s : dp.predicted_s);
    out += fmt::format("simulated ({}, {} iteration{}): {:.6g} s per iteration; {} cut{} simulated, chosen: {}\n",
                       schedule_label(o), o.eval_iterations, o.eval_iterations == 1 ? "" : "s", *r.chosen.simulated_s,
                       simulated, simulated == 1 ? "" : "s", vs);
  } else {
    out += "not simulated (--refine 0): the DP optimum\n";
  }
  return out;
}

// --- model -> plan -----------------------------------------------------------------------

ModelPlan plan_model(const Model& model, const std::function<sim::Network(int)>& network_for,
                     const ModelPlanOptions& o) {
  if (o.stage_counts.empty()) throw InputError("--stages: no stage count to try");
  const int B = o.plan.global_batch_size;
  if (B < 1) throw InputError(fmt::format("--global-batch-size: must be >= 1, got {}", B));
  const bool several = o.stage_counts.size() > 1;
  std::vector<int> sizes;
  for (int b : model.micro_batch_sizes())
    if (B % b == 0) sizes.push_back(b);
  if (sizes.empty())
    throw InputError(fmt::format("{}: layers[].profile: no listed micro-batch size divides the global batch {}",
                                 model.source_file, B));

  std::optional<ModelPlan> best;
  std::vector<ModelPlanTrial> trials;
  std::optional<std::size_t> best_trial;
  std::string last_error;
  for (int S : o.stage_counts) {
    if (S > model.num_layers()) {
      trials.push_back({S, 0, {}, false, 0, 0, fmt::format("more stages than the {} layers", model.num_layers())});
      continue;
    }
    sim::Network net;
    try {
      net = network_for(S);
    } catch (const InputError& e) {
      if (!several) throw;
      trials.push_back({S, 0, {}, false, 0, 0, fmt::format("network: {}", e.what())});
      last_error = e.what();
      continue;
    }
    std::map<std::vector<int>, int> planned;  // bounds -> size it was first cut at
    for (int b : sizes) {
      ModelPlanTrial t;
      t.stages = S;
      t.micro_batch_size = b;
      PartitionOptions po;
      po.stages = S;
      po.micro_batch_size = b;
      po.global_batch_size = B;
      po.schedule = "1f1b";
      po.memory_limit_bytes = o.plan.memory_limit_bytes;
      po.refine = o.refine;
      po.eval_iterations = o.plan.eval_iterations;
      po.eval_start_s = o.plan.eval_start_s;
      PartitionResult pr;
      try {
        pr = partition(model, net, po);
      } catch (const InputError& e) {
        t.note = "no cut fits with 1f1b at this micro-batch size";
        last_error = e.what();
        trials.push_back(std::move(t));
        continue;
      }
      t.bounds = pr.chosen.bounds;
      if (auto it = planned.find(t.bounds); it != planned.end()) {
        t.note = fmt::format("same cut as at b = {}", it->second);
        trials.push_back(std::move(t));
        continue;
      }
      planned.emplace(t.bounds, b);
      PlanResult plan;
      try {
        plan = make_plan(pr.pipeline, net, o.plan);
      } catch (const InputError& e) {
        t.note = "the planner finds no schedule that fits";
        last_error = e.what();
        trials.push_back(std::move(t));
        continue;
      }
      const Candidate& win = plan.candidates[plan.chosen];
      t.planned = true;
      t.predicted_iteration_time_s = win.predicted_iteration_time_s;
      t.throughput_per_device = B / (win.predicted_iteration_time_s * S);
      t.note = fmt::format("{}{}, b = {}", win.schedule, win.schedule == "kfkb" ? fmt::format(" k = {}", win.k) : "",
                           win.micro_batch_size);
      trials.push_back(t);
      bool better = !best;
      if (best) {
        const ModelPlanTrial& cur = trials[*best_trial];
        if (cur.stages == S) {
          better = t.predicted_iteration_time_s < cur.predicted_iteration_time_s;
        } else {
          better = t.throughput_per_device > cur.throughput_per_device;
        }
      }
      if (better) {
        best = ModelPlan{std::move(plan), std::move(pr), net, {}, 0};
        best_trial = trials.size() - 1;
      }
    }
  }
  if (!best)
    throw InputError(fmt::format("{}: nothing can be planned with {} stages: {}", model.source_file,
                                 several ? "any of the tried numbers of" : std::to_string(o.stage_counts.front()),
                                 last_error));
  best->trials = std::move(trials);
  best->chosen_trial = *best_trial;
  return std::move(*best);
}

std::vector<int> parse_stage_counts(const std::string& spec, int num_layers) {
  if (spec == "auto") {
    std::vector<int> out;
    for (int s = 2; s <= std::min(num_layers, 64); s *= 2) out.push_back(s);
    if (out.empty()) throw InputError(fmt::format("--stages: auto needs a model of at least 2 layers, got {}", num_layers));
    return out;
  }
  int v = 0;
  std::size_t used = 0;
  try {
    v = std::stoi(spec, &used);
  } catch (const std::exception&) {
    used = 0;
  }
  if (used == 0 || used != spec.size() || v < 1)
    throw InputError(fmt::format("--stages: must be a number of stages >= 1 or 'auto', got '{}'", spec));
  if (v > num_layers)
    throw InputError(fmt::format("--stages: {} stages need at least {} layers; the model has {}", v, v, num_layers));
  return {v};
}

nlohmann::ordered_json model_plan_json(const ModelPlan& mp, const std::string& model_path) {
  nlohmann::ordered_json j;
  j["model"] = model_path;
  const ModelPlanTrial& c = mp.trials[mp.chosen_trial];
  j["stages"] = c.stages;
  j["partition_micro_batch_size"] = c.micro_batch_size;
  j["bounds"] = c.bounds;
  auto& layers = j["stage_layers"] = nlohmann::ordered_json::array();
  for (std::size_t s = 0; s + 1 < c.bounds.size(); ++s) layers.push_back({c.bounds[s], c.bounds[s + 1] - 1});
  auto& ts = j["trials"] = nlohmann::ordered_json::array();
  for (std::size_t i = 0; i < mp.trials.size(); ++i) {
    const ModelPlanTrial& t = mp.trials[i];
    nlohmann::ordered_json tj;
    tj["stages"] = t.stages;
    tj["micro_batch_size"] = t.micro_batch_size;
    tj["bounds"] = t.bounds;
    if (t.planned) {
      tj["predicted_iteration_time_s"] = t.predicted_iteration_time_s;
      tj["throughput_per_device"] = t.throughput_per_device;
    } else {
      tj["predicted_iteration_time_s"] = nullptr;
    }
    tj["chosen"] = i == mp.chosen_trial;
    tj["note"] = t.note;
    ts.push_back(std::move(tj));
  }
  return j;
}

std::string model_plan_text(const ModelPlan& mp) {
  std::string out = "partitions tried (cut with 1f1b at micro-batch size b, then planned):\n";
  out += fmt::format("  {:>6} {:>5}  {:<28} {:>13} {:>16}  {}\n", "stages", "b", "layers per stage", "iteration s",
                     "samples/s/device", "plan");
  for (std::size_t i = 0; i < mp.trials.size(); ++i) {
    const ModelPlanTrial& t = mp.trials[i];
    std::vector<int> per;
    for (std::size_t s = 0; s + 1 < t.bounds.size(); ++s) per.push_back(t.bounds[s + 1] - t.bounds[s]);
    std::string layers = per.empty() ? "-" : fmt::format("{}", fmt::join(per, ","));
    if (layers.size() > 28) layers = layers.substr(0, 25) + "...";
    out += fmt::format("{} {:>6} {:>5}  {:<28} {:>13} {:>16}  {}\n", i == mp.chosen_trial ? "*" : " ", t.stages,
                       t.micro_batch_size > 0 ? std::to_string(t.micro_batch_size) : "-", layers,
                       t.planned ? fmt::format("{:.6g}", t.predicted_iteration_time_s) : "-",
                       t.planned ? fmt::format("{:.4g}", t.throughput_per_device) : "-", t.note);
  }
  return out + partition_text(mp.partition);
}

}  // namespace adagrouper::planner
