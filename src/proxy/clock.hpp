// The shell owns the clock: steady_clock mapped onto core's timeline.
#pragma once

#include <chrono>

#include "core/time.hpp"

namespace levee::proxy {

inline core::TimePoint now() noexcept {
  return core::TimePoint{std::chrono::duration_cast<core::Duration>(
      std::chrono::steady_clock::now().time_since_epoch())};
}
inline std::chrono::steady_clock::time_point to_steady(core::TimePoint t) noexcept {
  return std::chrono::steady_clock::time_point{
      std::chrono::duration_cast<std::chrono::steady_clock::duration>(t.time_since_epoch())};
}

/// xoshiro256** per worker: fast, good enough for load balancing and jitter.
class Rng {
 public:
  explicit Rng(std::uint64_t seed) noexcept {
    for (auto& s : s_) {
      seed += 0x9e3779b97f4a7c15ull;
      std::uint64_t z = seed;
      z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ull;
      z = (z ^ (z >> 27)) * 0x94d049bb133111ebull;
      s = z ^ (z >> 31);
    }
  }
  std::uint64_t next() noexcept {
    const std::uint64_t r = rotl(s_[1] * 5, 7) * 9;
    const std::uint64_t t = s_[1] << 17;
    s_[2] ^= s_[0];
    s_[3] ^= s_[1];
    s_[1] ^= s_[2];
    s_[0] ^= s_[3];
    s_[2] ^= t;
    s_[3] = rotl(s_[3], 45);
    return r;
  }
  /// Uniform in [0, 1).
  double uniform() noexcept { return static_cast<double>(next() >> 11) * 0x1.0p-53; }

 private:
  static std::uint64_t rotl(std::uint64_t x, int k) noexcept { return (x << k) | (x >> (64 - k)); }
  std::uint64_t s_[4];
};

}  // namespace levee::proxy
