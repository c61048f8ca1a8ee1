#include "core/endpoints.hpp"

#include <algorithm>

namespace levee::core {

EndpointSet::EndpointSet(EndpointPolicy p, std::span<const double> weights, TimePoint now)
    : policy_(p) {
  eps_.reserve(weights.size());
  for (double w : weights) {
    Endpoint e;
    e.weight = w;
    e.healthy = !policy_.health_checks;
    e.outlier = OutlierState(policy_.outlier);
    e.slow_start = SlowStart(policy_.slow_start);
    e.slow_start.restart(now);
    eps_.push_back(std::move(e));
  }
  recompute();
}

std::size_t EndpointSet::available() const noexcept {
  return static_cast<std::size_t>(std::count_if(eps_.begin(), eps_.end(), [](const Endpoint& e) {
    return e.healthy && !e.ejected && e.admin == AdminState::Enabled;
  }));
}

void EndpointSet::adopt(std::size_t i, const Member& m) noexcept {
  Endpoint& e = eps_[i];
  const double weight = e.weight;
  e = m;
  e.weight = weight;
  e.outlier.set_config(policy_.outlier);
  e.slow_start.set_config(policy_.slow_start);
  if (!policy_.health_checks) e.healthy = true;
  recompute();
}

bool EndpointSet::set_admin(std::size_t i, AdminState s, TimePoint now) noexcept {
  Endpoint& e = eps_[i];
  if (e.admin == s) return false;
  const bool returning = s == AdminState::Enabled;
  e.admin = s;
  // Back in rotation: it has been out, so it warms up like any returning endpoint.
  if (returning) e.slow_start.restart(now);
  refresh(now);
  return true;
}

void EndpointSet::set_weight_override(std::size_t i, std::optional<double> w) noexcept {
  eps_[i].weight_override = w;
  recompute();
}

bool EndpointSet::may_eject() const noexcept {
  const auto ejected = std::count_if(eps_.begin(), eps_.end(), [](const Endpoint& e) { return e.ejected; });
  return static_cast<double>(ejected + 1) * 100.0 <=
         policy_.outlier.max_ejected_pct * static_cast<double>(eps_.size());
}

bool EndpointSet::on_result(std::size_t i, TimePoint now, bool success) noexcept {
  if (!policy_.outlier_detection) return false;
  Endpoint& e = eps_[i];
  if (!e.outlier.on_result(now, success, may_eject())) return false;
  e.ejected = true;
  ++e.ejection_count;
  recompute();
  return true;
}

void EndpointSet::on_response(std::size_t i, TimePoint now, Duration latency,
                              std::optional<double> utilization) noexcept {
  Endpoint& e = eps_[i];
  e.latency.update(now, to_seconds(latency));
  if (utilization) e.utilization.update(now, *utilization);
}

bool EndpointSet::set_healthy(std::size_t i, bool healthy, TimePoint now) noexcept {
  Endpoint& e = eps_[i];
  if (e.healthy == healthy) return false;
  e.healthy = healthy;
  ++e.transitions;
  // Back from unhealthy: cold caches, cold runtime. Ramp up again.
  if (healthy) e.slow_start.restart(now);
  refresh(now);
  return true;
}

void EndpointSet::restart(std::size_t i, TimePoint now) noexcept {
  eps_[i].slow_start.restart(now);
  refresh(now);
}

bool EndpointSet::refresh(TimePoint now) noexcept {
  // The latency of the warm endpoints: what a ramping one is held to.
  double warm = -1;
  for (const Endpoint& e : eps_) {
    if (e.slow_start.active() || !e.healthy || e.ejected || !e.latency.initialized()) continue;
    warm = warm < 0 ? e.latency.value() : std::min(warm, e.latency.value());
  }
  for (Endpoint& e : eps_) {
    if (e.ejected && !e.outlier.ejected(now)) {
      e.ejected = false;
      e.slow_start.restart(now);
    }
    // Readiness-driven slow start: the ramp advances only while the endpoint
    // keeps up, i.e. its latency is within 1.5x that of its warm peers.
    // (Utilization cannot tell: any backend carrying its share of a heavy
    // load is near 100% busy, cold or warm.) Without warm peers to compare
    // with, the ramp is time-based.
    const bool copes = warm < 0 || !e.latency.initialized() || e.latency.value() <= 1.5 * warm;
    e.slow_start.tick(now, copes);
  }
  return recompute();
}

bool EndpointSet::recompute() noexcept {
  bool changed = false;
  double nominal = 0, ready = 0, available = 0;
  bool any_warm = false;
  for (Endpoint& e : eps_) {
    const double base = e.weight_override.value_or(e.weight);
    const bool in = e.healthy && !e.ejected && e.admin == AdminState::Enabled;
    const double w = in ? base * e.slow_start.multiplier() : 0.0;
    nominal += base;
    ready += w;
    if (w > 0) {
      available += base;
      any_warm = any_warm || !e.slow_start.active();
    }
    if (w != e.effective) {
      e.effective = w;
      changed = true;
    }
  }
  scale_ = nominal <= 0 ? 1.0 : (any_warm ? ready : available) / nominal;
  return changed;
}

}  // namespace levee::core
