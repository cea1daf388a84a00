// Precompiled header of the GoogleTest suites: the heavy third-party headers every test
// file includes. Parsing them is about half the compile time of a test file, and CI
// builds the suites twice (release and sanitizer), so each suite precompiles them once.
// No include guard: Meson compiles this file on its own, where g++ warns about
// `#pragma once`, and includes it first in every test file, once.

#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <fmt/format.h>
#include <nlohmann/json.hpp>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <filesystem>
#include <fstream>
#include <map>
#include <optional>
#include <sstream>
#include <string>
#include <vector>
