// A closed loop of levee instances sharing one tenant's quota through a
// modelled Redis, in simulated time: arrivals, the quota gate, costs
// reported when requests complete, and each instance's sync every interval
// (phases spread evenly). Used by the unit tests and by levee_fleet_sim,
// which sweeps interval and fleet size for docs/benchmarks.md. Redis
// answers at once here: its round trip adds to the staleness like interval.
#pragma once

#include <deque>
#include <memory>
#include <string>
#include <vector>

#include "core/fleet_quota.hpp"
#include "core/tenant_quota.hpp"
#include "redis_model.hpp"

namespace levee::test {

struct FleetLoop {
  std::size_t instances = 3;
  core::Duration interval = std::chrono::milliseconds(200);
  double demand = 5.0;  ///< offered, in multiples of the quota, spread evenly over the instances
  core::Duration window = std::chrono::seconds(10);
  core::Duration bucket = std::chrono::seconds(1);
  core::Duration latency = std::chrono::milliseconds(20);  ///< admission to cost report
  double cost = 0.01;   ///< CPU-seconds per request; the quota is 1 CPU-s/s
  core::Duration from = std::chrono::seconds(2), to = std::chrono::seconds(22);
  bool synced = true;   ///< false: no sharing at all (each instance alone)
};

struct FleetLoopResult {
  double share = 0;  ///< admitted CPU-s/s over [from, to) / quota
  double peak = 0;   ///< the largest window sum of admitted CPU once the window is full, / (quota x window)
};

inline FleetLoopResult run_fleet_loop(const FleetLoop& p) {
  using namespace std::chrono_literals;
  using core::Duration;
  using core::TimePoint;
  constexpr std::int64_t kEpochMs = 1'700'000'000'000;
  constexpr core::TenantId kTenant = 1;
  auto wall = [](TimePoint t) {
    return kEpochMs + std::chrono::duration_cast<std::chrono::milliseconds>(t.time_since_epoch()).count();
  };
  struct Node {
    core::TenantQuota gate;
    core::FleetQuota fleet;
    std::vector<core::TenantQuota::PerCriticality> deltas;
    core::TenantQuota::FleetView view;
  };
  RedisModel redis;
  TimePoint now{};
  std::vector<std::unique_ptr<Node>> fleet;
  for (std::size_t i = 0; i < p.instances; ++i) {
    core::FleetQuotaConfig c;
    c.interval = p.interval;
    c.window = p.window;
    c.bucket = p.bucket;
    c.member_ttl = std::max<Duration>(2s, 3 * p.interval);
    c.instance_id = "i" + std::to_string(i);
    core::TenantQuotaConfig q;
    q.window = p.window;
    fleet.push_back(std::make_unique<Node>(Node{core::TenantQuota(q, {1.0, 1.0}),
                                                core::FleetQuota(c, {{"app"}, {"default", "t"}}, now), {}, {}}));
    if (p.synced) {
      fleet.back()->fleet.view(0, fleet.back()->view);
      fleet.back()->gate.set_fleet_view(fleet.back()->view);
    }
  }
  const auto n = static_cast<std::int64_t>(p.instances);
  const Duration gap = core::from_seconds(p.cost * static_cast<double>(p.instances) / p.demand);
  std::vector<TimePoint> next_arrival(p.instances), next_sync(p.instances);
  for (std::size_t i = 0; i < p.instances; ++i) {
    next_arrival[i] = now + gap * static_cast<std::int64_t>(i) / n;
    next_sync[i] = now + p.interval * static_cast<std::int64_t>(i) / n;
  }
  std::deque<std::pair<TimePoint, std::size_t>> completions;
  std::deque<TimePoint> in_window;  // admissions inside the window ending now
  double admitted = 0, peak = 0;
  while (now < core::at(p.to)) {
    while (!completions.empty() && completions.front().first <= now) {
      fleet[completions.front().second]->gate.record(kTenant, core::Criticality::Critical, p.cost, now);
      completions.pop_front();
    }
    for (std::size_t i = 0; i < p.instances; ++i) {
      Node& nd = *fleet[i];
      while (next_arrival[i] <= now) {
        if (nd.gate.admit(kTenant, core::Criticality::Critical, now, true).admitted()) {
          completions.emplace_back(now + p.latency, i);
          in_window.push_back(now);
          if (now >= core::at(p.from)) admitted += p.cost;
        }
        next_arrival[i] += gap;
      }
      if (p.synced && next_sync[i] <= now) {
        for (auto& d : nd.deltas) d.fill(0.0);
        nd.gate.take_recorded(nd.deltas);
        nd.fleet.add_local(0, nd.deltas, wall(now));
        redis.now_ms = wall(now);
        nd.fleet.complete(redis.exec(nd.fleet.prepare(wall(now))), now);
        nd.fleet.view(0, nd.view);
        nd.gate.set_fleet_view(nd.view);
        next_sync[i] += p.interval;
      }
    }
    while (!in_window.empty() && in_window.front() <= now - p.window) in_window.pop_front();
    if (now >= core::at(std::max(p.from, p.window)))
      peak = std::max(peak, static_cast<double>(in_window.size()) * p.cost / core::to_seconds(p.window));
    now += 1ms;
  }
  return {admitted / core::to_seconds(p.to - p.from), peak};
}

/// The fleet's admitted CPU-s/s over [from, to), divided by the quota.
inline double admitted_share(const FleetLoop& p) { return run_fleet_loop(p).share; }

/// docs/algorithms.md: the bound on the peak window sum, / (quota x window),
/// for a Redis that answers at once: 1 + 1/b + D((M-1)(2I+L) + L) / (M Q W),
/// b the local window's buckets (20).
inline double peak_bound(const FleetLoop& p) {
  const double m = static_cast<double>(p.instances);
  const double i = core::to_seconds(p.interval), l = core::to_seconds(p.latency), w = core::to_seconds(p.window);
  return 1.0 + 1.0 / 20 + p.demand * ((m - 1) * (2 * i + l) + l) / (m * w);
}

}  // namespace levee::test
