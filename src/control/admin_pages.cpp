// What the admin API shows: readiness, the clusters' state, the running
// configuration, build and start information, and the shedding history.
// On the admin thread; each page reads the current Runtime.
#include <sstream>

#include "config/dump.hpp"
#include "control/server.hpp"
#include "metrics/process.hpp"
#include "proxy/cluster.hpp"
#include "proxy/worker.hpp"

namespace levee::control {

namespace {

void json_string(std::ostringstream& o, std::string_view s) {
  o << '"';
  for (char c : s) {
    const auto u = static_cast<unsigned char>(c);
    if (c == '"' || c == '\\') {
      o << '\\' << c;
    } else if (u < 0x20) {
      static constexpr char hex[] = "0123456789abcdef";
      o << "\\u00" << hex[u >> 4] << hex[u & 0xf];
    } else {
      o << c;
    }
  }
  o << '"';
}

const char* admin_name(std::uint8_t s) {
  switch (static_cast<core::AdminState>(s)) {
    case core::AdminState::Enabled: return "enabled";
    case core::AdminState::Draining: return "draining";
    case core::AdminState::Disabled: return "disabled";
  }
  return "?";
}

const char* mode_name(core::GateMode m) {
  switch (m) {
    case core::GateMode::Off: return "off";
    case core::GateMode::DryRun: return "dry_run";
    case core::GateMode::Enforce: return "enforce";
  }
  return "?";
}

}  // namespace

std::pair<bool, std::string> Server::ready() const {
  if (process_->not_ready.load()) return {false, "draining\n"};
  if (!cfg_->admin.ready_requires_endpoints) return {true, "ready\n"};
  // Every cluster needs an endpoint that is healthy, not ejected, in
  // rotation, and has an address to connect to.
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
  o << "{\"generation\":" << rt_->generation << ",\"clusters\":[";
  const auto t = proxy::now();
  for (std::size_t i = 0; i < rt_->clusters.size(); ++i) {
    auto& c = *rt_->clusters[i];
    const auto s = c.snapshot(t);
    const auto modes = c.modes();
    if (i) o << ',';
    o << "{\"name\":";
    json_string(o, c.cfg.name);
    o << ",\"in_flight\":" << s.in_flight << ",\"limit\":" << s.limit << ",\"queue_depth\":" << s.depth
      << ",\"queue_time_ms\":" << s.queue_time_s * 1e3 << ",\"drain_rate\":" << s.drain_rate
      << ",\"overloaded\":" << (s.overloaded ? "true" : "false") << ",\"backend_utilization\":" << s.utilization
      << ",\"retry_budget\":" << s.retry_budget << ",\"throttle\":\"" << mode_name(modes[0]) << "\",\"quota\":\""
      << mode_name(modes[1]) << "\",\"queue\":\"" << mode_name(modes[2]) << '"';
    // Per criticality: the throttle's rejection probability and the queue.
    const auto by_crit = [&o](std::string_view key, const auto& values) {
      o << ",\"" << key << "\":{";
      for (std::size_t k = 0; k < core::kAllCriticalities.size(); ++k) {
        const auto crit = core::kAllCriticalities[k];
        if (k) o << ',';
        json_string(o, core::to_string(crit));
        o << ':' << values[core::index(crit)];
      }
      o << '}';
    };
    by_crit("throttle_probability", s.throttle_p);
    by_crit("queue_by_criticality", s.depth_by_crit);
    o << ",\"tenants\":[";
    for (std::size_t id = 0; id < s.tenant_usage.size(); ++id) {
      if (id) o << ',';
      o << "{\"name\":";
      json_string(o, rt_->tenants.name(static_cast<core::TenantId>(id)));
      o << ",\"quota\":" << s.tenant_quota[id] << ",\"usage\":" << s.tenant_usage[id];
      by_crit("usage_by_criticality", s.tenant_usage_by_crit[id]);
      o << '}';
    }
    o << "],\"endpoints\":[";
    for (std::size_t k = 0; k < c.endpoints.size(); ++k) {
      const auto& e = *c.endpoints[k];
      if (k) o << ',';
      o << "{\"address\":";
      json_string(o, e.label);
      o << ",\"host\":";
      json_string(o, e.host);
      o << ",\"healthy\":" << (e.healthy.load() ? "true" : "false")
        << ",\"ejected\":" << (e.ejected.load() ? "true" : "false") << ",\"admin\":\"" << admin_name(e.admin.load())
        << "\",\"weight\":" << e.weight << ",\"base_weight\":" << e.base_weight.load()
        << ",\"effective_weight\":" << e.effective_weight.load() << ",\"outstanding\":" << e.outstanding.load()
        << ",\"utilization\":" << e.utilization.load() << '}';
    }
    o << "]}";
  }
  o << "],\"executor_load\":" << rt_->executor_load.load()
    << ",\"draining\":" << (rt_->draining.load() ? "true" : "false")
    << ",\"ready\":" << (ready().first ? "true" : "false") << "}\n";
  return o.str();
}

std::string Server::stats_json() const {
  // The shedding history, per second, oldest first.
  std::ostringstream o;
  const auto& h = history_;
  o << "{\"interval_s\":1,\"reasons\":[";
  for (std::size_t i = 0; i < h.reasons.size(); ++i) {
    if (i) o << ',';
    json_string(o, h.reasons[i]);
  }
  o << "],\"criticalities\":[";
  for (std::size_t i = 0; i < core::kAllCriticalities.size(); ++i) {
    if (i) o << ',';
    json_string(o, core::to_string(core::kAllCriticalities[i]));
  }
  o << "],\"rejected_by_reason\":[";
  for (std::size_t p = 0; p < h.by_reason.size(); ++p) {
    if (p) o << ',';
    o << '[';
    for (std::size_t r = 0; r < h.by_reason[p].size(); ++r) o << (r ? "," : "") << h.by_reason[p][r];
    o << ']';
  }
  o << "],\"rejected_by_criticality\":[";
  for (std::size_t p = 0; p < h.by_criticality.size(); ++p) {
    if (p) o << ',';
    o << '[';
    // Columns in the order of "criticalities" (most critical first).
    for (std::size_t k = 0; k < core::kAllCriticalities.size(); ++k)
      o << (k ? "," : "") << h.by_criticality[p][core::index(core::kAllCriticalities[k])];
    o << ']';
  }
  o << "],\"admitted\":[";
  for (std::size_t p = 0; p < h.admitted.size(); ++p) o << (p ? "," : "") << h.admitted[p];
  o << "]}\n";
  return o.str();
}

std::string Server::info_json() const {
  const auto b = metrics::build_info();
  std::ostringstream o;
  o << "{\"version\":";
  json_string(o, b.version);
  o << ",\"commit\":";
  json_string(o, b.commit);
  o << ",\"build_type\":";
  json_string(o, b.build_type);
  o << ",\"allocator\":";
  json_string(o, b.allocator);
  o << ",\"started_at\":";
  json_string(o, started_at_);
  o << ",\"start_time_seconds\":" << static_cast<std::uint64_t>(started_unix_) << ",\"config_file\":";
  json_string(o, cfg_->source);
  o << ",\"config_sha256\":";
  json_string(o, config_hash_);
  o << ",\"generation\":" << rt_->generation << ",\"last_reload_success_seconds\":"
    << static_cast<std::uint64_t>(last_reload_ok_) << ",\"workers\":" << workers_.size()
    << ",\"draining\":" << (drain_ != Drain::None ? "true" : "false") << "}\n";
  return o.str();
}

std::string Server::config_json() const { return config::to_json(*cfg_); }

}  // namespace levee::control
