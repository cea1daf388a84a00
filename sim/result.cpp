#include "result.h"

#include <algorithm>
#include <numeric>

#include <fmt/format.h>

namespace adagrouper::sim {

double SimResult::mean_iteration_time_s() const {
  return iteration_times_s.empty() ? 0.0 : total_time_s / static_cast<double>(iteration_times_s.size());
}

double SimResult::throughput_samples_per_s() const {
  return total_time_s > 0 ? static_cast<double>(global_batch_size) * iterations / total_time_s : 0.0;
}

double SimResult::bubble_fraction() const {
  if (total_time_s <= 0 || stages.empty()) return 0.0;
  double busy = 0;
  for (const auto& s : stages) busy += s.busy_s;
  return 1.0 - busy / (static_cast<double>(stages.size()) * total_time_s);
}

bool SimResult::fits_memory() const {
  if (!memory_limit_bytes) return true;
  return std::all_of(stages.begin(), stages.end(),
                     [&](const StageResult& s) { return s.peak_memory_bytes <= *memory_limit_bytes; });
}

void backward_fields_json(const ScheduleSpec& spec, nlohmann::ordered_json& j) {
  j["split_backward"] = spec.split_backward;
  j["w_fill"] = spec.w_fill == WFill::Dynamic ? "dynamic" : "static";
  if (spec.max_pending_w) {
    j["max_pending_w"] = *spec.max_pending_w;
  } else {
    j["max_pending_w"] = nullptr;
  }
}

nlohmann::ordered_json summary_json(const SimResult& r) {
  nlohmann::ordered_json j;
  j["pipeline"] = r.pipeline;
  j["schedule"] = r.spec.family;
  j["k"] = r.k;
  j["micro_batch_size"] = r.micro_batch_size;
  j["micro_batches"] = r.micro_batches;
  j["global_batch_size"] = r.global_batch_size;
  j["stages"] = r.num_stages;
  j["virtual_stages"] = r.virtual_stages;
  j["model_stages"] = r.model_stages;
  if (r.spec.split_backward || r.spec.w_fill == WFill::Dynamic) backward_fields_json(r.spec, j);  // where an option set it
  j["iterations"] = r.iterations;
  j["start_time_s"] = r.start_time_s;
  j["iteration_times_s"] = r.iteration_times_s;
  j["mean_iteration_time_s"] = r.mean_iteration_time_s();
  j["total_time_s"] = r.total_time_s;
  j["throughput_samples_per_s"] = r.throughput_samples_per_s();
  j["bubble_fraction"] = r.bubble_fraction();
  if (r.memory_limit_bytes) {
    j["memory_limit_bytes"] = *r.memory_limit_bytes;
  } else {
    j["memory_limit_bytes"] = nullptr;
  }
  j["fits_memory"] = r.fits_memory();
  auto& ps = j["per_stage"] = nlohmann::ordered_json::array();
  for (const auto& s : r.stages) {
    nlohmann::ordered_json e;
    e["stage"] = s.stage;
    e["busy_s"] = s.busy_s;
    e["bubble_s"] = s.bubble_s;
    // The same per iteration, as `compare` reports them (0 for a result of no iteration).
    const double n = r.iterations > 0 ? r.iterations : 1;
    e["busy_s_per_iteration"] = s.busy_s / n;
    e["bubble_s_per_iteration"] = s.bubble_s / n;
    e["optimizer_s"] = s.optimizer_s;
    e["peak_inflight"] = s.peak_inflight;
    e["peak_memory_bytes"] = s.peak_memory_bytes;
    ps.push_back(std::move(e));
  }
  auto& cs = j["channels"] = nlohmann::ordered_json::array();
  for (const auto& c : r.channels) {
    nlohmann::ordered_json e;
    e["from"] = c.from;
    e["to"] = c.to;
    e["busy_s"] = c.busy_s;
    e["peak_queue_depth"] = c.peak_queue_depth;
    e["messages"] = c.messages;
    e["bytes"] = c.bytes;
    cs.push_back(std::move(e));
  }
  j["compute_ops"] = r.compute_ops;
  j["transfers"] = r.transfers;
  return j;
}

namespace {
std::string human_bytes(double b) {
  const char* units[] = {"B", "KiB", "MiB", "GiB", "TiB"};
  int u = 0;
  while (b >= 1024 && u < 4) {
    b /= 1024;
    ++u;
  }
  return u == 0 ? fmt::format("{:.4g} B", b) : fmt::format("{:.2f} {}", b, units[u]);
}
}  // namespace

std::string summary_text(const SimResult& r) {
  std::string out;
  const std::string sched = r.spec.label();
  const std::string stages =
      r.placement.empty() ? fmt::format("S={} stages", r.num_stages)
                          : fmt::format("S={} stages x v={} model stages ({} placement)", r.num_stages,
                                        r.virtual_stages, r.placement);
  out += fmt::format("{}: {} | {}, b={}, M={} micro-batches, B={}, {} iteration{}\n", r.pipeline, sched, stages,
                     r.micro_batch_size, r.micro_batches, r.global_batch_size, r.iterations,
                     r.iterations == 1 ? "" : "s");
  out += fmt::format("iteration time   {:.6g} s (mean", r.mean_iteration_time_s());
  if (r.iterations > 1) {
    auto [lo, hi] = std::minmax_element(r.iteration_times_s.begin(), r.iteration_times_s.end());
    out += fmt::format("; min {:.6g}, max {:.6g}", *lo, *hi);
  }
  out += ")\n";
  out += fmt::format("throughput       {:.6g} samples/s\n", r.throughput_samples_per_s());
  out += fmt::format("bubble fraction  {:.1f}%\n", 100.0 * r.bubble_fraction());
  if (r.memory_limit_bytes)
    out += fmt::format("memory limit     {} per stage: {}\n", human_bytes(*r.memory_limit_bytes),
                       r.fits_memory() ? "fits" : "EXCEEDED");
  out += fmt::format("{:>5}  {:>6}  {:>12}  {:>9}  {:>12}\n", "stage", "busy%", "bubble_s", "in-flight",
                     "peak memory");
  for (const auto& s : r.stages) {
    const double pct = r.total_time_s > 0 ? 100.0 * s.busy_s / r.total_time_s : 0.0;
    out += fmt::format("{:>5}  {:>5.1f}%  {:>12.6g}  {:>9}  {:>12}\n", s.stage, pct, s.bubble_s, s.peak_inflight,
                       human_bytes(s.peak_memory_bytes));
  }
  return out;
}

}  // namespace adagrouper::sim
