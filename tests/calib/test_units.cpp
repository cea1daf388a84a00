// The calibration harness without MPI: options, stage descriptions, measured transfers
// to trace and network files, the CPU kernels, the watchdog and the JSONL writer.
#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <atomic>
#include <cmath>
#include <sstream>
#include <thread>

#include "../common/cli_runner.h"
#include "../common/test_util.h"
#include "calib.h"
#include "cpu_kernels.h"
#include "sim.h"
#include "traces.h"

namespace cal = adagrouper::calib;
using testutil::input_error;
using ::testing::HasSubstr;

namespace {

cal::Options parse(const std::vector<std::string>& args) {
  std::ostringstream help;
  auto o = cal::parse_options(args, help);
  EXPECT_TRUE(o.has_value()) << "printed help: " << help.str();
  return o.value_or(cal::Options{});
}

}  // namespace

// ---------------------------------------------------------------------------------
// Sizes and options

TEST(CalibOptions, SizesWithSuffixes) {
  EXPECT_EQ(cal::parse_size("4096", "bytes"), 4096u);
  EXPECT_EQ(cal::parse_size("1K", "bytes"), 1024u);
  EXPECT_EQ(cal::parse_size("64M", "bytes"), 64u << 20);
  EXPECT_EQ(cal::parse_size("2g", "bytes"), 2ull << 30);
  EXPECT_THAT(input_error([] { cal::parse_size("12X", "min-bytes"); }), HasSubstr("--min-bytes: \"12X\""));
  EXPECT_THAT(input_error([] { cal::parse_size("", "bytes"); }), HasSubstr("--bytes: empty"));
  EXPECT_THAT(input_error([] { cal::parse_size("-1", "bytes"); }), HasSubstr("not a size"));
  EXPECT_THAT(input_error([] { cal::parse_size("99999999999999999999", "bytes"); }), HasSubstr("too large"));
}

TEST(CalibOptions, SizesWithUnits) {
  // One letter keeps nccl-tests' powers of 1024; units of docs/formats.md mean what they say.
  EXPECT_EQ(cal::parse_size("64MiB", "bytes"), 64u << 20);
  EXPECT_EQ(cal::parse_size("64MB", "bytes"), 64000000u);
  EXPECT_EQ(cal::parse_size("1.5KiB", "bytes"), 1536u);
  EXPECT_EQ(cal::parse_size("1kB", "bytes"), 1000u);
  EXPECT_EQ(cal::parse_size("16 B", "bytes"), 16u);
  EXPECT_EQ(cal::parse_size("8Gbit", "bytes"), 1000000000u);
  EXPECT_THAT(input_error([] { cal::parse_size("40Gib", "max-bytes"); }),
              HasSubstr("--max-bytes: \"40Gib\" is not a size like 4096, 64K, 16M, 1G (powers of 1024) or 64MB: "
                        "unknown size unit \"Gib\""));
  EXPECT_THAT(input_error([] { cal::parse_size("5ms", "bytes"); }), HasSubstr("is a time unit, not a size unit"));
  EXPECT_THAT(input_error([] { cal::parse_size("1.5B", "bytes"); }), HasSubstr("not a whole number"));
  EXPECT_THAT(input_error([] { cal::parse_size("-1KiB", "bytes"); }), HasSubstr("not a size: must be >= 0"));
  EXPECT_THAT(input_error([] { cal::parse_size("20EiB", "bytes"); }), HasSubstr("unknown size unit"));
  EXPECT_EQ(cal::parse_size("100TiB", "bytes"), 100ull << 40);
  EXPECT_THAT(input_error([] { cal::parse_size("1e8TiB", "bytes"); }), HasSubstr("too large"));
}

TEST(CalibOptions, TimesWithUnits) {
  const cal::Options p = parse({"p2p", "--bytes", "1MiB", "--duration", "1min", "--interval", "500ms", "--contention",
                                "50ms,1.5s,4MiB", "--timeout", "2min"});
  EXPECT_EQ(p.duration_s, 60.0);
  EXPECT_EQ(p.interval_s, 0.5);
  EXPECT_EQ(p.count, 120);
  EXPECT_EQ(p.timeout_s, 120.0);
  EXPECT_EQ(p.message_bytes, (std::vector<std::uint64_t>{1u << 20}));
  ASSERT_TRUE(p.contention.has_value());
  EXPECT_EQ(p.contention->on_s, 0.05);
  EXPECT_EQ(p.contention->off_s, 1.5);
  EXPECT_EQ(p.contention->bytes, 4u << 20);
}

TEST(CalibOptions, SeriesLikeNcclTests) {
  EXPECT_EQ(cal::size_series(1, 8, 2, "e"), (std::vector<std::uint64_t>{1, 2, 4, 8}));
  EXPECT_EQ(cal::size_series(1, 16, 4, "e"), (std::vector<std::uint64_t>{1, 4, 16}));
  EXPECT_EQ(cal::size_series(3, 20, 2, "e"), (std::vector<std::uint64_t>{3, 6, 12}));
  EXPECT_EQ(cal::size_series(5, 5, 1, "e"), (std::vector<std::uint64_t>{5}));
  EXPECT_THAT(input_error([] { cal::size_series(8, 4, 2, "max-micro-batch"); }),
              HasSubstr("--max-micro-batch: the largest size 4 is below the smallest 8"));
  EXPECT_THAT(input_error([] { cal::size_series(1, 4, 1, "e"); }), HasSubstr("factor must be >= 2"));
  EXPECT_THAT(input_error([] { cal::size_series(0, 4, 2, "e"); }), HasSubstr(">= 1"));
}

TEST(CalibOptions, StagesMode) {
  const cal::Options o = parse({"stages", "--stages", "s.json", "-b", "2", "-e", "16", "-f", "2", "--backend",
                                "cpu", "-o", "out", "--repeat", "3", "--warmup", "0", "--timeout", "5"});
  EXPECT_EQ(o.mode, cal::Mode::stages);
  EXPECT_EQ(o.backend, cal::BackendKind::cpu);
  EXPECT_EQ(o.stages_file, "s.json");
  EXPECT_EQ(o.micro_batch_sizes, (std::vector<int>{2, 4, 8, 16}));
  EXPECT_EQ(o.output_dir, "out");
  EXPECT_EQ(o.repeat, 3);
  EXPECT_EQ(o.warmup, 0);
  EXPECT_EQ(o.timeout_s, 5);
  // Defaults: b = 1, 2, 4, 8; the backend is cuda when built.
  const cal::Options d = parse({"stages", "--stages", "s.json"});
  EXPECT_EQ(d.micro_batch_sizes, (std::vector<int>{1, 2, 4, 8}));
  EXPECT_EQ(d.backend, cal::cuda_backend_built() ? cal::BackendKind::cuda : cal::BackendKind::cpu);
  EXPECT_EQ(d.output_dir, "calib-out");
}

TEST(CalibOptions, P2pAndBandwidthModes) {
  const cal::Options p = parse({"p2p", "--bytes", "1M,16K", "--duration", "1", "--interval", "0.3", "--contention",
                                "0.5,1.5,4M", "--direction", "forward"});
  EXPECT_EQ(p.mode, cal::Mode::p2p);
  EXPECT_EQ(p.message_bytes, (std::vector<std::uint64_t>{1u << 20, 16u << 10}));
  EXPECT_EQ(p.count, 4);  // ceil(1 / 0.3)
  ASSERT_TRUE(p.contention.has_value());
  EXPECT_EQ(p.contention->on_s, 0.5);
  EXPECT_EQ(p.contention->off_s, 1.5);
  EXPECT_EQ(p.contention->bytes, 4u << 20);
  EXPECT_TRUE(p.forward);
  EXPECT_FALSE(p.backward);
  const cal::Options q = parse({"p2p", "--pipeline", "p.json", "--micro-batch-size", "1", "4", "--duration", "1",
                                "--interval", "0.25"});
  EXPECT_EQ(q.pipeline_file, "p.json");
  EXPECT_EQ(q.p2p_micro_batch_sizes, (std::vector<int>{1, 4}));
  EXPECT_EQ(q.count, 4);  // exactly 4, not 5
  EXPECT_FALSE(q.contention.has_value());
  EXPECT_TRUE(q.forward && q.backward);
  const cal::Options b = parse({"bandwidth", "-b", "1K", "-e", "1M", "-f", "32", "--iters", "7"});
  EXPECT_EQ(b.sizes, (std::vector<std::uint64_t>{1024, 32768, 1048576}));
  EXPECT_EQ(b.iters, 7);
}

TEST(CalibOptions, ErrorsNameTheOption) {
  auto err = [](const std::vector<std::string>& args) {
    return input_error([&] {
      std::ostringstream help;
      cal::parse_options(args, help);
    });
  };
  EXPECT_THAT(err({}), HasSubstr("no mode given"));
  EXPECT_THAT(err({"replays"}), HasSubstr("unknown mode 'replays'"));
  EXPECT_THAT(err({"stages"}), HasSubstr("--stages: missing"));
  EXPECT_THAT(err({"stages", "--stages", "s.json", "--frobnicate"}),
              HasSubstr("(see adagrouper-calib stages --help)"));
  EXPECT_THAT(err({"stages", "--stages", "s.json", "--backend", "tpu"}), HasSubstr("--backend: must be cpu or cuda"));
  EXPECT_THAT(err({"stages", "--stages", "s.json", "-b", "0"}), HasSubstr("--min-micro-batch: must be >= 1"));
  EXPECT_THAT(err({"p2p"}), HasSubstr("--pipeline or --bytes: give exactly one"));
  EXPECT_THAT(err({"p2p", "--bytes", "1M", "--pipeline", "p.json"}), HasSubstr("exactly one"));
  EXPECT_THAT(err({"p2p", "--bytes", "8"}), HasSubstr("at least 16 bytes"));
  EXPECT_THAT(err({"p2p", "--bytes", "1M", "--interval", "0"}), HasSubstr("--interval: must be > 0"));
  EXPECT_THAT(err({"p2p", "--bytes", "1M", "--contention", "1"}), HasSubstr("--contention: \"1\" is not ON,OFF"));
  EXPECT_THAT(err({"p2p", "--bytes", "1M", "--direction", "up"}), HasSubstr("--direction: must be both"));
  EXPECT_THAT(err({"p2p", "--bytes", "1M", "--micro-batch-size", "2"}), HasSubstr("only with --pipeline"));
  EXPECT_THAT(err({"bandwidth", "--iters", "0"}), HasSubstr("--iters: must be 1"));
  EXPECT_THAT(err({"stages", "--stages", "s.json", "--timeout", "-1"}), HasSubstr("--timeout: must be >= 0"));
  EXPECT_THAT(err({"stages", "--stages", "s.json", "--timeout", "5GB"}),
              HasSubstr("the argument ('5GB') for option '--timeout' is invalid: \"GB\" is a size unit, not a time unit"));
  EXPECT_THAT(err({"p2p", "--bytes", "1M", "--duration", "1x"}), HasSubstr("'--duration' is invalid: unknown time unit"));
  EXPECT_THAT(err({"p2p", "--bytes", "1M", "--contention", "1s,2GB"}),
              HasSubstr("--contention: \"1s,2GB\" is not ON,OFF[,BYTES] with ON > 0 and OFF >= 0 seconds (\"2GB\": "
                        "\"GB\" is a size unit"));
}

TEST(CalibOptions, HelpTeachesEveryOption) {
  for (const char* mode : {"stages", "p2p", "bandwidth"}) {
    std::ostringstream help;
    EXPECT_FALSE(cal::parse_options({mode, "--help"}, help).has_value());
    EXPECT_THAT(help.str(), HasSubstr("Example:")) << mode;
    EXPECT_THAT(help.str(), HasSubstr("--backend")) << mode;
    EXPECT_THAT(help.str(), HasSubstr("--timeout")) << mode;
    EXPECT_THAT(help.str(), HasSubstr("(=")) << mode;  // defaults are shown
  }
  EXPECT_THAT(cal::usage(), HasSubstr("docs/calibration.md"));
}

// ---------------------------------------------------------------------------------
// Stage descriptions

TEST(CalibDescription, LoadsTheShippedConfigs) {
  const auto d = cal::load_stage_description(SOURCE_ROOT "/configs/calib/tiny-4stage.json");
  EXPECT_EQ(d.num_stages(), 4);
  EXPECT_EQ(d.num_layers(), 6);  // embedding, 4 transformer layers, head
  EXPECT_EQ(d.dtype, cal::Dtype::fp32);
  const auto last = d.layers_of(3);
  ASSERT_EQ(last.size(), 2u);
  EXPECT_EQ(last[0].index, 4);
  EXPECT_EQ(last[1].index, 5);
  EXPECT_EQ(last[1].kind, cal::LayerKind::head);
  EXPECT_EQ(d.layers_of(0)[0].kind, cal::LayerKind::embedding);
  for (const char* f : {"tiny-2stage.json", "gpt-350m-4stage-v100.json", "gpu-check.json"})
    EXPECT_NO_THROW(cal::load_stage_description(std::string(SOURCE_ROOT "/configs/calib/") + f)) << f;
}

TEST(CalibDescription, ErrorsNameTheField) {
  testutil::TempDir dir;
  auto err = [&](const std::string& text) {
    const auto p = dir.write("d.json", text);
    return input_error([&] { cal::load_stage_description(p); });
  };
  const std::string dims = R"("hidden": 64, "heads": 4, "sequence_length": 8, "vocabulary": 100)";
  EXPECT_THAT(err(R"({"hidden": 64, "heads": 5, "sequence_length": 8, "stages": [{"layers": 1}]})"),
              HasSubstr("heads: must divide hidden (64), got 5"));
  EXPECT_THAT(err("{" + dims + R"(, "stages": [{"layers": 1}, {"embedding": true}]})"),
              HasSubstr("stages[1].embedding: only the first stage"));
  EXPECT_THAT(err("{" + dims + R"(, "stages": [{"layers": 1, "head": true}, {"layers": 1}]})"),
              HasSubstr("stages[0].head: only the last stage"));
  EXPECT_THAT(err(R"({"hidden": 64, "heads": 4, "sequence_length": 8, "stages": [{"layers": 1, "head": true}]})"),
              HasSubstr("vocabulary: missing"));
  EXPECT_THAT(err("{" + dims + R"(, "dtype": "bf16", "stages": [{"layers": 1}]})"),
              HasSubstr("dtype: must be \"fp16\" or \"fp32\""));
  EXPECT_THAT(err("{" + dims + R"(, "hiden": 3, "stages": [{"layers": 1}]})"), HasSubstr("unknown key \"hiden\""));
  EXPECT_THAT(err("{" + dims + R"(, "stages": [{}]})"), HasSubstr("stages[0]: a stage needs at least one layer"));
  EXPECT_THAT(err("{" + dims + R"(, "stages": []})"), HasSubstr("stages: must list at least one stage"));
}

// ---------------------------------------------------------------------------------
// Measured transfers to trace and network files

TEST(CalibSamples, CsvReadsBackAsTheTracesLibraryDefinesIt) {
  const std::vector<cal::TransferRecord> s = {{0.0, 1048576, 0.5}, {1.0, 524288, 0.125}, {1.5, 2097152, 2.0}};
  const std::string csv = cal::samples_csv(s);
  const auto rows = adagrouper::traces::parse_transfer_samples(csv, "s.csv");
  ASSERT_EQ(rows.size(), 3u);
  EXPECT_EQ(rows[1].time_s, 1.0);
  EXPECT_EQ(rows[1].bytes, 524288);
  EXPECT_EQ(rows[1].duration_s, 0.125);
  // As a rate trace: bytes / (duration - latency) from each time to the next.
  adagrouper::traces::LoadOptions lo;
  lo.latency_s = 0.0625;
  const auto t = adagrouper::traces::parse_trace(csv, "s.csv", lo);
  EXPECT_EQ(t.format, adagrouper::traces::Format::samples);
  EXPECT_DOUBLE_EQ(t.trace.rate.value_at(0.5), 1048576 / (0.5 - 0.0625));
  EXPECT_DOUBLE_EQ(t.trace.rate.value_at(1.2), 524288 / (0.125 - 0.0625));
  EXPECT_DOUBLE_EQ(t.trace.rate.value_at(1.7), 2097152 / (2.0 - 0.0625));
  EXPECT_DOUBLE_EQ(t.trace.span_s, 3.5);  // the end of the last transfer
}

TEST(CalibSamples, NormalizedTimesAreValidTraceTimes) {
  // A first time slightly before the origin (clock alignment) and equal times.
  const std::vector<cal::TransferRecord> s = {{-1e-6, 100, 0.1}, {0.1, 100, 0.1}, {0.1, 100, 0.1}};
  const auto n = cal::normalized(s);
  EXPECT_EQ(n[0].time_s, 0.0);
  EXPECT_EQ(n[1].time_s, 0.1);
  EXPECT_GT(n[2].time_s, 0.1);
  EXPECT_LT(n[2].time_s, 0.1 + 2e-9);
  EXPECT_NO_THROW(adagrouper::traces::parse_trace(cal::samples_csv(s), "s.csv"));
}

TEST(CalibSamples, LatencyStaysBelowEveryDuration) {
  cal::ChannelSamples ch{0, 1, 0.05, {{0, 100, 0.04}, {1, 100, 0.2}}};
  EXPECT_DOUBLE_EQ(cal::usable_latency(ch), 0.02);  // half the shortest
  ch.probe_latency_s = 1e-5;
  EXPECT_DOUBLE_EQ(cal::usable_latency(ch), 1e-5);
  EXPECT_DOUBLE_EQ(cal::effective_rate(ch.samples, 0.0), 200 / 0.24);
  EXPECT_DOUBLE_EQ(cal::effective_rate(ch.samples, 0.0, 1), 100 / 0.2);
}

TEST(CalibSamples, NetworkFileLoadsAndReproducesTheMeasuredTransfers) {
  testutil::TempDir dir;
  std::vector<cal::ChannelSamples> chans = {
      {0, 1, 1e-4, {{0.0, 8e6, 0.1}, {0.5, 8e6, 0.4}}},
      {1, 0, 1e-4, {{0.0, 4e6, 0.2}, {0.25, 4e6, 0.2}}},
  };
  std::filesystem::create_directories(dir.path() / "samples");
  for (const auto& c : chans)
    adagrouper::write_file_atomic(dir.path() / cal::sample_file(c.from, c.to), cal::samples_csv(c.samples));
  adagrouper::write_file_atomic(dir.path() / "network.json", cal::network_json(chans, "test").dump(2));
  const auto net = adagrouper::sim::load_network(dir.path() / "network.json", 2, adagrouper::traces::TraceRates());
  const auto& fwd = net.channel(0, 1);
  EXPECT_FALSE(fwd.unlimited());
  EXPECT_DOUBLE_EQ(fwd.latency_s, 1e-4);
  // A transfer of the measured size started at a sample's time takes its duration:
  // latency + bytes / rate.
  EXPECT_NEAR(fwd.latency_s + 8e6 / fwd.rate->value_at(0.0), 0.1, 1e-12);
  EXPECT_NEAR(fwd.latency_s + 8e6 / fwd.rate->value_at(0.6), 0.4, 1e-12);
  EXPECT_NEAR(net.channel(1, 0).latency_s + 4e6 / net.channel(1, 0).rate->value_at(0.3), 0.2, 1e-12);
  // The loop: the recording repeats with its length (the end of the last transfer).
  EXPECT_DOUBLE_EQ(fwd.rate->repeat_s(), 0.9);
  // One file for plan --comm-profile: the channel column.
  const auto all = adagrouper::traces::parse_transfer_samples(cal::all_samples_csv(chans), "all.csv");
  ASSERT_EQ(all.size(), 4u);
  ASSERT_TRUE(all[2].channel.has_value());
  EXPECT_EQ(*all[2].channel, (std::pair<int, int>{1, 0}));
}

// ---------------------------------------------------------------------------------
// CPU kernels

namespace {

// C = op(A) op(B) in double, row-major.
std::vector<double> naive(bool ta, bool tb, int m, int n, int k, const std::vector<float>& a, int lda,
                          const std::vector<float>& b, int ldb) {
  std::vector<double> c(static_cast<std::size_t>(m) * n, 0.0);
  for (int i = 0; i < m; ++i)
    for (int j = 0; j < n; ++j) {
      double s = 0;
      for (int p = 0; p < k; ++p)
        s += static_cast<double>(ta ? a[static_cast<std::size_t>(p) * lda + i] : a[static_cast<std::size_t>(i) * lda + p]) *
             (tb ? b[static_cast<std::size_t>(j) * ldb + p] : b[static_cast<std::size_t>(p) * ldb + j]);
      c[static_cast<std::size_t>(i) * n + j] = s;
    }
  return c;
}

}  // namespace

TEST(CalibCpuKernels, GemmMatchesTheDefinitionAcrossBlockEdges) {
  auto k = cal::make_cpu_kernels();
  testutil::Rng rng(7);
  // Sizes that cross the GEMM's MC = 64, NC = 256 and KC = 256 blocks and its 4 x 16 tiles.
  const int M = 67, N = 259, K = 261;
  for (const bool ta : {false, true})
    for (const bool tb : {false, true}) {
      const int lda = ta ? M : K, ldb = tb ? K : N;
      std::vector<float> a(static_cast<std::size_t>(M) * K), b(static_cast<std::size_t>(K) * N);
      for (auto& x : a) x = static_cast<float>(rng.uniform() - 0.5);
      for (auto& x : b) x = static_cast<float>(rng.uniform() - 0.5);
      std::vector<float> c(static_cast<std::size_t>(M) * N, 1.0f);
      k->gemm(ta, tb, M, N, K, 2.0f, a.data(), lda, b.data(), ldb, 0.5f, c.data(), N, cal::Elem::f32, cal::Elem::f32);
      const auto ref = naive(ta, tb, M, N, K, a, lda, b, ldb);
      double worst = 0;
      for (std::size_t i = 0; i < c.size(); ++i) worst = std::max(worst, std::abs(c[i] - (2.0 * ref[i] + 0.5)));
      EXPECT_LT(worst, 1e-3) << "ta=" << ta << " tb=" << tb;
    }
}

TEST(CalibCpuKernels, HalfPrecisionGemmAndBatches) {
  auto k = cal::make_cpu_kernels();
  const int M = 5, N = 7, K = 9, batch = 3;
  std::vector<_Float16> a(static_cast<std::size_t>(batch) * M * K), b(static_cast<std::size_t>(batch) * K * N),
      c(static_cast<std::size_t>(batch) * M * N);
  for (std::size_t i = 0; i < a.size(); ++i) a[i] = static_cast<_Float16>(static_cast<float>(i % 5) - 2.0f);
  for (std::size_t i = 0; i < b.size(); ++i) b[i] = static_cast<_Float16>(static_cast<float>(i % 3) - 1.0f);
  k->gemm_batched(false, false, M, N, K, 1.0f, a.data(), K, M * K, b.data(), N, K * N, 0.0f, c.data(), N, M * N,
                  batch, cal::Elem::f16);
  for (int q = 0; q < batch; ++q) {
    std::vector<float> af(a.begin() + q * M * K, a.begin() + (q + 1) * M * K),
        bf(b.begin() + q * K * N, b.begin() + (q + 1) * K * N);
    const auto ref = naive(false, false, M, N, K, af, K, bf, N);
    for (int i = 0; i < M * N; ++i) EXPECT_EQ(static_cast<double>(c[static_cast<std::size_t>(q * M * N + i)]), ref[static_cast<std::size_t>(i)]);
  }
}

TEST(CalibCpuKernels, CausalSoftmaxAndLayerNorm) {
  auto k = cal::make_cpu_kernels();
  const int cols = 6, rows = 12;  // two "heads" of a 6-token sequence
  std::vector<float> p(static_cast<std::size_t>(rows) * cols);
  k->fill_uniform(p.data(), p.size(), cal::Elem::f32, 3, -2.0f, 2.0f);
  k->softmax_forward(p.data(), rows, cols, 0.5f, true, cal::Elem::f32);
  for (int r = 0; r < rows; ++r) {
    double sum = 0;
    for (int j = 0; j < cols; ++j) {
      const float v = p[static_cast<std::size_t>(r * cols + j)];
      if (j > r % cols) {
        EXPECT_EQ(v, 0.0f) << r << "," << j;
      }
      sum += v;
    }
    EXPECT_NEAR(sum, 1.0, 1e-6);
  }
  std::vector<float> x(64), y(64), g(16, 1.0f), be(16, 0.0f), mean(4), rstd(4);
  k->fill_uniform(x.data(), x.size(), cal::Elem::f32, 4, 0.0f, 10.0f);
  k->layernorm_forward(x.data(), g.data(), be.data(), y.data(), mean.data(), rstd.data(), 4, 16, cal::Elem::f32);
  for (int r = 0; r < 4; ++r) {
    double s = 0, s2 = 0;
    for (int j = 0; j < 16; ++j) {
      s += y[static_cast<std::size_t>(r * 16 + j)];
      s2 += y[static_cast<std::size_t>(r * 16 + j)] * y[static_cast<std::size_t>(r * 16 + j)];
    }
    EXPECT_NEAR(s / 16, 0.0, 1e-5);
    EXPECT_NEAR(s2 / 16, 1.0, 1e-3);
  }
}

// ---------------------------------------------------------------------------------
// Watchdog and JSONL

TEST(CalibRuntime, WatchdogAbortsAStuckCallOnly) {
  cal::Identity id;
  id.rank = 3;
  id.host = "node7";
  std::atomic<int> aborted{0}, hooked{0};
  {
    cal::Watchdog dog(id, 0.2, [&] { aborted++; });
    dog.add_abort_hook([&] { hooked++; });
    { auto g = dog.guard("ncclSend", 4); }  // done at once: nothing happens
    std::this_thread::sleep_for(std::chrono::milliseconds(350));
    EXPECT_EQ(aborted.load(), 0);
    testing::internal::CaptureStderr();
    {
      auto g = dog.guard("ncclRecv", 2);
      for (int i = 0; i < 100 && aborted.load() == 0; ++i) std::this_thread::sleep_for(std::chrono::milliseconds(20));
    }
    const std::string err = testing::internal::GetCapturedStderr();
    EXPECT_EQ(aborted.load(), 1);
    EXPECT_EQ(hooked.load(), 1);
    EXPECT_THAT(err, HasSubstr("rank 3 (host node7): ncclRecv with rank 2 has not finished after"));
    EXPECT_THAT(err, HasSubstr("--timeout 0.2"));
  }
  cal::Watchdog off(id, 0.0, [&] { aborted++; });  // disabled
  { auto g = off.guard("x"); }
}

TEST(CalibRuntime, JsonlLinesAreOnDiskAsSoonAsWritten) {
  testutil::TempDir dir;
  cal::JsonlWriter w(dir.path() / "raw" / "r.jsonl");
  nlohmann::ordered_json line;
  line["type"] = "transfer";
  line["bytes"] = 16;
  w.write(line);
  EXPECT_EQ(clirunner::slurp(dir.path() / "raw" / "r.jsonl"), "{\"type\":\"transfer\",\"bytes\":16}\n");
  EXPECT_EQ(cal::median({3, 1, 2}), 2);
  EXPECT_EQ(cal::median({4, 1, 2, 3}), 2.5);
}
