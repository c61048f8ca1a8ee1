// The counters and histograms the request path writes: sharded per worker
// (the last shard belongs to the control thread), label spaces fixed at
// start-up from the configuration, so a cell is found by arithmetic.
#pragma once

#include <string>
#include <vector>

#include "metrics/metrics.hpp"

namespace levee::proxy {

/// Label values known from the configuration.
struct MetricLabels {
  std::vector<std::string> routes;
  std::vector<std::string> clusters;
  std::vector<std::string> listeners;
  std::vector<std::string> tenants;
  std::vector<std::vector<std::string>> endpoints;  ///< (cluster, endpoint) per flattened endpoint
  std::vector<std::size_t> endpoint_base;           ///< first flattened endpoint of each cluster
};

/// Why a connection was refused (levee_downstream_refused_total{cause}).
enum class RefuseCause : std::size_t { MaxConnections, PerSource, AcceptRate, Draining };
/// What went wrong with an upstream attempt (levee_upstream_errors_total{kind}).
/// How a TLS handshake ended (levee_tls_handshakes_total{result}).
enum class HandshakeResult : std::size_t { Full, Resumed, Failed, Timeout, Refused };
/// How a PROXY protocol header ended (levee_proxy_protocol_headers_total{result}).
enum class ProxyHeaderResult : std::size_t { V1, V2, Local, Invalid, Timeout, Closed };
/// What a distrusted header was (levee_untrusted_headers_total{header}),
/// in the order of core::Ignored's bits.
inline constexpr std::size_t kUntrustedKinds = 4;
enum class UpstreamError : std::size_t { Connect, Reset, Timeout, Protocol };
/// Which HTTP/2 protocol limit a client hit (levee_http2_limit_total{limit}).
enum class H2Limit : std::size_t { HeaderList, RapidReset, ControlFlood, QueuedStreams, Protocol };

struct RequestMetrics {
  RequestMetrics(const MetricLabels& labels, std::size_t shards);

  metrics::CounterTable requests;           // route, code class
  metrics::CounterTable admitted;           // cluster, criticality, tenant
  metrics::CounterTable rejected;           // cluster, reason, criticality, tenant
  metrics::CounterTable dry_run;            // cluster, reason, criticality
  metrics::CounterTable local_replies;      // listener, reason
  metrics::CounterTable connections;        // listener
  metrics::CounterTable refused;            // listener, cause
  metrics::CounterTable untrusted;          // listener, header (not believed from an untrusted client)
  metrics::CounterTable tls_handshakes;     // listener, result
  metrics::CounterTable proxy_headers;      // listener, result
  metrics::CounterTable http2_connections;  // listener (HTTP/2 downstream connections)
  metrics::CounterTable http2_limits;       // listener, limit
  metrics::CounterTable upstream_requests;  // (cluster, endpoint), code class
  metrics::CounterTable upstream_errors;    // (cluster, endpoint), kind
  metrics::CounterTable upstream_connects;  // cluster
  metrics::CounterTable load_report_errors; // cluster
  metrics::CounterTable load_report_ignored; // cluster, why
  metrics::CounterTable bytes;              // direction
  metrics::HistogramTable upstream_latency; // cluster
  metrics::HistogramTable request_duration; // cluster, outcome (served, rejected)
  metrics::HistogramTable queue_time;       // cluster
  metrics::CounterTable health_checks;      // (cluster, endpoint), result
  metrics::HistogramTable health_check_latency;  // cluster

  std::vector<std::size_t> endpoint_base;

  std::size_t endpoint(std::size_t cluster, std::size_t ep) const noexcept { return endpoint_base[cluster] + ep; }
  void refuse(std::size_t shard, std::size_t listener, RefuseCause c) noexcept {
    refused.inc(shard, refused.index({listener, static_cast<std::size_t>(c)}));
  }
  void h2_limit(std::size_t shard, std::size_t listener, H2Limit l) noexcept {
    http2_limits.inc(shard, http2_limits.index({listener, static_cast<std::size_t>(l)}));
  }
  void upstream_error(std::size_t shard, std::size_t cluster, std::size_t ep, UpstreamError k) noexcept {
    upstream_errors.inc(shard, upstream_errors.index({endpoint(cluster, ep), static_cast<std::size_t>(k)}));
  }
};

/// "1xx".."5xx" index of a status code.
constexpr std::size_t code_class(int status) noexcept {
  if (status < 100) return 4;
  return static_cast<std::size_t>((status >= 500 ? 5 : status / 100) - 1);
}

}  // namespace levee::proxy
