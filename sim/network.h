// The network file (SPEC section 4): per-channel bandwidth traces, latency and
// capacity, and per-stage speed traces.
#pragma once

#include <filesystem>
#include <functional>
#include <optional>
#include <string>
#include <vector>

#include <nlohmann/json_fwd.hpp>

#include "rate.h"

namespace adagrouper {
class Field;
}

namespace adagrouper::sim {

struct ChannelSpec {
  int from = 0, to = 0;
  bool unlimited = true;   // no rate given: a transfer takes only the latency
  RateTrace rate;          // bytes per second (when !unlimited)
  double latency_s = 0;
  int capacity = 0;        // 0: unlimited
};

struct Network {
  std::string source;
  // Channel s -> s+1 is forward[s]; channel s+1 -> s is backward[s] (s = 0 .. S-2).
  std::vector<ChannelSpec> forward, backward;
  std::vector<RateTrace> speed;  // per stage, default constant 1

  // A network in which every transfer takes `latency_s` plus bytes / rate.
  static Network uniform(int num_stages, std::optional<double> rate, double latency_s = 0.0);
  int num_stages() const { return static_cast<int>(speed.size()); }
};

// Resolves rate forms the simulator core does not know itself ({"file": ...} and the
// synthetic patterns of the traces library). Returns nullopt when it does not know
// the form either. base_dir is the directory of the referring file.
using RateResolver =
    std::function<std::optional<RateTrace>(const Field& rate, const std::filesystem::path& base_dir)>;

// Parses a rate value: {"constant": R}, {"points": [[t, R], ...], "repeat_s": P}, or
// whatever `resolver` accepts. Errors name the file and field.
RateTrace parse_rate(const Field& rate, const std::filesystem::path& base_dir,
                     const RateResolver& resolver = {});

Network load_network(const std::filesystem::path& path, int num_stages,
                     const RateResolver& resolver = {});
Network parse_network(const nlohmann::json& doc, const std::string& source, int num_stages,
                      const RateResolver& resolver = {});

}  // namespace adagrouper::sim
