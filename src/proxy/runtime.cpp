#include "proxy/runtime.hpp"

#include <boost/asio/post.hpp>

#include <algorithm>

#include "core/text.hpp"
#include "proxy/clock.hpp"

namespace levee::proxy {

namespace {

// Wakes collected under a cluster lock, posted after it is released.
thread_local std::vector<core::QueueGate::Wake> t_wakes;

core::QueueGate make_gate(const config::ClusterConfig& c) {
  return core::QueueGate(c.admission.queue, c.admission.limit);
}

core::ThrottleConfig throttle_cfg(const config::ClusterConfig& c) {
  core::ThrottleConfig t;
  t.k = c.throttle.k;
  t.window = c.throttle.window;
  t.min_requests = c.throttle.min_requests;
  return t;
}

core::RetryBudgetConfig budget_cfg(const config::ClusterConfig& c) {
  core::RetryBudgetConfig b;
  b.ratio = c.retry.budget_ratio;
  b.min_per_second = c.retry.budget_min_per_second;
  b.max_attempts = c.retry.max_attempts;
  return b;
}

core::AttemptHistogramConfig attempts_cfg(const config::ClusterConfig& c) {
  core::AttemptHistogramConfig a;
  a.retry_share_threshold = c.retry.storm_share;
  return a;
}

}  // namespace

Cluster::Cluster(const Runtime& rt, const config::ClusterConfig& c, std::size_t i)
    : cfg(c),
      index(i),
      rt_(rt),
      gate_(make_gate(c)),
      throttle_(throttle_cfg(c)),
      quota_(core::TenantQuotaConfig{rt.cfg->tenants.window, 20, std::chrono::seconds(1)}, rt.quotas_for(c)),
      budget_(budget_cfg(c)),
      attempts_(attempts_cfg(c)) {
  const TimePoint t0 = now();
  for (std::size_t k = 0; k < c.endpoints.size(); ++k) {
    auto ep = std::make_unique<Endpoint>();
    ep->host = c.endpoints[k].host;
    ep->port = c.endpoints[k].port;
    ep->weight = c.endpoints[k].weight;
    ep->label = (ep->host.find(':') != std::string::npos ? "[" + ep->host + "]" : ep->host) + ":" +
                std::to_string(ep->port);
    ep->index = k;
    ep->outlier = core::OutlierState(c.outlier.params);
    ep->slow_start = core::SlowStart(c.slow_start);
    // Endpoints join at start-up too: they ramp like any other arrival.
    ep->slow_start.restart(t0);
    // With active checks an endpoint is out until its first check passes.
    ep->healthy.store(!c.health_check.enabled);
    ep->effective_weight.store(c.health_check.enabled ? 0.0 : ep->weight * ep->slow_start.multiplier());
    endpoints.push_back(std::move(ep));
  }
}

void Cluster::post_wakes() {
  for (const auto& w : t_wakes) {
    auto* waiter = reinterpret_cast<Waiter*>(w.cookie);
    boost::asio::post(waiter->executor, [waiter, w] { waiter->on_wake(w); });
  }
  t_wakes.clear();
}

bool Cluster::overloaded_locked(TimePoint t) {
  (void)t;
  if (gate_.overloaded()) return true;
  if (cfg.overload.queue_time > Duration::zero() && gate_.queue_time() > cfg.overload.queue_time) return true;
  if (cfg.overload.utilization > 0 && have_utilization_ && utilization_.value() > cfg.overload.utilization)
    return true;
  return false;
}

AdmitResult Cluster::admit(const AdmitInput& in) {
  AdmitResult r{core::QueueGate::Outcome::Granted, Decision::admit()};
  t_wakes.clear();
  auto sink = [](const core::QueueGate::Wake& w) { t_wakes.push_back(w); };
  {
    std::lock_guard lk(mu_);
    budget_.on_request(in.now);
    attempts_.record(in.now, in.attempt);
    // Retries arriving in numbers mean the layers below are failing: say
    // "don't retry" so that only the layer above the failure retries.
    if (cfg.retry.enabled) {
      auto d = attempts_.admit(in.now, in.attempt);
      if (!d.admitted()) {
        r.outcome = core::QueueGate::Outcome::Rejected;
        r.decision = d;
        return r;
      }
    }
    if (cfg.throttle.enabled) {
      auto d = throttle_.admit(in.crit, in.now, in.u);
      if (!d.admitted()) {
        if (cfg.throttle.dry_run) {
          r.dry_run = d.reason;
        } else {
          r.outcome = core::QueueGate::Outcome::Rejected;
          r.decision = d;
          return r;
        }
      }
    }
    r.overloaded = overloaded_locked(in.now);
    const auto& tc = rt_.cfg->tenants;
    // Over quota while overloaded: the request is not refused outright but
    // goes to the queue's lowest lane, behind every in-quota request. It is
    // served from capacity nobody in quota uses, and refused (429) when
    // there is none: fair, and no capacity is wasted.
    bool over_quota = false;
    Decision quota_decision;
    if (rt_.quotas_configured() && tc.enforce != config::QuotaEnforcement::Off) {
      bool enforce = tc.enforce == config::QuotaEnforcement::Always || r.overloaded;
      auto d = quota_.admit(in.tenant, in.crit, in.now, enforce);
      if (!d.admitted()) {
        if (tc.dry_run) {
          if (r.dry_run == core::Reason::None) r.dry_run = d.reason;
        } else if (!cfg.admission.enabled) {
          r.outcome = core::QueueGate::Outcome::Rejected;  // no queue to demote into
          r.decision = d;
          return r;
        } else {
          over_quota = true;
          quota_decision = d;
        }
      }
    }
    if (!cfg.admission.enabled) {
      r.ticket = core::QueueGate::kNoTicket;
      r.inflight_at_start = 0;
      return r;  // Granted without a permit
    }
    auto a = gate_.arrive(in.now, in.crit, in.deadline, reinterpret_cast<std::uint64_t>(in.waiter), sink,
                          over_quota);
    r.outcome = a.outcome;
    r.decision = a.decision;
    r.ticket = a.ticket;
    if (over_quota && a.outcome == core::QueueGate::Outcome::Rejected) {
      // The quota is why there was no room: say so (429, its Retry-After).
      r.decision = quota_decision;
      r.decision.retry_after = std::max(quota_decision.retry_after, a.decision.retry_after);
    }
    if (cfg.admission.dry_run && a.outcome != core::QueueGate::Outcome::Granted) {
      // Count what the gate would have done, then let the request through
      // holding a permit above the limit, so in-flight stays truthful.
      if (a.outcome == core::QueueGate::Outcome::Queued) gate_.cancel(a.ticket, in.now);
      if (r.dry_run == core::Reason::None)
        r.dry_run = a.outcome == core::QueueGate::Outcome::Queued ? core::Reason::QueueWait : a.decision.reason;
      gate_.force_acquire();
      r.outcome = core::QueueGate::Outcome::Granted;
      r.decision = Decision::admit();
      r.ticket = core::QueueGate::kNoTicket;
    }
    r.inflight_at_start = gate_.in_flight();
  }
  post_wakes();
  return r;
}

bool Cluster::try_retry(TimePoint t, std::uint32_t attempt) {
  if (!cfg.retry.enabled) return false;
  std::lock_guard lk(mu_);
  return budget_.try_retry(t, attempt);
}

bool Cluster::cancel(core::QueueGate::Ticket t, TimePoint t_now) {
  std::lock_guard lk(mu_);
  return gate_.cancel(t, t_now);
}

void Cluster::release_permit(std::uint64_t) noexcept {
  t_wakes.clear();
  auto sink = [](const core::QueueGate::Wake& w) { t_wakes.push_back(w); };
  {
    std::lock_guard lk(mu_);
    gate_.release(now(), nullptr, sink);
  }
  post_wakes();
}

void Cluster::complete(const Completion& c) {
  t_wakes.clear();
  auto sink = [](const core::QueueGate::Wake& w) { t_wakes.push_back(w); };
  bool weights_changed = false;
  {
    std::lock_guard lk(mu_);
    if (cfg.admission.enabled && c.release) {
      core::QueueGate::Sample s{c.rtt, c.inflight_at_start, c.overload_answer};
      gate_.release(c.now, c.reached_backend ? &s : nullptr, sink);
    }
    // Every attempt at the backend is a throttle "request"; it was accepted
    // unless refused for overload or unanswered.
    throttle_.on_response(c.crit, c.now, c.reached_backend && !c.overload_answer);
    if (c.cost) quota_.record(c.tenant, c.crit, *c.cost, c.now);
    Endpoint& ep = *endpoints[c.endpoint];
    if (c.reached_backend) ep.latency_avg.update(c.now, core::to_seconds(c.rtt));
    if (c.utilization) {
      ep.util_avg.update(c.now, *c.utilization);
      ep.utilization.store(ep.util_avg.value(), std::memory_order_relaxed);
      utilization_.update(c.now, *c.utilization);
      have_utilization_ = true;
    }
    if (cfg.outlier.enabled) {
      std::size_t ejected = 0;
      for (auto& e : endpoints) ejected += e->ejected.load(std::memory_order_relaxed);
      bool may = (ejected + 1) * 100.0 <= cfg.outlier.params.max_ejected_pct * endpoints.size();
      if (ep.outlier.on_result(c.now, !c.failure, may)) {
        ep.ejected.store(true);
        ep.effective_weight.store(0.0);
        ep.ejections.fetch_add(1, std::memory_order_relaxed);
        weights_changed = true;
      }
    }
  }
  if (weights_changed) weights_version.fetch_add(1, std::memory_order_release);
  post_wakes();
}

void Cluster::endpoint_result(std::size_t ep_index, TimePoint t, bool success) {
  if (!cfg.outlier.enabled) return;
  bool changed = false;
  {
    std::lock_guard lk(mu_);
    std::size_t ejected = 0;
    for (auto& e : endpoints) ejected += e->ejected.load(std::memory_order_relaxed);
    bool may = (ejected + 1) * 100.0 <= cfg.outlier.params.max_ejected_pct * endpoints.size();
    Endpoint& ep = *endpoints[ep_index];
    if (ep.outlier.on_result(t, success, may)) {
      ep.ejected.store(true);
      ep.effective_weight.store(0.0);
      ep.ejections.fetch_add(1, std::memory_order_relaxed);
      changed = true;
    }
  }
  if (changed) weights_version.fetch_add(1, std::memory_order_release);
}

void Cluster::tick(TimePoint t) {
  t_wakes.clear();
  auto sink = [](const core::QueueGate::Wake& w) { t_wakes.push_back(w); };
  {
    std::lock_guard lk(mu_);
    gate_.pump(t, sink);
  }
  post_wakes();
}

void Cluster::set_endpoint_health(std::size_t i, bool healthy, TimePoint t) {
  {
    std::lock_guard lk(mu_);
    Endpoint& ep = *endpoints[i];
    if (ep.healthy.load() == healthy) return;
    ep.healthy.store(healthy);
    ep.health_transitions.fetch_add(1, std::memory_order_relaxed);
    // Back from unhealthy: cold caches, cold runtime. Ramp up again.
    if (healthy) ep.slow_start.restart(t);
  }
  refresh_weights(t);
}

void Cluster::endpoint_moved(std::size_t i, TimePoint t) {
  {
    std::lock_guard lk(mu_);
    endpoints[i]->slow_start.restart(t);
  }
  refresh_weights(t);
}

void Cluster::refresh_weights(TimePoint t) {
  bool changed = false;
  {
    std::lock_guard lk(mu_);
    double nominal = 0, ready = 0;
    // The latency of the warm endpoints: what a ramping one is held to.
    double warm = -1;
    for (auto& ep : endpoints) {
      if (ep->slow_start.active() || !ep->healthy.load() || ep->ejected.load() || !ep->latency_avg.initialized())
        continue;
      double l = ep->latency_avg.value();
      warm = warm < 0 ? l : std::min(warm, l);
    }
    // Whether some available endpoint has finished its ramp. While none has
    // (levee's own start-up, or a whole fleet returning at once), the ramp
    // cannot shift load anywhere: the weights are equal, and scaling the
    // cluster's limit down with them would shed the traffic of backends
    // nothing says are cold. The limit then follows health alone.
    bool any_warm = false;
    double available = 0;
    for (auto& ep : endpoints) {
      if (ep->ejected.load() && !ep->outlier.ejected(t)) {
        ep->ejected.store(false);
        ep->slow_start.restart(t);
      }
      // Readiness-driven slow start: the ramp advances only while the
      // endpoint keeps up, i.e. its latency is within 1.5x that of its warm
      // peers. (Utilization cannot tell: any backend carrying its share of
      // a heavy load is near 100% busy, cold or warm.) Without warm peers
      // to compare with, the ramp is time-based.
      bool copes = warm < 0 || !ep->latency_avg.initialized() || ep->latency_avg.value() <= 1.5 * warm;
      ep->slow_start.tick(t, copes);
      double w = 0.0;
      if (ep->healthy.load() && !ep->ejected.load()) w = ep->weight * ep->slow_start.multiplier();
      nominal += ep->weight;
      ready += w;
      if (w > 0) {
        available += ep->weight;
        any_warm = any_warm || !ep->slow_start.active();
      }
      if (w != ep->effective_weight.load()) {
        ep->effective_weight.store(w);
        changed = true;
      }
    }
    gate_.set_limit_scale(nominal <= 0 ? 1.0 : (any_warm ? ready : available) / nominal);
  }
  if (changed) weights_version.fetch_add(1, std::memory_order_release);
}

void Cluster::take_quota_usage(std::vector<core::TenantQuota::PerCriticality>& out) {
  std::lock_guard lk(mu_);
  quota_.take_recorded(out);
}

void Cluster::set_fleet_view(core::TenantQuota::FleetView& v) {
  std::lock_guard lk(mu_);
  quota_.set_fleet_view(v);
}

std::size_t Cluster::healthy_endpoints() const {
  std::size_t n = 0;
  for (auto& ep : endpoints) n += ep->healthy.load() && !ep->ejected.load();
  return n;
}

Cluster::Snapshot Cluster::snapshot(TimePoint t) {
  Snapshot s{};
  std::lock_guard lk(mu_);
  s.in_flight = gate_.in_flight();
  s.depth = gate_.depth();
  s.limit = cfg.admission.enabled ? gate_.limit() : 0;
  s.depth_over_quota = gate_.depth_over_quota();
  for (auto c : core::kAllCriticalities) {
    s.depth_by_crit[core::index(c)] = gate_.depth(c);
    s.throttle_p[core::index(c)] = throttle_.probability(c, t);
  }
  s.queue_time_s = core::to_seconds(gate_.queue_time());
  s.drain_rate = gate_.drain_rate(t);
  s.utilization = have_utilization_ ? utilization_.value() : -1.0;
  s.codel_overloaded = gate_.overloaded();
  s.overloaded = overloaded_locked(t);
  for (TenantId id = 0; id < quota_.tenants(); ++id) {
    s.tenant_usage.push_back(quota_.usage_total(id, t));
    s.tenant_quota.push_back(quota_.quota(id));
  }
  s.retry_share = attempts_.retry_share(t);
  return s;
}

// ---------------------------------------------------------------------------

namespace {
std::string_view strip_port(std::string_view host) noexcept {
  if (!host.empty() && host.front() == '[') {
    auto close = host.find(']');
    return close == std::string_view::npos ? host : host.substr(0, close + 1);
  }
  auto colon = host.rfind(':');
  return colon == std::string_view::npos ? host : host.substr(0, colon);
}
}  // namespace

bool Listener::take_accept_token(TimePoint t) {
  if (cfg.accept_rate <= 0) return true;
  std::lock_guard lk(rate_mu_);
  const double burst = std::max(1.0, cfg.accept_rate);  // up to one second's worth at once
  if (tokens_ < 0) {
    tokens_ = burst;
    last_refill_ = t;
  }
  tokens_ = std::min(burst, tokens_ + core::to_seconds(t - last_refill_) * cfg.accept_rate);
  last_refill_ = t;
  if (tokens_ < 1.0) return false;
  tokens_ -= 1.0;
  return true;
}

bool Listener::source_enter(const std::array<std::uint8_t, 16>& addr) {
  if (cfg.max_connections_per_source == 0) return true;
  std::lock_guard lk(src_mu_);
  auto& n = per_source_[addr];
  if (n >= cfg.max_connections_per_source) {
    if (n == 0) per_source_.erase(addr);
    return false;
  }
  ++n;
  return true;
}

void Listener::source_leave(const std::array<std::uint8_t, 16>& addr) {
  if (cfg.max_connections_per_source == 0) return;
  std::lock_guard lk(src_mu_);
  auto it = per_source_.find(addr);
  if (it == per_source_.end()) return;
  if (--it->second == 0) per_source_.erase(it);
}

bool Listener::uses_fuse() const noexcept {
  return cfg.mode == config::ListenerConfig::Mode::Batch ||
         std::any_of(routes.begin(), routes.end(), [](const Route& r) { return r.fuse; });
}

const Route* Listener::match(std::string_view host, std::string_view path) const noexcept {
  host = strip_port(core::trim(host));
  for (const auto& r : routes) {
    if (!r.host.empty() && r.host != "*") {
      if (r.host.size() > 2 && r.host[0] == '*' && r.host[1] == '.') {
        std::string_view suffix = std::string_view(r.host).substr(1);  // ".example.com"
        if (host.size() <= suffix.size() ||
            !core::iequals(host.substr(host.size() - suffix.size()), suffix))
          continue;
      } else if (!core::iequals(host, r.host)) {
        continue;
      }
    }
    if (path.compare(0, r.prefix.size(), r.prefix) != 0) continue;
    return &r;
  }
  return nullptr;
}

ProxyMetrics::ProxyMetrics(const config::Config&, const std::vector<std::string>& tenants,
                           std::size_t shards)
    : requests("levee_requests_total", "Requests answered, by route and status class",
               {{"route", {}}, {"code", {"1xx", "2xx", "3xx", "4xx", "5xx"}}}, shards),
      admitted("levee_admitted_total", "Requests admitted by every gate",
               {{"cluster", {}}, {"criticality", {}}, {"tenant", tenants}}, shards),
      rejected("levee_rejected_total", "Requests shed by an admission gate",
               {{"cluster", {}}, {"reason", {}}, {"criticality", {}}, {"tenant", tenants}}, shards),
      dry_run("levee_dry_run_rejections_total",
              "Requests a dry-run gate would have rejected (they were served)",
              {{"cluster", {}}, {"reason", {}}, {"criticality", {}}}, shards),
      local_replies("levee_local_replies_total", "Error replies levee made itself",
                    {{"listener", {}}, {"reason", {}}}, shards),
      connections("levee_downstream_connections_total", "Downstream connections accepted",
                  {{"listener", {}}}, shards),
      refused("levee_downstream_refused_total", "Downstream connections refused",
              {{"listener", {}}, {"cause", {"max_connections", "per_source", "accept_rate", "draining"}}}, shards),
      upstream_requests("levee_upstream_requests_total", "Responses from upstream endpoints",
                        {{std::vector<std::string>{"cluster", "endpoint"}, {}},
                         {"code", {"1xx", "2xx", "3xx", "4xx", "5xx"}}}, shards),
      upstream_errors("levee_upstream_errors_total", "Upstream attempts that got no response",
                      {{std::vector<std::string>{"cluster", "endpoint"}, {}},
                       {"kind", {"connect", "reset", "timeout", "protocol"}}}, shards),
      upstream_connects("levee_upstream_connections_total", "Upstream connections opened",
                        {{"cluster", {}}}, shards),
      load_report_errors("levee_load_report_errors_total",
                         "endpoint-load-metrics values that could not be parsed (ignored)",
                         {{"cluster", {}}}, shards),
      bytes("levee_bytes_total", "Body and header bytes relayed",
            {{"direction", {"from_downstream", "to_downstream"}}}, shards),
      upstream_latency("levee_upstream_latency_seconds", "Time from sending upstream to the response header",
                       {{"cluster", {}}}, metrics::latency_buckets(), shards),
      request_duration("levee_request_duration_seconds", "Time from request header to the end of the answer",
                       {{"cluster", {}}, {"outcome", {"served", "rejected"}}}, metrics::latency_buckets(), shards),
      queue_time("levee_queue_time_seconds", "Time admitted requests waited in a cluster queue",
                 {{"cluster", {}}}, metrics::latency_buckets(), shards),
      health_checks("levee_health_checks_total", "Active health checks by result", {}, shards),
      health_check_latency("levee_health_check_latency_seconds", "Active health check round trips",
                           {{"cluster", {}}}, metrics::latency_buckets(), shards) {}

namespace {

std::vector<std::string> names_of_clusters(const config::Config& c) {
  std::vector<std::string> v;
  for (auto& cl : c.clusters) v.push_back(cl.name);
  return v;
}
std::vector<std::string> names_of_listeners(const config::Config& c) {
  std::vector<std::string> v;
  for (auto& l : c.listeners) v.push_back(l.name);
  return v;
}
std::vector<std::string> reason_names() {
  std::vector<std::string> v;
  for (std::size_t i = 0; i < core::kReasonCount; ++i)
    v.emplace_back(core::to_string(static_cast<core::Reason>(i)));
  return v;
}
std::vector<std::string> criticality_names() {
  std::vector<std::string> v;
  for (std::size_t i = 0; i < core::kCriticalityCount; ++i)
    v.emplace_back(core::to_string(core::criticality_from_index(i)));
  return v;
}

}  // namespace

Runtime::Runtime(std::shared_ptr<const config::Config> c, std::size_t w) : cfg(std::move(c)), workers(w) {
  // Tenants: `default` is TenantId 0; the rest in configuration order.
  tenant_names.push_back("default");
  for (auto& [name, q] : cfg->tenants.quotas)
    if (name != "default") tenant_names.push_back(name);
  for (TenantId i = 0; i < tenant_names.size(); ++i) tenant_ids_.emplace(tenant_names[i], i);

  for (std::size_t i = 0; i < cfg->clusters.size(); ++i)
    clusters.push_back(std::make_unique<Cluster>(*this, cfg->clusters[i], i));

  // Metric label spaces are fixed here: they are bounded by the config.
  auto cluster_names = names_of_clusters(*cfg);
  auto listener_names = names_of_listeners(*cfg);
  std::vector<std::string> route_labels;
  std::vector<std::vector<std::string>> endpoint_tuples;
  std::vector<std::size_t> endpoint_base;
  for (auto& cl : clusters) {
    endpoint_base.push_back(endpoint_tuples.size());
    for (auto& ep : cl->endpoints) endpoint_tuples.push_back({cl->cfg.name, ep->label});
  }
  for (std::size_t li = 0; li < cfg->listeners.size(); ++li) {
    auto& lc = cfg->listeners[li];
    auto l = std::make_unique<Listener>(lc, li);
    l->tenant = lc.tenant ? &*lc.tenant : &cfg->tenants.source;
    for (std::size_t ri = 0; ri < lc.routes.size(); ++ri) {
      auto& rc = lc.routes[ri];
      Route r{rc.host, rc.prefix, clusters[rc.cluster_index].get(),
              rc.criticality.value_or(lc.default_criticality), rc.timeout,
              rc.tenant ? &*rc.tenant : l->tenant, route_labels.size(),
              lc.name + "/" + std::to_string(ri), rc.fuse};
      route_labels.push_back(r.label);
      l->routes.push_back(std::move(r));
    }
    listeners.push_back(std::move(l));
  }
  metrics = std::make_unique<ProxyMetrics>(*cfg, tenant_names, workers + 1);
  // Fill in the label values now that they are known.
  const std::size_t shards = workers + 1;  // the last shard is the admin thread's
  auto& m = *metrics;
  m.route_labels = route_labels;
  m.endpoint_base = endpoint_base;
  for (auto& t : endpoint_tuples) m.endpoint_labels.push_back(t[0] + "/" + t[1]);
  m.requests = metrics::CounterTable("levee_requests_total", "Requests answered, by route and status class",
                                     {{"route", route_labels}, {"code", {"1xx", "2xx", "3xx", "4xx", "5xx"}}}, shards);
  m.admitted = metrics::CounterTable("levee_admitted_total", "Requests admitted by every gate",
                                     {{"cluster", cluster_names}, {"criticality", criticality_names()}, {"tenant", tenant_names}}, shards);
  m.rejected = metrics::CounterTable("levee_rejected_total", "Requests shed by an admission gate",
                                     {{"cluster", cluster_names}, {"reason", reason_names()}, {"criticality", criticality_names()}, {"tenant", tenant_names}}, shards);
  m.dry_run = metrics::CounterTable("levee_dry_run_rejections_total", "Requests a dry-run gate would have rejected (they were served)",
                                    {{"cluster", cluster_names}, {"reason", reason_names()}, {"criticality", criticality_names()}}, shards);
  m.local_replies = metrics::CounterTable("levee_local_replies_total", "Error replies levee made itself",
                                          {{"listener", listener_names}, {"reason", reason_names()}}, shards);
  m.connections = metrics::CounterTable("levee_downstream_connections_total", "Downstream connections accepted",
                                        {{"listener", listener_names}}, shards);
  m.refused = metrics::CounterTable("levee_downstream_refused_total", "Downstream connections refused",
                                    {{"listener", listener_names}, {"cause", {"max_connections", "per_source", "accept_rate", "draining"}}}, shards);
  m.upstream_requests = metrics::CounterTable("levee_upstream_requests_total", "Responses from upstream endpoints",
                                              {{std::vector<std::string>{"cluster", "endpoint"}, endpoint_tuples}, {"code", {"1xx", "2xx", "3xx", "4xx", "5xx"}}}, shards);
  m.upstream_errors = metrics::CounterTable("levee_upstream_errors_total", "Upstream attempts that got no response",
                                            {{std::vector<std::string>{"cluster", "endpoint"}, endpoint_tuples}, {"kind", {"connect", "reset", "timeout", "protocol"}}}, shards);
  m.upstream_connects = metrics::CounterTable("levee_upstream_connections_total", "Upstream connections opened",
                                              {{"cluster", cluster_names}}, shards);
  m.load_report_errors = metrics::CounterTable("levee_load_report_errors_total", "endpoint-load-metrics values that could not be parsed (ignored)",
                                               {{"cluster", cluster_names}}, shards);
  m.upstream_latency = metrics::HistogramTable("levee_upstream_latency_seconds", "Time from sending upstream to the response header",
                                               {{"cluster", cluster_names}}, metrics::latency_buckets(), shards);
  m.request_duration = metrics::HistogramTable("levee_request_duration_seconds", "Time from request header to the end of the answer",
                                               {{"cluster", cluster_names}, {"outcome", {"served", "rejected"}}}, metrics::latency_buckets(), shards);
  m.queue_time = metrics::HistogramTable("levee_queue_time_seconds", "Time admitted requests waited in a cluster queue",
                                         {{"cluster", cluster_names}}, metrics::latency_buckets(), shards);
  m.health_checks = metrics::CounterTable("levee_health_checks_total", "Active health checks by result",
                                          {{std::vector<std::string>{"cluster", "endpoint"}, endpoint_tuples}, {"result", {"ok", "failed"}}}, shards);
  m.health_check_latency = metrics::HistogramTable("levee_health_check_latency_seconds", "Active health check round trips",
                                                   {{"cluster", cluster_names}}, metrics::latency_buckets(), shards);
}

TenantId Runtime::tenant_id(std::string_view name) const noexcept {
  auto it = tenant_ids_.find(name);
  return it == tenant_ids_.end() ? core::kDefaultTenant : it->second;
}

std::vector<double> Runtime::quotas_for(const config::ClusterConfig& c) const {
  std::vector<double> q(tenant_names.size(), 0.0);
  for (auto& [name, v] : cfg->tenants.quotas) {
    auto it = tenant_ids_.find(std::string_view(name));
    if (it != tenant_ids_.end()) q[it->second] = v;
  }
  for (auto& [name, v] : c.quotas) {
    auto it = tenant_ids_.find(std::string_view(name));
    if (it != tenant_ids_.end()) q[it->second] = v;
  }
  return q;
}

}  // namespace levee::proxy
