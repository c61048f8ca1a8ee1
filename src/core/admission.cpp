#include "core/admission.hpp"

namespace levee::core {

Verdict screen(const SelfProtectionPolicy& p, const LoadLevels& levels, Criticality c) noexcept {
  Verdict v;
  if (p.mode == GateMode::Off) return v;
  Reason r = Reason::None;
  if (levels.executor_over & bit(c)) r = Reason::ExecutorOverload;
  else if (levels.host_over & bit(c)) r = Reason::HostCpu;
  if (r == Reason::None) return v;
  if (p.mode == GateMode::DryRun) {
    v.dry_run = r;
    return v;
  }
  v.kind = Verdict::Kind::Rejected;
  v.gate = Gate::SelfProtection;
  v.decision = Decision::reject(r, p.retry_after);
  return v;
}

Admission::Admission(AdmissionConfig cfg)
    : cfg_(std::move(cfg)),
      gate_(cfg_.queue, cfg_.limit),
      throttle_(cfg_.throttle),
      quota_(cfg_.quota, cfg_.quotas),
      budget_(cfg_.budget),
      attempts_(cfg_.attempts) {}

void Admission::on_attempt(const AttemptReport& r) noexcept {
  // Every attempt at the backend is a throttle "request"; it was accepted
  // unless refused for overload or unanswered.
  if (cfg_.throttle_mode != GateMode::Off)
    throttle_.on_response(r.criticality, r.now, r.answer == Answer::Accepted);
  if (r.cost) quota_.record(r.tenant, r.criticality, *r.cost, r.now);
  if (r.utilization) {
    utilization_.update(r.now, *r.utilization);
    have_utilization_ = true;
  }
}

bool same_shape(const AdmissionConfig& a, const AdmissionConfig& b) noexcept {
  AdmissionConfig x = a;
  x.throttle_mode = b.throttle_mode;
  x.quota_mode = b.quota_mode;
  x.queue_mode = b.queue_mode;
  return x == b;
}

bool Admission::signalled() const noexcept {
  if (gate_.overloaded()) return true;
  const auto& o = cfg_.overload;
  if (o.queue_time > Duration::zero() && gate_.queue_time() > o.queue_time) return true;
  if (o.utilization > 0 && have_utilization_ && utilization_.value() > o.utilization) return true;
  return false;
}

}  // namespace levee::core
