// `adagrouper trace import-kineto`: a pipeline file (and optionally a stage timing trace
// and transfer samples) from the PyTorch profiler traces of a pipeline-parallel run
// (traces/kineto.h; docs/formats.md, "PyTorch profiler traces").
#include <iostream>
#include <string>
#include <vector>

#include <boost/program_options.hpp>
#include <fmt/format.h>
#include <nlohmann/json.hpp>

#include "cli_util.h"
#include "commands.h"
#include "sim.h"
#include "traces.h"

namespace adagrouper::cli {

namespace po = boost::program_options;
namespace tr = adagrouper::traces;

namespace {

constexpr const char* kImportKinetoHelp = R"(Usage: adagrouper trace import-kineto FILE... --micro-batch-size b
                                      --output PIPELINE [--global-batch-size B] [--name NAME]
                                      [--stage-trace FILE] [--samples-output FILE]
                                      [--action-regex RE]

Reads the Chrome traces that torch.profiler exports (one file per rank, .json or gzip)
of a pipeline-parallel run and writes a pipeline file with one stage per model stage.
torch.distributed.pipelining names each action's range PP:<stage><type><microbatch>
(PP:2F0, PP:1I3, PP:0W1, PP:3B2); F, B, I and W are compute, SEND_F, RECV_B and the
other types are skipped. An OVERLAP_F_B range (PP:(0F3;1B1)OVERLAP_F_B, DualPipeV's
forward and backward run together) is split into its parts in proportion to the
medians of the same ops measured on their own: the parts go into the stage trace, not
into the medians. GPU ranges (gpu_user_annotation) are used when a file has
them, else CPU ranges (user_annotation). Each stage gets the median duration of its F
ranges as forward_s, of its B ranges as backward_s (or of I and W as backward_input_s
and backward_weight_s, backward_s their sum); the spread goes into the stage's
description. Byte counts are not in profiler traces: activation_bytes and output_bytes
are written as 0. A summary table goes to stdout.

--action-regex matches other names (Megatron-style ranges): named groups
(?<stage>...), (?<type>...), (?<microbatch>...), or three groups in that order; the
type is F, B, I, W (either case), forward/fwd or backward/bwd.

Examples:
  adagrouper trace import-kineto rank0.json rank1.json.gz --micro-batch-size 2 \
      --output measured.json --stage-trace measured-ops.csv
  adagrouper simulate --pipeline measured.json --network net.json --schedule 1f1b \
      --micro-batch-size 2 --stage-trace measured-ops.csv
  adagrouper trace import-kineto r*.json --micro-batch-size 1 --output p.json \
      --action-regex '^fwd-bwd (?<type>fwd|bwd) stage (?<stage>\d+) mb (?<microbatch>\d+)$'

Options)";

void add_options(po::options_description& o) {
  // clang-format off
  o.add_options()
    ("help,h", "show this help")
    ("input", po::value<std::vector<std::string>>()->value_name("FILE..."),
       "the ranks' trace files (or the positional arguments)")
    ("micro-batch-size,b", po::value<int>()->value_name("b"), "the micro-batch size the run used (required)")
    ("global-batch-size", po::value<int>()->value_name("B"),
       "the pipeline's global batch size (default: b x the micro-batches seen)")
    ("name", po::value<std::string>()->value_name("NAME"), "the pipeline's name (default: the output's file name)")
    ("output,o", po::value<std::string>()->value_name("FILE"), "the pipeline file to write (required; -: stdout)")
    ("stage-trace", po::value<std::string>()->value_name("FILE"),
       "also write each op's measured duration, for simulate --stage-trace")
    ("samples-output", po::value<std::string>()->value_name("FILE"),
       "also write the NCCL send/recv kernels as transfer samples (time_s,bytes,duration_s)")
    ("action-regex", po::value<std::string>()->value_name("RE"),
       "match other range names than PP:<stage><type><microbatch>");
  // clang-format on
}

std::optional<po::variables_map> parse(int argc, char** argv, const po::options_description& opts) {
  po::positional_options_description pos;
  pos.add("input", -1);
  po::command_line_parser parser(argc, argv);
  parser.options(opts).positional(pos);
  return detail::store_options(parser, opts);
}

std::vector<tr::KinetoRank> read_ranks(const po::variables_map& vm) {
  if (!vm.count("input")) throw InputError("give the ranks' trace files (see adagrouper trace import-kineto --help)");
  const tr::ActionPattern pattern =
      vm.count("action-regex") ? tr::parse_action_pattern(vm["action-regex"].as<std::string>(), "--action-regex")
                               : tr::torch_action_pattern();
  std::vector<tr::KinetoRank> ranks;
  for (const std::string& file : vm["input"].as<std::vector<std::string>>())
    ranks.push_back(tr::load_kineto(file, pattern));
  return ranks;
}

// --global-batch-size, else b x the micro-batches seen; a multiple of b either way.
int global_batch(const po::variables_map& vm, int b, int micro_batches) {
  if (!vm.count("global-batch-size")) {
    const long long B = static_cast<long long>(b) * micro_batches;
    if (B > sim::kMaxBatchSize)
      throw InputError(fmt::format("--micro-batch-size: {} x {} micro-batches is more than the largest global batch "
                                   "{}; give --global-batch-size",
                                   b, micro_batches, sim::kMaxBatchSize));
    return static_cast<int>(B);
  }
  const int B = int_option(vm, "global-batch-size", 1, sim::kMaxBatchSize);
  if (B % b != 0)
    throw InputError(fmt::format("--global-batch-size: {} is not a multiple of --micro-batch-size {}", B, b));
  return B;
}

std::string ms(const std::vector<double>& v) { return v.empty() ? "-" : fmt::format("{:.4g}", tr::median(v) * 1e3); }

std::string summary(const std::vector<tr::KinetoRank>& ranks, const tr::KinetoStages& st, int b, int B) {
  using sim::Phase;
  std::string out;
  for (const tr::KinetoRank& r : ranks) {
    out += fmt::format("{}: {} {} ranges, {} other actions skipped, {} NCCL send/recv kernels\n", r.source,
                       r.ops.size(), r.gpu ? "GPU" : "CPU", r.skipped, r.transfers.size());
    if (r.overlapped > 0)
      out += fmt::format("{}: {} OVERLAP_F_B ranges split into their parts (in the stage trace, not the medians)\n",
                         r.source, r.overlapped);
  }
  out += fmt::format("{} stages, {} micro-batches seen, b = {}, B = {}\n", st.stages.size(), st.micro_batches, b, B);
  out += fmt::format("{:>5} {:>6} {:>10} {:>10} {:>10} {:>10}   (medians, ms)\n", "stage", "ops", "F", "B", "I", "W");
  for (std::size_t s = 0; s < st.stages.size(); ++s) {
    const tr::StageSamples& x = st.stages[s];
    std::size_t ops = 0;
    for (const auto& v : x.seconds) ops += v.size();
    out += fmt::format("{:>5} {:>6} {:>10} {:>10} {:>10} {:>10}\n", s, ops, ms(x.of(Phase::Forward)),
                       ms(x.of(Phase::Backward)), ms(x.of(Phase::BackwardInput)), ms(x.of(Phase::BackwardWeight)));
  }
  return out;
}

}  // namespace

int cmd_trace_import_kineto(int argc, char** argv) {
  po::options_description opts(kImportKinetoHelp);
  add_options(opts);
  const auto parsed = parse(argc, argv, opts);
  if (!parsed) return 0;
  const po::variables_map& vm = *parsed;
  required<int>(vm, "micro-batch-size", "trace import-kineto");
  const int b = int_option(vm, "micro-batch-size", 1, sim::kMaxBatchSize);
  const std::string out = required(vm, "output", "trace import-kineto");
  OutputSet outputs;
  if (vm.count("input"))
    for (const std::string& file : vm["input"].as<std::vector<std::string>>()) outputs.input("FILE", file);
  const std::size_t pipe_out = outputs.add("--output", out);
  const auto stage_out = output_option(outputs, vm, "stage-trace");
  const auto samples_out = output_option(outputs, vm, "samples-output");
  const std::vector<tr::KinetoRank> ranks = read_ranks(vm);
  const tr::KinetoStages st = tr::collect_stages(ranks);
  const tr::PipelineOptions pipe{.micro_batch_size = b,
                                 .global_batch_size = global_batch(vm, b, st.micro_batches),
                                 .name = vm.count("name") ? utf8_safe(vm["name"].as<std::string>()) : ""};
  outputs.write(pipe_out, tr::kineto_pipeline(st, pipe).dump(2) + "\n");
  if (stage_out) outputs.write(*stage_out, tr::kineto_stage_trace(ranks));
  if (samples_out) outputs.write(*samples_out, tr::kineto_transfer_samples(ranks));
  outputs.commit();
  if (!outputs.has_stdout()) std::cout << summary(ranks, st, b, pipe.global_batch_size);
  return 0;
}

}  // namespace adagrouper::cli
