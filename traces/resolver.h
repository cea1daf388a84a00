// Rate forms beyond the simulator core's {"constant"} and {"points"}: trace files
// ({"file": PATH, ...}) and synthetic patterns and transforms ({"pattern": NAME, ...}),
// anywhere a network file takes a rate or a speed. docs/formats.md, "Trace files and
// patterns", gives every shape.
//
//   sim::Network n = sim::load_network(path, S, traces::TraceRates());
#pragma once

#include <filesystem>
#include <memory>
#include <span>
#include <string>
#include <string_view>

#include <nlohmann/json_fwd.hpp>

#include "json_util.h"
#include "rate_forms.h"
#include "trace.h"

namespace adagrouper::traces {

namespace detail {
class TraceCache;
}

// Every rate form of docs/formats.md: the core's {"constant"} and {"points"}, trace files
// {"file": ...} (relative to the referring file's directory) and patterns
// {"pattern": ...}; any other form is an InputError listing the forms. It reads each
// trace file once (by canonical path and load options) and hands out one trace for
// equal rate forms (parse_shared), for as long as it lives; copies share what it read.
class TraceRates final : public sim::RateParser {
 public:
  TraceRates();
  sim::RateTrace parse(const Field& rate, const std::filesystem::path& base_dir) const override;
  sim::RatePtr parse_shared(const Field& rate, const std::filesystem::path& base_dir) const override;

 private:
  std::shared_ptr<detail::TraceCache> cache_;
};

// Any rate form, constant and points included, with its span.
Trace resolve_rate(const Field& rate, const std::filesystem::path& base_dir);
// The same for a document (an inline --spec, a test); `source` names it in errors.
Trace parse_rate_spec(const nlohmann::json& spec, const std::string& source,
                      const std::filesystem::path& base_dir = {});

// --- the registry of patterns ------------------------------------------------------

// Where a rate form is read: the directory its relative trace paths start from, and how
// deep it lies in other rate forms and trace files (a file that refers to itself fails).
struct RateContext {
  const std::filesystem::path& base_dir;
  int depth = 0;
  detail::TraceCache* cache = nullptr;  // of the TraceRates reading it (null: none)
  // A rate this one is made of ("of", a concat part), read one level deeper.
  Trace nested(const Field& rate) const;
};

// One synthetic pattern or transform: {"pattern": NAME, KEY: VALUE, ...}.
//
// To add one: write its parse function in resolver.cpp and add one row to the table
// there. The "unknown pattern" and "unknown field" messages, `adagrouper trace --help`
// and `adagrouper trace synth` read that table.
struct Pattern {
  std::string_view name;
  std::string_view keys;  // the keys it takes besides "pattern" and "description", ", " between
  std::string_view help;  // one line for --help
  bool transform;         // made of other rates ("of", "parts"); trace synth takes it as --spec only
  // The trace `form` describes; its keys are already checked. InputError naming the field.
  Trace (*parse)(const Field& form, const RateContext& at);
};

std::span<const Pattern> patterns();
// nullptr when no pattern has this name.
const Pattern* find_pattern(std::string_view name);
// "periodic, onoff, steps, contention, scale, clip, concat, shift, min", for messages.
std::string pattern_names();

}  // namespace adagrouper::traces
