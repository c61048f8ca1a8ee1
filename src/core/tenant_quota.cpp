#include "core/tenant_quota.hpp"

#include <algorithm>

namespace levee::core {

TenantQuota::TenantQuota(TenantQuotaConfig cfg, std::vector<double> quotas)
    : cfg_(cfg), quotas_(std::move(quotas)) {
  if (quotas_.empty()) quotas_.push_back(0.0);
  usage_.reserve(quotas_.size());
  for (std::size_t i = 0; i < quotas_.size(); ++i) usage_.emplace_back(cfg_.window, cfg_.buckets);
}

void TenantQuota::record(TenantId t, Criticality c, double cpu_seconds, TimePoint now) noexcept {
  if (!(cpu_seconds > 0)) return;  // also drops NaN
  usage_[clamp_id(t)].add(now, index(c), cpu_seconds);
}

double TenantQuota::usage(TenantId t, Criticality at_least, TimePoint now) noexcept {
  auto& w = usage_[clamp_id(t)];
  double sum = w.sum(now, index(at_least), kCriticalityCount - 1);
  return sum / to_seconds(w.span(now));
}

Decision TenantQuota::admit(TenantId t, Criticality c, TimePoint now, bool enforce) noexcept {
  if (!enforce) return Decision::admit();
  t = clamp_id(t);
  const double q = quotas_[t];
  if (usage(t, c, now) < q) return Decision::admit();
  // Retry once enough of the window has expired for this criticality's
  // usage to fall under quota (assuming no new cost arrives meanwhile).
  auto& w = usage_[t];
  double allowance = q * to_seconds(w.span(now));
  Duration wait = w.time_until_below(now, index(c), kCriticalityCount - 1, allowance);
  return Decision::reject(Reason::TenantQuota, std::max(wait, cfg_.min_retry_after));
}

}  // namespace levee::core
