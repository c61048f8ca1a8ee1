// Classification: which route a request takes, and what it says about
// itself that admission acts on: criticality, tenant, deadline, attempt.
// A pure function of the request's authority, path and header fields (from
// any protocol: HTTP/1.1 fields or HTTP/2 headers), the peer's address, the
// configured tables and the time.
//
//   route        first rule whose host pattern and path prefix match
//   criticality  the criticality header, else the route's default; a value
//                that is not one of the four names is a 400
//   tenant       the client certificate's identity mapped to a tenant (it
//                cannot be overridden by a header), else an API key mapped to
//                a tenant (a hash lookup), else the tenant header from a
//                trusted source, else `default`
//   deadline     now + the shortest of the route's timeout, the request's
//                x-request-timeout-ms and grpc-timeout
//   attempt      the largest of x-attempt-count, x-envoy-attempt-count and
//                grpc-previous-rpc-attempts + 1
//
// Trust: criticality, deadline and attempt count are believed only from a
// trusted source (the listener's networks or certificate identities);
// from anyone else the route's defaults apply (a route may let untrusted
// clients claim a criticality up to a cap), and every header not believed
// is reported in `ignored`, so the shell counts it and replaces or removes
// it before the request goes upstream.
#pragma once

#include <cstddef>
#include <cstdint>
#include <functional>
#include <optional>
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

/// Which name of a client certificate is its tenant's name.
enum class CertificateTenant : std::uint8_t { None, Uri, Dns, Cn };

/// Where a request's tenant comes from.
struct TenantSource {
  std::string header = "x-tenant-id";  ///< empty: no tenant header
  TrustedSources trusted;              ///< the header counts only from here
  std::string api_key_header;          ///< empty: no API keys
  StringMap<TenantId> api_keys;        ///< key -> tenant
  /// Certificate identities (any SAN URI, SAN DNS name or the CN) -> tenant.
  StringMap<TenantId> certificate_tenants;
  /// Else the tenant is named by this field of the certificate (its first
  /// SAN URI or DNS name, or its CN); unknown names are `default`.
  CertificateTenant from_certificate = CertificateTenant::None;
};

/// Who a listener believes.
struct TrustPolicy {
  /// Criticality, deadline and attempt count count only from here.
  TrustedSources signals;
  /// Whether `signals` also vouch for the tenant header (a trust the
  /// operator wrote down; the implicit trust of a loopback listener does
  /// not extend to tenants, which keep their own trusted networks).
  bool tenant_too = false;
  static TrustPolicy everyone() {
    TrustPolicy t;
    t.signals.any = true;
    return t;
  }
};

/// The client as classification sees it.
struct PeerView {
  const Address& address;
  const PeerIdentity* identity = nullptr;  ///< a verified client certificate, or none
};

/// Headers a request carried that levee did not believe (bits).
enum Ignored : std::uint8_t {
  kIgnoredCriticality = 1,  ///< not believed, or capped
  kIgnoredTenant = 2,
  kIgnoredTimeout = 4,      ///< x-request-timeout-ms, grpc-timeout
  kIgnoredAttempt = 8,      ///< any of the attempt-count headers
};
inline constexpr std::size_t kIgnoredKinds = 4;

/// Where the tenant came from.
enum class TenantOrigin : std::uint8_t { Default, Header, ApiKey, Certificate };

struct RouteRule {
  std::string host;  ///< "", "*", "*.suffix" or exact, lower case
  std::string prefix = "/";
  Criticality criticality = Criticality::Critical;  ///< when the header is absent
  Duration timeout = std::chrono::seconds(30);      ///< deadline when the client gives none
  std::size_t tenant_source = 0;                    ///< index into the classifier's sources
  /// The most critical level an untrusted client may claim (higher claims
  /// are lowered to it); without one, untrusted claims are ignored.
  std::optional<Criticality> untrusted_max;
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
  bool trusted = true;           ///< the source is trusted (its signals were believed)
  std::uint8_t ignored = 0;      ///< Ignored bits: headers present but not believed
  TenantOrigin tenant_from = TenantOrigin::Default;
};

/// One listener's routes and tenant sources.
class Classifier {
 public:
  Classifier(std::vector<RouteRule> routes, std::vector<TenantSource> sources, const TenantTable& tenants,
             SignalNames names, TrustPolicy trust = TrustPolicy::everyone());

  /// Index of the first route matching host (a port is ignored) and path, or kNoRoute.
  std::size_t match(std::string_view host, std::string_view path) const noexcept;

  /// Fields: a range of elements with `name` and `value` string views.
  template <typename Fields>
  Classification classify(std::string_view authority, std::string_view path, const Fields& fields,
                          const PeerView& peer, TimePoint now) const noexcept;
  template <typename Fields>
  Classification classify(std::string_view authority, std::string_view path, const Fields& fields,
                          const Address& peer, TimePoint now) const noexcept {
    return classify(authority, path, fields, PeerView{peer, nullptr}, now);
  }

  const std::vector<RouteRule>& routes() const noexcept { return routes_; }
  const SignalNames& names() const noexcept { return names_; }
  const TrustPolicy& trust() const noexcept { return trust_; }
  /// The tenant source a route uses (its header name, for rewriting).
  const TenantSource& source(std::size_t route) const noexcept { return sources_[routes_[route].tenant_source]; }
  /// Whether a source is trusted for the listener's signals (also used for
  /// what leaves the edge: responses to untrusted clients are stripped).
  bool trusted(const PeerView& peer) const noexcept { return trust_.signals.contains(peer.address, peer.identity); }

 private:
  std::vector<RouteRule> routes_;
  std::vector<TenantSource> sources_;
  const TenantTable& tenants_;
  SignalNames names_;
  TrustPolicy trust_;
};

/// The tenant a client certificate names under a source, if any.
std::optional<TenantId> certificate_tenant(const TenantSource& ts, const TenantTable& tenants,
                                           const PeerIdentity& id) noexcept;

// ---------------------------------------------------------------------------

template <typename Fields>
Classification Classifier::classify(std::string_view authority, std::string_view path, const Fields& fields,
                                    const PeerView& peer, TimePoint now) const noexcept {
  Classification c;
  c.route = match(authority, path);
  if (c.route == kNoRoute) {
    c.error = Reason::NoRoute;
    return c;
  }
  const RouteRule& r = routes_[c.route];
  const TenantSource& ts = sources_[r.tenant_source];
  c.criticality = r.criticality;
  const bool is_trusted = trusted(peer);
  c.trusted = is_trusted;

  // One pass over the fields picks out what classification reads.
  std::string_view crit, tenant, api_key, timeout_ms, grpc_timeout;
  bool has_crit = false, has_tenant = false, has_key = false, has_timeout = false, has_grpc = false;
  bool has_attempt = false;
  std::uint32_t attempt = 1;
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
      has_attempt = true;
      if (auto a = parse_attempt(f.value)) attempt = std::max(attempt, *a);
    } else if (iequals(name, "grpc-previous-rpc-attempts")) {
      has_attempt = true;
      if (auto a = parse_attempt(f.value)) attempt = std::max(attempt, *a + 1);
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
    if (is_trusted || r.untrusted_max) {
      auto v = parse_criticality(crit);
      if (!v) {
        c.error = Reason::BadCriticality;
        return c;
      }
      c.criticality = *v;
      if (!is_trusted && *v > *r.untrusted_max) {
        c.criticality = *r.untrusted_max;
        c.ignored |= kIgnoredCriticality;
      }
    } else {
      c.ignored |= kIgnoredCriticality;
    }
  }
  if (has_attempt) {
    if (is_trusted) c.attempt = attempt;
    else c.ignored |= kIgnoredAttempt;
  }

  // The tenant: a certificate's identity first (no header overrides it),
  // then an API key, then the header from a source trusted for it.
  bool tenant_found = false;
  if (peer.identity && !peer.identity->empty()) {
    if (auto t = certificate_tenant(ts, tenants_, *peer.identity)) {
      c.tenant = *t;
      c.tenant_from = TenantOrigin::Certificate;
      tenant_found = true;
    }
  }
  if (!tenant_found && has_key) {
    if (auto it = ts.api_keys.find(trim(api_key)); it != ts.api_keys.end()) {
      c.tenant = it->second;
      c.tenant_from = TenantOrigin::ApiKey;
      tenant_found = true;
    }
  }
  if (has_tenant) {
    const bool believed = !tenant_found && (ts.trusted.contains(peer.address, peer.identity) || (trust_.tenant_too && is_trusted));
    if (believed) {
      c.tenant = tenants_.find(trim(tenant));
      c.tenant_from = TenantOrigin::Header;
    } else if (!tenant_found || tenants_.find(trim(tenant)) != c.tenant) {
      c.ignored |= kIgnoredTenant;
    }
  }

  c.deadline = now + r.timeout;
  if (has_timeout || has_grpc) {
    if (!is_trusted) {
      c.ignored |= kIgnoredTimeout;
      c.grpc_timeout = has_grpc;  // the next hop still gets levee's own budget in the form it knows
    } else {
      if (has_timeout) {
        if (auto d = parse_timeout_ms(timeout_ms)) c.deadline = std::min(c.deadline, now + *d);
      }
      if (has_grpc) {
        if (auto d = parse_grpc_timeout(grpc_timeout)) {
          c.deadline = std::min(c.deadline, now + *d);
          c.grpc_timeout = true;
        }
      }
    }
  }
  return c;
}

}  // namespace levee::core
