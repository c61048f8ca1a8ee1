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

 private:
  struct Endpoint {
    double weight = 1.0;
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
  bool may_eject() const noexcept;
  /// Recomputes effective weights and the limit scale; true when a weight changed.
  bool recompute() noexcept;

  EndpointPolicy policy_;
  std::vector<Endpoint> eps_;
  double scale_ = 1.0;
};

}  // namespace levee::core
