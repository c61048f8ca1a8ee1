#include "proxy/runtime.hpp"

#include "config/to_core.hpp"
#include "proxy/tls_context.hpp"

namespace levee::proxy {

namespace {

http::RewriteNames rewrite_names(const config::HeaderNames& h) {
  http::RewriteNames n;
  n.timeout_ms = h.timeout_ms;
  n.attempt = h.attempt;
  n.request_id = h.request_id;
  n.no_retry = h.no_retry;
  return n;
}

http::ResponseSignals response_signals(const config::HeaderNames& h) {
  http::ResponseSignals s;
  s.load_report = h.load_report;
  s.load_report_bin = h.load_report + "-bin";
  s.no_retry = h.no_retry;
  return s;
}

}  // namespace

Runtime::Runtime(std::shared_ptr<const config::Config> c, std::size_t w)
    : cfg(std::move(c)),
      workers(w),
      tenants(config::tenant_table(*cfg)),
      self_protection(config::self_protection_policy(cfg->self_protection)),
      rewrite_names(proxy::rewrite_names(cfg->headers)),
      response_signals(proxy::response_signals(cfg->headers)) {
  const TimePoint t0 = now();
  MetricLabels labels;
  labels.tenants = tenants.names();
  for (std::size_t i = 0; i < cfg->clusters.size(); ++i) {
    const auto& cc = cfg->clusters[i];
    clusters.push_back(std::make_unique<Cluster>(cc, i, config::admission_config(*cfg, cc, tenants),
                                                 config::endpoint_policy(cc), t0));
    if (cc.tls.enabled) clusters.back()->tls = client_tls(cc.tls, cfg->source);
    labels.clusters.push_back(cc.name);
    labels.endpoint_base.push_back(labels.endpoints.size());
    for (const auto& ep : clusters.back()->endpoints) labels.endpoints.push_back({cc.name, ep->label});
  }
  for (std::size_t li = 0; li < cfg->listeners.size(); ++li) {
    const auto& lc = cfg->listeners[li];
    labels.listeners.push_back(lc.name);
    std::vector<Route> routes;
    for (const auto& rc : lc.routes) {
      routes.push_back(Route{clusters[rc.cluster_index].get(), rc.name, labels.routes.size(), rc.fuse});
      labels.routes.push_back(rc.name);
    }
    listeners.push_back(
        std::make_unique<Listener>(lc, li, config::classifier(*cfg, lc, tenants), std::move(routes)));
    if (lc.tls.enabled) listeners.back()->tls = server_tls(lc.tls, cfg->source);
  }
  // The last shard is the control thread's (health checks).
  metrics = std::make_unique<RequestMetrics>(labels, workers + 1);
}

}  // namespace levee::proxy
