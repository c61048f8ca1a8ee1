// Endpoint health with hysteresis, and passive outlier ejection.
//
// HealthState: active checks move an endpoint out after `unhealthy`
// consecutive failures and back in after `healthy` consecutive successes;
// different thresholds for the two directions keep it from flapping.
//
// OutlierState: consecutive request failures (5xx, connect failures,
// timeouts) eject an endpoint for base * 2^(n-1) (capped), n counting
// ejections; the count decays by one for every `decay` the endpoint stays
// healthy. Whether an ejection may happen at all is the cluster's call
// (at most max_ejected_pct of it), so it is an argument here.
#pragma once

#include <algorithm>
#include <cstdint>

#include "core/time.hpp"

namespace levee::core {

struct HealthConfig {
  std::uint32_t healthy = 2;
  std::uint32_t unhealthy = 3;
};

class HealthState {
 public:
  enum class Change : std::uint8_t { None, BecameHealthy, BecameUnhealthy };

  explicit HealthState(HealthConfig cfg = {}, bool start_healthy = true) noexcept
      : cfg_(cfg), healthy_(start_healthy) {}

  Change on_check(bool ok) noexcept {
    if (ok) {
      fails_ = 0;
      if (!healthy_ && ++oks_ >= cfg_.healthy) {
        healthy_ = true;
        oks_ = 0;
        return Change::BecameHealthy;
      }
    } else {
      oks_ = 0;
      if (healthy_ && ++fails_ >= cfg_.unhealthy) {
        healthy_ = false;
        fails_ = 0;
        return Change::BecameUnhealthy;
      }
    }
    return Change::None;
  }

  bool healthy() const noexcept { return healthy_; }
  std::uint32_t consecutive_failures() const noexcept { return fails_; }
  std::uint32_t consecutive_successes() const noexcept { return oks_; }

 private:
  HealthConfig cfg_;
  bool healthy_;
  std::uint32_t fails_ = 0;
  std::uint32_t oks_ = 0;
};

struct OutlierConfig {
  std::uint32_t consecutive_failures = 5;  ///< 0 disables outlier detection
  Duration base_ejection = std::chrono::seconds(10);
  Duration max_ejection = std::chrono::seconds(300);
  Duration decay = std::chrono::seconds(60);
  double max_ejected_pct = 50.0;
};

class OutlierState {
 public:
  explicit OutlierState(OutlierConfig cfg = {}) noexcept : cfg_(cfg) {}

  /// One request result. may_eject: the cluster still has room for an
  /// ejection. Returns true when this result ejects the endpoint.
  bool on_result(TimePoint now, bool success, bool may_eject) noexcept {
    decay(now);
    if (success) {
      failures_ = 0;
      return false;
    }
    if (cfg_.consecutive_failures == 0 || ejected(now)) return false;
    if (++failures_ < cfg_.consecutive_failures || !may_eject) return false;
    failures_ = 0;
    ++ejections_;
    ejected_until_ = now + ejection_time();
    return true;
  }

  bool ejected(TimePoint now) const noexcept { return now < ejected_until_; }
  /// New parameters (a reload); an ejection in progress keeps its end.
  void set_config(OutlierConfig cfg) noexcept { cfg_ = cfg; }
  TimePoint ejected_until() const noexcept { return ejected_until_; }
  std::uint32_t ejections() const noexcept { return ejections_; }

  /// The ejection time the next ejection would get: base * 2^(n-1), capped.
  Duration ejection_time() const noexcept {
    std::uint32_t n = std::max<std::uint32_t>(1, ejections_);
    Duration t = cfg_.base_ejection;
    for (std::uint32_t i = 1; i < n && t < cfg_.max_ejection; ++i) t *= 2;
    return std::min(t, cfg_.max_ejection);
  }

 private:
  void decay(TimePoint now) noexcept {
    if (ejections_ == 0 || ejected(now) || cfg_.decay <= Duration::zero()) return;
    TimePoint since = std::max(ejected_until_, last_decay_);
    while (ejections_ > 0 && now - since >= cfg_.decay) {
      --ejections_;
      since += cfg_.decay;
    }
    last_decay_ = since;
  }

  OutlierConfig cfg_;
  std::uint32_t failures_ = 0;
  std::uint32_t ejections_ = 0;
  TimePoint ejected_until_{};
  TimePoint last_decay_{};
};

}  // namespace levee::core
