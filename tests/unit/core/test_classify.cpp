// Classification as a pure function of a request's authority, path and
// fields, the peer and the time.
#include <catch2/catch_test_macros.hpp>

#include <string>
#include <vector>

#include "core/classify.hpp"
#include "sim_time.hpp"

using namespace levee::core;
using namespace levee::test;

namespace {

struct F {
  std::string_view name;
  std::string_view value;
};

RouteRule rule(std::string host, std::string prefix, Criticality c = Criticality::Critical,
               Duration timeout = 2s, std::size_t source = 0) {
  RouteRule r;
  r.host = std::move(host);
  r.prefix = std::move(prefix);
  r.criticality = c;
  r.timeout = timeout;
  r.tenant_source = source;
  return r;
}

const Address kLoopback = *parse_address("127.0.0.1");
const Address kStranger = *parse_address("203.0.113.9");

}  // namespace

TEST_CASE("routes match host and prefix, first match wins", "[classify]") {
  TenantTable tenants;
  Classifier c({rule("*.example.com", "/api"), rule("static.test", "/"), rule("", "/api"), rule("*", "/")}, {},
               tenants, {});
  CHECK(c.match("www.example.com", "/api/v1") == 0);
  CHECK(c.match("WWW.EXAMPLE.COM:8443", "/api") == 0);
  CHECK(c.match("example.com", "/api") == 2);  // the suffix needs a subdomain
  CHECK(c.match("static.test", "/api") == 1);
  CHECK(c.match("static.test:80", "/x") == 1);
  CHECK(c.match("other", "/api/x") == 2);
  CHECK(c.match("other", "/x") == 3);
  CHECK(c.match("[::1]:8080", "/x") == 3);
  Classifier only({rule("a.test", "/")}, {}, tenants, {});
  CHECK(only.match("b.test", "/") == kNoRoute);
  std::vector<F> none;
  CHECK(only.classify("b.test", "/", none, kLoopback, TimePoint{}).error == Reason::NoRoute);
}

TEST_CASE("criticality comes from the header, else the route; anything else is refused", "[classify]") {
  TenantTable tenants;
  Classifier c({rule("", "/", Criticality::SheddablePlus)}, {}, tenants, {});
  std::vector<F> none;
  CHECK(c.classify("h", "/", none, kLoopback, TimePoint{}).criticality == Criticality::SheddablePlus);
  std::vector<F> plus{{"X-Criticality", " critical_plus "}};
  CHECK(c.classify("h", "/", plus, kLoopback, TimePoint{}).criticality == Criticality::CriticalPlus);
  std::vector<F> bad{{"x-criticality", "URGENT"}};
  CHECK(c.classify("h", "/", bad, kLoopback, TimePoint{}).error == Reason::BadCriticality);
}

TEST_CASE("tenants: an API key first, then the header from a trusted source, else default", "[classify]") {
  TenantTable tenants({"gmail", "calendar"});
  REQUIRE(tenants.find("gmail") == 1);
  REQUIRE(tenants.find("nobody") == kDefaultTenant);
  TenantSource src;
  src.trusted.networks.push_back(*parse_network("127.0.0.0/8"));
  src.api_key_header = "x-api-key";
  src.api_keys.emplace("k-cal", tenants.find("calendar"));
  std::vector<TenantSource> sources{src};
  Classifier c({rule("", "/")}, sources, tenants, {});
  const TimePoint t{};
  std::vector<F> header{{"X-Tenant-Id", "gmail"}};
  CHECK(c.classify("h", "/", header, kLoopback, t).tenant == 1);
  CHECK(c.classify("h", "/", header, kStranger, t).tenant == kDefaultTenant);  // not believed
  std::vector<F> key{{"X-Tenant-Id", "gmail"}, {"X-Api-Key", "k-cal"}};
  CHECK(c.classify("h", "/", key, kStranger, t).tenant == 2);  // the key needs no trust
  std::vector<F> wrong_key{{"x-api-key", "k-nope"}, {"x-tenant-id", "gmail"}};
  CHECK(c.classify("h", "/", wrong_key, kLoopback, t).tenant == 1);
  std::vector<F> unknown{{"x-tenant-id", "who"}};
  CHECK(c.classify("h", "/", unknown, kLoopback, t).tenant == kDefaultTenant);
}

TEST_CASE("the deadline is the shortest of the route's and the request's", "[classify]") {
  TenantTable tenants;
  Classifier c({rule("", "/", Criticality::Critical, 2s)}, {}, tenants, {});
  const TimePoint t = at(10s);
  std::vector<F> none;
  CHECK(c.classify("h", "/", none, kLoopback, t).deadline == t + 2s);
  std::vector<F> ms{{"x-request-timeout-ms", "250"}};
  CHECK(c.classify("h", "/", ms, kLoopback, t).deadline == t + 250ms);
  std::vector<F> longer{{"x-request-timeout-ms", "9000"}};
  CHECK(c.classify("h", "/", longer, kLoopback, t).deadline == t + 2s);
  std::vector<F> grpc{{"grpc-timeout", "100m"}, {"x-request-timeout-ms", "250"}};
  auto g = c.classify("h", "/", grpc, kLoopback, t);
  CHECK(g.deadline == t + 100ms);
  CHECK(g.grpc_timeout);
  std::vector<F> junk{{"x-request-timeout-ms", "soon"}, {"grpc-timeout", "1x"}};
  auto j = c.classify("h", "/", junk, kLoopback, t);
  CHECK(j.deadline == t + 2s);
  CHECK_FALSE(j.grpc_timeout);
}

TEST_CASE("the attempt count is the largest any header gives", "[classify]") {
  TenantTable tenants;
  Classifier c({rule("", "/")}, {}, tenants, {});
  std::vector<F> none;
  CHECK(c.classify("h", "/", none, kLoopback, TimePoint{}).attempt == 1);
  std::vector<F> many{{"x-attempt-count", "2"}, {"x-envoy-attempt-count", "3"}, {"grpc-previous-rpc-attempts", "1"}};
  CHECK(c.classify("h", "/", many, kLoopback, TimePoint{}).attempt == 3);
  std::vector<F> grpc{{"grpc-previous-rpc-attempts", "4"}};
  CHECK(c.classify("h", "/", grpc, kLoopback, TimePoint{}).attempt == 5);
  std::vector<F> key{{"Idempotency-Key", "abc"}};
  CHECK(c.classify("h", "/", key, kLoopback, TimePoint{}).idempotency_key);
}

TEST_CASE("configured header names are the ones read", "[classify]") {
  TenantTable tenants;
  SignalNames names;
  names.criticality = "x-prio";
  names.timeout_ms = "x-budget";
  names.attempt = "x-try";
  Classifier c({rule("", "/", Criticality::Critical, 5s)}, {}, tenants, names);
  std::vector<F> f{{"x-prio", "SHEDDABLE"}, {"x-budget", "100"}, {"x-try", "2"}, {"x-criticality", "bogus"}};
  auto r = c.classify("h", "/", f, kLoopback, TimePoint{});
  CHECK(r.error == Reason::None);
  CHECK(r.criticality == Criticality::Sheddable);
  CHECK(r.deadline == TimePoint{} + 100ms);
  CHECK(r.attempt == 2);
}

// --- trust (issue 13) ---------------------------------------------------------

namespace {
TrustPolicy trust_networks(std::initializer_list<const char*> nets) {
  TrustPolicy t;
  for (const char* n : nets) t.signals.networks.push_back(*parse_network(n));
  return t;
}
}  // namespace

TEST_CASE("from an untrusted source criticality, deadline and attempts are ignored and reported", "[classify][trust]") {
  TenantTable tenants;
  Classifier c({rule("", "/", Criticality::Sheddable, 5s)}, {}, tenants, {}, trust_networks({"10.0.0.0/8"}));
  const TimePoint t{};
  std::vector<F> f{{"x-criticality", "CRITICAL_PLUS"}, {"x-request-timeout-ms", "100"}, {"x-attempt-count", "3"}};
  auto stranger = c.classify("h", "/", f, kStranger, t);
  CHECK_FALSE(stranger.trusted);
  CHECK(stranger.criticality == Criticality::Sheddable);  // the route's default
  CHECK(stranger.deadline == t + 5s);                     // the route's timeout
  CHECK(stranger.attempt == 1);
  CHECK(stranger.ignored == (kIgnoredCriticality | kIgnoredTimeout | kIgnoredAttempt));
  auto inside = c.classify("h", "/", f, *parse_address("10.1.2.3"), t);
  CHECK(inside.trusted);
  CHECK(inside.criticality == Criticality::CriticalPlus);
  CHECK(inside.deadline == t + 100ms);
  CHECK(inside.attempt == 3);
  CHECK(inside.ignored == 0);
  // Nothing claimed, nothing ignored; a malformed claim from a stranger is not believed either (no 400).
  std::vector<F> none;
  CHECK(c.classify("h", "/", none, kStranger, t).ignored == 0);
  std::vector<F> bad{{"x-criticality", "URGENT"}};
  auto b = c.classify("h", "/", bad, kStranger, t);
  CHECK(b.error == Reason::None);
  CHECK(b.ignored == kIgnoredCriticality);
  CHECK(c.classify("h", "/", bad, *parse_address("10.0.0.1"), t).error == Reason::BadCriticality);
}

TEST_CASE("a route may let untrusted clients claim a criticality up to a cap", "[classify][trust]") {
  TenantTable tenants;
  RouteRule r = rule("", "/", Criticality::Sheddable);
  r.untrusted_max = Criticality::SheddablePlus;
  Classifier c({r}, {}, tenants, {}, trust_networks({}));
  std::vector<F> plus{{"x-criticality", "CRITICAL_PLUS"}};
  auto capped = c.classify("h", "/", plus, kStranger, TimePoint{});
  CHECK(capped.criticality == Criticality::SheddablePlus);
  CHECK(capped.ignored == kIgnoredCriticality);
  std::vector<F> low{{"x-criticality", "SHEDDABLE"}};
  auto below = c.classify("h", "/", low, kStranger, TimePoint{});
  CHECK(below.criticality == Criticality::Sheddable);
  CHECK(below.ignored == 0);
}

TEST_CASE("a tenant header not believed is reported; a certificate identity wins over any header", "[classify][trust]") {
  TenantTable tenants({"gold", "silver"});
  TenantSource src;  // the header is trusted from nowhere
  src.certificate_tenants.emplace("spiffe://corp/svc/billing", tenants.find("silver"));
  Classifier c({rule("", "/")}, {src}, tenants, {}, trust_networks({}));
  std::vector<F> f{{"x-tenant-id", "gold"}};
  auto plain = c.classify("h", "/", f, kStranger, TimePoint{});
  CHECK(plain.tenant == kDefaultTenant);
  CHECK(plain.ignored == kIgnoredTenant);
  PeerIdentity id;
  id.uris.push_back("spiffe://corp/svc/billing");
  auto cert = c.classify("h", "/", f, PeerView{kStranger, &id}, TimePoint{});
  CHECK(cert.tenant == tenants.find("silver"));
  CHECK(cert.tenant_from == TenantOrigin::Certificate);
  CHECK(cert.ignored == kIgnoredTenant);
  PeerIdentity other;
  other.uris.push_back("spiffe://corp/svc/unknown");
  CHECK(c.classify("h", "/", f, PeerView{kStranger, &other}, TimePoint{}).tenant == kDefaultTenant);
}

TEST_CASE("trusted identities: exact or a prefix ending in '*'", "[classify][trust]") {
  TenantTable tenants;
  TrustPolicy t;
  t.signals.identities = {"spiffe://corp/ns/edge/*", "gateway.corp"};
  Classifier c({rule("", "/", Criticality::Sheddable)}, {}, tenants, {}, t);
  std::vector<F> f{{"x-criticality", "CRITICAL"}};
  PeerIdentity edge;
  edge.uris.push_back("spiffe://corp/ns/edge/sa/lb");
  CHECK(c.classify("h", "/", f, PeerView{kStranger, &edge}, TimePoint{}).criticality == Criticality::Critical);
  PeerIdentity gw;
  gw.cn = "gateway.corp";
  CHECK(c.classify("h", "/", f, PeerView{kStranger, &gw}, TimePoint{}).criticality == Criticality::Critical);
  PeerIdentity nope;
  nope.uris.push_back("spiffe://corp/ns/other/sa/x");
  nope.dns.push_back("gateway.corp.evil");
  CHECK(c.classify("h", "/", f, PeerView{kStranger, &nope}, TimePoint{}).criticality == Criticality::Sheddable);
  CHECK(c.classify("h", "/", f, kStranger, TimePoint{}).criticality == Criticality::Sheddable);
}
