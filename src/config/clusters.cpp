// The `clusters` section: endpoints, timeouts and pools, the admission
// pipeline's policies (concurrency, queue, throttle, quotas, retries),
// health checks, outlier detection, slow start and load reports. Called
// by loader.cpp for each entry; docs/configuration.md is the reference.
#include <yaml-cpp/yaml.h>

#include <algorithm>
#include <cmath>

#include "config/config.hpp"
#include "config/sections.hpp"
#include "config/tls_reader.hpp"
#include "core/text.hpp"

namespace levee::config::detail {

namespace {

void read_endpoint(Ctx& ctx, const YAML::Node& n, const std::string& path, EndpointConfig& e) {
  auto parse_addr = [&](const YAML::Node& a, const std::string& p) {
    if (!scalar(ctx, a, p, "host:port")) return;
    if (!split_host_port(a.Scalar(), e.host, e.port))
      ctx.error(a, p, "must be host:port with port 1..65535, not '" + a.Scalar() + "'");
  };
  if (n.IsScalar()) {
    parse_addr(n, path);
    return;
  }
  Map m(ctx, n, path);
  auto an = m.take("address");
  if (!an.IsDefined()) ctx.error(n, m.sub("address"), "is required");
  else parse_addr(an, m.sub("address"));
  read_double(ctx, m.take("weight"), m.sub("weight"), e.weight, 0.001, 1e6);
}

void read_orca_metric(Ctx& ctx, const YAML::Node& n, const std::string& path, core::OrcaMetric& out) {
  if (!n.IsDefined() || !scalar(ctx, n, path, "an ORCA metric name")) return;
  if (auto m = core::parse_orca_metric(n.Scalar())) out = *m;
  else
    ctx.error(n, path,
              "'" + n.Scalar() +
                  "' is not an ORCA metric: cpu_utilization, mem_utilization, application_utilization, "
                  "rps_fractional, eps, or named_metrics.<name>, request_cost.<name>, utilization.<name>");
}

void read_load_report(Ctx& ctx, const YAML::Node& n, const std::string& path, LoadReportConfig& lr) {
  Map m(ctx, n, path);
  if (auto f = m.take("request_format"); f.IsDefined() && scalar(ctx, f, m.sub("request_format"), "off, text or json")) {
    if (f.Scalar() == "off") lr.request_format = LoadReportConfig::Format::Off;
    else if (f.Scalar() == "text") lr.request_format = LoadReportConfig::Format::Text;
    else if (f.Scalar() == "json") lr.request_format = LoadReportConfig::Format::Json;
    else ctx.error(f, m.sub("request_format"), "must be off, text or json, not '" + f.Scalar() + "'");
  }
  read_orca_metric(ctx, m.take("utilization"), m.sub("utilization"), lr.select.utilization);
  read_orca_metric(ctx, m.take("cost"), m.sub("cost"), lr.select.cost);
}

}  // namespace

void read_cluster(Ctx& ctx, const YAML::Node& n, const std::string& path, ClusterConfig& c) {
  Map m(ctx, n, path);
  auto nn = m.take("name");
  if (!nn.IsDefined()) ctx.error(n, m.sub("name"), "is required");
  read(ctx, nn, m.sub("name"), c.name);
  if (nn.IsDefined() && nn.IsScalar() && c.name.empty()) ctx.error(nn, m.sub("name"), "must not be empty");
  auto en = m.take("endpoints");
  if (!en.IsDefined()) {
    ctx.error(n, m.sub("endpoints"), "is required");
  } else if (!en.IsSequence() || en.size() == 0) {
    ctx.error(en, m.sub("endpoints"), "must be a non-empty list of host:port");
  } else {
    for (std::size_t i = 0; i < en.size(); ++i) {
      EndpointConfig e;
      read_endpoint(ctx, en[i], at(m.sub("endpoints"), i), e);
      c.endpoints.push_back(std::move(e));
    }
  }
  using std::chrono::milliseconds;
  using std::chrono::hours;
  read_duration(ctx, m.take("connect_timeout"), m.sub("connect_timeout"), c.connect_timeout, milliseconds(1), hours(1));
  read_duration(ctx, m.take("response_timeout"), m.sub("response_timeout"), c.response_timeout, milliseconds(1), hours(24));
  read_duration(ctx, m.take("idle_timeout"), m.sub("idle_timeout"), c.idle_timeout, milliseconds(1), hours(24));
  read_uint(ctx, m.take("max_idle"), m.sub("max_idle"), c.max_idle, 0, 100000);
  read_duration(ctx, m.take("resolve_interval"), m.sub("resolve_interval"), c.resolve_interval, milliseconds(100), hours(24));

  if (auto cc = m.take("concurrency"); cc.IsDefined()) {
    Map cm(ctx, cc, m.sub("concurrency"));
    auto ln = cm.take("limit");
    auto an = cm.take("adaptive");
    read_bool(ctx, cm.take("enabled"), cm.sub("enabled"), c.admission.enabled);
    read_bool(ctx, cm.take("dry_run"), cm.sub("dry_run"), c.admission.dry_run);
    if (ln.IsDefined() && an.IsDefined()) ctx.error(cc, cm.path(), "give either limit or adaptive, not both");
    if (ln.IsDefined()) {
      c.admission.limit.adaptive = false;
      read_uint(ctx, ln, cm.sub("limit"), c.admission.limit.static_limit, 1, 1000000);
    } else if (an.IsDefined()) {
      c.admission.limit.adaptive = true;
      auto& a = c.admission.limit.adaptive_cfg;
      Map am(ctx, an, cm.sub("adaptive"));
      read_uint(ctx, am.take("min"), am.sub("min"), a.min, 1, 1000000);
      read_uint(ctx, am.take("max"), am.sub("max"), a.max, 1, 1000000);
      read_uint(ctx, am.take("initial"), am.sub("initial"), a.initial, 1, 1000000);
      read_duration(ctx, am.take("window"), am.sub("window"), a.min_window, milliseconds(1), std::chrono::minutes(1));
      read_uint(ctx, am.take("min_samples"), am.sub("min_samples"), a.min_samples, 1, 1000000);
      read_double(ctx, am.take("alpha"), am.sub("alpha"), a.alpha, 0.0, 10.0);
      read_double(ctx, am.take("beta"), am.sub("beta"), a.beta, 0.0, 10.0);
      read_duration(ctx, am.take("probe_interval"), am.sub("probe_interval"), a.probe_interval, milliseconds(100), hours(1));
      read_duration(ctx, am.take("rtt_tolerance"), am.sub("rtt_tolerance"), a.rtt_tolerance, Duration::zero(), std::chrono::seconds(10));
      if (a.min > a.max) ctx.error(an, am.path(), "min must not exceed max");
      if (a.alpha > a.beta) ctx.error(an, am.path(), "alpha must not exceed beta");
      if (!am.has("initial")) a.initial = std::clamp<std::uint32_t>(20, a.min, a.max);
      else if (a.initial < a.min || a.initial > a.max) ctx.error(an, am.sub("initial"), "must be between min and max");
    }
  }
  if (auto qn = m.take("queue"); qn.IsDefined()) {
    auto& q = c.admission.queue;
    Map qm(ctx, qn, m.sub("queue"));
    read_uint(ctx, qm.take("max"), qm.sub("max"), q.max, 0, 10000000);
    read_duration(ctx, qm.take("target"), qm.sub("target"), q.target, std::chrono::microseconds(1), hours(1));
    read_bool(ctx, qm.take("lifo_on_overload"), qm.sub("lifo_on_overload"), q.lifo_on_overload);
    if (auto cd = qm.take("codel"); cd.IsDefined()) {
      Map cdm(ctx, cd, qm.sub("codel"));
      read_duration(ctx, cdm.take("target"), cdm.sub("target"), q.codel_target, std::chrono::microseconds(1), hours(1));
      read_duration(ctx, cdm.take("interval"), cdm.sub("interval"), q.codel_interval, milliseconds(1), hours(1));
    }
  }
  if (auto on = m.take("overload"); on.IsDefined()) {
    Map om(ctx, on, m.sub("overload"));
    read_double(ctx, om.take("utilization"), om.sub("utilization"), c.overload.utilization, 0.0, 100.0);
    read_duration(ctx, om.take("queue_time"), om.sub("queue_time"), c.overload.queue_time, Duration::zero(), hours(1));
    read_duration(ctx, om.take("hold"), om.sub("hold"), c.overload.hold, Duration::zero(), hours(1));
  }
  if (auto tn = m.take("throttle"); tn.IsDefined()) {
    Map tm(ctx, tn, m.sub("throttle"));
    read_bool(ctx, tm.take("enabled"), tm.sub("enabled"), c.throttle.enabled);
    read_bool(ctx, tm.take("dry_run"), tm.sub("dry_run"), c.throttle.dry_run);
    read_double(ctx, tm.take("k"), tm.sub("k"), c.throttle.k, 1.0, 100.0);
    read_duration(ctx, tm.take("window"), tm.sub("window"), c.throttle.window, std::chrono::seconds(1), hours(1));
    read_double(ctx, tm.take("min_requests"), tm.sub("min_requests"), c.throttle.min_requests, 0.0, 1e9);
    read_double(ctx, tm.take("max_probability"), tm.sub("max_probability"), c.throttle.max_probability, 0.0, 1.0);
    read_uint(ctx, tm.take("recovery_run"), tm.sub("recovery_run"), c.throttle.recovery_run, 0, 1000000);
    read_duration(ctx, tm.take("recovery_span"), tm.sub("recovery_span"), c.throttle.recovery_span, Duration::zero(),
                  std::chrono::minutes(1));
  }
  if (auto rn = m.take("retry"); rn.IsDefined()) {
    auto& r = c.retry;
    Map rm(ctx, rn, m.sub("retry"));
    read_bool(ctx, rm.take("enabled"), rm.sub("enabled"), r.enabled);
    read_uint(ctx, rm.take("max_attempts"), rm.sub("max_attempts"), r.max_attempts, 1, 10);
    read_double(ctx, rm.take("budget_ratio"), rm.sub("budget_ratio"), r.budget_ratio, 0.0, 1.0);
    read_double(ctx, rm.take("budget_min_per_second"), rm.sub("budget_min_per_second"), r.budget_min_per_second, 0.0, 1e6);
    read_duration(ctx, rm.take("backoff_base"), rm.sub("backoff_base"), r.backoff_base, Duration::zero(), std::chrono::minutes(1));
    read_duration(ctx, rm.take("backoff_max"), rm.sub("backoff_max"), r.backoff_max, Duration::zero(), std::chrono::minutes(10));
    read_double(ctx, rm.take("storm_share"), rm.sub("storm_share"), r.storm_share, 0.0, 1.0);
  }
  if (auto hn = m.take("health_check"); hn.IsDefined()) {
    auto& h = c.health_check;
    h.enabled = true;
    Map hm(ctx, hn, m.sub("health_check"));
    read_bool(ctx, hm.take("enabled"), hm.sub("enabled"), h.enabled);
    auto pn = hm.take("path");
    read(ctx, pn, hm.sub("path"), h.path);
    if (pn.IsDefined() && (h.path.empty() || h.path.front() != '/')) ctx.error(pn, hm.sub("path"), "must start with '/'");
    else if (!fits_request_head(h.path)) ctx.error(pn, hm.sub("path"), "must not hold spaces or control characters");
    auto hhn = hm.take("host");
    read(ctx, hhn, hm.sub("host"), h.host);
    if (!fits_request_head(h.host)) ctx.error(hhn, hm.sub("host"), "must not hold spaces or control characters");
    read_duration(ctx, hm.take("interval"), hm.sub("interval"), h.interval, milliseconds(10), hours(1));
    read_duration(ctx, hm.take("max_interval"), hm.sub("max_interval"), h.max_interval, milliseconds(10), hours(1));
    read_double(ctx, hm.take("jitter"), hm.sub("jitter"), h.jitter, 0.0, 0.5);
    read_duration(ctx, hm.take("timeout"), hm.sub("timeout"), h.timeout, milliseconds(1), hours(1));
    read_uint(ctx, hm.take("healthy"), hm.sub("healthy"), h.healthy, 1, 1000);
    read_uint(ctx, hm.take("unhealthy"), hm.sub("unhealthy"), h.unhealthy, 1, 1000);
    if (auto sn = hm.take("expected_status"); sn.IsDefined()) {
      Map sm(ctx, sn, hm.sub("expected_status"));
      read_uint(ctx, sm.take("min"), sm.sub("min"), h.status_min, 100, 599);
      read_uint(ctx, sm.take("max"), sm.sub("max"), h.status_max, 100, 599);
      if (h.status_min > h.status_max) ctx.error(sn, sm.path(), "min must not exceed max");
    }
    read(ctx, hm.take("body_contains"), hm.sub("body_contains"), h.body_contains);
    if (auto tn = hm.take("type"); tn.IsDefined() && scalar(ctx, tn, hm.sub("type"), "http or grpc")) {
      h.type_given = true;
      if (tn.Scalar() == "http") h.type = HealthCheckConfig::Type::Http;
      else if (tn.Scalar() == "grpc") h.type = HealthCheckConfig::Type::Grpc;
      else ctx.error(tn, hm.sub("type"), "must be http or grpc, not '" + tn.Scalar() + "'");
    }
    auto gn = hm.take("grpc_service");
    read(ctx, gn, hm.sub("grpc_service"), h.grpc_service);
    if (!fits_request_head(h.grpc_service))
      ctx.error(gn, hm.sub("grpc_service"), "must not hold spaces or control characters");
    if (h.max_interval < h.interval) h.max_interval = h.interval;
  }
  if (auto on = m.take("outlier_detection"); on.IsDefined()) {
    auto& o = c.outlier;
    Map om(ctx, on, m.sub("outlier_detection"));
    read_bool(ctx, om.take("enabled"), om.sub("enabled"), o.enabled);
    read_uint(ctx, om.take("consecutive_failures"), om.sub("consecutive_failures"), o.params.consecutive_failures, 1, 100000);
    read_duration(ctx, om.take("base_ejection"), om.sub("base_ejection"), o.params.base_ejection, milliseconds(1), hours(24));
    read_duration(ctx, om.take("max_ejection"), om.sub("max_ejection"), o.params.max_ejection, milliseconds(1), hours(24));
    read_duration(ctx, om.take("decay"), om.sub("decay"), o.params.decay, Duration::zero(), hours(24));
    read_double(ctx, om.take("max_ejected_pct"), om.sub("max_ejected_pct"), o.params.max_ejected_pct, 0.0, 100.0);
  }
  if (auto sn = m.take("slow_start"); sn.IsDefined()) {
    auto& s = c.slow_start;
    Map sm(ctx, sn, m.sub("slow_start"));
    read_duration(ctx, sm.take("window"), sm.sub("window"), s.window, Duration::zero(), hours(24));
    read_double(ctx, sm.take("aggression"), sm.sub("aggression"), s.aggression, 0.01, 100.0);
    read_double(ctx, sm.take("min_weight_pct"), sm.sub("min_weight_pct"), s.min_weight_pct, 0.0, 100.0);
    read_bool(ctx, sm.take("readiness"), sm.sub("readiness"), s.readiness);
    read_duration(ctx, sm.take("early_exit"), sm.sub("early_exit"), s.early_exit, Duration::zero(), hours(24));
  }
  if (auto ln = m.take("load_report"); ln.IsDefined()) read_load_report(ctx, ln, m.sub("load_report"), c.load_report);
  if (auto pn = m.take("protocol"); pn.IsDefined() && scalar(ctx, pn, m.sub("protocol"), "http1 or http2")) {
    if (pn.Scalar() == "http1") c.protocol = ClusterConfig::Protocol::Http1;
    else if (pn.Scalar() == "http2") c.protocol = ClusterConfig::Protocol::Http2;
    else ctx.error(pn, m.sub("protocol"), "must be http1 or http2, not '" + pn.Scalar() + "'");
  }
  if (auto hn = m.take("http2"); hn.IsDefined()) {
    auto& h = c.http2;
    Map hm(ctx, hn, m.sub("http2"));
    read_uint(ctx, hm.take("max_connections"), hm.sub("max_connections"), h.max_connections, 1, 64);
    read_uint(ctx, hm.take("max_concurrent_streams"), hm.sub("max_concurrent_streams"), h.max_concurrent_streams, 1,
              100000);
    read_uint(ctx, hm.take("initial_window"), hm.sub("initial_window"), h.initial_window, 16 * 1024,
              (1u << 31) - 1);
  }
  // Over HTTP/2 the check is gRPC's health protocol unless it says http;
  // gRPC's needs HTTP/2.
  if (auto& h = c.health_check; !h.type_given)
    h.type = c.protocol == ClusterConfig::Protocol::Http2 ? HealthCheckConfig::Type::Grpc : HealthCheckConfig::Type::Http;
  else if (h.type == HealthCheckConfig::Type::Grpc && c.protocol != ClusterConfig::Protocol::Http2)
    ctx.error(n["health_check"]["type"], m.sub("health_check") + ".type", "grpc needs the cluster's protocol: http2");
  // A gRPC check asks for a service and reads its status; the HTTP check's
  // keys would be ignored, so they are an error rather than a surprise.
  if (const YAML::Node hn = n["health_check"];
      c.health_check.type == HealthCheckConfig::Type::Grpc && hn.IsDefined() && hn.IsMap())
    for (const char* key : {"path", "expected_status", "body_contains"})
      if (const YAML::Node kn = hn[key]; kn.IsDefined())
        ctx.error(kn, m.sub("health_check") + "." + key,
                  "means nothing to a grpc health check (grpc_service names what it checks; type: http checks a path)");
  read_quota_map(ctx, m.take("quotas"), m.sub("quotas"), c.quotas);
  read_cluster_edge(ctx, m, c);  // tls: config/tls.cpp
}

}  // namespace levee::config::detail
