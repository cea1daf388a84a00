// How a rate value in an input file becomes a RateTrace. The simulator core defines the
// interface and knows two forms itself; the traces library implements the interface
// for every other form (trace files, synthetic patterns) and is handed in by callers:
//
//   sim::load_network(path, S)                          // {"constant"} and {"points"} only
//   sim::load_network(path, S, traces::TraceRates())    // every form of docs/formats.md
#pragma once

#include <filesystem>
#include <optional>

#include "rate.h"

namespace adagrouper {
class Field;
}

namespace adagrouper::sim {

class RateParser {
 public:
  virtual ~RateParser() = default;
  // The trace `rate` describes; base_dir is the directory of the referring file.
  // Throws InputError naming the file and the field.
  virtual RateTrace parse(const Field& rate, const std::filesystem::path& base_dir) const = 0;
};

// {"constant": R} or {"points": [[t, R], ...], "repeat_s": P}; nullopt for any other
// form. Errors in these two forms name the file and the field.
std::optional<RateTrace> parse_basic_rate(const Field& rate);

// The core's own parser: the two basic forms; any other form is an InputError.
class BasicRates final : public RateParser {
 public:
  RateTrace parse(const Field& rate, const std::filesystem::path& base_dir) const override;
};

}  // namespace adagrouper::sim
