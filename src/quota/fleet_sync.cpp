#include "quota/fleet_sync.hpp"

#include <pthread.h>
#include <spdlog/spdlog.h>
#include <unistd.h>

#include <algorithm>
#include <cstdio>
#include <random>

namespace levee::quota {

namespace {

using Clock = std::chrono::steady_clock;
using core::SyncError;
using core::SyncState;

std::string default_instance_id() {
  char host[256] = {};
  if (::gethostname(host, sizeof host - 1) != 0) std::snprintf(host, sizeof host, "levee");
  std::random_device rd;  // the shell may use entropy; core never does
  char buf[320];
  std::snprintf(buf, sizeof buf, "%s-%d-%08x", host, static_cast<int>(::getpid()), rd());
  return buf;
}

core::FleetQuotaConfig core_config(const config::QuotaSyncConfig& c, core::Duration window) {
  core::FleetQuotaConfig f;
  f.interval = c.interval;
  f.bucket = c.bucket;
  f.window = window;
  f.timeout = c.redis.timeout;
  f.member_ttl = c.member_ttl;
  f.max_instances = c.max_instances;
  f.key_prefix = c.key_prefix;
  f.fleet = c.fleet;
  f.instance_id = c.instance_id.empty() ? default_instance_id() : c.instance_id;
  return f;
}

SyncError to_sync_error(LinkError e) {
  switch (e) {
    case LinkError::Timeout: return SyncError::Timeout;
    case LinkError::Protocol: return SyncError::Protocol;
    default: return SyncError::Connect;
  }
}

bool starts_with(const std::string& s, std::string_view p) { return s.compare(0, p.size(), p) == 0; }

// "MOVED 3999 127.0.0.1:6381" / "ASK 3999 127.0.0.1:6381"; an empty host
// means the host of the node that answered.
bool parse_redirect(const std::string& err, const std::string& current_peer, std::string& host, std::uint16_t& port) {
  auto sp = err.rfind(' ');
  if (sp == std::string::npos) return false;
  std::string addr = err.substr(sp + 1);
  auto colon = addr.rfind(':');
  if (colon == std::string::npos) return false;
  host = addr.substr(0, colon);
  if (host.empty()) host = current_peer.substr(0, current_peer.rfind(':'));
  if (host.size() > 2 && host.front() == '[') host = host.substr(1, host.size() - 2);
  int p = std::atoi(addr.c_str() + colon + 1);
  if (p <= 0 || p > 65535) return false;
  port = static_cast<std::uint16_t>(p);
  return true;
}

// Replies that say this connection is not to a usable master any more
// (a demoted master after failover, a replica, a node still loading): the
// next sync connects afresh (and asks Sentinel again).
bool not_master(const core::RedisReply& r) {
  return r.type == core::RedisReply::Type::Error &&
         (starts_with(r.str, "READONLY") || starts_with(r.str, "MASTERDOWN") || starts_with(r.str, "LOADING") ||
          starts_with(r.str, "CLUSTERDOWN") || starts_with(r.str, "TRYAGAIN"));
}

}  // namespace

FleetSync::FleetSync(const config::QuotaSyncConfig& cfg, core::Duration window, core::FleetLayout layout,
                     Hooks hooks)
    : cfg_(cfg),
      layout_(layout),
      hooks_(std::move(hooks)),
      tls_(cfg.redis.tls.enabled ? std::make_unique<TlsContext>(cfg.redis.tls) : nullptr),
      link_(tls_.get()),
      fleet_(core_config(cfg, window), std::move(layout), mono()),
      errors_("levee_quota_sync_errors_total", "Fleet quota syncs that failed, by kind",
              {{"kind", {"connect", "timeout", "protocol", "reply"}}}, 1),
      commands_("levee_quota_sync_commands_total", "Redis commands sent by the fleet quota sync", {}, 1),
      latency_("levee_quota_sync_latency_seconds", "Fleet quota sync round trips that succeeded (connect included)",
               {}, metrics::latency_buckets(), 1) {
  fleet_usage_.assign(layout_.clusters.size() * layout_.tenants.size(), 0.0);
  publish();  // Starting: the fallback limit until the first answer
}

FleetSync::~FleetSync() { stop(); }

void FleetSync::start() {
  std::lock_guard lk(mu_);
  if (started_) return;
  started_ = true;
  thread_ = std::thread([this] { run(); });
}

void FleetSync::stop() {
  {
    std::lock_guard lk(mu_);
    if (!started_ || stopping_) return;
    stopping_ = true;
  }
  cv_.notify_all();
  if (thread_.joinable()) thread_.join();
}

core::TimePoint FleetSync::mono() const {
  // The same timeline as the request path's (proxy/clock.hpp): steady_clock.
  return core::TimePoint{std::chrono::duration_cast<core::Duration>(Clock::now().time_since_epoch())};
}

std::int64_t FleetSync::wall_ms() const {
  return std::chrono::duration_cast<std::chrono::milliseconds>(std::chrono::system_clock::now().time_since_epoch())
      .count();
}

void FleetSync::run() {
  pthread_setname_np(pthread_self(), "levee-quota");
  auto next = Clock::now();
  for (;;) {
    {
      std::unique_lock lk(mu_);
      cv_.wait_until(lk, next, [this] { return stopping_; });
      if (stopping_) break;
    }
    const auto t0 = Clock::now();
    sync_once();
    // A slow sync delays the next one; it never makes two in a row.
    next = std::max(t0 + cfg_.interval, Clock::now());
  }
  // Leaving: the last usage, and out of the fleet size at once.
  const auto wall = wall_ms();
  for (std::size_t c = 0; c < layout_.clusters.size(); ++c) {
    deltas_.assign(layout_.tenants.size(), PerCriticality{});
    hooks_.take(c, deltas_);
    fleet_.add_local(c, deltas_, wall);
  }
  const auto& cmds = fleet_.prepare_leave(wall);
  LinkResult r;
  if (!link_.connected()) r = connect(Clock::now() + cfg_.redis.connect_timeout);
  if (r) r = link_.roundtrip(cmds, replies_, Clock::now() + cfg_.redis.timeout);
  if (r) fleet_.complete(replies_, mono());
  link_.close();
}

LinkResult FleetSync::handshake(Deadline deadline, bool check_master) {
  std::vector<core::RedisCommand> cmds;
  const auto& rc = cfg_.redis;
  if (!rc.password.empty()) {
    if (rc.username.empty()) cmds.push_back({"AUTH", rc.password});
    else cmds.push_back({"AUTH", rc.username, rc.password});
  }
  if (rc.database != 0) cmds.push_back({"SELECT", std::to_string(rc.database)});
  if (check_master) cmds.push_back({"ROLE"});
  if (cmds.empty()) return {};
  commands_.inc(0, 0, cmds.size());
  std::vector<core::RedisReply> out;
  if (auto r = link_.roundtrip(cmds, out, deadline); !r) return r;
  for (std::size_t i = 0; i < cmds.size(); ++i) {
    const auto& rep = out[i];
    if (cmds[i][0] == "ROLE") {
      if (rep.type != core::RedisReply::Type::Array || rep.elements.empty() || rep.elements[0].str != "master") {
        std::string role = rep.elements.empty() ? "?" : rep.elements[0].str;
        link_.close();
        return {LinkError::Connect, link_.peer() + ": not the master (role " + role + ")"};
      }
    } else if (rep.type != core::RedisReply::Type::Status) {
      link_.close();
      return {LinkError::Connect, link_.peer() + ": " + cmds[i][0] + " failed: " + rep.str};
    }
  }
  return {};
}

LinkResult FleetSync::connect_to(const std::string& host, std::uint16_t port, Deadline deadline, bool check_master) {
  if (auto r = link_.connect(host, port, deadline); !r) return r;
  return handshake(deadline, check_master);
}

LinkResult FleetSync::connect(Deadline deadline) {
  const auto& rc = cfg_.redis;
  const std::size_t n = rc.addresses.size();
  LinkResult last{LinkError::Connect, "no address configured"};
  if (rc.mode == config::RedisConfig::Mode::Standalone) {
    const auto& a = rc.addresses.front();
    return connect_to(a.host, a.port, deadline, false);
  }
  if (rc.mode == config::RedisConfig::Mode::Cluster) {
    // Any node will do: the first answer's MOVED says which one owns the slot.
    for (std::size_t k = 0; k < n && Clock::now() < deadline; ++k) {
      const auto& a = rc.addresses[(next_server_ + k) % n];
      last = connect_to(a.host, a.port, deadline, false);
      if (last) {
        next_server_ = (next_server_ + k) % n;
        return last;
      }
    }
    next_server_ = (next_server_ + 1) % n;
    return last;
  }
  // Sentinel: ask each sentinel in turn where the master is, then check
  // that what answers there says it is the master.
  RedisLink sentinel(tls_.get());
  for (std::size_t k = 0; k < n && Clock::now() < deadline; ++k) {
    const auto& a = rc.addresses[(next_server_ + k) % n];
    if (auto r = sentinel.connect(a.host, a.port, deadline); !r) {
      last = r;
      continue;
    }
    std::vector<core::RedisCommand> cmds;
    if (!rc.sentinel_password.empty()) {
      if (rc.sentinel_username.empty()) cmds.push_back({"AUTH", rc.sentinel_password});
      else cmds.push_back({"AUTH", rc.sentinel_username, rc.sentinel_password});
    }
    cmds.push_back({"SENTINEL", "get-master-addr-by-name", rc.master_name});
    commands_.inc(0, 0, cmds.size());
    std::vector<core::RedisReply> out;
    auto r = sentinel.roundtrip(cmds, out, deadline);
    sentinel.close();
    if (!r) {
      last = r;
      continue;
    }
    const auto& m = out.back();
    if (m.type != core::RedisReply::Type::Array || m.elements.size() != 2) {
      last = {LinkError::Connect, sentinel.peer() + ": no master named '" + rc.master_name + "'"};
      continue;
    }
    const std::string& host = m.elements[0].str;
    int port = std::atoi(m.elements[1].str.c_str());
    if (port <= 0 || port > 65535) {
      last = {LinkError::Connect, sentinel.peer() + ": bad master address"};
      continue;
    }
    last = connect_to(host, static_cast<std::uint16_t>(port), deadline, true);
    if (last) {
      next_server_ = (next_server_ + k) % n;
      if (master_ != link_.peer()) {
        spdlog::info("quota sync: Sentinel {} names {} as master of '{}'", sentinel.peer(), link_.peer(),
                     rc.master_name);
        master_ = link_.peer();
      }
      return last;
    }
  }
  next_server_ = (next_server_ + 1) % std::max<std::size_t>(1, n);
  return last;
}

LinkResult FleetSync::follow_redirects(const std::vector<core::RedisCommand>& cmds,
                                       std::vector<core::RedisReply>& replies, Deadline deadline) {
  using T = core::RedisReply::Type;
  std::string host;
  std::uint16_t port = 0;
  // Only a Redis Cluster node redirects. From any other server a redirect
  // is not followed: it would take this instance, with its AUTH, wherever
  // that server says.
  if (cfg_.redis.mode != config::RedisConfig::Mode::Cluster) {
    for (const auto& r : replies)
      if (r.type == T::Error && (starts_with(r.str, "MOVED ") || starts_with(r.str, "ASK ")))
        return {LinkError::Protocol, "redirect from a server not in cluster mode, not followed: " + r.str};
    return {};
  }
  // MOVED: the slot lives elsewhere and nothing here ran (every key of a
  // sync is in the one slot). Move there for good and send it all again.
  for (const auto& r : replies) {
    if (r.type == T::Error && starts_with(r.str, "MOVED ")) {
      if (!parse_redirect(r.str, link_.peer(), host, port)) return {LinkError::Protocol, "bad redirect: " + r.str};
      if (auto c = connect_to(host, port, deadline, false); !c) return c;
      commands_.inc(0, 0, cmds.size());
      return link_.roundtrip(cmds, replies, deadline);
    }
  }
  // ASK: the slot is migrating; the keys already moved are answered by the
  // target, for this command only, after ASKING.
  std::vector<std::size_t> asked;
  for (std::size_t i = 0; i < replies.size(); ++i)
    if (replies[i].type == T::Error && starts_with(replies[i].str, "ASK ")) asked.push_back(i);
  if (asked.empty()) return {};
  if (!parse_redirect(replies[asked.front()].str, link_.peer(), host, port))
    return {LinkError::Protocol, "bad redirect: " + replies[asked.front()].str};
  RedisLink target(tls_.get());
  if (auto c = target.connect(host, port, deadline); !c) return c;
  std::vector<core::RedisCommand> again;
  if (!cfg_.redis.password.empty()) {
    if (cfg_.redis.username.empty()) again.push_back({"AUTH", cfg_.redis.password});
    else again.push_back({"AUTH", cfg_.redis.username, cfg_.redis.password});
  }
  const std::size_t first = again.size();
  for (auto i : asked) {
    again.push_back({"ASKING"});
    again.push_back(cmds[i]);
  }
  commands_.inc(0, 0, again.size());
  std::vector<core::RedisReply> out;
  if (auto r = target.roundtrip(again, out, deadline); !r) return r;
  for (std::size_t k = 0; k < asked.size(); ++k) replies[asked[k]] = std::move(out[first + 2 * k + 1]);
  return {};
}

void FleetSync::record_error(SyncError e, const std::string& what) {
  errors_.inc(0, static_cast<std::size_t>(e));
  last_error_ = std::string(core::to_string(e)) + ": " + what;
}

void FleetSync::sync_once() {
  const auto wall = wall_ms();
  for (std::size_t c = 0; c < layout_.clusters.size(); ++c) {
    deltas_.assign(layout_.tenants.size(), PerCriticality{});
    hooks_.take(c, deltas_);
    fleet_.add_local(c, deltas_, wall);
  }
  const auto& cmds = fleet_.prepare(wall);
  const auto start = Clock::now();
  LinkResult r;
  if (!link_.connected()) r = connect(start + cfg_.redis.connect_timeout);
  if (r) {
    commands_.inc(0, 0, cmds.size());
    // The sync's own deadline starts once connected: a reconnect has its
    // own budget (connect_timeout), the pipeline has `timeout`.
    const auto deadline = Clock::now() + cfg_.redis.timeout;
    r = link_.roundtrip(cmds, replies_, deadline);
    if (r) r = follow_redirects(cmds, replies_, deadline);
  }
  if (!r) {
    link_.close();
    const auto e = to_sync_error(r.error);
    record_error(e, r.what);
    fleet_.fail(e, mono());
  } else {
    const std::uint64_t resets = fleet_.resets();
    bool stale_master = std::any_of(replies_.begin(), replies_.end(), not_master);
    const bool completed = fleet_.complete(replies_, mono());
    if (completed) {
      latency_.observe(0, 0, std::chrono::duration<double>(Clock::now() - start).count());
    } else {
      std::string what = "unexpected answer";
      for (const auto& rep : replies_)
        if (rep.type == core::RedisReply::Type::Error) {
          what = rep.str;
          break;
        }
      record_error(SyncError::Reply, link_.peer() + ": " + what);
    }
    // A stale master, or answers that did not fit the commands (which may
    // be a connection out of step): the next sync starts on a new one.
    if (stale_master || !completed) link_.close();
    if (fleet_.resets() != resets) {
      spdlog::warn("quota sync: {} does not hold the fleet's data any more (restarted empty or failed over): "
                   "pushing this instance's window again",
                   link_.peer());
      // The core holds the fallback limit until every instance has pushed again.
      last_error_ = link_.peer() + ": lost the fleet's data; waiting for the windows to be pushed again";
    }
  }
  publish();
}

void FleetSync::publish() {
  const auto t = mono();
  for (std::size_t c = 0; c < layout_.clusters.size(); ++c) {
    fleet_.view(c, view_);
    hooks_.apply(c, view_);  // swaps: view_ holds the previous view afterwards
  }
  const int s = static_cast<int>(fleet_.state());
  const int was = state_.exchange(s);
  fleet_size_.store(fleet_.fleet_size(), std::memory_order_relaxed);
  resets_.store(fleet_.resets(), std::memory_order_relaxed);
  fallback_seconds_.store(core::to_seconds(fleet_.time_in_fallback(t)), std::memory_order_relaxed);
  if (fleet_.state() == SyncState::Synced) {
    std::lock_guard lk(usage_mu_);
    for (std::size_t c = 0; c < layout_.clusters.size(); ++c)
      for (std::size_t k = 0; k < layout_.tenants.size(); ++k)
        fleet_usage_[c * layout_.tenants.size() + k] = fleet_.fleet_usage(c, static_cast<core::TenantId>(k));
  }
  if (s == was) return;
  // One line per change of state.
  if (fleet_.state() == SyncState::Fallback)
    spdlog::warn("levee_quota_sync_state: fallback (was {}): {}; enforcing quota / {} locally",
                 core::to_string(static_cast<SyncState>(was)), last_error_, fleet_.fallback_divisor());
  else if (fleet_.state() == SyncState::Synced)
    spdlog::info("levee_quota_sync_state: synced (was {}): {} instance(s) through {}",
                 core::to_string(static_cast<SyncState>(was)), fleet_.fleet_size(), link_.peer());
}

void FleetSync::register_metrics(metrics::Registry& r) {
  using metrics::sample;
  r.add(&errors_);
  r.add(&commands_);
  r.add(&latency_);
  r.add({"levee_quota_sync_state", "Fleet quota sync: 1 for the state it is in", [this](auto& out) {
           const int s = state_.load(std::memory_order_relaxed);
           for (int k = 0; k < 3; ++k)
             out.push_back(sample({{"state", std::string(core::to_string(static_cast<SyncState>(k)))}}, s == k ? 1 : 0));
         }});
  metrics::GaugeSet fallback{"levee_quota_sync_fallback_seconds_total",
                             "Time the fleet quota sync has spent in fallback (quota / fleet size, locally)",
                             [this](auto& out) { out.push_back(sample({}, fallback_seconds_.load(), true)); }};
  fallback.type = prometheus::MetricType::Counter;
  r.add(std::move(fallback));
  metrics::GaugeSet resets{"levee_quota_sync_resets_total",
                           "Times Redis was found without the fleet's data (restart, failover) and the window was pushed again",
                           [this](auto& out) { out.push_back(sample({}, static_cast<double>(resets_.load()), true)); }};
  resets.type = prometheus::MetricType::Counter;
  r.add(std::move(resets));
  r.add({"levee_quota_fleet_size", "levee instances registered at the last sync",
         [this](auto& out) { out.push_back(sample({}, fleet_size_.load())); }});
  r.add({"levee_quota_fleet_usage_cpu_seconds_per_second", "Tenant CPU usage of the whole fleet at the last sync",
         [this](auto& out) {
           std::lock_guard lk(usage_mu_);
           for (std::size_t c = 0; c < layout_.clusters.size(); ++c)
             for (std::size_t k = 0; k < layout_.tenants.size(); ++k)
               out.push_back(sample({{"cluster", layout_.clusters[c]}, {"tenant", layout_.tenants[k]}},
                                    fleet_usage_[c * layout_.tenants.size() + k]));
         }});
}

}  // namespace levee::quota
