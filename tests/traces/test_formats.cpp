// The trace file formats: each reader on hand-written fixtures that follow the real
// formats, every class of bad input as a one-line "FILE:LINE: ..." error, format
// detection, and round trips through the writers.
#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <cmath>
#include <string>

#include "helpers.h"

namespace tracestest {
namespace {

using testing::AllOf;
using testing::HasSubstr;
using testing::StartsWith;

// ---------------------------------------------------------------------------------
// CSV

TEST(Csv, HeaderCommentsBlankLinesAndCrLf) {
  const tr::Loaded l = tr::load_trace_file(fixture("link.csv"));
  EXPECT_EQ(l.format, tr::Format::csv);
  // 0.5 s repeats 2.8e9 and is merged away; the last row's time is the span.
  EXPECT_EQ(points(l.trace), (P{{0, 2.8e9}, {1.5, 3.5e8}, {2.25, 1.4e9}, {4, 2.8e9}}));
  EXPECT_EQ(l.trace.span_s, 4.0);
  EXPECT_FALSE(l.trace.repeats());
}

TEST(Csv, NoHeaderAndPlusSigns) {
  const tr::Trace t = parse("0,5\n1,+6\n2.5,1e1\n");
  EXPECT_EQ(points(t), (P{{0, 5}, {1, 6}, {2.5, 10}}));
  EXPECT_EQ(t.span_s, 2.5);
}

TEST(Csv, ByteOrderMarkIsSkipped) {
  EXPECT_EQ(points(parse("\xEF\xBB\xBF" "0,5\n1,6\n")), (P{{0, 5}, {1, 6}}));
  EXPECT_EQ(points(parse("\xEF\xBB\xBF" "time_s,value\n0,5\n")), (P{{0, 5}}));
}

TEST(Csv, SingleRowIsAConstant) {
  const tr::Trace t = parse("time_s,value\n0,3e9\n");
  EXPECT_EQ(points(t), (P{{0, 3e9}}));
  EXPECT_EQ(t.span_s, 0.0);
}

TEST(Csv, RebaseMakesTimesRelative) {
  tr::LoadOptions opt;
  opt.rebase = true;
  const tr::Trace t = parse("1700000000,5\n1700000002,6\n", "t.csv", opt);
  EXPECT_EQ(points(t), (P{{0, 5}, {2, 6}}));
}

TEST(Csv, BadInputNamesFileAndLine) {
  struct Case {
    const char* text;
    const char* expected;
  };
  const Case cases[] = {
      {"0,1\n1,abc\n", "t.csv:2: value: not a number: \"abc\""},
      {"0,1\n1,nan\n", "t.csv:2: value: NaN is not allowed"},
      {"0,1\n1,inf\n", "t.csv:2: value: infinite is not allowed"},
      {"0,1\n1,1e999\n", "t.csv:2: value: out of range is not allowed"},
      {"0,1\n1,-3\n", "t.csv:2: value: must be >= 0, got -3"},
      {"# c\n0,1\n\n5,1\n3,1\n", "t.csv:5: time_s: 3 goes backwards (line 4 has 5)"},
      {"0,1\n2,1\n2,3\n", "t.csv:3: time_s: 2 repeats the time of line 2"},
      {"0,1\n1,2,3\n", "t.csv:2: expected 2 columns (time_s,value), got 3"},
      {"time_s,value\n0,1\nx,2\n", "t.csv:3: time_s: not a number: \"x\""},
      {"1,5\n2,6\n", "t.csv:1: time_s: the first time must be 0, got 1"},
      {"0,\n", "t.csv:1: value: empty is not allowed"},
      {"-1,4\n", "t.csv:1: time_s: the first time must be 0, got -1"},
  };
  for (const auto& c : cases) {
    tr::LoadOptions opt;
    opt.format = tr::Format::csv;
    EXPECT_EQ(input_error([&] { parse(c.text, "t.csv", opt); }).substr(0, std::string(c.expected).size()), c.expected)
        << c.text;
  }
}

TEST(Csv, EmptyTraceIsAnError) {
  tr::LoadOptions opt;
  opt.format = tr::Format::csv;
  EXPECT_EQ(input_error([&] { parse("# only a comment\ntime_s,value\n\n", "e.csv", opt); }),
            "e.csv: no data rows (time_s,value): the trace is empty");
  EXPECT_THAT(input_error([&] { parse("", "e.csv"); }), StartsWith("e.csv: the file is empty"));
}

TEST(Csv, MissingFile) {
  EXPECT_EQ(input_error([] { tr::load_trace_file("/nonexistent/x.csv"); }), "/nonexistent/x.csv: cannot open file");
}

// ---------------------------------------------------------------------------------
// Transfer samples

TEST(Samples, EffectiveRateIsBytesOverDurationMinusLatency) {
  tr::LoadOptions opt;
  opt.latency_s = 0.004;
  const tr::Loaded l = tr::load_trace_file(fixture("samples.csv"), opt);
  EXPECT_EQ(l.format, tr::Format::samples);
  const double b = 67108864;
  // Times relative to the first sample; the second sample's rate equals the first's.
  EXPECT_EQ(points(l.trace), (P{{0, b / (0.024 - 0.004)}, {0.5, b / (0.19 - 0.004)}, {0.75, b / (0.0245 - 0.004)}}));
  EXPECT_DOUBLE_EQ(l.trace.span_s, 0.75 + 0.0245);  // the end of the last transfer
}

TEST(Samples, DurationNotAboveLatencyIsAnError) {
  tr::LoadOptions opt;
  opt.latency_s = 0.5;
  opt.format = tr::Format::samples;
  EXPECT_EQ(input_error([&] { parse("time_s,bytes,duration_s\n10,100,1\n11,100,0.5\n", "s.csv", opt); }),
            "s.csv:3: duration_s: 0.5 is not larger than the latency 0.5 s: no effective rate");
  opt.latency_s = 0;
  EXPECT_EQ(input_error([&] { parse("10,100,0\n", "s.csv", opt); }), "s.csv:1: duration_s: must be > 0, got 0");
  EXPECT_EQ(input_error([&] { parse("10,-100,1\n", "s.csv", opt); }), "s.csv:1: bytes: must be >= 0, got -100");
  EXPECT_EQ(input_error([&] { parse("10,1,1\n9,1,1\n", "s.csv", opt); }),
            "s.csv:2: time_s: 9 goes backwards (line 1 has 10)");
}

// ---------------------------------------------------------------------------------
// iperf3 --json

TEST(Iperf3, KeptIntervalsInBytesPerSecondRelativeToTheFirst) {
  const tr::Loaded l = tr::load_trace_file(fixture("iperf3-tcp.json"));
  EXPECT_EQ(l.format, tr::Format::iperf3);
  // Two omitted intervals (-O 2) are skipped; iperf3 restarts its clock after them.
  EXPECT_EQ(points(l.trace), (P{{0, 23487120000 / 8.0},
                                {1.000050, 2935840000 / 8.0},
                                {2.000110, 2953023000 / 8.0},
                                {3.000031, 23402860000 / 8.0}}));
  EXPECT_DOUBLE_EQ(l.trace.span_s, 4.000089);
}

TEST(Iperf3, ErrorFieldIsQuoted) {
  const std::string path = fixture("iperf3-error.json").string();
  EXPECT_EQ(input_error([&] { tr::load_trace_file(path); }),
            path + ": error: iperf3 reported an error: \"error - unable to connect to server - server may have "
                   "stopped running or use a different port, firewall issue, etc.: Connection refused\"");
}

TEST(Iperf3, BadStructureNamesTheField) {
  tr::LoadOptions opt;
  opt.format = tr::Format::iperf3;
  EXPECT_EQ(input_error([&] { parse(R"({"start": {}, "end": {}})", "i.json", opt); }), "i.json: intervals: missing field");
  EXPECT_EQ(input_error([&] {
              parse(R"({"intervals": [{"sum": {"start": 0, "end": 1, "bits_per_second": -8}}]})", "i.json", opt);
            }),
            "i.json: intervals[0].sum.bits_per_second: must be >= 0, got -8");
  EXPECT_EQ(input_error([&] {
              parse(R"({"intervals": [{"sum": {"start": 0, "end": 1, "bits_per_second": 8, "omitted": true}}]})",
                    "i.json", opt);
            }),
            "i.json: intervals: no measured (non-omitted) intervals: the trace is empty");
  EXPECT_THAT(input_error([&] { parse("{\"intervals\": [", "i.json", opt); }),
              AllOf(StartsWith("i.json: line 1, column "), HasSubstr(": invalid JSON: ")));
}

// ---------------------------------------------------------------------------------
// SimGrid profiles

TEST(SimGrid, PeriodicityRepeats) {
  const tr::Loaded l = tr::load_trace_file(fixture("link-periodic.profile"));
  EXPECT_EQ(l.format, tr::Format::simgrid);
  EXPECT_EQ(points(l.trace), (P{{0, 2.8e9}, {6, 3.5e8}}));
  EXPECT_EQ(l.trace.rate.repeat_s(), 8.0);
  EXPECT_EQ(l.trace.rate.value_at(8 + 6.5), 3.5e8);
}

TEST(SimGrid, LoopAfterAddsToTheLastDateAndEqualDatesKeepTheLast) {
  const tr::Trace t = tr::load_trace_file(fixture("speed-loop.profile")).trace;
  EXPECT_EQ(points(t), (P{{0, 1.0}, {2, 0.25}, {5, 1.0}}));
  EXPECT_EQ(t.rate.repeat_s(), 8.0);  // last date 5 + LOOPAFTER 3
}

TEST(SimGrid, WithoutLoopTheLastValueHolds) {
  tr::LoadOptions opt;
  opt.format = tr::Format::simgrid;
  const tr::Trace t = parse("0 4\n\t3   2 \n", "p.txt", opt);
  EXPECT_EQ(points(t), (P{{0, 4}, {3, 2}}));
  EXPECT_FALSE(t.repeats());
  EXPECT_EQ(t.span_s, 3.0);
}

TEST(SimGrid, BadInput) {
  tr::LoadOptions opt;
  opt.format = tr::Format::simgrid;
  struct Case {
    const char* text;
    const char* expected;
  };
  const Case cases[] = {
      {"0 1\n2 x\n", "p.txt:2: value: not a number: \"x\""},
      {"0 1\n2 -1\n", "p.txt:2: value: must be >= 0, got -1"},
      {"0 1\n2 nan\n", "p.txt:2: value: NaN: \"nan\""},
      {"0 1\n3 1\n2 1\n", "p.txt:3: date 2 goes backwards (after 3)"},
      {"1 1\n", "p.txt:1: the first date is 1; before it SimGrid"},
      {"0 1 2\n", "p.txt:1: expected \"date value\", got 3 fields"},
      {"STOCHASTIC\n0 1\n", "p.txt:1: stochastic SimGrid profiles (STOCHASTIC) are not supported"},
      {"PERIODICITY 2\n0 1\n5 1\n", "p.txt:1: PERIODICITY 2 is shorter than the last date 5"},
      {"PERIODICITY 0\n0 1\n", "p.txt:1: PERIODICITY: must be > 0, got 0"},
      {"LOOPAFTER 1\nPERIODICITY 2\n0 1\n", "p.txt:2: a second PERIODICITY / LOOPAFTER (the first is on line 1)"},
      {"# nothing\n", "p.txt: no \"date value\" lines: the trace is empty"},
  };
  for (const auto& c : cases)
    EXPECT_EQ(input_error([&] { parse(c.text, "p.txt", opt); }).substr(0, std::string(c.expected).size()), c.expected)
        << c.text;
}

// ---------------------------------------------------------------------------------
// The project's JSON

TEST(ProjectJson, PointsUnitsAndRepeat) {
  const tr::Trace t = parse(R"({"unit": "bytes_per_s", "description": "x", "points": [[0, 5], [2, 7]], "repeat_s": 3})",
                            "p.json");
  EXPECT_EQ(points(t), (P{{0, 5}, {2, 7}}));
  EXPECT_EQ(t.rate.repeat_s(), 3.0);
  const tr::Trace bits = parse(R"({"unit": "bits_per_s", "points": [[0, 8e9], [1, 16e9]]})", "p.json");
  EXPECT_EQ(points(bits), (P{{0, 1e9}, {1, 2e9}}));
  const tr::Trace speed = parse(R"({"unit": "factor", "constant": 0.5})", "p.json");
  EXPECT_EQ(points(speed), (P{{0, 0.5}}));
  // Any rate form may live in a file: a pattern too.
  const tr::Trace pat = parse(
      R"({"pattern": "periodic", "high": 2, "low": 1, "period_s": 4, "low_fraction": 0.25})", "p.json");
  EXPECT_EQ(points(pat), (P{{0, 2}, {3, 1}}));
}

TEST(ProjectJson, UnitsInBytesPerSecondTracesOnly) {
  EXPECT_EQ(points(parse(R"({"points": [["0s", "25Gbit/s"], ["1min", "1GB/s"]], "repeat_s": "2min"})", "p.json")),
            (P{{0, 3.125e9}, {60, 1e9}}));
  EXPECT_EQ(points(parse(R"({"unit": "bytes_per_s", "constant": "1KiB/s"})", "p.json")), (P{{0, 1024}}));
  // Times keep their units in any trace; rates with units would be converted twice.
  EXPECT_EQ(points(parse(R"({"unit": "factor", "points": [["0s", 1], ["500ms", 0.5]]})", "p.json")),
            (P{{0, 1}, {0.5, 0.5}}));
  EXPECT_EQ(input_error([] { parse(R"({"unit": "factor", "points": [[0, 1], [5, "2GB/s"]]})", "p.json"); }),
            "p.json: points[1][1]: must be a plain number (the trace's \"unit\" is \"factor\", a multiplier), got "
            "\"2GB/s\"");
  EXPECT_EQ(input_error([] { parse(R"({"unit": "bits_per_s", "constant": "25Gbit/s"})", "p.json"); }),
            "p.json: constant: must be a plain number (the trace's \"unit\" is \"bits_per_s\"; leave \"unit\" out "
            "to give rates with units), got \"25Gbit/s\"");
  EXPECT_THAT(input_error([] {
                parse(R"({"unit": "factor", "pattern": "periodic", "high": "1GB/s", "low": 0, "period_s": 1,
                          "low_fraction": 0.5})", "p.json");
              }),
              StartsWith("p.json: high: must be a plain number"));
}

TEST(ProjectJson, BadInputNamesTheField) {
  EXPECT_EQ(input_error([] { parse(R"({"unit": "furlongs", "points": [[0, 1]]})", "p.json"); }),
            "p.json: unit: unknown unit \"furlongs\" (bytes_per_s, bits_per_s or factor)");
  EXPECT_EQ(input_error([] { parse(R"({"points": [[0, 1], [0, 2]]})", "p.json"); }),
            "p.json: points[1]: trace times must be strictly increasing (0 after 0)");
  EXPECT_EQ(input_error([] { parse(R"({"points": []})", "p.json"); }),
            "p.json: points: must list at least one [time, value] point");
  EXPECT_THAT(input_error([] { parse(R"({"nothing": 1})", "p.json"); }), StartsWith("p.json: unknown rate form"));
  // Found by fuzz_json: a number too large for a double is an input error, not a crash.
  EXPECT_THAT(input_error([] { parse(R"({"points": [[0, 15.16926560E420158]]})", "p.json"); }),
              AllOf(StartsWith("p.json: line 1, column "), HasSubstr(": invalid JSON: number overflow")));
}

// ---------------------------------------------------------------------------------
// Detection

TEST(Detect, FromContent) {
  EXPECT_EQ(tr::detect_format("# c\n\ntime_s,value\n0,1\n", "x"), tr::Format::csv);
  EXPECT_EQ(tr::detect_format("time_s,bytes,duration_s\n0,1,1\n", "x"), tr::Format::samples);
  EXPECT_EQ(tr::detect_format("% c\n0 1\n", "x"), tr::Format::simgrid);
  EXPECT_EQ(tr::detect_format("LOOPAFTER 2\n0 1\n", "x"), tr::Format::simgrid);
  EXPECT_EQ(tr::detect_format("  {\"points\": [[0, 1]]}", "x"), tr::Format::json);
  EXPECT_THAT(input_error([] { tr::detect_format("0,1,2,3\n", "x.txt"); }),
              StartsWith("x.txt:1: cannot tell the trace format: 4 comma-separated columns"));
  EXPECT_THAT(input_error([] { tr::detect_format("hello there world\n", "x.txt"); }),
              AllOf(StartsWith("x.txt:1: cannot tell the trace format"), HasSubstr("set \"format\"")));
}

// ---------------------------------------------------------------------------------
// Round trips: import -> export -> import gives the same trace

class RoundTrip : public testing::TestWithParam<const char*> {};

TEST_P(RoundTrip, JsonAndCsv) {
  tr::LoadOptions opt;
  opt.latency_s = 0.001;
  const tr::Trace first = tr::load_trace_file(fixture(GetParam()), opt).trace;
  const tr::Trace via_json = parse(tr::to_json_text(first), "back.json");
  expect_same(first, via_json);
  const tr::Trace via_dump = parse(tr::to_json(first).dump(), "back.json");
  expect_same(first, via_dump);
  // CSV cannot say that a trace repeats: it holds one period, and "repeat": true
  // restores it.
  const tr::Trace via_csv = parse(tr::to_csv(first), "back.csv");
  if (first.repeats()) {
    expect_same(first, tr::repeat(via_csv, via_csv.span_s));
  } else {
    expect_same(first, via_csv);
  }
  // And the exports of the re-read trace are byte-identical.
  EXPECT_EQ(tr::to_json_text(via_json), tr::to_json_text(first));
  EXPECT_EQ(tr::to_csv(via_csv), tr::to_csv(parse(tr::to_csv(via_csv), "again.csv")));
}

INSTANTIATE_TEST_SUITE_P(Fixtures, RoundTrip,
                         testing::Values("link.csv", "samples.csv", "iperf3-tcp.json", "link-periodic.profile",
                                         "speed-loop.profile"));

TEST(RoundTrip, ExtremeNumbersSurvive) {
  // The ends of the model's scale (sim/rate.h), and a time that 0.1 + 0.2 gives.
  const tr::Trace t = parse("0,1e-9\n0.1,1e18\n0.30000000000000004,0.1\n4194304,3\n");
  expect_same(t, parse(tr::to_csv(t)));
  expect_same(t, parse(tr::to_json_text(t), "x.json"));
}

}  // namespace
}  // namespace tracestest
