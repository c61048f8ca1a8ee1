// Simulated time for core tests: starts at zero, advances only by hand.
#pragma once

#include <cstdint>
#include <random>

#include "core/time.hpp"

namespace levee::test {

using namespace std::chrono_literals;
using core::Duration;
using core::TimePoint;

struct SimClock {
  TimePoint now{};
  void advance(Duration d) { now += d; }
};

/// Deterministic uniform draws in [0,1) for tests that need randomness.
struct Rng {
  explicit Rng(std::uint64_t seed) : gen(seed) {}
  double u() { return std::uniform_real_distribution<double>(0.0, 1.0)(gen); }
  std::uint64_t below(std::uint64_t n) { return std::uniform_int_distribution<std::uint64_t>(0, n - 1)(gen); }
  std::mt19937_64 gen;
};

}  // namespace levee::test
