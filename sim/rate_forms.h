// How a rate value in an input file becomes a RateTrace. The simulator core defines the
// interface and knows two forms itself; the traces library implements the interface
// for every other form (trace files, synthetic patterns) and is handed in by callers:
//
//   sim::load_network(path, S)                          // {"constant"} and {"points"} only
//   sim::load_network(path, S, traces::TraceRates())    // every form of docs/formats.md
#pragma once

#include <filesystem>
#include <memory>
#include <optional>

#include "rate.h"

namespace adagrouper {
class Field;
}

namespace adagrouper::sim {

using RatePtr = std::shared_ptr<const RateTrace>;

class RateParser {
 public:
  virtual ~RateParser() = default;
  // The trace `rate` describes; base_dir is the directory of the referring file.
  // Throws InputError naming the file and the field.
  virtual RateTrace parse(const Field& rate, const std::filesystem::path& base_dir) const = 0;
  // The same, shared: a parser that has read an equal rate before may hand out the same
  // trace again (the default makes a new one).
  virtual RatePtr parse_shared(const Field& rate, const std::filesystem::path& base_dir) const {
    return std::make_shared<const RateTrace>(parse(rate, base_dir));
  }
};

// {"constant": R} or {"points": [[t, R], ...], "repeat_s": P}; nullopt for any other
// form. Errors in these two forms name the file and the field.
std::optional<RateTrace> parse_basic_rate(const Field& rate);

// The core's own parser: the two basic forms; any other form is an InputError.
class BasicRates final : public RateParser {
 public:
  RateTrace parse(const Field& rate, const std::filesystem::path& base_dir) const override;
};

// Reads of the input scale (rate.h), InputErrors naming the file and the field. Each
// takes a number in seconds or bytes per second, or a string with a unit ("500us",
// "25Gbit/s"; a rate below Field::plain_rates takes plain numbers only).
double read_time(const Field& f);    // a time, length or latency in [0, kMaxTime]
double read_period(const Field& f);  // a period or duration in [kTimeResolution, kMaxTime]
double read_rate(const Field& f);    // a rate or speed: 0, or in [kMinRate, kMaxRate]

}  // namespace adagrouper::sim
