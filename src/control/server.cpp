#include "control/server.hpp"

#include <openssl/evp.h>
#include <spdlog/spdlog.h>

#include <csignal>
#include <ctime>
#include <system_error>
#include <thread>

#include "control/cpu.hpp"
#include "control/systemd_notify.hpp"
#include "proxy/runtime.hpp"
#include "proxy/tls_context.hpp"
#include "proxy/worker.hpp"

namespace levee::control {

/// The config text's SHA-256 in hex (levee_config_info, /admin/config).
std::string sha256_hex(std::string_view data) {
  unsigned char md[EVP_MAX_MD_SIZE];
  unsigned int n = 0;
  EVP_Digest(data.data(), data.size(), md, &n, EVP_sha256(), nullptr);
  static constexpr char hex[] = "0123456789abcdef";
  std::string out;
  for (unsigned i = 0; i < n; ++i) {
    out += hex[md[i] >> 4];
    out += hex[md[i] & 0xf];
  }
  return out;
}

namespace asio = boost::asio;
using boost::system::error_code;

namespace {


double unix_now() {
  return std::chrono::duration<double>(std::chrono::system_clock::now().time_since_epoch()).count();
}

std::string iso_now() {
  const std::time_t t = std::time(nullptr);
  std::tm tm{};
  gmtime_r(&t, &tm);
  char buf[32];
  std::strftime(buf, sizeof buf, "%Y-%m-%dT%H:%M:%SZ", &tm);
  return buf;
}


}  // namespace

Server::Server(std::shared_ptr<const config::Config> cfg, std::string text, unsigned workers_override)
    : cfg_(std::move(cfg)),
      workers_override_(workers_override),
      text_(std::move(text)),
      config_hash_(sha256_hex(text_)),
      started_at_(iso_now()),
      started_unix_(unix_now()),
      process_(std::make_shared<proxy::ProcessState>()),
      reloads_("levee_config_reloads_total", "Configuration reloads by result (ok: switched over; error: kept the old one)",
               {{"result", {"ok", "error"}}}, 1),
      actions_("levee_admin_actions_total", "Admin actions by action and result",
               {{"action", kAdminActions}, {"result", {"ok", "error"}}}, 1),
      signals_(admin_ctx_, SIGTERM, SIGINT),
      drain_timer_(admin_ctx_),
      delay_timer_(admin_ctx_),
      tick_timer_(admin_ctx_),
      refusal_timer_(admin_ctx_) {
  last_reload_ok_ = started_unix_;
  tls_stamp_ = tls_files_stamp(*cfg_);  // as the Runtime below loads them
  const std::size_t n = cfg_->workers ? cfg_->workers : available_cpus();
  resolver_ = std::make_unique<Resolver>(admin_ctx_, [this] { schedule_rebuild("a hostname's addresses changed"); });
  resolver_->watch(*cfg_);
  rt_ = std::make_shared<proxy::Runtime>(cfg_, n, process_, nullptr, resolver_->discovered(), overrides_);
  for (const auto& l : rt_->listeners)
    if (l->tls) l->tls->adopt();
  log_ = std::make_unique<AccessLog>(cfg_->access_log, n);
  for (std::size_t i = 0; i < n; ++i) workers_.push_back(std::make_unique<proxy::Worker>(i, rt_, log_->shard(i)));
  if (cfg_->quota_sync.enabled) {
    core::FleetLayout layout{{}, rt_->tenants.names()};
    for (auto& c : rt_->clusters) layout.clusters.push_back(c->cfg.name);
    fleet_rt_ = std::make_shared<std::pair<std::mutex, std::shared_ptr<proxy::Runtime>>>();
    fleet_rt_->second = rt_;
    // The sync's thread reaches the current Runtime through fleet_rt_. A
    // reload keeps cluster and tenant names (restart_only), so indices hold.
    auto current = [f = fleet_rt_] {
      std::lock_guard lk(f->first);
      return f->second;
    };
    fleet_ = std::make_unique<quota::FleetSync>(
        cfg_->quota_sync, cfg_->tenants.window, std::move(layout),
        quota::FleetSync::Hooks{[current](std::size_t c, auto& out) { current()->clusters[c]->take_quota_usage(out); },
                                [current](std::size_t c, auto& v) { current()->clusters[c]->set_fleet_view(v); }});
  }
  health_ = std::make_unique<HealthChecker>(admin_ctx_, n);
  admin_ = std::make_unique<AdminServer>(admin_ctx_, cfg_->admin,
                                         [this](const AdminRequest& r) { return admin_request(r); });
  for (std::size_t i = 0; i < core::kReasonCount; ++i) {
    const auto reason = static_cast<core::Reason>(i);
    if (core::is_shed(reason)) history_.reasons.emplace_back(core::to_string(reason));
  }
  build_registry();
  signals_.add(SIGHUP);
  signals_.add(SIGUSR1);
}

Server::~Server() {
  if (fleet_) fleet_->stop();
  if (sampler_) sampler_->stop();
  if (resolver_) resolver_->stop();
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
  sampler_ = std::make_unique<LoadSampler>(rt_, std::move(ws));
  sampler_->start();
  admin_->start();
  health_->start(rt_);
  wait_signals();
  sample_history();
  spdlog::info("levee listening: {} worker(s), admin on {}:{}, host CPU from {}, config {} (sha256 {})", workers_.size(),
               cfg_->admin.address, cfg_->admin.port, sampler_->host_cpu_source(), cfg_->source,
               config_hash_.substr(0, 12));
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
  flush_refusals();  // refusals counted in the last second are not lost at exit
  sampler_->stop();
  resolver_->stop();
  for (auto& w : workers_) w->stop();
  for (auto& w : workers_) w->join();
  if (fleet_) fleet_->stop();  // pushes the last usage and leaves the fleet
  log_->stop();                // writes every line still buffered
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
    case SIGHUP: {
      spdlog::info("SIGHUP: reloading {}", cfg_->source);
      reload("SIGHUP");
      return;
    }
    default:
      spdlog::info("signal {}: draining: /ready fails now, listeners close in {} ms, connections get up to {} ms more",
                   sig, std::chrono::duration_cast<std::chrono::milliseconds>(cfg_->drain_delay).count(),
                   std::chrono::duration_cast<std::chrono::milliseconds>(cfg_->drain_timeout).count());
      begin_drain(true);
  }
}

// --- the drain sequence -------------------------------------------------------
//
//   begin          /ready answers 503 at once; listeners keep accepting and
//                  keep-alive carries on, for drain_delay, so that load
//                  balancers and readiness probes take the instance out
//                  before anything is refused
//   active         answers carry Connection: close and connections end after
//                  them; idle keep-alive connections are closed; on exit
//                  (SIGTERM) the listeners close too, and levee exits 0 once
//                  no connection is left or drain_timeout has passed
//
// POST /admin/drain runs the same without exiting (listeners stay open, so
// nothing is ever refused), and POST /admin/undrain undoes it.

void Server::begin_drain(bool exit) {
  if (exit && !exiting_) {
    exiting_ = true;
    notify_stopping();
  }
  process_->not_ready.store(true);
  if (drain_ == Drain::Active) {
    if (exit) drain_active();  // an admin drain becomes the exit
    return;
  }
  if (drain_ == Drain::Delay) return;  // the delay already runs; it ends in drain_active()
  drain_ = Drain::Delay;
  if (cfg_->drain_delay <= core::Duration::zero()) {
    drain_active();
    return;
  }
  delay_timer_.expires_after(std::chrono::duration_cast<asio::steady_timer::duration>(cfg_->drain_delay));
  delay_timer_.async_wait([this](error_code ec) {
    if (!ec && drain_ == Drain::Delay) drain_active();
  });
}

void Server::drain_active() {
  const bool first = drain_ != Drain::Active;
  drain_ = Drain::Active;
  process_->draining.store(true);
  if (!exiting_) {
    if (first) {
      spdlog::info("draining (admin): answers carry Connection: close; listeners stay open");
      for (auto& w : workers_) w->close_idle_connections();
    }
    return;
  }
  spdlog::info("draining: listeners closed, waiting up to {} ms for {} connection(s)",
               std::chrono::duration_cast<std::chrono::milliseconds>(cfg_->drain_timeout).count(), [this] {
                 std::uint32_t n = 0;
                 for (auto& w : workers_) n += w->connections.load();
                 return n;
               }());
  drain_deadline_ = proxy::now() + cfg_->drain_timeout;
  health_->stop();  // (an admin drain keeps them: the instance still serves)
  for (auto& w : workers_) w->begin_drain();
  check_drained();
}

bool Server::undrain() {
  if (exiting_ || drain_ == Drain::None) return false;
  delay_timer_.cancel();
  drain_ = Drain::None;
  process_->draining.store(false);
  process_->not_ready.store(false);
  spdlog::info("drain undone: ready again");
  return true;
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

// --- once a second ---------------------------------------------------------------

void Server::sample_history() {
  // Shedding by reason and criticality, and admissions, summed over every
  // Runtime whose counters are not folded yet, so a reload is no jump.
  const std::size_t nr = core::kReasonCount;
  std::vector<double> by_reason(nr, 0.0);
  std::array<double, core::kCriticalityCount> by_crit{};
  double admitted = 0;
  auto add = [&](const proxy::Runtime& rt) {
    const auto& rej = rt.metrics->rejected;
    for (std::size_t c = 0; c < rej.cells(); ++c) {
      const std::uint64_t v = rej.value(c);
      if (v == 0) continue;
      const auto l = rej.labels(c);  // cluster, reason, criticality, tenant
      for (std::size_t r = 0; r < nr; ++r)
        if (l[1] == core::to_string(static_cast<core::Reason>(r))) by_reason[r] += static_cast<double>(v);
      if (auto crit = core::parse_criticality(l[2])) by_crit[core::index(*crit)] += static_cast<double>(v);
    }
    const auto& adm = rt.metrics->admitted;
    for (std::size_t c = 0; c < adm.cells(); ++c) admitted += static_cast<double>(adm.value(c));
  };
  add(*rt_);
  for (const auto& r : retired_) add(*r);
  auto& h = history_;
  if (h.primed) {
    std::vector<double> d;
    for (std::size_t r = 0; r < nr; ++r)
      if (core::is_shed(static_cast<core::Reason>(r))) d.push_back(std::max(0.0, by_reason[r] - h.last_reason[r]));
    std::array<double, core::kCriticalityCount> dc{};
    for (std::size_t c = 0; c < dc.size(); ++c) dc[c] = std::max(0.0, by_crit[c] - h.last_crit[c]);
    h.by_reason.push_back(std::move(d));
    h.by_criticality.push_back(dc);
    h.admitted.push_back(std::max(0.0, admitted - h.last_admitted));
    while (h.by_reason.size() > ShedHistory::kPoints) {
      h.by_reason.pop_front();
      h.by_criticality.pop_front();
      h.admitted.pop_front();
    }
  }
  h.last_reason = std::move(by_reason);
  h.last_crit = by_crit;
  h.last_admitted = admitted;
  h.primed = true;
  retire_tick();
  watch_tls_files();
  rotate_ticket_keys();
  tick_timer_.expires_after(std::chrono::seconds(1));
  tick_timer_.async_wait([this](error_code ec) {
    if (!ec) sample_history();
  });
}

}  // namespace levee::control
