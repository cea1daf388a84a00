// Reading and writing trace files: CSV, the project's JSON, iperf3 --json, SimGrid
// profiles, transfer samples, and the row-oriented stage-trace and sample CSVs.
#include "formats.h"

#include <algorithm>
#include <array>
#include <charconv>
#include <cmath>
#include <cstring>
#include <iterator>
#include <stdexcept>
#include <system_error>
#include <vector>

#include <fmt/format.h>
#include <nlohmann/json.hpp>

#include "detail.h"
#include "error.h"
#include "json_util.h"

namespace adagrouper::traces {

namespace {

constexpr std::array<std::pair<Format, std::string_view>, 5> kFormats{{
    {Format::csv, "csv"},
    {Format::json, "json"},
    {Format::iperf3, "iperf3"},
    {Format::simgrid, "simgrid"},
    {Format::samples, "samples"},
}};

[[noreturn]] void fail_line(const std::string& source, std::size_t line, std::string_view what) {
  throw InputError(fmt::format("{}:{}: {}", source, line, what));
}

std::string_view trim(std::string_view s) {
  std::size_t b = 0, e = s.size();
  while (b < e && (s[b] == ' ' || s[b] == '\t' || s[b] == '\r' || s[b] == '\f' || s[b] == '\v')) ++b;
  while (e > b && (s[e - 1] == ' ' || s[e - 1] == '\t' || s[e - 1] == '\r' || s[e - 1] == '\f' || s[e - 1] == '\v'))
    --e;
  return s.substr(b, e - b);
}

// The text without a leading UTF-8 byte order mark.
std::string_view without_bom(std::string_view text) {
  return text.substr(0, 3) == "\xEF\xBB\xBF" ? text.substr(3) : text;
}

// Lines of a text, numbered from 1, trimmed.
class Lines {
 public:
  explicit Lines(std::string_view text) : text_(text) {}
  bool next(std::string_view& line) {
    if (pos_ >= text_.size()) return false;
    const char* start = text_.data() + pos_;
    const void* nl = std::memchr(start, '\n', text_.size() - pos_);
    const std::size_t len = nl ? static_cast<std::size_t>(static_cast<const char*>(nl) - start) : text_.size() - pos_;
    line = trim(std::string_view(start, len));
    pos_ += len + 1;
    ++number_;
    return true;
  }
  std::size_t number() const { return number_; }

 private:
  std::string_view text_;
  std::size_t pos_ = 0;
  std::size_t number_ = 0;
};

// Parses a whole field as a number. Returns an error description, or "" on success.
std::string_view to_number(std::string_view s, double& out) {
  if (s.empty()) return "empty";
  if (s.front() == '+') s.remove_prefix(1);
  const char* first = s.data();
  const char* last = s.data() + s.size();
  const auto r = std::from_chars(first, last, out, std::chars_format::general);
  if (r.ec == std::errc::result_out_of_range) return "out of range";
  if (r.ec != std::errc() || r.ptr != last) return "not a number";
  if (std::isnan(out)) return "NaN";
  if (std::isinf(out)) return "infinite";
  return {};
}

// Splits a CSV line on commas (no quoting: every field is a number or a header word).
std::size_t split_commas(std::string_view line, std::array<std::string_view, 8>& fields) {
  std::size_t n = 0;
  for (;;) {
    const std::size_t c = line.find(',');
    const std::string_view f = trim(line.substr(0, c));
    if (n < fields.size()) fields[n] = f;
    ++n;
    if (c == std::string_view::npos) break;
    line.remove_prefix(c + 1);
  }
  return n;
}

bool is_comment(std::string_view line, bool percent_too) {
  return !line.empty() && (line.front() == '#' || (percent_too && line.front() == '%'));
}

// ---------------------------------------------------------------------------------
// CSV (time_s,value) and transfer samples (time_s,bytes,duration_s)

// Data lines (neither blank nor comments) of a text: at least its points, counted before
// anything is allocated for them. Refuses more than a trace may hold.
std::size_t check_points(std::string_view text, const std::string& source, bool percent_too) {
  Lines lines(text);
  std::string_view line;
  std::size_t n = 0;
  while (lines.next(line)) n += !line.empty() && !is_comment(line, percent_too);
  if (n > kMaxPoints + 1)  // + 1: a header line
    throw InputError(fmt::format("{}: {} data lines, more than the {} points a trace may have (reading them would "
                                 "take about {:.1f} GiB)",
                                 source, n, kMaxPoints, static_cast<double>(n) * 24.0 / (1 << 30)));
  return n;
}

// The value a row gives: the CSV's value, or a transfer sample's effective rate.
double row_value(const std::array<double, 3>& v, const std::string& source, std::size_t ln, const LoadOptions& opt,
                 bool samples) {
  if (!samples) {
    if (v[1] < 0) fail_line(source, ln, fmt::format("value: must be >= 0, got {}", v[1]));
    if (const std::string e = sim::rate_error(v[1]); !e.empty()) fail_line(source, ln, "value: " + e);
    return v[1];
  }
  if (v[1] < 0) fail_line(source, ln, fmt::format("bytes: must be >= 0, got {}", v[1]));
  const double net = v[2] - opt.latency_s;
  if (!(net > 0))
    fail_line(source, ln,
              opt.latency_s > 0
                  ? fmt::format("duration_s: {} is not larger than the latency {} s: no effective rate", v[2],
                                opt.latency_s)
                  : fmt::format("duration_s: must be > 0, got {}", v[2]));
  if (const std::string e = sim::time_error(v[2]); !e.empty()) fail_line(source, ln, "duration_s: " + e);
  const double value = v[1] / net;
  if (!std::isfinite(value)) fail_line(source, ln, "the effective rate bytes / (duration_s - latency) overflows");
  if (const std::string e = sim::rate_error(value); !e.empty())
    fail_line(source, ln, "the effective rate bytes / (duration_s - latency): " + e);
  return value;
}

Loaded parse_csv_like(std::string_view text, const std::string& source, const LoadOptions& opt, bool samples) {
  const std::size_t columns = samples ? 3 : 2;
  const char* const layout = samples ? "time_s,bytes,duration_s" : "time_s,value";
  const std::array<const char*, 3> names = samples ? std::array<const char*, 3>{"time_s", "bytes", "duration_s"}
                                                   : std::array<const char*, 3>{"time_s", "value", ""};
  TraceBuilder b;
  b.reserve(check_points(text, source, false));
  Lines lines(text);
  std::string_view line;
  std::array<std::string_view, 8> fields;
  bool first_row = true, seen_content = false;
  double origin = 0.0, prev_time = 0.0, prev_rel = 0.0, span = 0.0;
  std::size_t prev_line = 0;
  while (lines.next(line)) {
    if (line.empty() || is_comment(line, false)) continue;
    const std::size_t n = split_commas(line, fields);
    const std::size_t ln = lines.number();
    if (n != columns)
      fail_line(source, ln, fmt::format("expected {} columns ({}), got {}", columns, layout, n));
    if (!seen_content) {
      seen_content = true;
      double ignored = 0;
      if (to_number(fields[0], ignored) == "not a number") continue;  // a header line
    }
    std::array<double, 3> v{};
    for (std::size_t i = 0; i < columns; ++i) {
      const std::string_view err = to_number(fields[i], v[i]);
      if (err.empty()) continue;
      if (err == "not a number")
        fail_line(source, ln, fmt::format("{}: not a number: \"{}\"", names[i], fields[i]));
      fail_line(source, ln, fmt::format("{}: {} is not allowed (\"{}\")", names[i], err, fields[i]));
    }
    const double t = v[0];
    if (first_row) {
      if (samples || opt.rebase) {
        origin = t;
      } else if (t != 0.0) {
        fail_line(source, ln,
                  fmt::format("time_s: the first time must be 0, got {} (shift the times, or import the "
                              "file with `adagrouper trace import --rebase`)",
                              t));
      }
    } else if (!(t > prev_time)) {
      fail_line(source, ln,
                t == prev_time ? fmt::format("time_s: {} repeats the time of line {}", t, prev_line)
                               : fmt::format("time_s: {} goes backwards (line {} has {})", t, prev_line, prev_time));
    }
    const double value = row_value(v, source, ln, opt, samples);
    const double rel = t - origin;
    if (!first_row && !(rel > prev_rel))  // two absolute times that rebasing made equal
      fail_line(source, ln, fmt::format("time_s: {} is too close to the previous time to be told apart", t));
    if (const std::string e = sim::time_error(rel); !e.empty()) fail_line(source, ln, "time_s: " + e);
    if (!first_row)
      if (const std::string e = sim::gap_error(prev_rel, rel); !e.empty()) fail_line(source, ln, "time_s: " + e);
    try {
      b.add(rel, value);
    } catch (const std::length_error&) {
      fail_line(source, ln, fmt::format("more than {} points", kMaxPoints));
    }
    prev_time = t;
    prev_rel = rel;
    prev_line = ln;
    span = samples ? rel + v[2] : rel;
    first_row = false;
  }
  if (first_row) throw InputError(fmt::format("{}: no data rows ({}): the trace is empty", source, layout));
  if (const std::string e = sim::time_error(span); !e.empty())
    fail_line(source, prev_line, "the last transfer ends at " + e);
  return {b.finish(span), samples ? Format::samples : Format::csv};
}

// ---------------------------------------------------------------------------------
// SimGrid profiles: "date value" lines, PERIODICITY / LOOPAFTER, '#' and '%' comments

// The blank-separated words of a line: the first four, and how many there are.
struct Words {
  std::array<std::string_view, 4> at;
  std::size_t count = 0;
};

Words split_blanks(std::string_view line) {
  Words w;
  while (!line.empty()) {
    std::size_t e = 0;
    while (e < line.size() && line[e] != ' ' && line[e] != '\t') ++e;
    if (w.count < w.at.size()) w.at[w.count] = line.substr(0, e);
    ++w.count;
    line = trim(line.substr(e));
  }
  return w;
}

// How a SimGrid profile repeats: PERIODICITY or LOOPAFTER (at most one of them).
class SimgridLoop {
 public:
  static bool is_directive(const Words& w) { return w.at[0] == "PERIODICITY" || w.at[0] == "LOOPAFTER"; }

  void read(const Words& w, const std::string& source, std::size_t ln) {
    if (w.count != 2) fail_line(source, ln, fmt::format("{} takes one number", w.at[0]));
    if (line_)
      fail_line(source, ln, fmt::format("a second PERIODICITY / LOOPAFTER (the first is on line {})", line_));
    double x = 0;
    const std::string_view err = to_number(w.at[1], x);
    if (!err.empty()) fail_line(source, ln, fmt::format("{}: {}: \"{}\"", w.at[0], err, w.at[1]));
    if (w.at[0] == "PERIODICITY") {
      if (!(x > 0)) fail_line(source, ln, fmt::format("PERIODICITY: must be > 0, got {}", x));
      if (const std::string e = sim::period_error(x); !e.empty()) fail_line(source, ln, "PERIODICITY: " + e);
      periodicity_ = x;
    } else {
      if (x < 0) fail_line(source, ln, fmt::format("LOOPAFTER: must be >= 0, got {}", x));
      if (const std::string e = sim::time_error(x); !e.empty()) fail_line(source, ln, "LOOPAFTER: " + e);
      loop_after_ = x;
    }
    line_ = ln;
  }

  // The period of a profile whose last date is `last` (0: it does not repeat).
  double period(double last, const std::string& source) const {
    if (periodicity_ > 0) {
      if (periodicity_ < last)
        fail_line(source, line_, fmt::format("PERIODICITY {} is shorter than the last date {}", periodicity_, last));
      if (periodicity_ > last)
        if (const std::string e = sim::gap_error(last, periodicity_); !e.empty())
          fail_line(source, line_, "PERIODICITY " + e);
      return periodicity_;
    }
    if (loop_after_ < 0) return 0.0;
    const double period = last + loop_after_;
    if (!(period > 0)) fail_line(source, line_, "LOOPAFTER 0 after a single date at 0: the period is 0");
    if (const std::string e = sim::period_error(period); !e.empty())
      fail_line(source, line_, "LOOPAFTER: the period (the last date + LOOPAFTER) " + e);
    if (period > last)
      if (const std::string e = sim::gap_error(last, period); !e.empty()) fail_line(source, line_, "LOOPAFTER: " + e);
    return period;
  }

 private:
  double periodicity_ = -1, loop_after_ = -1;
  std::size_t line_ = 0;  // of the directive; 0: none
};

// One "date value" line.
std::pair<double, double> simgrid_point(const Words& w, const std::string& source, std::size_t ln) {
  const std::string_view first = w.at[0];
  if (first == "STOCHASTIC" || first == "DET" || first == "NORM" || first == "UNIF" || first == "EXP")
    fail_line(source, ln,
              fmt::format("stochastic SimGrid profiles ({}) are not supported; use an adagrouper pattern "
                          "(onoff, contention) instead",
                          first));
  if (w.count != 2) fail_line(source, ln, fmt::format("expected \"date value\", got {} fields", w.count));
  double date = 0, value = 0;
  std::string_view err = to_number(w.at[0], date);
  if (!err.empty()) fail_line(source, ln, fmt::format("date: {}: \"{}\"", err, w.at[0]));
  err = to_number(w.at[1], value);
  if (!err.empty()) fail_line(source, ln, fmt::format("value: {}: \"{}\"", err, w.at[1]));
  if (value < 0) fail_line(source, ln, fmt::format("value: must be >= 0, got {}", value));
  if (const std::string e = sim::rate_error(value); !e.empty()) fail_line(source, ln, "value: " + e);
  return {date, value};
}

Loaded parse_simgrid(std::string_view text, const std::string& source, const LoadOptions& opt) {
  TraceBuilder b;
  b.reserve(check_points(text, source, true));
  Lines lines(text);
  std::string_view line;
  SimgridLoop loop;
  bool first = true;
  double origin = 0.0, prev = 0.0;
  while (lines.next(line)) {
    if (line.empty() || is_comment(line, true)) continue;
    const std::size_t ln = lines.number();
    const Words words = split_blanks(line);
    if (SimgridLoop::is_directive(words)) {
      loop.read(words, source, ln);
      continue;
    }
    const auto [date, value] = simgrid_point(words, source, ln);
    if (first) {
      if (opt.rebase) {
        origin = date;
      } else if (date != 0.0) {
        fail_line(source, ln,
                  fmt::format("the first date is {}; before it SimGrid would use the platform's nominal value, "
                              "which this file does not give: add a line \"0 VALUE\" (or import with --rebase)",
                              date));
      }
    } else if (date < prev) {
      fail_line(source, ln, fmt::format("date {} goes backwards (after {})", date, prev));
    } else if (date > prev) {  // an equal date replaces the previous value
      if (const std::string e = sim::gap_error(prev - origin, date - origin); !e.empty())
        fail_line(source, ln, "date " + e);
    }
    if (const std::string e = sim::time_error(date - origin); !e.empty()) fail_line(source, ln, "date " + e);
    prev = date;
    first = false;
    try {
      b.add(date - origin, value);  // an equal date replaces the previous value, as in SimGrid
    } catch (const std::length_error&) {
      fail_line(source, ln, fmt::format("more than {} points", kMaxPoints));
    }
  }
  if (first) throw InputError(fmt::format("{}: no \"date value\" lines: the trace is empty", source));
  const double last = prev - origin;
  return {b.finish(last, loop.period(last, source)), Format::simgrid};
}

// ---------------------------------------------------------------------------------
// iperf3 --json

bool looks_like_iperf3(const nlohmann::json& doc) {
  return doc.is_object() && (doc.contains("intervals") || doc.contains("error") ||
                             (doc.contains("start") && doc.contains("end")));
}

Loaded parse_iperf3(const nlohmann::json& doc, const std::string& source) {
  Field root(doc, source);
  root.require_object();
  if (root.has("error")) {
    const auto& e = doc["error"];
    throw InputError(fmt::format("{}: error: iperf3 reported an error: \"{}\"", source,
                                 e.is_string() ? utf8_safe(e.get<std::string>()) : describe_json(e)));
  }
  const Field intervals = root.at("intervals");
  const std::size_t n = intervals.size();
  TraceBuilder b;
  b.reserve(n);
  bool first = true;
  double origin = 0.0, prev_start = 0.0, last_end = 0.0;
  for (std::size_t i = 0; i < n; ++i) {
    const Field iv = intervals.at(i);
    iv.require_object();
    const Field sum = iv.at("sum");
    sum.require_object();
    if (sum.has("omitted") && sum.at("omitted").boolean()) continue;
    const double start = sim::read_time(sum.at("start"));
    const double end = sim::read_time(sum.at("end"));
    if (!(end > start)) sum.at("end").fail(fmt::format("must be larger than start {}, got {}", start, end));
    const double bps = sum.at("bits_per_second").non_negative();
    if (const std::string e = sim::rate_error(bps / 8.0); !e.empty()) sum.at("bits_per_second").fail("/ 8: " + e);
    if (first) {
      origin = start;
    } else if (!(start > prev_start)) {
      sum.at("start").fail(fmt::format("goes backwards ({} after {})", start, prev_start));
    } else if (const std::string e = sim::gap_error(prev_start, start); !e.empty()) {
      sum.at("start").fail(e);
    }
    prev_start = start;
    last_end = end;
    first = false;
    b.add(start - origin, bps / 8.0);
  }
  if (first) intervals.fail("no measured (non-omitted) intervals: the trace is empty");
  return {b.finish(last_end - origin), Format::iperf3};
}

// The project's JSON: a rate form with an optional "unit" (taken out of the document).
Trace parse_project_json(nlohmann::json doc, const std::string& source, const std::filesystem::path& base_dir,
                         int depth, detail::TraceCache* cache) {
  Field root(doc, source);
  root.require_object();
  double factor = 1.0;
  std::string_view plain;  // why rates with units are refused: they would be converted twice
  std::string_view multiplier;  // set when the values are multipliers
  if (root.has("unit")) {
    const std::string unit = root.at("unit").string();
    if (unit == "bits_per_s") {
      factor = 1.0 / 8.0;
      plain = "the trace's \"unit\" is \"bits_per_s\"; leave \"unit\" out to give rates with units";
    } else if (unit == "factor") {
      plain = multiplier = "the trace's \"unit\" is \"factor\", a multiplier";
    } else if (unit != "bytes_per_s") {
      root.at("unit").fail(fmt::format("unknown unit \"{}\" (bytes_per_s, bits_per_s or factor)", unit));
    }
    doc.erase("unit");
  }
  Trace t = detail::resolve(Field(doc, source).plain_rates(plain), base_dir, depth + 1, cache);
  t.factor = !multiplier.empty();
  return factor == 1.0 ? t : scale(t, factor);
}

// A JSON trace's document, refused before parsing when it holds more arrays (a point is
// one) than a trace may have points.
nlohmann::json trace_json(std::string_view text, const std::string& source) {
  const auto arrays = static_cast<std::size_t>(std::count(text.begin(), text.end(), '['));
  if (arrays > kMaxPoints + 16)
    throw InputError(fmt::format("{}: {} arrays, more points than the {} a trace may have", source, arrays,
                                 kMaxPoints));
  return adagrouper::parse_json_text(text, source);
}

std::string fmt_num(double v) { return fmt::format("{}", v); }

}  // namespace

std::string_view format_name(Format f) {
  for (const auto& [k, name] : kFormats)
    if (k == f) return name;
  return "?";
}

std::optional<Format> format_from_name(std::string_view name) {
  for (const auto& [k, n] : kFormats)
    if (n == name) return k;
  return std::nullopt;
}

std::string format_names() {
  std::string out;
  for (const auto& [format, name] : kFormats) out += fmt::format("{}{}", out.empty() ? "" : ", ", name);
  return out;
}

Format detect_format(std::string_view text, const std::string& source) {
  Lines lines(text);
  std::string_view line;
  while (lines.next(line)) {
    if (line.empty() || is_comment(line, true)) continue;
    if (line.front() == '{' || line.front() == '[') return Format::json;  // json or iperf3: see parse_text
    if (line.rfind("PERIODICITY", 0) == 0 || line.rfind("LOOPAFTER", 0) == 0 || line.rfind("STOCHASTIC", 0) == 0)
      return Format::simgrid;
    if (line.find(',') != std::string_view::npos) {
      std::array<std::string_view, 8> fields;
      const std::size_t n = split_commas(line, fields);
      if (n == 2) return Format::csv;
      if (n == 3) return Format::samples;
      fail_line(source, lines.number(),
                fmt::format("cannot tell the trace format: {} comma-separated columns (CSV has 2: time_s,value; "
                            "transfer samples have 3: time_s,bytes,duration_s)",
                            n));
    }
    std::size_t words = 0;
    bool in_word = false;
    for (char c : line) {
      const bool blank = c == ' ' || c == '\t';
      if (!blank && !in_word) ++words;
      in_word = !blank;
    }
    if (words == 2) return Format::simgrid;
    fail_line(source, lines.number(),
              fmt::format("cannot tell the trace format from this line; set \"format\" ({})", format_names()));
  }
  throw InputError(fmt::format("{}: the file is empty (no data lines): cannot read a trace from it", source));
}

namespace detail {

Loaded parse_text(std::string_view text, const std::string& source, const LoadOptions& options,
                  const std::filesystem::path& base_dir, int depth, TraceCache* cache) {
  text = without_bom(text);
  const Format f = options.format ? *options.format : detect_format(text, source);
  switch (f) {
    case Format::csv:
      return parse_csv_like(text, source, options, false);
    case Format::samples:
      return parse_csv_like(text, source, options, true);
    case Format::simgrid:
      return parse_simgrid(text, source, options);
    case Format::iperf3:
      return parse_iperf3(trace_json(text, source), source);
    case Format::json: {
      nlohmann::json doc = trace_json(text, source);
      // Detection cannot tell iperf3's JSON from ours by the first line.
      if (!options.format && looks_like_iperf3(doc)) return parse_iperf3(doc, source);
      return {parse_project_json(std::move(doc), source, base_dir, depth, cache), Format::json};
    }
  }
  throw InputError(fmt::format("{}: unknown format", source));
}

Loaded load_file(const std::filesystem::path& path, const LoadOptions& options, int depth, TraceCache* cache) {
  return parse_text(read_text_file(path), path.string(), options, path.parent_path(), depth, cache);
}

}  // namespace detail

Loaded parse_trace(std::string_view text, const std::string& source, const LoadOptions& options,
                   const std::filesystem::path& base_dir) {
  return detail::parse_text(text, source, options, base_dir, 0);
}

Loaded load_trace_file(const std::filesystem::path& path, const LoadOptions& options) {
  return detail::load_file(path, options, 0);
}

// ---------------------------------------------------------------------------------
// Writers

namespace {
// The points to write: the trace's, plus the end point when span_s > the last time.
bool needs_end_point(const Trace& t) { return !t.repeats() && t.span_s > t.rate.times().back(); }
}  // namespace

std::string to_csv(const Trace& trace) {
  const auto& ts = trace.rate.times();
  const auto& vs = trace.rate.values();
  fmt::memory_buffer out;
  out.reserve(ts.size() * 24 + 128);
  if (trace.repeats()) {
    fmt::format_to(std::back_inserter(out),
                   "# one period of a trace that repeats every {} s (CSV cannot say so: refer to this file "
                   "with \"repeat\": true)\n",
                   fmt_num(trace.rate.repeat_s()));
  }
  fmt::format_to(std::back_inserter(out), "time_s,value\n");
  for (std::size_t i = 0; i < ts.size(); ++i) fmt::format_to(std::back_inserter(out), "{},{}\n", ts[i], vs[i]);
  if (trace.repeats() || needs_end_point(trace))
    fmt::format_to(std::back_inserter(out), "{},{}\n", trace.span_s, vs.back());
  return fmt::to_string(out);
}

nlohmann::json to_json(const Trace& trace) {
  const auto& ts = trace.rate.times();
  const auto& vs = trace.rate.values();
  nlohmann::json points = nlohmann::json::array();
  for (std::size_t i = 0; i < ts.size(); ++i) points.push_back({ts[i], vs[i]});
  if (needs_end_point(trace)) points.push_back({trace.span_s, vs.back()});
  nlohmann::json doc = {{"unit", "bytes_per_s"}, {"points", std::move(points)}};
  if (trace.repeats()) doc["repeat_s"] = trace.rate.repeat_s();
  return doc;
}

std::string to_json_text(const Trace& trace) {
  const auto& ts = trace.rate.times();
  const auto& vs = trace.rate.values();
  // One point per line: readable and diffable, unlike dump(2) (three lines a point).
  auto num = [](double v) { return nlohmann::json(v).dump(); };
  fmt::memory_buffer out;
  out.reserve(ts.size() * 32 + 128);
  fmt::format_to(std::back_inserter(out), "{{\"unit\": \"bytes_per_s\",\n \"points\": [");
  auto point = [&](double t, double v, bool first) {
    fmt::format_to(std::back_inserter(out), "{}\n  [{}, {}]", first ? "" : ",", num(t), num(v));
  };
  for (std::size_t i = 0; i < ts.size(); ++i) point(ts[i], vs[i], i == 0);
  if (needs_end_point(trace)) point(trace.span_s, vs.back(), false);
  fmt::format_to(std::back_inserter(out), "]");
  if (trace.repeats()) fmt::format_to(std::back_inserter(out), ",\n \"repeat_s\": {}", num(trace.rate.repeat_s()));
  fmt::format_to(std::back_inserter(out), "}}\n");
  return fmt::to_string(out);
}

// ---------------------------------------------------------------------------------
// Row-oriented CSV files: stage timing traces and raw transfer samples.

namespace {

// Calls row(line_number, fields) for every data row of a CSV file with `columns`
// columns (blank lines, # comments and a header line skipped).
template <class Row>
void for_each_row(std::string_view text, const std::string& source, std::size_t columns, const char* layout,
                  Row&& row) {
  text = without_bom(text);
  Lines lines(text);
  std::string_view line;
  std::array<std::string_view, 8> fields;
  bool seen_content = false, any = false;
  while (lines.next(line)) {
    if (line.empty() || is_comment(line, false)) continue;
    const std::size_t n = split_commas(line, fields);
    const std::size_t ln = lines.number();
    if (n != columns) fail_line(source, ln, fmt::format("expected {} columns ({}), got {}", columns, layout, n));
    if (!seen_content) {
      seen_content = true;
      if (fields[0] == "iteration" || fields[0] == "time_s" || fields[0] == "channel") continue;  // header
    }
    any = true;
    row(ln, fields);
  }
  if (!any) throw InputError(fmt::format("{}: no data rows ({}): the file is empty", source, layout));
}

double number_field(const std::string& source, std::size_t ln, const char* name, std::string_view f) {
  double v = 0;
  const std::string_view err = to_number(f, v);
  if (err == "not a number") fail_line(source, ln, fmt::format("{}: not a number: \"{}\"", name, f));
  if (!err.empty()) fail_line(source, ln, fmt::format("{}: {} is not allowed (\"{}\")", name, err, f));
  return v;
}

int integer_field(const std::string& source, std::size_t ln, const char* name, std::string_view f) {
  const double v = number_field(source, ln, name, f);
  if (v != std::floor(v) || v < 0 || v > 2.0e9)
    fail_line(source, ln, fmt::format("{}: must be an integer >= 0, got \"{}\"", name, f));
  return static_cast<int>(v);
}

// The rows of a stage or message timing trace: iteration, stage, micro_batch, the phase
// as a letter (`letters`) or "forward" / "backward", and in column 5 the seconds of
// Timing's member `seconds`, named after it in `layout`'s last column.
template <class Timing>
std::vector<Timing> parse_timings(std::string_view text, const std::string& source, const char* layout,
                                  std::string_view letters, double Timing::*seconds) {
  const std::string_view layout_view(layout);
  const std::string what(layout_view.substr(layout_view.rfind(',') + 1));
  std::string list;
  for (const char c : letters) list += list.empty() ? std::string(1, c) : fmt::format(", {}", c);
  std::vector<Timing> out;
  out.reserve(check_points(without_bom(text), source, false));
  for_each_row(text, source, 5, layout, [&](std::size_t ln, const std::array<std::string_view, 8>& f) {
    Timing t;
    t.line = static_cast<int>(ln);
    t.iteration = integer_field(source, ln, "iteration", f[0]);
    t.stage = integer_field(source, ln, "stage", f[1]);
    t.micro_batch = integer_field(source, ln, "micro_batch", f[2]);
    const auto phase = f[3].size() == 1 && letters.find(f[3][0]) != std::string_view::npos
                           ? sim::phase_of_letter(f[3][0])
                           : std::nullopt;
    if (phase) {
      t.phase = *phase;
    } else if (f[3] == "forward" || f[3] == "backward") {
      t.phase = f[3] == "forward" ? sim::Phase::Forward : sim::Phase::Backward;
    } else {
      fail_line(source, ln, fmt::format("phase: must be {}, forward or backward, got \"{}\"", list, f[3]));
    }
    double& v = t.*seconds;
    v = number_field(source, ln, what.c_str(), f[4]);
    if (v < 0) fail_line(source, ln, fmt::format("{}: must be >= 0, got {}", what, v));
    if (const std::string e = sim::time_error(v); !e.empty()) fail_line(source, ln, fmt::format("{}: {}", what, e));
    out.push_back(t);
  });
  return out;
}

}  // namespace

std::vector<sim::OpTiming> parse_stage_trace(std::string_view text, const std::string& source) {
  return parse_timings(text, source, "iteration,stage,micro_batch,phase,duration_s", "FBIW",
                       &sim::OpTiming::duration_s);
}

std::vector<sim::OpTiming> load_stage_trace(const std::filesystem::path& path) {
  return parse_stage_trace(read_text_file(path), path.string());
}

std::vector<sim::MessageTiming> parse_message_trace(std::string_view text, const std::string& source) {
  return parse_timings(text, source, "iteration,stage,micro_batch,phase,latency_s", "FB",
                       &sim::MessageTiming::latency_s);
}

std::vector<sim::MessageTiming> load_message_trace(const std::filesystem::path& path) {
  return parse_message_trace(read_text_file(path), path.string());
}

std::vector<TransferSample> parse_transfer_samples(std::string_view text, const std::string& source) {
  text = without_bom(text);
  std::vector<TransferSample> out;
  out.reserve(check_points(text, source, false));
  // Three columns, or four with the channel first ("0->1").
  std::size_t columns = 3;
  {
    Lines lines(text);
    std::string_view line;
    std::array<std::string_view, 8> fields;
    while (lines.next(line)) {
      if (line.empty() || is_comment(line, false)) continue;
      columns = split_commas(line, fields) == 4 ? 4 : 3;
      break;
    }
  }
  const char* layout = columns == 4 ? "channel,time_s,bytes,duration_s" : "time_s,bytes,duration_s";
  double prev = -1;
  for_each_row(text, source, columns, layout, [&](std::size_t ln, const std::array<std::string_view, 8>& f) {
    TransferSample x;
    x.line = static_cast<int>(ln);
    std::size_t i = 0;
    if (columns == 4) {
      const std::string_view ch = f[0];
      const std::size_t arrow = ch.find("->");
      double from = -1, to = -1;
      if (arrow == std::string_view::npos || !to_number(trim(ch.substr(0, arrow)), from).empty() ||
          !to_number(trim(ch.substr(arrow + 2)), to).empty() || from < 0 || to < 0 || from != std::floor(from) ||
          to != std::floor(to) || from > 2.0e9 || to > 2.0e9)
        fail_line(source, ln, fmt::format("channel: must be FROM->TO, e.g. 0->1, got \"{}\"", ch));
      x.channel = std::pair{static_cast<int>(from), static_cast<int>(to)};
      i = 1;
    }
    x.time_s = number_field(source, ln, "time_s", f[i]);
    x.bytes = number_field(source, ln, "bytes", f[i + 1]);
    x.duration_s = number_field(source, ln, "duration_s", f[i + 2]);
    if (x.time_s < 0) fail_line(source, ln, fmt::format("time_s: must be >= 0, got {}", x.time_s));
    if (x.bytes < 0) fail_line(source, ln, fmt::format("bytes: must be >= 0, got {}", x.bytes));
    if (!(x.duration_s > 0)) fail_line(source, ln, fmt::format("duration_s: must be > 0, got {}", x.duration_s));
    if (const std::string e = sim::time_error(x.duration_s); !e.empty()) fail_line(source, ln, "duration_s: " + e);
    if (x.bytes > 1e18) fail_line(source, ln, fmt::format("bytes: must be <= 1e18, got {}", x.bytes));
    if (columns == 3 && x.time_s < prev)
      fail_line(source, ln, fmt::format("time_s: {} goes backwards (the previous sample has {})", x.time_s, prev));
    prev = x.time_s;
    out.push_back(x);
  });
  return out;
}

std::vector<TransferSample> load_transfer_samples(const std::filesystem::path& path) {
  return parse_transfer_samples(read_text_file(path), path.string());
}

}  // namespace adagrouper::traces
