// The network (docs/formats.md, "Network file"): per-channel bandwidth traces, latency
// and capacity, and per-stage speed traces.
//
// A network file is read once into a NetworkSpec, which does not depend on the number
// of stages; bind(S) checks it against S stages and gives the Network a run uses. Rate
// traces are shared, never copied, between the channels that use them and between
// bindings, so a long recorded trace used as the default costs its size once.
//
//   NetworkSpec spec = load_network_spec(path, traces::TraceRates());
//   Network n = spec.bind(S);                         // or load_network(path, S, ...)
//   n.rewrite_channels([](ChannelSpec& c) { ... });   // the one way to change channels
#pragma once

#include <filesystem>
#include <functional>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include <nlohmann/json_fwd.hpp>

#include "rate.h"
#include "rate_forms.h"

namespace adagrouper::sim {

// One directed channel as a run sees it.
struct ChannelSpec {
  int from = 0, to = 0;
  RatePtr rate;          // bytes per second; null: no rate, a transfer takes only the latency
  double latency_s = 0;
  int capacity = 0;      // 0: unlimited
  // A token bucket in front of the rate, in bytes (0: none): tokens accrue at the rate
  // up to this many while the channel is idle, and a transfer sends what the bucket
  // holds at once (docs/model.md, "Shaped links"). Off unless the network file asks.
  double burst_bytes = 0;

  bool unlimited() const { return rate == nullptr; }
  void set_rate(RateTrace r) { rate = std::make_shared<const RateTrace>(std::move(r)); }
};

// A bound network: every channel between S stages and every stage's speed.
class Network {
 public:
  // A network in which every transfer takes `latency_s` plus bytes / rate (no rate:
  // only the latency).
  static Network uniform(int stages, std::optional<double> rate, double latency_s = 0.0);

  std::string source;  // the file it was read from (for messages)

  int num_stages() const { return stages_; }
  const ChannelSpec& channel(int from, int to) const { return channels_[index(from, to)]; }
  const RateTrace& speed(int stage) const { return *speed_[stage]; }
  void set_speed(int stage, RateTrace speed) { speed_[stage] = std::make_shared<const RateTrace>(std::move(speed)); }

  // Applies fn to every channel: s -> s+1 for s = 0, 1, ..., then s+1 -> s, then the
  // channels between stages that are not neighbours (which model stages on stages use),
  // always in this order. The one place rates, latencies and capacities change after
  // loading.
  void rewrite_channels(const std::function<void(ChannelSpec&)>& fn);

  // A constant rate that replaces a channel's own: what `plan --comm-profile` measured
  // for it (the plan records them, `comm_profile.channels`).
  struct MeasuredRate {
    int from = 0, to = 0;
    double bytes_per_s = 0;
  };
  // Gives each channel in `rates` its constant rate (the others keep theirs): the
  // network a plan made with --comm-profile evaluated its candidates on.
  void set_measured_rates(const std::vector<MeasuredRate>& rates);

 private:
  friend class NetworkSpec;
  std::size_t index(int from, int to) const { return static_cast<std::size_t>(from) * stages_ + to; }

  int stages_ = 0;
  std::vector<ChannelSpec> channels_;  // dense: [from * S + to]
  std::vector<RatePtr> speed_;         // per stage
};

// A network file as read, before it is bound to a number of stages.
class NetworkSpec {
 public:
  struct Channel {
    int from = 0, to = 0;
    RatePtr rate;                        // null: the default's
    std::optional<double> latency_s;     // null: the file's latency_s
    std::optional<int> capacity;
    std::optional<double> burst_bytes;   // null: the file's burst_bytes
    std::string field;                   // "channels[i]", for messages
  };
  struct Speed {
    int stage = 0;
    RatePtr speed;                       // null: constant 1
    std::string field;                   // "stages[i]"
  };

  std::string source;
  double latency_s = 0;
  double burst_bytes = 0;                // every channel's, unless it gives its own
  RatePtr default_rate;                  // null: transfers take only their latency
  std::vector<Channel> channels;
  std::vector<Speed> speeds;

  // The network for S stages. Throws InputError naming the file and the field when a
  // listed channel or stage does not exist among them.
  Network bind(int stages) const;
};

NetworkSpec load_network_spec(const std::filesystem::path& path, const RateParser& rates = BasicRates());
NetworkSpec parse_network_spec(const nlohmann::json& doc, const std::string& source,
                               const RateParser& rates = BasicRates());

// Shorthands for load_network_spec(...).bind(stages).
Network load_network(const std::filesystem::path& path, int stages, const RateParser& rates = BasicRates());
Network parse_network(const nlohmann::json& doc, const std::string& source, int stages,
                      const RateParser& rates = BasicRates());

}  // namespace adagrouper::sim
