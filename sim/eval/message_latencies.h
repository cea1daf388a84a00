// The latencies of one iteration's messages: their channel's, except where the
// scenario's message timing trace lists the message. Internal to sim/.
#pragma once

#include <cstdint>
#include <vector>

#include "op_durations.h"
#include "program.h"

namespace adagrouper::sim::eval {

// `load(it)` must be called for iterations in increasing order; `of(pc, n)` is then
// the latency of channel pc's n-th message in that iteration: the trace's where it
// lists the message, else the channel's. `lists` and `load(it, true)` are OpDurations'.
class MessageLatencies {
 public:
  MessageLatencies(const Scenario& sc, const Program& prog);
  bool lists(int iteration);
  void load(int iteration, bool materialize = false);
  double of(const ProgramChannel& pc, std::uint32_t n) const { return has_ ? latency_[pc.first + n] : pc.latency_s; }
  // `of` without the test, for a loop compiled once for each answer of OpDurations::timed().
  template <bool kTimed>
  double of(const ProgramChannel& pc, std::uint32_t n) const {
    return kTimed ? latency_[pc.first + n] : pc.latency_s;
  }

 private:
  const Scenario& sc_;
  const Program& prog_;
  std::size_t cursor_ = 0;
  bool has_ = false;
  static constexpr std::uint32_t kUnlisted = 0xffffffffu;
  std::vector<double> latency_;       // per message (ProgramChannel::first + n)
  std::vector<std::uint32_t> index_;  // [(j M + m) 2 + gradient]: the message, or kUnlisted (none, or local)
};

}  // namespace adagrouper::sim::eval
