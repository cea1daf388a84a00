// `adagrouper sweep`: many simulations from one JSON spec, in parallel, resumable.
#include <fmt/format.h>

#include <boost/program_options.hpp>
#include <iostream>
#include <optional>
#include <string>

#include "cli_util.h"
#include "commands.h"
#include "sweep.h"

namespace adagrouper::cli {

namespace po = boost::program_options;

namespace {

// Most worker threads --jobs may ask for.
constexpr int kMaxJobs = 4096;

constexpr const char* kSweepHelp = R"(Usage: adagrouper sweep SWEEP.json --output FILE [--output-format csv|jsonl] [--jobs N]
                        [--shard i/n] [--retry-errors] [--dry-run] [--quiet]
       mpirun -np N adagrouper sweep SWEEP.json --output FILE ...

Runs every simulation a sweep spec describes (a grid or a list over pipelines,
networks, synthetic trace patterns and their parameters, schedules, k, micro-batch
sizes, iterations and start times) on parallel threads, and streams one row per run
to FILE as it finishes. Each run is exactly `adagrouper simulate` with those inputs.

Spec (JSON; docs/formats.md, "Sweep spec and output"; examples in configs/sweeps/):
  {"defaults": {"pipeline": "../pipelines/gpt-8stage-v100.json",
                "trace": {"pattern": "periodic", "high": 2.8e9, "low_fraction": 0.4},
                "micro_batch_size": 2, "iterations": 5},
   "grid": {"trace.severity": [0, 0.5, 0.875], "trace.period_s": [2, 10, 50],
            "schedule": ["1f1b", "dapple-b", "gpipe", "kfkb"], "k": [2, 4, 8]}}
  A list is an axis (the grid is their product; k applies to kfkb only); {"range":
  [from, to, step]} is a list too; "runs": [{...}, ...] lists runs one by one. A trace
  replaces the rate of every channel; trace.KEY sets one of its keys; severity s sets
  low = high x (1 - s); seed is the seed of a random pattern (onoff, contention).

Output (CSV or JSONL, by --output-format or FILE's extension .csv / .jsonl / .ndjson): one
row per run, in the order runs finish: id (stable hash of the run's inputs), index
(position in the spec), the inputs (pipeline, network, trace, schedule, k,
micro_batch_size, iterations, start_time_s, seed, trace.KEY...), then the results
(micro_batches, group_size, mean/p50/p99_iteration_time_s, total_time_s,
throughput_samples_per_s, bubble_fraction, peak_memory_bytes, memory_limit_bytes,
fits_memory) and error. A run that cannot run (b does not divide B, k > M, ...) is a
row with the error column set, not the end of the sweep.

Resuming: run the same command again. Rows already in FILE are skipped (a partial
last line left by a killed run is cut off and that run done again). A FILE that is not
this spec's output (other columns, not rows) is refused and left as it is; so is the
spec or one of its pipeline or network files. --dry-run reads FILE and changes nothing.
FILE - writes the rows to stdout (give --output-format); a device or FIFO is written as it is;
neither is resumed from. --shard i/n runs the runs whose index % n == i, for job arrays
(give each shard its own FILE; a second sweep writing the same FILE stops, status 1).
MPI: under mpirun (built with Open MPI) the runs are spread over the ranks and rank 0
writes FILE; sorted, it equals a single-process run.
Progress (done/total, runs/s, ETA) goes to stderr unless --quiet.
Exit status: 0 done (error rows included), 2 bad spec or options (one line naming the
file and field), 1 other failures.

Example:
  adagrouper sweep configs/sweeps/gpt-severity.json --output gpt-severity.csv

Options)";

void add_sweep_options(po::options_description& opts) {
  // clang-format off
  opts.add_options()
    ("help,h", "show this help")
    ("spec", po::value<std::string>()->value_name("FILE"), "the sweep spec (or the first positional argument)")
    ("output,o", po::value<std::string>()->value_name("FILE"),
       "output file (required; -: stdout); rows already in it are skipped")
    ("output-format", po::value<std::string>()->value_name("csv|jsonl"),
       "output format (default: from the output's extension)")
    ("jobs,j", po::value<int>()->default_value(0)->value_name("N"),
       "worker threads (per rank under mpirun); 0: every core this process may use (under mpirun: "
       "the rank's share of its node)")
    ("shard", po::value<std::string>()->default_value("0/1")->value_name("i/n"),
       "run only the runs whose index % n == i (0 <= i < n)")
    ("retry-errors", po::bool_switch(), "run again the runs whose rows in the output have an error")
    ("dry-run", po::bool_switch(), "expand the spec and say what would run; run nothing, write nothing")
    ("quiet,q", po::bool_switch(), "no progress line or summary on stderr");
  // clang-format on
}

}  // namespace

int cmd_sweep(int argc, char** argv) {
  const int env_rank = sweep::launcher_rank();
  try {
    po::options_description opts(kSweepHelp);
    add_sweep_options(opts);
    po::positional_options_description positional;
    positional.add("spec", 1);
    po::variables_map vm;
    po::store(po::command_line_parser(with_aliases(argc, argv, kFormatAliases)).options(opts).positional(positional).run(),
              vm);
    po::notify(vm);
    if (vm.count("help")) {
      if (env_rank <= 0)
        std::cout << opts << '\n'
                  << (sweep::built_with_mpi()
                          ? "This build has MPI (Open MPI): mpirun spreads the runs over its ranks.\n"
                          : "This build has no MPI: under mpirun, rank 0 runs everything.\n");
      return 0;
    }
    const std::string spec_path = required(vm, "spec", "sweep");
    sweep::Options options;
    options.output = required(vm, "output", "sweep");
    std::optional<std::string> format;
    if (vm.count("output-format")) format = vm["output-format"].as<std::string>();
    options.format = sweep::format_for(options.output, format);
    options.jobs = int_option(vm, "jobs", 0, kMaxJobs);
    options.shard = sweep::parse_shard(vm["shard"].as<std::string>());
    options.retry_errors = vm["retry-errors"].as<bool>();
    options.dry_run = vm["dry-run"].as<bool>();
    options.quiet = vm["quiet"].as<bool>();

    const sweep::Study study = sweep::load_study(spec_path);
    const sweep::Summary summary = sweep::run_sweep(study, options);
    return summary.printer ? 0 : summary.status;
  } catch (const std::exception&) {
    // Under mpirun every rank meets the same bad input; rank 0 reports it.
    if (env_rank > 0) return 2;
    throw;
  }
}

}  // namespace adagrouper::cli
