// `adagrouper sweep`: many simulations from one JSON spec (docs/formats.md, "Sweep spec
// and output").
//
//   Study study = load_study("configs/sweeps/gpt-severity.json");  // parse + expand
//   Inputs inputs(study, pending);        // resolve the networks and traces they need
//   sim::Scenario sc = inputs.scenario(study.runs[i]);
//   nlohmann::ordered_json row = run_row(study, inputs, study.runs[i]);  // one output row
//
// run_sweep() is the whole command: resume, shard, a pool of worker threads, the
// output stream, the progress line, and the spread over MPI ranks when launched
// under mpirun (built with MPI).
#pragma once

#include <cstddef>
#include <cstdint>
#include <filesystem>
#include <nlohmann/json.hpp>
#include <optional>
#include <span>
#include <string>
#include <unordered_set>
#include <vector>

#include "sim.h"

namespace adagrouper::sweep {

// --- spec ---------------------------------------------------------------------------

// One run of the expanded spec.
struct RunSpec {
  std::size_t index = 0;  // position in the expanded list (after duplicates are dropped)
  std::string id;         // 16 hex digits: hash of the run's inputs; stable across spec edits
  int pipeline = 0;       // into Study::pipelines
  int network = -1;       // into Study::networks; -1: none (the trace alone)
  int trace = -1;         // into Study::traces; -1: none
  std::string schedule;   // a family of sim::schedule_families()
  std::optional<int> k;   // for the families that take a group size (kfkb)
  int micro_batch_size = 1;
  int iterations = 1;
  double start_time_s = 0;
  std::optional<std::int64_t> seed;          // the trace's seed, when it has one
  std::vector<nlohmann::json> trace_params;  // one per Study::trace_columns (null: not set)
};

struct PipelineInput {
  std::string label;  // the path as the spec wrote it
  sim::Pipeline pipeline;
};

struct NetworkInput {
  std::string label;   // the path as written, the inline network's "name", or its JSON
  std::string source;  // what errors name: the network file, or the spec file and field of an inline one
  nlohmann::json doc;  // the network document
};

struct TraceInput {
  std::string label;   // its "name", the pattern's name, "file:PATH", "constant" or "points"
  nlohmann::json doc;  // the rate form handed to the traces library (swept keys filled in)
};

struct Study {
  std::string source;  // the spec file
  std::vector<PipelineInput> pipelines;
  std::vector<NetworkInput> networks;
  std::vector<TraceInput> traces;
  std::vector<std::string> trace_columns;  // "trace.period_s", ... (sorted)
  std::vector<RunSpec> runs;
};

// Most runs one spec may expand to.
inline constexpr std::size_t kMaxRuns = 1'000'000;

// Reads, validates and expands a spec; loads the pipeline files and reads the network
// files. Throws InputError naming the file and field.
Study load_study(const std::filesystem::path& path);
Study parse_study(const nlohmann::json& doc, const std::string& source);

// --- running one run -----------------------------------------------------------------

// The resolved networks and traces of a study (immutable once built; shared by all
// workers).
class Inputs {
 public:
  // Resolves what the runs at `indices` (into study.runs) need. Throws InputError when
  // a trace cannot be built, or a network cannot be read with any pipeline it is used
  // with (a network that fails only with some pipelines makes those runs error rows).
  Inputs(const Study& study, std::span<const std::size_t> indices);

  // The scenario of one run. Throws InputError for what only this combination gets
  // wrong (b does not divide B or lies outside a profile, k > M, a network that does
  // not fit this pipeline).
  sim::Scenario scenario(const RunSpec& run) const;

 private:
  // A network bound to a number of stages (the spec is read once per network file).
  struct NetworkEntry {
    int network = -1, stages = 0;
    std::optional<sim::Network> net;  // absent: `error`
    std::string error;
  };
  const NetworkEntry& entry(int network, int stages) const;

  const Study* study_;
  std::vector<NetworkEntry> networks_;
  std::vector<sim::RatePtr> traces_;  // by Study::traces index; shared by every run that uses one
};

// Nearest-rank percentile (p in (0, 100]) of the values: the smallest value with at least
// p % of the values <= it.
double percentile(std::vector<double> values, int p);

// The output's columns, inputs first, then results; `error` last.
std::vector<std::string> columns(const Study& study);

// Runs one run (errors of this run become the `error` column) and returns its row,
// one value per column.
nlohmann::ordered_json run_row(const Study& study, const Inputs& inputs, const RunSpec& run);

// --- output ----------------------------------------------------------------------------

enum class Format { csv, jsonl };

// --format NAME, or the output's extension (.csv; .jsonl, .ndjson). Throws InputError.
Format format_for(const std::filesystem::path& output, const std::optional<std::string>& name);

// The header line of a CSV output (no newline).
std::string csv_header(const std::vector<std::string>& columns);
// One row as a line (no newline). CSV: empty for null, RFC 4180 quoting; strings never
// contain a line break (replaced by a blank). JSONL: one JSON object.
std::string format_row(const nlohmann::ordered_json& row, Format format);

// Splits one CSV line into fields (RFC 4180 quoting). Throws std::invalid_argument on
// an unterminated quote.
std::vector<std::string> split_csv_line(const std::string& line);

// What an existing output holds.
struct Existing {
  bool exists = false;
  std::unordered_set<std::string> done;  // ids of the complete rows (error rows included)
  std::size_t rows = 0;                  // complete rows
  std::size_t error_rows = 0;
  bool truncated = false;         // a partial last line was found
  std::size_t complete_bytes = 0;  // the length of the complete lines, before that partial one
  // With retry_errors and error rows: the complete lines without the error rows.
  std::optional<std::string> without_errors;
};

// Reads an existing output for resuming, and changes nothing: checks that its columns
// are `columns` (CSV header, JSONL keys) and collects the ids of its complete rows. A
// file with no complete line is accepted only when what it holds starts like the first
// line a sweep writes (a sweep killed while writing it). With retry_errors, the error
// rows are not done. Throws InputError naming the file (and line): a file that is not
// this spec's output is never touched.
Existing scan_existing(const std::filesystem::path& output, Format format, const std::vector<std::string>& columns,
                       bool retry_errors);

// Makes an output that scan_existing accepted ready to append to: removes the error rows
// (rewriting the file atomically; returns true) or cuts off a partial last line.
bool repair_existing(const std::filesystem::path& output, const Existing& existing);

// scan_existing, then repair_existing.
Existing read_existing(const std::filesystem::path& output, Format format, const std::vector<std::string>& columns,
                       bool retry_errors);

// --- the command ---------------------------------------------------------------------

struct Shard {
  int index = 0, count = 1;  // runs with index % count == index
};
// "i/n" with 0 <= i < n. Throws InputError naming --shard.
Shard parse_shard(const std::string& text);

struct Options {
  std::filesystem::path output;
  Format format = Format::csv;
  int jobs = 0;  // 0: all cores (under MPI: the cores / ranks on the node)
  Shard shard;
  bool retry_errors = false;
  bool dry_run = false;
  bool quiet = false;
};

struct Summary {
  std::size_t runs = 0;      // in the spec
  std::size_t selected = 0;  // in this shard
  std::size_t skipped = 0;   // already in the output
  std::size_t foreign = 0;   // rows in the output that are no run of this spec (kept)
  std::size_t ran = 0;       // this invocation
  std::size_t errors = 0;    // error rows among them
  double wall_s = 0;
  int ranks = 1;
  bool printer = true;  // this process reports (rank 0)
  int status = 0;       // exit status for a rank that is not the printer
};

// Runs the sweep: resume, shard, threads, MPI when launched under mpirun. Returns the
// summary (on MPI ranks other than 0, with printer = false).
Summary run_sweep(const Study& study, const Options& options);

// The CPUs this process may run on (sched_getaffinity), at least 1.
int available_cpus();

// Whether this binary was built with MPI, and whether this process was started by
// mpirun (Open MPI / PMIx environment) and then its rank (-1 otherwise).
bool built_with_mpi();
int launcher_rank();

}  // namespace adagrouper::sweep
