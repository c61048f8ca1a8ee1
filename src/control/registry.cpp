#include "control/registry.hpp"

#include <utility>

#include <functional>

#include "control/access_log.hpp"
#include "metrics/process.hpp"
#include "proxy/runtime.hpp"
#include "proxy/worker.hpp"

namespace levee::control {

using metrics::sample;
using proxy::Cluster;
using proxy::Endpoint;
using proxy::Listener;
using proxy::Runtime;

void register_metrics(metrics::Registry& registry, const std::shared_ptr<Runtime>& rtp,
                      const std::vector<std::unique_ptr<proxy::Worker>>& workers, const AccessLog& log) {
  auto& m = *rtp->metrics;
  for (const auto* t : std::as_const(m).counter_tables()) registry.add(t);
  for (const auto* h : std::as_const(m).histogram_tables()) registry.add(h);

  std::shared_ptr<Runtime> rt = rtp;
  auto counter = [](std::string name, std::string help, std::function<double()> f) {
    metrics::GaugeSet g{std::move(name), std::move(help), [f](auto& out) { out.push_back(sample({}, f(), true)); }};
    g.type = prometheus::MetricType::Counter;
    return g;
  };
  registry.add(counter("levee_access_log_dropped_total", "Access log lines dropped because the writer fell behind",
                       [&log] { return static_cast<double>(log.dropped()); }));
  registry.add(counter("levee_access_log_write_errors_total", "Access log writes that failed (what they held is lost)",
                       [&log] { return static_cast<double>(log.write_errors()); }));
  for (auto& g : metrics::process_gauges()) registry.add(std::move(g));
  registry.add({"levee_executor_load", "Smoothed executor load (busy or runnable workers / workers)",
                [rt](auto& out) { out.push_back(sample({}, rt->executor_load.load())); }});
  registry.add({"levee_host_cpu_utilization", "Smoothed host or cgroup CPU utilization (when enabled)",
                [rt](auto& out) { out.push_back(sample({}, rt->host_cpu.load())); }});
  registry.add({"levee_workers", "Worker threads",
                [rt](auto& out) { out.push_back(sample({}, static_cast<double>(rt->workers))); }});
  registry.add({"levee_draining", "1 while draining",
                [rt](auto& out) { out.push_back(sample({}, rt->draining.load() ? 1 : 0)); }});
  registry.add({"levee_downstream_active_connections", "Open downstream connections", [rt](auto& out) {
                  for (auto& l : rt->listeners) out.push_back(sample({{"listener", l->cfg.name}}, l->connections.load()));
                }});
  auto per_fuse_listener = [rt](std::string name, std::string help, std::function<double(const Listener&)> f) {
    return metrics::GaugeSet{std::move(name), std::move(help), [rt, f](auto& out) {
                               for (auto& l : rt->listeners)
                                 if (l->uses_fuse()) out.push_back(sample({{"listener", l->cfg.name}}, f(*l)));
                             }};
  };
  registry.add(per_fuse_listener("levee_fuse_connections", "Upstream connections open through a fuse",
                                 [](auto& l) { return l.fuse_open.load(); }));
  registry.add(per_fuse_listener("levee_fuse_in_use", "Fuse slots held by requests",
                                 [](auto& l) { return l.fuse_in_use.load(); }));
  registry.add(per_fuse_listener("levee_fuse_waiting", "Requests waiting for a fuse connection",
                                 [](auto& l) { return l.fuse_waiting.load(); }));
  registry.add({"levee_upstream_idle_connections", "Pooled idle upstream connections, all workers",
                [&workers](auto& out) {
                  double n = 0;
                  for (auto& w : workers) n += static_cast<double>(w->pool.idle());
                  out.push_back(sample({}, n));
                }});

  // Cluster state is read under its lock once per scrape, by the first family.
  struct Snap {
    std::vector<Cluster::Snapshot> s;
  };
  auto snap = std::make_shared<Snap>();
  registry.add({"levee_cluster_in_flight", "Requests holding a concurrency permit", [rt, snap](auto& out) {
                  snap->s.clear();
                  for (auto& c : rt->clusters) snap->s.push_back(c->snapshot(proxy::now()));
                  for (std::size_t i = 0; i < rt->clusters.size(); ++i)
                    out.push_back(sample({{"cluster", rt->clusters[i]->cfg.name}}, snap->s[i].in_flight));
                }});
  auto per_cluster = [rt, snap](std::string name, std::string help, std::function<double(const Cluster::Snapshot&)> f) {
    return metrics::GaugeSet{std::move(name), std::move(help), [rt, snap, f](auto& out) {
                               for (std::size_t i = 0; i < snap->s.size(); ++i)
                                 out.push_back(sample({{"cluster", rt->clusters[i]->cfg.name}}, f(snap->s[i])));
                             }};
  };
  registry.add(per_cluster("levee_cluster_concurrency_limit", "Concurrency limit in force (0: no limit)",
                           [](auto& s) { return s.limit; }));
  registry.add(per_cluster("levee_cluster_queue_time_seconds", "Smoothed queuing time: the overload signal",
                           [](auto& s) { return s.queue_time_s; }));
  registry.add(per_cluster("levee_cluster_drain_rate", "Permits returned per second, smoothed",
                           [](auto& s) { return s.drain_rate; }));
  registry.add(per_cluster("levee_cluster_overloaded", "1 while the cluster counts as overloaded (quotas enforced)",
                           [](auto& s) { return s.overloaded ? 1.0 : 0.0; }));
  registry.add(per_cluster("levee_cluster_standing_queue", "1 while CoDel sees a standing queue",
                           [](auto& s) { return s.codel_overloaded ? 1.0 : 0.0; }));
  registry.add(per_cluster("levee_cluster_backend_utilization", "Smoothed utilization reported by backends (-1: none)",
                           [](auto& s) { return s.utilization; }));
  registry.add(per_cluster("levee_cluster_arriving_retry_share", "Share of arriving requests that are retries",
                           [](auto& s) { return s.retry_share; }));
  registry.add({"levee_cluster_queue_depth", "Requests waiting, by criticality (OVER_QUOTA: the over-quota lane)",
                [rt, snap](auto& out) {
                  for (std::size_t i = 0; i < snap->s.size(); ++i) {
                    const auto& name = rt->clusters[i]->cfg.name;
                    for (auto c : core::kAllCriticalities)
                      out.push_back(sample({{"cluster", name}, {"criticality", std::string(core::to_string(c))}},
                                           snap->s[i].depth_by_crit[core::index(c)]));
                    out.push_back(sample({{"cluster", name}, {"criticality", "OVER_QUOTA"}}, snap->s[i].depth_over_quota));
                  }
                }});
  registry.add({"levee_throttle_probability", "Adaptive throttle's local rejection probability", [rt, snap](auto& out) {
                  for (std::size_t i = 0; i < snap->s.size(); ++i)
                    for (auto c : core::kAllCriticalities)
                      out.push_back(sample({{"cluster", rt->clusters[i]->cfg.name}, {"criticality", std::string(core::to_string(c))}},
                                           snap->s[i].throttle_p[core::index(c)]));
                }});
  registry.add({"levee_tenant_usage_cpu_seconds_per_second", "Tenant CPU usage reported by backends",
                [rt, snap](auto& out) {
                  for (std::size_t i = 0; i < snap->s.size(); ++i)
                    for (std::size_t t = 0; t < snap->s[i].tenant_usage.size(); ++t)
                      out.push_back(sample({{"cluster", rt->clusters[i]->cfg.name}, {"tenant", rt->tenants.name(static_cast<core::TenantId>(t))}},
                                           snap->s[i].tenant_usage[t]));
                }});
  registry.add({"levee_tenant_quota_cpu_seconds_per_second", "Tenant quota", [rt, snap](auto& out) {
                  if (rt->cfg->tenants.quotas.empty()) return;
                  for (std::size_t i = 0; i < snap->s.size(); ++i)
                    for (std::size_t t = 0; t < snap->s[i].tenant_quota.size(); ++t)
                      out.push_back(sample({{"cluster", rt->clusters[i]->cfg.name}, {"tenant", rt->tenants.name(static_cast<core::TenantId>(t))}},
                                           snap->s[i].tenant_quota[t]));
                }});
  auto per_endpoint = [rt](std::string name, std::string help, std::function<double(const Endpoint&)> f,
                           bool counter_type = false) {
    metrics::GaugeSet g{std::move(name), std::move(help), [rt, f, counter_type](auto& out) {
                          for (auto& c : rt->clusters)
                            for (auto& e : c->endpoints)
                              out.push_back(sample({{"cluster", c->cfg.name}, {"endpoint", e->label}}, f(*e), counter_type));
                        }};
    if (counter_type) g.type = prometheus::MetricType::Counter;
    return g;
  };
  registry.add(per_endpoint("levee_endpoint_healthy", "1 when active health checks pass",
                            [](auto& e) { return e.healthy.load() ? 1.0 : 0.0; }));
  registry.add(per_endpoint("levee_endpoint_ejected", "1 while ejected by outlier detection",
                            [](auto& e) { return e.ejected.load() ? 1.0 : 0.0; }));
  registry.add(per_endpoint("levee_endpoint_weight", "Effective load-balancing weight (slow start applied)",
                            [](auto& e) { return e.effective_weight.load(); }));
  registry.add(per_endpoint("levee_endpoint_utilization", "Smoothed utilization the endpoint reports (-1: none)",
                            [](auto& e) { return e.utilization.load(); }));
  registry.add(per_endpoint("levee_endpoint_outstanding", "Requests in flight to the endpoint",
                            [](auto& e) { return e.outstanding.load(); }));
  registry.add(per_endpoint("levee_endpoint_ejections_total", "Outlier ejections",
                            [](auto& e) { return static_cast<double>(e.ejections.load()); }, true));
  registry.add(per_endpoint("levee_endpoint_health_transitions_total", "Changes of active health state",
                            [](auto& e) { return static_cast<double>(e.health_transitions.load()); }, true));
}

}  // namespace levee::control
