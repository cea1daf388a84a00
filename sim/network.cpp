#include "network.h"

#include <stdexcept>

#include <fmt/format.h>

#include "json_util.h"

namespace adagrouper::sim {

Network Network::uniform(int num_stages, std::optional<double> rate, double latency_s) {
  Network n;
  n.source = "(built in)";
  n.speed.assign(num_stages, RateTrace::constant(1.0));
  for (int s = 0; s + 1 < num_stages; ++s) {
    ChannelSpec f;
    f.from = s;
    f.to = s + 1;
    f.latency_s = latency_s;
    if (rate) {
      f.unlimited = false;
      f.rate = RateTrace::constant(*rate);
    }
    ChannelSpec b = f;
    b.from = s + 1;
    b.to = s;
    n.forward.push_back(f);
    n.backward.push_back(b);
  }
  return n;
}

RateTrace parse_rate(const Field& rate, const std::filesystem::path& base_dir,
                     const RateResolver& resolver) {
  rate.require_object();
  if (rate.has("constant")) {
    if (rate.json().size() != 1) rate.fail("a constant rate has only the field \"constant\"");
    return RateTrace::constant(rate.at("constant").non_negative());
  }
  if (rate.has("points")) {
    Field pts = rate.at("points");
    if (pts.size() == 0) pts.fail("must list at least one [time, value] point");
    std::vector<double> times, values;
    times.reserve(pts.size());
    values.reserve(pts.size());
    for (std::size_t i = 0; i < pts.size(); ++i) {
      Field p = pts.at(i);
      if (!p.is_array() || p.size() != 2) p.fail("must be a [time, value] pair");
      double t = p.at(std::size_t{0}).non_negative();
      double v = p.at(std::size_t{1}).non_negative();
      if (i == 0 && t != 0) p.fail(fmt::format("trace times must start at 0, got {}", t));
      if (i > 0 && !(t > times.back()))
        p.fail(fmt::format("trace times must be strictly increasing ({} after {})", t, times.back()));
      times.push_back(t);
      values.push_back(v);
    }
    double repeat = 0;
    if (rate.has("repeat_s")) {
      repeat = rate.at("repeat_s").positive();
      if (!(repeat > times.back()))
        rate.at("repeat_s").fail(fmt::format("must be larger than the last point's time {}", times.back()));
    }
    try {
      return RateTrace::piecewise(std::move(times), std::move(values), repeat);
    } catch (const std::invalid_argument& e) {
      rate.fail(e.what());
    }
  }
  if (resolver) {
    if (auto r = resolver(rate, base_dir)) return std::move(*r);
  }
  if (rate.has("file"))
    rate.fail("rate files need the traces library, which this build does not link");
  rate.fail("unknown rate form: expected {\"constant\": R} or {\"points\": [[t, R], ...]}");
}

Network load_network(const std::filesystem::path& path, int num_stages, const RateResolver& resolver) {
  return parse_network(read_json_file(path), path.string(), num_stages, resolver);
}

Network parse_network(const nlohmann::json& doc, const std::string& source, int num_stages,
                      const RateResolver& resolver) {
  Field root(doc, source);
  root.require_object();
  const std::filesystem::path base_dir = std::filesystem::path(source).parent_path();
  const double latency = root.non_negative_or("latency_s", 0.0);
  std::optional<RateTrace> fallback;
  if (root.has("default")) fallback = parse_rate(root.at("default"), base_dir, resolver);

  Network net = Network::uniform(num_stages, std::nullopt, latency);
  net.source = source;
  for (auto* dir : {&net.forward, &net.backward}) {
    for (auto& ch : *dir) {
      if (fallback) {
        ch.unlimited = false;
        ch.rate = *fallback;
      }
    }
  }

  if (root.has("channels")) {
    Field chans = root.at("channels");
    std::vector<bool> seen(2 * std::max(0, num_stages - 1), false);
    for (std::size_t i = 0; i < chans.size(); ++i) {
      Field c = chans.at(i);
      c.require_object();
      const auto from = c.at("from").integer();
      const auto to = c.at("to").integer();
      auto check_stage = [&](const char* key, std::int64_t v) {
        if (v < 0 || v >= num_stages)
          c.at(key).fail(fmt::format("stage {} does not exist (the pipeline has {} stages: 0..{})", v,
                                     num_stages, num_stages - 1));
      };
      check_stage("from", from);
      check_stage("to", to);
      if (from - to != 1 && to - from != 1)
        c.fail(fmt::format("channel {} -> {} joins non-adjacent stages; channels join s and s+1", from, to));
      const bool fwd = to == from + 1;
      const int s = static_cast<int>(fwd ? from : to);
      const std::size_t key = (fwd ? 0 : num_stages - 1) + s;
      if (seen[key]) c.fail(fmt::format("channel {} -> {} is listed twice", from, to));
      seen[key] = true;
      ChannelSpec& ch = fwd ? net.forward[s] : net.backward[s];
      if (c.has("rate")) {
        ch.rate = parse_rate(c.at("rate"), base_dir, resolver);
        ch.unlimited = false;
      }
      ch.latency_s = c.non_negative_or("latency_s", latency);
      if (c.has("capacity")) ch.capacity = static_cast<int>(c.at("capacity").integer_at_least(1));
    }
  }

  if (root.has("stages")) {
    Field st = root.at("stages");
    std::vector<bool> seen(num_stages, false);
    for (std::size_t i = 0; i < st.size(); ++i) {
      Field e = st.at(i);
      e.require_object();
      const auto s = e.at("stage").integer();
      if (s < 0 || s >= num_stages)
        e.at("stage").fail(fmt::format("stage {} does not exist (the pipeline has {} stages)", s, num_stages));
      if (seen[s]) e.at("stage").fail(fmt::format("stage {} is listed twice", s));
      seen[s] = true;
      if (e.has("speed")) net.speed[s] = parse_rate(e.at("speed"), base_dir, resolver);
    }
  }
  return net;
}

}  // namespace adagrouper::sim
