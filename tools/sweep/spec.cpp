// The sweep spec: parameters, axes (lists and ranges), blocks (defaults, grid, runs),
// expansion into runs with stable ids.
#include <fmt/format.h>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <map>
#include <set>
#include <string>
#include <string_view>
#include <unordered_map>
#include <utility>
#include <vector>

#include "json_util.h"
#include "sweep.h"

namespace adagrouper::sweep {

namespace fs = std::filesystem;
using nlohmann::json;

namespace {

// The parameters, in axis order (the last varies fastest). trace.KEY axes come right
// after "trace".
constexpr std::string_view kParams[] = {"pipeline",   "network",          "trace",    "seed", "start_time_s",
                                        "iterations", "micro_batch_size", "schedule", "k"};
constexpr std::string_view kParamList =
    "pipeline, network, trace, trace.KEY, seed, schedule, k, micro_batch_size, iterations, start_time_s";

bool is_trace_key(std::string_view name) { return name.size() > 6 && name.substr(0, 6) == "trace."; }

// One parameter's values in a block, and where each came from (for errors).
struct Axis {
  std::vector<json> values;
  std::vector<std::string> paths;
};
using Block = std::map<std::string, Axis>;  // parameter -> values

struct ParsedBlock {
  std::string path;  // "grid", "runs[2]", "defaults"
  Block axes;
};

// {"range": [from, to, step]} -> the values from, from + step, ... <= to.
std::vector<json> range_values(const Field& f, bool integral) {
  const Field r = f.at("range");
  if (r.size() < 2 || r.size() > 3) r.fail("must be [from, to] or [from, to, step]");
  std::vector<json> out;
  if (integral) {
    const std::int64_t from = r.at(std::size_t{0}).integer(), to = r.at(1).integer();
    const std::int64_t step = r.size() == 3 ? r.at(2).integer() : 1;
    if (step <= 0) r.at(2).fail(fmt::format("step must be > 0, got {}", step));
    if (to < from) r.fail(fmt::format("to ({}) must be >= from ({})", to, from));
    if (static_cast<std::uint64_t>((to - from) / step) >= kMaxRuns)
      r.fail(fmt::format("more than {} values", kMaxRuns));
    for (std::int64_t v = from; v <= to; v += step) out.emplace_back(v);
    return out;
  }
  const double from = r.at(std::size_t{0}).number(), to = r.at(1).number();
  const double step = r.size() == 3 ? r.at(2).number() : 1.0;
  if (!(step > 0)) r.at(2).fail(fmt::format("step must be > 0, got {}", step));
  if (to < from) r.fail(fmt::format("to ({}) must be >= from ({})", to, from));
  const double n = std::floor((to - from) / step * (1 + 1e-12) + 1e-9);
  if (n >= static_cast<double>(kMaxRuns)) r.fail(fmt::format("more than {} values", kMaxRuns));
  const bool ints = from == std::floor(from) && step == std::floor(step) && std::fabs(to) < 9e15;
  for (std::int64_t i = 0; i <= static_cast<std::int64_t>(n); ++i) {
    const double v = from + static_cast<double>(i) * step;
    if (ints) {
      out.emplace_back(static_cast<std::int64_t>(v));
    } else {
      out.emplace_back(std::stod(fmt::format("{:.12g}", v)));  // 0.30000000000000004 -> 0.3
    }
  }
  return out;
}

bool is_range(const Field& f) { return f.is_object() && f.json().size() == 1 && f.has("range"); }

// Checks one value of parameter `name` and returns it normalized.
json check_value(const std::string& name, const Field& f) {
  if (name == "pipeline") {
    const std::string s = f.string();
    if (s.empty()) f.fail("must name a pipeline file");
    return s;
  }
  if ((name == "network" || name == "trace") && f.json().is_null()) return nullptr;  // none (over a default)
  if (name == "network") {
    if (f.json().is_string()) {
      if (f.json().get<std::string>().empty()) f.fail("must name a network file");
      return f.json();
    }
    if (!f.is_object())
      f.fail(fmt::format("must be a network file name or an inline network object, got {}", describe_json(f.json())));
    return f.json();
  }
  if (name == "trace") {
    if (!f.is_object())
      f.fail(
          fmt::format("must be a rate object ({{\"pattern\": ...}}, {{\"file\": ...}}, {{\"constant\": R}}, "
                      "{{\"points\": ...}}), got {}",
                      describe_json(f.json())));
    return f.json();
  }
  if (is_trace_key(name)) return f.json();
  if (name == "seed") return f.integer_at_least(0);
  if (name == "k" || name == "micro_batch_size" || name == "iterations") return f.integer_at_least(1);
  if (name == "start_time_s") return f.non_negative();
  if (name == "schedule") {
    const std::string s = f.string();
    if (!sim::find_schedule_family(s))
      f.fail(fmt::format("unknown schedule '{}' (expected one of: {})", s, sim::schedule_family_names()));
    return s;
  }
  f.fail(fmt::format("unknown parameter (expected one of: {})", kParamList));
}

bool numeric_param(const std::string& name) {
  return name == "seed" || name == "k" || name == "micro_batch_size" || name == "iterations" ||
         name == "start_time_s" || is_trace_key(name);
}

Axis parse_axis(const std::string& name, const Field& f) {
  Axis axis;
  auto add = [&](const Field& v) {
    axis.values.push_back(check_value(name, v));
    axis.paths.push_back(v.path());
  };
  if (f.is_array()) {
    if (f.size() == 0) f.fail("must list at least one value");
    for (std::size_t i = 0; i < f.size(); ++i) add(f.at(i));
  } else if (numeric_param(name) && is_range(f)) {
    const bool integral = name != "start_time_s" && !is_trace_key(name);
    for (json& v : range_values(f, integral)) {
      const Field vf(v, f.file(), f.path());
      axis.values.push_back(check_value(name, vf));
      axis.paths.push_back(f.path());
    }
  } else {
    add(f);
  }
  return axis;
}

Block parse_block(const Field& f) {
  f.require_object();
  Block block;
  for (const auto& item : f.json().items()) {
    std::string name = item.key();
    const Field v = f.at(name);
    if (name == "trace.seed") name = "seed";
    if (name == "trace.name" || name == "trace.pattern") v.fail("cannot be swept: sweep a list of traces instead");
    if (block.count(name)) v.fail(fmt::format("{} is given twice (trace.seed and seed are the same)", name));
    block.emplace(name, parse_axis(name, v));
  }
  return block;
}

// Axis order: kParams with the trace.KEY axes (sorted) after "trace".
std::vector<std::string> axis_order(const Block& block) {
  std::vector<std::string> order;
  for (std::string_view p : kParams) {
    if (block.count(std::string(p))) order.emplace_back(p);
    if (p == "trace")
      for (const auto& [name, axis] : block)
        if (is_trace_key(name)) order.push_back(name);
  }
  return order;
}

std::uint64_t fnv1a(std::string_view s) {
  std::uint64_t h = 1469598103934665603ULL;
  for (unsigned char c : s) {
    h ^= c;
    h *= 1099511628211ULL;
  }
  return h;
}

// The doc without the keys that only label it.
json without_labels(json doc) {
  if (doc.is_object()) {
    doc.erase("name");
    doc.erase("description");
  }
  return doc;
}

std::string trace_label(const json& doc, const json& name) {
  if (name.is_string()) return name.get<std::string>();
  if (doc.contains("pattern") && doc["pattern"].is_string()) return doc["pattern"].get<std::string>();
  if (doc.contains("file") && doc["file"].is_string()) return "file:" + doc["file"].get<std::string>();
  if (doc.contains("constant")) return "constant";
  if (doc.contains("points")) return "points";
  return doc.dump();
}

// Expands blocks into runs. Everything that depends on only some axes (the pipeline,
// the network, the trace and the pieces of the id) is computed once per value or
// combination of those axes, not once per run.
class Expander {
 public:
  Expander(Study& study, fs::path dir) : study_(study), dir_(std::move(dir)) {}

  void expand(const ParsedBlock& block) {
    const std::vector<std::string> order = axis_order(block.axes);
    std::vector<const Axis*> axes;
    std::size_t count = 1;
    for (const auto& name : order) {
      axes.push_back(&block.axes.at(name));
      count *= axes.back()->values.size();
      if (count + study_.runs.size() > kMaxRuns)
        throw InputError(fmt::format("{}: {}: expands to more than {} runs", study_.source, block.path, kMaxRuns));
    }
    auto axis_of = [&](std::string_view name) -> int {
      for (std::size_t a = 0; a < order.size(); ++a)
        if (order[a] == name) return static_cast<int>(a);
      return -1;
    };
    const int a_pipeline = axis_of("pipeline"), a_network = axis_of("network"), a_trace = axis_of("trace"),
              a_seed = axis_of("seed"), a_start = axis_of("start_time_s"), a_iterations = axis_of("iterations"),
              a_b = axis_of("micro_batch_size"), a_schedule = axis_of("schedule"), a_k = axis_of("k");
    if (a_pipeline < 0) fail(block.path + ".pipeline", "missing field");
    if (a_schedule < 0) fail(block.path + ".schedule", "missing field");
    if (a_b < 0) fail(block.path + ".micro_batch_size", "missing field");
    if (a_k < 0)
      for (const json& v : axes[static_cast<std::size_t>(a_schedule)]->values)
        if (v == "kfkb") fail(block.path + ".k", "missing field (the kfkb schedule needs a group size k)");
    // trace.KEY axes, by column; the axes that make up the trace (trace, trace.KEY,
    // seed) are adjacent in `order`.
    std::vector<int> key_axis(study_.trace_columns.size(), -1);
    for (std::size_t c = 0; c < key_axis.size(); ++c) key_axis[c] = axis_of(study_.trace_columns[c]);
    std::vector<int> trace_axes;
    for (std::size_t a = 0; a < order.size(); ++a)
      if (order[a] == "trace" || order[a] == "seed" || is_trace_key(order[a]))
        trace_axes.push_back(static_cast<int>(a));

    // Per-value caches (-1: not yet).
    auto sized = [&](int a) {
      return std::vector<int>(a < 0 ? 1 : axes[static_cast<std::size_t>(a)]->values.size(), -1);
    };
    std::vector<int> pipeline_of = sized(a_pipeline), network_of = sized(a_network);
    std::unordered_map<std::size_t, int> trace_of;  // mixed-radix number of the trace axes -> trace

    std::vector<std::size_t> at(order.size(), 0);
    auto value = [&](int a) -> const json* {
      return a < 0 ? nullptr : &axes[static_cast<std::size_t>(a)]->values[at[static_cast<std::size_t>(a)]];
    };
    auto where = [&](int a, const char* name) {
      return a < 0 ? fmt::format("{}.{}", block.path, name)
                   : axes[static_cast<std::size_t>(a)]->paths[at[static_cast<std::size_t>(a)]];
    };
    for (std::size_t n = 0; n < count; ++n) {
      RunSpec run;
      int& p = pipeline_of[at[static_cast<std::size_t>(a_pipeline)]];
      if (p < 0) p = pipeline_index(value(a_pipeline)->get<std::string>());
      run.pipeline = p;
      const json* network = value(a_network);
      if (network && network->is_null()) network = nullptr;
      if (network) {
        int& net = network_of[at[static_cast<std::size_t>(a_network)]];
        if (net < 0) net = network_index(*network, where(a_network, "network"));
        run.network = net;
      }
      const json* trace = value(a_trace);
      if (trace && trace->is_null()) trace = nullptr;
      if (!network && !trace) fail(block.path, "needs a network or a trace (or both)");
      run.trace_params.assign(study_.trace_columns.size(), json());
      for (std::size_t c = 0; c < key_axis.size(); ++c) {
        if (key_axis[c] < 0) continue;
        if (!trace) fail(where(key_axis[c], ""), "sets a key of the trace, but this run has no trace");
        run.trace_params[c] = *value(key_axis[c]);
      }
      if (trace) {
        std::size_t combo = 0;
        for (int a : trace_axes)
          combo = combo * axes[static_cast<std::size_t>(a)]->values.size() + at[static_cast<std::size_t>(a)];
        auto it = trace_of.find(combo);
        if (it == trace_of.end()) {
          json doc = *trace;
          for (std::size_t c = 0; c < key_axis.size(); ++c)
            if (key_axis[c] >= 0) doc[study_.trace_columns[c].substr(6)] = run.trace_params[c];
          if (const json* seed = value(a_seed)) doc["seed"] = *seed;
          it = trace_of.emplace(combo, trace_index(std::move(doc), where(a_trace, "trace"))).first;
        }
        run.trace = it->second;
        const json& doc = study_.traces[static_cast<std::size_t>(run.trace)].doc;
        if (doc.contains("seed") && doc["seed"].is_number_integer()) run.seed = doc["seed"].get<std::int64_t>();
      } else if (a_seed >= 0) {
        fail(where(a_seed, "seed"), "needs a trace (it is the seed of a random trace pattern)");
      }
      run.schedule = value(a_schedule)->get<std::string>();
      if (run.schedule == "kfkb") run.k = value(a_k)->get<int>();
      run.micro_batch_size = value(a_b)->get<int>();
      if (const json* v = value(a_iterations)) run.iterations = v->get<int>();
      if (const json* v = value(a_start)) run.start_time_s = v->get<double>();

      // The id: a hash of everything that determines the result, as canonical JSON
      // (sorted keys, no blanks).
      const std::string canon = fmt::format(
          R"({{"iterations":{},"k":{},"micro_batch_size":{},"network":{},"pipeline":{},"schedule":{},"start_time_s":{},"trace":{}}})",
          run.iterations, run.k ? std::to_string(*run.k) : "null", run.micro_batch_size,
          run.network >= 0 ? network_keys_[static_cast<std::size_t>(run.network)] : "null",
          json(study_.pipelines[static_cast<std::size_t>(run.pipeline)].label).dump(), json(run.schedule).dump(),
          json(run.start_time_s).dump(), run.trace >= 0 ? trace_keys_[static_cast<std::size_t>(run.trace)] : "null");
      run.id = fmt::format("{:016x}", fnv1a(canon));
      if (ids_.insert(run.id).second) {  // else the same run again (e.g. k swept with 1f1b)
        run.index = study_.runs.size();
        study_.runs.push_back(std::move(run));
      }
      for (std::size_t a = order.size(); a-- > 0;) {  // odometer, last axis fastest
        if (++at[a] < axes[a]->values.size()) break;
        at[a] = 0;
      }
    }
  }

 private:
  [[noreturn]] void fail(const std::string& path, std::string_view what) const {
    throw InputError(fmt::format("{}: {}: {}", study_.source, path, what));
  }

  int pipeline_index(const std::string& label) {
    auto it = pipeline_ids_.find(label);
    if (it != pipeline_ids_.end()) return it->second;
    const fs::path path = fs::path(label).is_absolute() ? fs::path(label) : (dir_ / label).lexically_normal();
    study_.pipelines.push_back({label, sim::load_pipeline(path)});
    const int id = static_cast<int>(study_.pipelines.size()) - 1;
    pipeline_ids_.emplace(label, id);
    return id;
  }

  int network_index(const json& value, const std::string& path) {
    const std::string key = without_labels(value).dump();
    auto it = network_ids_.find(key);
    if (it != network_ids_.end()) return it->second;
    NetworkInput in;
    if (value.is_string()) {
      in.label = value.get<std::string>();
      const fs::path p = fs::path(in.label).is_absolute() ? fs::path(in.label) : (dir_ / in.label).lexically_normal();
      in.source = p.string();
      in.doc = read_json_file(p);
    } else {
      in.label = value.contains("name") && value["name"].is_string() ? value["name"].get<std::string>()
                                                                     : without_labels(value).dump();
      // parse_network takes the base directory of relative trace paths from the
      // source's directory: the spec's, followed by the field.
      in.source = fmt::format("{}: {}", study_.source, path);
      in.doc = without_labels(value);
    }
    study_.networks.push_back(std::move(in));
    network_keys_.push_back(key);
    const int id = static_cast<int>(study_.networks.size()) - 1;
    network_ids_.emplace(key, id);
    return id;
  }

  int trace_index(json doc, const std::string& path) {
    json name = doc.contains("name") ? doc["name"] : json();
    doc.erase("name");
    if (doc.contains("severity")) apply_severity(doc, path);
    std::string key = doc.dump();
    auto it = trace_ids_.find(key);
    if (it != trace_ids_.end()) return it->second;
    study_.traces.push_back({trace_label(doc, name), doc});
    const int id = static_cast<int>(study_.traces.size()) - 1;
    trace_ids_.emplace(key, id);
    trace_keys_.push_back(std::move(key));
    return id;
  }

  // severity s in [0, 1]: low = high x (1 - s), for the patterns with high and low.
  void apply_severity(json& doc, const std::string& path) const {
    const Field f(doc, study_.source, path);
    const double s = f.at("severity").number();
    if (s < 0 || s > 1) f.at("severity").fail(fmt::format("must be in [0, 1], got {}", s));
    const std::string pattern =
        doc.contains("pattern") && doc["pattern"].is_string() ? doc["pattern"].get<std::string>() : "";
    if (pattern != "periodic" && pattern != "onoff")
      f.at("severity").fail("applies to the periodic and onoff patterns only (low = high x (1 - severity))");
    if (doc.contains("low")) f.at("severity").fail("give low or severity, not both");
    const double high = f.at("high").non_negative();
    doc["low"] = high * (1.0 - s);
    doc.erase("severity");
  }

  Study& study_;
  fs::path dir_;
  std::unordered_map<std::string, int> pipeline_ids_, network_ids_, trace_ids_;
  std::vector<std::string> network_keys_, trace_keys_;  // canonical JSON, by index
  std::unordered_set<std::string> ids_;
};

}  // namespace

Study parse_study(const json& doc, const std::string& source) {
  Study study;
  study.source = source;
  const Field root(doc, source);
  root.require_object();
  for (const auto& item : doc.items()) {
    const std::string& key = item.key();
    if (key != "description" && key != "defaults" && key != "grid" && key != "runs")
      root.at(key).fail("unknown field (a sweep spec has description, defaults, grid and runs)");
  }
  Block defaults;
  if (root.has("defaults")) defaults = parse_block(root.at("defaults"));
  std::vector<ParsedBlock> blocks;
  auto merged = [&](const Field& f) {
    ParsedBlock b{f.path(), defaults};
    for (auto& [name, axis] : parse_block(f)) b.axes[name] = std::move(axis);
    return b;
  };
  if (root.has("grid")) blocks.push_back(merged(root.at("grid")));
  if (root.has("runs")) {
    const Field runs = root.at("runs");
    if (runs.size() == 0) runs.fail("must list at least one run");
    for (std::size_t i = 0; i < runs.size(); ++i) blocks.push_back(merged(runs.at(i)));
  }
  if (blocks.empty()) {
    if (!root.has("defaults")) root.fail("needs grid or runs (or defaults alone for a single grid)");
    blocks.push_back({"defaults", defaults});
  }

  std::set<std::string> trace_keys;
  for (const auto& b : blocks)
    for (const auto& [name, axis] : b.axes)
      if (is_trace_key(name)) trace_keys.insert(name);
  study.trace_columns.assign(trace_keys.begin(), trace_keys.end());

  Expander expander(study, fs::path(source).parent_path());
  for (const auto& b : blocks) expander.expand(b);
  return study;
}

Study load_study(const fs::path& path) { return parse_study(read_json_file(path), path.string()); }

}  // namespace adagrouper::sweep
