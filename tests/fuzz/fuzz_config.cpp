// The config loader, fed arbitrary text as YAML. It must never crash, hang
// or throw, must report every refusal as at least one error, and must never
// accept a configuration that breaks a rule docs/configuration.md states
// (ranges, required keys, references) or that the rest of levee relies on
// (names it writes on the wire are HTTP tokens, indexes are in range).
// check() below restates those rules independently of the loader.
#include <algorithm>
#include <cmath>
#include <cstdint>
#include <set>
#include <string>
#include <string_view>

#include "config/config.hpp"
#include "fuzz_check.hpp"

using namespace levee::config;
using levee::core::Duration;
using namespace std::chrono_literals;

namespace {

const char* g_text = nullptr;  // the input, for messages

#define RULE(cond, what) FUZZ_CHECK(cond, "accepted a config that breaks: %s\n--- input ---\n%s", what, g_text)

bool in(double v, double lo, double hi) { return std::isfinite(v) && v >= lo && v <= hi; }
bool in(Duration d, Duration lo, Duration hi) { return d >= lo && d <= hi; }

// RFC 9110 5.6.2: token = 1*tchar.
bool is_token(std::string_view s) {
  if (s.empty()) return false;
  for (unsigned char c : s) {
    bool ok = (c >= '0' && c <= '9') || (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') ||
              std::string_view("!#$%&'*+-.^_`|~").find(static_cast<char>(c)) != std::string_view::npos;
    if (!ok) return false;
  }
  return true;
}
bool is_lower(std::string_view s) {
  return std::none_of(s.begin(), s.end(), [](char c) { return c >= 'A' && c <= 'Z'; });
}
// What may stand in a request line or a Host field levee writes itself.
bool no_ctl_or_space(std::string_view s) {
  return std::none_of(s.begin(), s.end(), [](char c) {
    auto u = static_cast<unsigned char>(c);
    return u <= 0x20 || u == 0x7f;
  });
}

void check_thresholds(const std::array<double, levee::core::kCriticalityCount>& t, const char* what) {
  for (std::size_t i = 0; i < t.size(); ++i) RULE(in(t[i], 0, 100), what);
  // Indexed from SHEDDABLE up: a more critical level is never shed first.
  for (std::size_t i = 0; i + 1 < t.size(); ++i) RULE(t[i] <= t[i + 1], what);
}

void check_cidrs(const TenantSource& s) {
  for (const auto& c : s.trusted.networks) RULE(c.prefix >= 0 && c.prefix <= 128, "a CIDR prefix is 0..128");
  if (!s.api_keys.empty()) RULE(!s.api_key_header.empty(), "api_keys need a header");
  if (!s.header.empty()) RULE(is_token(s.header), "the tenant header is a header name");
  if (!s.api_key_header.empty()) RULE(is_token(s.api_key_header), "the API-key header is a header name");
}

void check(const Config& c) {
  RULE(c.workers <= 1024, "workers is auto or 1..1024");
  RULE(in(c.drain_timeout, 0s, 1h), "drain_timeout 0..1h");
  RULE(c.admin.port >= 1, "admin.port 1..65535");

  const auto& a = c.access_log;
  RULE(in(a.sample, 0, 1) && in(a.reject_sample, 0, 1), "access-log samples are fractions");
  RULE(a.buffer >= 4096 && a.buffer <= (64u << 20), "access_log.buffer 4 KiB..64 MiB");

  for (const std::string* h : {&c.headers.criticality, &c.headers.timeout_ms, &c.headers.attempt,
                               &c.headers.request_id, &c.headers.load_report, &c.headers.no_retry}) {
    RULE(is_token(*h), "header names are HTTP tokens (levee writes some of them upstream)");
    RULE(is_lower(*h), "header names are stored in lower case");
  }

  const auto& sp = c.self_protection;
  RULE(in(sp.sample_interval, 1ms, 10s) && in(sp.time_constant, 10ms, 10min), "self_protection timings");
  check_thresholds(sp.thresholds, "self_protection.thresholds: 0..100, not decreasing with criticality");
  RULE(in(sp.close_connections_above, 0, 100), "close_connections_above 0..100");
  RULE(in(sp.host_cpu.interval, 10ms, 1min) && in(sp.host_cpu.time_constant, 10ms, 10min), "host_cpu timings");
  check_thresholds(sp.host_cpu.thresholds, "host_cpu.thresholds: 0..100, not decreasing with criticality");

  const auto& t = c.tenants;
  check_cidrs(t.source);
  RULE(in(t.window, 1s, 1h), "tenants.window 1s..1h");
  std::set<std::string> tenants;
  for (std::size_t i = 0; i < t.quotas.size(); ++i) {
    RULE(in(t.quotas[i].second, 0, 1e6), "a quota is 0..1e6 CPU-seconds per second");
    RULE(tenants.insert(t.quotas[i].first).second, "tenant names are unique");
  }
  if (!t.quotas.empty()) RULE(t.quotas[0].first == "default", "quotas need 'default', stored first");

  RULE(!c.listeners.empty(), "at least one listener");
  std::set<std::string> lnames;
  std::set<std::pair<std::string, int>> binds;
  for (const auto& l : c.listeners) {
    RULE(!l.name.empty() && lnames.insert(l.name).second, "listener names are unique and not empty");
    RULE(l.port >= 1, "listener port 1..65535");
    RULE(binds.insert({l.address, l.port}).second, "no two listeners on one address");
    RULE(l.max_connections >= 1 && l.max_connections <= 10000000, "max_connections 1..1e7");
    RULE(l.max_connections_per_source <= 10000000, "max_connections_per_source 0..1e7");
    RULE(in(l.accept_rate, 0, 1e9), "accept_rate 0..1e9");
    RULE(in(l.header_timeout, 1ms, 1h) && in(l.idle_timeout, 1ms, 24h) && in(l.body_timeout, 1ms, 24h),
         "listener timeouts");
    RULE(l.max_header_bytes >= 1024 && l.max_header_bytes <= (1u << 20), "max_header_bytes 1K..1M");
    RULE(l.max_request_line >= 64 && l.max_request_line <= l.max_header_bytes,
         "max_request_line 64..max_header_bytes");
    RULE(l.max_headers >= 8 && l.max_headers <= 1000, "max_headers 8..1000");
    if (l.tenant) check_cidrs(*l.tenant);
    RULE(l.fuse.connections_per_endpoint >= 1 && l.fuse.connections_per_endpoint <= 10000, "fuse connections");
    RULE(l.fuse.queue <= 1000000 && in(l.fuse.queue_timeout, 1ms, 1h), "fuse queue");
    RULE(!l.routes.empty(), "a listener has routes");
    for (const auto& r : l.routes) {
      RULE(!r.prefix.empty() && r.prefix.front() == '/', "a route prefix starts with '/'");
      RULE(is_lower(r.host), "route hosts are stored in lower case");
      RULE(in(r.timeout, 1ms, 24h), "route timeout 1ms..24h");
      RULE(r.cluster_index < c.clusters.size() && c.clusters[r.cluster_index].name == r.cluster,
           "a route names an existing cluster");
      if (r.tenant) check_cidrs(*r.tenant);
    }
  }
  if (binds.count({c.admin.address, c.admin.port})) RULE(false, "admin does not share a listener's address");

  std::set<std::string> cnames;
  for (const auto& cl : c.clusters) {
    RULE(!cl.name.empty() && cnames.insert(cl.name).second, "cluster names are unique and not empty");
    RULE(!cl.endpoints.empty(), "a cluster has endpoints");
    for (const auto& e : cl.endpoints) {
      RULE(!e.host.empty() && e.port >= 1, "an endpoint is host:port with port 1..65535");
      RULE(in(e.weight, 0.001, 1e6), "endpoint weight 0.001..1e6");
    }
    RULE(in(cl.connect_timeout, 1ms, 1h) && in(cl.response_timeout, 1ms, 24h) && in(cl.idle_timeout, 1ms, 24h) &&
             in(cl.resolve_interval, 100ms, 24h),
         "cluster timeouts");
    RULE(cl.max_idle <= 100000, "max_idle 0..1e5");
    const auto& lim = cl.admission.limit;
    if (lim.adaptive) {
      const auto& ad = lim.adaptive_cfg;
      RULE(ad.min >= 1 && ad.min <= ad.initial && ad.initial <= ad.max && ad.max <= 1000000,
           "adaptive: 1 <= min <= initial <= max <= 1e6");
      RULE(in(ad.alpha, 0, 10) && in(ad.beta, 0, 10) && ad.alpha <= ad.beta, "adaptive: alpha <= beta");
      RULE(ad.min_samples >= 1 && in(ad.min_window, 1ms, 1min) && in(ad.probe_interval, 100ms, 1h) &&
               in(ad.rtt_tolerance, 0s, 10s),
           "adaptive timings");
    } else {
      RULE(lim.static_limit >= 1 && lim.static_limit <= 1000000, "concurrency.limit 1..1e6");
    }
    const auto& q = cl.admission.queue;
    RULE(q.max <= 10000000 && in(q.target, 1us, 1h) && in(q.codel_target, 1us, 1h) && in(q.codel_interval, 1ms, 1h),
         "queue settings");
    RULE(in(cl.overload.utilization, 0, 100) && in(cl.overload.queue_time, 0s, 1h), "overload signals");
    RULE(in(cl.throttle.k, 1, 100) && in(cl.throttle.window, 1s, 1h) && in(cl.throttle.min_requests, 0, 1e9),
         "throttle settings");
    const auto& rt = cl.retry;
    RULE(rt.max_attempts >= 1 && rt.max_attempts <= 10, "retry.max_attempts 1..10");
    RULE(in(rt.budget_ratio, 0, 1) && in(rt.budget_min_per_second, 0, 1e6) && in(rt.storm_share, 0, 1),
         "retry budget");
    RULE(in(rt.backoff_base, 0s, 1min) && in(rt.backoff_max, 0s, 10min), "retry backoff");
    const auto& h = cl.health_check;
    RULE(!h.path.empty() && h.path.front() == '/', "a health-check path starts with '/'");
    RULE(no_ctl_or_space(h.path) && no_ctl_or_space(h.host), "health-check path and host fit a request head");
    RULE(in(h.interval, 10ms, 1h) && h.max_interval >= h.interval && in(h.timeout, 1ms, 1h), "health-check timings");
    RULE(in(h.jitter, 0, 0.5), "health-check jitter 0..0.5");
    RULE(h.healthy >= 1 && h.healthy <= 1000 && h.unhealthy >= 1 && h.unhealthy <= 1000, "health thresholds");
    RULE(h.status_min >= 100 && h.status_min <= h.status_max && h.status_max <= 599, "expected_status");
    const auto& o = cl.outlier.params;
    RULE(o.consecutive_failures >= 1 && in(o.base_ejection, 1ms, 24h) && in(o.max_ejection, 1ms, 24h) &&
             in(o.decay, 0s, 24h) && in(o.max_ejected_pct, 0, 100),
         "outlier detection");
    const auto& s = cl.slow_start;
    RULE(in(s.window, 0s, 24h) && in(s.aggression, 0.01, 100) && in(s.min_weight_pct, 0, 100) &&
             in(s.early_exit, 0s, 24h),
         "slow start");
    for (const auto& [name, quota] : cl.quotas) {
      RULE(in(quota, 0, 1e6), "a quota is 0..1e6");
      RULE(tenants.count(name), "a cluster quota names a tenant of tenants.quotas");
    }
  }
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
  const std::string text(reinterpret_cast<const char*>(data), size);
  g_text = text.c_str();
  LoadResult r = load_string(text, "fuzz.yaml");
  if (r.ok()) {
    check(*r.config);
  } else {
    FUZZ_CHECK(!r.config && !r.errors.empty(), "a refusal must say why\n--- input ---\n%s", g_text);
    for (const auto& e : r.errors) {
      FUZZ_CHECK(e.file == "fuzz.yaml" && !e.message.empty(), "an error names its file and says something");
      FUZZ_CHECK(e.line >= 0 && e.column >= 0, "line %d column %d", e.line, e.column);
    }
  }
  return 0;
}
