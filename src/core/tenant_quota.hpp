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

#include <cstdint>
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

 private:
  TenantId clamp_id(TenantId t) const noexcept {
    return t < quotas_.size() ? t : kDefaultTenant;
  }
  TenantQuotaConfig cfg_;
  std::vector<double> quotas_;
  std::vector<SlidingWindow<kCriticalityCount>> usage_;
};

}  // namespace levee::core
