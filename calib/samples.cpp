// Measured transfers to files (calib/samples.h): samples CSV, network file, effective rate.
#include "samples.h"

#include <algorithm>
#include <cmath>
#include <iterator>
#include <limits>

#include <fmt/format.h>

namespace adagrouper::calib {

std::vector<TransferRecord> normalized(const std::vector<TransferRecord>& samples) {
  std::vector<TransferRecord> out = samples;
  double prev = -1;
  for (TransferRecord& r : out) {
    r.time_s = std::max(r.time_s, 0.0);
    if (prev >= 0 && !(r.time_s > prev))
      r.time_s = std::max(prev + 1e-9, std::nextafter(prev, std::numeric_limits<double>::infinity()));
    prev = r.time_s;
  }
  return out;
}

std::string samples_csv(const std::vector<TransferRecord>& samples) {
  std::string out = "time_s,bytes,duration_s\n";
  for (const TransferRecord& r : normalized(samples))
    fmt::format_to(std::back_inserter(out), "{},{},{}\n", r.time_s, r.bytes, r.duration_s);
  return out;
}

std::string all_samples_csv(const std::vector<ChannelSamples>& channels) {
  std::string out = "channel,time_s,bytes,duration_s\n";
  for (const ChannelSamples& ch : channels)
    for (const TransferRecord& r : normalized(ch.samples))
      fmt::format_to(std::back_inserter(out), "{}->{},{},{},{}\n", ch.from, ch.to, r.time_s, r.bytes, r.duration_s);
  return out;
}

double usable_latency(const ChannelSamples& ch) {
  double shortest = std::numeric_limits<double>::infinity();
  for (const TransferRecord& r : ch.samples) shortest = std::min(shortest, r.duration_s);
  double latency = std::max(ch.probe_latency_s, 0.0);
  if (std::isfinite(shortest)) latency = std::min(latency, 0.5 * shortest);
  return latency;
}

std::string sample_file(int from, int to) { return fmt::format("samples/{}-{}.csv", from, to); }

nlohmann::ordered_json network_json(const std::vector<ChannelSamples>& channels, const std::string& description) {
  nlohmann::ordered_json doc;
  doc["description"] = description;
  doc["latency_s"] = 0.0;
  auto& list = doc["channels"] = nlohmann::ordered_json::array();
  for (const ChannelSamples& ch : channels) {
    const double latency = usable_latency(ch);
    nlohmann::ordered_json rate;
    rate["file"] = sample_file(ch.from, ch.to);
    rate["format"] = "samples";
    rate["latency_s"] = latency;
    rate["repeat"] = true;
    nlohmann::ordered_json c;
    c["from"] = ch.from;
    c["to"] = ch.to;
    c["latency_s"] = latency;
    c["rate"] = rate;
    list.push_back(c);
  }
  return doc;
}

double effective_rate(const std::vector<TransferRecord>& samples, double latency_s, std::size_t window) {
  const std::size_t first = window > 0 && samples.size() > window ? samples.size() - window : 0;
  double bytes = 0, seconds = 0;
  for (std::size_t i = first; i < samples.size(); ++i) {
    bytes += samples[i].bytes;
    seconds += samples[i].duration_s - latency_s;
  }
  return seconds > 0 ? bytes / seconds : 0.0;
}

}  // namespace adagrouper::calib
