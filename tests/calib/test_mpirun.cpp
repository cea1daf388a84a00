// adagrouper-calib with the CPU backend, end to end under mpirun: stages writes a
// pipeline file adagrouper simulate accepts, p2p writes samples and a network file that
// simulate and plan --comm-profile accept, and on a veth link shaped by tc the measured
// rate is the shaping rate (skipped where network namespaces are not permitted).
#include <gmock/gmock.h>
#include <gtest/gtest.h>
#include <unistd.h>

#include <algorithm>
#include <fstream>
#include <map>
#include <optional>
#include <regex>
#include <sstream>

#include "../common/cli_runner.h"
#include "../common/test_util.h"
#include "calib.h"
#include "sim.h"
#include "traces.h"

namespace cal = adagrouper::calib;
namespace fs = std::filesystem;
using ::testing::HasSubstr;

namespace {

struct Run {
  int rc;
  std::string out, err;
};

// Runs a shell command from the source root, stdout and stderr captured.
Run shell(const std::string& cmd, const fs::path& dir) {
  const fs::path out = dir / "stdout.txt", err = dir / "stderr.txt";
  const std::string full = "cd '" SOURCE_ROOT "' && { " + cmd + "; } >'" + out.string() + "' 2>'" + err.string() + "'";
  const int status = std::system(full.c_str());
  return {WIFEXITED(status) ? WEXITSTATUS(status) : -1, clirunner::slurp(out), clirunner::slurp(err)};
}

// Ranks on this host talk over the loopback only: other tests create and remove network
// namespaces and their bridges meanwhile, and an interface that vanishes between mpirun's
// listing of them and a rank's connect fails the job.
std::string mpirun(int np) {
  return std::string("mpirun ") + (::geteuid() == 0 ? "--allow-run-as-root " : "") +
         "--mca btl_tcp_if_include lo --mca oob_tcp_if_include lo --oversubscribe -np " + std::to_string(np) + " ";
}

// adagrouper-calib under mpirun -np N with the CPU backend.
Run calib(int np, const std::string& args, const fs::path& dir) {
  return shell(mpirun(np) + "'" CALIB_BIN "' " + args + " --backend cpu --timeout 60", dir);
}

Run cli(const std::string& args, const fs::path& dir) { return shell("'" ADAGROUPER_BIN "' " + args, dir); }

std::vector<nlohmann::json> jsonl(const fs::path& p) {
  std::vector<nlohmann::json> out;
  std::ifstream in(p);
  std::string line;
  while (std::getline(in, line))
    if (!line.empty()) out.push_back(nlohmann::json::parse(line));
  return out;
}

// The closed forms of docs/calibration.md for the fp32 toy (e = 4 bytes).
std::uint64_t activation_closed_form(const std::string& kind, std::uint64_t b) {
  const std::uint64_t s = 32, h = 64, f = 256, a = 4, V = 512, e = 4;
  if (kind == "embedding") return 4 * b * s;
  if (kind == "transformer") return e * b * s * (8 * h + 2 * f + a * s) + 16 * b * s;
  return e * b * s * (2 * h + V) + 12 * b * s;  // head
}

// Checks a stages run of a tiny config: the pipeline file loads and simulates, times grow
// with the micro-batch size, the layer lines have the exact form and closed-form sizes.
void check_stages(const fs::path& out, int stages, const std::vector<int>& sizes, int repeat, const fs::path& dir) {
  const auto pipe = adagrouper::sim::load_pipeline(out / "pipeline.json");
  ASSERT_EQ(pipe.num_stages(), stages);
  for (int s = 0; s < stages; ++s) {
    const auto& prof = pipe.stages[static_cast<std::size_t>(s)].profile;
    ASSERT_EQ(prof.size(), sizes.size());
    for (std::size_t i = 0; i < sizes.size(); ++i) EXPECT_EQ(prof[i].micro_batch_size, sizes[i]);
    // 4x or 16x the work: strictly more time, on every stage.
    EXPECT_GT(prof.back().forward_s, prof.front().forward_s) << "stage " << s;
    EXPECT_GT(prof.back().backward_s, prof.front().backward_s) << "stage " << s;
    EXPECT_GT(prof.back().activation_bytes, prof.front().activation_bytes);
    EXPECT_GT(pipe.stages[static_cast<std::size_t>(s)].static_bytes, 0);
    if (s + 1 < stages) {
      EXPECT_EQ(prof.front().output_bytes, 4.0 * sizes.front() * 32 * 64);
    }
  }
  const std::string b = std::to_string(sizes.front());
  const auto sim = cli("simulate --pipeline '" + (out / "pipeline.json").string() +
                                  "' --network configs/examples/toy-net-free.json --schedule 1f1b --micro-batch-size " +
                                  b + " --json",
                              dir);
  ASSERT_EQ(sim.rc, 0) << sim.err;
  EXPECT_GT(nlohmann::json::parse(sim.out)["mean_iteration_time_s"].get<double>(), 0);

  // stages.jsonl: every measurement, and the layer lines exactly as `model --measured`
  // reads them.
  std::ifstream in(out / "stages.jsonl");
  std::string line;
  int measurements = 0, layers = 0;
  std::map<std::string, int> kinds;
  while (std::getline(in, line)) {
    const auto j = nlohmann::json::parse(line);
    if (j["type"] == "measurement") ++measurements;
    if (j["type"] != "layer") continue;
    ++layers;
    EXPECT_EQ(line.rfind("{\"type\":\"layer\",\"layer\":", 0), 0u) << line;
    std::vector<std::string> keys;
    const auto ordered = nlohmann::ordered_json::parse(line);
    for (const auto& [k, v] : ordered.items()) keys.push_back(k);
    EXPECT_EQ(keys, (std::vector<std::string>{"type", "layer", "name", "micro_batch_size", "forward_s", "backward_s",
                                              "activation_bytes", "output_bytes", "parameter_bytes"}));
    const std::string kind = j["name"];
    kinds[kind]++;
    EXPECT_EQ(j["activation_bytes"].get<std::uint64_t>(),
              activation_closed_form(kind, j["micro_batch_size"].get<std::uint64_t>()))
        << line;
    EXPECT_GT(j["forward_s"].get<double>(), 0);
    EXPECT_GT(j["backward_s"].get<double>(), 0);
  }
  const int model_layers = stages + 2;  // one transformer layer per stage, embedding, head
  EXPECT_EQ(layers, model_layers * static_cast<int>(sizes.size()));
  EXPECT_EQ(measurements, model_layers * static_cast<int>(sizes.size()) * repeat);
  EXPECT_EQ(kinds["embedding"], static_cast<int>(sizes.size()));
  EXPECT_EQ(kinds["head"], static_cast<int>(sizes.size()));
  for (int r = 0; r < stages; ++r) EXPECT_TRUE(fs::exists(out / "raw" / ("stages-rank-" + std::to_string(r) + ".jsonl")));
}

// Checks a p2p run: one sample file per channel with `count` rows, a network file that
// loads with the traces library and simulates.
void check_p2p(const fs::path& out, int stages, int count) {
  for (int s = 0; s + 1 < stages; ++s)
    for (const auto& [f, t] : {std::pair{s, s + 1}, std::pair{s + 1, s}}) {
      const auto rows = adagrouper::traces::load_transfer_samples(out / cal::sample_file(f, t));
      EXPECT_EQ(static_cast<int>(rows.size()), count) << f << "->" << t;
    }
  const auto net = adagrouper::sim::load_network(out / "network.json", stages, adagrouper::traces::TraceRates());
  for (int s = 0; s + 1 < stages; ++s) {
    EXPECT_FALSE(net.channel(s, s + 1).unlimited());
    EXPECT_FALSE(net.channel(s + 1, s).unlimited());
    EXPECT_GT(net.channel(s, s + 1).rate->value_at(0.0), 0);
  }
}

}  // namespace

// The whole loop on 2 ranks: stages, then p2p with the measured messages, then simulate
// and plan --comm-profile on what was measured.
TEST(CalibMpirun, StagesThenP2pOnTwoRanks) {
  testutil::TempDir dir;
  const fs::path out = dir.path() / "out";
  const auto st = calib(2, "stages --stages configs/calib/tiny-2stage.json -b 1 -e 16 -f 4 --repeat 3 --warmup 1 -o '" +
                               out.string() + "'",
                        dir.path());
  ASSERT_EQ(st.rc, 0) << st.err;
  EXPECT_THAT(st.out, HasSubstr("wrote"));
  check_stages(out, 2, {1, 4, 16}, 3, dir.path());

  // Messages: stage 0's output_bytes at b = 1, 4, 16 (8 KiB, 32 KiB, 128 KiB).
  const fs::path net = dir.path() / "net";
  const auto p2p = calib(2, "p2p --pipeline '" + (out / "pipeline.json").string() +
                                "' --duration 0.5 --interval 0.02 -o '" + net.string() + "'",
                         dir.path());
  ASSERT_EQ(p2p.rc, 0) << p2p.err;
  check_p2p(net, 2, 25);
  const auto rows = adagrouper::traces::load_transfer_samples(net / "samples/0-1.csv");
  EXPECT_EQ(rows[0].bytes, 8192);
  EXPECT_EQ(rows[1].bytes, 32768);
  EXPECT_EQ(rows[2].bytes, 131072);
  int transfers = 0;
  for (int r = 0; r < 2; ++r)
    for (const auto& j : jsonl(net / "raw" / ("p2p-rank-" + std::to_string(r) + ".jsonl")))
      transfers += j["type"] == "transfer";
  EXPECT_EQ(transfers, 50);  // every sample was written to a raw file as it was measured

  const std::string pipe = (out / "pipeline.json").string();
  const auto sim = cli("simulate --pipeline '" + pipe + "' --network '" + (net / "network.json").string() +
                                  "' --schedule kfkb --k 2 --micro-batch-size 4 --iterations 2",
                              dir.path());
  EXPECT_EQ(sim.rc, 0) << sim.err;
  const auto plan = cli("plan --pipeline '" + pipe + "' --network '" + (net / "network.json").string() +
                                   "' --comm-profile '" + (net / "samples.csv").string() +
                                   "' --memory-limit 1e9 --json",
                               dir.path());
  ASSERT_EQ(plan.rc, 0) << plan.err;
  EXPECT_EQ(nlohmann::json::parse(plan.out)["comm_profile"]["channels"].size(), 2u);
}

TEST(CalibMpirun, FourRanksStagesP2pContentionAndBandwidth) {
  testutil::TempDir dir;
  const fs::path out = dir.path() / "out";
  // 4 ranks on however few cores: b = 1 and 16, medians of 5, so that preemption by the
  // other ranks cannot hide 16 times the work.
  const auto st = calib(4, "stages --stages configs/calib/tiny-4stage.json -b 1 -e 16 -f 16 --repeat 5 --warmup 1 -o '" +
                               out.string() + "'",
                        dir.path());
  ASSERT_EQ(st.rc, 0) << st.err;
  check_stages(out, 4, {1, 16}, 5, dir.path());

  const fs::path net = dir.path() / "net";
  const auto p2p = calib(4, "p2p --bytes 64K,16K --duration 0.3 --interval 0.03 --contention 0.05,0.05,16K -o '" +
                                net.string() + "'",
                         dir.path());
  ASSERT_EQ(p2p.rc, 0) << p2p.err;
  check_p2p(net, 4, 10);
  int switches = 0;
  for (int r = 0; r < 4; ++r)
    for (const auto& j : jsonl(net / "raw" / ("p2p-rank-" + std::to_string(r) + ".jsonl")))
      switches += j["type"] == "contention";
  EXPECT_GT(switches, 0);  // the background traffic went on (and off)
  const auto sim = cli("simulate --pipeline '" + (out / "pipeline.json").string() + "' --network '" +
                                  (net / "network.json").string() + "' --schedule 1f1b --micro-batch-size 4",
                              dir.path());
  EXPECT_EQ(sim.rc, 0) << sim.err;

  const auto bw = calib(4, "bandwidth -b 1K -e 64K -f 8 --iters 5 --warmup 1 -o '" + net.string() + "'", dir.path());
  ASSERT_EQ(bw.rc, 0) << bw.err;
  EXPECT_THAT(bw.out, HasSubstr("algbw(GB/s)"));
  int rows = 0;
  for (const auto& j : jsonl(net / "bandwidth.jsonl"))
    if (j["type"] == "bandwidth") {
      ++rows;
      EXPECT_GT(j["time_s"].get<double>(), 0);
    }
  EXPECT_EQ(rows, 3);  // 1K, 8K, 64K
}

TEST(CalibMpirun, MismatchedRankCountIsOneLineBeforeAnyWork) {
  testutil::TempDir dir;
  const auto r = calib(2, "stages --stages configs/calib/tiny-4stage.json -o '" + (dir.path() / "o").string() + "'",
                       dir.path());
  EXPECT_EQ(r.rc, 2);
  const std::string expected = "adagrouper-calib stages: configs/calib/tiny-4stage.json: 4 stages, but mpirun started 2 ranks";
  EXPECT_THAT(r.err, HasSubstr(expected));
  EXPECT_EQ(r.err.find(expected), r.err.rfind(expected)) << "said once: " << r.err;
  EXPECT_FALSE(fs::exists(dir.path() / "o"));
  const auto p = calib(2, "p2p --pipeline configs/examples/toy-4.json --duration 1", dir.path());
  EXPECT_EQ(p.rc, 2);
  EXPECT_THAT(p.err, HasSubstr("toy-4.json: 4 stages, but mpirun started 2 ranks"));
}

// A chain of network namespaces (tools/scripts/netns.sh) under a prefix of its own, removed when
// the test ends; cmd() is a netns.sh command line for it.
namespace {
const std::string kNetns = SOURCE_ROOT "/tools/scripts/netns.sh";
struct NetnsChain {
  std::string prefix;
  fs::path dir;
  std::string cmd(const std::string& args) const { return "'" + kNetns + "' --prefix " + prefix + " " + args; }
  ~NetnsChain() { shell(cmd("destroy"), dir); }
};

// Why this host cannot make network namespaces (netns.sh check), or "" when it can.
std::string netns_refusal(const fs::path& dir) {
  const auto check = shell("'" + kNetns + "' check", dir);
  return check.rc == 0 ? "" : "network namespaces are not permitted here: " + check.err;
}
}  // namespace

// Two namespaces joined by a veth pair shaped to 200 Mbit/s: the rate p2p measures on the
// shaped channel is the shaping rate (25e6 bytes/s) within 15%, in its fastest message.
// The shaper caps every message, and a host that stalls a rank only slows some (on a
// slowed host single messages took up to 1.6 times the others, enough to pull the mean
// below 85%).
TEST(CalibMpirun, ShapedVethLinkIsMeasuredAtItsRate) {
  testutil::TempDir dir;
  if (const auto why = netns_refusal(dir.path()); !why.empty()) GTEST_SKIP() << why;
  const NetnsChain chain{"ct" + std::to_string(::getpid() % 100000), dir.path()};
  const auto made = shell(chain.cmd("create 2") + " && " + chain.cmd("rate 0 200mbit"), dir.path());
  ASSERT_EQ(made.rc, 0) << made.err;
  const fs::path out = dir.path() / "shaped";
  // One direction: with both, each direction's MPI handshakes queue behind the other's
  // data in the shaped queue (docs/calibration.md). Messages of 8 MiB (0.34 s each at
  // 200 Mbit/s), so that MPI's per-message rendezvous is a small part of each.
  const auto r = shell(chain.cmd("mpirun -np 2 -- '" CALIB_BIN "'") +
                           " p2p --backend cpu --timeout 60 --bytes 8M --direction forward --warmup 1 --duration 1.6 "
                           "--interval 0.4 -o '" + out.string() + "'",
                       dir.path());
  ASSERT_EQ(r.rc, 0) << r.err;
  const auto net = adagrouper::sim::load_network(out / "network.json", 2, adagrouper::traces::TraceRates());
  const double latency = net.channel(0, 1).latency_s;
  double rate = 0;
  const auto samples = adagrouper::traces::load_transfer_samples(out / "samples/0-1.csv");
  ASSERT_GE(samples.size(), 2u);
  for (const auto& s : samples) rate = std::max(rate, s.bytes / (s.duration_s - latency));
  EXPECT_NEAR(rate / 25e6, 1.0, 0.15) << "measured " << rate << " bytes/s in the fastest message";
  EXPECT_TRUE(net.channel(1, 0).unlimited());  // not recorded with --direction forward
}

// The packets a qdisc or class of `tc -s` output sent ("Sent B bytes P pkt"), 0 if none.
long sent_packets(const std::string& tc_out) {
  const auto at = tc_out.find(" bytes ");
  return at == std::string::npos ? 0 : std::stol(tc_out.substr(at + 7));
}

// `netns.sh rate --acks free` puts tbf under an htb whose class 1:9 takes TCP's pure ACKs
// past the shaper: with data going 0 -> 1 only, the ACKs leaving namespace 1 go through
// 1:9, not through its tbf; a second call changes the rate in place, `--acks shaped` goes
// back to a root tbf, and a bad value is one line, status 2.
TEST(CalibMpirun, AcksFreePassesPureAcksBesideTheShaper) {
  testutil::TempDir dir;
  if (const auto why = netns_refusal(dir.path()); !why.empty()) GTEST_SKIP() << why;
  const NetnsChain chain{"ca" + std::to_string(::getpid() % 100000), dir.path()};
  const auto made = shell(chain.cmd("create 2") + " && " + chain.cmd("rate 0 200mbit --acks free"), dir.path());
  ASSERT_EQ(made.rc, 0) << made.err;
  const auto tc = [&](int ns, const std::string& args) {
    return shell(chain.cmd("exec " + std::to_string(ns) + " tc " + args), dir.path()).out;
  };
  EXPECT_THAT(tc(0, "qdisc show dev next"), HasSubstr("qdisc tbf 10: parent 1:1 rate 200Mbit"));
  const auto r = shell(chain.cmd("mpirun -np 2 -- '" CALIB_BIN "'") +
                           " p2p --backend cpu --timeout 60 --bytes 4M --direction forward --warmup 1 --duration 0.6 "
                           "--interval 0.2 -o '" + (dir.path() / "p2p").string() + "'",
                       dir.path());
  ASSERT_EQ(r.rc, 0) << r.err;
  const long acks = sent_packets(tc(1, "-s class show dev prev classid 1:9"));
  const long shaped_back = sent_packets(tc(1, "-s qdisc show dev prev parent 1:1"));
  EXPECT_GT(acks, 1000) << "the ACKs of about 4 MB of data";
  EXPECT_LT(shaped_back, acks / 10) << "what the tbf on the way back sent: not the ACKs";
  EXPECT_GT(sent_packets(tc(0, "-s qdisc show dev next parent 1:1")), 1000) << "the data went through the tbf";

  ASSERT_EQ(shell(chain.cmd("rate 0 100mbit --acks free"), dir.path()).rc, 0);
  EXPECT_THAT(tc(1, "qdisc show dev prev"), HasSubstr("qdisc tbf 10: parent 1:1 rate 100Mbit"));
  EXPECT_GE(sent_packets(tc(1, "-s class show dev prev classid 1:9")), acks) << "changed in place, not rebuilt";
  ASSERT_EQ(shell(chain.cmd("rate 0 100mbit"), dir.path()).rc, 0);
  EXPECT_THAT(tc(1, "qdisc show dev prev"), HasSubstr("root"));
  EXPECT_THAT(tc(1, "qdisc show dev prev"), Not(HasSubstr("htb")));
  const auto bad = shell(chain.cmd("rate 0 100mbit --acks maybe"), dir.path());
  EXPECT_EQ(bad.rc, 2);
  EXPECT_EQ(bad.err, "netns.sh: rate: --acks must be shaped or free, got 'maybe'\n");
}

// `netns.sh tcp` sets TCP's congestion control, restart after idle, autocorking and pacing
// ratios in every namespace and prints what is in effect; what the kernel does not allow
// is refused in one line, status 2, and changes nothing.
TEST(CalibMpirun, TcpSettingsApplyToEveryNamespace) {
  testutil::TempDir dir;
  if (const auto why = netns_refusal(dir.path()); !why.empty()) GTEST_SKIP() << why;
  const NetnsChain chain{"ck" + std::to_string(::getpid() % 100000), dir.path()};
  ASSERT_EQ(shell(chain.cmd("create 3"), dir.path()).rc, 0);
  const auto set = shell(chain.cmd("tcp reno --idle-restart off --autocork off --pacing-ratio 1000"), dir.path());
  ASSERT_EQ(set.rc, 0) << set.err;
  const std::string in_effect =
      "congestion control reno, slow start after idle 0, autocorking 0, pacing ratios 1000/1000\n";
  EXPECT_EQ(set.out, in_effect);
  const auto last = shell(chain.cmd("exec 2 sh -c 'cd /proc/sys/net/ipv4 && cat tcp_congestion_control "
                                    "tcp_slow_start_after_idle tcp_autocorking tcp_pacing_ss_ratio "
                                    "tcp_pacing_ca_ratio'"),
                          dir.path());
  EXPECT_EQ(last.out, "reno\n0\n0\n1000\n1000\n");
  for (const auto& [args, piece] : std::vector<std::pair<std::string, std::string>>{
           {"tcp nosuchcc", "congestion control 'nosuchcc' is not available here"},
           {"tcp --idle-restart maybe", "--idle-restart: on, off or host"},
           {"tcp --idle-restart", "--idle-restart needs on, off or host"},
           {"tcp --autocork maybe", "--autocork: on, off or host"},
           {"tcp --autocork", "--autocork needs on, off or host"},
           {"tcp --pacing-ratio 50", "--pacing-ratio: per cent, 100 .. 1000, or host, got '50'"},
           {"tcp --pacing-ratio 1e3", "--pacing-ratio: per cent, 100 .. 1000, or host, got '1e3'"},
           {"tcp --pacing-ratio", "--pacing-ratio needs per cent"},
           {"tcp --bogus", "unknown option '--bogus'"}}) {
    const auto r = shell(chain.cmd(args), dir.path());
    EXPECT_EQ(r.rc, 2) << args;
    EXPECT_THAT(r.err, HasSubstr(piece)) << args;
    EXPECT_EQ(std::count(r.err.begin(), r.err.end(), '\n'), 1) << r.err;
  }
  EXPECT_EQ(shell(chain.cmd("tcp"), dir.path()).out, in_effect);
}

// Four namespaces in a chain, links shaped: ranks that are not neighbours (0 and 2, 0 and
// 3, ...) connect through the chain from the one address each namespace advertises.
// Before netns.sh gave each namespace its own routed address, a middle rank connected
// from its other link's address, Open MPI's tcp transport dropped the connection
// ("unexpected IP") and the job hung.
TEST(CalibMpirun, FourRankChainConnectsEveryPair) {
  testutil::TempDir dir;
  if (const auto why = netns_refusal(dir.path()); !why.empty()) GTEST_SKIP() << why;
  const NetnsChain chain{"cq" + std::to_string(::getpid() % 100000), dir.path()};
  const auto made = shell(chain.cmd("create 4") + " && " + chain.cmd("rate-all 1gbit"), dir.path());
  ASSERT_EQ(made.rc, 0) << made.err;
  const auto r = shell("timeout 120 " + chain.cmd("mpirun -np 4 -- '" CALIB_BIN "'") +
                           " bandwidth --backend cpu --timeout 60 -b 64K -e 64K --iters 3 --warmup 1 -o '" +
                           (dir.path() / "bw").string() + "'",
                       dir.path());
  ASSERT_EQ(r.rc, 0) << r.err;
  EXPECT_THAT(r.out, HasSubstr("4 ranks"));
  EXPECT_THAT(r.err, Not(HasSubstr("unexpected"))) << r.err;
  EXPECT_TRUE(fs::exists(dir.path() / "bw" / "bandwidth.jsonl"));
}

// Three namespaces in a ring: interleaved 1F1B at v = 2 runs model stages 0..5 on ranks
// 0, 1, 2, 0, 1, 2 (loop placement), so rank 2 sends model stage 2's activations to rank
// 0, and rank 0 model stage 3's gradients back. Those go over the ring's link 2 (rank 2's
// `next`, rank 0's `prev`), not through rank 1: each direction of it carries the 8
// micro-batches' 320 kB messages. A rate on link 2 exists only in a ring.
TEST(CalibMpirun, ThreeRankRingCarriesTheLoopPlacementsLastHop) {
  testutil::TempDir dir;
  if (const auto why = netns_refusal(dir.path()); !why.empty()) GTEST_SKIP() << why;
  const NetnsChain chain{"cr" + std::to_string(::getpid() % 100000), dir.path()};
  ASSERT_EQ(shell(chain.cmd("create 3") + " && " + chain.cmd("rate 2 1gbit"), dir.path()).rc, 2);
  ASSERT_EQ(shell(chain.cmd("destroy"), dir.path()).rc, 0);
  const auto made = shell(chain.cmd("create 3 --ring") + " && " + chain.cmd("rate-all 1gbit"), dir.path());
  ASSERT_EQ(made.rc, 0) << made.err;
  const std::string pipe = std::string(SOURCE_ROOT) + "/configs/fidelity/pipeline-6.json";
  const fs::path plan = dir.path() / "plan.json";
  const auto planned = cli("plan --pipeline '" + pipe + "' --network '" SOURCE_ROOT
                           "/configs/fidelity/net-200mbit.json' --devices 3 --families interleaved-1f1b "
                           "--virtual-stages 2 --memory-limit 8e9 --output '" + plan.string() + "'",
                           dir.path());
  ASSERT_EQ(planned.rc, 0) << planned.err;
  const auto doc = nlohmann::json::parse(clirunner::slurp(plan));
  int candidate = -1;
  for (std::size_t i = 0; i < doc.at("candidates").size() && candidate < 0; ++i) {
    const auto& c = doc.at("candidates")[i];
    if (c.at("schedule") == "interleaved-1f1b" && c.at("micro_batch_size") == 2 && c.at("virtual_stages") == 2)
      candidate = static_cast<int>(i);
  }
  ASSERT_GE(candidate, 0);
  const auto r = shell("timeout 120 " + chain.cmd("mpirun -np 3 -- '" CALIB_BIN "'") +
                           " replay --backend cpu --plan '" + plan.string() + "' --candidate " +
                           std::to_string(candidate) + " --pipeline '" + pipe + "' --iterations 1 --warmup 0",
                       dir.path());
  ASSERT_EQ(r.rc, 0) << r.err;
  for (const std::string end : {"exec 2 tc -s qdisc show dev next", "exec 0 tc -s qdisc show dev prev"}) {
    const auto stats = shell(chain.cmd(end), dir.path());
    ASSERT_EQ(stats.rc, 0) << stats.err;
    std::smatch m;
    ASSERT_TRUE(std::regex_search(stats.out, m, std::regex("Sent ([0-9]+) bytes"))) << stats.out;
    EXPECT_GT(std::stod(m[1].str()), 8 * 320e3) << end;
  }
}

// The GPU check's dry run (--backend cpu): every step a machine without a GPU can take
// (stages, plan, replays of each family, simulate, compare, simulate --stage-trace; with
// --ranks 2 also bandwidth and p2p, and 2-device replays over the network p2p measured)
// runs through the script as a GPU node with one or two GPUs would run it, so that the
// script works the first time such a node is lent.
namespace {

void gpu_check_dry_run(int ranks, const std::string& steps) {
  testutil::TempDir dir;
  const fs::path out = dir.path() / "gpu-check";
  const fs::path bin = fs::path(CALIB_BIN).parent_path();
  // Its mpirun over the loopback only, as mpirun() above (Open MPI reads OMPI_MCA_*).
  const auto r = shell("OMPI_MCA_btl_tcp_if_include=lo OMPI_MCA_oob_tcp_if_include=lo bash tools/scripts/gpu-check.sh "
                       "--prebuilt '" + bin.string() + "' --backend cpu --ranks " +
                           std::to_string(ranks) + " --iterations 2 --output-dir '" + out.string() + "'",
                       dir.path());
  ASSERT_EQ(r.rc, 0) << r.out << r.err;
  EXPECT_THAT(r.out, HasSubstr("gpu-check: passed: " + steps));
  const auto compare = nlohmann::json::parse(clirunner::slurp(out / "replay" / "compare.json"));
  const auto traced = nlohmann::json::parse(clirunner::slurp(out / "replay" / "compare-stage-trace.json"));
  // The chosen candidate and at least one other family, each a measured and predicted pair.
  ASSERT_GE(compare.at("comparisons").size(), 2u) << compare.dump();
  EXPECT_EQ(traced.at("comparisons").size(), compare.at("comparisons").size());
}

}  // namespace

TEST(CalibMpirun, GpuCheckDryRunAsOneGpu) { gpu_check_dry_run(1, "device stages replay"); }

TEST(CalibMpirun, GpuCheckDryRunAsTwoGpus) { gpu_check_dry_run(2, "device stages nccl replay"); }

// tools/bench/delivery_probe, the testbed's probe of message delivery (docs/fidelity.md,
// "Where the waiting messages' delay is"): every transport moves every message and
// reports both directions, or one with --one-way; the delivery delay is measured where
// the kernel stamps packets (tcp, udp) and nowhere else; on a shaped link a message
// takes what the shaper allows; bad options are one line, status 2.
namespace {

struct ProbeLine {
  double one_way_p10, one_way_p50, one_way_p90, one_way_max;
  std::string delivery_p50, delivery_p90, delivery_max;
};

// The probe's line for direction `from -> to`, if it printed one.
std::optional<ProbeLine> probe_line(const std::string& out, int from, int to) {
  std::istringstream in(out);
  const std::string head = std::to_string(from) + " -> " + std::to_string(to) + " ";
  for (std::string line; std::getline(in, line);) {
    if (line.rfind(head, 0) != 0) continue;
    std::istringstream fields(line.substr(head.size()));
    ProbeLine p{};
    fields >> p.one_way_p10 >> p.one_way_p50 >> p.one_way_p90 >> p.one_way_max >> p.delivery_p50 >> p.delivery_p90 >>
        p.delivery_max;
    if (fields.fail()) return std::nullopt;
    return p;
  }
  return std::nullopt;
}

Run probe(const std::string& launch, const std::string& args, const fs::path& dir) {
  return shell(launch + "'" DELIVERY_PROBE_BIN "' " + args, dir);
}

}  // namespace

TEST(DeliveryProbe, EveryTransportOnTheLoopback) {
  testutil::TempDir dir;
  for (const std::string transport : {"mpi-poll", "mpi-wait", "tcp", "udp"}) {
    const auto r = probe(mpirun(2), "--transport " + transport + " --count 5 --bytes 20000 --period 5ms --offset 2ms",
                         dir.path());
    ASSERT_EQ(r.rc, 0) << transport << ": " << r.err;
    EXPECT_THAT(r.out, HasSubstr("delivery_probe: " + transport + ", 5 messages of 20000 bytes each way"));
    for (const auto& [from, to] : {std::pair{0, 1}, std::pair{1, 0}}) {
      const auto line = probe_line(r.out, from, to);
      ASSERT_TRUE(line) << transport << " " << from << " -> " << to << ":\n" << r.out;
      EXPECT_GT(line->one_way_p10, 0) << r.out;
      EXPECT_LE(line->one_way_p10, line->one_way_p50);
      EXPECT_LE(line->one_way_p50, line->one_way_p90);
      EXPECT_LE(line->one_way_p90, line->one_way_max);
      if (transport.starts_with("mpi")) {
        EXPECT_EQ(line->delivery_p50, "-") << r.out;
      } else {
        const double delivery = std::stod(line->delivery_p50);
        EXPECT_GE(delivery, 0) << r.out;
        EXPECT_LE(delivery, line->one_way_max) << "delivered after the last packet, which came after the send began";
      }
    }
  }
  const auto one = probe(mpirun(2), "--count 3 --bytes 1000 --one-way", dir.path());
  ASSERT_EQ(one.rc, 0) << one.err;
  EXPECT_TRUE(probe_line(one.out, 0, 1)) << one.out;
  EXPECT_FALSE(probe_line(one.out, 1, 0)) << one.out;
}

// 200000 bytes at 100 Mbit/s behind a 10000-byte bucket: at least 15.2 ms on the link.
TEST(DeliveryProbe, ShapedLinkSetsTheOneWayTime) {
  testutil::TempDir dir;
  if (const auto why = netns_refusal(dir.path()); !why.empty()) GTEST_SKIP() << why;
  const NetnsChain chain{"cd" + std::to_string(::getpid() % 100000), dir.path()};
  ASSERT_EQ(shell(chain.cmd("create 2") + " && " + chain.cmd("rate 0 100mbit --burst 10000"), dir.path()).rc, 0);
  const auto r = probe(chain.cmd("mpirun -np 2 --") + " ",
                       "--transport tcp --one-way --count 6 --bytes 200000 --period 40ms --addresses 10.78.0.1,10.78.0.2",
                       dir.path());
  ASSERT_EQ(r.rc, 0) << r.err;
  const auto line = probe_line(r.out, 0, 1);
  ASSERT_TRUE(line) << r.out;
  EXPECT_GE(line->one_way_p50, 0.95 * (200000 - 10000) / 12.5e6 * 1e3) << r.out;
  EXPECT_LT(line->one_way_p50, 40.0) << r.out;
  EXPECT_LT(std::stod(line->delivery_p50), line->one_way_p50) << r.out;
}

TEST(DeliveryProbe, BadOptionsAreOneLineStatus2) {
  testutil::TempDir dir;
  const std::pair<std::string, std::string> cases[] = {
      {"--transport rdma", "delivery_probe: --transport: mpi-poll, mpi-wait, tcp or udp, got 'rdma'\n"},
      {"--addresses 10.0.0.1", "delivery_probe: --addresses: two addresses, rank 0's and rank 1's (A0,A1), got "
                               "'10.0.0.1'\n"},
      {"--addresses 10.0.0.1,host", "delivery_probe: --addresses: 'host' is not an IPv4 address\n"},
      {"--count 0", "delivery_probe: --count: from 1 to 1000000\n"},
      {"--period 0", "delivery_probe: --period must be positive, --offset and --poll at least 0\n"},
      {"--bytes 2GiB", "delivery_probe: --bytes: from 1 byte to 1 GiB\n"},
  };
  for (const auto& [args, line] : cases) {
    const auto r = probe("", args, dir.path());
    EXPECT_EQ(r.rc, 2) << args;
    EXPECT_EQ(r.err, line) << args;
    EXPECT_EQ(r.out, "") << args;
  }
  const auto alone = probe("", "--count 1", dir.path());  // one process: MPI's singleton
  EXPECT_EQ(alone.rc, 2);
  EXPECT_THAT(alone.err, HasSubstr("delivery_probe: runs on 2 ranks (mpirun -np 2), not 1\n"));
}
