// From measured transfers to the files the simulator and the planner read: transfer
// samples (docs/formats.md, "Transfer samples": time_s,bytes,duration_s, optionally
// with a leading channel column) and a network file whose channels read them.
#pragma once

#include <cstddef>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "backend.h"

namespace adagrouper::calib {

// What p2p measured on one channel (ranks = stages).
struct ChannelSamples {
  int from = 0, to = 0;
  double probe_latency_s = 0;  // median duration of the small probe transfers
  std::vector<TransferRecord> samples;
};

// The samples in the traces library's form, made valid: times moved to >= 0 and made
// strictly increasing (a time equal to or before the previous one moves 1 ns past it);
// durations kept as measured.
std::vector<TransferRecord> normalized(const std::vector<TransferRecord>& samples);

// "time_s,bytes,duration_s" and one row per sample (normalized), numbers in the
// shortest form that reads back exactly.
std::string samples_csv(const std::vector<TransferRecord>& samples);
// Every channel in one file, "channel,time_s,bytes,duration_s" with the channel as
// "FROM->TO" (for adagrouper plan --comm-profile FILE).
std::string all_samples_csv(const std::vector<ChannelSamples>& channels);

// The latency the network file gives a channel: the probes' median, but below every
// sample's duration (at most half the shortest), so that each sample has an effective
// rate bytes / (duration - latency).
double usable_latency(const ChannelSamples& ch);

// Where channel F -> T's samples go, relative to the network file: "samples/F-T.csv".
std::string sample_file(int from, int to);

// The network file (docs/formats.md): one entry per channel, reading its samples file
// with its latency, looped ("repeat": true) so that long simulations see the recording
// over and over.
nlohmann::ordered_json network_json(const std::vector<ChannelSamples>& channels, const std::string& description);

// Bytes per second as `plan --comm-profile` computes it: sum(bytes) / sum(duration -
// latency) over the last `window` samples (0: all).
double effective_rate(const std::vector<TransferRecord>& samples, double latency_s, std::size_t window = 0);

}  // namespace adagrouper::calib
