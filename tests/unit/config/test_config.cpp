#include <catch2/catch_test_macros.hpp>
#include <string>

#include "config/config.hpp"

using namespace levee::config;

namespace {

std::string errors_of(const std::string& yaml) {
  auto r = load_string(yaml, "t.yaml");
  std::string out;
  for (auto& e : r.errors) out += e.format() + "\n";
  return out;
}

const char* kMinimal = R"(
listeners:
  - port: 8080
    routes:
      - cluster: app
clusters:
  - name: app
    endpoints: ["127.0.0.1:9000"]
)";

}  // namespace

TEST_CASE("the example configuration loads", "[config]") {
  auto r = load_file(LEVEE_SOURCE_DIR "/config/levee.yaml");
  for (auto& e : r.errors) INFO(e.format());
  REQUIRE(r.ok());
  const auto& c = *r.config;
  CHECK(c.admin.port == 9901);
  REQUIRE(c.listeners.size() == 1);
  CHECK(c.listeners[0].port == 8080);
  CHECK(c.listeners[0].routes[0].timeout == std::chrono::seconds(2));
  REQUIRE(c.clusters.size() == 1);
  CHECK(c.clusters[0].admission.limit.adaptive);
  CHECK(c.tenants.quotas.front().first == "default");
  CHECK(c.tenants.quotas.size() == 4);
  CHECK(c.tenants.source.trusted.networks.size() == 2);
}

TEST_CASE("a minimal configuration takes the documented defaults", "[config]") {
  auto r = load_string(kMinimal, "t.yaml");
  REQUIRE(r.ok());
  const auto& c = *r.config;
  CHECK(c.workers == 0);
  CHECK(c.listeners[0].address == "0.0.0.0");
  CHECK(c.listeners[0].default_criticality == levee::core::Criticality::Critical);
  CHECK(c.listeners[0].routes[0].prefix == "/");
  CHECK(c.clusters[0].admission.enabled);
  CHECK(c.clusters[0].admission.limit.adaptive);
  CHECK(c.clusters[0].admission.queue.target == std::chrono::milliseconds(50));
  CHECK(c.clusters[0].endpoints[0].host == "127.0.0.1");
  CHECK(c.clusters[0].endpoints[0].port == 9000);
  CHECK(c.tenants.quotas.empty());
}

TEST_CASE("batch listeners default to SHEDDABLE_PLUS", "[config]") {
  auto r = load_string(R"(
listeners:
  - {port: 8081, mode: batch, routes: [{cluster: app}]}
clusters: [{name: app, endpoints: ["[::1]:9000"]}]
)", "t.yaml");
  REQUIRE(r.ok());
  CHECK(r.config->listeners[0].default_criticality == levee::core::Criticality::SheddablePlus);
  CHECK(r.config->clusters[0].endpoints[0].host == "::1");
}

TEST_CASE("all errors are reported together with place and path", "[config]") {
  auto out = errors_of(R"(listeners:
  - port: 80800
    routes:
      - cluster: nope
        timout: 2s
clusters:
  - name: app
    endpoints: ["127.0.0.1:0", "host-without-port"]
    concurrency: {limit: zero}
)");
  CHECK(out ==
        "t.yaml:2:11: listeners[0].port: must be 1..65535\n"
        "t.yaml:5:9: listeners[0].routes[0].timout: unknown key (did you mean 'timeout'?)\n"
        "t.yaml:8:17: clusters[0].endpoints[0]: must be host:port with port 1..65535, not '127.0.0.1:0'\n"
        "t.yaml:8:32: clusters[0].endpoints[1]: must be host:port with port 1..65535, not 'host-without-port'\n"
        "t.yaml:9:26: clusters[0].concurrency.limit: must be an integer, not 'zero'\n"
        "t.yaml:4:18: listeners[0].routes[0].cluster: no cluster named 'nope'\n");
}

TEST_CASE("an empty route item is an error and not a route to nowhere", "[config]") {
  // Found by fuzz_config: `- #cluster: app` is a null item, and was accepted
  // as a route with no cluster.
  auto out = errors_of(R"(listeners:
  - port: 8080
    routes:
      - #cluster: app
clusters:
  - name: app
    endpoints: ["127.0.0.1:9000"]
)");
  // yaml-cpp places an empty item at the token after it (line 5); the path
  // names the item.
  CHECK(out == "t.yaml:5:1: listeners[0].routes[0]: must be a route (at least `cluster`)\n");
}

TEST_CASE("wrong types, bad enums and bad durations are named", "[config]") {
  auto out = errors_of(R"(workers: lots
drain_timeout: soon
access_log: {format: xml, sample: 2}
self_protection:
  thresholds: {SHEDDABLE: 1.5, CRITICAL_PLUS: 1.0}
listeners:
  - port: 8080
    criticality: URGENT
    routes: [{cluster: app, match: {prefix: api}}]
clusters:
  - name: app
    endpoints: "127.0.0.1:9000"
)");
  CHECK(out.find("t.yaml:1:10: workers: must be auto or a number 1..1024") != std::string::npos);
  CHECK(out.find("t.yaml:2:16: drain_timeout: must be a duration like 250ms or 2s, not 'soon'") != std::string::npos);
  CHECK(out.find("access_log.format: must be text or json, not 'xml'") != std::string::npos);
  CHECK(out.find("access_log.sample: must be between 0 and 1") != std::string::npos);
  CHECK(out.find("self_protection.thresholds: must not shed a more critical level before a less critical one") != std::string::npos);
  CHECK(out.find("listeners[0].criticality: must be CRITICAL_PLUS, CRITICAL, SHEDDABLE_PLUS or SHEDDABLE, not 'URGENT'") != std::string::npos);
  CHECK(out.find("listeners[0].routes[0].match.prefix: must start with '/'") != std::string::npos);
  CHECK(out.find("t.yaml:12:16: clusters[0].endpoints: must be a non-empty list of host:port") != std::string::npos);
}

TEST_CASE("duplicates and clashes are reported", "[config]") {
  auto out = errors_of(R"(admin: {port: 8080}
listeners:
  - {name: a, port: 8080, routes: [{cluster: app}]}
  - {name: a, port: 8080, routes: [{cluster: app}]}
clusters:
  - {name: app, endpoints: ["127.0.0.1:1"]}
  - {name: app, endpoints: ["127.0.0.1:2"], name: dup}
)");
  CHECK(out.find("clusters[1].name: duplicate key") != std::string::npos);
  CHECK(out.find("listeners[1].name: duplicate listener name 'a'") != std::string::npos);
  CHECK(out.find("listeners[1].port: another listener already uses 0.0.0.0:8080") != std::string::npos);
}

TEST_CASE("an empty cluster name or reference is refused, not routed to cluster 0", "[config]") {
  // Accepted before, this pointed a route at clusters[0] of an empty list:
  // levee --validate said ok and levee crashed at start-up.
  auto out = errors_of(R"(listeners: [{port: 8080, routes: [{cluster: ""}]}]
)");
  CHECK(out.find("listeners[0].routes[0].cluster: must not be empty") != std::string::npos);
  out = errors_of(R"(listeners: [{port: 8080, routes: [{cluster: app}]}]
clusters: [{name: "", endpoints: ["127.0.0.1:9"]}, {name: app, endpoints: ["127.0.0.1:9"]}]
)");
  CHECK(out.find("clusters[0].name: must not be empty") != std::string::npos);
}

TEST_CASE("an endpoint needs a host", "[config]") {
  auto out = errors_of(R"(listeners: [{port: 8080, routes: [{cluster: app}]}]
clusters: [{name: app, endpoints: ["[]:80", "a b:80", "ok:80"]}]
)");
  CHECK(out.find("clusters[0].endpoints[0]: must be host:port with port 1..65535, not '[]:80'") != std::string::npos);
  CHECK(out.find("clusters[0].endpoints[1]: must be host:port") != std::string::npos);
  CHECK(out.find("endpoints[2]") == std::string::npos);
}

TEST_CASE("header names are tokens and health-check requests cannot be split", "[config]") {
  // levee writes some of these into the heads it sends upstream: a CR LF
  // in them would add header fields (or requests) of the config's choosing.
  auto out = errors_of(R"(headers: {attempt: "x-a: 1\r\nx-evil", request_id: "x id"}
tenants: {source: {header: "x:t", api_keys: {header: "k\n", keys: {a: b}}}}
listeners: [{port: 8080, routes: [{cluster: app}]}]
clusters:
  - name: app
    endpoints: ["127.0.0.1:9"]
    health_check: {path: "/h HTTP/1.1\r\nX: y", host: "a\r\nb"}
)");
  CHECK(out.find("headers.attempt: must be a header name") != std::string::npos);
  CHECK(out.find("headers.request_id: must be a header name") != std::string::npos);
  CHECK(out.find("tenants.source.header: must be a header name") != std::string::npos);
  CHECK(out.find("tenants.source.api_keys.header: must be a header name") != std::string::npos);
  CHECK(out.find("clusters[0].health_check.path: must not hold spaces or control characters") != std::string::npos);
  CHECK(out.find("clusters[0].health_check.host: must not hold spaces or control characters") != std::string::npos);
  CHECK(load_string(R"(headers: {attempt: X-Try_1}
listeners: [{port: 8080, routes: [{cluster: app}]}]
clusters: [{name: app, endpoints: ["127.0.0.1:9"], health_check: {path: "/h?x=1", host: "svc:81"}}]
)", "t.yaml").ok());
}

TEST_CASE("an http2 cluster: its settings and its health checks", "[config]") {
  auto r = load_string(R"(listeners: [{port: 8080, routes: [{cluster: g}]}]
clusters: [{name: g, endpoints: ["127.0.0.1:9"], protocol: http2, http2: {max_connections: 4, max_concurrent_streams: 50}}]
)", "t.yaml");
  REQUIRE(r.ok());
  CHECK(r.config->clusters[0].protocol == ClusterConfig::Protocol::Http2);
  CHECK(r.config->clusters[0].http2.max_connections == 4);
  CHECK(r.config->clusters[0].http2.max_concurrent_streams == 50);
  // Over HTTP/2 an active check is gRPC's health protocol unless it says
  // http; gRPC's needs HTTP/2 (a fuse caps an http2 cluster's streams: allowed).
  auto hc = load_string(R"(listeners: [{port: 8080, routes: [{cluster: g, fuse: true}]}]
clusters:
  - {name: g, endpoints: ["127.0.0.1:9"], protocol: http2, health_check: {grpc_service: pkg.Svc}}
  - {name: h, endpoints: ["127.0.0.1:9"], protocol: http2, health_check: {type: http, path: /h}}
  - {name: i, endpoints: ["127.0.0.1:9"], health_check: {path: /h}}
)", "t.yaml");
  REQUIRE(hc.ok());
  CHECK(hc.config->clusters[0].health_check.type == HealthCheckConfig::Type::Grpc);
  CHECK(hc.config->clusters[0].health_check.grpc_service == "pkg.Svc");
  CHECK(hc.config->clusters[1].health_check.type == HealthCheckConfig::Type::Http);
  CHECK(hc.config->clusters[2].health_check.type == HealthCheckConfig::Type::Http);
  auto out = errors_of(R"(listeners:
  - {port: 8080, routes: [{cluster: g}]}
clusters:
  - {name: g, endpoints: ["127.0.0.1:9"], health_check: {type: grpc}}
  - {name: h, endpoints: ["127.0.0.1:9"], protocol: spdy}
  - {name: i, endpoints: ["127.0.0.1:9"], protocol: http2, health_check: {type: soap}}
  - {name: j, endpoints: ["127.0.0.1:9"], protocol: http2, health_check: {path: /h, body_contains: ok}}
)");
  CHECK(out.find("t.yaml:4:64: clusters[0].health_check.type: grpc needs the cluster's protocol: http2") !=
        std::string::npos);
  CHECK(out.find("clusters[1].protocol: must be http1 or http2, not 'spdy'") != std::string::npos);
  CHECK(out.find("clusters[2].health_check.type: must be http or grpc, not 'soap'") != std::string::npos);
  // A gRPC check (the default over http2) has no path or body to look at.
  CHECK(out.find("t.yaml:7:81: clusters[3].health_check.path: means nothing to a grpc health check") !=
        std::string::npos);
  CHECK(out.find("clusters[3].health_check.body_contains: means nothing to a grpc health check") !=
        std::string::npos);
  CHECK(out.find("clusters[3].health_check.expected_status") == std::string::npos);
}

TEST_CASE("tenant quotas need a default and overrides must name known tenants", "[config]") {
  auto out = errors_of(R"(tenants:
  quotas: {gmail: 4.0, android: -1}
listeners: [{port: 8080, routes: [{cluster: app}]}]
clusters: [{name: app, endpoints: ["127.0.0.1:9"], quotas: {mystery: 1}}]
)");
  CHECK(out.find("tenants.quotas.android: must be between 0 and 1e+06") != std::string::npos);
  CHECK(out.find("tenants.quotas: needs a 'default' quota for tenants not listed") != std::string::npos);
  CHECK(out.find("clusters[0].quotas.mystery: tenant 'mystery' is not listed in tenants.quotas") != std::string::npos);
}

TEST_CASE("YAML syntax errors carry a position", "[config]") {
  auto out = errors_of("listeners: [\n  {port: 1\n");
  CHECK(out.rfind("t.yaml:", 0) == 0);
  CHECK(out.find("YAML syntax") != std::string::npos);
  CHECK(errors_of("") == "t.yaml: the file is empty: it must be a mapping\n");
  auto missing = load_file("/nonexistent/levee.yaml");
  REQUIRE(missing.errors.size() == 1);
  CHECK(missing.errors[0].format() == "/nonexistent/levee.yaml: cannot read the file");
}

TEST_CASE("durations parse", "[config]") {
  using namespace std::chrono_literals;
  CHECK(parse_duration("250ms") == levee::core::Duration(250ms));
  CHECK(parse_duration("1.5s") == levee::core::Duration(1500ms));
  CHECK(parse_duration("2m") == levee::core::Duration(120s));
  CHECK_FALSE(parse_duration("2"));
  CHECK_FALSE(parse_duration("ms"));
  CHECK_FALSE(parse_duration("5 parsecs"));
}

TEST_CASE("names that are not UTF-8 are refused with their place", "[config]") {
  const std::string bad = "listeners: [{name: \"l\xff\", port: 8080, routes: [{cluster: app}]}]\n"
                          "clusters: [{name: app, endpoints: [\"127.0.0.1:1\"]}]\n";
  auto r = load_string(bad, "t.yaml");
  REQUIRE_FALSE(r.ok());
  bool named = false;
  for (auto& e : r.errors) named = named || (e.path == "listeners[0].name" && e.line == 1 &&
                                             e.message.find("UTF-8") != std::string::npos);
  CHECK(named);
  const std::string tenant = "tenants: {quotas: {default: 1, \"t\xc3\": 2}}\n"
                             "listeners: [{name: l, port: 8080, routes: [{cluster: app}]}]\n"
                             "clusters: [{name: app, endpoints: [\"127.0.0.1:1\"]}]\n";
  CHECK_FALSE(load_string(tenant, "t.yaml").ok());
}

TEST_CASE("routes are named after their listener and place unless named, and names are unique", "[config]") {
  const std::string two = "listeners: [{name: l, port: 8080, routes: [{cluster: app}, {name: api, cluster: app}]}]\n"
                          "clusters: [{name: app, endpoints: [\"127.0.0.1:1\"]}]\n";
  auto r = load_string(two, "t.yaml");
  REQUIRE(r.ok());
  CHECK(r.config->listeners[0].routes[0].name == "l/0");
  CHECK(r.config->listeners[0].routes[1].name == "api");
  const std::string dup = "listeners: [{name: l, port: 8080, routes: [{name: x, cluster: app}, {name: x, cluster: app}]}]\n"
                          "clusters: [{name: app, endpoints: [\"127.0.0.1:1\"]}]\n";
  auto d = load_string(dup, "t.yaml");
  REQUIRE_FALSE(d.ok());
  CHECK(d.errors[0].path == "listeners[0].routes[1].name");
}

TEST_CASE("quota_sync: off by default, modes, defaults and errors with their place", "[config][quota_sync]") {
  {
    auto r = load_string(kMinimal, "t.yaml");
    REQUIRE(r.ok());
    CHECK_FALSE(r.config->quota_sync.enabled);
  }
  const std::string quotas = "tenants:\n  quotas: {default: 0.5, gold: 2}\n";
  {
    auto r = load_string(std::string(kMinimal) + quotas + R"(
quota_sync:
  enabled: true
  redis: {address: "127.0.0.1:6379", password: s3cret, username: levee, database: 2,
          tls: {enabled: true, ca_file: /etc/ca.pem, cert_file: c.pem, key_file: k.pem}}
  max_instances: 20
)", "t.yaml");
    for (auto& e : r.errors) INFO(e.format());
    REQUIRE(r.ok());
    const auto& q = r.config->quota_sync;
    CHECK(q.enabled);
    CHECK(q.redis.mode == RedisConfig::Mode::Standalone);
    REQUIRE(q.redis.addresses.size() == 1);
    CHECK(q.redis.addresses[0].port == 6379);
    CHECK(q.redis.username == "levee");
    CHECK(q.redis.database == 2);
    CHECK(q.redis.tls.enabled);
    CHECK(q.redis.tls.verify);
    CHECK(q.interval == std::chrono::milliseconds(200));
    CHECK(q.bucket == std::chrono::seconds(1));
    CHECK(q.redis.timeout == std::chrono::milliseconds(100));
    CHECK(q.max_instances == 20);
    CHECK(q.key_prefix == "levee");
    CHECK(q.fleet == "default");
  }
  {
    auto r = load_string(std::string(kMinimal) + quotas + R"(
quota_sync:
  enabled: true
  redis: {mode: sentinel, sentinels: ["10.0.0.1:26379", "10.0.0.2:26379"], master_name: quota}
)", "t.yaml");
    REQUIRE(r.ok());
    CHECK(r.config->quota_sync.redis.mode == RedisConfig::Mode::Sentinel);
    CHECK(r.config->quota_sync.redis.addresses.size() == 2);
  }
  auto e = errors_of(std::string(kMinimal) + quotas + R"(
quota_sync:
  enabled: true
  redis: {mode: sentinel, address: "127.0.0.1:6379", username: u}
  fleet: "a{b}"
  interval: 50ms
  member_ttl: 100ms
)");
  CHECK(e.find("quota_sync.redis.address: is not used in this mode (sentinels is)") != std::string::npos);
  CHECK(e.find("quota_sync.redis.sentinels: is required") != std::string::npos);
  CHECK(e.find("quota_sync.redis.master_name: is required in sentinel mode") != std::string::npos);
  CHECK(e.find("quota_sync.redis.password: is required with username") != std::string::npos);
  CHECK(e.find("quota_sync.fleet: must be a non-empty name without braces") != std::string::npos);
  CHECK(e.find("quota_sync.member_ttl: must be at least 3 x interval") != std::string::npos);
  CHECK(e.find("quota_sync.redis.timeout: must not exceed interval") != std::string::npos);
  CHECK(e.find("t.yaml:") != std::string::npos);
  auto e2 = errors_of(std::string(kMinimal) + R"(
quota_sync:
  enabled: true
  redis: {mode: cluster, nodes: ["127.0.0.1:7000"], database: 1, tls: {cert_file: c.pem}}
  bucket: 20s
)");
  CHECK(e2.find("quota_sync.enabled: needs tenants.quotas") != std::string::npos);
  CHECK(e2.find("quota_sync.redis.database: must be 0 with Redis Cluster") != std::string::npos);
  CHECK(e2.find("quota_sync.redis.tls.key_file: cert_file and key_file go together") != std::string::npos);
  CHECK(e2.find("quota_sync.bucket: must not exceed tenants.window") != std::string::npos);
  // Lines and columns point at the offending key.
  CHECK(e2.find("t.yaml:13:11: quota_sync.bucket") != std::string::npos);
}

TEST_CASE("http2 is off by default, its keys are read and checked, and h2 joins ALPN", "[config]") {
  auto min = load_string(kMinimal, "t.yaml");
  REQUIRE(min.ok());
  CHECK_FALSE(min.config->listeners[0].http2.enabled);
  CHECK(min.config->listeners[0].tls.alpn == std::vector<std::string>{"http/1.1"});
  auto r = load_string(R"(
listeners:
  - port: 8080
    http2: {enabled: true, max_concurrent_streams: 7, initial_window: 2048, max_queued_streams: 3,
            max_resets_per_second: 9, max_control_per_second: 11}
    routes: [{cluster: app}]
clusters: [{name: app, endpoints: ["127.0.0.1:9000"]}]
)", "t.yaml");
  REQUIRE(r.ok());
  const auto& h = r.config->listeners[0].http2;
  CHECK(h.enabled);
  CHECK(h.max_concurrent_streams == 7);
  CHECK(h.initial_window == 2048);
  CHECK(h.max_queued_streams == 3);
  CHECK(h.max_resets_per_second == 9);
  CHECK(h.max_control_per_second == 11);
  CHECK(r.config->listeners[0].tls.alpn == std::vector<std::string>{"h2", "http/1.1"});
  auto out = errors_of(R"(listeners:
  - port: 8080
    http2: {enabled: true, max_concurrent_streams: 0, initial_window: 10, stream: 1}
    routes: [{cluster: app}]
clusters: [{name: app, endpoints: ["127.0.0.1:9000"]}]
)");
  CHECK(out.find("t.yaml:3:52: listeners[0].http2.max_concurrent_streams: must be 1..10000") != std::string::npos);
  CHECK(out.find("t.yaml:3:71: listeners[0].http2.initial_window: must be 1024..2147483647") != std::string::npos);
  CHECK(out.find("listeners[0].http2.stream: unknown key") != std::string::npos);
}

TEST_CASE("admin.allowed_hosts: names only, lower-cased, errors with their place", "[config]") {
  auto r = load_string(std::string(kMinimal) + "admin: {allowed_hosts: [Levee-Admin.internal, gw_1]}\n", "t.yaml");
  REQUIRE(r.errors.empty());
  CHECK(r.config->admin.allowed_hosts == std::vector<std::string>{"levee-admin.internal", "gw_1"});
  auto out = errors_of(std::string(kMinimal) + "admin: {allowed_hosts: [\"evil.example:9901\", \"\"]}\n");
  CHECK(out.find("admin.allowed_hosts[0]: 'evil.example:9901' is not a host name") != std::string::npos);
  CHECK(out.find("admin.allowed_hosts[1]: '' is not a host name") != std::string::npos);
  CHECK(errors_of(std::string(kMinimal) + "admin: {allowed_hosts: localhost}\n")
            .find("admin.allowed_hosts: must be a list of host names") != std::string::npos);
}
