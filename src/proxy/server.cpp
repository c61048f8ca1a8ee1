#include "proxy/server.hpp"

#include <boost/asio/as_tuple.hpp>
#include <boost/asio/co_spawn.hpp>
#include <boost/asio/detached.hpp>
#include <boost/asio/ip/tcp.hpp>
#include <boost/asio/use_awaitable.hpp>
#include <boost/beast/core/flat_buffer.hpp>
#include <boost/beast/http.hpp>
#include <spdlog/spdlog.h>

#include <csignal>
#include <sstream>

#include "control/systemd_notify.hpp"
#include "metrics/process.hpp"

namespace levee::proxy {

namespace asio = boost::asio;
namespace beast = boost::beast;
using boost::system::error_code;
constexpr auto nothrow = asio::as_tuple(asio::use_awaitable);

namespace {

core::ExecutorLoadConfig executor_cfg(const config::SelfProtectionConfig& s) {
  core::ExecutorLoadConfig c;
  c.time_constant = s.time_constant;
  c.thresholds = s.thresholds;
  return c;
}
core::ExecutorLoadConfig host_cfg(const config::SelfProtectionConfig& s) {
  core::ExecutorLoadConfig c;
  c.time_constant = s.host_cpu.time_constant;
  c.thresholds = s.host_cpu.thresholds;
  c.reason = core::Reason::HostCpu;
  return c;
}
std::uint64_t mono_ns() {
  return static_cast<std::uint64_t>(
      std::chrono::duration_cast<std::chrono::nanoseconds>(std::chrono::steady_clock::now().time_since_epoch()).count());
}

void json_escape(std::ostringstream& o, std::string_view s) {
  o << '"';
  for (char c : s) {
    if (c == '"' || c == '\\') o << '\\' << c;
    else if (static_cast<unsigned char>(c) < 0x20) o << ' ';
    else o << c;
  }
  o << '"';
}

}  // namespace

Server::Server(std::shared_ptr<const config::Config> cfg)
    : cfg_(std::move(cfg)),
      signals_(admin_ctx_, SIGTERM, SIGINT),
      load_timer_(admin_ctx_),
      host_timer_(admin_ctx_),
      tick_timer_(admin_ctx_),
      resolve_timer_(admin_ctx_),
      drain_timer_(admin_ctx_),
      executor_(executor_cfg(cfg_->self_protection)),
      host_load_(host_cfg(cfg_->self_protection)) {
  std::size_t n = cfg_->workers ? cfg_->workers : available_cpus();
  rt_ = std::make_shared<Runtime>(cfg_, n);
  log_ = std::make_unique<AccessLog>(cfg_->access_log);
  for (std::size_t i = 0; i < n; ++i) workers_.push_back(std::make_unique<Worker>(*this, i, rt_));
  build_registry();
}

Server::~Server() {
  for (auto& w : workers_) w->stop();
  for (auto& w : workers_) w->join();
}

void Server::start() {
  resolve_all(true);
  for (auto& w : workers_) w->open_listeners();
  tcp::endpoint aep(asio::ip::make_address(cfg_->admin.address), cfg_->admin.port);
  admin_acceptor_ = std::make_unique<tcp::acceptor>(admin_ctx_);
  admin_acceptor_->open(aep.protocol());
  admin_acceptor_->set_option(asio::socket_base::reuse_address(true));
  admin_acceptor_->bind(aep);
  admin_acceptor_->listen(128);
  for (auto& w : workers_) w->start();
  // Wait for every worker to publish its thread id (for schedstat).
  for (auto& w : workers_) {
    while (w->tid.load() == 0) std::this_thread::yield();
    ThreadProbe p;
    p.reader = std::make_unique<ThreadSchedReader>(w->tid.load());
    probes_.push_back(std::move(p));
  }
  asio::co_spawn(admin_ctx_, admin_accept(), asio::detached);
  health_ = std::make_unique<HealthChecker>(admin_ctx_, rt_, workers_.size());
  health_->start();
  signals_.async_wait([this](error_code ec, int sig) {
    if (ec) return;
    spdlog::info("signal {}: draining (up to {} ms)", sig,
                 std::chrono::duration_cast<std::chrono::milliseconds>(cfg_->drain_timeout).count());
    begin_drain();
  });
  sample_load();
  if (cfg_->self_protection.host_cpu.enabled) sample_host_cpu();
  tick();
  spdlog::info("levee listening: {} worker(s), admin on {}:{}, host CPU from {}", workers_.size(),
               cfg_->admin.address, cfg_->admin.port, host_cpu_.source());
  for (auto& rl : rt_->listeners) {
    const auto& l = rl->cfg;
    const bool batch = l.mode == config::ListenerConfig::Mode::Batch;
    spdlog::info("listener {} on {}:{} ({} mode)", l.name, l.address, l.port, batch ? "batch" : "normal");
    if (!batch && rl->uses_fuse() && l.fuse.connections_per_endpoint < workers_.size())
      spdlog::warn("listener {}: fuse routes split {} connection(s) per endpoint across {} workers: "
                   "some workers get none and refuse fuse traffic; raise fuse.connections_per_endpoint "
                   "or use a batch listener",
                   l.name, l.fuse.connections_per_endpoint, workers_.size());
  }
  control::notify_ready("levee listening");
}

int Server::run() {
  admin_ctx_.run();
  for (auto& w : workers_) w->stop();
  for (auto& w : workers_) w->join();
  log_->flush();
  return exit_code_;
}

// --- periodic work on the admin thread --------------------------------------

void Server::sample_load() {
  const auto& sp = cfg_->self_protection;
  const std::uint64_t wall = mono_ns();
  double busy = 0;
  for (std::size_t i = 0; i < workers_.size(); ++i) {
    auto& w = *workers_[i];
    auto& p = probes_[i];
    // Running or runnable, from the scheduler's own accounting.
    if (auto s = p.reader->read()) {
      if (p.primed && wall > p.last_wall) {
        double d = static_cast<double>((s->run_ns - p.last.run_ns) + (s->wait_ns - p.last.wait_ns));
        busy += std::min(1.0, d / static_cast<double>(wall - p.last_wall));
      }
      p.last = *s;
      p.last_wall = wall;
      p.primed = true;
    }
    // Ready work queued in the event loop beyond what one thread can run:
    // how long a probe waited to be run, in sampling intervals.
    const auto interval_ns = static_cast<double>(std::chrono::nanoseconds(sp.sample_interval).count());
    if (w.probe_pending.load(std::memory_order_acquire)) {
      double waited = static_cast<double>(static_cast<std::int64_t>(wall) - w.probe_posted_ns.load());
      busy += std::max(0.0, waited / interval_ns - 1.0);
    } else {
      busy += std::max(0.0, static_cast<double>(w.probe_delay_ns.load()) / interval_ns - 1.0);
      w.probe_pending.store(true, std::memory_order_release);
      w.probe_posted_ns.store(static_cast<std::int64_t>(wall));
      asio::post(w.ctx, [&w] {
        w.probe_delay_ns.store(static_cast<std::int64_t>(mono_ns()) - w.probe_posted_ns.load());
        w.probe_pending.store(false, std::memory_order_release);
      });
    }
  }
  const TimePoint t = now();
  executor_.sample(t, busy, static_cast<double>(workers_.size()));
  const double load = executor_.load();
  rt_->executor_load.store(load, std::memory_order_relaxed);
  for (auto c : core::kAllCriticalities) rt_->executor_over[core::index(c)].store(executor_.over(c), std::memory_order_relaxed);
  rt_->close_connections.store(sp.enabled && sp.close_connections_above > 0 && load > sp.close_connections_above,
                               std::memory_order_relaxed);
  load_timer_.expires_after(std::chrono::duration_cast<asio::steady_timer::duration>(sp.sample_interval));
  load_timer_.async_wait([this](error_code ec) {
    if (!ec) sample_load();
  });
}

void Server::sample_host_cpu() {
  const auto& h = cfg_->self_protection.host_cpu;
  if (auto u = host_cpu_.sample()) {
    host_load_.sample(now(), *u, 1.0);
    rt_->host_cpu.store(host_load_.load(), std::memory_order_relaxed);
    for (auto c : core::kAllCriticalities) rt_->host_over[core::index(c)].store(host_load_.over(c), std::memory_order_relaxed);
  }
  host_timer_.expires_after(std::chrono::duration_cast<asio::steady_timer::duration>(h.interval));
  host_timer_.async_wait([this](error_code ec) {
    if (!ec) sample_host_cpu();
  });
}

void Server::tick() {
  const TimePoint t = now();
  for (auto& c : rt_->clusters) {
    c->refresh_weights(t);
    c->tick(t);
  }
  tick_timer_.expires_after(std::chrono::milliseconds(100));
  tick_timer_.async_wait([this](error_code ec) {
    if (!ec) tick();
  });
}

void Server::resolve_all(bool blocking) {
  // Hostnames are resolved at start and then every resolve_interval; the
  // connection path only reads the last answer.
  tcp::resolver r(admin_ctx_);
  for (auto& c : rt_->clusters) {
    for (auto& ep : c->endpoints) {
      error_code ec;
      auto res = r.resolve(ep->host, std::to_string(ep->port), ec);
      if (ec) {
        if (blocking) spdlog::warn("cluster {}: cannot resolve {}: {}", c->cfg.name, ep->label, ec.message());
        continue;
      }
      std::vector<tcp::endpoint> addrs;
      for (auto& e : res) addrs.push_back(e.endpoint());
      if (ep->set_addresses(std::move(addrs))) {
        spdlog::info("cluster {}: {} resolves to a new address set: slow start", c->cfg.name, ep->label);
        c->endpoint_moved(ep->index, now());
      }
    }
  }
  Duration every = std::chrono::hours(24);
  for (auto& c : rt_->clusters) every = std::min(every, c->cfg.resolve_interval);
  resolve_timer_.expires_after(std::chrono::duration_cast<asio::steady_timer::duration>(every));
  resolve_timer_.async_wait([this](error_code ec) {
    if (!ec) resolve_all(false);
  });
}

void Server::begin_drain() {
  if (draining_) return;
  draining_ = true;
  control::notify_stopping();
  rt_->draining.store(true);
  drain_deadline_ = now() + cfg_->drain_timeout;
  for (auto& w : workers_) w->begin_drain();
  error_code ec;
  check_drained();
}

void Server::check_drained() {
  std::uint32_t active = 0;
  for (auto& w : workers_) active += w->active_sessions.load();
  if (active == 0 || now() >= drain_deadline_) {
    if (active > 0) spdlog::warn("drain timeout: closing {} connection(s)", active);
    else spdlog::info("drained");
    error_code ec;
    if (admin_acceptor_) admin_acceptor_->close(ec);
    admin_ctx_.stop();
    return;
  }
  drain_timer_.expires_after(std::chrono::milliseconds(20));
  drain_timer_.async_wait([this](error_code ec) {
    if (!ec) check_drained();
  });
}

bool Server::ready() const {
  if (rt_->draining.load()) return false;
  if (!cfg_->admin.ready_requires_endpoints) return true;
  for (auto& c : rt_->clusters)
    if (c->healthy_endpoints() == 0) return false;
  return true;
}

// --- metrics ----------------------------------------------------------------

void Server::build_registry() {
  auto& m = *rt_->metrics;
  for (auto* t : {&m.requests, &m.admitted, &m.rejected, &m.dry_run, &m.local_replies, &m.connections,
                  &m.refused, &m.upstream_requests, &m.upstream_errors, &m.upstream_connects,
                  &m.load_report_errors, &m.bytes})
    registry_.add(t);
  for (auto* h : {&m.upstream_latency, &m.request_duration, &m.queue_time, &m.health_check_latency}) registry_.add(h);
  registry_.add(&m.health_checks);
  registry_.add(&log_dropped_);
  for (auto& g : metrics::process_gauges()) registry_.add(std::move(g));
  using metrics::sample;
  auto rt = rt_;
  registry_.add({"levee_executor_load", "Smoothed executor load (busy or runnable workers / workers)",
                 [rt](auto& out) { out.push_back(sample({}, rt->executor_load.load())); }});
  registry_.add({"levee_host_cpu_utilization", "Smoothed host or cgroup CPU utilization (when enabled)",
                 [rt](auto& out) { out.push_back(sample({}, rt->host_cpu.load())); }});
  registry_.add({"levee_workers", "Worker threads", [this](auto& out) { out.push_back(sample({}, static_cast<double>(workers_.size()))); }});
  registry_.add({"levee_draining", "1 while draining", [rt](auto& out) { out.push_back(sample({}, rt->draining.load() ? 1 : 0)); }});
  registry_.add({"levee_downstream_active_connections", "Open downstream connections",
                 [rt](auto& out) {
                   for (auto& l : rt->listeners) out.push_back(sample({{"listener", l->cfg.name}}, l->connections.load()));
                 }});
  auto per_listener = [rt](std::string name, std::string help, std::function<double(const Listener&)> f) {
    return metrics::GaugeSet{std::move(name), std::move(help), [rt, f](auto& out) {
                               for (auto& l : rt->listeners)
                                 if (l->uses_fuse())
                                   out.push_back(sample({{"listener", l->cfg.name}}, f(*l)));
                             }};
  };
  registry_.add(per_listener("levee_fuse_connections", "Upstream connections open through a fuse", [](auto& l) { return l.fuse_open.load(); }));
  registry_.add(per_listener("levee_fuse_in_use", "Fuse slots held by requests", [](auto& l) { return l.fuse_in_use.load(); }));
  registry_.add(per_listener("levee_fuse_waiting", "Requests waiting for a fuse connection", [](auto& l) { return l.fuse_waiting.load(); }));
  registry_.add({"levee_upstream_idle_connections", "Pooled idle upstream connections, all workers",
                 [this](auto& out) {
                   double n = 0;
                   for (auto& w : workers_) n += static_cast<double>(w->idle_count());
                   out.push_back(sample({}, n));
                 }});
  // Cluster state is read under its lock once per scrape.
  struct Snap {
    std::vector<Cluster::Snapshot> s;
  };
  auto snap = std::make_shared<Snap>();
  registry_.add({"levee_cluster_in_flight", "Requests holding a concurrency permit", [rt, snap](auto& out) {
                   snap->s.clear();
                   for (auto& c : rt->clusters) snap->s.push_back(c->snapshot(now()));
                   for (std::size_t i = 0; i < rt->clusters.size(); ++i)
                     out.push_back(sample({{"cluster", rt->clusters[i]->cfg.name}}, snap->s[i].in_flight));
                 }});
  auto per_cluster = [rt, snap](std::string name, std::string help, std::function<double(const Cluster::Snapshot&)> f) {
    return metrics::GaugeSet{std::move(name), std::move(help), [rt, snap, f](auto& out) {
                               for (std::size_t i = 0; i < snap->s.size(); ++i)
                                 out.push_back(sample({{"cluster", rt->clusters[i]->cfg.name}}, f(snap->s[i])));
                             }};
  };
  registry_.add(per_cluster("levee_cluster_concurrency_limit", "Concurrency limit in force (0: no limit)", [](auto& s) { return s.limit; }));
  registry_.add(per_cluster("levee_cluster_queue_time_seconds", "Smoothed queuing time: the overload signal", [](auto& s) { return s.queue_time_s; }));
  registry_.add(per_cluster("levee_cluster_drain_rate", "Permits returned per second, smoothed", [](auto& s) { return s.drain_rate; }));
  registry_.add(per_cluster("levee_cluster_overloaded", "1 while the cluster counts as overloaded (quotas enforced)", [](auto& s) { return s.overloaded ? 1.0 : 0.0; }));
  registry_.add(per_cluster("levee_cluster_standing_queue", "1 while CoDel sees a standing queue", [](auto& s) { return s.codel_overloaded ? 1.0 : 0.0; }));
  registry_.add(per_cluster("levee_cluster_backend_utilization", "Smoothed utilization reported by backends (-1: none)", [](auto& s) { return s.utilization; }));
  registry_.add(per_cluster("levee_cluster_arriving_retry_share", "Share of arriving requests that are retries", [](auto& s) { return s.retry_share; }));
  registry_.add({"levee_cluster_queue_depth", "Requests waiting, by criticality (OVER_QUOTA: the over-quota lane)",
                 [rt, snap](auto& out) {
                   for (std::size_t i = 0; i < snap->s.size(); ++i) {
                     for (auto c : core::kAllCriticalities)
                       out.push_back(sample({{"cluster", rt->clusters[i]->cfg.name}, {"criticality", std::string(core::to_string(c))}},
                                            snap->s[i].depth_by_crit[core::index(c)]));
                     out.push_back(sample({{"cluster", rt->clusters[i]->cfg.name}, {"criticality", "OVER_QUOTA"}},
                                          snap->s[i].depth_over_quota));
                   }
                 }});
  registry_.add({"levee_throttle_probability", "Adaptive throttle's local rejection probability", [rt, snap](auto& out) {
                   for (std::size_t i = 0; i < snap->s.size(); ++i)
                     for (auto c : core::kAllCriticalities)
                       out.push_back(sample({{"cluster", rt->clusters[i]->cfg.name}, {"criticality", std::string(core::to_string(c))}},
                                            snap->s[i].throttle_p[core::index(c)]));
                 }});
  registry_.add({"levee_tenant_usage_cpu_seconds_per_second", "Tenant CPU usage reported by backends", [rt, snap](auto& out) {
                   for (std::size_t i = 0; i < snap->s.size(); ++i)
                     for (std::size_t t = 0; t < snap->s[i].tenant_usage.size(); ++t)
                       out.push_back(sample({{"cluster", rt->clusters[i]->cfg.name}, {"tenant", rt->tenant_names[t]}}, snap->s[i].tenant_usage[t]));
                 }});
  registry_.add({"levee_tenant_quota_cpu_seconds_per_second", "Tenant quota", [rt, snap](auto& out) {
                   if (!rt->quotas_configured()) return;
                   for (std::size_t i = 0; i < snap->s.size(); ++i)
                     for (std::size_t t = 0; t < snap->s[i].tenant_quota.size(); ++t)
                       out.push_back(sample({{"cluster", rt->clusters[i]->cfg.name}, {"tenant", rt->tenant_names[t]}}, snap->s[i].tenant_quota[t]));
                 }});
  auto per_endpoint = [rt](std::string name, std::string help, std::function<double(const Endpoint&)> f) {
    return metrics::GaugeSet{std::move(name), std::move(help), [rt, f](auto& out) {
                               for (auto& c : rt->clusters)
                                 for (auto& e : c->endpoints)
                                   out.push_back(sample({{"cluster", c->cfg.name}, {"endpoint", e->label}}, f(*e)));
                             }};
  };
  registry_.add(per_endpoint("levee_endpoint_healthy", "1 when active health checks pass", [](auto& e) { return e.healthy.load() ? 1.0 : 0.0; }));
  registry_.add(per_endpoint("levee_endpoint_ejected", "1 while ejected by outlier detection", [](auto& e) { return e.ejected.load() ? 1.0 : 0.0; }));
  registry_.add(per_endpoint("levee_endpoint_weight", "Effective load-balancing weight (slow start applied)", [](auto& e) { return e.effective_weight.load(); }));
  registry_.add(per_endpoint("levee_endpoint_utilization", "Smoothed utilization the endpoint reports (-1: none)", [](auto& e) { return e.utilization.load(); }));
  registry_.add(per_endpoint("levee_endpoint_outstanding", "Requests in flight to the endpoint", [](auto& e) { return e.outstanding.load(); }));
  auto endpoint_counter = [rt](std::string name, std::string help, std::function<double(const Endpoint&)> f) {
    metrics::GaugeSet g{std::move(name), std::move(help), [rt, f](auto& out) {
                          for (auto& c : rt->clusters)
                            for (auto& e : c->endpoints)
                              out.push_back(sample({{"cluster", c->cfg.name}, {"endpoint", e->label}}, f(*e), true));
                        }};
    g.type = prometheus::MetricType::Counter;
    return g;
  };
  registry_.add(endpoint_counter("levee_endpoint_ejections_total", "Outlier ejections", [](auto& e) { return static_cast<double>(e.ejections.load()); }));
  registry_.add(endpoint_counter("levee_endpoint_health_transitions_total", "Changes of active health state", [](auto& e) { return static_cast<double>(e.health_transitions.load()); }));
}

// --- the admin listener -------------------------------------------------------

asio::awaitable<void> Server::admin_accept() {
  for (;;) {
    auto [ec, sock] = co_await admin_acceptor_->async_accept(nothrow);
    if (ec) {
      if (ec == asio::error::operation_aborted) co_return;
      continue;
    }
    asio::co_spawn(admin_ctx_, admin_session(std::move(sock)), asio::detached);
  }
}

std::string Server::admin_clusters_json() {
  std::ostringstream o;
  o << "{\"clusters\":[";
  const TimePoint t = now();
  for (std::size_t i = 0; i < rt_->clusters.size(); ++i) {
    auto& c = *rt_->clusters[i];
    auto s = c.snapshot(t);
    if (i) o << ',';
    o << "{\"name\":";
    json_escape(o, c.cfg.name);
    o << ",\"in_flight\":" << s.in_flight << ",\"limit\":" << s.limit << ",\"queue_depth\":" << s.depth
      << ",\"queue_time_ms\":" << s.queue_time_s * 1e3 << ",\"drain_rate\":" << s.drain_rate
      << ",\"overloaded\":" << (s.overloaded ? "true" : "false")
      << ",\"backend_utilization\":" << s.utilization << ",\"endpoints\":[";
    for (std::size_t k = 0; k < c.endpoints.size(); ++k) {
      auto& e = *c.endpoints[k];
      if (k) o << ',';
      o << "{\"address\":";
      json_escape(o, e.label);
      o << ",\"healthy\":" << (e.healthy.load() ? "true" : "false")
        << ",\"ejected\":" << (e.ejected.load() ? "true" : "false") << ",\"weight\":" << e.weight
        << ",\"effective_weight\":" << e.effective_weight.load() << ",\"outstanding\":" << e.outstanding.load()
        << ",\"utilization\":" << e.utilization.load() << '}';
    }
    o << "]}";
  }
  o << "],\"executor_load\":" << rt_->executor_load.load() << ",\"draining\":" << (rt_->draining.load() ? "true" : "false")
    << "}\n";
  return o.str();
}

asio::awaitable<void> Server::admin_session(tcp::socket sock) {
  namespace http = beast::http;
  beast::flat_buffer buf;
  for (;;) {
    http::request<http::string_body> req;
    auto [ec, n] = co_await http::async_read(sock, buf, req, nothrow);
    if (ec) co_return;
    http::response<http::string_body> res;
    res.version(req.version());
    res.keep_alive(req.keep_alive());
    res.set(http::field::server, "levee-admin");
    std::string_view target = req.target();
    auto q = target.find('?');
    if (q != std::string_view::npos) target = target.substr(0, q);
    if (target == "/metrics") {
      const auto d = log_->dropped();
      if (d > last_dropped_) {
        log_dropped_.inc(0, 0, d - last_dropped_);
        last_dropped_ = d;
      }
      res.result(http::status::ok);
      res.set(http::field::content_type, "text/plain; version=0.0.4; charset=utf-8");
      res.body() = registry_.serialize();
    } else if (target == "/healthz") {
      res.result(http::status::ok);
      res.set(http::field::content_type, "text/plain");
      res.body() = "ok\n";
    } else if (target == "/ready") {
      bool r = ready();
      res.result(r ? http::status::ok : http::status::service_unavailable);
      res.set(http::field::content_type, "text/plain");
      res.body() = r ? "ready\n" : (rt_->draining.load() ? "draining\n" : "no healthy endpoints\n");
    } else if (target == "/admin/clusters") {
      res.result(http::status::ok);
      res.set(http::field::content_type, "application/json");
      res.body() = admin_clusters_json();
    } else {
      res.result(http::status::not_found);
      res.set(http::field::content_type, "text/plain");
      res.body() = "not found: try /metrics, /healthz, /ready, /admin/clusters\n";
    }
    res.prepare_payload();
    auto [wec, wn] = co_await http::async_write(sock, res, nothrow);
    if (wec || !res.keep_alive()) co_return;
  }
}

}  // namespace levee::proxy
