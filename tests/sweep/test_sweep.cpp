// The sweep core (tools/sweep/) and `adagrouper sweep`: expansion, rows equal to
// `adagrouper simulate`, errors as rows, resume, shards, bad specs, MPI.
#include <fmt/format.h>
#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <algorithm>
#include <cstdio>
#include <filesystem>
#include <map>
#include <nlohmann/json.hpp>
#include <set>
#include <sstream>
#include <string>
#include <vector>

#include "../common/cli_runner.h"
#include "../common/test_util.h"
#include "runner.h"
#include "sweep.h"

namespace {

namespace fs = std::filesystem;
using clirunner::run_adagrouper;
using clirunner::slurp;
using nlohmann::json;
using testutil::input_error;
using testutil::TempDir;
using namespace adagrouper::sweep;

const fs::path kRoot = SOURCE_ROOT;

std::string abs(const char* rel) { return (kRoot / rel).string(); }

std::vector<std::string> lines_of(const std::string& text) {
  std::vector<std::string> out;
  std::istringstream in(text);
  for (std::string l; std::getline(in, l);) out.push_back(l);
  return out;
}

// The rows of a CSV output (header dropped), sorted.
std::vector<std::string> sorted_rows(const fs::path& csv) {
  auto lines = lines_of(slurp(csv));
  if (!lines.empty()) lines.erase(lines.begin());
  std::sort(lines.begin(), lines.end());
  return lines;
}

// CSV output as maps column -> cell.
std::vector<std::map<std::string, std::string>> read_csv(const fs::path& csv) {
  const auto lines = lines_of(slurp(csv));
  std::vector<std::map<std::string, std::string>> rows;
  if (lines.empty()) return rows;
  const auto header = split_csv_line(lines[0]);
  for (std::size_t i = 1; i < lines.size(); ++i) {
    const auto cells = split_csv_line(lines[i]);
    EXPECT_EQ(cells.size(), header.size()) << lines[i];
    std::map<std::string, std::string> row;
    for (std::size_t c = 0; c < header.size() && c < cells.size(); ++c) row[header[c]] = cells[c];
    rows.push_back(row);
  }
  return rows;
}

// A GPT run with a periodic trace swept over severity and period, an inline network
// and a trace-only run; small enough to check each row against `simulate`.
json gpt_spec() {
  return {
      {"defaults",
       {{"pipeline", abs("configs/pipelines/gpt-8stage-v100.json")},
        {"network", abs("configs/networks/eth-25g.json")},
        {"trace", {{"pattern", "periodic"}, {"high", 2.8e9}, {"low_fraction", 0.4}}},
        {"micro_batch_size", 2},
        {"iterations", 4},
        {"start_time_s", 1.5}}},
      {"grid", {{"trace.severity", {0.5, 0.9}}, {"trace.period_s", {2, 7}}, {"schedule", {"1f1b", "kfkb"}}, {"k", 4}}},
  };
}

// ---------------------------------------------------------------------------------

TEST(SweepSpec, ToyScheduleTableIsTheSpecsWorkedExample) {
  // The worked example (docs/model.md, section 9): 0.5 s messages give 1f1b 41, k=2 36,
  // k=4 36, gpipe 36, dapple-b 36; 2 s: 65, 49, 48, 52, 48; 0 s: 33 for every schedule.
  const Study study = load_study(kRoot / "configs/sweeps/toy-schedules.json");
  ASSERT_EQ(study.runs.size(), 15u);  // 3 networks x (1f1b, k=2, k=4, gpipe, dapple-b)
  const std::vector<std::size_t> all = [&] {
    std::vector<std::size_t> v;
    for (const auto& r : study.runs) v.push_back(r.index);
    return v;
  }();
  const Inputs inputs(study, all);
  std::map<std::string, double> got;
  for (const auto& run : study.runs) {
    const auto row = run_row(study, inputs, run);
    ASSERT_TRUE(row["error"].is_null()) << row.dump();
    const std::string key =
        row["network"].get<std::string>() + " " + run.schedule + (run.k ? std::to_string(*run.k) : std::string());
    got[key] = row["mean_iteration_time_s"].get<double>();
  }
  const std::string half = "../examples/toy-net-0.5s.json ", two = "../examples/toy-net-2s.json ",
                    free = "../examples/toy-net-free.json ";
  EXPECT_EQ(got[half + "1f1b"], 41);
  EXPECT_EQ(got[half + "kfkb2"], 36);
  EXPECT_EQ(got[half + "kfkb4"], 36);
  EXPECT_EQ(got[half + "gpipe"], 36);
  EXPECT_EQ(got[half + "dapple-b"], 36);
  EXPECT_EQ(got[two + "1f1b"], 65);
  EXPECT_EQ(got[two + "kfkb2"], 49);
  EXPECT_EQ(got[two + "kfkb4"], 48);
  EXPECT_EQ(got[two + "gpipe"], 52);
  EXPECT_EQ(got[two + "dapple-b"], 48);
  for (const char* s : {"1f1b", "kfkb2", "kfkb4", "gpipe", "dapple-b"}) EXPECT_EQ(got[free + s], 33) << s;
}

TEST(SweepSpec, ExpansionOrderDedupAndStableIds) {
  TempDir dir;
  json spec = gpt_spec();
  spec["grid"]["k"] = {2, 4};
  const Study a = parse_study(spec, (dir.path() / "a.json").string());
  // severity (2) x period (2) x (1f1b + kfkb k=2, 4): 1f1b does not repeat per k.
  ASSERT_EQ(a.runs.size(), 12u);
  EXPECT_EQ(a.traces.size(), 4u);
  EXPECT_EQ(a.trace_columns, (std::vector<std::string>{"trace.period_s", "trace.severity"}));
  // The last axis varies fastest: schedule/k inside severity inside period (trace.KEY
  // axes by name).
  EXPECT_EQ(a.runs[0].schedule, "1f1b");
  EXPECT_EQ(a.runs[1].k, 2);
  EXPECT_EQ(a.runs[2].k, 4);
  EXPECT_EQ(a.runs[3].trace_params, (std::vector<json>{2, 0.9}));
  EXPECT_EQ(a.runs[6].trace_params, (std::vector<json>{7, 0.5}));
  // severity 0.9 of 2.8e9: low = 2.8e9 x (1 - 0.9).
  EXPECT_EQ(a.traces[static_cast<std::size_t>(a.runs[3].trace)].doc["low"].get<double>(), 2.8e9 * (1 - 0.9));
  std::set<std::string> ids;
  for (const auto& r : a.runs) ids.insert(r.id);
  EXPECT_EQ(ids.size(), a.runs.size());
  // Adding a value to an axis keeps the ids of the runs that were there.
  spec["grid"]["trace.period_s"] = {2, 5, 7};
  const Study b = parse_study(spec, (dir.path() / "a.json").string());
  ASSERT_EQ(b.runs.size(), 18u);
  std::set<std::string> ids_b;
  for (const auto& r : b.runs) ids_b.insert(r.id);
  for (const auto& id : ids) EXPECT_TRUE(ids_b.count(id)) << id;
  // Ranges, and an explicit list after the grid.
  spec["grid"] = {{"trace.severity", {{"range", {0, 0.3, 0.1}}}}, {"trace.period_s", 2}, {"schedule", "gpipe"}};
  spec["runs"] = {{{"schedule", "dapple-b"}, {"trace.period_s", 3}, {"trace.severity", 0.5}}};
  const Study c = parse_study(spec, (dir.path() / "a.json").string());
  ASSERT_EQ(c.runs.size(), 5u);
  EXPECT_EQ(c.runs[3].trace_params[1], json(0.3));
  EXPECT_EQ(c.runs[4].schedule, "dapple-b");
}

TEST(SweepSpec, UnitsGiveThePlainRuns) {
  TempDir dir;
  json units = gpt_spec();
  units["defaults"]["start_time_s"] = "1500ms";
  units["grid"]["trace.period_s"] = {"2s", "7000ms"};
  units["grid"]["trace.low"] = {"1Gbit/s"};
  units["grid"].erase("trace.severity");
  json plain = gpt_spec();
  plain["grid"]["trace.period_s"] = {2, 7};
  plain["grid"]["trace.low"] = {125000000};
  plain["grid"].erase("trace.severity");
  const Study a = parse_study(plain, (dir.path() / "a.json").string());
  const Study b = parse_study(units, (dir.path() / "a.json").string());
  ASSERT_EQ(a.runs.size(), b.runs.size());
  for (std::size_t i = 0; i < a.runs.size(); ++i) {
    EXPECT_EQ(a.runs[i].id, b.runs[i].id);
    EXPECT_EQ(a.runs[i].start_time_s, b.runs[i].start_time_s);
    EXPECT_EQ(a.runs[i].trace_params, b.runs[i].trace_params);
  }
  // A range of times may have units too; a bad unit names the field.
  units["grid"]["start_time_s"] = {{"range", {"0s", "1min", "30s"}}};
  EXPECT_EQ(parse_study(units, (dir.path() / "a.json").string()).runs.size(), 3 * a.runs.size());
  units["grid"]["trace.period_s"] = {"2s", "7GB"};
  EXPECT_THAT(input_error([&] { parse_study(units, "u.json"); }),
              ::testing::HasSubstr("u.json: grid.trace.period_s[1]: \"7GB\": \"GB\" is a size unit, not a time unit"));
}

TEST(SweepSpec, PercentileIsNearestRank) {
  EXPECT_EQ(percentile({5, 1, 4, 2, 3}, 50), 3);
  EXPECT_EQ(percentile({5, 1, 4, 2, 3}, 99), 5);
  EXPECT_EQ(percentile({1, 2}, 50), 1);
  EXPECT_EQ(percentile({7}, 99), 7);
  std::vector<double> hundred;
  for (int i = 1; i <= 100; ++i) hundred.push_back(i);
  EXPECT_EQ(percentile(hundred, 99), 99);
  EXPECT_EQ(percentile(hundred, 50), 50);
}

TEST(SweepSpec, CsvCellsRoundTrip) {
  nlohmann::ordered_json row;
  row["a"] = "plain";
  row["b"] = "with, comma";
  row["c"] = "with \"quotes\"";
  row["d"] = nullptr;
  row["e"] = 0.1;
  row["f"] = true;
  row["g"] = "two\nlines";
  row["h"] = json::array({1, 2});
  const auto cells = split_csv_line(format_row(row, Format::csv));
  EXPECT_EQ(cells, (std::vector<std::string>{"plain", "with, comma", "with \"quotes\"", "", "0.1", "true", "two lines",
                                             "[1,2]"}));
}

TEST(SweepSpec, ShippedSpecsExpand) {
  for (const auto& e : fs::directory_iterator(kRoot / "configs/sweeps")) {
    if (e.path().extension() != ".json") continue;
    SCOPED_TRACE(e.path().string());
    const Study s = load_study(e.path());
    EXPECT_GT(s.runs.size(), 0u);
  }
  EXPECT_EQ(load_study(kRoot / "configs/sweeps/bench-1000.json").runs.size(), 1000u);
}

TEST(SweepSpec, BadSpecsNameFileAndField) {
  TempDir dir;
  const std::string pipe = abs("configs/examples/toy-4.json");
  const std::string net = abs("configs/examples/toy-net-0.5s.json");
  auto error_of = [&](const json& spec) {
    const fs::path p = dir.write("bad.json", spec);
    return input_error([&] { load_study(p); });
  };
  const json base = {{"pipeline", pipe}, {"network", net}, {"schedule", "1f1b"}, {"micro_batch_size", 1}};
  auto with = [&](const char* key, const json& value) {
    json g = base;
    g[key] = value;
    return json{{"grid", g}};
  };
  EXPECT_THAT(error_of({{"grid", base}, {"colour", 1}}),
              testing::HasSubstr("bad.json: line 2: unknown key \"colour\" for a sweep spec (known keys: defaults, "
                                 "grid, runs)"));
  EXPECT_THAT(error_of(with("kk", 2)),
              testing::HasSubstr("bad.json: line 3: grid: unknown key \"kk\" for a block of parameters (did you mean "
                                 "\"k\"?)"));
  EXPECT_THAT(error_of(with("schedule", {"1f1b", "zigzag"})),
              testing::HasSubstr("bad.json: grid.schedule[1]: unknown schedule 'zigzag'"));
  EXPECT_THAT(error_of(with("k", {2, 0})), testing::HasSubstr("bad.json: grid.k[1]: must be >= 1, got 0"));
  EXPECT_THAT(error_of(with("schedule", "kfkb")), testing::HasSubstr("bad.json: grid.k: missing field"));
  EXPECT_THAT(error_of(with("micro_batch_size", json::array())),
              testing::HasSubstr("bad.json: grid.micro_batch_size: must list at least one value"));
  EXPECT_THAT(error_of(with("iterations", {{"range", {1, 5, 0}}})),
              testing::HasSubstr("bad.json: grid.iterations.range[2]: step must be > 0"));
  EXPECT_THAT(error_of(with("start_time_s", -1)), testing::HasSubstr("bad.json: grid.start_time_s: must be >= 0"));
  EXPECT_THAT(error_of(with("trace.period_s", 2)), testing::HasSubstr("bad.json: grid.trace.period_s: sets a key"));
  EXPECT_THAT(error_of(with("seed", 1)), testing::HasSubstr("bad.json: grid.seed: needs a trace"));
  EXPECT_THAT(error_of(with("pipeline", "nowhere.json")), testing::HasSubstr("nowhere.json"));
  json no_net = base;
  no_net.erase("network");
  EXPECT_THAT(error_of({{"grid", no_net}}), testing::HasSubstr("bad.json: grid: needs a network or a trace"));
  json severe = with("trace", {{"pattern", "periodic"}, {"high", 1.0}, {"period_s", 2}, {"low_fraction", 0.5}});
  severe["grid"]["trace.severity"] = {0.5, 1.5};
  EXPECT_THAT(error_of(severe), testing::HasSubstr("bad.json: grid.trace.severity: must be in [0, 1], got 1.5"));
  // A trace the traces library rejects stops the sweep before it runs (Inputs).
  json bad_trace =
      with("trace", {{"pattern", "periodic"}, {"high", 1.0}, {"low", 0.5}, {"period_s", 2}, {"low_fraction", 2}});
  const fs::path p = dir.write("bad.json", bad_trace);
  const Study s = load_study(p);
  const std::vector<std::size_t> all{0};
  EXPECT_THAT(input_error([&] { Inputs in(s, all); }), testing::HasSubstr("bad.json: trace.low_fraction"));
  // The command line: one line, exit status 2.
  const auto r = run_adagrouper(
      fmt::format("sweep '{}' -o '{}'", (dir.path() / "bad.json").string(), (dir.path() / "out.csv").string()),
      dir.path());
  EXPECT_EQ(r.rc, 2);
  EXPECT_EQ(std::count(r.err.begin(), r.err.end(), '\n'), 1) << r.err;
  EXPECT_THAT(r.err, testing::HasSubstr("trace.low_fraction"));
  EXPECT_FALSE(fs::exists(dir.path() / "out.csv") && fs::file_size(dir.path() / "out.csv") > 0);
  EXPECT_THAT(input_error([] { parse_shard("3/3"); }), testing::HasSubstr("--shard"));
  EXPECT_THAT(input_error([] { parse_shard("1-2"); }), testing::HasSubstr("--shard"));
  EXPECT_THAT(input_error([] { format_for("out.txt", std::nullopt); }), testing::HasSubstr("--output-format"));
}

TEST(SweepSpec, NumbersAreNeverWrappedNorPastTheModelsScale) {
  TempDir dir;
  const std::string pipe = abs("configs/examples/toy-4.json");
  const std::string net = abs("configs/examples/toy-net-0.5s.json");
  auto error_of = [&](const std::string& text) {
    const fs::path p = dir.write("bad.json", text);
    return input_error([&] { load_study(p); });
  };
  const json base = {{"pipeline", pipe}, {"network", net}, {"schedule", "kfkb"}, {"micro_batch_size", 1}, {"k", 2}};
  auto with = [&](const char* key, const json& value) {
    json g = base;
    g[key] = value;
    return json{{"grid", g}}.dump();
  };
  // k = 2^32 + 2 ran as k = 2, with the id of another run.
  EXPECT_THAT(error_of(with("k", 4294967298)), testing::HasSubstr("grid.k: must be <= 16777216, got 4294967298"));
  EXPECT_THAT(error_of(with("micro_batch_size", {1, 4294967297})),
              testing::HasSubstr("grid.micro_batch_size[1]: must be <= 16777216"));
  EXPECT_THAT(error_of(with("iterations", 4294967297)), testing::HasSubstr("grid.iterations: must be <= 2147483647"));
  EXPECT_THAT(error_of(with("start_time_s", 1e17)), testing::HasSubstr("grid.start_time_s: 1e+17 s is beyond"));
  EXPECT_THAT(error_of(with("seed", {{"range", {-9223372036854775807LL, 9223372036854775807LL}}})),
              testing::HasSubstr("more than 1000000 values"));
  EXPECT_THAT(error_of(with("k", {{"range", {9223372036854775800LL, 9223372036854775807LL, 3}}})),
              testing::HasSubstr("must be <= 16777216"));
  EXPECT_THAT(error_of("{\"grid\": " + base.dump() + ",\n \"grid\": {}}"),
              testing::HasSubstr("bad.json: line 2: duplicate key \"grid\""));
  json typo = json::parse(with("k", 2));
  typo["grid"]["shedule"] = "1f1b";
  EXPECT_THAT(error_of(typo.dump()), testing::HasSubstr("unknown key \"shedule\" for a block of parameters (did you "
                                                        "mean \"schedule\"?)"));
  json inline_net = json::parse(with("k", 2));
  inline_net["grid"]["network"] = {{"name", "n"}, {"defualt", {{"constant", 1e9}}}};
  const fs::path p = dir.write("bad.json", inline_net.dump());
  const Study s = load_study(p);
  const std::vector<std::size_t> all{0};
  EXPECT_THAT(input_error([&] { Inputs in(s, all); }),
              testing::HasSubstr("unknown key \"defualt\" for a network (did you mean \"default\"?)"));
  json commented = base;
  commented["comment"] = "free text";
  EXPECT_NO_THROW(
      load_study(dir.write("ok.json", json{{"description", "d"}, {"comment", "c"}, {"grid", commented}}.dump())));
}

// ---------------------------------------------------------------------------------

TEST(SweepCli, RowsEqualIndividualSimulateRuns) {
  TempDir dir;
  json spec = gpt_spec();
  // Plus a run whose b does not divide B and one with k > M: error rows, not the end.
  // An inline network (its latency and a capacity stay, the trace replaces its rates)
  // and a run on the trace alone ("network": null over the default).
  const json inline_net = {
      {"latency_s", 1e-4}, {"default", {{"constant", 1e6}}}, {"channels", {{{"from", 0}, {"to", 1}, {"capacity", 2}}}}};
  spec["runs"] = {{{"schedule", "kfkb"}, {"k", 64}, {"trace.severity", 0.5}, {"trace.period_s", 2}},
                  {{"schedule", "1f1b"}, {"micro_batch_size", 3}, {"trace.severity", 0.5}, {"trace.period_s", 2}},
                  {{"schedule", "dapple-b"}, {"network", inline_net}, {"trace.severity", 0.75}, {"trace.period_s", 3}},
                  {{"schedule", "gpipe"}, {"network", nullptr}, {"trace.severity", 0.9}, {"trace.period_s", 7}}};
  const fs::path spec_path = dir.write("spec.json", spec);
  const fs::path out = dir.path() / "out.csv";
  const auto r =
      run_adagrouper(fmt::format("sweep '{}' -o '{}' --jobs 2", spec_path.string(), out.string()), dir.path());
  ASSERT_EQ(r.rc, 0) << r.err;
  EXPECT_THAT(r.err, testing::HasSubstr("12 runs"));
  const auto rows = read_csv(out);
  ASSERT_EQ(rows.size(), 12u);
  int checked = 0, errors = 0;
  for (const auto& row : rows) {
    if (!row.at("error").empty()) {
      ++errors;
      EXPECT_TRUE(row.at("mean_iteration_time_s").empty());
      if (row.at("k") == "64") {
        EXPECT_THAT(row.at("error"), testing::HasSubstr("k: group size 64 exceeds M = 32"));
      }
      if (row.at("micro_batch_size") == "3") {
        EXPECT_THAT(row.at("error"), testing::HasSubstr("does not divide"));
      }
      continue;
    }
    // The same run through `adagrouper simulate`: the network file with the trace as
    // its default rate (every channel), the same schedule, b, iterations, start.
    json trace = spec["defaults"]["trace"];
    const double severity = std::stod(row.at("trace.severity"));
    trace["low"] = 2.8e9 * (1 - severity);
    trace["period_s"] = std::stod(row.at("trace.period_s"));
    json net = {{"latency_s", 30e-6}, {"default", trace}};
    if (row.at("network").empty()) {
      net.erase("latency_s");
    } else if (row.at("network").front() == '{') {
      net = inline_net;
      net["default"] = trace;
    }
    const fs::path net_path = dir.write("net-" + row.at("id") + ".json", net);
    std::string args = fmt::format(
        "simulate --pipeline '{}' --network '{}' --schedule {} --micro-batch-size {} --iterations {} "
        "--start-time {} --json",
        abs("configs/pipelines/gpt-8stage-v100.json"), net_path.string(), row.at("schedule"),
        row.at("micro_batch_size"), row.at("iterations"), row.at("start_time_s"));
    if (!row.at("k").empty()) args += " --k " + row.at("k");
    const auto sim = run_adagrouper(args, dir.path());
    ASSERT_EQ(sim.rc, 0) << sim.err;
    const json s = json::parse(sim.out);
    const std::vector<double> times = s["iteration_times_s"].get<std::vector<double>>();
    double peak = 0;
    for (const auto& st : s["per_stage"]) peak = std::max(peak, st["peak_memory_bytes"].get<double>());
    EXPECT_EQ(std::stod(row.at("mean_iteration_time_s")), s["mean_iteration_time_s"].get<double>());
    EXPECT_EQ(std::stod(row.at("p50_iteration_time_s")), percentile(times, 50));
    EXPECT_EQ(std::stod(row.at("p99_iteration_time_s")), percentile(times, 99));
    EXPECT_EQ(std::stod(row.at("total_time_s")), s["total_time_s"].get<double>());
    EXPECT_EQ(std::stod(row.at("throughput_samples_per_s")), s["throughput_samples_per_s"].get<double>());
    EXPECT_EQ(std::stod(row.at("bubble_fraction")), s["bubble_fraction"].get<double>());
    EXPECT_EQ(std::stod(row.at("peak_memory_bytes")), peak);
    EXPECT_EQ(row.at("fits_memory"), s["fits_memory"].get<bool>() ? "true" : "false");
    EXPECT_EQ(std::stoi(row.at("micro_batches")), s["micro_batches"].get<int>());
    EXPECT_EQ(std::stoi(row.at("group_size")), s["k"].get<int>());
    ++checked;
  }
  EXPECT_EQ(checked, 10);
  EXPECT_EQ(errors, 2);
}

TEST(SweepCli, ResumeSkipsDoneRowsAndRedoesATruncatedLine) {
  TempDir dir;
  const fs::path spec = dir.write("spec.json", gpt_spec());
  const fs::path full = dir.path() / "full.csv", part = dir.path() / "part.csv";
  const std::string cmd = "sweep '" + spec.string() + "' --quiet --jobs 2 -o ";
  ASSERT_EQ(run_adagrouper(cmd + "'" + full.string() + "'", dir.path()).rc, 0);
  const auto all = lines_of(slurp(full));
  ASSERT_EQ(all.size(), 9u);  // header + 8 rows
  // A killed run: header, three rows (one of them marked, to see that it is kept, not
  // run again) and half of a fourth.
  std::string marked = all[2];
  marked = marked.substr(0, marked.rfind(',', marked.size() - 1));  // drop the (empty) error
  marked = marked.substr(0, marked.rfind(',')) + ",marked,";        // fits_memory: marked
  ASSERT_NE(marked, all[2]);
  {
    std::string content = all[0] + "\n" + all[1] + "\n" + marked + "\n" + all[3] + "\n" + all[4].substr(0, 25);
    dir.write("part.csv", content);
  }
  const auto r = run_adagrouper(cmd + "'" + part.string() + "'", dir.path());
  ASSERT_EQ(r.rc, 0) << r.err;
  const auto resumed = sorted_rows(part);
  ASSERT_EQ(resumed.size(), 8u);
  std::vector<std::string> expected(all.begin() + 1, all.end());
  expected[1] = marked;
  std::sort(expected.begin(), expected.end());
  EXPECT_EQ(resumed, expected);
  // Everything done: running again changes nothing.
  const std::string before = slurp(part);
  const auto again = run_adagrouper("sweep '" + spec.string() + "' -o '" + part.string() + "'", dir.path());
  ASSERT_EQ(again.rc, 0);
  EXPECT_THAT(again.err, testing::HasSubstr("8 already in"));
  EXPECT_EQ(slurp(part), before);

  // JSONL the same way, through the library's reader.
  const fs::path jl = dir.path() / "out.jsonl";
  ASSERT_EQ(run_adagrouper(cmd + "'" + jl.string() + "'", dir.path()).rc, 0);
  const auto jlines = lines_of(slurp(jl));
  ASSERT_EQ(jlines.size(), 8u);
  dir.write("out.jsonl", jlines[0] + "\n" + jlines[1] + "\n" + jlines[2].substr(0, 40));
  const Study study = load_study(spec);
  const Existing ex = read_existing(jl, Format::jsonl, columns(study), false);
  EXPECT_TRUE(ex.truncated);
  EXPECT_EQ(ex.rows, 2u);
  EXPECT_EQ(slurp(jl), jlines[0] + "\n" + jlines[1] + "\n");
  ASSERT_EQ(run_adagrouper(cmd + "'" + jl.string() + "'", dir.path()).rc, 0);
  auto got = lines_of(slurp(jl));
  auto want = jlines;
  std::sort(got.begin(), got.end());
  std::sort(want.begin(), want.end());
  EXPECT_EQ(got, want);

  // Rows with an error are done, unless --retry-errors: then they run again (and fail
  // again, the same way).
  json bad = gpt_spec();
  bad["grid"]["k"] = {4, 64};  // k = 64 > M = 32: four error rows
  const fs::path bad_spec = dir.write("bad.json", bad);
  const fs::path errs = dir.path() / "errs.csv";
  const std::string bad_cmd = "sweep '" + bad_spec.string() + "' --jobs 2 -o '" + errs.string() + "'";
  ASSERT_EQ(run_adagrouper(bad_cmd, dir.path()).rc, 0);
  const auto first = sorted_rows(errs);
  ASSERT_EQ(first.size(), 12u);
  EXPECT_EQ(std::count_if(first.begin(), first.end(), [](const std::string& l) { return l.back() != ','; }), 4);
  EXPECT_THAT(run_adagrouper(bad_cmd, dir.path()).err, testing::HasSubstr("12 already in"));
  const auto retried = run_adagrouper(bad_cmd + " --retry-errors", dir.path());
  EXPECT_THAT(retried.err, testing::HasSubstr("8 already in"));
  EXPECT_THAT(retried.err, testing::HasSubstr("4 runs in"));
  EXPECT_EQ(sorted_rows(errs), first);

  const auto header_only = columns(study);
  EXPECT_THAT(input_error([&] {
                dir.write("other.csv", "id,something\n");
                read_existing(dir.path() / "other.csv", Format::csv, header_only, false);
              }),
              testing::HasSubstr("other.csv: line 1: its columns are not this spec's"));
}

TEST(SweepCli, ShardsPartitionTheGrid) {
  TempDir dir;
  const Study study = parse_study(gpt_spec(), (dir.path() / "s.json").string());
  for (int n : {1, 2, 3, 5, 11}) {
    std::vector<int> seen(study.runs.size(), 0);
    for (int i = 0; i < n; ++i) {
      Options o;
      o.shard = {i, n};
      Summary s;
      for (std::size_t r : detail::select_runs(study, o, Existing{}, s)) ++seen[r];
    }
    for (std::size_t r = 0; r < seen.size(); ++r) EXPECT_EQ(seen[r], 1) << "n = " << n << ", run " << r;
  }
  // The command line: three shards together are the whole sweep.
  const fs::path spec = dir.write("spec.json", gpt_spec());
  const std::string cmd = "sweep '" + spec.string() + "' --quiet --jobs 1 ";
  ASSERT_EQ(run_adagrouper(cmd + "-o '" + (dir.path() / "all.csv").string() + "'", dir.path()).rc, 0);
  std::vector<std::string> merged;
  for (int i = 0; i < 3; ++i) {
    const fs::path p = dir.path() / fmt::format("shard{}.csv", i);
    ASSERT_EQ(run_adagrouper(cmd + fmt::format("--shard {}/3 -o '{}'", i, p.string()), dir.path()).rc, 0);
    const auto rows = sorted_rows(p);
    EXPECT_GE(rows.size(), 2u);
    merged.insert(merged.end(), rows.begin(), rows.end());
  }
  std::sort(merged.begin(), merged.end());
  EXPECT_EQ(merged, sorted_rows(dir.path() / "all.csv"));
}

TEST(SweepCli, MpiTwoRanksEqualsThreads) {
  if (!built_with_mpi())
    GTEST_SKIP() << "built without MPI (Open MPI not found, or -Dmpi=disabled): `adagrouper sweep` runs in one "
                    "process; install libopenmpi-dev and reconfigure to test the MPI spread";
  TempDir dir;
  json spec = gpt_spec();
  spec["grid"]["trace.period_s"] = {2, 5, 7};
  const fs::path spec_path = dir.write("spec.json", spec);
  const fs::path threads = dir.path() / "threads.csv", mpi = dir.path() / "mpi.csv";
  ASSERT_EQ(run_adagrouper(fmt::format("sweep '{}' --quiet --jobs 2 -o '{}'", spec_path.string(), threads.string()),
                           dir.path())
                .rc,
            0);
  const std::string cmd =
      fmt::format("cd '{}' && mpirun --oversubscribe --allow-run-as-root --mca btl_tcp_if_include lo --mca "
                  "oob_tcp_if_include lo -np 2 '{}' sweep '{}' -o '{}' 2>'{}'",
                  SOURCE_ROOT, ADAGROUPER_BIN, spec_path.string(), mpi.string(), (dir.path() / "mpi.err").string());
  const int status = std::system(cmd.c_str());
  const std::string err = slurp(dir.path() / "mpi.err");
  ASSERT_EQ(status, 0) << err;
  EXPECT_THAT(err, testing::HasSubstr("x 2 MPI ranks"));
  EXPECT_EQ(sorted_rows(mpi), sorted_rows(threads));
  EXPECT_EQ(sorted_rows(mpi).size(), 12u);
  // Resuming under MPI: rank 0 reads what is there (a partial last line included).
  const auto lines = lines_of(slurp(mpi));
  dir.write("mpi.csv", lines[0] + "\n" + lines[1] + "\n" + lines[2] + "\n" + lines[3].substr(0, 30));
  ASSERT_EQ(std::system(cmd.c_str()), 0) << slurp(dir.path() / "mpi.err");
  EXPECT_THAT(slurp(dir.path() / "mpi.err"), testing::HasSubstr("2 already in"));
  EXPECT_EQ(sorted_rows(mpi), sorted_rows(threads));
}

}  // namespace
