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
  if (fleet_) recorded_[clamp_id(t)][index(c)] += cpu_seconds;
}

double TenantQuota::usage(TenantId t, Criticality at_least, TimePoint now) noexcept {
  auto& w = usage_[clamp_id(t)];
  double sum = w.sum(now, index(at_least), kCriticalityCount - 1);
  return sum / to_seconds(w.span(now));
}

Decision TenantQuota::admit(TenantId t, Criticality c, TimePoint now, bool enforce) noexcept {
  if (!enforce) return Decision::admit();
  t = clamp_id(t);
  double q = quotas_[t];
  double remote = 0.0;  // what the rest of the fleet used (CPU-s/s)
  if (fleet_) {
    if (fleet_->synced && now < fleet_->valid_until && t < fleet_->remote_at_least.size())
      remote = fleet_->remote_at_least[t][index(c)];
    else
      q /= fleet_->fallback_divisor;
  }
  if (usage(t, c, now) + remote < q) return Decision::admit();
  // Retry once enough of the window has expired for this criticality's
  // usage to fall under quota (assuming no new cost arrives meanwhile, and
  // the rest of the fleet stays where it is).
  auto& w = usage_[t];
  double allowance = std::max(0.0, q - remote) * to_seconds(w.span(now));
  Duration wait = w.time_until_below(now, index(c), kCriticalityCount - 1, allowance);
  return Decision::reject(Reason::TenantQuota, std::max(wait, cfg_.min_retry_after));
}

void TenantQuota::set_fleet_view(FleetView& v) noexcept {
  if (!fleet_) {
    fleet_.emplace();
    recorded_.assign(quotas_.size(), PerCriticality{});  // once, when the fleet is enabled
  }
  if (!(v.fallback_divisor >= 1.0)) v.fallback_divisor = 1.0;  // also NaN
  std::swap(*fleet_, v);
}

void TenantQuota::take_recorded(std::vector<PerCriticality>& out) noexcept {
  if (out.size() != quotas_.size()) out.assign(quotas_.size(), PerCriticality{});
  if (!fleet_) return;
  for (std::size_t t = 0; t < quotas_.size(); ++t) {
    for (std::size_t c = 0; c < kCriticalityCount; ++c) out[t][c] += recorded_[t][c];
    recorded_[t].fill(0.0);
  }
}

}  // namespace levee::core
