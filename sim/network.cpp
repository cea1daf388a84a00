// Reading a network file once (NetworkSpec) and binding it to a number of stages.
#include "network.h"

#include <fmt/format.h>

#include "error.h"
#include "json_util.h"

namespace adagrouper::sim {

Network Network::uniform(int stages, std::optional<double> rate, double latency_s) {
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

namespace {

NetworkSpec::Channel parse_channel(const Field& c, std::size_t i, const std::filesystem::path& base_dir,
                                   const RateParser& rates) {
  c.require_object();
  NetworkSpec::Channel ch;
  ch.field = fmt::format("channels[{}]", i);
  const auto from = c.at("from").integer();
  const auto to = c.at("to").integer();
  if (from < 0) c.at("from").fail(fmt::format("stage {} does not exist (stages are numbered from 0)", from));
  if (to < 0) c.at("to").fail(fmt::format("stage {} does not exist (stages are numbered from 0)", to));
  if (from == to) c.fail(fmt::format("channel {} -> {} joins a stage to itself; messages between the model stages "
                                     "of one stage are local (docs/model.md §14)", from, to));
  ch.from = static_cast<int>(from);
  ch.to = static_cast<int>(to);
  if (c.has("rate")) ch.rate = std::make_shared<const RateTrace>(rates.parse(c.at("rate"), base_dir));
  if (c.has("latency_s")) ch.latency_s = c.at("latency_s").non_negative();
  if (c.has("capacity")) ch.capacity = static_cast<int>(c.at("capacity").integer_at_least(1));
  return ch;
}

}  // namespace

NetworkSpec parse_network_spec(const nlohmann::json& doc, const std::string& source, const RateParser& rates) {
  Field root(doc, source);
  root.require_object();
  const std::filesystem::path base_dir = std::filesystem::path(source).parent_path();
  NetworkSpec spec;
  spec.source = source;
  spec.latency_s = root.non_negative_or("latency_s", 0.0);
  if (root.has("default"))
    spec.default_rate = std::make_shared<const RateTrace>(rates.parse(root.at("default"), base_dir));
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
      Field e = st.at(i);
      e.require_object();
      NetworkSpec::Speed sp;
      sp.field = fmt::format("stages[{}]", i);
      const auto s = e.at("stage").integer();
      if (s < 0) e.at("stage").fail(fmt::format("stage {} does not exist (stages are numbered from 0)", s));
      sp.stage = static_cast<int>(s);
      for (const auto& other : spec.speeds)
        if (other.stage == sp.stage) e.at("stage").fail(fmt::format("stage {} is listed twice", s));
      if (e.has("speed")) sp.speed = std::make_shared<const RateTrace>(rates.parse(e.at("speed"), base_dir));
      spec.speeds.push_back(std::move(sp));
    }
  }
  return spec;
}

Network NetworkSpec::bind(int S) const {
  Network net = Network::uniform(S, std::nullopt, latency_s);
  net.source = source;
  if (default_rate) net.rewrite_channels([&](ChannelSpec& c) { c.rate = default_rate; });
  for (const Channel& ch : channels) {
    for (auto [key, stage] : {std::pair{"from", ch.from}, std::pair{"to", ch.to}})
      if (stage >= S)
        throw InputError(fmt::format("{}: {}.{}: stage {} does not exist (the pipeline has {} stages: 0..{})",
                                     source, ch.field, key, stage, S, S - 1));
    ChannelSpec& c = net.channels_[net.index(ch.from, ch.to)];
    if (ch.rate) c.rate = ch.rate;
    c.latency_s = ch.latency_s.value_or(latency_s);
    if (ch.capacity) c.capacity = *ch.capacity;
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
