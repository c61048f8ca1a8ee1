// levee's configuration as typed structs. Every default lives here, in the
// member initialisers; the loader only overrides what the YAML file says.
// See docs/configuration.md for the reference and config/levee.yaml for a
// commented example of every option.
#pragma once

#include <array>
#include <cstdint>
#include <optional>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "core/concurrency_limit.hpp"
#include "core/criticality.hpp"
#include "core/health.hpp"
#include "core/net.hpp"
#include "core/orca.hpp"
#include "core/queue_gate.hpp"
#include "core/slow_start.hpp"
#include "core/time.hpp"
#include "config/tls.hpp"

namespace levee::config {

using core::Criticality;
using core::Duration;
using namespace std::chrono_literals;

/// Where a request's tenant comes from. First match wins: API key, then the
/// tenant header (only from trusted networks), else `default`.
struct TenantSource {
  std::string header = "x-tenant-id";
  core::TrustedSources trusted;        ///< trusted_networks; empty: the header is trusted from nowhere
  std::string api_key_header;          ///< empty: no API-key mapping
  std::vector<std::pair<std::string, std::string>> api_keys;  ///< key -> tenant
  /// A client certificate's identity (SAN URI, SAN DNS or CN) -> tenant; it
  /// comes first, and no header overrides it.
  std::vector<std::pair<std::string, std::string>> certificate_tenants;
  core::CertificateTenant from_certificate = core::CertificateTenant::None;
};

enum class QuotaEnforcement : std::uint8_t { Overload, Always, Off };

struct TenantsConfig {
  TenantSource source;
  /// Tenant names and quotas in CPU-seconds per second; index 0 is `default`.
  std::vector<std::pair<std::string, double>> quotas;
  QuotaEnforcement enforce = QuotaEnforcement::Overload;
  bool dry_run = false;
  Duration window = 10s;
};

struct HeaderNames {
  std::string criticality = "x-criticality";
  std::string timeout_ms = "x-request-timeout-ms";
  std::string attempt = "x-attempt-count";
  std::string request_id = "x-request-id";
  std::string load_report = "endpoint-load-metrics";
  std::string no_retry = "x-levee-no-retry";
  /// Send the request id (`request_id`) back to the client on every answer.
  bool return_request_id = true;
};

struct HostCpuConfig {
  bool enabled = false;
  Duration interval = 250ms;
  Duration time_constant = 2s;
  std::array<double, core::kCriticalityCount> thresholds = {0.85, 0.90, 0.95, 0.98};
};

struct SelfProtectionConfig {
  bool enabled = true;
  bool dry_run = false;
  Duration sample_interval = 5ms;
  Duration time_constant = 1s;
  std::array<double, core::kCriticalityCount> thresholds = {0.8, 0.9, 1.0, 1.2};
  /// Above this executor load, responses carry `Connection: close` so idle
  /// keep-alive connections drain (0 disables). Above 1.0 on purpose: a
  /// merely busy levee closing busy connections only adds handshakes.
  double close_connections_above = 1.1;
  HostCpuConfig host_cpu;
};

struct AccessLogConfig {
  enum class Format : std::uint8_t { Text, Json };
  bool enabled = true;
  std::string path = "stdout";
  Format format = Format::Text;
  double sample = 1.0;          ///< fraction of served requests logged
  double reject_sample = 0.01;  ///< fraction of rejections logged
  /// Bytes buffered per worker before the writer thread takes them; when
  /// the writer falls behind and every buffer is full, lines are dropped
  /// (and counted), never waited for.
  std::uint32_t buffer = 256 * 1024;
  Duration flush_interval = 100ms;  ///< the longest a line waits for the file
  /// Which fields, in order (names in docs/configuration.md); empty: the
  /// default layout of each format.
  std::vector<std::string> fields;
};

/// The access-log fields `access_log.fields` may name (docs/configuration.md).
inline constexpr std::string_view kAccessLogFields[] = {
    "ts", "client", "method", "target", "path", "host", "protocol", "status", "route", "cluster", "endpoint",
    "criticality", "tenant", "duration_ms", "upstream_ms", "queue_ms", "rx", "tx", "attempts", "reason",
    "request_id", "user_agent", "xff"};
inline bool access_log_field_known(std::string_view name) noexcept {
  for (auto f : kAccessLogFields)
    if (f == name) return true;
  return false;
}

struct RouteConfig {
  std::string name;  ///< metric label; default "<listener>/<index>"
  std::string host;  ///< empty or "*": any; "*.example.com": suffix; else exact
  std::string prefix = "/";
  std::string cluster;
  std::size_t cluster_index = 0;
  std::optional<Criticality> criticality;  ///< default when the header is absent
  Duration timeout = 30s;
  std::optional<TenantSource> tenant;
  /// The most critical level an untrusted client may claim here (higher
  /// claims are lowered to it); unset: untrusted claims are ignored.
  std::optional<Criticality> untrusted_criticality;
  /// Send this route through a fuse pool (the listener's `fuse` settings).
  /// On a normal listener the per-endpoint budget is split between workers.
  bool fuse = false;
};

struct FuseConfig {
  std::uint32_t connections_per_endpoint = 4;
  std::uint32_t queue = 1024;
  Duration queue_timeout = 5s;
};

/// HTTP/2 towards clients (docs/http2.md): ALPN "h2" on a TLS listener,
/// prior knowledge (the client preface) on a cleartext one.
struct Http2Config {
  bool enabled = false;
  std::uint32_t max_concurrent_streams = 100;  ///< advertised in SETTINGS
  std::uint32_t initial_window = 64 * 1024;    ///< per stream: the most body buffered for one
  std::uint32_t max_queued_streams = 50;       ///< streams of one connection waiting in admission
  std::uint32_t max_resets_per_second = 100;   ///< client resets of unanswered streams (rapid reset)
  std::uint32_t max_control_per_second = 1000; ///< SETTINGS, PING and empty DATA frames received
};

struct ListenerConfig {
  enum class Mode : std::uint8_t { Normal, Batch };
  std::string name;
  std::string address = "0.0.0.0";
  std::uint16_t port = 0;
  Mode mode = Mode::Normal;
  std::uint32_t max_connections = 10000;
  std::uint32_t max_connections_per_source = 0;  ///< 0: unlimited
  double accept_rate = 0;                         ///< connections/s, 0: unlimited
  Duration header_timeout = 10s;
  Duration idle_timeout = 60s;
  Duration body_timeout = 30s;  ///< max gap between body bytes from the client, or writes to it
  /// The slowest a client may send its body or read its answer, after
  /// min_rate_grace: a client slower than this (one byte a second, or none)
  /// is cut off. 0 disables.
  std::uint32_t min_rate = 1024;  ///< bytes per second
  Duration min_rate_grace = 10s;
  std::uint32_t max_header_bytes = 64 * 1024;
  std::uint32_t max_request_line = 8 * 1024;
  /// A connection whose requests self-protection refused twice in a row
  /// (the worker's own load: executor_overload, host_cpu) while it let more
  /// critical requests through (within the last second) waits before its
  /// next request is read: 1 ms, doubling with each further refusal, up to
  /// this; one request that is not refused so clears it. A client flooding
  /// requests that are shed then cannot take the worker from the ones being
  /// served; with nothing more critical being served, reading less would
  /// only idle the worker. Refusals for the backend's sake (queue, throttle, quota) never
  /// slow a connection: the worker has time to read them, and a client that
  /// multiplexes criticalities over its connections (a gateway, a sidecar)
  /// would see its critical requests wait behind the backoff its shed ones
  /// earned (loadtest/order_sweep.py measured ~100 ms on CRITICAL_PLUS's
  /// p99 when every refusal counted). 0: off.
  Duration shed_backoff = std::chrono::milliseconds(100);
  std::uint32_t max_headers = 100;
  Criticality default_criticality = Criticality::Critical;
  std::optional<TenantSource> tenant;
  FuseConfig fuse;
  std::vector<RouteConfig> routes;
  ServerTlsConfig tls;
  TrustConfig trust;
  ProxyProtocolConfig proxy_protocol;
  Http2Config http2;
};

struct EndpointConfig {
  std::string host;
  std::uint16_t port = 0;
  double weight = 1.0;
};

struct HealthCheckConfig {
  bool enabled = false;
  /// An HTTP GET of `path` (over the cluster's protocol), or gRPC's health
  /// protocol (grpc.health.v1.Health/Check for `grpc_service`; http2
  /// clusters only, and their default).
  enum class Type : std::uint8_t { Http, Grpc };
  Type type = Type::Http;
  bool type_given = false;  ///< else decided by the cluster's protocol
  std::string grpc_service;  ///< the service asked about; empty: the server as a whole
  std::string path = "/healthz";
  std::string host;  ///< Host header; empty: the endpoint's host
  Duration interval = 2s;
  Duration max_interval = 30s;  ///< back-off ceiling for endpoints that stay down
  double jitter = 0.2;          ///< +- fraction of the interval
  Duration timeout = 1s;
  std::uint32_t healthy = 2;
  std::uint32_t unhealthy = 3;
  std::uint16_t status_min = 200;
  std::uint16_t status_max = 399;
  std::string body_contains;
};

struct OutlierDetectionConfig {
  bool enabled = true;
  core::OutlierConfig params{};
};

struct RetryConfig {
  bool enabled = true;
  std::uint32_t max_attempts = 3;
  double budget_ratio = 0.1;
  double budget_min_per_second = 3.0;
  Duration backoff_base = 25ms;
  Duration backoff_max = 250ms;
  /// Answer "don't retry" to retries when this share of arrivals are retries.
  double storm_share = 0.2;
};

struct OverloadSignals {
  double utilization = 0.9;   ///< smoothed backend utilization; 0 disables
  Duration queue_time = 20ms; ///< smoothed queuing time; 0 disables
  Duration hold = 1s;         ///< still overloaded this long after the last signal
};

struct ThrottleSettings {
  bool enabled = true;
  bool dry_run = false;
  double k = 2.0;
  Duration window = 2min;
  double min_requests = 20;  ///< no local rejection below this many requests per window
  double max_probability = 0.9;     ///< at least the rest always reaches the backend
  std::uint32_t recovery_run = 10;  ///< accepted in a row that end a refusal at once (0: never) ...
  Duration recovery_span = 250ms;   ///< ... over at least this long
};

struct QueueSettings {
  bool enabled = true;   ///< false: no limit at all
  bool dry_run = false;
  core::ConcurrencyLimitConfig limit = [] {
    core::ConcurrencyLimitConfig c;
    c.adaptive = true;
    return c;
  }();
  core::QueueConfig queue{};
};

/// ORCA load reports from a cluster's backends (docs/configuration.md).
struct LoadReportConfig {
  enum class Format : std::uint8_t { Off, Text, Json };
  /// Sent upstream as endpoint-load-metrics-format (vLLM, Triton: they
  /// report only when asked); Off: the client's own value passes.
  Format request_format = Format::Off;
  core::OrcaSelection select;  ///< which metric is utilization, which is cost
};

struct ClusterConfig {
  std::string name;
  std::vector<EndpointConfig> endpoints;
  Duration connect_timeout = 1s;
  Duration response_timeout = 30s;  ///< max wait for the response header
  Duration idle_timeout = 60s;      ///< pooled upstream connections
  std::uint32_t max_idle = 64;      ///< per endpoint and worker
  Duration resolve_interval = 30s;
  QueueSettings admission;
  ThrottleSettings throttle;
  OverloadSignals overload;
  RetryConfig retry;
  HealthCheckConfig health_check;
  OutlierDetectionConfig outlier;
  core::SlowStartConfig slow_start{};
  LoadReportConfig load_report;
  /// Per-cluster quota overrides (tenant -> CPU-s/s); others use tenants.quotas.
  std::vector<std::pair<std::string, double>> quotas;
  UpstreamTlsConfig tls;  ///< config/tls.hpp
  /// What levee speaks to the endpoints (docs/http2.md#upstream-http2):
  /// HTTP/1.1, or HTTP/2 (prior knowledge in cleartext, ALPN h2 over TLS),
  /// which gRPC backends need.
  enum class Protocol : std::uint8_t { Http1, Http2 };
  Protocol protocol = Protocol::Http1;
  struct Http2Upstream {
    std::uint32_t max_connections = 2;            ///< per endpoint and worker
    std::uint32_t max_concurrent_streams = 256;   ///< per connection; the backend's SETTINGS may lower it
    std::uint32_t initial_window = 64 * 1024;     ///< per stream, for response bodies
  } http2;
};

/// TLS to Redis (issue 16). Redis asks for a client certificate by default
/// (tls-auth-clients yes): give cert_file and key_file then.
struct RedisTlsConfig {
  bool enabled = false;
  std::string ca_file;      ///< empty: the system's trusted CAs
  std::string cert_file;    ///< client certificate (PEM), optional
  std::string key_file;     ///< its key (PEM)
  std::string server_name;  ///< SNI and the name verified; empty: the host
  bool verify = true;       ///< false: encrypt without checking the server (tests only)
};

/// Where the fleet's shared state lives and how to reach it.
struct RedisConfig {
  enum class Mode : std::uint8_t { Standalone, Sentinel, Cluster };
  Mode mode = Mode::Standalone;
  /// standalone: the server; cluster: seed nodes (MOVED is followed);
  /// sentinel: the sentinels, asked for the master of master_name.
  std::vector<EndpointConfig> addresses;
  std::string master_name;
  std::string sentinel_username, sentinel_password;
  std::string username;  ///< ACL user; empty: AUTH with the password alone
  std::string password;  ///< or from password_file (read at load)
  std::uint32_t database = 0;
  RedisTlsConfig tls;
  Duration connect_timeout = 200ms;  ///< connect + TLS + AUTH (+ Sentinel lookup)
  Duration timeout = 100ms;          ///< one sync's round trip
};

/// Fleet quotas: instances share tenant usage through Redis (issue 16).
struct QuotaSyncConfig {
  bool enabled = false;
  RedisConfig redis;
  std::string key_prefix = "levee";
  std::string fleet = "default";  ///< Redis Cluster hash tag; fleets sharing a Redis keep apart
  std::string instance_id;        ///< empty: hostname-pid-random
  Duration interval = 200ms;
  Duration bucket = 1s;
  Duration member_ttl = 2s;
  /// Fallback divisor while Redis is unreachable; 0: the last known fleet size.
  std::uint32_t max_instances = 0;
};

struct AdminConfig {
  std::string address = "127.0.0.1";
  std::uint16_t port = 9901;
  /// /ready needs at least one healthy endpoint in every cluster.
  bool ready_requires_endpoints = true;
  Duration header_timeout = 10s;  ///< a connection's first request must arrive within this
  Duration idle_timeout = 60s;    ///< a kept-alive admin connection may idle this long
  std::uint32_t max_connections = 64;
  /// Admin connections at once from one client address (0: no cap), so
  /// that one client cannot hold every connection and lock out the
  /// probes and scrapes.
  std::uint32_t max_connections_per_source = 16;
  /// A file holding a token that authorises admin actions (POST) from
  /// anywhere, as `Authorization: Bearer <token>`; without one, only
  /// loopback clients may act. Read at load (and at every reload).
  std::string token_file;
  std::string token;  ///< its contents (never shown)
  /// The pages a client off loopback may read without the token: probes
  /// and scrapes carry none. Every other page (the admin page, the JSON
  /// views of clusters, config, info and stats) needs the token from off
  /// loopback, as actions do.
  std::vector<std::string> open_paths = {"/healthz", "/ready", "/metrics"};
  /// Host names a loopback client may send as `Host` and still be trusted
  /// as loopback, besides `localhost` (and `*.localhost`) and IP literals.
  /// A name outside these is what a web page whose name was rebound to
  /// 127.0.0.1 (DNS rebinding) would send.
  std::vector<std::string> allowed_hosts;
};

/// The pages the admin listener answers GET for (and so the paths
/// `admin.open_paths` may name): the control plane serves these, the
/// loader checks against them.
inline constexpr std::string_view kAdminPages[] = {"/healthz",     "/ready",         "/metrics",
                                                   "/admin/",      "/admin/clusters", "/admin/config",
                                                   "/admin/info",  "/admin/stats"};

/// How hostnames in `endpoints` are resolved.
struct ResolverConfig {
  /// DNS servers to ask directly (UDP, A and AAAA), honouring each answer's
  /// TTL; empty: the system's resolver (getaddrinfo: /etc/hosts, nsswitch),
  /// every resolve_interval.
  std::vector<EndpointConfig> servers;
  Duration timeout = 1s;       ///< per query attempt
  std::uint32_t attempts = 2;  ///< per server
  Duration min_ttl = 1s;       ///< re-resolve no more often than this
};

struct Config {
  std::string source;  ///< file it came from
  AdminConfig admin;
  unsigned workers = 0;  ///< 0: auto (CPUs available, cgroup quota included)
  Duration drain_timeout = 15s;
  /// On SIGTERM: /ready turns 503 at once, listeners keep accepting this
  /// long (load balancers take the instance out), then the drain proper.
  Duration drain_delay = 0s;
  /// Reload certificates, keys and CA bundles when their files change (control/tls_watch.cpp).
  bool tls_watch = true;
  ResolverConfig resolver;
  AccessLogConfig access_log;
  HeaderNames headers;
  SelfProtectionConfig self_protection;
  TenantsConfig tenants;
  QuotaSyncConfig quota_sync;
  std::vector<ListenerConfig> listeners;
  std::vector<ClusterConfig> clusters;
};

/// One problem found in a configuration file.
struct Error {
  std::string file;
  int line = 0;    ///< 1-based; 0 when not tied to a place
  int column = 0;  ///< 1-based
  std::string path;  ///< e.g. clusters[1].endpoints[0]
  std::string message;
  std::string format() const;
};

struct LoadResult {
  std::optional<Config> config;
  std::vector<Error> errors;
  bool ok() const noexcept { return config.has_value() && errors.empty(); }
};

/// Loads and validates a file; all problems are reported together.
LoadResult load_file(const std::string& path);
/// Same, from text (`name` is used in messages).
LoadResult load_string(const std::string& text, const std::string& name);

/// Parses "250ms", "2s", "1m", "1h", "100us"; nullopt otherwise.
std::optional<Duration> parse_duration(std::string_view s) noexcept;

}  // namespace levee::config
