// Classification: which route a request takes, and what it says about
// itself that admission acts on: criticality, tenant, deadline, attempt.
// A pure function of the request's authority, path and header fields (from
// any protocol: HTTP/1.1 fields or HTTP/2 headers), the peer's address, the
// configured tables and the time.
//
//   route        first rule whose host pattern and path prefix match
//   criticality  the criticality header, else the route's default; a value
//                that is not one of the four names is a 400
//   tenant       an API key mapped to a tenant (a hash lookup), else the
//                tenant header from a trusted source, else `default`
//   deadline     now + the shortest of the route's timeout, the request's
//                x-request-timeout-ms and grpc-timeout
//   attempt      the largest of x-attempt-count, x-envoy-attempt-count and
//                grpc-previous-rpc-attempts + 1
#pragma once

#include <cstddef>
#include <cstdint>
#include <functional>
#include <string>
#include <string_view>
#include <unordered_map>
#include <vector>

#include "core/criticality.hpp"
#include "core/decision.hpp"
#include "core/headers.hpp"
#include "core/net.hpp"
#include "core/tenant_quota.hpp"
#include "core/text.hpp"
#include "core/time.hpp"

namespace levee::core {

/// Transparent hashing, so lookups by string_view never allocate.
struct StringHash {
  using is_transparent = void;
  std::size_t operator()(std::string_view s) const noexcept { return std::hash<std::string_view>{}(s); }
};
template <typename V>
using StringMap = std::unordered_map<std::string, V, StringHash, std::equal_to<>>;

/// Tenant names by TenantId; 0 is `default`, which every unknown name maps to.
class TenantTable {
 public:
  explicit TenantTable(std::vector<std::string> names_after_default = {});
  TenantId find(std::string_view name) const noexcept;
  const std::string& name(TenantId t) const noexcept { return names_[t < names_.size() ? t : 0]; }
  std::size_t size() const noexcept { return names_.size(); }
  const std::vector<std::string>& names() const noexcept { return names_; }

 private:
  std::vector<std::string> names_;
  StringMap<TenantId> ids_;
};

/// Where a request's tenant comes from.
struct TenantSource {
  std::string header = "x-tenant-id";  ///< empty: no tenant header
  TrustedSources trusted;              ///< the header counts only from here
  std::string api_key_header;          ///< empty: no API keys
  StringMap<TenantId> api_keys;        ///< key -> tenant
};

struct RouteRule {
  std::string host;  ///< "", "*", "*.suffix" or exact, lower case
  std::string prefix = "/";
  Criticality criticality = Criticality::Critical;  ///< when the header is absent
  Duration timeout = std::chrono::seconds(30);      ///< deadline when the client gives none
  std::size_t tenant_source = 0;                    ///< index into the classifier's sources
};

/// The names of the headers levee reads (the configurable ones).
struct SignalNames {
  std::string criticality = "x-criticality";
  std::string timeout_ms = "x-request-timeout-ms";
  std::string attempt = "x-attempt-count";
};

inline constexpr std::size_t kNoRoute = static_cast<std::size_t>(-1);

struct Classification {
  Reason error = Reason::None;  ///< NoRoute or BadCriticality: answered locally
  std::size_t route = kNoRoute;
  Criticality criticality = Criticality::Critical;
  TenantId tenant = kDefaultTenant;
  TimePoint deadline = TimePoint::max();
  std::uint32_t attempt = 1;
  bool idempotency_key = false;  ///< the request may be replayed whatever its method
  bool grpc_timeout = false;     ///< the deadline is to be forwarded as grpc-timeout too
};

/// One listener's routes and tenant sources.
class Classifier {
 public:
  Classifier(std::vector<RouteRule> routes, std::vector<TenantSource> sources, const TenantTable& tenants,
             SignalNames names);

  /// Index of the first route matching host (a port is ignored) and path, or kNoRoute.
  std::size_t match(std::string_view host, std::string_view path) const noexcept;

  /// Fields: a range of elements with `name` and `value` string views.
  template <typename Fields>
  Classification classify(std::string_view authority, std::string_view path, const Fields& fields,
                          const Address& peer, TimePoint now) const noexcept;

  const std::vector<RouteRule>& routes() const noexcept { return routes_; }
  const SignalNames& names() const noexcept { return names_; }

 private:
  std::vector<RouteRule> routes_;
  std::vector<TenantSource> sources_;
  const TenantTable& tenants_;
  SignalNames names_;
};

// ---------------------------------------------------------------------------

template <typename Fields>
Classification Classifier::classify(std::string_view authority, std::string_view path, const Fields& fields,
                                    const Address& peer, TimePoint now) const noexcept {
  Classification c;
  c.route = match(authority, path);
  if (c.route == kNoRoute) {
    c.error = Reason::NoRoute;
    return c;
  }
  const RouteRule& r = routes_[c.route];
  const TenantSource& ts = sources_[r.tenant_source];
  c.criticality = r.criticality;

  // One pass over the fields picks out what classification reads.
  std::string_view crit, tenant, api_key, timeout_ms, grpc_timeout;
  bool has_crit = false, has_tenant = false, has_key = false, has_timeout = false, has_grpc = false;
  for (const auto& f : fields) {
    const std::string_view name = f.name;
    if (iequals(name, names_.criticality)) {
      crit = f.value;
      has_crit = true;
    } else if (iequals(name, names_.timeout_ms)) {
      timeout_ms = f.value;
      has_timeout = true;
    } else if (iequals(name, "grpc-timeout")) {
      grpc_timeout = f.value;
      has_grpc = true;
    } else if (iequals(name, names_.attempt) || iequals(name, "x-envoy-attempt-count")) {
      if (auto a = parse_attempt(f.value)) c.attempt = std::max(c.attempt, *a);
    } else if (iequals(name, "grpc-previous-rpc-attempts")) {
      if (auto a = parse_attempt(f.value)) c.attempt = std::max(c.attempt, *a + 1);
    } else if (iequals(name, "idempotency-key")) {
      c.idempotency_key = true;
    } else if (!has_key && !ts.api_key_header.empty() && iequals(name, ts.api_key_header)) {
      api_key = f.value;
      has_key = true;
    } else if (!has_tenant && !ts.header.empty() && iequals(name, ts.header)) {
      tenant = f.value;
      has_tenant = true;
    }
  }

  if (has_crit) {
    auto v = parse_criticality(crit);
    if (!v) {
      c.error = Reason::BadCriticality;
      return c;
    }
    c.criticality = *v;
  }

  bool tenant_found = false;
  if (has_key) {
    if (auto it = ts.api_keys.find(trim(api_key)); it != ts.api_keys.end()) {
      c.tenant = it->second;
      tenant_found = true;
    }
  }
  if (!tenant_found && has_tenant && ts.trusted.contains(peer)) c.tenant = tenants_.find(trim(tenant));

  c.deadline = now + r.timeout;
  if (has_timeout) {
    if (auto d = parse_timeout_ms(timeout_ms)) c.deadline = std::min(c.deadline, now + *d);
  }
  if (has_grpc) {
    if (auto d = parse_grpc_timeout(grpc_timeout)) {
      c.deadline = std::min(c.deadline, now + *d);
      c.grpc_timeout = true;
    }
  }
  return c;
}

}  // namespace levee::core
