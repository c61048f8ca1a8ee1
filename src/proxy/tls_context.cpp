#include "proxy/tls_context.hpp"

#include <openssl/err.h>
#include <openssl/ssl.h>
#include <openssl/x509v3.h>

#include <cerrno>
#include <cstring>
#include <fstream>
#include <stdexcept>

#include "core/text.hpp"
#include "proxy/request_metrics.hpp"
#include "proxy/stream.hpp"

namespace levee::proxy {

namespace {

/// OpenSSL's most recent reason, and the thread's queue cleared.
std::string openssl_reason() {
  const unsigned long e = ERR_peek_last_error();
  ERR_clear_error();
  if (e == 0) return "unknown OpenSSL error";
  const char* r = ERR_reason_error_string(e);
  return r ? r : "OpenSSL error " + std::to_string(e);
}

struct Errors {
  const std::string& source;
  std::vector<config::Error>& out;
  void add(const config::Place& p, std::string msg) {
    out.push_back(config::Error{source, p.line, p.column, p.path, std::move(msg)});
  }
  /// The file can be opened: else an error that says why.
  bool readable(const config::Place& p, const std::string& file, const char* what) {
    std::ifstream f(file, std::ios::binary);
    if (f) return true;
    add(p, std::string("cannot read ") + what + " '" + file + "': " + std::strerror(errno));
    return false;
  }
};

int version(config::TlsVersion v) { return v == config::TlsVersion::V1_3 ? TLS1_3_VERSION : TLS1_2_VERSION; }

/// The ALPN list in wire format (length-prefixed names).
std::string alpn_wire(const std::vector<std::string>& names) {
  std::string w;
  for (const auto& n : names) {
    w.push_back(static_cast<char>(n.size()));
    w += n;
  }
  return w;
}

int on_alpn(SSL*, const unsigned char** out, unsigned char* outlen, const unsigned char* in, unsigned int inlen,
            void* arg) {
  const auto* wire = static_cast<const std::string*>(arg);
  unsigned char* chosen = nullptr;
  if (SSL_select_next_proto(&chosen, outlen, reinterpret_cast<const unsigned char*>(wire->data()),
                            static_cast<unsigned int>(wire->size()), in, inlen) != OPENSSL_NPN_NEGOTIATED)
    return SSL_TLSEXT_ERR_NOACK;  // nothing in common: no ALPN, HTTP/1.1 still spoken
  *out = chosen;
  return SSL_TLSEXT_ERR_OK;
}

int on_server_name(SSL* ssl, int*, void* arg) {
  const char* name = SSL_get_servername(ssl, TLSEXT_NAMETYPE_host_name);
  if (name == nullptr) return SSL_TLSEXT_ERR_OK;  // the default certificate
  if (SSL_CTX* ctx = static_cast<const ServerTls*>(arg)->select(name); ctx && ctx != SSL_get_SSL_CTX(ssl))
    SSL_set_SSL_CTX(ssl, ctx);
  return SSL_TLSEXT_ERR_OK;
}

/// The names a certificate answers for: its SAN DNS entries, else its CN.
std::vector<std::string> certificate_names(X509* x) {
  std::vector<std::string> names;
  if (auto* sans = static_cast<GENERAL_NAMES*>(X509_get_ext_d2i(x, NID_subject_alt_name, nullptr, nullptr))) {
    for (int i = 0; i < sk_GENERAL_NAME_num(sans); ++i) {
      const GENERAL_NAME* g = sk_GENERAL_NAME_value(sans, i);
      if (g->type != GEN_DNS) continue;
      const ASN1_STRING* s = g->d.dNSName;
      names.emplace_back(reinterpret_cast<const char*>(ASN1_STRING_get0_data(s)),
                         static_cast<std::size_t>(ASN1_STRING_length(s)));
    }
    GENERAL_NAMES_free(sans);
  }
  if (names.empty()) {
    char cn[256];
    const int n = X509_NAME_get_text_by_NID(X509_get_subject_name(x), NID_commonName, cn, sizeof cn);
    if (n > 0) names.emplace_back(cn, static_cast<std::size_t>(n));
  }
  for (auto& n : names)
    for (auto& c : n) c = core::ascii_lower(c);
  return names;
}

const unsigned char kSessionContext[] = "levee";

}  // namespace

std::shared_ptr<ServerTls> ServerTls::make(const config::ServerTlsConfig& c, const std::string& source,
                                           std::vector<config::Error>& errors) {
  Errors err{source, errors};
  const std::size_t before = errors.size();
  std::shared_ptr<ServerTls> t(new ServerTls(c));
  t->alpn_wire_ = alpn_wire(c.alpn);
  for (std::size_t i = 0; i < c.certificates.size(); ++i) {
    const auto& cc = c.certificates[i];
    SSL_CTX* ctx = SSL_CTX_new(TLS_server_method());
    if (ctx == nullptr) {
      err.add(c.place, "cannot create a TLS context: " + openssl_reason());
      break;
    }
    t->certs_.push_back(Cert{ctx, {}});
    SSL_CTX_set_min_proto_version(ctx, version(c.min_version));
    SSL_CTX_set_max_proto_version(ctx, version(c.max_version));
    // No renegotiation (a client-driven CPU cost); the server's cipher
    // order; a bare FIN is the end of the stream, as clients commonly do.
    std::uint64_t opts = SSL_OP_NO_RENEGOTIATION | SSL_OP_CIPHER_SERVER_PREFERENCE | SSL_OP_IGNORE_UNEXPECTED_EOF;
    if (!c.session_tickets) opts |= SSL_OP_NO_TICKET;
    SSL_CTX_set_options(ctx, opts);
    if (SSL_CTX_set_cipher_list(ctx, c.ciphers.c_str()) != 1)
      err.add(c.place, "ciphers: no usable cipher in '" + c.ciphers + "' (" + openssl_reason() + ")");
    if (!c.ciphersuites.empty() && SSL_CTX_set_ciphersuites(ctx, c.ciphersuites.c_str()) != 1)
      err.add(c.place, "ciphersuites: no usable suite in '" + c.ciphersuites + "' (" + openssl_reason() + ")");
    if (SSL_CTX_set1_groups_list(ctx, c.groups.c_str()) != 1)
      err.add(c.place, "groups: unknown group in '" + c.groups + "' (" + openssl_reason() + ")");
    // Resumption: TLS 1.3 tickets (stateless), TLS 1.2 tickets or session IDs
    // from the cache. Tickets are encrypted with the default context's keys
    // whichever certificate SNI picked, so a session resumes under any.
    SSL_CTX_set_session_id_context(ctx, kSessionContext, sizeof kSessionContext - 1);
    if (c.session_cache > 0) {
      SSL_CTX_set_session_cache_mode(ctx, SSL_SESS_CACHE_SERVER);
      SSL_CTX_sess_set_cache_size(ctx, static_cast<long>(c.session_cache));
    } else {
      SSL_CTX_set_session_cache_mode(ctx, SSL_SESS_CACHE_OFF);
    }
    SSL_CTX_set_timeout(ctx, static_cast<long>(std::chrono::duration_cast<std::chrono::seconds>(c.session_timeout).count()));
    SSL_CTX_set_alpn_select_cb(ctx, on_alpn, &t->alpn_wire_);
    SSL_CTX_set_mode(ctx, SSL_MODE_RELEASE_BUFFERS);

    if (err.readable(cc.cert_place, cc.cert_file, "certificate") &&
        SSL_CTX_use_certificate_chain_file(ctx, cc.cert_file.c_str()) != 1) {
      err.add(cc.cert_place, "'" + cc.cert_file + "' is not a PEM certificate chain (" + openssl_reason() + ")");
      continue;
    }
    if (err.readable(cc.key_place, cc.key_file, "key") &&
        SSL_CTX_use_PrivateKey_file(ctx, cc.key_file.c_str(), SSL_FILETYPE_PEM) != 1) {
      const std::string why = openssl_reason();
      err.add(cc.key_place, why == "key values mismatch"
                                ? "key '" + cc.key_file + "' does not match certificate '" + cc.cert_file + "'"
                                : "'" + cc.key_file + "' is not a PEM private key (" + why + ")");
      continue;
    }
    if (errors.size() > before) continue;
    if (SSL_CTX_check_private_key(ctx) != 1) {
      ERR_clear_error();
      err.add(cc.key_place, "key '" + cc.key_file + "' does not match certificate '" + cc.cert_file + "'");
      continue;
    }
    t->certs_.back().names = cc.names.empty() ? certificate_names(SSL_CTX_get0_certificate(ctx)) : cc.names;

    const auto& ca = c.client_auth;
    if (ca.mode != config::ClientAuth::None) {
      if (!err.readable(ca.ca_place, ca.ca_file, "CA bundle")) continue;
      if (SSL_CTX_load_verify_locations(ctx, ca.ca_file.c_str(), nullptr) != 1) {
        err.add(ca.ca_place, "'" + ca.ca_file + "' is not a PEM CA bundle (" + openssl_reason() + ")");
        continue;
      }
      if (STACK_OF(X509_NAME)* names = SSL_load_client_CA_file(ca.ca_file.c_str())) SSL_CTX_set_client_CA_list(ctx, names);
      ERR_clear_error();
      int mode = SSL_VERIFY_PEER;
      if (ca.mode == config::ClientAuth::Required) mode |= SSL_VERIFY_FAIL_IF_NO_PEER_CERT;
      SSL_CTX_set_verify(ctx, mode, nullptr);
      SSL_CTX_set_verify_depth(ctx, static_cast<int>(ca.verify_depth));
    }
  }
  if (errors.size() > before || t->certs_.empty()) return nullptr;
  // SSL_CTX_set_tlsext_servername_callback, without its C cast.
  SSL_CTX_callback_ctrl(t->certs_[0].ctx, SSL_CTRL_SET_TLSEXT_SERVERNAME_CB,
                        reinterpret_cast<void (*)()>(&on_server_name));
  SSL_CTX_set_tlsext_servername_arg(t->certs_[0].ctx, t.get());
  return t;
}

ServerTls::~ServerTls() {
  for (auto& c : certs_) SSL_CTX_free(c.ctx);
}

SSL* ServerTls::session() const {
  SSL* s = SSL_new(certs_[0].ctx);
  if (s) SSL_set_accept_state(s);
  return s;
}

SSL_CTX* ServerTls::select(std::string_view name) const noexcept {
  std::string lower(name);
  for (auto& c : lower) c = core::ascii_lower(c);
  for (const auto& c : certs_)
    for (const auto& n : c.names)
      if (n == lower) return c.ctx;
  // A wildcard covers exactly one label: *.example.com is a.example.com, not a.b.example.com.
  const auto dot = lower.find('.');
  if (dot == std::string::npos || dot == 0) return nullptr;
  const std::string wild = "*" + lower.substr(dot);
  for (const auto& c : certs_)
    for (const auto& n : c.names)
      if (n == wild) return c.ctx;
  return nullptr;
}

awaitable<bool> accept_tls(Stream& s, const ServerTls& tls, RequestMetrics& m, std::size_t shard,
                           std::size_t listener) {
  auto count = [&](HandshakeResult r) {
    m.tls_handshakes.inc(shard, m.tls_handshakes.index({listener, static_cast<std::size_t>(r)}));
  };
  SSL* ssl = tls.session();
  if (ssl == nullptr) {
    ERR_clear_error();
    count(HandshakeResult::Failed);
    co_return false;
  }
  s.attach(ssl);
  // The flag outlives this frame: a timer that fired just as the handshake
  // ended must neither touch the frame nor cancel the first request's read.
  struct State {
    bool done = false, expired = false;
  };
  auto st = std::make_shared<State>();
  Timer t(s.socket().get_executor(), tls.handshake_timeout());
  t.async_wait([&s, st](error_code ec) {
    if (ec || st->done) return;
    st->expired = true;
    s.cancel();
  });
  const error_code ec = co_await s.handshake();
  st->done = true;
  t.cancel();
  if (st->expired) count(HandshakeResult::Timeout);
  else if (ec) count(HandshakeResult::Failed);
  else count(s.resumed() ? HandshakeResult::Resumed : HandshakeResult::Full);
  co_return !ec && !st->expired;
}

core::PeerIdentity peer_identity(SSL* ssl) {
  core::PeerIdentity id;
  X509* x = SSL_get0_peer_certificate(ssl);
  if (x == nullptr || SSL_get_verify_result(ssl) != X509_V_OK) return id;
  if (auto* sans = static_cast<GENERAL_NAMES*>(X509_get_ext_d2i(x, NID_subject_alt_name, nullptr, nullptr))) {
    for (int i = 0; i < sk_GENERAL_NAME_num(sans); ++i) {
      const GENERAL_NAME* g = sk_GENERAL_NAME_value(sans, i);
      const ASN1_STRING* s = g->type == GEN_URI ? g->d.uniformResourceIdentifier : g->type == GEN_DNS ? g->d.dNSName : nullptr;
      if (s == nullptr) continue;
      std::string v(reinterpret_cast<const char*>(ASN1_STRING_get0_data(s)), static_cast<std::size_t>(ASN1_STRING_length(s)));
      (g->type == GEN_URI ? id.uris : id.dns).push_back(std::move(v));
    }
    GENERAL_NAMES_free(sans);
  }
  char cn[256];
  const int n = X509_NAME_get_text_by_NID(X509_get_subject_name(x), NID_commonName, cn, sizeof cn);
  if (n > 0) id.cn.assign(cn, static_cast<std::size_t>(n));
  return id;
}

std::shared_ptr<const ServerTls> server_tls(const config::ServerTlsConfig& c, const std::string& source) {
  std::vector<config::Error> errors;
  auto t = ServerTls::make(c, source, errors);
  if (t) return t;
  std::string msg;
  for (const auto& e : errors) msg += (msg.empty() ? "" : "; ") + e.format();
  throw std::runtime_error(msg.empty() ? "TLS: cannot set up the listener" : msg);
}

std::vector<config::Error> check_tls(const config::Config& cfg) {
  std::vector<config::Error> errors;
  for (const auto& l : cfg.listeners)
    if (l.tls.enabled) ServerTls::make(l.tls, cfg.source, errors);
  for (const auto& c : cfg.clusters)
    if (c.tls.enabled) ClientTls::make(c.tls, cfg.source, errors);
  return errors;
}

// --- upstream ------------------------------------------------------------------

std::shared_ptr<ClientTls> ClientTls::make(const config::UpstreamTlsConfig& c, const std::string& source,
                                           std::vector<config::Error>& errors) {
  Errors err{source, errors};
  std::shared_ptr<ClientTls> t(new ClientTls(c));
  t->ctx_ = SSL_CTX_new(TLS_client_method());
  if (t->ctx_ == nullptr) {
    err.add(c.place, "cannot create a TLS context: " + openssl_reason());
    return nullptr;
  }
  SSL_CTX_set_min_proto_version(t->ctx_, TLS1_2_VERSION);
  SSL_CTX_set_options(t->ctx_, SSL_OP_NO_RENEGOTIATION | SSL_OP_IGNORE_UNEXPECTED_EOF);
  static const std::string kWire = alpn_wire({"http/1.1"});
  SSL_CTX_set_alpn_protos(t->ctx_, reinterpret_cast<const unsigned char*>(kWire.data()),
                          static_cast<unsigned int>(kWire.size()));
  if (c.verify) {
    SSL_CTX_set_verify(t->ctx_, SSL_VERIFY_PEER, nullptr);
    if (c.ca_file.empty()) {
      if (SSL_CTX_set_default_verify_paths(t->ctx_) != 1) {
        err.add(c.place, "cannot load the system's trusted CAs: " + openssl_reason());
        return nullptr;
      }
    } else {
      if (!err.readable(c.ca_place, c.ca_file, "CA bundle")) return nullptr;
      if (SSL_CTX_load_verify_locations(t->ctx_, c.ca_file.c_str(), nullptr) != 1) {
        err.add(c.ca_place, "'" + c.ca_file + "' is not a PEM CA bundle (" + openssl_reason() + ")");
        return nullptr;
      }
    }
  } else {
    SSL_CTX_set_verify(t->ctx_, SSL_VERIFY_NONE, nullptr);
  }
  return t;
}

ClientTls::~ClientTls() {
  if (ctx_) SSL_CTX_free(ctx_);
}

SSL* ClientTls::session(const std::string& endpoint_host) const {
  SSL* s = SSL_new(ctx_);
  if (s == nullptr) return nullptr;
  SSL_set_connect_state(s);
  const std::string& host = cfg_.server_name.empty() ? endpoint_host : cfg_.server_name;
  const bool ip = core::parse_address(host).has_value();
  // SNI (SSL_set_tlsext_host_name, without its C cast).
  if (!ip) SSL_ctrl(s, SSL_CTRL_SET_TLSEXT_HOSTNAME, TLSEXT_NAMETYPE_host_name, const_cast<char*>(host.c_str()));
  if (cfg_.verify) {
    X509_VERIFY_PARAM* p = SSL_get0_param(s);
    if (ip) X509_VERIFY_PARAM_set1_ip_asc(p, host.c_str());
    else SSL_set1_host(s, host.c_str());
  }
  return s;
}

awaitable<bool> connect_tls(Stream& s, const ClientTls& tls, const std::string& host) {
  SSL* ssl = tls.session(host);
  if (ssl == nullptr) {
    ERR_clear_error();
    co_return false;
  }
  s.attach(ssl);
  const error_code ec = co_await s.handshake();
  co_return !ec;
}

std::shared_ptr<const ClientTls> client_tls(const config::UpstreamTlsConfig& c, const std::string& source) {
  std::vector<config::Error> errors;
  auto t = ClientTls::make(c, source, errors);
  if (t) return t;
  std::string msg;
  for (const auto& e : errors) msg += (msg.empty() ? "" : "; ") + e.format();
  throw std::runtime_error(msg.empty() ? "TLS: cannot set up the cluster" : msg);
}

}  // namespace levee::proxy
