#include "config/dump.hpp"

#include <yaml-cpp/yaml.h>

#include <charconv>
#include <cmath>
#include <cstdio>
#include <sstream>

namespace levee::config {

namespace {

constexpr std::string_view kRedacted = "<redacted>";

/// A small JSON writer: objects and arrays by hand, commas kept for us.
class Json {
 public:
  Json& key(std::string_view k) {
    comma();
    str(k);
    out_ += ':';
    fresh_ = true;
    return *this;
  }
  Json& open() {
    comma();
    out_ += '{';
    fresh_ = true;
    return *this;
  }
  Json& close() {
    out_ += '}';
    fresh_ = false;
    return *this;
  }
  Json& open_list() {
    comma();
    out_ += '[';
    fresh_ = true;
    return *this;
  }
  Json& close_list() {
    out_ += ']';
    fresh_ = false;
    return *this;
  }
  Json& v(std::string_view s) {
    comma();
    str(s);
    return *this;
  }
  Json& v(const char* s) { return v(std::string_view(s)); }
  Json& v(const std::string& s) { return v(std::string_view(s)); }
  Json& v(bool b) {
    comma();
    out_ += b ? "true" : "false";
    return *this;
  }
  Json& v(double d) {
    comma();
    char buf[32];
    if (!std::isfinite(d)) d = 0;
    auto [p, ec] = std::to_chars(buf, buf + sizeof buf, d);
    out_.append(buf, ec == std::errc{} ? p : buf);
    return *this;
  }
  Json& v(std::uint64_t n) {
    comma();
    out_ += std::to_string(n);
    return *this;
  }
  Json& v(std::uint32_t n) { return v(static_cast<std::uint64_t>(n)); }
  Json& v(std::uint16_t n) { return v(static_cast<std::uint64_t>(n)); }
  Json& v(unsigned long long n) { return v(static_cast<std::uint64_t>(n)); }
  Json& v(Duration d) {
    // As the file would say it, in the largest unit that is exact.
    using namespace std::chrono;
    const auto ns = d.count();
    std::string s;
    if (ns == 0) s = "0s";
    else if (ns % 3'600'000'000'000 == 0) s = std::to_string(ns / 3'600'000'000'000) + "h";
    else if (ns % 60'000'000'000 == 0) s = std::to_string(ns / 60'000'000'000) + "m";
    else if (ns % 1'000'000'000 == 0) s = std::to_string(ns / 1'000'000'000) + "s";
    else if (ns % 1'000'000 == 0) s = std::to_string(ns / 1'000'000) + "ms";
    else if (ns % 1'000 == 0) s = std::to_string(ns / 1'000) + "us";
    else s = std::to_string(ns) + "ns";
    return v(std::string_view(s));
  }
  Json& null() {
    comma();
    out_ += "null";
    return *this;
  }
  template <typename T>
  Json& kv(std::string_view k, const T& val) {
    key(k);
    return v(val);
  }
  std::string take() { return std::move(out_); }

 private:
  void comma() {
    if (!fresh_ && !out_.empty()) out_ += ',';
    fresh_ = false;
  }
  void str(std::string_view s) {
    out_ += '"';
    for (char c : s) {
      const auto u = static_cast<unsigned char>(c);
      if (c == '"' || c == '\\') {
        out_ += '\\';
        out_ += c;
      } else if (u < 0x20) {
        char b[8];
        std::snprintf(b, sizeof b, "\\u%04x", u);
        out_ += b;
      } else {
        out_ += c;
      }
    }
    out_ += '"';
  }
  std::string out_;
  bool fresh_ = true;
};

std::string network_text(const core::Network& n) {
  const auto& a = n.addr;
  bool v4 = a[10] == 0xff && a[11] == 0xff;
  for (int i = 0; i < 10 && v4; ++i) v4 = a[i] == 0;
  std::ostringstream o;
  if (v4) {
    o << int(a[12]) << '.' << int(a[13]) << '.' << int(a[14]) << '.' << int(a[15]) << '/' << (n.prefix - 96);
  } else {
    o << std::hex;
    for (int i = 0; i < 16; i += 2) o << (i ? ":" : "") << ((a[i] << 8) | a[i + 1]);
    o << std::dec << '/' << n.prefix;
  }
  return o.str();
}

std::string endpoint_text(const EndpointConfig& e) {
  return (e.host.find(':') != std::string::npos ? "[" + e.host + "]" : e.host) + ":" + std::to_string(e.port);
}

void tenant_source(Json& j, const TenantSource& s) {
  j.open().kv("header", s.header).key("trusted_networks").open_list();
  if (s.trusted.any) j.v("any");
  for (const auto& n : s.trusted.networks) j.v(network_text(n));
  j.close_list();
  if (!s.api_key_header.empty()) {
    j.key("api_keys").open().kv("header", s.api_key_header).key("keys").open();
    // The keys are secrets; the tenants they map to are not.
    for (std::size_t i = 0; i < s.api_keys.size(); ++i)
      j.kv(std::string(kRedacted) + "#" + std::to_string(i + 1), s.api_keys[i].second);
    j.close().close();
  }
  j.close();
}

void quotas(Json& j, const std::vector<std::pair<std::string, double>>& q) {
  j.open();
  for (const auto& [name, v] : q) j.kv(name, v);
  j.close();
}

void thresholds(Json& j, const std::array<double, core::kCriticalityCount>& t) {
  j.open();
  for (auto c : core::kAllCriticalities) j.kv(core::to_string(c), t[core::index(c)]);
  j.close();
}

void admin(Json& j, const AdminConfig& a) {
  j.open()
      .kv("address", a.address)
      .kv("port", a.port)
      .kv("ready_requires_endpoints", a.ready_requires_endpoints)
      .kv("header_timeout", a.header_timeout)
      .kv("idle_timeout", a.idle_timeout)
      .kv("max_connections", a.max_connections)
      .kv("max_connections_per_source", a.max_connections_per_source)
      .kv("token_file", a.token_file)
      .key("open_paths")
      .open_list();
  for (const auto& p : a.open_paths) j.v(p);
  j.close_list().key("allowed_hosts").open_list();
  for (const auto& h : a.allowed_hosts) j.v(h);
  j.close_list().close();
}

void access_log(Json& j, const AccessLogConfig& a) {
  j.open()
      .kv("enabled", a.enabled)
      .kv("path", a.path)
      .kv("format", a.format == AccessLogConfig::Format::Json ? "json" : "text")
      .kv("sample", a.sample)
      .kv("reject_sample", a.reject_sample)
      .kv("buffer", a.buffer)
      .kv("flush_interval", a.flush_interval)
      .key("fields")
      .open_list();
  for (const auto& f : a.fields) j.v(f);
  j.close_list().close();
}

void headers(Json& j, const HeaderNames& h) {
  j.open()
      .kv("criticality", h.criticality)
      .kv("timeout_ms", h.timeout_ms)
      .kv("attempt", h.attempt)
      .kv("request_id", h.request_id)
      .kv("load_report", h.load_report)
      .kv("no_retry", h.no_retry)
      .kv("return_request_id", h.return_request_id)
      .close();
}

void self_protection(Json& j, const SelfProtectionConfig& s) {
  j.open()
      .kv("enabled", s.enabled)
      .kv("dry_run", s.dry_run)
      .kv("sample_interval", s.sample_interval)
      .kv("time_constant", s.time_constant)
      .key("thresholds");
  thresholds(j, s.thresholds);
  j.kv("close_connections_above", s.close_connections_above)
      .key("host_cpu")
      .open()
      .kv("enabled", s.host_cpu.enabled)
      .kv("interval", s.host_cpu.interval)
      .kv("time_constant", s.host_cpu.time_constant)
      .key("thresholds");
  thresholds(j, s.host_cpu.thresholds);
  j.close().close();
}

void tenants(Json& j, const TenantsConfig& t) {
  j.open().key("source");
  tenant_source(j, t.source);
  j.key("quotas");
  quotas(j, t.quotas);
  j.kv("enforce", t.enforce == QuotaEnforcement::Always ? "always" : t.enforce == QuotaEnforcement::Off ? "off" : "overload")
      .kv("dry_run", t.dry_run)
      .kv("window", t.window)
      .close();
}

void quota_sync(Json& j, const QuotaSyncConfig& q) {
  const auto& r = q.redis;
  auto secret = [](const std::string& s) { return s.empty() ? std::string_view{} : kRedacted; };
  j.open().kv("enabled", q.enabled).key("redis").open();
  j.kv("mode", r.mode == RedisConfig::Mode::Sentinel ? "sentinel" : r.mode == RedisConfig::Mode::Cluster ? "cluster" : "standalone");
  j.key("addresses").open_list();
  for (const auto& a : r.addresses) j.v(endpoint_text(a));
  j.close_list()
      .kv("master_name", r.master_name)
      .kv("sentinel_username", r.sentinel_username)
      .kv("sentinel_password", secret(r.sentinel_password))
      .kv("username", r.username)
      .kv("password", secret(r.password))
      .kv("database", r.database)
      .key("tls")
      .open()
      .kv("enabled", r.tls.enabled)
      .kv("ca_file", r.tls.ca_file)
      .kv("cert_file", r.tls.cert_file)
      .kv("key_file", r.tls.key_file)
      .kv("server_name", r.tls.server_name)
      .kv("verify", r.tls.verify)
      .close()
      .kv("connect_timeout", r.connect_timeout)
      .kv("timeout", r.timeout)
      .close();
  j.kv("key_prefix", q.key_prefix)
      .kv("fleet", q.fleet)
      .kv("instance_id", q.instance_id)
      .kv("interval", q.interval)
      .kv("bucket", q.bucket)
      .kv("member_ttl", q.member_ttl)
      .kv("max_instances", q.max_instances)
      .close();
}

void resolver(Json& j, const ResolverConfig& r) {
  j.open().key("servers").open_list();
  for (const auto& s : r.servers) j.v(endpoint_text(s));
  j.close_list().kv("timeout", r.timeout).kv("attempts", r.attempts).kv("min_ttl", r.min_ttl).close();
}

void route(Json& j, const RouteConfig& r) {
  j.open()
      .kv("name", r.name)
      .key("match")
      .open()
      .kv("host", r.host)
      .kv("prefix", r.prefix)
      .close()
      .kv("cluster", r.cluster)
      .key("criticality");
  if (r.criticality) j.v(core::to_string(*r.criticality));
  else j.null();
  j.kv("timeout", r.timeout);
  if (r.tenant) {
    j.key("tenant");
    tenant_source(j, *r.tenant);
  }
  j.kv("fuse", r.fuse).close();
}

void listener(Json& j, const ListenerConfig& l) {
  j.open()
      .kv("name", l.name)
      .kv("address", l.address)
      .kv("port", l.port)
      .kv("mode", l.mode == ListenerConfig::Mode::Batch ? "batch" : "normal")
      .kv("max_connections", l.max_connections)
      .kv("max_connections_per_source", l.max_connections_per_source)
      .kv("accept_rate", l.accept_rate)
      .kv("header_timeout", l.header_timeout)
      .kv("idle_timeout", l.idle_timeout)
      .kv("body_timeout", l.body_timeout)
      .kv("min_rate", l.min_rate)
      .kv("min_rate_grace", l.min_rate_grace)
      .kv("shed_backoff", l.shed_backoff)
      .kv("max_header_bytes", l.max_header_bytes)
      .kv("max_request_line", l.max_request_line)
      .kv("max_headers", l.max_headers)
      .kv("criticality", core::to_string(l.default_criticality));
  if (l.proxy_protocol.enabled) {
    j.key("proxy_protocol").open().key("from").open_list();
    if (l.proxy_protocol.from.any) j.v("any");
    for (const auto& n : l.proxy_protocol.from.networks) j.v(network_text(n));
    j.close_list()
        .kv("timeout", l.proxy_protocol.timeout)
        .kv("max_v2_bytes", l.proxy_protocol.max_v2_bytes)
        .close();
  }
  if (l.tenant) {
    j.key("tenant");
    tenant_source(j, *l.tenant);
  }
  j.key("fuse")
      .open()
      .kv("connections_per_endpoint", l.fuse.connections_per_endpoint)
      .kv("queue", l.fuse.queue)
      .kv("queue_timeout", l.fuse.queue_timeout)
      .close()
      .key("http2")
      .open()
      .kv("enabled", l.http2.enabled)
      .kv("max_concurrent_streams", l.http2.max_concurrent_streams)
      .kv("initial_window", l.http2.initial_window)
      .kv("max_queued_streams", l.http2.max_queued_streams)
      .kv("max_resets_per_second", l.http2.max_resets_per_second)
      .kv("max_control_per_second", l.http2.max_control_per_second)
      .close()
      .key("routes")
      .open_list();
  for (const auto& r : l.routes) route(j, r);
  j.close_list().close();
}

void cluster(Json& j, const ClusterConfig& c) {
  j.open().kv("name", c.name).key("endpoints").open_list();
  for (const auto& e : c.endpoints) j.open().kv("address", endpoint_text(e)).kv("weight", e.weight).close();
  j.close_list()
      .kv("connect_timeout", c.connect_timeout)
      .kv("response_timeout", c.response_timeout)
      .kv("idle_timeout", c.idle_timeout)
      .kv("max_idle", c.max_idle)
      .kv("resolve_interval", c.resolve_interval)
      .kv("protocol", c.protocol == ClusterConfig::Protocol::Http2 ? "http2" : "http1")
      .key("http2")
      .open()
      .kv("max_connections", c.http2.max_connections)
      .kv("max_concurrent_streams", c.http2.max_concurrent_streams)
      .kv("initial_window", c.http2.initial_window)
      .close();
  const auto& a = c.admission;
  j.key("concurrency").open().kv("enabled", a.enabled).kv("dry_run", a.dry_run);
  if (a.limit.adaptive) {
    const auto& ad = a.limit.adaptive_cfg;
    j.key("adaptive")
        .open()
        .kv("min", ad.min)
        .kv("max", ad.max)
        .kv("initial", ad.initial)
        .kv("window", ad.min_window)
        .kv("min_samples", ad.min_samples)
        .kv("alpha", ad.alpha)
        .kv("beta", ad.beta)
        .kv("probe_interval", ad.probe_interval)
        .kv("rtt_tolerance", ad.rtt_tolerance)
        .close();
  } else {
    j.kv("limit", a.limit.static_limit);
  }
  j.close();
  const auto& q = a.queue;
  j.key("queue")
      .open()
      .kv("max", q.max)
      .kv("target", q.target)
      .kv("lifo_on_overload", q.lifo_on_overload)
      .key("codel")
      .open()
      .kv("target", q.codel_target)
      .kv("interval", q.codel_interval)
      .close()
      .close();
  j.key("overload")
      .open()
      .kv("utilization", c.overload.utilization)
      .kv("queue_time", c.overload.queue_time)
      .kv("hold", c.overload.hold)
      .close();
  const auto& t = c.throttle;
  j.key("throttle")
      .open()
      .kv("enabled", t.enabled)
      .kv("dry_run", t.dry_run)
      .kv("k", t.k)
      .kv("window", t.window)
      .kv("min_requests", t.min_requests)
      .kv("max_probability", t.max_probability)
      .kv("recovery_run", t.recovery_run)
      .kv("recovery_span", t.recovery_span)
      .close();
  const auto& r = c.retry;
  j.key("retry")
      .open()
      .kv("enabled", r.enabled)
      .kv("max_attempts", r.max_attempts)
      .kv("budget_ratio", r.budget_ratio)
      .kv("budget_min_per_second", r.budget_min_per_second)
      .kv("backoff_base", r.backoff_base)
      .kv("backoff_max", r.backoff_max)
      .kv("storm_share", r.storm_share)
      .close();
  const auto& h = c.health_check;
  j.key("health_check")
      .open()
      .kv("enabled", h.enabled)
      .kv("type", h.type == HealthCheckConfig::Type::Grpc ? "grpc" : "http")
      .kv("grpc_service", h.grpc_service)
      .kv("path", h.path)
      .kv("host", h.host)
      .kv("interval", h.interval)
      .kv("max_interval", h.max_interval)
      .kv("jitter", h.jitter)
      .kv("timeout", h.timeout)
      .kv("healthy", h.healthy)
      .kv("unhealthy", h.unhealthy)
      .key("expected_status")
      .open()
      .kv("min", h.status_min)
      .kv("max", h.status_max)
      .close()
      .kv("body_contains", h.body_contains)
      .close();
  const auto& o = c.outlier;
  j.key("outlier_detection")
      .open()
      .kv("enabled", o.enabled)
      .kv("consecutive_failures", o.params.consecutive_failures)
      .kv("base_ejection", o.params.base_ejection)
      .kv("max_ejection", o.params.max_ejection)
      .kv("decay", o.params.decay)
      .kv("max_ejected_pct", o.params.max_ejected_pct)
      .close();
  const auto& s = c.slow_start;
  j.key("slow_start")
      .open()
      .kv("window", s.window)
      .kv("aggression", s.aggression)
      .kv("min_weight_pct", s.min_weight_pct)
      .kv("readiness", s.readiness)
      .kv("early_exit", s.early_exit)
      .close()
      .key("quotas");
  quotas(j, c.quotas);
  j.close();
}

bool section(Json& j, const Config& c, std::string_view k) {
  if (k == "admin") admin(j, c.admin);
  else if (k == "workers") c.workers ? j.v(static_cast<std::uint64_t>(c.workers)) : j.v("auto");
  else if (k == "drain_timeout") j.v(c.drain_timeout);
  else if (k == "drain_delay") j.v(c.drain_delay);
  else if (k == "tls_watch") j.v(c.tls_watch);
  else if (k == "access_log") access_log(j, c.access_log);
  else if (k == "headers") headers(j, c.headers);
  else if (k == "self_protection") self_protection(j, c.self_protection);
  else if (k == "tenants") tenants(j, c.tenants);
  else if (k == "quota_sync") quota_sync(j, c.quota_sync);
  else if (k == "resolver") resolver(j, c.resolver);
  else if (k == "listeners") {
    j.open_list();
    for (const auto& l : c.listeners) listener(j, l);
    j.close_list();
  } else if (k == "clusters") {
    j.open_list();
    for (const auto& cl : c.clusters) cluster(j, cl);
    j.close_list();
  } else {
    return false;
  }
  return true;
}

constexpr std::string_view kSections[] = {"admin",           "workers", "drain_timeout", "drain_delay", "tls_watch",
                                          "access_log",      "headers", "self_protection", "tenants",
                                          "quota_sync",      "resolver", "listeners",       "clusters"};

}  // namespace

std::string to_json(const Config& c) {
  Json j;
  j.open().kv("source", c.source);
  for (auto k : kSections) {
    j.key(k);
    section(j, c, k);
  }
  j.close();
  return j.take() + "\n";
}

std::string section_json(const Config& c, std::string_view key) {
  Json j;
  if (!section(j, c, key)) return {};
  return j.take();
}

std::pair<int, int> locate(const std::string& text, std::string_view path) {
  try {
    YAML::Node n = YAML::Load(text);
    YAML::Mark mark{};
    bool found = false;
    std::size_t i = 0;
    while (i < path.size()) {
      std::size_t j = path.find_first_of(".[", i);
      const std::string key(path.substr(i, j == std::string_view::npos ? std::string_view::npos : j - i));
      if (!key.empty()) {
        if (!n.IsMap()) return {0, 0};
        found = false;
        for (auto it = n.begin(); it != n.end(); ++it) {
          if (it->first.Scalar() == key) {
            mark = it->first.Mark();
            n = it->second;
            found = true;
            break;
          }
        }
        if (!found) return {0, 0};
      }
      if (j == std::string_view::npos) break;
      if (path[j] == '[') {
        const std::size_t close = path.find(']', j);
        if (close == std::string_view::npos) return {0, 0};
        std::size_t idx = 0;
        std::from_chars(path.data() + j + 1, path.data() + close, idx);
        if (!n.IsSequence() || idx >= n.size()) return {0, 0};
        n = n[idx];
        mark = n.Mark();
        found = true;
        i = close + 1;
        if (i < path.size() && path[i] == '.') ++i;
      } else {
        i = j + 1;
      }
    }
    if (!found || mark.line < 0) return {0, 0};
    return {mark.line + 1, mark.column + 1};
  } catch (const YAML::Exception&) {
    return {0, 0};
  }
}

}  // namespace levee::config
