// Reading a network file once (NetworkSpec) and binding it to a number of stages.
#include "network.h"

#include <fmt/format.h>

#include "error.h"
#include "json_util.h"
#include "pipeline.h"

namespace adagrouper::sim {

Network Network::uniform(int stages, std::optional<double> rate, double latency_s) {
  if (stages < 0 || stages > kMaxStages)
    throw InputError(fmt::format("a network of {} stages: at most {} (it holds {} x {} channels)", stages, kMaxStages,
                                 stages, stages));
  Network n;
  n.source = "(built in)";
  n.stages_ = stages;
  n.channels_.resize(static_cast<std::size_t>(stages) * stages);
  const RatePtr shared = rate ? std::make_shared<const RateTrace>(RateTrace::constant(*rate)) : nullptr;
  for (int from = 0; from < stages; ++from)
    for (int to = 0; to < stages; ++to) n.channels_[n.index(from, to)] = ChannelSpec{from, to, shared, latency_s, 0};
  n.speed_.assign(stages, std::make_shared<const RateTrace>());
  return n;
}

void Network::rewrite_channels(const std::function<void(ChannelSpec&)>& fn) {
  for (int s = 0; s + 1 < stages_; ++s) fn(channels_[index(s, s + 1)]);
  for (int s = 0; s + 1 < stages_; ++s) fn(channels_[index(s + 1, s)]);
  for (int from = 0; from < stages_; ++from)
    for (int to = 0; to < stages_; ++to)
      if (to != from + 1 && from != to + 1 && from != to) fn(channels_[index(from, to)]);
}

void Network::set_measured_rates(const std::vector<MeasuredRate>& rates) {
  for (const MeasuredRate& m : rates) channels_[index(m.from, m.to)].set_rate(RateTrace::constant(m.bytes_per_s));
}

namespace {

// A stage index (from, to, stage): >= 0; whether it exists depends on the pipeline.
int stage_index(const Field& f) {
  const auto s = f.integer();
  if (s < 0) f.fail(fmt::format("stage {} does not exist (stages are numbered from 0)", s));
  return f.int_in(0);
}

// A token bucket's size: bytes (a number, or "32KiB"), finite and >= 0.
double read_burst(const Field& f) { return f.non_negative(Quantity::size); }

NetworkSpec::Channel parse_channel(const Field& c, std::size_t i, const std::filesystem::path& base_dir,
                                   const RateParser& rates) {
  c.require_object();
  c.check_keys({"from", "to", "rate", "latency_s", "capacity", "burst_bytes"}, "a channel");
  NetworkSpec::Channel ch;
  ch.field = fmt::format("channels[{}]", i);
  ch.from = stage_index(c.at("from"));
  ch.to = stage_index(c.at("to"));
  if (ch.from == ch.to)
    c.fail(fmt::format("channel {} -> {} joins a stage to itself; messages between the model stages "
                       "of one stage are local (docs/model.md §14)", ch.from, ch.to));
  if (c.has("rate")) ch.rate = rates.parse_shared(c.at("rate"), base_dir);
  if (c.has("latency_s")) ch.latency_s = read_time(c.at("latency_s"));
  if (c.has("capacity")) ch.capacity = c.at("capacity").int_in(1);
  if (c.has("burst_bytes")) ch.burst_bytes = read_burst(c.at("burst_bytes"));
  return ch;
}

NetworkSpec::Speed parse_speed(const Field& e, std::size_t i, const std::filesystem::path& base_dir,
                               const RateParser& rates) {
  e.require_object();
  e.check_keys({"stage", "speed"}, "a stage");
  NetworkSpec::Speed sp;
  sp.field = fmt::format("stages[{}]", i);
  sp.stage = stage_index(e.at("stage"));
  if (e.has("speed"))
    sp.speed = rates.parse_shared(e.at("speed").plain_rates("a speed is a multiplier, not a rate"), base_dir);
  return sp;
}

}  // namespace

NetworkSpec parse_network_spec(const nlohmann::json& doc, const std::string& source, const RateParser& rates) {
  Field root(doc, source);
  root.require_object();
  root.check_keys({"latency_s", "burst_bytes", "default", "channels", "stages"}, "a network");
  const std::filesystem::path base_dir = std::filesystem::path(source).parent_path();
  NetworkSpec spec;
  spec.source = source;
  if (root.has("latency_s")) spec.latency_s = read_time(root.at("latency_s"));
  if (root.has("burst_bytes")) spec.burst_bytes = read_burst(root.at("burst_bytes"));
  if (root.has("default")) spec.default_rate = rates.parse_shared(root.at("default"), base_dir);
  if (root.has("channels")) {
    Field chans = root.at("channels");
    for (std::size_t i = 0; i < chans.size(); ++i) {
      NetworkSpec::Channel ch = parse_channel(chans.at(i), i, base_dir, rates);
      for (const auto& other : spec.channels)
        if (other.from == ch.from && other.to == ch.to)
          chans.at(i).fail(fmt::format("channel {} -> {} is listed twice", ch.from, ch.to));
      spec.channels.push_back(std::move(ch));
    }
  }
  if (root.has("stages")) {
    Field st = root.at("stages");
    for (std::size_t i = 0; i < st.size(); ++i) {
      NetworkSpec::Speed sp = parse_speed(st.at(i), i, base_dir, rates);
      for (const auto& other : spec.speeds)
        if (other.stage == sp.stage) st.at(i).at("stage").fail(fmt::format("stage {} is listed twice", sp.stage));
      spec.speeds.push_back(std::move(sp));
    }
  }
  return spec;
}

Network NetworkSpec::bind(int S) const {
  Network net = Network::uniform(S, std::nullopt, latency_s);
  net.source = source;
  net.rewrite_channels([&](ChannelSpec& c) {
    if (default_rate) c.rate = default_rate;
    c.burst_bytes = burst_bytes;
  });
  for (const Channel& ch : channels) {
    for (auto [key, stage] : {std::pair{"from", ch.from}, std::pair{"to", ch.to}})
      if (stage >= S)
        throw InputError(fmt::format("{}: {}.{}: stage {} does not exist (the pipeline has {} stages: 0..{})",
                                     source, ch.field, key, stage, S, S - 1));
    ChannelSpec& c = net.channels_[net.index(ch.from, ch.to)];
    if (ch.rate) c.rate = ch.rate;
    c.latency_s = ch.latency_s.value_or(latency_s);
    if (ch.capacity) c.capacity = *ch.capacity;
    c.burst_bytes = ch.burst_bytes.value_or(burst_bytes);
  }
  for (const Speed& sp : speeds) {
    if (sp.stage >= S)
      throw InputError(fmt::format("{}: {}.stage: stage {} does not exist (the pipeline has {} stages)", source,
                                   sp.field, sp.stage, S));
    if (sp.speed) net.speed_[sp.stage] = sp.speed;
  }
  return net;
}

NetworkSpec load_network_spec(const std::filesystem::path& path, const RateParser& rates) {
  return parse_network_spec(read_json_file(path), path.string(), rates);
}

Network load_network(const std::filesystem::path& path, int stages, const RateParser& rates) {
  return load_network_spec(path, rates).bind(stages);
}

Network parse_network(const nlohmann::json& doc, const std::string& source, int stages, const RateParser& rates) {
  return parse_network_spec(doc, source, rates).bind(stages);
}

}  // namespace adagrouper::sim
