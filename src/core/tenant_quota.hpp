// Gate 3, per-tenant CPU quotas (SRE book: per-customer limits in
// CPU-seconds, enforced only when the service is globally overloaded).
//
// Backends report each request's cost (ORCA request_cost.cpu); levee sums
// it per tenant and criticality over a sliding window (default 10 s) and
// divides by the covered time to get CPU-seconds per second. Quotas may
// add up to more than capacity: they only bite while the cluster is
// overloaded (or always, by config). Quota is consumed from the most
// critical traffic down: a request of criticality c is admitted iff the
// tenant's usage by traffic of criticality >= c is below its quota. So
//  - a tenant under quota is never rejected by this gate, and
//  - within a tenant, less critical traffic is always shed first.
#pragma once

#include <array>
#include <cstdint>
#include <optional>
#include <vector>

#include "core/criticality.hpp"
#include "core/decision.hpp"
#include "core/window.hpp"

namespace levee::core {

/// Index into the configured quota table; 0 is the `default` tenant.
using TenantId = std::uint32_t;
inline constexpr TenantId kDefaultTenant = 0;

struct TenantQuotaConfig {
  Duration window = std::chrono::seconds(10);
  std::size_t buckets = 20;
  Duration min_retry_after = std::chrono::seconds(1);
  bool operator==(const TenantQuotaConfig&) const = default;
};

/// What the other instances of a fleet used (see TenantQuota's fleet
/// section). Outside the class so that it is complete where std::optional
/// asks whether it is default-constructible (clang).
struct TenantFleetView {
  using PerCriticality = std::array<double, kCriticalityCount>;
  /// Others' usage in CPU-s/s by TenantId, summed over criticality >= c
  /// (index c), so the admit path adds one number.
  std::vector<PerCriticality> remote_at_least;
  bool synced = false;         ///< false: enforce quota / fallback_divisor
  TimePoint valid_until{};     ///< past it the view counts as not synced
  double fallback_divisor = 1.0;
};

class TenantQuota {
 public:
  /// quotas[t] in CPU-seconds per second; quotas[0] is the default tenant's.
  TenantQuota(TenantQuotaConfig cfg, std::vector<double> quotas);

  /// Accounts the cost of a completed request.
  void record(TenantId t, Criticality c, double cpu_seconds, TimePoint now) noexcept;

  /// CPU-seconds per second used by the tenant's traffic of criticality >= at_least.
  double usage(TenantId t, Criticality at_least, TimePoint now) noexcept;
  double usage_total(TenantId t, TimePoint now) noexcept {
    return usage(t, Criticality::Sheddable, now);
  }

  /// enforce: the cluster is overloaded (or enforcement is `always`).
  Decision admit(TenantId t, Criticality c, TimePoint now, bool enforce) noexcept;

  double quota(TenantId t) const noexcept { return quotas_[clamp_id(t)]; }
  std::size_t tenants() const noexcept { return quotas_.size(); }

  // --- fleet quotas (issue 16) ------------------------------------------------
  // When levee instances share quotas (src/quota), the sync hands the gate a
  // view of what the *other* instances used; the gate compares local usage +
  // remote usage with the quota. While the fleet view is missing or stale
  // (Redis unreachable, levee just started, the sync stalled) the gate falls
  // back to a conservative local limit, quota / fallback_divisor: neither
  // open nor closed. Without a view ever set, nothing here changes the gate.
  using PerCriticality = TenantFleetView::PerCriticality;
  using FleetView = TenantFleetView;
  /// Installs a view by swapping: `v` gets the previous one back, so the
  /// caller reuses its buffers and nothing is freed under the cluster lock.
  void set_fleet_view(FleetView& v) noexcept;
  /// The view in force, if any (copied into a rebuilt pipeline on reload).
  const std::optional<FleetView>& fleet_view() const noexcept { return fleet_; }
  /// Adds the cost recorded since the last call to out[t][c] (out is resized
  /// to tenants()) and forgets it: the sync's local delta. Only counted
  /// once a fleet view has been set.
  void take_recorded(std::vector<PerCriticality>& out) noexcept;

 private:
  TenantId clamp_id(TenantId t) const noexcept {
    return t < quotas_.size() ? t : kDefaultTenant;
  }
  TenantQuotaConfig cfg_;
  std::vector<double> quotas_;
  std::vector<SlidingWindow<kCriticalityCount>> usage_;
  std::optional<FleetView> fleet_;
  std::vector<PerCriticality> recorded_;  ///< since the last take_recorded (fleet only)
};

}  // namespace levee::core
