// Shared helpers of the traces_test suite.
#pragma once

#include "../common/network_edit.h"
#include "../common/test_util.h"
#include <unistd.h>

#include <atomic>
#include <filesystem>
#include <fstream>
#include <functional>
#include <string>
#include <vector>

#include <gtest/gtest.h>
#include <nlohmann/json.hpp>

#include "error.h"
#include "traces.h"

namespace tracestest {

namespace fs = std::filesystem;
namespace tr = adagrouper::traces;
using adagrouper::InputError;
using testutil::TempDir;

// The directory of the hand-written fixtures (tests/traces/data).
inline fs::path fixture(const std::string& name) { return fs::path(FIXTURES) / name; }

using testutil::input_error;


inline tr::Trace parse(const std::string& text, const std::string& source = "t.csv", tr::LoadOptions opt = {}) {
  return tr::parse_trace(text, source, opt).trace;
}

inline tr::Trace spec(const std::string& json, const fs::path& base_dir = {}) {
  return tr::parse_rate_spec(nlohmann::json::parse(json), "spec.json", base_dir);
}

// Points as (t, v) pairs, for readable expectations.
inline std::vector<std::pair<double, double>> points(const tr::Trace& t) {
  std::vector<std::pair<double, double>> out;
  for (std::size_t i = 0; i < t.size(); ++i) out.emplace_back(t.rate.times()[i], t.rate.values()[i]);
  return out;
}

using P = std::vector<std::pair<double, double>>;

// The canonical trace through the points (t, v) of `p`, repeating after repeat_s if > 0.
inline tr::Trace pts(P p, double repeat_s = 0) {
  std::vector<double> t, v;
  for (auto [a, b] : p) {
    t.push_back(a);
    v.push_back(b);
  }
  return tr::canonical(adagrouper::sim::RateTrace::piecewise(t, v, repeat_s));
}

// Whether two traces are the same function, stored the same way, with the same span.
inline void expect_same(const tr::Trace& a, const tr::Trace& b) {
  EXPECT_EQ(a.rate.times(), b.rate.times());
  EXPECT_EQ(a.rate.values(), b.rate.values());
  EXPECT_EQ(a.rate.repeat_s(), b.rate.repeat_s());
  EXPECT_EQ(a.span_s, b.span_s);
}

}  // namespace tracestest
