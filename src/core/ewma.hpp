// Exponentially weighted moving average over irregularly spaced samples.
//
// With a time constant tau, a sample arriving dt after the previous one moves
// the average by alpha = 1 - exp(-dt / tau): the weight of history decays as
// exp(-t/tau) in real time, independent of how often samples arrive, so a
// burst of samples in one instant cannot swing the value more than one
// sample spread over the same time would.
#pragma once

#include <cmath>

#include "core/time.hpp"

namespace levee::core {

class Ewma {
 public:
  explicit Ewma(Duration tau = std::chrono::seconds(1)) noexcept : tau_s_(to_seconds(tau)) {}

  void update(TimePoint now, double sample) noexcept {
    if (!initialized_) {
      value_ = sample;
      last_ = now;
      initialized_ = true;
      return;
    }
    double dt = to_seconds(now - last_);
    if (dt < 0) dt = 0;
    double alpha = tau_s_ > 0 ? 1.0 - std::exp(-dt / tau_s_) : 1.0;
    value_ += alpha * (sample - value_);
    last_ = now;
  }

  /// Per-sample smoothing (weight w for the new sample), for signals whose
  /// samples are events rather than readings of a continuous quantity.
  void update_weighted(double sample, double w) noexcept {
    if (!initialized_) {
      value_ = sample;
      initialized_ = true;
      return;
    }
    value_ += w * (sample - value_);
  }

  void reset(double v) noexcept { value_ = v; initialized_ = true; }
  double value() const noexcept { return value_; }
  bool initialized() const noexcept { return initialized_; }

 private:
  double tau_s_;
  double value_ = 0.0;
  TimePoint last_{};
  bool initialized_ = false;
};

}  // namespace levee::core
