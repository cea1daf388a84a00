// One run: its scenario, its simulation, its output row; the CSV and JSONL forms of a
// row, and reading an existing output back for resuming.
#include <fmt/format.h>

#include <algorithm>
#include <cmath>
#include <fstream>
#include <sstream>
#include <stdexcept>
#include <string>
#include <string_view>
#include <system_error>
#include <vector>

#include "json_util.h"
#include "sweep.h"
#include "traces.h"

namespace adagrouper::sweep {

namespace fs = std::filesystem;
using nlohmann::json;
using nlohmann::ordered_json;

// --- Inputs ------------------------------------------------------------------------------

Inputs::Inputs(const Study& study, std::span<const std::size_t> indices) : study_(&study) {
  std::vector<char> need_trace(study.traces.size(), 0);
  for (std::size_t i : indices) {
    const RunSpec& run = study.runs.at(i);
    if (run.trace >= 0) need_trace[static_cast<std::size_t>(run.trace)] = 1;
    const int stages = study.pipelines[static_cast<std::size_t>(run.pipeline)].pipeline.num_stages();
    const bool known = std::any_of(networks_.begin(), networks_.end(),
                                   [&](const NetworkEntry& e) { return e.network == run.network && e.stages == stages; });
    if (!known) networks_.push_back({run.network, stages, std::nullopt, {}});
  }

  const fs::path dir = fs::path(study.source).parent_path();
  traces_.resize(study.traces.size());
  for (std::size_t t = 0; t < study.traces.size(); ++t)
    if (need_trace[t])
      traces_[t] = std::make_shared<const sim::RateTrace>(
          traces::resolve_rate(Field(study.traces[t].doc, study.source, "trace"), dir).rate);

  // Each network file is read once, then bound to each stage count it is used with.
  std::vector<std::optional<sim::NetworkSpec>> specs(study.networks.size());
  std::vector<std::string> spec_errors(study.networks.size());
  for (NetworkEntry& e : networks_) {
    if (e.network < 0) {  // the trace alone: every channel gets it, no latency
      e.net = sim::Network::uniform(e.stages, 1.0);
      e.net->source = study.source;
      continue;
    }
    const auto n = static_cast<std::size_t>(e.network);
    const NetworkInput& in = study.networks[n];
    try {
      if (!specs[n] && spec_errors[n].empty()) specs[n] = sim::parse_network_spec(in.doc, in.source, traces::TraceRates());
      if (!specs[n]) throw InputError(spec_errors[n]);
      e.net = specs[n]->bind(e.stages);
    } catch (const InputError& err) {
      if (!specs[n]) spec_errors[n] = err.what();
      e.error = err.what();
    }
  }
  // A network that fails with every pipeline it is used with is the spec's fault.
  for (const NetworkEntry& e : networks_) {
    if (e.net) continue;
    const bool works_somewhere = std::any_of(networks_.begin(), networks_.end(), [&](const NetworkEntry& o) {
      return o.network == e.network && o.net.has_value();
    });
    if (!works_somewhere) throw InputError(e.error);
  }
}

const Inputs::NetworkEntry& Inputs::entry(int network, int stages) const {
  for (const NetworkEntry& e : networks_)
    if (e.network == network && e.stages == stages) return e;
  throw std::logic_error("sweep: a run's network was not prepared");
}

sim::Scenario Inputs::scenario(const RunSpec& run) const {
  const sim::Pipeline& pipeline = study_->pipelines[static_cast<std::size_t>(run.pipeline)].pipeline;
  const int stages = pipeline.num_stages();
  const NetworkEntry& e = entry(run.network, stages);
  if (!e.net) throw InputError(e.error);
  const int b = run.micro_batch_size;
  pipeline.at(b, "micro_batch_size");  // b divides B and lies in every profile
  const int M = pipeline.global_batch_size / b;
  if (run.k && *run.k > M)
    throw InputError(
        fmt::format("k: group size {} exceeds M = {} micro-batches (global_batch_size {} / "
                    "micro_batch_size {})",
                    *run.k, M, pipeline.global_batch_size, b));
  sim::Network net = *e.net;
  if (run.trace >= 0) {  // the trace replaces every rate
    const sim::RatePtr& rate = traces_[static_cast<std::size_t>(run.trace)];
    net.rewrite_channels([&](sim::ChannelSpec& ch) { ch.rate = rate; });
  }
  sim::Scenario sc =
      sim::make_scenario(pipeline, std::move(net), sim::make_named(run.schedule, stages, M, run.k), b, run.iterations);
  sc.start_time_s = run.start_time_s;
  return sc;
}

// --- rows ----------------------------------------------------------------------------------

double percentile(std::vector<double> values, int p) {
  if (values.empty()) return 0.0;
  std::sort(values.begin(), values.end());
  const std::size_t n = values.size();
  std::size_t rank = (static_cast<std::size_t>(p) * n + 99) / 100;  // ceil(p n / 100)
  rank = std::clamp<std::size_t>(rank, 1, n);
  return values[rank - 1];
}

namespace {

constexpr const char* kInputColumns[] = {"id",         "index",        "pipeline", "network",
                                         "trace",      "schedule",     "k",        "micro_batch_size",
                                         "iterations", "start_time_s", "seed"};
constexpr const char* kResultColumns[] = {"micro_batches",
                                          "group_size",
                                          "mean_iteration_time_s",
                                          "p50_iteration_time_s",
                                          "p99_iteration_time_s",
                                          "total_time_s",
                                          "throughput_samples_per_s",
                                          "bubble_fraction",
                                          "peak_memory_bytes",
                                          "memory_limit_bytes",
                                          "fits_memory",
                                          "error"};

}  // namespace

std::vector<std::string> columns(const Study& study) {
  std::vector<std::string> out(std::begin(kInputColumns), std::end(kInputColumns));
  out.insert(out.end(), study.trace_columns.begin(), study.trace_columns.end());
  out.insert(out.end(), std::begin(kResultColumns), std::end(kResultColumns));
  return out;
}

ordered_json run_row(const Study& study, const Inputs& inputs, const RunSpec& run) {
  ordered_json row;
  row["id"] = run.id;
  row["index"] = run.index;
  row["pipeline"] = study.pipelines[static_cast<std::size_t>(run.pipeline)].label;
  row["network"] =
      run.network >= 0 ? ordered_json(study.networks[static_cast<std::size_t>(run.network)].label) : ordered_json();
  row["trace"] =
      run.trace >= 0 ? ordered_json(study.traces[static_cast<std::size_t>(run.trace)].label) : ordered_json();
  row["schedule"] = run.schedule;
  row["k"] = run.k ? ordered_json(*run.k) : ordered_json();
  row["micro_batch_size"] = run.micro_batch_size;
  row["iterations"] = run.iterations;
  row["start_time_s"] = run.start_time_s;
  row["seed"] = run.seed ? ordered_json(*run.seed) : ordered_json();
  for (std::size_t c = 0; c < study.trace_columns.size(); ++c) row[study.trace_columns[c]] = run.trace_params[c];
  for (const char* name : kResultColumns) row[name] = nullptr;
  try {
    const sim::Scenario sc = inputs.scenario(run);
    const sim::SimResult r = sim::simulate(sc);
    double peak = 0;
    for (const auto& s : r.stages) peak = std::max(peak, s.peak_memory_bytes);
    row["micro_batches"] = r.micro_batches;
    row["group_size"] = r.k;
    row["mean_iteration_time_s"] = r.mean_iteration_time_s();
    row["p50_iteration_time_s"] = percentile(r.iteration_times_s, 50);
    row["p99_iteration_time_s"] = percentile(r.iteration_times_s, 99);
    row["total_time_s"] = r.total_time_s;
    row["throughput_samples_per_s"] = r.throughput_samples_per_s();
    row["bubble_fraction"] = r.bubble_fraction();
    row["peak_memory_bytes"] = peak;
    if (r.memory_limit_bytes) row["memory_limit_bytes"] = *r.memory_limit_bytes;
    row["fits_memory"] = r.fits_memory();
  } catch (const InputError& e) {
    row["error"] = e.what();
  } catch (const SimError& e) {
    row["error"] = e.what();
  }
  return row;
}

// --- formats -------------------------------------------------------------------------------

Format format_for(const fs::path& output, const std::optional<std::string>& name) {
  if (name) {
    if (*name == "csv") return Format::csv;
    if (*name == "jsonl") return Format::jsonl;
    throw InputError(fmt::format("--output-format: must be csv or jsonl, got '{}'", *name));
  }
  const std::string ext = output.extension().string();
  if (ext == ".csv") return Format::csv;
  if (ext == ".jsonl" || ext == ".ndjson") return Format::jsonl;
  throw InputError(fmt::format(
      "--output: cannot tell the format from the name '{}' (.csv, .jsonl, .ndjson); give --output-format csv|jsonl",
      output.string()));
}

namespace {

std::string one_line(std::string s) {
  std::replace(s.begin(), s.end(), '\n', ' ');
  std::replace(s.begin(), s.end(), '\r', ' ');
  return s;
}

std::string dump(const ordered_json& v) { return v.dump(-1, ' ', false, ordered_json::error_handler_t::replace); }

std::string csv_cell(const ordered_json& v) {
  std::string s;
  if (v.is_null()) return s;
  if (v.is_string()) {
    s = one_line(v.get<std::string>());
  } else {
    s = dump(v);
    if (v.is_number() || v.is_boolean()) return s;
  }
  if (s.find_first_of(",\"") == std::string::npos && (s.empty() || (s.front() != ' ' && s.back() != ' '))) return s;
  std::string q = "\"";
  for (char c : s) {
    if (c == '"') q += '"';
    q += c;
  }
  return q + '"';
}

}  // namespace

std::string csv_header(const std::vector<std::string>& columns) {
  std::string line;
  for (const auto& c : columns) line += (line.empty() ? "" : ",") + c;
  return line;
}

std::string format_row(const ordered_json& row, Format format) {
  if (format == Format::jsonl) return dump(row);
  std::string line;
  bool first = true;
  for (const auto& [key, value] : row.items()) {
    if (!first) line += ',';
    first = false;
    line += csv_cell(value);
  }
  return line;
}

std::vector<std::string> split_csv_line(const std::string& line) {
  std::vector<std::string> fields(1);
  bool quoted = false;
  for (std::size_t i = 0; i < line.size(); ++i) {
    const char c = line[i];
    if (quoted) {
      if (c == '"') {
        if (i + 1 < line.size() && line[i + 1] == '"') {
          fields.back() += '"';
          ++i;
        } else {
          quoted = false;
        }
      } else {
        fields.back() += c;
      }
    } else if (c == '"') {
      quoted = true;
    } else if (c == ',') {
      fields.emplace_back();
    } else {
      fields.back() += c;
    }
  }
  if (quoted) throw std::invalid_argument("unterminated quote");
  return fields;
}

// --- resuming --------------------------------------------------------------------------------

namespace {

// The text of an existing output.
std::string read_text(const fs::path& output) {
  std::ifstream in(output, std::ios::binary);
  if (!in) throw InputError(fmt::format("{}: cannot read the existing output", output.string()));
  std::ostringstream s;
  s << in.rdbuf();
  if (in.bad()) throw InputError(fmt::format("{}: cannot read the existing output", output.string()));
  return s.str();
}

// Whether `tail`, text after the last complete line of a file with no complete line,
// is the start of a line a sweep writes first: the CSV header, or a JSONL row.
bool starts_like_ours(std::string_view tail, Format format, const std::vector<std::string>& columns) {
  const std::string first = format == Format::csv ? csv_header(columns) + "\n" : std::string("{\"id\":\"");
  const std::size_t n = std::min(first.size(), tail.size());
  return tail.substr(0, n) == std::string_view(first).substr(0, n);
}

void check_csv_header(const std::string& line, const std::string& header, const std::string& name) {
  if (line != header)
    throw InputError(
        fmt::format("{}: line 1: its columns are not this spec's ({}); write to another file, or "
                    "delete it to start over",
                    name, header.size() > 120 ? header.substr(0, 117) + "..." : header));
}

// What resuming needs of a row: its run, and whether it is an error row.
struct RowKey {
  std::string id;
  bool error = false;
};

RowKey csv_row_key(const std::string& line, const std::string& name, int line_no, std::size_t columns) {
  std::vector<std::string> fields;
  try {
    fields = split_csv_line(line);
  } catch (const std::invalid_argument& e) {
    throw InputError(fmt::format("{}:{}: {}", name, line_no, e.what()));
  }
  if (fields.size() != columns)
    throw InputError(fmt::format("{}:{}: has {} fields, the header {}", name, line_no, fields.size(), columns));
  return {fields.front(), !fields.back().empty()};
}

RowKey jsonl_row_key(const std::string& line, const std::string& name, int line_no,
                     const std::vector<std::string>& columns) {
  const ordered_json row = ordered_json::parse(line, nullptr, false);
  bool same = row.is_object() && row.size() == columns.size();
  if (same) {
    std::size_t c = 0;
    for (const auto& [key, value] : row.items()) same = same && key == columns[c++];
  }
  if (!same)
    throw InputError(
        fmt::format("{}:{}: not a row of this spec (a JSON object with the keys {}, ..., error); "
                    "write to another file, or delete it to start over",
                    name, line_no, columns.front()));
  if (!row["id"].is_string()) throw InputError(fmt::format("{}:{}: id: must be a string", name, line_no));
  return {row["id"].get<std::string>(), !row["error"].is_null()};
}

}  // namespace

Existing scan_existing(const fs::path& output, Format format, const std::vector<std::string>& columns,
                       bool retry_errors) {
  Existing ex;
  if (!file_id(output)) return ex;
  ex.exists = true;
  const std::string name = output.string();
  const std::string file = read_text(output);
  const std::size_t nl = file.rfind('\n');
  ex.complete_bytes = nl == std::string::npos ? 0 : nl + 1;
  ex.truncated = ex.complete_bytes < file.size();
  const std::string_view content = std::string_view(file).substr(0, ex.complete_bytes);
  if (content.empty() && ex.truncated && !starts_like_ours(file, format, columns)) {
    if (format == Format::csv) check_csv_header(file, csv_header(columns), name);
    throw InputError(fmt::format("{}:1: not a row of this spec (a JSON object with the keys {}, ..., error); "
                                 "write to another file, or delete it to start over",
                                 name, columns.front()));
  }
  std::string kept;
  std::size_t pos = 0;
  int line_no = 0;
  while (pos < content.size()) {
    const std::size_t end = content.find('\n', pos);
    std::string line(content.substr(pos, end - pos));
    const std::string_view raw = content.substr(pos, end + 1 - pos);
    pos = end + 1;
    ++line_no;
    if (!line.empty() && line.back() == '\r') line.pop_back();
    if (format == Format::csv && line_no == 1) {
      check_csv_header(line, csv_header(columns), name);
      kept += raw;
      continue;
    }
    if (line.empty()) continue;
    const RowKey row = format == Format::csv ? csv_row_key(line, name, line_no, columns.size())
                                             : jsonl_row_key(line, name, line_no, columns);
    ++ex.rows;
    if (row.error) {
      ++ex.error_rows;
      if (retry_errors) continue;
    }
    ex.done.insert(row.id);
    kept += raw;
  }
  if (retry_errors && ex.error_rows > 0) {
    ex.without_errors = std::move(kept);
    ex.rows -= ex.error_rows;
  }
  return ex;
}

bool repair_existing(const fs::path& output, const Existing& existing) {
  if (existing.without_errors) {
    write_file_atomic(output, *existing.without_errors);
    return true;
  }
  if (existing.truncated) {
    std::error_code ec;
    fs::resize_file(output, existing.complete_bytes, ec);
    if (ec)
      throw std::runtime_error(fmt::format("{}: cannot cut off its partial last line: {}", output.string(), ec.message()));
  }
  return false;
}

Existing read_existing(const fs::path& output, Format format, const std::vector<std::string>& columns,
                       bool retry_errors) {
  Existing ex = scan_existing(output, format, columns, retry_errors);
  repair_existing(output, ex);
  return ex;
}

Shard parse_shard(const std::string& text) {
  const std::size_t slash = text.find('/');
  Shard s;
  try {
    if (slash == std::string::npos) throw std::invalid_argument("no slash");
    std::size_t used = 0;
    s.index = std::stoi(text.substr(0, slash), &used);
    if (used != slash) throw std::invalid_argument("index");
    const std::string count = text.substr(slash + 1);
    s.count = std::stoi(count, &used);
    if (used != count.size()) throw std::invalid_argument("count");
  } catch (const std::exception&) {
    throw InputError(fmt::format("--shard: must be i/n (e.g. 0/4), got '{}'", text));
  }
  if (s.count < 1 || s.index < 0 || s.index >= s.count)
    throw InputError(fmt::format("--shard: i/n needs n >= 1 and 0 <= i < n, got '{}'", text));
  return s;
}

}  // namespace adagrouper::sweep
