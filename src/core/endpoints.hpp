// The endpoints of one cluster as admission sees them: health from active
// checks, passive outlier ejection, slow-start ramps, and what follows from
// them: each endpoint's effective load-balancing weight and the share of the
// cluster's concurrency limit that is ready to be used.
//
// Pure state: the shell holds it under the cluster's lock, feeds it check
// results, request results and the time, and publishes the effective
// weights it reads back (lock-free, for the balancer) whenever a call says
// they changed.
#pragma once

#include <cstddef>
#include <cstdint>
#include <optional>
#include <span>
#include <vector>

#include "core/ewma.hpp"
#include "core/health.hpp"
#include "core/slow_start.hpp"
#include "core/time.hpp"

namespace levee::core {

/// An operator's say over an endpoint (the admin API), on top of health:
/// Draining takes no new requests and lets those in flight finish;
/// Disabled is the same, and its active health checks pause too (a backend
/// in maintenance is not probed). Both are lifted by Enabled, from which
/// the endpoint returns through slow start.
enum class AdminState : std::uint8_t { Enabled, Draining, Disabled };

struct EndpointPolicy {
  /// With active checks an endpoint is out until its first check passes.
  bool health_checks = false;
  bool outlier_detection = true;
  OutlierConfig outlier{};
  SlowStartConfig slow_start{};
};

class EndpointSet {
 public:
  /// Endpoints with their configured weights; they join now (and ramp, when
  /// slow start is on: a levee that starts is a new client for every one).
  EndpointSet(EndpointPolicy p, std::span<const double> weights, TimePoint now);

  std::size_t size() const noexcept { return eps_.size(); }

  /// One request result for outlier detection (5xx, connect failure and
  /// timeout are failures). True when this result ejected the endpoint.
  bool on_result(std::size_t i, TimePoint now, bool success) noexcept;

  /// A response head arrived: its latency, and the utilization the endpoint
  /// reported with it, if any.
  void on_response(std::size_t i, TimePoint now, Duration latency, std::optional<double> utilization) noexcept;

  /// An active health check's verdict. True when the endpoint's state changed.
  bool set_healthy(std::size_t i, bool healthy, TimePoint now) noexcept;

  /// The endpoint is a new backend as far as warm-up goes (its address
  /// changed): it ramps again.
  void restart(std::size_t i, TimePoint now) noexcept;

  /// Advances slow-start ramps and ends expired ejections. True when some
  /// effective weight changed.
  bool refresh(TimePoint now) noexcept;

  double weight(std::size_t i) const noexcept { return eps_[i].weight; }
  /// Configured weight x slow-start multiplier; 0 while unhealthy or ejected.
  double effective_weight(std::size_t i) const noexcept { return eps_[i].effective; }
  bool healthy(std::size_t i) const noexcept { return eps_[i].healthy; }
  bool ejected(std::size_t i) const noexcept { return eps_[i].ejected; }
  bool ramping(std::size_t i) const noexcept { return eps_[i].slow_start.active(); }
  std::uint64_t ejections(std::size_t i) const noexcept { return eps_[i].ejection_count; }
  std::uint64_t health_transitions(std::size_t i) const noexcept { return eps_[i].transitions; }
  std::optional<double> utilization(std::size_t i) const noexcept {
    const auto& e = eps_[i].utilization;
    return e.initialized() ? std::optional<double>(e.value()) : std::nullopt;
  }
  /// Endpoints that are healthy and not ejected.
  std::size_t available() const noexcept;

  /// The share of the cluster's configured weight that is ready: the
  /// concurrency limit is scaled by it. An endpoint in slow start takes a
  /// share of the limit in line with its ramp, and a cluster missing
  /// endpoints admits correspondingly less. While no available endpoint has
  /// finished its ramp (levee's own start-up, a whole fleet returning at
  /// once) the ramp cannot shift load anywhere, so the limit then follows
  /// health alone.
  double limit_scale() const noexcept { return scale_; }

 public:
  /// One endpoint's whole state, as carried from one set to the next when
  /// the cluster is rebuilt (a reload, a DNS change): see adopt().
  struct Member {
    double weight = 1.0;  ///< configured
    std::optional<double> weight_override;  ///< set by an operator at runtime
    AdminState admin = AdminState::Enabled;
    double effective = 0.0;
    bool healthy = true;
    bool ejected = false;
    std::uint64_t ejection_count = 0;
    std::uint64_t transitions = 0;
    OutlierState outlier;
    SlowStart slow_start;
    Ewma utilization{std::chrono::seconds(1)};
    Ewma latency{std::chrono::seconds(1)};  ///< response-header latency, seconds
  };
  const Member& member(std::size_t i) const noexcept { return eps_[i]; }
  /// Endpoint i takes over m's state (health, ejection, slow-start ramp,
  /// smoothed latency and utilization, the operator's state and weight),
  /// keeping this set's configured weight and policy. Without active health
  /// checks in this set's policy it counts as healthy (nothing would ever
  /// bring it back otherwise).
  void adopt(std::size_t i, const Member& m) noexcept;

  /// The operator's state. True when it changed; leaving Draining or
  /// Disabled starts a slow-start ramp.
  bool set_admin(std::size_t i, AdminState s, TimePoint now) noexcept;
  AdminState admin(std::size_t i) const noexcept { return eps_[i].admin; }
  /// An operator's weight in place of the configured one (nullopt: back to it).
  void set_weight_override(std::size_t i, std::optional<double> w) noexcept;
  /// The weight in force before slow start: the override, else the configured one.
  double base_weight(std::size_t i) const noexcept { return eps_[i].weight_override.value_or(eps_[i].weight); }

 private:
  using Endpoint = Member;
  bool may_eject() const noexcept;
  /// Recomputes effective weights and the limit scale; true when a weight changed.
  bool recompute() noexcept;

  EndpointPolicy policy_;
  std::vector<Endpoint> eps_;
  double scale_ = 1.0;
};

}  // namespace levee::core
