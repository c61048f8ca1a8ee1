#include "config/to_core.hpp"

namespace levee::config {

namespace {
core::GateMode mode(bool enabled, bool dry_run) {
  if (!enabled) return core::GateMode::Off;
  return dry_run ? core::GateMode::DryRun : core::GateMode::Enforce;
}

core::TenantSource tenant_source(const TenantSource& s, const core::TenantTable& t) {
  core::TenantSource out;
  out.header = s.header;
  out.trusted = s.trusted;
  out.api_key_header = s.api_key_header;
  for (const auto& [key, tenant] : s.api_keys) out.api_keys.emplace(key, t.find(tenant));
  for (const auto& [id, tenant] : s.certificate_tenants) out.certificate_tenants.emplace(id, t.find(tenant));
  out.from_certificate = s.from_certificate;
  return out;
}
}  // namespace

core::TenantTable tenant_table(const Config& c) {
  std::vector<std::string> names;
  for (const auto& [name, q] : c.tenants.quotas) names.push_back(name);
  return core::TenantTable(std::move(names));
}

core::AdmissionConfig admission_config(const Config& c, const ClusterConfig& cl, const core::TenantTable& t) {
  core::AdmissionConfig a;
  a.retry_storm = cl.retry.enabled;
  a.retries = cl.retry.enabled;
  a.attempts.retry_share_threshold = cl.retry.storm_share;
  a.budget.ratio = cl.retry.budget_ratio;
  a.budget.min_per_second = cl.retry.budget_min_per_second;
  a.budget.max_attempts = cl.retry.max_attempts;

  a.throttle_mode = mode(cl.throttle.enabled, cl.throttle.dry_run);
  a.throttle.k = cl.throttle.k;
  a.throttle.window = cl.throttle.window;
  a.throttle.min_requests = cl.throttle.min_requests;
  a.throttle.max_probability = cl.throttle.max_probability;
  a.throttle.recovery_run = cl.throttle.recovery_run;
  a.throttle.recovery_span = cl.throttle.recovery_span;

  a.quota_mode = mode(c.tenants.enforce != QuotaEnforcement::Off && !c.tenants.quotas.empty(), c.tenants.dry_run);
  a.quota_when = c.tenants.enforce == QuotaEnforcement::Always ? core::QuotaWhen::Always : core::QuotaWhen::Overload;
  a.quota.window = c.tenants.window;
  if (!c.tenants.quotas.empty()) {
    a.quotas.assign(t.size(), 0.0);
    for (const auto& [name, q] : c.tenants.quotas) a.quotas[t.find(name)] = q;
    for (const auto& [name, q] : cl.quotas) a.quotas[t.find(name)] = q;
  }

  a.queue_mode = mode(cl.admission.enabled, cl.admission.dry_run);
  a.queue = cl.admission.queue;
  a.limit = cl.admission.limit;
  a.overload.utilization = cl.overload.utilization;
  a.overload.queue_time = cl.overload.queue_time;
  a.overload.hold = cl.overload.hold;
  return a;
}

core::EndpointPolicy endpoint_policy(const ClusterConfig& cl) {
  core::EndpointPolicy p;
  p.health_checks = cl.health_check.enabled;
  p.outlier_detection = cl.outlier.enabled;
  p.outlier = cl.outlier.params;
  p.slow_start = cl.slow_start;
  return p;
}

core::SelfProtectionPolicy self_protection_policy(const SelfProtectionConfig& s) {
  core::SelfProtectionPolicy p;
  p.mode = mode(s.enabled, s.dry_run);
  return p;
}

core::ExecutorLoadConfig executor_load_config(const SelfProtectionConfig& s) {
  core::ExecutorLoadConfig e;
  e.time_constant = s.time_constant;
  e.thresholds = s.thresholds;
  return e;
}

core::ExecutorLoadConfig host_cpu_config(const SelfProtectionConfig& s) {
  core::ExecutorLoadConfig e;
  e.time_constant = s.host_cpu.time_constant;
  e.thresholds = s.host_cpu.thresholds;
  return e;
}

core::Classifier classifier(const Config& c, const ListenerConfig& l, const core::TenantTable& t) {
  std::vector<core::TenantSource> sources;
  sources.push_back(tenant_source(l.tenant ? *l.tenant : c.tenants.source, t));
  std::vector<core::RouteRule> routes;
  for (const auto& r : l.routes) {
    core::RouteRule rule;
    rule.host = r.host;
    rule.prefix = r.prefix;
    rule.criticality = r.criticality.value_or(l.default_criticality);
    rule.timeout = r.timeout;
    rule.untrusted_max = r.untrusted_criticality;
    if (r.tenant) {
      rule.tenant_source = sources.size();
      sources.push_back(tenant_source(*r.tenant, t));
    }
    routes.push_back(std::move(rule));
  }
  core::SignalNames names;
  names.criticality = c.headers.criticality;
  names.timeout_ms = c.headers.timeout_ms;
  names.attempt = c.headers.attempt;
  // Who the listener believes (config/tls.cpp gives the default by address).
  core::TrustPolicy trust;
  trust.signals = l.trust.sources;
  trust.tenant_too = l.trust.set;
  return core::Classifier(std::move(routes), std::move(sources), t, std::move(names), std::move(trust));
}

}  // namespace levee::config
