#include "proxy/runtime.hpp"
#include "proxy/returning_client.hpp"

#include <boost/asio/ip/address.hpp>

#include <set>

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

core::GateMode with_override(core::GateMode m, std::optional<bool> dry_run) {
  if (!dry_run || m == core::GateMode::Off) return m;
  return *dry_run ? core::GateMode::DryRun : core::GateMode::Enforce;
}

core::SelfProtectionPolicy self_protection(const config::SelfProtectionConfig& s, const PolicyOverrides& o) {
  auto p = config::self_protection_policy(s);
  p.mode = with_override(p.mode, o.self_protection);
  return p;
}

std::string bracketed(const std::string& host) {
  return host.find(':') != std::string::npos ? "[" + host + "]" : host;
}

}  // namespace

std::vector<EndpointSpec> expand_endpoints(const config::ClusterConfig& c, const Discovered& d) {
  std::vector<EndpointSpec> out;
  std::set<std::string> seen;
  for (const auto& e : c.endpoints) {
    const std::string authority = bracketed(e.host) + ":" + std::to_string(e.port);
    auto add = [&](const std::string& address) {
      EndpointSpec s{e.host, e.port, address, e.weight, bracketed(address) + ":" + std::to_string(e.port), authority};
      if (seen.insert(s.label).second) out.push_back(std::move(s));
    };
    boost::system::error_code ec;
    boost::asio::ip::make_address(e.host, ec);
    if (!ec) {
      add(e.host);
      continue;
    }
    auto it = d.find({e.host, e.port});
    if (it == d.end()) continue;  // not resolved yet
    for (const auto& a : it->second) add(a);
  }
  return out;
}

Runtime::Runtime(std::shared_ptr<const config::Config> c, std::size_t w, std::shared_ptr<ProcessState> p,
                 const Runtime* previous, const Discovered& discovered, const PolicyOverrides& overrides)
    : cfg(std::move(c)),
      workers(w),
      process(std::move(p)),
      generation(previous ? previous->generation + 1 : 1),
      tenants(config::tenant_table(*cfg)),
      self_protection(proxy::self_protection(cfg->self_protection, overrides)),
      rewrite_names(proxy::rewrite_names(cfg->headers)),
      response_signals(proxy::response_signals(cfg->headers)),
      executor_load(process->executor_load),
      host_cpu(process->host_cpu),
      close_connections(process->close_connections),
      draining(process->draining) {
  const TimePoint t0 = now();
  MetricLabels labels;
  labels.tenants = tenants.names();
  for (std::size_t i = 0; i < cfg->clusters.size(); ++i) {
    const auto& cc = cfg->clusters[i];
    auto admission = config::admission_config(*cfg, cc, tenants);
    if (auto o = overrides.clusters.find(cc.name); o != overrides.clusters.end()) {
      admission.throttle_mode = with_override(admission.throttle_mode, o->second.throttle);
      admission.quota_mode = with_override(admission.quota_mode, o->second.quota);
      admission.queue_mode = with_override(admission.queue_mode, o->second.queue);
    }
    clusters.push_back(std::make_unique<Cluster>(cc, i, std::move(admission), config::endpoint_policy(cc),
                                                 expand_endpoints(cc, discovered), workers, t0,
                                                 previous ? previous->cluster(cc.name) : nullptr));
    if (cc.tls.enabled)
      clusters.back()->tls = client_tls(cc.tls, cfg->source, cc.protocol == config::ClusterConfig::Protocol::Http2);
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
    // The same address and port: the same slot (its sockets and guards).
    const std::string key = slot_key(lc);
    std::shared_ptr<ListenerSlot> slot;
    if (previous)
      for (const auto& pl : previous->listeners)
        if (pl->slot->key == key) slot = pl->slot;
    if (!slot) slot = std::make_shared<ListenerSlot>(process->next_slot.fetch_add(1), key);
    listeners.push_back(std::make_unique<Listener>(*this, lc, li, config::classifier(*cfg, lc, tenants),
                                                   std::move(routes), std::move(slot)));
    if (lc.tls.enabled)
      listeners.back()->tls =
          server_tls(lc.tls, cfg->source, &process->executor_load, &process->returning_clients,
                     listeners.back()->slot->ticket_keys,
                     listeners.back()->slot->handshakes, listeners.back()->slot->sessions);
  }
  // The last shard is the control thread's (health checks).
  metrics = std::make_unique<RequestMetrics>(labels, workers + 1);
}

Cluster* Runtime::cluster(std::string_view name) const noexcept {
  for (const auto& c : clusters)
    if (c->cfg.name == name) return c.get();
  return nullptr;
}

Listener* Runtime::listener_in_slot(std::size_t slot) const noexcept {
  for (const auto& l : listeners)
    if (l->slot->id == slot) return l.get();
  return nullptr;
}

ReturningClient::~ReturningClient() {
  if (process_) process_->returning_clients.fetch_sub(1, std::memory_order_relaxed);
}

void ReturningClient::mark(const std::shared_ptr<ProcessState>& process) noexcept {
  if (process_ || !process) return;
  process_ = process;
  process_->returning_clients.fetch_add(1, std::memory_order_relaxed);
}

}  // namespace levee::proxy
