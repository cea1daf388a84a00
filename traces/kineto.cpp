// Reading PyTorch profiler (Kineto) traces of pipeline-parallel runs: the PP:<action>
// ranges and NCCL send/recv kernels of each rank's Chrome trace, and what
// `trace import-kineto` writes from them (traces/kineto.h).
#include "kineto.h"

#include <zlib.h>

#include <algorithm>
#include <cctype>
#include <limits>
#include <map>
#include <set>
#include <tuple>
#include <utility>

#include <fmt/format.h>
#include <nlohmann/json.hpp>

#include "error.h"
#include "json_util.h"
#include "pipeline.h"  // kMaxStages, kMaxBatchSize
#include "rate.h"      // time_error

namespace adagrouper::traces {

namespace {

using nlohmann::json;

// Largest decompressed size of one trace: what parse_json_text accepts anyway.
constexpr std::size_t kMaxInflated = static_cast<std::size_t>(kMaxJsonBytes);
// Names longer than this are never actions (and never reach std::regex, which recurses
// per character).
constexpr std::size_t kMaxNameLength = 1024;
// Largest |ts| (us) taken: far beyond the epoch-based clocks profilers use, and small
// enough that differences of timestamps stay finite.
constexpr double kMaxTimestamp = 1e18;

// ---- gzip ------------------------------------------------------------------------

bool is_gzip(std::string_view text) {
  return text.size() >= 2 && static_cast<unsigned char>(text[0]) == 0x1f && static_cast<unsigned char>(text[1]) == 0x8b;
}

[[noreturn]] void gzip_fail(const std::string& source, std::string_view what) {
  throw InputError(fmt::format("{}: gzip: {}", source, what));
}

// Inflates every member of a gzip stream into `out`.
void inflate_all(z_stream& z, std::string& out, const std::string& source) {
  char buf[1 << 16];
  while (true) {
    z.next_out = reinterpret_cast<Bytef*>(buf);
    z.avail_out = sizeof buf;
    const int rc = inflate(&z, Z_NO_FLUSH);
    out.append(buf, sizeof buf - z.avail_out);
    if (out.size() > kMaxInflated) gzip_fail(source, fmt::format("decompresses to more than {} bytes", kMaxInflated));
    if (rc == Z_STREAM_END) {
      if (z.avail_in == 0) return;
      if (inflateReset(&z) != Z_OK) gzip_fail(source, "cannot read the next member");
      continue;
    }
    if (rc == Z_BUF_ERROR && z.avail_in == 0) gzip_fail(source, "truncated data");
    if (rc != Z_OK && rc != Z_BUF_ERROR) gzip_fail(source, z.msg ? z.msg : "corrupt data");
  }
}

// ---- action names ----------------------------------------------------------------

struct Action {
  std::string stage, type, micro_batch;
};

// "PP:" digits, a type of capitals and '_', digits (maybe none); anything else after PP:
// (an OVERLAP_F_B container) is an action with no type.
Action torch_action(std::string_view rest) {
  auto digits = [&rest] {
    std::size_t n = 0;
    while (n < rest.size() && std::isdigit(static_cast<unsigned char>(rest[n]))) ++n;
    std::string d(rest.substr(0, n));
    rest.remove_prefix(n);
    return d;
  };
  Action a;
  a.stage = digits();
  std::size_t n = 0;
  while (n < rest.size() && (std::isupper(static_cast<unsigned char>(rest[n])) || rest[n] == '_')) ++n;
  a.type = rest.substr(0, n);
  rest.remove_prefix(n);
  a.micro_batch = digits();
  if (a.stage.empty() || !rest.empty()) return {};
  return a;
}

std::optional<Action> match_action(const std::string& name, const ActionPattern& p) {
  if (name.size() > kMaxNameLength) return std::nullopt;
  if (!p.regex) {
    if (name.rfind("PP:", 0) != 0) return std::nullopt;
    return torch_action(std::string_view(name).substr(3));
  }
  std::smatch m;
  if (!std::regex_search(name, m, *p.regex)) return std::nullopt;
  return Action{m[p.stage_group].str(), m[p.type_group].str(), m[p.micro_batch_group].str()};
}

// F, B, I, W (either case), forward / fwd, backward / bwd; nullopt for the rest
// (SEND_F, RECV_B, UNSHARD, ...), which are not compute.
std::optional<sim::Phase> compute_phase(std::string type) {
  for (char& c : type) c = static_cast<char>(std::tolower(static_cast<unsigned char>(c)));
  if (type == "forward" || type == "fwd") return sim::Phase::Forward;
  if (type == "backward" || type == "bwd") return sim::Phase::Backward;
  if (type.size() != 1) return std::nullopt;
  return sim::phase_of_letter(static_cast<char>(std::toupper(static_cast<unsigned char>(type[0]))));
}

// A stage or micro-batch number of an action name: digits, below `limit`.
int action_number(const Field& name, const std::string& text, const char* what, int limit) {
  auto digit = [](char c) { return std::isdigit(static_cast<unsigned char>(c)) != 0; };
  const bool digits = !text.empty() && text.size() <= 9 && std::all_of(text.begin(), text.end(), digit);
  if (!digits) name.fail(fmt::format("{} \"{}\" of the action is not a number", what, text));
  const int v = std::stoi(text);
  if (v >= limit) name.fail(fmt::format("{} {} of the action is too large (at most {})", what, v, limit - 1));
  return v;
}

// ---- named groups ----------------------------------------------------------------

// The pattern without its group names, and the index of each name.
struct GroupNames {
  std::string plain;
  std::map<std::string, int> index;
  int groups = 0;
};

// Whether the '(' at `i` opens (?<name>...) or (?P<name>...) (not a lookbehind).
bool named_group(const std::string& re, std::size_t i) {
  if (re.compare(i + 1, 3, "?P<") == 0) return true;
  return re.compare(i + 1, 2, "?<") == 0 && re.compare(i + 3, 1, "=") != 0 && re.compare(i + 3, 1, "!") != 0;
}

GroupNames strip_group_names(const std::string& re) {
  GroupNames g;
  bool in_class = false;
  for (std::size_t i = 0; i < re.size(); ++i) {
    const char c = re[i];
    g.plain += c;
    if (c == '\\' && i + 1 < re.size()) {
      g.plain += re[++i];
    } else if (in_class) {
      in_class = c != ']';
    } else if (c == '[') {
      in_class = true;
    } else if (c == '(' && !named_group(re, i)) {
      g.groups += re.compare(i + 1, 1, "?") != 0;
    } else if (c == '(') {
      const std::size_t open = re.find('<', i), close = re.find('>', open);
      if (close == std::string::npos) continue;  // left to std::regex to refuse
      g.index[re.substr(open + 1, close - open - 1)] = ++g.groups;
      i = close;
    }
  }
  return g;
}

// ---- events ----------------------------------------------------------------------

// An OVERLAP_F_B range of PyTorch's runtime ("PP:(0F3;1B1)OVERLAP_F_B": DualPipeV runs a
// forward and a backward together): its parts, whose times the range does not tell apart.
struct Overlap {
  std::vector<KinetoOp> parts;  // start and duration still 0
  double start_us = 0, duration_us = 0;
};

// What one file's events give, before choosing GPU or CPU ranges.
struct Scan {
  std::array<std::vector<KinetoOp>, 2> ops;  // [0] CPU, [1] GPU
  std::array<std::vector<Overlap>, 2> overlaps;
  std::array<std::size_t, 2> skipped{};
  std::vector<KinetoTransfer> transfers;
};

std::string string_member(const json& ev, const char* key) {
  const auto it = ev.find(key);
  return it != ev.end() && it->is_string() ? it->get<std::string>() : std::string();
}

// ts and dur of a complete event, in microseconds.
std::pair<double, double> event_times(const Field& ev) {
  const double ts = ev.at("ts").number_in(-kMaxTimestamp, kMaxTimestamp, "the largest timestamp taken (us)");
  const Field dur = ev.at("dur");
  const double d = dur.non_negative();
  if (const std::string e = sim::time_error(d / 1e6); !e.empty())
    dur.fail(fmt::format("{:g} us is too long: {}", d, e));
  return {ts, d};
}

bool is_nccl_p2p(std::string_view name) {
  for (std::string_view prefix : {"ncclKernel_", "ncclDevKernel_"}) {
    const std::size_t at = name.find(prefix);
    if (at == std::string_view::npos) continue;
    const std::string_view rest = name.substr(at + prefix.size());
    if (rest.starts_with("SendRecv") || rest.starts_with("Send") || rest.starts_with("Recv")) return true;
  }
  return false;
}

// Bytes of one element of a torch dtype (c10 ScalarType names); 0 when unknown.
double dtype_bytes(std::string_view dtype) {
  struct Size {
    std::string_view name;
    double bytes;
  };
  static constexpr Size kSizes[] = {
      {"Float", 4},       {"Double", 8},   {"Half", 2},   {"BFloat16", 2},  {"Int", 4},          {"Long", 8},
      {"Short", 2},       {"Char", 1},     {"Byte", 1},   {"Bool", 1},      {"ComplexFloat", 8}, {"ComplexDouble", 16},
      {"ComplexHalf", 4}, {"UInt16", 2},   {"UInt32", 4}, {"UInt64", 8},    {"float32", 4},      {"float16", 2},
      {"bfloat16", 2},    {"float64", 8},  {"int32", 4},  {"int64", 8},     {"uint8", 1},        {"int8", 1}};
  for (const Size& s : kSizes)
    if (s.name == dtype) return s.bytes;
  return dtype.starts_with("Float8") ? 1 : 0;
}

// args.bytes, else max(In msg nelems, Out msg nelems) x the size of args.dtype.
std::optional<double> transfer_bytes(const Field& ev) {
  if (!ev.has("args") || !ev.at("args").is_object()) return std::nullopt;
  const Field args = ev.at("args");
  if (args.has("bytes")) return args.at("bytes").non_negative();
  double nelems = -1;
  for (const char* key : {"In msg nelems", "Out msg nelems"})
    if (args.has(key)) nelems = std::max(nelems, args.at(key).non_negative());
  const double size = dtype_bytes(string_member(args.json(), "dtype"));
  if (nelems < 0 || size == 0) return std::nullopt;
  return nelems * size;
}

void read_action(const Field& ev, std::size_t index, bool gpu, const Action& a, Scan& scan) {
  const std::optional<sim::Phase> phase = compute_phase(a.type);
  const auto [ts, dur] = event_times(ev);
  if (!phase || a.micro_batch.empty()) {
    ++scan.skipped[gpu];
    return;
  }
  const Field name = ev.at("name");
  KinetoOp op;
  op.stage = action_number(name, a.stage, "stage", sim::kMaxStages);
  op.micro_batch = action_number(name, a.micro_batch, "micro-batch", sim::kMaxBatchSize);
  op.phase = *phase;
  op.start_us = ts;
  op.duration_us = dur;
  op.event = index;
  scan.ops[gpu].push_back(op);
}

// "PP:(a;b)OVERLAP_F_B" with compute actions a and b: an Overlap; nullopt for any other name.
std::optional<Overlap> overlap_of(const Field& ev, std::size_t index, const std::string& name) {
  constexpr std::string_view kHead = "PP:(", kTail = ")OVERLAP_F_B";
  if (name.size() > kMaxNameLength || !name.starts_with(kHead) || !name.ends_with(kTail)) return std::nullopt;
  std::string_view inner = std::string_view(name).substr(kHead.size(), name.size() - kHead.size() - kTail.size());
  Overlap o;
  while (!inner.empty()) {
    const std::size_t semi = std::min(inner.find(';'), inner.size());
    const Action a = torch_action(inner.substr(0, semi));
    inner.remove_prefix(std::min(semi + 1, inner.size()));
    const std::optional<sim::Phase> phase = compute_phase(a.type);
    if (!phase || a.micro_batch.empty()) return std::nullopt;  // not two compute actions: skipped
    KinetoOp op;
    op.stage = action_number(ev.at("name"), a.stage, "stage", sim::kMaxStages);
    op.micro_batch = action_number(ev.at("name"), a.micro_batch, "micro-batch", sim::kMaxBatchSize);
    op.phase = *phase;
    op.event = index;
    op.overlapped = true;
    o.parts.push_back(op);
  }
  if (o.parts.empty()) return std::nullopt;
  std::tie(o.start_us, o.duration_us) = event_times(ev);
  return o;
}

void read_event(const Field& ev, std::size_t index, const ActionPattern& p, Scan& scan) {
  if (!ev.is_object()) ev.fail(fmt::format("must be an object, got {}", describe_json(ev.json())));
  const json& j = ev.json();
  if (string_member(j, "ph") != "X") return;
  const std::string name = string_member(j, "name"), cat = string_member(j, "cat");
  if (cat == "kernel") {
    if (!is_nccl_p2p(name)) return;
    const auto [ts, dur] = event_times(ev);
    scan.transfers.push_back({ts, dur, transfer_bytes(ev), index});
    return;
  }
  const bool gpu = cat == "gpu_user_annotation";
  if (!gpu && j.contains("cat") && cat != "user_annotation") return;
  if (!p.regex)
    if (std::optional<Overlap> o = overlap_of(ev, index, name)) {
      scan.overlaps[gpu].push_back(std::move(*o));
      return;
    }
  if (const std::optional<Action> a = match_action(name, p)) read_action(ev, index, gpu, *a, scan);
}

// Each OVERLAP_F_B range split into its parts, one after the other from its start, in
// proportion to the medians of the same (stage, phase) measured on their own in this
// file (equal shares where a part has none); the parts join the ops.
void split_overlaps(const std::vector<Overlap>& overlaps, std::vector<KinetoOp>& ops) {
  std::map<std::pair<int, sim::Phase>, std::vector<double>> alone;
  for (const KinetoOp& op : ops) alone[{op.stage, op.phase}].push_back(op.duration_us);
  for (const Overlap& o : overlaps) {
    std::vector<double> weight;
    for (const KinetoOp& part : o.parts) {
      const auto it = alone.find({part.stage, part.phase});
      weight.push_back(it == alone.end() ? 0.0 : median(it->second));
    }
    double total = 0;
    for (double w : weight) total += w;
    double at = o.start_us;
    for (std::size_t i = 0; i < o.parts.size(); ++i) {
      KinetoOp part = o.parts[i];
      const double share = total > 0 ? weight[i] / total : 1.0 / static_cast<double>(o.parts.size());
      part.start_us = at;
      part.duration_us = o.duration_us * share;
      at += part.duration_us;
      ops.push_back(part);
    }
  }
  std::stable_sort(ops.begin(), ops.end(), [](const KinetoOp& a, const KinetoOp& b) { return a.start_us < b.start_us; });
}

// The ops in time order, ranges of the same action that overlap (one action's range on
// two GPU streams) merged into one.
std::vector<KinetoOp> merge_overlapping(std::vector<KinetoOp> ops) {
  std::sort(ops.begin(), ops.end(), [](const KinetoOp& a, const KinetoOp& b) {
    return std::tie(a.start_us, a.event) < std::tie(b.start_us, b.event);
  });
  std::vector<KinetoOp> out;
  std::map<std::tuple<int, sim::Phase, int>, std::size_t> last;
  for (const KinetoOp& op : ops) {
    const auto key = std::tuple(op.stage, op.phase, op.micro_batch);
    const auto it = last.find(key);
    if (it != last.end() && op.start_us < out[it->second].start_us + out[it->second].duration_us) {
      KinetoOp& m = out[it->second];
      m.duration_us = std::max(m.start_us + m.duration_us, op.start_us + op.duration_us) - m.start_us;
      continue;
    }
    last[key] = out.size();
    out.push_back(op);
  }
  return out;
}

[[noreturn]] void no_actions(const std::string& source, const ActionPattern& p) {
  if (p.regex)
    throw InputError(fmt::format("{}: no compute ranges: no user_annotation or gpu_user_annotation event matches "
                                 "--action-regex '{}' with a type F, B, I or W",
                                 source, p.text));
  throw InputError(fmt::format("{}: no compute ranges: no user_annotation or gpu_user_annotation event named like "
                               "PP:0F0 (torch.distributed.pipelining); for other names give --action-regex",
                               source));
}

// The traceEvents array (or a document that is one, the Chrome trace array form).
Field trace_events(const Field& root) {
  if (root.is_array()) return root;
  if (!root.is_object()) root.fail(fmt::format("must be a Chrome trace (an object with traceEvents), got {}",
                                               describe_json(root.json())));
  const Field events = root.at("traceEvents");
  events.require_array();
  return events;
}

// ---- output helpers --------------------------------------------------------------

std::string join(const std::vector<std::string>& items) {
  std::string out;
  for (const std::string& s : items) out += (out.empty() ? "" : ", ") + s;
  return out;
}

std::string all_sources(const std::vector<KinetoRank>& ranks) {
  std::vector<std::string> s;
  for (const KinetoRank& r : ranks) s.push_back(r.source);
  return join(s);
}

// "F 4 x, median 1.15 ms (1 to 1.3 ms)".
std::string spread(char letter, const std::vector<double>& v) {
  const auto [lo, hi] = std::minmax_element(v.begin(), v.end());
  return fmt::format("{} {} x, median {:.6g} ms ({:.6g} to {:.6g} ms)", letter, v.size(), median(v) * 1e3, *lo * 1e3,
                     *hi * 1e3);
}

nlohmann::ordered_json stage_json(const StageSamples& st, int b, bool last) {
  using sim::Phase;
  const bool split = !st.of(Phase::BackwardInput).empty();
  nlohmann::ordered_json e;
  e["micro_batch_size"] = b;
  e["forward_s"] = median(st.of(Phase::Forward));
  if (split) {
    e["backward_input_s"] = median(st.of(Phase::BackwardInput));
    e["backward_weight_s"] = median(st.of(Phase::BackwardWeight));
    e["backward_s"] = e["backward_input_s"].get<double>() + e["backward_weight_s"].get<double>();
  } else {
    e["backward_s"] = median(st.of(Phase::Backward));
  }
  e["activation_bytes"] = 0;
  if (!last) e["output_bytes"] = 0;
  std::vector<std::string> parts;
  for (Phase p : {Phase::Forward, Phase::Backward, Phase::BackwardInput, Phase::BackwardWeight})
    if (!st.of(p).empty()) parts.push_back(spread(sim::phase_letter(p), st.of(p)));
  nlohmann::ordered_json stage;
  stage["description"] = fmt::format("measured in {}: {}{}", join(st.sources), join(parts),
                                     split && !st.of(Phase::Backward).empty() ? " (B ignored: I and W given)" : "");
  stage["profile"] = nlohmann::ordered_json::array({e});
  return stage;
}

}  // namespace

// ---- public ----------------------------------------------------------------------

ActionPattern torch_action_pattern() { return {std::nullopt, 1, 2, 3, "PP:<stage><type><microbatch>"}; }

ActionPattern parse_action_pattern(const std::string& regex, const std::string& option) {
  const GroupNames g = strip_group_names(regex);
  ActionPattern p;
  p.text = regex;
  try {
    p.regex.emplace(g.plain, std::regex::ECMAScript);
  } catch (const std::regex_error& e) {
    throw InputError(fmt::format("{}: invalid regular expression '{}': {}", option, regex, e.what()));
  }
  const int groups = static_cast<int>(p.regex->mark_count());
  if (!g.index.empty()) {
    for (const char* name : {"stage", "type", "microbatch"})
      if (!g.index.count(name))
        throw InputError(fmt::format("{}: '{}' names groups but not (?<{}>...): name stage, type and microbatch",
                                     option, regex, name));
    p.stage_group = g.index.at("stage");
    p.type_group = g.index.at("type");
    p.micro_batch_group = g.index.at("microbatch");
  } else if (groups < 3) {
    throw InputError(fmt::format("{}: '{}' has {} capture group{}: give three (stage, type, microbatch, in this "
                                 "order) or name them (?<stage>...), (?<type>...), (?<microbatch>...)",
                                 option, regex, groups, groups == 1 ? "" : "s"));
  }
  if (std::max({p.stage_group, p.type_group, p.micro_batch_group}) > groups)
    throw InputError(fmt::format("{}: '{}': could not number its groups; use unnamed groups in the order stage, "
                                 "type, microbatch",
                                 option, regex));
  return p;
}

std::string maybe_gunzip(std::string text, const std::string& source) {
  if (!is_gzip(text)) return text;
  z_stream z{};
  if (inflateInit2(&z, 16 + MAX_WBITS) != Z_OK) gzip_fail(source, "cannot start zlib");
  z.next_in = reinterpret_cast<Bytef*>(text.data());
  z.avail_in = static_cast<uInt>(std::min<std::size_t>(text.size(), std::numeric_limits<uInt>::max()));
  if (z.avail_in != text.size()) {
    inflateEnd(&z);
    gzip_fail(source, "the compressed file is larger than 4 GiB");
  }
  std::string out;
  try {
    inflate_all(z, out, source);
  } catch (...) {
    inflateEnd(&z);
    throw;
  }
  inflateEnd(&z);
  return out;
}

KinetoRank parse_kineto(std::string text, const std::string& source, const ActionPattern& pattern) {
  const json doc = parse_json_text(maybe_gunzip(std::move(text), source), source);
  const Field events = trace_events(Field(doc, source));
  Scan scan;
  for (std::size_t i = 0; i < events.size(); ++i) read_event(events.at(i), i, pattern, scan);
  KinetoRank r;
  r.source = source;
  r.gpu = !scan.ops[1].empty() || !scan.overlaps[1].empty();
  r.ops = merge_overlapping(std::move(scan.ops[r.gpu]));
  split_overlaps(scan.overlaps[r.gpu], r.ops);
  r.overlapped = scan.overlaps[r.gpu].size();
  r.skipped = scan.skipped[r.gpu];
  r.transfers = std::move(scan.transfers);
  std::stable_sort(r.transfers.begin(), r.transfers.end(),
                   [](const KinetoTransfer& a, const KinetoTransfer& b) { return a.start_us < b.start_us; });
  if (r.ops.empty()) no_actions(source, pattern);
  return r;
}

KinetoRank load_kineto(const std::filesystem::path& path, const ActionPattern& pattern) {
  return parse_kineto(read_text_file(path), path.string(), pattern);
}

double median(std::vector<double> v) {
  std::sort(v.begin(), v.end());
  const std::size_t n = v.size();
  return n % 2 == 1 ? v[n / 2] : (v[n / 2 - 1] + v[n / 2]) / 2;
}

KinetoStages collect_stages(const std::vector<KinetoRank>& ranks) {
  using sim::Phase;
  KinetoStages out;
  std::set<int> micro_batches;
  for (const KinetoRank& r : ranks)
    for (const KinetoOp& op : r.ops) {
      if (op.stage >= static_cast<int>(out.stages.size())) out.stages.resize(op.stage + 1);
      StageSamples& st = out.stages[op.stage];
      micro_batches.insert(op.micro_batch);
      if (op.overlapped) continue;  // a share of an OVERLAP_F_B range, not a measurement
      st.seconds[static_cast<std::size_t>(op.phase)].push_back(op.duration_us / 1e6);
      const std::string source = utf8_safe(r.source);
      if (std::find(st.sources.begin(), st.sources.end(), source) == st.sources.end()) st.sources.push_back(source);
    }
  out.micro_batches = static_cast<int>(micro_batches.size());
  for (std::size_t s = 0; s < out.stages.size(); ++s) {
    const StageSamples& st = out.stages[s];
    auto fail = [&](std::string_view what) {
      throw InputError(fmt::format("{}: stage {}: {}", all_sources(ranks), s, what));
    };
    if (st.of(Phase::Forward).empty())
      fail(fmt::format("no F ranges of its own, outside OVERLAP_F_B ranges (stages 0 to {} need one each; is a "
                       "rank's file missing?)",
                       out.stages.size() - 1));
    if (st.of(Phase::BackwardInput).empty() != st.of(Phase::BackwardWeight).empty())
      fail("I ranges without W ranges, or W without I: give both halves of the split backward");
    if (st.of(Phase::Backward).empty() && st.of(Phase::BackwardInput).empty())
      fail("no backward ranges (B, or I and W): a training step is needed");
    if (!st.of(Phase::BackwardInput).empty() &&
        median(st.of(Phase::BackwardInput)) + median(st.of(Phase::BackwardWeight)) > sim::kMaxTime)
      fail(fmt::format("the medians of I and W add up to more than {} s, the longest duration an input may give",
                       sim::kMaxTime));
  }
  return out;
}

nlohmann::ordered_json kineto_pipeline(const KinetoStages& stages, const PipelineOptions& options) {
  nlohmann::ordered_json doc;
  if (!options.name.empty()) doc["name"] = options.name;
  doc["description"] = fmt::format(
      "Imported by `adagrouper trace import-kineto` from PyTorch profiler traces: each duration is the median of "
      "the stage's measured ranges at micro-batch size {} ({} micro-batches seen); activation_bytes and "
      "output_bytes are 0 because profiler traces do not record them: fill them in before planning with memory "
      "or network limits.",
      options.micro_batch_size, stages.micro_batches);
  doc["global_batch_size"] = options.global_batch_size > 0 ? options.global_batch_size
                                                           : options.micro_batch_size * stages.micro_batches;
  doc["stages"] = nlohmann::ordered_json::array();
  for (std::size_t s = 0; s < stages.stages.size(); ++s)
    doc["stages"].push_back(stage_json(stages.stages[s], options.micro_batch_size, s + 1 == stages.stages.size()));
  return doc;
}

std::string kineto_stage_trace(const std::vector<KinetoRank>& ranks) {
  std::string out = "iteration,stage,micro_batch,phase,duration_s\n";
  std::set<int> taken;
  for (const KinetoRank& r : ranks) {
    std::set<int> here;
    std::map<std::tuple<int, sim::Phase, int>, int> seen;
    for (const KinetoOp& op : r.ops) {
      if (taken.count(op.stage)) continue;
      here.insert(op.stage);
      const int iteration = seen[std::tuple(op.stage, op.phase, op.micro_batch)]++;
      out += fmt::format("{},{},{},{},{}\n", iteration, op.stage, op.micro_batch, sim::phase_letter(op.phase),
                         op.duration_us / 1e6);
    }
    taken.insert(here.begin(), here.end());
  }
  return out;
}

std::string kineto_transfer_samples(const std::vector<KinetoRank>& ranks) {
  std::vector<KinetoTransfer> all;
  for (const KinetoRank& r : ranks)
    for (const KinetoTransfer& t : r.transfers) {
      if (!t.bytes)
        throw InputError(fmt::format("{}: traceEvents[{}]: the NCCL kernel's args give no byte count (\"bytes\", or "
                                     "\"In msg nelems\"/\"Out msg nelems\" with \"dtype\"): cannot write transfer "
                                     "samples",
                                     r.source, t.event));
      if (t.duration_us > 0) all.push_back(t);
    }
  if (all.empty())
    throw InputError(fmt::format("{}: no NCCL send/recv kernels (ncclKernel_SendRecv, ncclDevKernel_SendRecv, ...) "
                                 "of non-zero duration: no transfer samples to write",
                                 all_sources(ranks)));
  std::stable_sort(all.begin(), all.end(),
                   [](const KinetoTransfer& a, const KinetoTransfer& b) { return a.start_us < b.start_us; });
  std::string out = "time_s,bytes,duration_s\n";
  for (const KinetoTransfer& t : all)
    out += fmt::format("{},{},{}\n", (t.start_us - all.front().start_us) / 1e6, *t.bytes, t.duration_us / 1e6);
  return out;
}

}  // namespace adagrouper::traces
