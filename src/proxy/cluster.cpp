#include "proxy/cluster.hpp"

#include <boost/asio/post.hpp>

namespace levee::proxy {

namespace {

// Wakes collected under a cluster lock, posted after it is released.
thread_local std::vector<core::QueueGate::Wake> t_wakes;

struct Collect {
  void operator()(const core::QueueGate::Wake& w) const { t_wakes.push_back(w); }
};

std::vector<double> weights_of(const config::ClusterConfig& c) {
  std::vector<double> w;
  for (const auto& e : c.endpoints) w.push_back(e.weight);
  return w;
}

}  // namespace

Cluster::Cluster(const config::ClusterConfig& c, std::size_t i, core::AdmissionConfig admission,
                 core::EndpointPolicy policy, TimePoint t0)
    : cfg(c),
      index(i),
      admission_(std::move(admission)),
      eps_(policy, weights_of(c), t0),
      limited_(admission_.config().queue_mode != core::GateMode::Off) {
  for (std::size_t k = 0; k < c.endpoints.size(); ++k) {
    auto ep = std::make_unique<Endpoint>();
    ep->host = c.endpoints[k].host;
    ep->port = c.endpoints[k].port;
    ep->weight = c.endpoints[k].weight;
    ep->label = (ep->host.find(':') != std::string::npos ? "[" + ep->host + "]" : ep->host) + ":" +
                std::to_string(ep->port);
    ep->index = k;
    endpoints.push_back(std::move(ep));
  }
  publish_endpoints(true);
  admission_.set_limit_scale(eps_.limit_scale());
}

void Cluster::post_wakes() {
  for (const auto& w : t_wakes) {
    auto* waiter = reinterpret_cast<QueueWaiter*>(w.cookie);
    boost::asio::post(waiter->executor, [waiter, w] { waiter->on_wake(w); });
  }
  t_wakes.clear();
}

void Cluster::publish_endpoints(bool weights_changed) {
  for (std::size_t i = 0; i < endpoints.size(); ++i) {
    Endpoint& e = *endpoints[i];
    e.effective_weight.store(eps_.effective_weight(i), std::memory_order_relaxed);
    e.healthy.store(eps_.healthy(i), std::memory_order_relaxed);
    e.ejected.store(eps_.ejected(i), std::memory_order_relaxed);
    e.ejections.store(eps_.ejections(i), std::memory_order_relaxed);
    e.health_transitions.store(eps_.health_transitions(i), std::memory_order_relaxed);
    const auto u = eps_.utilization(i);
    e.utilization.store(u ? *u : -1.0, std::memory_order_relaxed);
  }
  if (weights_changed) weights_version.fetch_add(1, std::memory_order_release);
}

core::Verdict Cluster::admit(core::Arrival a, QueueWaiter& waiter) {
  a.cookie = reinterpret_cast<std::uint64_t>(&waiter);
  t_wakes.clear();
  core::Verdict v;
  {
    std::lock_guard lk(mu_);
    v = admission_.admit(a, Collect{});
  }
  post_wakes();
  return v;
}

bool Cluster::cancel(core::QueueGate::Ticket t, TimePoint t_now) {
  std::lock_guard lk(mu_);
  return admission_.cancel(t, t_now);
}

void Cluster::on_attempt(const AttemptResult& r) {
  std::lock_guard lk(mu_);
  admission_.on_attempt({r.now, r.criticality, r.tenant, r.answer, r.cost, r.utilization});
  if (r.latency) eps_.on_response(r.endpoint, r.now, *r.latency, r.utilization);
  const bool ejected = eps_.on_result(r.endpoint, r.now, !r.failure);
  if (ejected || r.utilization) publish_endpoints(ejected);
  if (ejected) admission_.set_limit_scale(eps_.limit_scale());
}

void Cluster::release(TimePoint t, const core::QueueGate::Sample* sample) {
  t_wakes.clear();
  {
    std::lock_guard lk(mu_);
    admission_.release(t, sample, Collect{});
  }
  post_wakes();
}

bool Cluster::try_retry(TimePoint t, std::uint32_t attempt) {
  std::lock_guard lk(mu_);
  return admission_.try_retry(t, attempt);
}

void Cluster::tick(TimePoint t) {
  t_wakes.clear();
  {
    std::lock_guard lk(mu_);
    const bool changed = eps_.refresh(t);
    publish_endpoints(changed);
    admission_.set_limit_scale(eps_.limit_scale());
    admission_.tick(t, Collect{});
  }
  post_wakes();
}

void Cluster::set_endpoint_health(std::size_t i, bool healthy, TimePoint t) {
  std::lock_guard lk(mu_);
  if (!eps_.set_healthy(i, healthy, t)) return;
  publish_endpoints(true);
  admission_.set_limit_scale(eps_.limit_scale());
}

void Cluster::endpoint_moved(std::size_t i, TimePoint t) {
  std::lock_guard lk(mu_);
  eps_.restart(i, t);
  publish_endpoints(true);
  admission_.set_limit_scale(eps_.limit_scale());
}

void Cluster::take_quota_usage(std::vector<core::TenantQuota::PerCriticality>& out) {
  std::lock_guard lk(mu_);
  admission_.quota().take_recorded(out);
}

void Cluster::set_fleet_view(core::TenantQuota::FleetView& v) {
  std::lock_guard lk(mu_);
  admission_.quota().set_fleet_view(v);
}

std::size_t Cluster::available_endpoints() const {
  std::size_t n = 0;
  for (const auto& ep : endpoints)
    n += ep->healthy.load(std::memory_order_relaxed) && !ep->ejected.load(std::memory_order_relaxed);
  return n;
}

Cluster::Snapshot Cluster::snapshot(TimePoint t) {
  Snapshot s;
  std::lock_guard lk(mu_);
  auto& q = admission_.queue();
  s.in_flight = q.in_flight();
  s.depth = q.depth();
  s.limit = limited_ ? q.limit() : 0;
  s.depth_over_quota = q.depth_over_quota();
  for (auto c : core::kAllCriticalities) {
    s.depth_by_crit[core::index(c)] = q.depth(c);
    s.throttle_p[core::index(c)] = admission_.throttle().probability(c, t);
  }
  s.queue_time_s = core::to_seconds(q.queue_time());
  s.drain_rate = q.drain_rate(t);
  s.utilization = admission_.utilization().value_or(-1.0);
  s.codel_overloaded = q.overloaded();
  s.overloaded = admission_.overloaded();
  auto& quota = admission_.quota();
  for (TenantId id = 0; id < quota.tenants(); ++id) {
    s.tenant_usage.push_back(quota.usage_total(id, t));
    s.tenant_quota.push_back(quota.quota(id));
  }
  s.retry_share = admission_.attempts().retry_share(t);
  return s;
}

}  // namespace levee::proxy
