// The sweep spec: parameters, axes (lists and ranges), blocks (defaults, grid, runs),
// expansion into runs with stable ids.
#include <fmt/format.h>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <map>
#include <optional>
#include <set>
#include <string>
#include <string_view>
#include <unordered_map>
#include <utility>
#include <vector>

#include "json_util.h"
#include "pipeline.h"
#include "rate_forms.h"
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

// {"range": [from, to, step]} -> the values from, from + step, ... <= to; the bounds and
// the step of a range of times may have units ("0s", "1h", "10min").
std::vector<json> range_values(const Field& f, bool integral, std::optional<Quantity> q) {
  const Field r = f.at("range");
  if (r.size() < 2 || r.size() > 3) r.fail("must be [from, to] or [from, to, step]");
  std::vector<json> out;
  if (integral) {
    const std::int64_t from = r.at(std::size_t{0}).integer(), to = r.at(1).integer();
    const std::int64_t step = r.size() == 3 ? r.at(2).integer() : 1;
    if (step <= 0) r.at(2).fail(fmt::format("step must be > 0, got {}", step));
    if (to < from) r.fail(fmt::format("to ({}) must be >= from ({})", to, from));
    // In unsigned arithmetic: to - from does not overflow, nor does from + i x step below.
    const std::uint64_t n = (static_cast<std::uint64_t>(to) - static_cast<std::uint64_t>(from)) /
                            static_cast<std::uint64_t>(step);
    if (n >= kMaxRuns) r.fail(fmt::format("more than {} values", kMaxRuns));
    for (std::uint64_t i = 0; i <= n; ++i)
      out.emplace_back(static_cast<std::int64_t>(static_cast<std::uint64_t>(from) + i * static_cast<std::uint64_t>(step)));
    return out;
  }
  const auto read = [&](const Field& x) { return q ? x.quantity(*q) : x.number(); };
  const double from = read(r.at(std::size_t{0})), to = read(r.at(1));
  const double step = r.size() == 3 ? read(r.at(2)) : 1.0;
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

// What a trace.KEY holds when it is a time or a rate (a key ending in _s, or a rate of
// the patterns): its values may have units, and rows show them as plain numbers.
std::optional<Quantity> trace_key_quantity(std::string_view name) {
  if (!is_trace_key(name)) return std::nullopt;
  const std::string_view key = name.substr(6);
  if (key.ends_with("_s")) return Quantity::time;
  for (const std::string_view rate : {"high", "low", "base", "levels", "min", "max", "fill", "constant"})
    if (key == rate) return Quantity::rate;
  return std::nullopt;
}

// A trace.KEY value with its units taken out (a list: each element); a whole number as
// an integer, as it would most likely be written ("5s" is 5), so that its row and its
// run's id are those of the plain number.
json trace_key_value(const std::string& name, const Field& f) {
  const std::optional<Quantity> q = trace_key_quantity(name);
  const auto plain = [&](const Field& v) {
    if (!v.json().is_string()) return v.json();
    const double x = v.quantity(*q);
    if (x == std::floor(x) && std::fabs(x) < 9e15) return json(static_cast<std::int64_t>(x));
    return json(x);
  };
  if (!q || !(f.json().is_string() || f.is_array())) return f.json();
  if (!f.is_array()) return plain(f);
  json out = json::array();
  for (std::size_t i = 0; i < f.size(); ++i) out.push_back(plain(f.at(i)));
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
  if (is_trace_key(name)) return trace_key_value(name, f);
  if (name == "seed") return f.integer_at_least(0);
  if (name == "k" || name == "micro_batch_size") return f.int_in(1, sim::kMaxBatchSize);
  if (name == "iterations") return f.int_in(1);
  if (name == "start_time_s") return sim::read_time(f);
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
    const std::optional<Quantity> q = name == "start_time_s" ? std::optional(Quantity::time) : trace_key_quantity(name);
    for (json& v : range_values(f, integral, q)) {
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
  // The parameters, and every trace.KEY (the traces library checks KEY).
  std::vector<std::string_view> known(std::begin(kParams), std::end(kParams));
  for (const auto& item : f.json().items())
    if (is_trace_key(item.key())) known.push_back(item.key());
  f.check_keys(known, "a block of parameters");
  Block block;
  for (const auto& item : f.json().items()) {
    std::string name = item.key();
    if (name == "description" || name == "comment") continue;
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

// The axes of one block in expansion order (the last varies fastest), and an odometer
// over their values: one position per run.
class Odometer {
 public:
  explicit Odometer(const ParsedBlock& block) : path_(block.path), order_(axis_order(block.axes)) {
    for (const auto& name : order_) axes_.push_back(&block.axes.at(name));
    at_.assign(order_.size(), 0);
  }

  const std::vector<std::string>& order() const { return order_; }
  // The axis of a parameter; -1 when the block does not set it.
  int axis(std::string_view name) const {
    for (std::size_t a = 0; a < order_.size(); ++a)
      if (order_[a] == name) return static_cast<int>(a);
    return -1;
  }
  const std::vector<json>& values(int a) const { return axes_[index(a)]->values; }
  std::size_t size(int a) const { return values(a).size(); }
  std::size_t at(int a) const { return at_[index(a)]; }
  // The current value of axis a; nullptr for a = -1.
  const json* value(int a) const { return a < 0 ? nullptr : &values(a)[at(a)]; }
  // Where the current value of axis a was given, for errors ("BLOCK.NAME" for a = -1).
  std::string where(int a, const char* name) const {
    return a < 0 ? fmt::format("{}.{}", path_, name) : axes_[index(a)]->paths[at(a)];
  }
  void advance() {
    for (std::size_t a = order_.size(); a-- > 0;) {
      if (++at_[a] < axes_[a]->values.size()) break;
      at_[a] = 0;
    }
  }

 private:
  static std::size_t index(int a) { return static_cast<std::size_t>(a); }

  std::string path_;
  std::vector<std::string> order_;
  std::vector<const Axis*> axes_;
  std::vector<std::size_t> at_;
};

bool takes_k(const std::string& schedule) {
  const sim::ScheduleFamily* family = sim::find_schedule_family(schedule);
  return family && family->takes_k;
}

// Which axis of a block is which parameter (-1: not swept).
struct Roles {
  int pipeline, network, trace, seed, start, iterations, b, schedule, k;
  std::vector<int> key_axis;    // the trace.KEY axes, by Study::trace_columns
  std::vector<int> trace_axes;  // the axes that make up the trace: trace, trace.KEY, seed (adjacent)
};

// What a block computes once per value (or combination of values) of some axes, not
// once per run (-1: not yet).
struct BlockCache {
  std::vector<int> pipeline_of, network_of;       // by value of the axis
  std::unordered_map<std::size_t, int> trace_of;  // mixed-radix number of the trace axes -> trace
};

// Expands blocks into runs. Everything that depends on only some axes (the pipeline,
// the network, the trace and the pieces of the id) is computed once per value or
// combination of those axes, not once per run.
class Expander {
 public:
  Expander(Study& study, fs::path dir) : study_(study), dir_(std::move(dir)) {}

  void expand(const ParsedBlock& block) {
    Odometer pos(block);
    const std::size_t count = run_count(pos, block.path);
    const Roles roles = find_roles(pos, block.path);
    auto sized = [&](int a) { return std::vector<int>(a < 0 ? 1 : pos.size(a), -1); };
    BlockCache cache{sized(roles.pipeline), sized(roles.network), {}};
    for (std::size_t n = 0; n < count; ++n, pos.advance()) add(make_run(pos, roles, cache, block.path));
  }

 private:
  std::size_t run_count(const Odometer& pos, const std::string& path) const {
    std::size_t count = 1;
    for (std::size_t a = 0; a < pos.order().size(); ++a) {
      count *= pos.size(static_cast<int>(a));
      if (count + study_.runs.size() > kMaxRuns)
        throw InputError(fmt::format("{}: {}: expands to more than {} runs", study_.source, path, kMaxRuns));
    }
    return count;
  }

  Roles find_roles(const Odometer& pos, const std::string& path) const {
    Roles r{.pipeline = pos.axis("pipeline"),
            .network = pos.axis("network"),
            .trace = pos.axis("trace"),
            .seed = pos.axis("seed"),
            .start = pos.axis("start_time_s"),
            .iterations = pos.axis("iterations"),
            .b = pos.axis("micro_batch_size"),
            .schedule = pos.axis("schedule"),
            .k = pos.axis("k"),
            .key_axis = {},
            .trace_axes = {}};
    if (r.pipeline < 0) fail(path + ".pipeline", "missing field");
    if (r.schedule < 0) fail(path + ".schedule", "missing field");
    if (r.b < 0) fail(path + ".micro_batch_size", "missing field");
    if (r.k < 0)
      for (const json& v : pos.values(r.schedule))
        if (takes_k(v.get<std::string>()))
          fail(path + ".k", fmt::format("missing field (the {} schedule needs a group size k)", v.get<std::string>()));
    for (const std::string& column : study_.trace_columns) r.key_axis.push_back(pos.axis(column));
    for (std::size_t a = 0; a < pos.order().size(); ++a) {
      const std::string& name = pos.order()[a];
      if (name == "trace" || name == "seed" || is_trace_key(name)) r.trace_axes.push_back(static_cast<int>(a));
    }
    return r;
  }

  RunSpec make_run(const Odometer& pos, const Roles& r, BlockCache& cache, const std::string& path) {
    RunSpec run;
    int& p = cache.pipeline_of[pos.at(r.pipeline)];
    if (p < 0) p = pipeline_index(pos.value(r.pipeline)->get<std::string>());
    run.pipeline = p;
    const json* network = pos.value(r.network);
    if (network && network->is_null()) network = nullptr;
    if (network) {
      int& net = cache.network_of[pos.at(r.network)];
      if (net < 0) net = network_index(*network, pos.where(r.network, "network"));
      run.network = net;
    }
    const json* trace = pos.value(r.trace);
    if (trace && trace->is_null()) trace = nullptr;
    if (!network && !trace) fail(path, "needs a network or a trace (or both)");
    set_trace(run, trace, pos, r, cache);
    run.schedule = pos.value(r.schedule)->get<std::string>();
    if (takes_k(run.schedule)) run.k = pos.value(r.k)->get<int>();
    run.micro_batch_size = pos.value(r.b)->get<int>();
    if (const json* v = pos.value(r.iterations)) run.iterations = v->get<int>();
    if (const json* v = pos.value(r.start)) run.start_time_s = v->get<double>();
    run.id = run_id(run);
    return run;
  }

  // The run's trace.KEY values and its trace (`trace` with them and the seed filled in),
  // built once per combination of the trace axes.
  void set_trace(RunSpec& run, const json* trace, const Odometer& pos, const Roles& r, BlockCache& cache) {
    run.trace_params.assign(study_.trace_columns.size(), json());
    for (std::size_t c = 0; c < r.key_axis.size(); ++c) {
      if (r.key_axis[c] < 0) continue;
      if (!trace) fail(pos.where(r.key_axis[c], ""), "sets a key of the trace, but this run has no trace");
      run.trace_params[c] = *pos.value(r.key_axis[c]);
    }
    if (!trace) {
      if (r.seed >= 0) fail(pos.where(r.seed, "seed"), "needs a trace (it is the seed of a random trace pattern)");
      return;
    }
    std::size_t combo = 0;
    for (int a : r.trace_axes) combo = combo * pos.size(a) + pos.at(a);
    auto it = cache.trace_of.find(combo);
    if (it == cache.trace_of.end()) {
      json doc = *trace;
      for (std::size_t c = 0; c < r.key_axis.size(); ++c)
        if (r.key_axis[c] >= 0) doc[study_.trace_columns[c].substr(6)] = run.trace_params[c];
      if (const json* seed = pos.value(r.seed)) doc["seed"] = *seed;
      it = cache.trace_of.emplace(combo, trace_index(std::move(doc), pos.where(r.trace, "trace"))).first;
    }
    run.trace = it->second;
    const json& doc = study_.traces[static_cast<std::size_t>(run.trace)].doc;
    if (doc.contains("seed") && doc["seed"].is_number_integer()) run.seed = doc["seed"].get<std::int64_t>();
  }

  // A hash of everything that determines the result, as canonical JSON (sorted keys, no
  // blanks).
  std::string run_id(const RunSpec& run) const {
    const std::string canon = fmt::format(
        R"({{"iterations":{},"k":{},"micro_batch_size":{},"network":{},"pipeline":{},"schedule":{},"start_time_s":{},"trace":{}}})",
        run.iterations, run.k ? std::to_string(*run.k) : "null", run.micro_batch_size,
        run.network >= 0 ? network_keys_[static_cast<std::size_t>(run.network)] : "null",
        json(study_.pipelines[static_cast<std::size_t>(run.pipeline)].label).dump(), json(run.schedule).dump(),
        json(run.start_time_s).dump(), run.trace >= 0 ? trace_keys_[static_cast<std::size_t>(run.trace)] : "null");
    return fmt::format("{:016x}", fnv1a(canon));
  }

  void add(RunSpec run) {
    if (!ids_.insert(run.id).second) return;  // the same run again (e.g. k swept with 1f1b)
    run.index = study_.runs.size();
    study_.runs.push_back(std::move(run));
  }

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
    const double high = f.at("high").non_negative(Quantity::rate);
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
  root.check_keys({"defaults", "grid", "runs"}, "a sweep spec");
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
