// Rate forms beyond the simulator core's {"constant"} and {"points"}: trace files
// ({"file": PATH, ...}) and synthetic patterns and transforms ({"pattern": NAME, ...}),
// anywhere a network file takes a rate or a speed. docs/formats.md, "Trace files and
// patterns", gives every shape.
//
//   sim::Network n = sim::load_network(path, S, traces::TraceRates());
#pragma once

#include <filesystem>
#include <string>
#include <string_view>

#include <nlohmann/json_fwd.hpp>

#include "json_util.h"
#include "rate_forms.h"
#include "trace.h"

namespace adagrouper::traces {

// Every rate form of docs/formats.md: the core's {"constant"} and {"points"}, trace files
// {"file": ...} (relative to the referring file's directory) and patterns
// {"pattern": ...}; any other form is an InputError listing the forms.
class TraceRates final : public sim::RateParser {
 public:
  sim::RateTrace parse(const Field& rate, const std::filesystem::path& base_dir) const override;
};

// Any rate form, constant and points included, with its span.
Trace resolve_rate(const Field& rate, const std::filesystem::path& base_dir);
// The same for a document (an inline --spec, a test); `source` names it in errors.
Trace parse_rate_spec(const nlohmann::json& spec, const std::string& source,
                      const std::filesystem::path& base_dir = {});

// "periodic, onoff, steps, contention, scale, clip, concat, shift, min", for messages.
std::string_view pattern_names();

}  // namespace adagrouper::traces
