// Time as levee's admission core sees it: a monotonic nanosecond timeline
// that is always passed in, never read. The I/O shell maps steady_clock onto
// it; unit tests and the simulator start it at zero and advance it by hand.
#pragma once

#include <chrono>
#include <cstdint>

namespace levee::core {

using Duration = std::chrono::nanoseconds;

/// A clock type with no now(): core code cannot read the time, only receive it.
struct Clock {
  using rep = std::int64_t;
  using period = std::nano;
  using duration = Duration;
  using time_point = std::chrono::time_point<Clock, Duration>;
  static constexpr bool is_steady = true;
};
using TimePoint = Clock::time_point;

constexpr double to_seconds(Duration d) noexcept {
  return std::chrono::duration<double>(d).count();
}
constexpr Duration from_seconds(double s) noexcept {
  return std::chrono::duration_cast<Duration>(std::chrono::duration<double>(s));
}
constexpr TimePoint at(Duration since_zero) noexcept { return TimePoint{since_zero}; }

}  // namespace levee::core
