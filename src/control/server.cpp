#include "control/server.hpp"

#include <spdlog/spdlog.h>

#include <csignal>
#include <sstream>
#include <system_error>
#include <thread>

#include "control/cpu.hpp"
#include "control/registry.hpp"
#include "control/systemd_notify.hpp"
#include "proxy/runtime.hpp"
#include "proxy/worker.hpp"

namespace levee::control {

namespace asio = boost::asio;
using boost::system::error_code;

namespace {
void json_string(std::ostringstream& o, std::string_view s) {
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
    : cfg_(std::move(cfg)), signals_(admin_ctx_, SIGTERM, SIGINT), drain_timer_(admin_ctx_) {
  const std::size_t n = cfg_->workers ? cfg_->workers : available_cpus();
  rt_ = std::make_shared<proxy::Runtime>(cfg_, n);
  log_ = std::make_unique<AccessLog>(cfg_->access_log, n);
  for (std::size_t i = 0; i < n; ++i) workers_.push_back(std::make_unique<proxy::Worker>(i, rt_, log_->shard(i)));
  if (cfg_->quota_sync.enabled) {
    core::FleetLayout layout{{}, rt_->tenants.names()};
    for (auto& c : rt_->clusters) layout.clusters.push_back(c->cfg.name);
    fleet_ = std::make_unique<quota::FleetSync>(
        cfg_->quota_sync, cfg_->tenants.window, std::move(layout),
        quota::FleetSync::Hooks{[rt = rt_](std::size_t c, auto& out) { rt->clusters[c]->take_quota_usage(out); },
                                [rt = rt_](std::size_t c, auto& v) { rt->clusters[c]->set_fleet_view(v); }});
  }
  health_ = std::make_unique<HealthChecker>(admin_ctx_, rt_, n);
  resolver_ = std::make_unique<Resolver>(admin_ctx_, *rt_);
  admin_ = std::make_unique<AdminServer>(
      admin_ctx_, cfg_->admin,
      AdminPages{[this] { return registry_.serialize(); }, [this] { return ready(); }, [this] { return clusters_json(); }});
  register_metrics(registry_, rt_, workers_, *log_);
  if (fleet_) fleet_->register_metrics(registry_);
  signals_.add(SIGHUP);
  signals_.add(SIGUSR1);
}

Server::~Server() {
  if (fleet_) fleet_->stop();
  if (sampler_) sampler_->stop();
  for (auto& w : workers_) w->stop();
  for (auto& w : workers_) w->join();
  if (admin_) admin_->close();
}

void Server::start() {
  if (fleet_) fleet_->start();  // the first sync goes out at once
  resolver_->start();
  for (auto& w : workers_) w->open_listeners();
  admin_->bind();
  log_->start();
  for (auto& w : workers_) w->start();
  std::vector<proxy::Worker*> ws;
  for (auto& w : workers_) {
    // The sampler reads each worker's scheduler accounting by thread id.
    while (w->tid.load() == 0) std::this_thread::yield();
    ws.push_back(w.get());
  }
  sampler_ = std::make_unique<LoadSampler>(*rt_, std::move(ws));
  sampler_->start();
  admin_->start();
  health_->start();
  wait_signals();
  spdlog::info("levee listening: {} worker(s), admin on {}:{}, host CPU from {}", workers_.size(), cfg_->admin.address,
               cfg_->admin.port, sampler_->host_cpu_source());
  for (const auto& rl : rt_->listeners) {
    const auto& l = rl->cfg;
    spdlog::info("listener {} on {}:{} ({} mode)", l.name, l.address, l.port, rl->batch() ? "batch" : "normal");
    if (!rl->batch() && rl->uses_fuse() && l.fuse.connections_per_endpoint < workers_.size())
      spdlog::warn("listener {}: fuse routes split {} connection(s) per endpoint across {} workers: "
                   "some workers get none and refuse fuse traffic; raise fuse.connections_per_endpoint "
                   "or use a batch listener",
                   l.name, l.fuse.connections_per_endpoint, workers_.size());
  }
  notify_ready("levee listening");
}

int Server::run() {
  admin_ctx_.run();
  sampler_->stop();
  for (auto& w : workers_) w->stop();
  for (auto& w : workers_) w->join();
  if (fleet_) fleet_->stop();  // pushes the last usage and leaves the fleet
  log_->stop();
  return exit_code_;
}

void Server::wait_signals() {
  signals_.async_wait([this](error_code ec, int sig) {
    if (ec) return;
    on_signal(sig);
    wait_signals();
  });
}

void Server::on_signal(int sig) {
  switch (sig) {
    case SIGUSR1:
      spdlog::info("SIGUSR1: reopening the access log");
      log_->reopen();
      return;
    case SIGHUP:
      spdlog::warn("SIGHUP: configuration reload is not supported by this build; still running the old one");
      return;
    default:
      spdlog::info("signal {}: draining (up to {} ms)", sig,
                   std::chrono::duration_cast<std::chrono::milliseconds>(cfg_->drain_timeout).count());
      begin_drain();
  }
}

void Server::begin_drain() {
  if (draining_) return;
  draining_ = true;
  notify_stopping();
  rt_->draining.store(true);
  drain_deadline_ = proxy::now() + cfg_->drain_timeout;
  for (auto& w : workers_) w->begin_drain();
  check_drained();
}

void Server::check_drained() {
  std::uint32_t active = 0;
  for (auto& w : workers_) active += w->connections.load();
  if (active == 0 || proxy::now() >= drain_deadline_) {
    if (active > 0) spdlog::warn("drain timeout: closing {} connection(s)", active);
    else spdlog::info("drained");
    admin_->close();
    admin_ctx_.stop();
    return;
  }
  drain_timer_.expires_after(std::chrono::milliseconds(20));
  drain_timer_.async_wait([this](error_code ec) {
    if (!ec) check_drained();
  });
}

std::pair<bool, std::string> Server::ready() const {
  if (rt_->draining.load()) return {false, "draining\n"};
  if (!cfg_->admin.ready_requires_endpoints) return {true, "ready\n"};
  // Every cluster needs an endpoint that is healthy, not ejected, and has
  // an address to connect to.
  for (const auto& c : rt_->clusters) {
    bool any = false;
    for (const auto& e : c->endpoints)
      any = any || (e->effective_weight.load(std::memory_order_relaxed) > 0 && e->resolved());
    if (!any) return {false, "no healthy endpoint in cluster " + c->cfg.name + "\n"};
  }
  return {true, "ready\n"};
}

std::string Server::clusters_json() const {
  std::ostringstream o;
  o << "{\"clusters\":[";
  const auto t = proxy::now();
  for (std::size_t i = 0; i < rt_->clusters.size(); ++i) {
    auto& c = *rt_->clusters[i];
    const auto s = c.snapshot(t);
    if (i) o << ',';
    o << "{\"name\":";
    json_string(o, c.cfg.name);
    o << ",\"in_flight\":" << s.in_flight << ",\"limit\":" << s.limit << ",\"queue_depth\":" << s.depth
      << ",\"queue_time_ms\":" << s.queue_time_s * 1e3 << ",\"drain_rate\":" << s.drain_rate
      << ",\"overloaded\":" << (s.overloaded ? "true" : "false") << ",\"backend_utilization\":" << s.utilization
      << ",\"endpoints\":[";
    for (std::size_t k = 0; k < c.endpoints.size(); ++k) {
      const auto& e = *c.endpoints[k];
      if (k) o << ',';
      o << "{\"address\":";
      json_string(o, e.label);
      o << ",\"healthy\":" << (e.healthy.load() ? "true" : "false")
        << ",\"ejected\":" << (e.ejected.load() ? "true" : "false") << ",\"weight\":" << e.weight
        << ",\"effective_weight\":" << e.effective_weight.load() << ",\"outstanding\":" << e.outstanding.load()
        << ",\"utilization\":" << e.utilization.load() << '}';
    }
    o << "]}";
  }
  o << "],\"executor_load\":" << rt_->executor_load.load()
    << ",\"draining\":" << (rt_->draining.load() ? "true" : "false") << "}\n";
  return o.str();
}

}  // namespace levee::control
