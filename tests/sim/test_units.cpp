// Numbers with units (sim/units.h, docs/formats.md "Units"): exact conversions, every
// class of bad text, the printer, and Field's reads of times, sizes and rates in input
// files, which give the same pipeline and network as plain numbers.
#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <cmath>
#include <string>

#include "helpers.h"
#include "units.h"

namespace simtest {
namespace {

using adagrouper::Field;
using adagrouper::format_quantity;
using adagrouper::parse_quantity;
using adagrouper::Quantity;
using adagrouper::QuantityError;
using nlohmann::json;
using testing::HasSubstr;
using testutil::input_error;

// The message parse_quantity refuses `text` with ("" and a failure when it accepts it).
std::string refusal(const std::string& text, Quantity q) {
  try {
    const double v = parse_quantity(text, q);
    ADD_FAILURE() << text << " was accepted as " << v;
  } catch (const QuantityError& e) {
    return e.what();
  }
  return {};
}

TEST(Units, ExactConversions) {
  EXPECT_EQ(parse_quantity("25Gbit/s", Quantity::rate), 3.125e9);
  EXPECT_EQ(parse_quantity("40GiB", Quantity::size), 42949672960.0);
  EXPECT_EQ(parse_quantity("500us", Quantity::time), 5e-4);
  EXPECT_EQ(parse_quantity("500\u00B5s", Quantity::time), 5e-4);
  EXPECT_EQ(parse_quantity("3.2GB/s", Quantity::rate), 3.2e9);
  EXPECT_EQ(parse_quantity("1.5 min", Quantity::time), 90.0);
  EXPECT_EQ(parse_quantity("2h", Quantity::time), 7200.0);
  EXPECT_EQ(parse_quantity("30us", Quantity::time), 30e-6);
  EXPECT_EQ(parse_quantity("12.3ms", Quantity::time), 0.0123);  // as the decimal 0.0123 reads
  EXPECT_EQ(parse_quantity("7ns", Quantity::time), 7e-9);
  EXPECT_EQ(parse_quantity("1kB", Quantity::size), 1000.0);
  EXPECT_EQ(parse_quantity("1KB", Quantity::size), 1000.0);
  EXPECT_EQ(parse_quantity("1KiB", Quantity::size), 1024.0);
  EXPECT_EQ(parse_quantity("3MiB", Quantity::size), 3.0 * 1024 * 1024);
  EXPECT_EQ(parse_quantity("1TiB", Quantity::size), 1099511627776.0);
  EXPECT_EQ(parse_quantity("2TB", Quantity::size), 2e12);
  EXPECT_EQ(parse_quantity("8bit", Quantity::size), 1.0);
  EXPECT_EQ(parse_quantity("1Mbit", Quantity::size), 125000.0);
  EXPECT_EQ(parse_quantity("100Mbps", Quantity::rate), 12.5e6);
  EXPECT_EQ(parse_quantity("100 Gbps", Quantity::rate), 12.5e9);
  EXPECT_EQ(parse_quantity("1Tbps", Quantity::rate), 1.25e11);
  EXPECT_EQ(parse_quantity("8bps", Quantity::rate), 1.0);
  EXPECT_EQ(parse_quantity("1GiB/s", Quantity::rate), 1073741824.0);
  EXPECT_EQ(parse_quantity("1.5e3 ms", Quantity::time), 1.5);
  EXPECT_EQ(parse_quantity("2.5E-3GB", Quantity::size), 2.5e6);
}

TEST(Units, PlainNumbersAreTheBaseUnit) {
  // The syntax of JSON numbers and strtod: sign, no digits before the point, exponents.
  EXPECT_EQ(parse_quantity("0.1", Quantity::time), 0.1);
  EXPECT_EQ(parse_quantity("  2.8e9 ", Quantity::rate), 2.8e9);
  EXPECT_EQ(parse_quantity(".5", Quantity::size), 0.5);
  EXPECT_EQ(parse_quantity("5.", Quantity::size), 5.0);
  EXPECT_EQ(parse_quantity("+3", Quantity::size), 3.0);
  EXPECT_EQ(parse_quantity("-1.5", Quantity::time), -1.5);  // ranges are the caller's
  EXPECT_TRUE(std::signbit(parse_quantity("-0", Quantity::time)));
  EXPECT_EQ(parse_quantity("1e-400", Quantity::time), 0.0);  // too small for a double: 0, as strtod
  for (const char* text : {"0.3", "1e-9", "123456789.123456789", "4.9406564584124654e-324", "1.7976931348623157e308"})
    EXPECT_EQ(parse_quantity(text, Quantity::size), std::strtod(text, nullptr)) << text;
}

TEST(Units, UnknownUnitListsTheUnits) {
  EXPECT_EQ(refusal("40Gib", Quantity::size),
            "\"40Gib\": unknown size unit \"Gib\" (B, kB, MB, GB, TB, KiB, MiB, GiB, TiB, bit, kbit, Mbit, Gbit, "
            "Tbit)");
  EXPECT_THAT(refusal("5 sec", Quantity::time), HasSubstr("unknown time unit \"sec\" (ns, us, \u00B5s, ms, s, min, h)"));
  EXPECT_THAT(refusal("1gb/s", Quantity::rate), HasSubstr("unknown rate unit \"gb/s\" (B/s, kB/s,"));
  EXPECT_THAT(refusal("1Gbit/min", Quantity::rate), HasSubstr("unknown rate unit"));
}

TEST(Units, WrongKindNamesBoth) {
  EXPECT_THAT(refusal("5ms", Quantity::size), HasSubstr("\"ms\" is a time unit, not a size unit (B, kB,"));
  EXPECT_THAT(refusal("40GiB", Quantity::rate), HasSubstr("\"GiB\" is a size unit, not a rate unit (B/s,"));
  EXPECT_THAT(refusal("25Gbit/s", Quantity::size), HasSubstr("is a rate unit, not a size unit"));
  EXPECT_THAT(refusal("10Gbps", Quantity::time), HasSubstr("is a rate unit, not a time unit (ns,"));
}

TEST(Units, EmptyNoNumberAndTrailingText) {
  EXPECT_THAT(refusal("", Quantity::time), HasSubstr("\"\": empty; expected a number of seconds"));
  EXPECT_THAT(refusal("   ", Quantity::size), HasSubstr("empty"));
  EXPECT_THAT(refusal("GB", Quantity::size), HasSubstr("\"GB\": must be a number of bytes, or a number and a size unit"));
  for (const char* text : {"inf", "nan", "-inf", "fast", ".", "-", "e5"})
    EXPECT_THAT(refusal(text, Quantity::rate), HasSubstr("must be a number of bytes per second")) << text;
  EXPECT_THAT(refusal("0x10", Quantity::size), HasSubstr("unexpected \"x10\" after the number \"0\""));
  EXPECT_THAT(refusal("1.2.3GB", Quantity::size), HasSubstr("unexpected \".3GB\" after the number \"1.2\""));
  EXPECT_THAT(refusal("5 GB extra", Quantity::size), HasSubstr("unexpected \"GB extra\""));
  EXPECT_THAT(refusal("5s5", Quantity::time), HasSubstr("unexpected \"s5\""));
  EXPECT_THAT(refusal("1e999GB", Quantity::size), HasSubstr("out of range"));
  EXPECT_THAT(refusal("1e308TiB", Quantity::size), HasSubstr("out of range"));
  // A long text is quoted short.
  EXPECT_EQ(refusal(std::string(100, 'x'), Quantity::time).substr(0, 42), "\"" + std::string(37, 'x') + "...\"");
}

TEST(Units, HasUnit) {
  EXPECT_TRUE(adagrouper::has_unit("5s"));
  EXPECT_TRUE(adagrouper::has_unit(" 5 GB "));
  EXPECT_FALSE(adagrouper::has_unit(" 5 "));
  EXPECT_FALSE(adagrouper::has_unit("GB"));
}

TEST(Units, Printed) {
  EXPECT_EQ(format_quantity(5e-4, Quantity::time), "500 us");
  EXPECT_EQ(format_quantity(90, Quantity::time), "90 s");
  EXPECT_EQ(format_quantity(3600, Quantity::time), "3600 s");
  EXPECT_EQ(format_quantity(0, Quantity::time), "0 s");
  EXPECT_EQ(format_quantity(42949672960.0, Quantity::size), "40 GiB");
  EXPECT_EQ(format_quantity(1536, Quantity::size), "1.5 KiB");
  EXPECT_EQ(format_quantity(3.125e9, Quantity::rate), "25 Gbit/s");
  EXPECT_EQ(format_quantity(1.5625e9, Quantity::rate), "12.5 Gbit/s");
  EXPECT_EQ(format_quantity(0, Quantity::rate), "0 bit/s");
  EXPECT_EQ(format_quantity(2.33903e9, Quantity::rate), "18.7 Gbit/s");
}

// --- Field: times, sizes and rates in input files -------------------------------------

TEST(UnitFields, NumbersAndStringsWithUnits) {
  const json doc = json::parse(R"({"t": 0.5, "ts": "500ms", "b": "40GiB", "r": "25Gbit/s", "n": 3})");
  const Field root(doc, "f.json");
  EXPECT_EQ(root.at("t").seconds(), 0.5);
  EXPECT_EQ(root.at("ts").seconds(), 0.5);
  EXPECT_EQ(root.at("b").bytes(), 42949672960.0);
  EXPECT_EQ(root.at("r").rate(), 3.125e9);
  EXPECT_EQ(root.at("n").positive(Quantity::size), 3.0);
  EXPECT_EQ(root.at("b").number_in(Quantity::size, 0, 1e12), 42949672960.0);
}

TEST(UnitFields, ErrorsNameTheFileAndField) {
  const json doc = json::parse(
      R"({"b": "40Gib", "t": "5GB", "q": "0.1", "x": true, "neg": "-500us", "big": "2TB", "e": "", "z": "0B"})");
  const Field root(doc, "f.json");
  EXPECT_EQ(input_error([&] { root.at("b").bytes(); }),
            "f.json: b: \"40Gib\": unknown size unit \"Gib\" (B, kB, MB, GB, TB, KiB, MiB, GiB, TiB, bit, kbit, Mbit, "
            "Gbit, Tbit)");
  EXPECT_EQ(input_error([&] { root.at("t").seconds(); }),
            "f.json: t: \"5GB\": \"GB\" is a size unit, not a time unit (ns, us, \u00B5s, ms, s, min, h)");
  // A quoted number without a unit is refused: a plain number is written as a number.
  EXPECT_EQ(input_error([&] { root.at("q").seconds(); }),
            "f.json: q: must be a number (in seconds) or a string with a unit (\"0.1s\"), got \"0.1\"");
  EXPECT_EQ(input_error([&] { root.at("x").rate(); }),
            "f.json: x: must be a number of bytes per second or a string with a rate unit (\"25Gbit/s\"), got true");
  EXPECT_EQ(input_error([&] { root.at("neg").non_negative(Quantity::time); }),
            "f.json: neg: must be >= 0, got \"-500us\" (-0.0005)");
  EXPECT_EQ(input_error([&] { root.at("big").number_in(Quantity::size, 0, 1e12, "the most"); }),
            "f.json: big: must be <= 1000000000000, the most, got \"2TB\" (2000000000000)");
  EXPECT_THAT(input_error([&] { root.at("e").bytes(); }), HasSubstr("f.json: e: \"\": empty"));
  EXPECT_EQ(input_error([&] { root.at("z").positive(Quantity::size); }), "f.json: z: must be > 0, got \"0B\" (0)");
  // Plain reads keep refusing strings.
  EXPECT_THAT(input_error([&] { root.at("t").number(); }), HasSubstr("must be a number, got \"5GB\""));
}

TEST(UnitFields, PlainRatesRefuseUnitsBelowThem) {
  const json doc = json::parse(R"({"speed": {"points": [["0s", 1.0], ["2min", "2GB/s"]]}})");
  const Field speed = Field(doc, "n.json").at("speed").plain_rates("a speed is a multiplier, not a rate");
  const Field point = speed.at("points").at(1);
  EXPECT_EQ(point.at(std::size_t{0}).seconds(), 120.0);  // times keep their units
  EXPECT_EQ(input_error([&] { point.at(1).rate(); }),
            "n.json: speed.points[1][1]: must be a plain number (a speed is a multiplier, not a rate), got \"2GB/s\"");
  EXPECT_EQ(Field(doc, "n.json").at("speed").at("points").at(1).at(1).rate(), 2e9);
}

// --- whole files: units give the same pipeline and network as plain numbers ----------

json plain_pipeline() {
  return json::parse(R"({"name": "u", "global_batch_size": 4, "memory_limit_bytes": 34359738368, "stages": [
      {"static_bytes": 6e9, "optimizer_s": 0.2, "profile": [
        {"micro_batch_size": 1, "forward_s": 0.0125, "backward_s": 0.03, "activation_bytes": 1073741824,
         "output_bytes": 25165824, "backward_input_s": 0.012, "weight_grad_bytes": 1048576}]},
      {"static_bytes": 4.5e9, "profile": [
        {"micro_batch_size": 1, "forward_s": 0.0123, "backward_s": 0.0246, "activation_bytes": 5e8,
         "grad_output_bytes": 25165824}]}]})");
}

json unit_pipeline() {
  return json::parse(R"({"name": "u", "global_batch_size": 4, "memory_limit_bytes": "32GiB", "stages": [
      {"static_bytes": "6GB", "optimizer_s": "200ms", "profile": [
        {"micro_batch_size": 1, "forward_s": "12.5ms", "backward_s": "30 ms", "activation_bytes": "1GiB",
         "output_bytes": "24MiB", "backward_input_s": "12000us", "weight_grad_bytes": "1MiB"}]},
      {"static_bytes": "4.5GB", "profile": [
        {"micro_batch_size": 1, "forward_s": "12.3ms", "backward_s": "0.0246s", "activation_bytes": "500MB",
         "grad_output_bytes": "24MiB"}]}]})");
}

TEST(UnitFiles, PipelineWithUnitsIsThePlainOne) {
  const sim::Pipeline a = sim::parse_pipeline(plain_pipeline(), "a.json");
  const sim::Pipeline b = sim::parse_pipeline(unit_pipeline(), "b.json");
  EXPECT_EQ(a.memory_limit_bytes, b.memory_limit_bytes);
  ASSERT_EQ(a.stages.size(), b.stages.size());
  for (std::size_t s = 0; s < a.stages.size(); ++s) {
    EXPECT_EQ(a.stages[s].static_bytes, b.stages[s].static_bytes);
    EXPECT_EQ(a.stages[s].optimizer_s, b.stages[s].optimizer_s);
    const sim::ProfilePoint &p = a.stages[s].profile[0], &q = b.stages[s].profile[0];
    EXPECT_EQ(p.forward_s, q.forward_s);
    EXPECT_EQ(p.backward_s, q.backward_s);
    EXPECT_EQ(p.activation_bytes, q.activation_bytes);
    EXPECT_EQ(p.output_bytes, q.output_bytes);
    EXPECT_EQ(p.grad_output_bytes, q.grad_output_bytes);
    EXPECT_EQ(p.backward_input_s, q.backward_input_s);
    EXPECT_EQ(p.weight_grad_bytes, q.weight_grad_bytes);
  }
  json bad = unit_pipeline();
  bad["stages"][0]["profile"][0]["activation_bytes"] = "1 GiB/s";
  EXPECT_THAT(input_error([&] { sim::parse_pipeline(bad, "p.json"); }),
              HasSubstr("p.json: stages[0].profile[0].activation_bytes: \"1 GiB/s\": \"GiB/s\" is a rate unit"));
  bad = unit_pipeline();
  bad["memory_limit_bytes"] = "0GiB";
  EXPECT_THAT(input_error([&] { sim::parse_pipeline(bad, "p.json"); }),
              HasSubstr("p.json: memory_limit_bytes: must be > 0, got \"0GiB\" (0)"));
  bad = unit_pipeline();
  bad["stages"][1]["profile"][0]["forward_s"] = "-1ms";
  EXPECT_THAT(input_error([&] { sim::parse_pipeline(bad, "p.json"); }),
              HasSubstr("stages[1].profile[0].forward_s: must be >= 0, got \"-1ms\" (-0.001)"));
}

TEST(UnitFiles, NetworkWithUnitsIsThePlainOne) {
  const json plain = json::parse(R"({"latency_s": 3e-5, "default": {"constant": 3.125e9},
      "channels": [{"from": 0, "to": 1, "latency_s": 1e-4,
                    "rate": {"points": [[0, 3.125e9], [6, 3.125e8]], "repeat_s": 10}}],
      "stages": [{"stage": 1, "speed": {"points": [[0, 1.0], [120, 0.5]]}}]})");
  const json units = json::parse(R"({"latency_s": "30us", "default": {"constant": "25Gbit/s"},
      "channels": [{"from": 0, "to": 1, "latency_s": "0.1ms",
                    "rate": {"points": [["0s", "25 Gbps"], ["6s", "2.5Gbit/s"]], "repeat_s": "10s"}}],
      "stages": [{"stage": 1, "speed": {"points": [["0s", 1.0], ["2min", 0.5]]}}]})");
  const sim::Network a = sim::parse_network(plain, "a.json", 2), b = sim::parse_network(units, "b.json", 2);
  for (int from = 0; from < 2; ++from)
    for (int to = 0; to < 2; ++to) {
      if (from == to) continue;
      const auto &ca = a.channel(from, to), &cb = b.channel(from, to);
      EXPECT_EQ(ca.latency_s, cb.latency_s);
      EXPECT_EQ(ca.rate->times(), cb.rate->times());
      EXPECT_EQ(ca.rate->values(), cb.rate->values());
      EXPECT_EQ(ca.rate->repeat_s(), cb.rate->repeat_s());
    }
  EXPECT_EQ(a.speed(1).times(), b.speed(1).times());
  EXPECT_EQ(a.speed(1).values(), b.speed(1).values());
  // A speed is a multiplier: a rate with a unit there is refused.
  const json speed = json::parse(R"({"stages": [{"stage": 0, "speed": {"constant": "2GB/s"}}]})");
  EXPECT_EQ(input_error([&] { sim::parse_network(speed, "n.json", 2); }),
            "n.json: stages[0].speed.constant: must be a plain number (a speed is a multiplier, not a rate), got "
            "\"2GB/s\"");
  const json latency = json::parse(R"({"latency_s": "30 Mbit"})");
  EXPECT_THAT(input_error([&] { sim::parse_network(latency, "n.json", 2); }),
              HasSubstr("n.json: latency_s: \"30 Mbit\": \"Mbit\" is a size unit, not a time unit"));
}

}  // namespace
}  // namespace simtest
