// Building and installing Runtimes: a reload of the file, a rebuild of the
// same configuration (a hostname's addresses changed, an operator's policy
// override), and the metrics across them.
//
// A reload, on the admin thread:
//   1. read and load the file: any error keeps the running configuration;
//   2. refuse what only a restart can change (restart_only), with the place
//      of the key in the file;
//   3. build the new Runtime beside the old one: clusters carry their
//      admission state and endpoint state, listeners their slots;
//   4. bind the listening sockets new to some worker (a bind error, a port
//      in use, fails the reload and closes what was bound);
//   5. hand the Runtime to every worker on its own thread (Worker::apply),
//      and to the sampler, the health checks, the access log, the resolver.
// The old Runtime stays alive while requests that began under it run; its
// counters are summed into every scrape, then folded into the current
// tables once nothing uses it (retire_tick, once a second).
#include <boost/asio/post.hpp>
#include <boost/asio/steady_timer.hpp>
#include <boost/asio/use_awaitable.hpp>
#include <openssl/evp.h>
#include <spdlog/spdlog.h>
#include <unistd.h>

#include <fstream>
#include <sstream>

#include "config/dump.hpp"
#include "config/to_core.hpp"
#include "control/registry.hpp"
#include "control/server.hpp"
#include "control/systemd_notify.hpp"
#include "proxy/cluster.hpp"
#include "proxy/listener.hpp"
#include "proxy/tls_context.hpp"
#include "proxy/worker.hpp"

namespace levee::control {

namespace asio = boost::asio;

namespace {


/// "file:line:col: key: message", the key placed in the file's text.
std::string placed(const std::string& file, const std::string& text, const std::string& key, std::string message) {
  config::Error e;
  e.file = file;
  const auto [line, col] = config::locate(text, key);
  e.line = line;
  e.column = col;
  e.path = key;
  e.message = std::move(message);
  return e.format();
}

std::vector<std::string> cluster_names(const config::Config& c) {
  std::vector<std::string> v;
  for (const auto& cl : c.clusters) v.push_back(cl.name);
  return v;
}

void add_tables(metrics::Registry& r, const proxy::RequestMetrics& m) {
  for (const auto* t : m.counter_tables()) r.add(t);
  for (const auto* h : m.histogram_tables()) r.add(h);
}

void absorb_tables(proxy::RequestMetrics& into, const proxy::RequestMetrics& old) { into.absorb(old); }

}  // namespace

std::shared_ptr<proxy::Runtime> Server::build(std::shared_ptr<const config::Config> cfg,
                                              const proxy::PolicyOverrides& overrides) const {
  return std::make_shared<proxy::Runtime>(std::move(cfg), workers_.size(), process_, rt_.get(),
                                          resolver_->discovered(), overrides);
}

std::vector<std::string> Server::restart_only(const config::Config& next, const std::string& text) const {
  std::vector<std::string> errors;
  const std::string& file = next.source;
  auto refuse = [&](const std::string& key, const std::string& what) {
    errors.push_back(placed(file, text, key, what + " changes only on restart (the running value is kept)"));
  };
  if (next.workers != cfg_->workers) refuse("workers", "the number of workers");
  const auto& a = next.admin;
  const auto& b = cfg_->admin;
  if (a.address != b.address) refuse("admin.address", "the admin address");
  if (a.port != b.port) refuse("admin.port", "the admin port");
  if (a.header_timeout != b.header_timeout || a.idle_timeout != b.idle_timeout ||
      a.max_connections != b.max_connections || a.max_connections_per_source != b.max_connections_per_source)
    refuse("admin", "the admin listener's timeouts and connection caps");
  // (Secrets are redacted in the JSON: compared on their own.)
  const auto& nr = next.quota_sync.redis;
  const auto& cr = cfg_->quota_sync.redis;
  if (config::section_json(next, "quota_sync") != config::section_json(*cfg_, "quota_sync") ||
      nr.password != cr.password || nr.sentinel_password != cr.sentinel_password)
    refuse("quota_sync", "the fleet quota sync");
  else if (cfg_->quota_sync.enabled) {
    // The sync's layout is indexed by cluster and tenant.
    if (cluster_names(next) != cluster_names(*cfg_)) refuse("clusters", "with quota_sync, the set of clusters");
    if (config::tenant_table(next).names() != rt_->tenants.names())
      refuse("tenants", "with quota_sync, the set of tenants");
  }
  return errors;
}

bool Server::bind_new(const proxy::Runtime& next, Bound& bound, std::vector<std::string>& errors,
                      const std::string& text) const {
  bound.assign(workers_.size(), {});
  auto close_all = [&] {
    for (auto& per : bound)
      for (auto& [slot, fd] : per) ::close(fd);
    bound.assign(workers_.size(), {});
  };
  for (std::size_t li = 0; li < next.listeners.size(); ++li) {
    const auto& l = *next.listeners[li];
    const proxy::Listener* was = rt_->listener_in_slot(l.slot->id);
    for (std::size_t wi = 0; wi < workers_.size(); ++wi) {
      const auto& w = *workers_[wi];
      if (!w.serves(l)) continue;
      if (was && w.serves(*was)) continue;  // this worker keeps its socket
      try {
        bound[wi].emplace_back(l.slot->id, proxy::bind_listener(l.cfg));
      } catch (const std::system_error& e) {
        errors.push_back(placed(next.cfg->source, text, "listeners[" + std::to_string(li) + "]", e.what()));
        close_all();
        return false;
      }
    }
  }
  return true;
}

void Server::install(std::shared_ptr<proxy::Runtime> next, Bound bound) {
  std::shared_ptr<proxy::Runtime> old = std::exchange(rt_, next);
  // Nothing can fail from here: the new listeners' ticket keys take effect.
  for (const auto& l : next->listeners)
    if (l->tls) l->tls->adopt();
  for (std::size_t i = 0; i < workers_.size(); ++i) {
    proxy::Worker* w = workers_[i].get();
    asio::post(w->ctx, [w, next, b = std::move(bound[i])]() mutable { w->apply(next, std::move(b)); });
  }
  for (auto& c : old->clusters) c->retire();
  if (sampler_) sampler_->set_runtime(next);
  health_->start(next);
  log_->reconfigure(next->cfg->access_log);
  resolver_->watch(*next->cfg);
  if (fleet_rt_) {
    std::lock_guard lk(fleet_rt_->first);
    fleet_rt_->second = next;
  }
  // The old Runtime's counters, still written by its requests in flight,
  // are summed into scrapes until they are folded in.
  auto r = std::make_unique<metrics::Registry>();
  add_tables(*r, *old->metrics);
  retired_.push_back(std::move(old));
  retired_registries_.push_back(std::move(r));
  build_registry();
}

Server::ReloadResult Server::reload(std::string_view why) {
  ReloadResult res;
  const std::string file = cfg_->source;
  auto fail = [&](std::vector<std::string> errors) {
    res.errors = std::move(errors);
    for (const auto& e : res.errors) spdlog::error("reload ({}): {}", why, e);
    spdlog::error("reload ({}): {} error(s); still running the previous configuration (generation {})", why,
                  res.errors.size(), rt_->generation);
    reloads_.inc(0, reloads_.index({1}));
    res.generation = rt_->generation;
    return res;
  };
  if (exiting_) return fail({file + ": levee is shutting down"});
  // systemd (Type=notify) shows the reload until READY=1 comes again.
  notify_reloading();
  struct Ready {
    ~Ready() { notify_ready("levee listening"); }
  } ready_again;
  std::string text;
  {
    std::ifstream f(file, std::ios::binary);
    if (!f) return fail({file + ": cannot read the configuration file"});
    std::ostringstream o;
    o << f.rdbuf();
    text = o.str();
  }
  auto loaded = config::load_string(text, file);
  if (!loaded.ok()) {
    std::vector<std::string> errors;
    for (const auto& e : loaded.errors) errors.push_back(e.format());
    if (errors.empty()) errors.push_back(file + ": invalid configuration");
    return fail(std::move(errors));
  }
  auto next_cfg = std::make_shared<config::Config>(std::move(*loaded.config));
  next_cfg->source = file;
  if (workers_override_) next_cfg->workers = workers_override_;
  if (auto errors = restart_only(*next_cfg, text); !errors.empty()) return fail(std::move(errors));
  // The TLS files as they are before the build reads them: a change made
  // while it runs is seen by the next watch.
  std::string stamp = tls_files_stamp(*next_cfg);
  std::shared_ptr<proxy::Runtime> next;
  try {
    // Policies come from the file again: an operator's overrides end here.
    next = build(next_cfg, proxy::PolicyOverrides{});
  } catch (const std::exception& e) {
    return fail({file + ": " + e.what()});
  }
  Bound bound;
  std::vector<std::string> errors;
  if (!bind_new(*next, bound, errors, text)) return fail(std::move(errors));

  // What changed, for the log and the answer.
  std::string summary;
  for (std::string_view key : {"listeners", "clusters", "tenants", "self_protection", "access_log", "headers",
                               "drain_timeout", "drain_delay", "resolver"}) {
    if (config::section_json(*next_cfg, key) != config::section_json(*cfg_, key))
      summary += (summary.empty() ? "" : ", ") + std::string(key);
  }
  if (summary.empty()) summary = "nothing";
  const bool dropped_overrides = !overrides_.empty();
  overrides_ = {};
  cfg_ = next_cfg;
  tls_stamp_ = std::move(stamp);  // the files this build loaded
  tls_pending_.clear();
  text_ = std::move(text);
  config_hash_ = sha256_hex(text_);
  install(next, std::move(bound));
  last_reload_ok_ = std::chrono::duration<double>(std::chrono::system_clock::now().time_since_epoch()).count();
  reloads_.inc(0, reloads_.index({0}));
  spdlog::info("reload ({}): now generation {} (sha256 {}); changed: {}{}", why, rt_->generation,
               config_hash_.substr(0, 12), summary,
               dropped_overrides ? "; runtime policy overrides cleared" : "");
  res.ok = true;
  res.summary = std::move(summary);
  res.generation = rt_->generation;
  return res;
}

void Server::schedule_rebuild(std::string why) {
  if (!rebuild_why_.empty()) rebuild_why_ += "; ";
  rebuild_why_ += why;
  if (rebuild_pending_) return;
  rebuild_pending_ = true;
  asio::post(admin_ctx_, [this] { rebuild(); });
}

void Server::rebuild() {
  rebuild_pending_ = false;
  const std::string why = std::exchange(rebuild_why_, {});
  if (exiting_ || !rt_) return;
  std::shared_ptr<proxy::Runtime> next;
  try {
    next = build(cfg_, overrides_);
  } catch (const std::exception& e) {
    spdlog::error("rebuild ({}): {}", why, e.what());
    rebuilds_.inc(0, rebuilds_.index({1}));
    return;
  }
  Bound bound;
  std::vector<std::string> errors;
  if (!bind_new(*next, bound, errors, text_)) {
    for (const auto& e : errors) spdlog::error("rebuild ({}): {}", why, e);
    rebuilds_.inc(0, rebuilds_.index({1}));
    return;
  }
  install(next, std::move(bound));
  rebuilds_.inc(0, rebuilds_.index({0}));
  spdlog::info("rebuilt ({}): generation {}", why, rt_->generation);
}

void Server::retire_tick() {
  for (std::size_t i = 0; i < retired_.size();) {
    auto& old = retired_[i];
    bool everywhere = true;
    for (auto& w : workers_) everywhere = everywhere && w->applied_generation.load() > old->generation;
    // Only retired_ holds it: no request, fuse or check uses it any more,
    // and nothing can reach it again.
    if (everywhere && old.use_count() == 1) {
      absorb_tables(*rt_->metrics, *old->metrics);
      retired_registries_.erase(retired_registries_.begin() + static_cast<std::ptrdiff_t>(i));
      retired_.erase(retired_.begin() + static_cast<std::ptrdiff_t>(i));
      continue;
    }
    ++i;
  }
}

void Server::build_registry() {
  auto r = std::make_unique<metrics::Registry>();
  register_metrics(*r, rt_, workers_, *log_);
  if (fleet_) fleet_->register_metrics(*r);
  r->add(&reloads_);
  r->add(&rebuilds_);
  r->add(&ticket_rotations_);
  r->add(&actions_);
  r->add({"levee_config_generation", "The running configuration's generation (1 at start, +1 per reload or rebuild)",
          [this](auto& out) { out.push_back(metrics::sample({}, static_cast<double>(rt_->generation))); }});
  r->add({"levee_config_last_reload_success_timestamp_seconds",
          "Unix time of the last successful reload (or of the start)",
          [this](auto& out) { out.push_back(metrics::sample({}, last_reload_ok_)); }});
  r->add({"levee_config_retired_generations", "Replaced configurations still used by requests in flight",
          [this](auto& out) { out.push_back(metrics::sample({}, static_cast<double>(retired_.size()))); }});
  r->add({"levee_ready", "1 while /ready answers 200",
          [this](auto& out) { out.push_back(metrics::sample({}, ready().first ? 1.0 : 0.0)); }});
  r->add({"levee_endpoint_admin_state", "An operator's state of the endpoint (0 enabled, 1 draining, 2 disabled)",
          [this](auto& out) {
            for (auto& c : rt_->clusters)
              for (auto& e : c->endpoints)
                out.push_back(metrics::sample({{"cluster", c->cfg.name}, {"endpoint", e->label}},
                                              static_cast<double>(e->admin.load())));
          }});
  auto resolver_counter = [this](std::string name, std::string help, auto field) {
    metrics::GaugeSet g{std::move(name), std::move(help), [this, field](auto& out) {
                          for (const auto& [k, s] : resolver_->stats())
                            out.push_back(metrics::sample({{"host", k.first + ":" + std::to_string(k.second)}},
                                                          static_cast<double>(s.*field), true));
                        }};
    g.type = prometheus::MetricType::Counter;
    return g;
  };
  r->add(resolver_counter("levee_resolver_lookups_total", "Lookups of a hostname endpoint", &Resolver::Stats::lookups));
  r->add(resolver_counter("levee_resolver_failures_total", "Failed lookups (the last good set is kept)",
                          &Resolver::Stats::failures));
  r->add(resolver_counter("levee_resolver_changes_total", "Lookups whose address set differed from the last",
                          &Resolver::Stats::changes));
  r->add({"levee_resolver_addresses", "Addresses a hostname endpoint resolved to last", [this](auto& out) {
            for (const auto& [k, s] : resolver_->stats())
              out.push_back(metrics::sample({{"host", k.first + ":" + std::to_string(k.second)}},
                                            static_cast<double>(s.addresses)));
          }});
  registry_ = std::move(r);
}

std::string Server::serialize_metrics() const {
  std::vector<const metrics::Registry*> others;
  for (const auto& r : retired_registries_) others.push_back(r.get());
  return registry_->serialize_with(others);
}

asio::awaitable<bool> Server::applied(std::uint64_t generation) {
  asio::steady_timer t(admin_ctx_);
  const auto until = std::chrono::steady_clock::now() + std::chrono::seconds(2);
  for (;;) {
    bool all = true;
    for (auto& w : workers_) all = all && w->applied_generation.load(std::memory_order_acquire) >= generation;
    if (all) co_return true;
    if (std::chrono::steady_clock::now() >= until) co_return false;
    t.expires_after(std::chrono::milliseconds(2));
    co_await t.async_wait(asio::as_tuple(asio::use_awaitable));
  }
}

}  // namespace levee::control
