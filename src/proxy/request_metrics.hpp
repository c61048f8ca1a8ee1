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

  /// Every table, in one list: the registry exports them and a reload
  /// carries their counts into the next Runtime's (a table left out of
  /// either would vanish, or restart from zero, at a reload).
  std::vector<metrics::CounterTable*> counter_tables() noexcept {
    return {&requests,          &admitted,           &rejected,          &dry_run,          &local_replies,
            &connections,       &refused,            &untrusted,         &tls_handshakes,   &proxy_headers,
            &http2_connections, &http2_limits,       &upstream_requests, &upstream_errors,  &upstream_connects,
            &load_report_errors, &load_report_ignored, &bytes,           &health_checks};
  }
  std::vector<metrics::HistogramTable*> histogram_tables() noexcept {
    return {&upstream_latency, &request_duration, &queue_time, &health_check_latency};
  }
  std::vector<const metrics::CounterTable*> counter_tables() const noexcept {
    auto v = const_cast<RequestMetrics*>(this)->counter_tables();
    return {v.begin(), v.end()};
  }
  std::vector<const metrics::HistogramTable*> histogram_tables() const noexcept {
    auto v = const_cast<RequestMetrics*>(this)->histogram_tables();
    return {v.begin(), v.end()};
  }
  /// Adds a retired Runtime's counts to these.
  void absorb(const RequestMetrics& old) {
    const auto c = counter_tables();
    const auto oc = old.counter_tables();
    for (std::size_t i = 0; i < c.size(); ++i) c[i]->absorb(*oc[i]);
    const auto h = histogram_tables();
    const auto oh = old.histogram_tables();
    for (std::size_t i = 0; i < h.size(); ++i) h[i]->absorb(*oh[i]);
  }

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
