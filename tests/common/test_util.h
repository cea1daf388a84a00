// What every GoogleTest suite of adagrouper shares: seeded randomness drawn by hand,
// temporary directories, and catching an InputError's message.
#pragma once

#include <unistd.h>

#include <atomic>
#include <cstdint>
#include <filesystem>
#include <fstream>
#include <functional>
#include <random>
#include <string>
#include <string_view>
#include <system_error>

#include <gtest/gtest.h>
#include <nlohmann/json.hpp>

#include "error.h"

namespace testutil {

// The message of the InputError `f` throws ("" and a test failure when it throws
// nothing or something else).
inline std::string input_error(const std::function<void()>& f) {
  try {
    f();
  } catch (const adagrouper::InputError& e) {
    return e.what();
  } catch (const std::exception& e) {
    ADD_FAILURE() << "expected InputError, got another exception: " << e.what();
    return {};
  }
  ADD_FAILURE() << "expected InputError, nothing was thrown";
  return {};
}

// Seeded randomness drawn by hand (no std::uniform_*_distribution, whose output is
// implementation-defined), so a seed means the same scenario everywhere.
class Rng {
 public:
  explicit Rng(std::uint64_t seed) : g_(seed) {}
  double uniform() { return static_cast<double>(g_() >> 11) * 0x1.0p-53; }  // [0, 1)
  std::uint64_t below(std::uint64_t n) { return g_() % n; }                 // [0, n)
  int range(int lo, int hi) { return lo + static_cast<int>(below(static_cast<std::uint64_t>(hi - lo + 1))); }
  bool chance(double p) { return uniform() < p; }
  // A multiple of 1/denominator in [lo, hi] (exactly representable for powers of 2).
  double dyadic(int lo_units, int hi_units, double denominator) { return range(lo_units, hi_units) / denominator; }
  std::uint64_t next() { return g_(); }

 private:
  std::mt19937_64 g_;
};

// A fresh directory under the system temporary directory, removed on destruction.
class TempDir {
 public:
  TempDir() {
    static std::atomic<int> counter{0};
    path_ = std::filesystem::temp_directory_path() /
            ("adagrouper_test_" + std::to_string(::getpid()) + "_" + std::to_string(counter++) + "_" +
             std::to_string(std::random_device{}()));
    std::filesystem::create_directories(path_);
  }
  ~TempDir() {
    std::error_code ec;
    std::filesystem::remove_all(path_, ec);
  }
  TempDir(const TempDir&) = delete;
  TempDir& operator=(const TempDir&) = delete;

  const std::filesystem::path& path() const { return path_; }
  std::filesystem::path write(const std::string& name, std::string_view content) const {
    const auto p = path_ / name;
    std::filesystem::create_directories(p.parent_path());
    std::ofstream out(p, std::ios::binary);
    out << content;
    return p;
  }
  std::filesystem::path write(const std::string& name, const char* content) const {
    return write(name, std::string_view(content));
  }
  std::filesystem::path write(const std::string& name, const std::string& content) const {
    return write(name, std::string_view(content));
  }
  std::filesystem::path write(const std::string& name, const nlohmann::json& doc) const {
    return write(name, doc.dump(2));
  }

 private:
  std::filesystem::path path_;
};

}  // namespace testutil
