// The edge's configuration sections (see config/tls.hpp). Certificate and
// key files are named here and loaded by the data plane
// (proxy/tls_context.cpp), which reports a bad file with the Place kept
// for it: the same file:line:column form as every other error.
#include "config/tls.hpp"

#include "config/tls_reader.hpp"
#include "core/text.hpp"

namespace levee::config {

bool loopback_address(const std::string& address) {
  if (address == "localhost") return true;
  const auto a = core::parse_address(address);
  return a && core::is_loopback(*a);
}

namespace detail {

namespace {

Place place_of(const YAML::Node& n, const std::string& path) {
  Place p;
  p.path = path;
  if (n.IsDefined()) {
    const auto m = n.Mark();
    if (m.line >= 0) {
      p.line = m.line + 1;
      p.column = m.column + 1;
    }
  }
  return p;
}

/// A file name, remembered with its place.
void read_file(Ctx& ctx, Map& m, const char* key, std::string& out, Place& place) {
  auto n = m.take(key);
  read(ctx, n, m.sub(key), out);
  if (n.IsDefined()) {
    place = place_of(n, m.sub(key));
    if (out.empty()) ctx.error(n, m.sub(key), "must name a file");
  }
}

void read_strings(Ctx& ctx, const YAML::Node& n, const std::string& path, std::vector<std::string>& out,
                  std::string_view what) {
  if (!n.IsDefined()) return;
  if (!n.IsSequence()) {
    ctx.error(n, path, "must be a list of " + std::string(what));
    return;
  }
  out.clear();
  for (std::size_t i = 0; i < n.size(); ++i) {
    std::string v;
    read(ctx, n[i], at(path, i), v);
    if (v.empty()) ctx.error(n[i], at(path, i), "must not be empty");
    else out.push_back(std::move(v));
  }
}

/// Networks (`any` for every source); identity patterns go elsewhere.
void read_networks(Ctx& ctx, const YAML::Node& n, const std::string& path, core::TrustedSources& out) {
  if (!n.IsDefined()) return;
  if (!n.IsSequence()) {
    ctx.error(n, path, "must be a list of networks like 10.0.0.0/8 (or any)");
    return;
  }
  for (std::size_t i = 0; i < n.size(); ++i) {
    const auto p = at(path, i);
    if (!scalar(ctx, n[i], p, "a network like 10.0.0.0/8")) continue;
    if (n[i].Scalar() == "any") {
      out.any = true;
      continue;
    }
    auto net = core::parse_network(n[i].Scalar());
    if (!net) ctx.error(n[i], p, "must be a network like 10.0.0.0/8 or ::1/128, not '" + n[i].Scalar() + "'");
    else out.networks.push_back(*net);
  }
}

void read_version(Ctx& ctx, const YAML::Node& n, const std::string& path, TlsVersion& out) {
  if (!n.IsDefined() || !scalar(ctx, n, path, "a TLS version")) return;
  const auto& s = n.Scalar();
  if (s == "1.2" || s == "TLSv1.2") out = TlsVersion::V1_2;
  else if (s == "1.3" || s == "TLSv1.3") out = TlsVersion::V1_3;
  else ctx.error(n, path, "must be 1.2 or 1.3, not '" + s + "' (older versions are not offered)");
}

void read_alpn(Ctx& ctx, const YAML::Node& n, const std::string& path, std::vector<std::string>& out) {
  read_strings(ctx, n, path, out, "protocol names");
  for (std::size_t i = 0; i < out.size(); ++i) {
    if (out[i] == "http/1.1" || out[i] == "h2") continue;  // h2 needs http2.enabled (loader.cpp)
    ctx.error(n, at(path, i), "unknown protocol '" + out[i] + "' (levee speaks h2 and http/1.1)");
  }
}

void read_certificate(Ctx& ctx, const YAML::Node& n, const std::string& path, CertificateConfig& c) {
  Map m(ctx, n, path);
  read_file(ctx, m, "certificate", c.cert_file, c.cert_place);
  read_file(ctx, m, "key", c.key_file, c.key_place);
  read_file(ctx, m, "ocsp_response", c.ocsp_file, c.ocsp_place);
  read_strings(ctx, m.take("names"), m.sub("names"), c.names, "server names");
  for (auto& name : c.names)
    for (auto& ch : name) ch = core::ascii_lower(ch);
  if (m.valid() && c.cert_file.empty()) ctx.error(n, m.sub("certificate"), "is required");
  if (m.valid() && c.key_file.empty()) ctx.error(n, m.sub("key"), "is required");
}

void read_server_tls(Ctx& ctx, const YAML::Node& n, const std::string& path, ServerTlsConfig& t) {
  using std::chrono::hours;
  using std::chrono::milliseconds;
  Map m(ctx, n, path);
  t.enabled = true;
  t.place = place_of(n, path);
  read_bool(ctx, m.take("enabled"), m.sub("enabled"), t.enabled);
  // One certificate inline, or a list chosen by SNI (the first is the default).
  const bool inline_cert = m.has("certificate") || m.has("key");
  if (inline_cert) {
    CertificateConfig c;
    read_file(ctx, m, "certificate", c.cert_file, c.cert_place);
    read_file(ctx, m, "key", c.key_file, c.key_place);
    read_file(ctx, m, "ocsp_response", c.ocsp_file, c.ocsp_place);
    if (c.cert_file.empty()) ctx.error(n, m.sub("certificate"), "is required with key");
    if (c.key_file.empty()) ctx.error(n, m.sub("key"), "is required with certificate");
    t.certificates.push_back(std::move(c));
  } else {
    m.take("certificate");
    m.take("key");
    if (auto o = m.take("ocsp_response"); o.IsDefined())
      ctx.error(o, m.sub("ocsp_response"), "goes with an inline certificate; in certificates[], give it per entry");
  }
  if (auto cn = m.take("certificates"); cn.IsDefined()) {
    if (inline_cert) {
      ctx.error(cn, m.sub("certificates"), "give either certificate/key or certificates, not both");
    } else if (!cn.IsSequence() || cn.size() == 0) {
      ctx.error(cn, m.sub("certificates"), "must be a non-empty list of {certificate, key, names}");
    } else {
      for (std::size_t i = 0; i < cn.size(); ++i) {
        CertificateConfig c;
        read_certificate(ctx, cn[i], at(m.sub("certificates"), i), c);
        t.certificates.push_back(std::move(c));
      }
    }
  }
  if (t.enabled && t.certificates.empty() && m.valid())
    ctx.error(n, m.sub("certificate"), "a TLS listener needs a certificate (certificate and key)");
  read_alpn(ctx, m.take("alpn"), m.sub("alpn"), t.alpn);
  read_version(ctx, m.take("min_version"), m.sub("min_version"), t.min_version);
  read_version(ctx, m.take("max_version"), m.sub("max_version"), t.max_version);
  if (t.min_version > t.max_version) ctx.error(n, m.sub("min_version"), "must not exceed max_version");
  read(ctx, m.take("ciphers"), m.sub("ciphers"), t.ciphers);
  read(ctx, m.take("ciphersuites"), m.sub("ciphersuites"), t.ciphersuites);
  read(ctx, m.take("groups"), m.sub("groups"), t.groups);
  read_bool(ctx, m.take("session_tickets"), m.sub("session_tickets"), t.session_tickets);
  read_uint(ctx, m.take("session_cache"), m.sub("session_cache"), t.session_cache, 0, 10000000);
  read_duration(ctx, m.take("session_ticket_rotation"), m.sub("session_ticket_rotation"), t.session_ticket_rotation,
                std::chrono::seconds(1), hours(24 * 7));
  read_file(ctx, m, "session_ticket_keys", t.session_ticket_keys_file, t.session_ticket_keys_place);
  read_duration(ctx, m.take("session_timeout"), m.sub("session_timeout"), t.session_timeout,
                std::chrono::seconds(1), hours(24 * 7));
  read_duration(ctx, m.take("handshake_timeout"), m.sub("handshake_timeout"), t.handshake_timeout,
                milliseconds(1), hours(1));
  read_uint(ctx, m.take("max_handshakes"), m.sub("max_handshakes"), t.max_handshakes, 0, 10000000);
  read_double(ctx, m.take("handshake_rate"), m.sub("handshake_rate"), t.handshake_rate, 0.0, 1e7);
  read_double(ctx, m.take("shed_handshakes_above"), m.sub("shed_handshakes_above"), t.shed_handshakes_above, 0.0,
              100.0);
  if (auto ca = m.take("client_auth"); ca.IsDefined()) {
    auto& c = t.client_auth;
    Map cm(ctx, ca, m.sub("client_auth"));
    c.mode = ClientAuth::Required;
    if (auto mode = cm.take("mode"); mode.IsDefined() && scalar(ctx, mode, cm.sub("mode"), "a mode")) {
      const auto& s = mode.Scalar();
      if (s == "required") c.mode = ClientAuth::Required;
      else if (s == "optional") c.mode = ClientAuth::Optional;
      else if (s == "none") c.mode = ClientAuth::None;
      else ctx.error(mode, cm.sub("mode"), "must be required, optional or none, not '" + s + "'");
    }
    read_file(ctx, cm, "ca", c.ca_file, c.ca_place);
    read_file(ctx, cm, "crl", c.crl_file, c.crl_place);
    read_uint(ctx, cm.take("verify_depth"), cm.sub("verify_depth"), c.verify_depth, 1, 100);
    if (c.mode != ClientAuth::None && c.ca_file.empty())
      ctx.error(ca, cm.sub("ca"), "is required to verify client certificates");
  }
}

}  // namespace

void read_proxy_protocol(Ctx& ctx, const YAML::Node& n, const std::string& path, ProxyProtocolConfig& p) {
  // A map naming the balancers: whoever may send a header may claim any
  // client address (and so the trust that address has), so `from` is
  // required; `[any]` says so on purpose.
  if (n.IsScalar()) {
    ctx.error(n, path, "must be a map with from: the balancers' networks (or [any]), e.g. {from: [10.0.0.0/8]}");
    return;
  }
  Map m(ctx, n, path);
  p.enabled = true;
  read_bool(ctx, m.take("enabled"), m.sub("enabled"), p.enabled);
  if (auto f = m.take("from"); f.IsDefined()) read_networks(ctx, f, m.sub("from"), p.from);
  else if (m.valid()) ctx.error(n, m.sub("from"), "is required: the networks of the balancers that send headers (or [any])");
  read_duration(ctx, m.take("timeout"), m.sub("timeout"), p.timeout, std::chrono::milliseconds(1),
                std::chrono::minutes(1));
  read_uint(ctx, m.take("max_v2_bytes"), m.sub("max_v2_bytes"), p.max_v2_bytes, 16, 2048);
}

void read_listener_edge(Ctx& ctx, Map& m, ListenerConfig& l) {
  if (auto t = m.take("tls"); t.IsDefined()) read_server_tls(ctx, t, m.sub("tls"), l.tls);
  if (auto tr = m.take("trust"); tr.IsDefined()) {
    auto& t = l.trust;
    Map tm(ctx, tr, m.sub("trust"));
    t.set = true;
    read_networks(ctx, tm.take("networks"), tm.sub("networks"), t.sources);
    read_strings(ctx, tm.take("identities"), tm.sub("identities"), t.sources.identities, "certificate identities");
  }
  if (auto pp = m.take("proxy_protocol"); pp.IsDefined()) read_proxy_protocol(ctx, pp, m.sub("proxy_protocol"), l.proxy_protocol);
}

void read_route_edge(Ctx& ctx, Map& m, RouteConfig& r) {
  if (auto c = m.take("untrusted_criticality"); c.IsDefined()) {
    Criticality v{};
    read_criticality(ctx, c, m.sub("untrusted_criticality"), v);
    r.untrusted_criticality = v;
  }
}

void read_tenant_edge(Ctx& ctx, Map& m, TenantSource& t) {
  if (auto ct = m.take("certificate_tenants"); ct.IsDefined()) {
    if (!ct.IsMap()) {
      ctx.error(ct, m.sub("certificate_tenants"), "must map certificate identities to tenant names");
    } else {
      for (auto it = ct.begin(); it != ct.end(); ++it) {
        const auto key = join(m.sub("certificate_tenants"), it->first.Scalar());
        std::string tenant;
        read(ctx, it->second, key, tenant);
        if (!core::valid_utf8(it->first.Scalar())) ctx.error_at(it->first.Mark(), key, "must be valid UTF-8");
        else t.certificate_tenants.emplace_back(it->first.Scalar(), tenant);
      }
    }
  }
  if (auto fc = m.take("from_certificate"); fc.IsDefined() && scalar(ctx, fc, m.sub("from_certificate"), "a field")) {
    const auto& s = fc.Scalar();
    if (s == "uri") t.from_certificate = core::CertificateTenant::Uri;
    else if (s == "dns") t.from_certificate = core::CertificateTenant::Dns;
    else if (s == "cn") t.from_certificate = core::CertificateTenant::Cn;
    else if (s == "none") t.from_certificate = core::CertificateTenant::None;
    else ctx.error(fc, m.sub("from_certificate"), "must be uri, dns, cn or none, not '" + s + "'");
  }
}

void read_cluster_edge(Ctx& ctx, Map& m, ClusterConfig& c) {
  auto n = m.take("tls");
  if (!n.IsDefined()) return;
  auto& t = c.tls;
  Map tm(ctx, n, m.sub("tls"));
  t.enabled = true;
  t.place = place_of(n, m.sub("tls"));
  read_bool(ctx, tm.take("enabled"), tm.sub("enabled"), t.enabled);
  read_file(ctx, tm, "ca", t.ca_file, t.ca_place);
  read(ctx, tm.take("server_name"), tm.sub("server_name"), t.server_name);
  read_bool(ctx, tm.take("verify"), tm.sub("verify"), t.verify);
  read_file(ctx, tm, "certificate", t.cert_file, t.cert_place);
  read_file(ctx, tm, "key", t.key_file, t.key_place);
  if (t.cert_file.empty() != t.key_file.empty())
    ctx.error(n, tm.sub(t.cert_file.empty() ? "certificate" : "key"), "a client certificate needs both certificate and key");
}

void validate_edge(Ctx& ctx, const YAML::Node& root, Config& cfg) {
  // A key's node for an error's place; undefined when the document has no
  // such key (never creates one, never throws).
  auto child = [](const YAML::Node& n, const char* key) {
    return n.IsMap() && n[key] ? n[key] : YAML::Node(YAML::NodeType::Undefined);
  };
  auto item = [](const YAML::Node& n, std::size_t i) {
    return n.IsSequence() && i < n.size() ? n[i] : YAML::Node(YAML::NodeType::Undefined);
  };
  for (std::size_t i = 0; i < cfg.listeners.size(); ++i) {
    auto& l = cfg.listeners[i];
    const auto path = at("listeners", i);
    // Nothing is trusted off loopback unless the file says so; a loopback
    // listener (a sidecar's callers are the local service) believes all.
    if (!l.trust.set && loopback_address(l.address)) l.trust.sources.any = true;
    const bool client_certs = l.tls.enabled && l.tls.client_auth.mode != ClientAuth::None;
    const auto ln = item(child(root, "listeners"), i);
    if (!l.trust.sources.identities.empty() && !client_certs)
      ctx.error(child(child(ln, "trust"), "identities"), path + ".trust.identities",
                "needs tls.client_auth: without client certificates no identity is known");
    auto tenant_certs = [&](const std::optional<TenantSource>& t, const std::string& where, const YAML::Node& n) {
      if (!t || client_certs) return;
      if (!t->certificate_tenants.empty() || t->from_certificate != core::CertificateTenant::None)
        ctx.error(n, where, "tenants from certificates need tls.client_auth on the listener");
    };
    tenant_certs(l.tenant, path + ".tenant", child(ln, "tenant"));

    for (std::size_t r = 0; r < l.routes.size(); ++r)
      tenant_certs(l.routes[r].tenant, at(path + ".routes", r) + ".tenant",
                   child(item(child(ln, "routes"), r), "tenant"));
  }
}

}  // namespace detail

}  // namespace levee::config
