#include "proxy/request_metrics.hpp"

#include "core/criticality.hpp"
#include "core/decision.hpp"

namespace levee::proxy {

namespace {
std::vector<std::string> reason_names() {
  std::vector<std::string> v;
  for (std::size_t i = 0; i < core::kReasonCount; ++i) v.emplace_back(core::to_string(static_cast<core::Reason>(i)));
  return v;
}
std::vector<std::string> criticality_names() {
  std::vector<std::string> v;
  for (std::size_t i = 0; i < core::kCriticalityCount; ++i)
    v.emplace_back(core::to_string(core::criticality_from_index(i)));
  return v;
}
const std::vector<std::string> kCodes = {"1xx", "2xx", "3xx", "4xx", "5xx"};
const std::vector<std::string> kEndpointLabels = {"cluster", "endpoint"};
}  // namespace

RequestMetrics::RequestMetrics(const MetricLabels& l, std::size_t shards)
    : requests("levee_requests_total", "Requests answered, by route and status class",
               {{"route", l.routes}, {"code", kCodes}}, shards),
      admitted("levee_admitted_total", "Requests admitted by every gate",
               {{"cluster", l.clusters}, {"criticality", criticality_names()}, {"tenant", l.tenants}}, shards),
      rejected("levee_rejected_total", "Requests shed by an admission gate",
               {{"cluster", l.clusters}, {"reason", reason_names()}, {"criticality", criticality_names()},
                {"tenant", l.tenants}},
               shards),
      dry_run("levee_dry_run_rejections_total", "Requests a dry-run gate would have rejected (they were served)",
              {{"cluster", l.clusters}, {"reason", reason_names()}, {"criticality", criticality_names()}}, shards),
      local_replies("levee_local_replies_total", "Error replies levee made itself",
                    {{"listener", l.listeners}, {"reason", reason_names()}}, shards),
      connections("levee_downstream_connections_total", "Downstream connections accepted",
                  {{"listener", l.listeners}}, shards),
      refused("levee_downstream_refused_total", "Downstream connections refused",
              {{"listener", l.listeners}, {"cause", {"max_connections", "per_source", "accept_rate", "draining"}}},
              shards),
      untrusted("levee_untrusted_headers_total",
                "Requests carrying a header levee did not believe (an untrusted source): the route's default was used",
                {{"listener", l.listeners}, {"header", {"criticality", "tenant", "timeout", "attempt"}}}, shards),
      tls_handshakes("levee_tls_handshakes_total", "TLS handshakes on listeners, by how they ended",
                     {{"listener", l.listeners}, {"result", {"full", "resumed", "failed", "timeout", "refused"}}}, shards),
      proxy_headers("levee_proxy_protocol_headers_total",
                    "PROXY protocol headers read on listeners, by version or how they failed",
                    {{"listener", l.listeners}, {"result", {"v1", "v2", "local", "invalid", "timeout", "closed"}}}, shards),
      http2_connections("levee_http2_connections_total", "Downstream connections that spoke HTTP/2",
                        {{"listener", l.listeners}}, shards),
      http2_limits("levee_http2_limit_total", "HTTP/2 protocol limits a client hit (docs/http2.md)",
                   {{"listener", l.listeners},
                    {"limit", {"header_list", "rapid_reset", "control_flood", "queued_streams", "protocol"}}},
                   shards),
      upstream_requests("levee_upstream_requests_total", "Responses from upstream endpoints",
                        {{kEndpointLabels, l.endpoints}, {"code", kCodes}}, shards),
      upstream_errors("levee_upstream_errors_total", "Upstream attempts that got no response",
                      {{kEndpointLabels, l.endpoints}, {"kind", {"connect", "reset", "timeout", "protocol"}}},
                      shards),
      upstream_connects("levee_upstream_connections_total", "Upstream connections opened",
                        {{"cluster", l.clusters}}, shards),
      load_report_errors("levee_load_report_errors_total",
                         "Load reports whose framing could not be read (ignored whole)", {{"cluster", l.clusters}},
                         shards),
      load_report_ignored("levee_load_report_metrics_ignored_total",
                          "Metrics in load reports that were not understood (ignored, the rest used)",
                          {{"cluster", l.clusters}, {"why", {"unknown", "malformed"}}}, shards),
      bytes("levee_bytes_total", "Body and header bytes relayed",
            {{"direction", {"from_downstream", "to_downstream"}}}, shards),
      upstream_latency("levee_upstream_latency_seconds", "Time from sending upstream to the response header",
                       {{"cluster", l.clusters}}, metrics::latency_buckets(), shards),
      request_duration("levee_request_duration_seconds", "Time from request header to the end of the answer",
                       {{"cluster", l.clusters}, {"outcome", {"served", "rejected"}}}, metrics::latency_buckets(),
                       shards),
      queue_time("levee_queue_time_seconds", "Time admitted requests waited in a cluster queue",
                 {{"cluster", l.clusters}}, metrics::latency_buckets(), shards),
      health_checks("levee_health_checks_total", "Active health checks by result",
                    {{kEndpointLabels, l.endpoints}, {"result", {"ok", "failed"}}}, shards),
      health_check_latency("levee_health_check_latency_seconds", "Active health check round trips",
                           {{"cluster", l.clusters}}, metrics::latency_buckets(), shards),
      endpoint_base(l.endpoint_base) {}

}  // namespace levee::proxy
