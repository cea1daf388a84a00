// Trace files: reading CSV, the project's JSON, iperf3 --json output, SimGrid profiles
// and calibration transfer samples; writing CSV and JSON. docs/formats.md, "Trace
// files and patterns", describes each format with an example.
//
// Every error is an InputError: "FILE:LINE: what is wrong" for the text formats,
// "FILE: field: what is wrong" for the JSON ones.
#pragma once

#include <filesystem>
#include <optional>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include <nlohmann/json_fwd.hpp>

#include "scenario.h"  // sim::OpTiming
#include "trace.h"

namespace adagrouper::traces {

enum class Format { csv, json, iperf3, simgrid, samples };

std::string_view format_name(Format f);
// nullopt for an unknown name.
std::optional<Format> format_from_name(std::string_view name);
// "csv, json, iperf3, simgrid, samples", for messages.
std::string format_names();

struct LoadOptions {
  std::optional<Format> format;  // nullopt: detect from the content
  double latency_s = 0.0;        // samples: effective rate = bytes / (duration - latency)
  bool rebase = false;           // csv, simgrid: times relative to the first row
};

struct Loaded {
  Trace trace;
  Format format;
};

// The format of `text`, from its first line that is neither blank nor a comment.
// Throws InputError naming `source` when it cannot tell.
Format detect_format(std::string_view text, const std::string& source);

// Parses a whole file's content. `source` names it in errors; base_dir resolves the
// {"file": ...} references a JSON trace may contain.
Loaded parse_trace(std::string_view text, const std::string& source, const LoadOptions& options = {},
                   const std::filesystem::path& base_dir = {});

// Reads and parses a file ("PATH: cannot open file" when it cannot be read).
Loaded load_trace_file(const std::filesystem::path& path, const LoadOptions& options = {});

// Writers. Both end with a point at span_s carrying the last value when the trace is
// longer than its last point, so that the length survives (reading the file back gives
// the same trace and span). CSV cannot say that a trace repeats: it then holds one
// period, and a comment says so (refer to it with "repeat": true).
std::string to_csv(const Trace& trace);
nlohmann::json to_json(const Trace& trace);
std::string to_json_text(const Trace& trace);  // to_json, one point per line

// Stage timing traces: CSV iteration,stage,micro_batch,phase,duration_s (phase F, B, I
// or W; `stage` is the model stage; optional header, # comments, blank lines, a UTF-8
// byte order mark). Range checks against a run happen in sim::set_op_timings, which
// names the same file and line.
std::vector<sim::OpTiming> parse_stage_trace(std::string_view text, const std::string& source);
std::vector<sim::OpTiming> load_stage_trace(const std::filesystem::path& path);

// Message timing traces: CSV iteration,stage,micro_batch,phase,latency_s (phase F: the
// activation message the model stage's forward sends, B: the gradient message its
// backward sends; the same file conventions). Range checks against a run happen in
// sim::set_message_timings.
std::vector<sim::MessageTiming> parse_message_trace(std::string_view text, const std::string& source);
std::vector<sim::MessageTiming> load_message_trace(const std::filesystem::path& path);

// One measured transfer, as the calibration harness records them: CSV
// time_s,bytes,duration_s, or channel,time_s,bytes,duration_s with the channel as
// "FROM->TO" when one file holds several channels.
struct TransferSample {
  std::optional<std::pair<int, int>> channel;
  double time_s = 0, bytes = 0, duration_s = 0;
  int line = 0;
};
std::vector<TransferSample> parse_transfer_samples(std::string_view text, const std::string& source);
std::vector<TransferSample> load_transfer_samples(const std::filesystem::path& path);

}  // namespace adagrouper::traces
