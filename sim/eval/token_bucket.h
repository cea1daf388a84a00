// TokenBucket: a channel's token bucket in front of its rate (ChannelSpec::burst_bytes).
//
// The bucket (B bytes, docs/model.md "Shaped links") is a token bucket as a shaper such
// as Linux's tbf keeps one: full at the start, tokens accrue at the channel's rate while
// it is idle, up to B; a transfer whose data can flow from t sends what the bucket holds
// then at once and the rest at the rate, during which the tokens stay at 0. So an idle
// channel gives a transfer a head start of up to B bytes, and back-to-back transfers get
// none. The event engine asks a channel's bucket for each transfer in the channel's
// order; the dataflow evaluator hands scenarios with buckets to it (evaluator.h). A
// channel without one (ProgramChannel::transfer) never reaches it.
#pragma once

#include <algorithm>

#include "../network.h"
#include "../rate.h"

namespace adagrouper::sim::eval {

class TokenBucket {
 public:
  TokenBucket() = default;
  TokenBucket(const ChannelSpec& spec, double t0)
      : trace_(spec.rate.get()), size_(spec.burst_bytes), tokens_(spec.burst_bytes), since_(t0) {}

  // The end of a transfer of `bytes` whose data can flow from t, on the channel's rate
  // cursor `rate`: t0 and every earlier end are <= t. kNever when the rate never supplies it.
  double finish(RateCursor& rate, double t, double bytes) {
    const double tokens = std::min(size_, tokens_ + trace_->integral(since_, t));
    const double at_once = std::min(tokens, bytes);
    tokens_ = tokens - at_once;
    const double end = rate.finish(t, bytes - at_once);
    since_ = end;
    return end;
  }

 private:
  const RateTrace* trace_ = nullptr;
  double size_ = 0;
  double tokens_ = 0;  // at since_
  double since_ = 0;
};

}  // namespace adagrouper::sim::eval
