// Model -> plan (`plan --model`): partition at every size and stage count, plan each cut, keep the best.
//
// docs/model.md section 12.
#include <map>
#include <optional>
#include <string>
#include <utility>
#include <vector>

#include <fmt/format.h>
#include <fmt/ranges.h>

#include "partition.h"

namespace adagrouper::planner {

namespace {

// The trials of plan_model and the best plan so far.
class ModelPlanner {
 public:
  ModelPlanner(const Model& model, const std::function<sim::Network(int)>& network_for, const ModelPlanOptions& o)
      : model_(model), network_for_(network_for), o_(o), several_(o.stage_counts.size() > 1) {
    if (o.stage_counts.empty()) throw InputError("--stages: no stage count to try");
    const int B = o.plan.global_batch_size;
    if (B < 1) throw InputError(fmt::format("--global-batch-size: must be >= 1, got {}", B));
    for (int b : model.micro_batch_sizes())
      if (B % b == 0) sizes_.push_back(b);
    if (sizes_.empty())
      throw InputError(fmt::format("{}: layers[].profile: no listed micro-batch size divides the global batch {}",
                                   model.source_file, B));
  }

  ModelPlan run() {
    for (int S : o_.stage_counts) try_stage_count(S);
    if (!best_)
      throw InputError(fmt::format("{}: nothing can be planned with {} stages: {}", model_.source_file,
                                   several_ ? "any of the tried numbers of" : std::to_string(o_.stage_counts.front()),
                                   last_error_));
    best_->trials = std::move(trials_);
    best_->chosen_trial = *best_trial_;
    return std::move(*best_);
  }

 private:
  void try_stage_count(int S) {
    for (const int v : o_.virtual_stages) {
      if (S * v > model_.num_layers()) {
        trials_.push_back({S, v, 0, {}, false, 0, 0, 0,
                           fmt::format("more {}stages than the {} layers", v == 1 ? "" : "model ", model_.num_layers())});
        continue;
      }
      sim::Network net, cut_net;
      try {
        net = network_for_(S);
        cut_net = v == 1 ? net : network_for_(S * v);
      } catch (const InputError& e) {
        if (!several_) throw;
        trials_.push_back({S, v, 0, {}, false, 0, 0, 0, fmt::format("network: {}", e.what())});
        last_error_ = e.what();
        continue;
      }
      std::map<std::vector<int>, int> planned;  // bounds -> size it was first cut at
      for (int b : sizes_) try_cut(S, v, b, {net, cut_net}, planned);
    }
  }

  // The networks of a trial: for planning on S devices, and for cutting S x v model stages.
  struct Networks {
    const sim::Network& plan;
    const sim::Network& cut;
  };

  // Partitions into S x v model stages at micro-batch size b (memory checked with 1F1B)
  // and plans the cut on S devices unless an earlier size made the same one.
  void try_cut(int S, int v, int b, const Networks& nets, std::map<std::vector<int>, int>& planned) {
    ModelPlanTrial t;
    t.stages = S;
    t.virtual_stages = v;
    t.micro_batch_size = b;
    PartitionResult pr;
    try {
      pr = partition(model_, nets.cut, partition_options(S * v, b));
    } catch (const InputError& e) {
      fail(std::move(t), "no cut fits with 1f1b at this micro-batch size", e);
      return;
    }
    t.bounds = pr.chosen.bounds;
    if (auto it = planned.find(t.bounds); it != planned.end()) {
      t.note = fmt::format("same cut as at b = {}", it->second);
      trials_.push_back(std::move(t));
      return;
    }
    planned.emplace(t.bounds, b);
    PlanResult plan;
    try {
      PlanOptions po = o_.plan;
      po.devices = S;
      po.virtual_stages = {v};
      plan = make_plan(pr.pipeline, nets.plan, po);
    } catch (const InputError& e) {
      fail(std::move(t), "the planner finds no schedule that fits", e);
      return;
    }
    const Candidate& win = plan.candidates[plan.chosen];
    t.planned = true;
    t.predicted_iteration_time_s = win.predicted_iteration_time_s;
    t.ranked_time_s = win.ranked_time_s(o_.plan.rank_by);
    t.throughput_per_device = o_.plan.global_batch_size / (t.ranked_time_s * S);
    t.note = fmt::format("{}, b = {}", win.spec.prose(), win.micro_batch_size);
    trials_.push_back(t);
    if (better(t)) {
      best_ = ModelPlan{std::move(plan), std::move(pr), nets.plan, {}, 0};
      best_trial_ = trials_.size() - 1;
    }
  }

  PartitionOptions partition_options(int S, int b) const {
    PartitionOptions po;
    po.stages = S;
    po.micro_batch_size = b;
    po.global_batch_size = o_.plan.global_batch_size;
    po.schedule = sim::ScheduleSpec::named("1f1b");
    po.memory_limit_bytes = o_.plan.memory_limit_bytes;
    po.refine = o_.refine;
    po.eval_iterations = o_.plan.eval_iterations;
    po.eval_start_s = o_.plan.eval_start_s;
    return po;
  }

  void fail(ModelPlanTrial t, const char* note, const InputError& e) {
    t.note = note;
    last_error_ = e.what();
    trials_.push_back(std::move(t));
  }

  // Within one S the faster plan; across stage counts the higher throughput per device.
  bool better(const ModelPlanTrial& t) const {
    if (!best_) return true;
    const ModelPlanTrial& cur = trials_[*best_trial_];
    if (cur.stages == t.stages) return t.ranked_time_s < cur.ranked_time_s;
    return t.throughput_per_device > cur.throughput_per_device;
  }

  const Model& model_;
  const std::function<sim::Network(int)>& network_for_;
  const ModelPlanOptions& o_;
  const bool several_;
  std::vector<int> sizes_;  // the model's micro-batch sizes that divide B
  std::optional<ModelPlan> best_;
  std::vector<ModelPlanTrial> trials_;
  std::optional<std::size_t> best_trial_;
  std::string last_error_;
};

}  // namespace

ModelPlan plan_model(const Model& model, const std::function<sim::Network(int)>& network_for,
                     const ModelPlanOptions& options) {
  return ModelPlanner(model, network_for, options).run();
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
    tj["virtual_stages"] = t.virtual_stages;
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
  // The v column only when some cut has several model stages per stage.
  bool several = false;
  for (const ModelPlanTrial& t : mp.trials) several |= t.virtual_stages != 1;
  std::string out = "partitions tried (cut with 1f1b at micro-batch size b, then planned):\n";
  out += fmt::format("  {:>6}{} {:>5}  {:<28} {:>13} {:>16}  {}\n", "stages", several ? "   v" : "", "b",
                     several ? "layers per model stage" : "layers per stage", "iteration s", "samples/s/device", "plan");
  for (std::size_t i = 0; i < mp.trials.size(); ++i) {
    const ModelPlanTrial& t = mp.trials[i];
    std::vector<int> per;
    for (std::size_t s = 0; s + 1 < t.bounds.size(); ++s) per.push_back(t.bounds[s + 1] - t.bounds[s]);
    std::string layers = per.empty() ? "-" : fmt::format("{}", fmt::join(per, ","));
    if (layers.size() > 28) layers = layers.substr(0, 25) + "...";
    out += fmt::format("{} {:>6}{} {:>5}  {:<28} {:>13} {:>16}  {}\n", i == mp.chosen_trial ? "*" : " ", t.stages,
                       several ? fmt::format(" {:>3}", t.virtual_stages) : "",
                       t.micro_batch_size > 0 ? std::to_string(t.micro_batch_size) : "-", layers,
                       t.planned ? fmt::format("{:.6g}", t.predicted_iteration_time_s) : "-",
                       t.planned ? fmt::format("{:.4g}", t.throughput_per_device) : "-", t.note);
  }
  return out + partition_text(mp.partition);
}

}  // namespace adagrouper::planner
