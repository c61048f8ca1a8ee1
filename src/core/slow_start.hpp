// Slow start: an endpoint that joins, or returns from unhealthy or ejected,
// ramps its load-balancing weight (and its share of the cluster's
// concurrency limit) over a window instead of taking a full share at once:
//     multiplier(t) = max(min_pct/100, (t / window)^(1 / aggression))
// aggression 1 is linear; larger values front-load the ramp. (Envoy's
// slow-start formula uses the same shape.)
//
// Readiness-driven variant: the ramp's clock only advances while the
// endpoint reports itself healthy (utilization and latency under limits),
// so a struggling endpoint never finishes ramping; and after `early_exit`
// of continuously healthy reports the ramp ends early.
#pragma once

#include <algorithm>
#include <cmath>

#include "core/time.hpp"

namespace levee::core {

struct SlowStartConfig {
  Duration window = Duration::zero();  ///< zero disables slow start
  double aggression = 1.0;
  double min_weight_pct = 10.0;
  bool readiness = false;
  Duration early_exit = Duration::zero();  ///< zero: never end early
};

inline double slow_start_multiplier(const SlowStartConfig& cfg, Duration elapsed) noexcept {
  if (cfg.window <= Duration::zero() || elapsed >= cfg.window) return 1.0;
  double t = std::max(0.0, to_seconds(elapsed) / to_seconds(cfg.window));
  double a = cfg.aggression > 0 ? cfg.aggression : 1.0;
  double m = std::pow(t, 1.0 / a);
  return std::clamp(std::max(cfg.min_weight_pct / 100.0, m), 0.0, 1.0);
}

/// The ramp of one endpoint.
class SlowStart {
 public:
  explicit SlowStart(SlowStartConfig cfg = {}) noexcept : cfg_(cfg) {}

  /// The endpoint joins or returns: the ramp starts over.
  void restart(TimePoint now) noexcept {
    active_ = cfg_.window > Duration::zero();
    elapsed_ = Duration::zero();
    healthy_for_ = Duration::zero();
    last_ = now;
  }

  /// Advances the ramp. healthy: the endpoint's own signals look fine (only
  /// consulted in readiness mode).
  void tick(TimePoint now, bool healthy = true) noexcept {
    if (!active_) return;
    Duration dt = std::max(Duration::zero(), now - last_);
    last_ = now;
    if (!cfg_.readiness || healthy) {
      elapsed_ += dt;
      healthy_for_ = cfg_.readiness ? healthy_for_ + dt : healthy_for_;
    } else {
      healthy_for_ = Duration::zero();
    }
    if (elapsed_ >= cfg_.window) active_ = false;
    if (cfg_.readiness && cfg_.early_exit > Duration::zero() && healthy_for_ >= cfg_.early_exit)
      active_ = false;
  }

  bool active() const noexcept { return active_; }
  double multiplier() const noexcept {
    return active_ ? slow_start_multiplier(cfg_, elapsed_) : 1.0;
  }
  const SlowStartConfig& config() const noexcept { return cfg_; }
  /// New parameters for a ramp in progress (a reload): it carries on from
  /// where it is, under the new window.
  void set_config(SlowStartConfig cfg) noexcept {
    cfg_ = cfg;
    if (cfg_.window <= Duration::zero() || elapsed_ >= cfg_.window) active_ = false;
  }

 private:
  SlowStartConfig cfg_;
  bool active_ = false;
  Duration elapsed_{};
  Duration healthy_for_{};
  TimePoint last_{};
};

}  // namespace levee::core
