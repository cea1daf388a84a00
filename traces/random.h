// Seeded random numbers drawn by hand on std::mt19937_64, whose output sequence the
// C++ standard fixes. The std::*_distribution classes are implementation-defined, so
// they are not used: a seed gives the same trace with any compiler and library.
#pragma once

#include <cmath>
#include <cstdint>
#include <numbers>
#include <random>

namespace adagrouper::traces {

class Rng {
 public:
  explicit Rng(std::uint64_t seed) : g_(seed) {}

  // Uniform on [0, 1), 53 random bits.
  double uniform01() { return static_cast<double>(g_() >> 11) * 0x1.0p-53; }

  // Exponential with the given mean (inverse transform; 1 - u lies in (0, 1]).
  double exponential(double mean) { return -mean * std::log1p(-uniform01()); }

  // Standard normal (Box-Muller, one value per two uniforms).
  double normal() {
    const double u1 = 1.0 - uniform01();  // (0, 1]
    const double u2 = uniform01();
    return std::sqrt(-2.0 * std::log(u1)) * std::cos(2.0 * std::numbers::pi * u2);
  }

  // Log-normal with the given mean and shape sigma (the standard deviation of the
  // underlying normal): exp(mu + sigma N) with mu = ln(mean) - sigma^2 / 2.
  double lognormal(double mean, double sigma) {
    const double mu = std::log(mean) - 0.5 * sigma * sigma;
    return std::exp(mu + sigma * normal());
  }

  // True with probability p.
  bool chance(double p) { return uniform01() < p; }

 private:
  std::mt19937_64 g_;
};

}  // namespace adagrouper::traces
