// Changing one channel of a bound network in a test, through Network::rewrite_channels.
#pragma once

#include <functional>

#include "network.h"

namespace testutil {

inline void edit_channel(adagrouper::sim::Network& n, int from, int to,
                         const std::function<void(adagrouper::sim::ChannelSpec&)>& fn) {
  n.rewrite_channels([&](adagrouper::sim::ChannelSpec& c) {
    if (c.from == from && c.to == to) fn(c);
  });
}

}  // namespace testutil
