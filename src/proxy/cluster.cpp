#include "proxy/cluster.hpp"

#include <boost/asio/ip/address.hpp>
#include <boost/asio/post.hpp>

#include <algorithm>

namespace levee::proxy {

namespace {

// Wakes collected under a cluster lock, posted after it is released.
thread_local std::vector<core::QueueGate::Wake> t_wakes;

struct Collect {
  void operator()(const core::QueueGate::Wake& w) const { t_wakes.push_back(w); }
};

std::vector<double> weights_of(const std::vector<EndpointSpec>& specs) {
  std::vector<double> w;
  for (const auto& e : specs) w.push_back(e.weight);
  return w;
}

}  // namespace

Endpoint::Endpoint(const EndpointSpec& s, std::shared_ptr<std::atomic<std::uint32_t>> in_flight)
    : host(s.host),
      port(s.port),
      weight(s.weight),
      label(s.label),
      authority(s.authority),
      outstanding_(in_flight ? std::move(in_flight) : std::make_shared<std::atomic<std::uint32_t>>(0)),
      outstanding(*outstanding_) {
  boost::system::error_code ec;
  const auto a = boost::asio::ip::make_address(s.address, ec);
  if (!ec) addrs_.push_back(tcp::endpoint(a, s.port));
  base_weight.store(s.weight, std::memory_order_relaxed);
}

Cluster::Cluster(const config::ClusterConfig& c, std::size_t i, core::AdmissionConfig admission,
                 core::EndpointPolicy policy, std::vector<EndpointSpec> specs, std::size_t workers, TimePoint t0,
                 Cluster* previous)
    : cfg(c),
      index(i),
      views(std::max<std::size_t>(1, workers)),
      core_(previous && core::same_shape(previous->admission_.config(), admission)
                ? previous->core_
                : std::make_shared<ClusterCore>(admission)),
      admission_(core_->admission),
      eps_(policy, weights_of(specs), t0),
      limited_(admission.queue_mode != core::GateMode::Off) {
  shared_core_ = previous && previous->core_ == core_;
  std::unique_lock<std::mutex> lk;
  if (previous) lk = std::unique_lock(previous->core_->mu);
  if (shared_core_) {
    admission_.set_modes(admission.throttle_mode, admission.quota_mode, admission.queue_mode);
  } else if (previous) {
    // A new pipeline: what the fleet last said about the other instances
    // still holds (the quota sync refreshes it within an interval).
    const auto& view = previous->admission_.quota().fleet_view();
    if (view && previous->admission_.config().quotas.size() == admission.quotas.size()) {
      auto v = *view;
      admission_.quota().set_fleet_view(v);
    }
  }
  for (std::size_t k = 0; k < specs.size(); ++k) {
    const std::size_t old = previous ? previous->find_endpoint(specs[k].label) : core::kNoEndpoint;
    auto ep = std::make_unique<Endpoint>(
        specs[k], old != core::kNoEndpoint ? previous->endpoints[old]->outstanding_counter() : nullptr);
    ep->index = k;
    if (old != core::kNoEndpoint) {
      eps_.adopt(k, previous->eps_.member(old));
      ep->adopted = true;
    }
    endpoints.push_back(std::move(ep));
  }
  publish_endpoints(true);
  // (Under the shared lock, when shared: the successor takes over the scale.)
  admission_.set_limit_scale(eps_.limit_scale());
}

std::size_t Cluster::find_endpoint(std::string_view label) const noexcept {
  for (std::size_t k = 0; k < endpoints.size(); ++k)
    if (endpoints[k]->label == label) return k;
  return core::kNoEndpoint;
}

void Cluster::rescale() {
  if (!retired_.load(std::memory_order_relaxed)) admission_.set_limit_scale(eps_.limit_scale());
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
    e.base_weight.store(eps_.base_weight(i), std::memory_order_relaxed);
    e.admin.store(static_cast<std::uint8_t>(eps_.admin(i)), std::memory_order_relaxed);
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
    std::lock_guard lk(core_->mu);
    v = admission_.admit(a, Collect{});
  }
  post_wakes();
  return v;
}

bool Cluster::cancel(core::QueueGate::Ticket t, TimePoint t_now) {
  std::lock_guard lk(core_->mu);
  return admission_.cancel(t, t_now);
}

void Cluster::on_attempt(const AttemptResult& r) {
  std::lock_guard lk(core_->mu);
  admission_.on_attempt({r.now, r.criticality, r.tenant, r.answer, r.cost, r.utilization});
  if (r.latency) eps_.on_response(r.endpoint, r.now, *r.latency, r.utilization);
  const bool ejected = eps_.on_result(r.endpoint, r.now, !r.failure);
  if (ejected || r.utilization) publish_endpoints(ejected);
  if (ejected) rescale();
}

void Cluster::release(TimePoint t, const core::QueueGate::Sample* sample, std::uint32_t tag) {
  t_wakes.clear();
  {
    std::lock_guard lk(core_->mu);
    admission_.release(t, sample, Collect{}, tag);
  }
  post_wakes();
}

bool Cluster::try_retry(TimePoint t, std::uint32_t attempt) {
  std::lock_guard lk(core_->mu);
  return admission_.try_retry(t, attempt);
}

void Cluster::tick(TimePoint t) {
  t_wakes.clear();
  {
    std::lock_guard lk(core_->mu);
    const bool changed = eps_.refresh(t);
    publish_endpoints(changed);
    rescale();
    admission_.tick(t, Collect{});
  }
  post_wakes();
}

void Cluster::set_endpoint_health(std::size_t i, bool healthy, TimePoint t) {
  std::lock_guard lk(core_->mu);
  if (!eps_.set_healthy(i, healthy, t)) return;
  publish_endpoints(true);
  rescale();
}

bool Cluster::set_endpoint_admin(std::size_t i, core::AdminState st, TimePoint t) {
  std::lock_guard lk(core_->mu);
  if (!eps_.set_admin(i, st, t)) return false;
  publish_endpoints(true);
  rescale();
  return true;
}

void Cluster::set_endpoint_weight(std::size_t i, std::optional<double> w) {
  std::lock_guard lk(core_->mu);
  eps_.set_weight_override(i, w);
  publish_endpoints(true);
  rescale();
}

std::array<core::GateMode, 3> Cluster::modes() {
  std::lock_guard lk(core_->mu);
  const auto& c = admission_.config();
  return {c.throttle_mode, c.quota_mode, c.queue_mode};
}

void Cluster::take_quota_usage(std::vector<core::TenantQuota::PerCriticality>& out) {
  std::lock_guard lk(core_->mu);
  admission_.quota().take_recorded(out);
}

void Cluster::set_fleet_view(core::TenantQuota::FleetView& v) {
  std::lock_guard lk(core_->mu);
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
  std::lock_guard lk(core_->mu);
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
  s.overloaded = admission_.overloaded(t);
  auto& quota = admission_.quota();
  for (TenantId id = 0; id < quota.tenants(); ++id) {
    s.tenant_usage.push_back(quota.usage_total(id, t));
    // usage() counts a criticality and everything above it; one level alone
    // is the difference between neighbours.
    std::array<double, core::kCriticalityCount> at{};
    double above = 0;
    for (auto c : core::kAllCriticalities) {  // most critical first
      const double at_least = quota.usage(id, c, t);
      at[core::index(c)] = std::max(0.0, at_least - above);
      above = at_least;
    }
    s.tenant_usage_by_crit.push_back(at);
    s.tenant_quota.push_back(quota.quota(id));
  }
  s.retry_share = admission_.attempts().retry_share(t);
  s.retry_budget = admission_.budget().available(t);
  return s;
}

}  // namespace levee::proxy
