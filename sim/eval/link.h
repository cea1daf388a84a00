// Link: when a channel's transfer ends: its rate cursor, behind a token bucket when the channel has one.
//
// Both evaluators ask each channel for its transfers' ends in the channel's order, the
// same questions in the same order, so they agree to the last bit with a bucket too.
//
// The bucket (ChannelSpec::burst_bytes = B, docs/model.md "Shaped links") is a token
// bucket as a shaper such as Linux's tbf keeps one: full at the start, tokens accrue at
// the channel's rate while it is idle, up to B; a transfer whose data can flow from t
// sends what the bucket holds then at once and the rest at the rate, during which the
// tokens stay at 0. So an idle channel gives a transfer a head start of up to B bytes,
// and back-to-back transfers get none.
#pragma once

#include <algorithm>

#include "../network.h"
#include "../rate.h"

namespace adagrouper::sim::eval {

class Link {
 public:
  Link() = default;
  Link(const ChannelSpec& spec, double t0)
      : rate_(*spec.rate), trace_(spec.rate.get()), bucket_(spec.burst_bytes), tokens_(spec.burst_bytes), since_(t0) {}

  // The end of a transfer of `bytes` whose data can flow from t: t0 of the first call and
  // every earlier end are <= t. kNever when the rate never supplies it.
  double finish(double t, double bytes) { return bucket_ > 0 ? finish_with_bucket(t, bytes) : rate_.finish(t, bytes); }

 private:
  double finish_with_bucket(double t, double bytes) {
    const double tokens = std::min(bucket_, tokens_ + trace_->integral(since_, t));
    const double at_once = std::min(tokens, bytes);
    tokens_ = tokens - at_once;
    const double end = rate_.finish(t, bytes - at_once);
    since_ = end;
    return end;
  }

  RateCursor rate_;
  const RateTrace* trace_ = nullptr;
  double bucket_ = 0;  // bytes; 0: no bucket
  double tokens_ = 0;  // at since_
  double since_ = 0;
};

}  // namespace adagrouper::sim::eval
