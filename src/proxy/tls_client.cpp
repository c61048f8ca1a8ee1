// The clusters' side of TLS: one SSL_CTX per cluster (CA bundle, SNI,
// client certificate, ALPN), and one resumable session kept per backend
// host. The listeners' side is in tls_context.cpp.
#include <openssl/err.h>
#include <openssl/ssl.h>
#include <openssl/x509v3.h>

#include <unordered_map>

#include "proxy/stream.hpp"
#include "proxy/tls_common.hpp"
#include "proxy/tls_context.hpp"

namespace levee::proxy {

using namespace tls_detail;

namespace {

/// Sessions to resume towards upstreams, one per endpoint host (the latest
/// the server gave), owned by the client SSL_CTX: it lives as long as any
/// connection made with it, which may outlive its ClientTls (a pooled
/// connection carried across a reload gets its TLS 1.3 tickets late).
struct UpstreamSessions {
  std::mutex mu;
  std::unordered_map<std::string, SSL_SESSION*> by_host;
  ~UpstreamSessions() {
    for (auto& [h, sess] : by_host) SSL_SESSION_free(sess);
  }
};

void free_sessions(void*, void* ptr, CRYPTO_EX_DATA*, int, long, void*) { delete static_cast<UpstreamSessions*>(ptr); }
void free_host(void*, void* ptr, CRYPTO_EX_DATA*, int, long, void*) { delete static_cast<std::string*>(ptr); }

int sessions_index() {
  static const int i = SSL_CTX_get_ex_new_index(0, nullptr, nullptr, nullptr, free_sessions);
  return i;
}
int host_index() {
  static const int i = SSL_get_ex_new_index(0, nullptr, nullptr, nullptr, free_host);
  return i;
}

/// A session the server issued (TLS 1.2 at the handshake's end, TLS 1.3
/// tickets after it): kept for the next connection to the same host.
int on_new_upstream_session(SSL* ssl, SSL_SESSION* sess) {
  auto* store = static_cast<UpstreamSessions*>(SSL_CTX_get_ex_data(SSL_get_SSL_CTX(ssl), sessions_index()));
  const auto* host = static_cast<const std::string*>(SSL_get_ex_data(ssl, host_index()));
  if (store == nullptr || host == nullptr) return 0;
  std::lock_guard lk(store->mu);
  if (store->by_host.size() >= 4096 && !store->by_host.contains(*host)) return 0;  // bounded
  // A copy: the connection's own session object is marked unresumable
  // when the connection ends without close_notify (a backend's reset, a
  // pooled connection dropped), and that must not spoil the one kept.
  SSL_SESSION* copy = SSL_SESSION_dup(sess);
  if (copy == nullptr) return 0;
  SSL_SESSION*& slot = store->by_host[*host];
  if (slot != nullptr) SSL_SESSION_free(slot);
  slot = copy;
  return 0;  // the original stays OpenSSL's
}

}  // namespace

std::shared_ptr<ClientTls> ClientTls::make(const config::UpstreamTlsConfig& c, const std::string& source,
                                           std::vector<config::Error>& errors, bool h2) {
  Errors err{source, errors};
  std::shared_ptr<ClientTls> t(new ClientTls(c));
  t->ctx_ = SSL_CTX_new(TLS_client_method());
  if (t->ctx_ == nullptr) {
    err.add(c.place, "cannot create a TLS context: " + openssl_reason());
    return nullptr;
  }
  SSL_CTX_set_min_proto_version(t->ctx_, TLS1_2_VERSION);
  SSL_CTX_set_options(t->ctx_, SSL_OP_NO_RENEGOTIATION | SSL_OP_IGNORE_UNEXPECTED_EOF);
  // Resumption towards backends: a new connection to a host resumes the
  // last session it gave (one round trip and no certificate chain, instead
  // of a full handshake), kept outside OpenSSL's cache.
  SSL_CTX_set_ex_data(t->ctx_, sessions_index(), new UpstreamSessions);
  SSL_CTX_set_session_cache_mode(t->ctx_, SSL_SESS_CACHE_CLIENT | SSL_SESS_CACHE_NO_INTERNAL_STORE);
  SSL_CTX_sess_set_new_cb(t->ctx_, on_new_upstream_session);
  static const std::string kHttp1 = alpn_wire({"http/1.1"});
  static const std::string kHttp2 = alpn_wire({"h2"});
  const std::string& wire = h2 ? kHttp2 : kHttp1;
  SSL_CTX_set_alpn_protos(t->ctx_, reinterpret_cast<const unsigned char*>(wire.data()),
                          static_cast<unsigned int>(wire.size()));
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
  if (!c.cert_file.empty()) {  // levee's own certificate, for backends that ask for one
    if (!err.readable(c.cert_place, c.cert_file, "certificate") ||
        !err.readable(c.key_place, c.key_file, "key"))
      return nullptr;
    if (SSL_CTX_use_certificate_chain_file(t->ctx_, c.cert_file.c_str()) != 1) {
      err.add(c.cert_place, "'" + c.cert_file + "' is not a PEM certificate chain (" + openssl_reason() + ")");
      return nullptr;
    }
    if (SSL_CTX_use_PrivateKey_file(t->ctx_, c.key_file.c_str(), SSL_FILETYPE_PEM) != 1 ||
        SSL_CTX_check_private_key(t->ctx_) != 1) {
      ERR_clear_error();
      err.add(c.key_place, "key '" + c.key_file + "' does not match certificate '" + c.cert_file +
                               "' or is not a PEM private key");
      return nullptr;
    }
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
  // The endpoint's host keys its session (the connection may be to another
  // address of the same name: a session it does not know is a full handshake).
  SSL_set_ex_data(s, host_index(), new std::string(endpoint_host));
  if (auto* store = static_cast<UpstreamSessions*>(SSL_CTX_get_ex_data(ctx_, sessions_index()))) {
    std::lock_guard lk(store->mu);
    if (auto it = store->by_host.find(endpoint_host); it != store->by_host.end()) {
      // A copy per connection: a resumed connection's session is the one it
      // was given, and OpenSSL marks it unresumable if that connection ends
      // without close_notify (and workers share the stored one).
      if (SSL_SESSION* mine = SSL_SESSION_dup(it->second)) {
        SSL_set_session(s, mine);
        SSL_SESSION_free(mine);  // the SSL holds its own reference
      }
    }
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

std::shared_ptr<const ClientTls> client_tls(const config::UpstreamTlsConfig& c, const std::string& source, bool h2) {
  std::vector<config::Error> errors;
  auto t = ClientTls::make(c, source, errors, h2);
  if (t) return t;
  std::string msg;
  for (const auto& e : errors) msg += (msg.empty() ? "" : "; ") + e.format();
  throw std::runtime_error(msg.empty() ? "TLS: cannot set up the cluster" : msg);
}

}  // namespace levee::proxy
