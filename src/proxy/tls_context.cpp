// The listeners' side of TLS: certificates chosen by SNI, ALPN, OCSP
// stapling, client certificates, and handshake admission. Session tickets
// and the session cache are in tls_sessions.cpp, the clusters' side in
// tls_client.cpp.
#include "proxy/tls_context.hpp"

#include <openssl/err.h>
#include <openssl/evp.h>
#include <openssl/ocsp.h>

#include <ctime>
#include <openssl/ssl.h>
#include <openssl/x509v3.h>

#include <algorithm>
#include <cerrno>
#include <cstring>
#include <fstream>
#include <stdexcept>

#include "core/text.hpp"
#include "proxy/clock.hpp"
#include "proxy/request_metrics.hpp"
#include "proxy/stream.hpp"
#include "proxy/tls_common.hpp"

namespace levee::proxy {

using namespace tls_detail;

namespace {

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

/// OCSP stapling: a client that asked for the certificate's status gets
/// the response loaded from the certificate's ocsp_response file.
int on_status_request(SSL* ssl, void* arg) {
  const auto* cert = static_cast<const ServerTls::CertEntry*>(arg);
  if (cert == nullptr || cert->ocsp.empty()) return SSL_TLSEXT_ERR_NOACK;
  // Past its nextUpdate a response is stale: better none than one a
  // client must reject (until the file is replaced; tls_watch loads it).
  if (cert->ocsp_until != 0 && static_cast<long long>(std::time(nullptr)) > cert->ocsp_until)
    return SSL_TLSEXT_ERR_NOACK;
  const std::string* der = &cert->ocsp;
  auto* copy = static_cast<unsigned char*>(OPENSSL_malloc(der->size()));  // OpenSSL frees it with the SSL
  if (copy == nullptr) return SSL_TLSEXT_ERR_NOACK;
  std::memcpy(copy, der->data(), der->size());
  // SSL_set_tlsext_status_ocsp_resp, without its C cast.
  SSL_ctrl(ssl, SSL_CTRL_SET_TLSEXT_STATUS_REQ_OCSP_RESP, static_cast<long>(der->size()), copy);
  return SSL_TLSEXT_ERR_OK;
}

/// The bytes of a DER OCSP response file for the certificate in `ctx`,
/// checked as a client would check it: a successful response, signed by
/// the certificate's issuer (or a responder it delegated to), saying "good"
/// about this certificate, and current (within 5 minutes of clock skew).
/// Empty with `why` set otherwise; `until` gets its nextUpdate.
std::string read_ocsp(const std::string& file, SSL_CTX* ctx, std::string& why, long long& until) {
  std::ifstream f(file, std::ios::binary);
  std::string der((std::istreambuf_iterator<char>(f)), std::istreambuf_iterator<char>());
  const auto* p = reinterpret_cast<const unsigned char*>(der.data());
  OCSP_RESPONSE* r = d2i_OCSP_RESPONSE(nullptr, &p, static_cast<long>(der.size()));
  if (r == nullptr) {
    why = "'" + file + "' is not a DER OCSP response (" + openssl_reason() + ")";
    return {};
  }
  const int status = OCSP_response_status(r);
  if (status != OCSP_RESPONSE_STATUS_SUCCESSFUL) {
    OCSP_RESPONSE_free(r);
    why = "'" + file + "' is an OCSP response with status " + std::to_string(status) + ", not successful";
    return {};
  }
  OCSP_BASICRESP* basic = OCSP_response_get1_basic(r);
  OCSP_RESPONSE_free(r);
  X509* leaf = SSL_CTX_get0_certificate(ctx);
  STACK_OF(X509)* chain = nullptr;
  SSL_CTX_get0_chain_certs(ctx, &chain);
  X509* issuer = nullptr;
  for (int i = 0; chain != nullptr && i < sk_X509_num(chain); ++i)
    if (X509_check_issued(sk_X509_value(chain, i), leaf) == X509_V_OK) issuer = sk_X509_value(chain, i);
  auto fail = [&](std::string w) {
    why = "'" + file + "' " + w;
    if (basic) OCSP_BASICRESP_free(basic);
    ERR_clear_error();
    return std::string{};
  };
  if (basic == nullptr) return fail("holds no basic OCSP response");
  if (issuer == nullptr)
    return fail("cannot be checked: the certificate file must hold the issuer's certificate after the leaf");
  X509_STORE* store = X509_STORE_new();
  X509_STORE_add_cert(store, issuer);
  // The issuer is the anchor, whether or not it is a root (an intermediate
  // usually is the leaf's issuer).
  X509_STORE_set_flags(store, X509_V_FLAG_PARTIAL_CHAIN);
  const int verified = OCSP_basic_verify(basic, chain, store, 0);
  X509_STORE_free(store);
  if (verified != 1) return fail("is not signed by the certificate's issuer (" + openssl_reason() + ")");
  OCSP_CERTID* id = OCSP_cert_to_id(nullptr, leaf, issuer);
  int cert_status = -1, reason = 0;
  ASN1_GENERALIZEDTIME *revoked = nullptr, *this_update = nullptr, *next_update = nullptr;
  const int found = OCSP_resp_find_status(basic, id, &cert_status, &reason, &revoked, &this_update, &next_update);
  OCSP_CERTID_free(id);
  if (found != 1) return fail("is not about this certificate");
  if (cert_status != V_OCSP_CERTSTATUS_GOOD)
    return fail(std::string("says the certificate is ") +
                (cert_status == V_OCSP_CERTSTATUS_REVOKED ? "revoked" : "unknown to its responder"));
  if (OCSP_check_validity(this_update, next_update, 300, -1) != 1)
    return fail("is out of date (or not yet valid): its thisUpdate/nextUpdate do not cover now");
  until = 0;
  if (next_update != nullptr) {
    std::tm tm{};
    if (ASN1_TIME_to_tm(next_update, &tm) == 1) until = static_cast<long long>(timegm(&tm));
  }
  OCSP_BASICRESP_free(basic);
  return der;
}

// Handshake admission: what the client hello callback decided, kept on
// the SSL for accept_tls (a hello after a HelloRetryRequest is not judged
// twice).
constexpr std::uintptr_t kJudged = 1, kRefused = 2, kResuming = 4;

int verdict_index() {
  static const int i = SSL_get_ex_new_index(0, nullptr, nullptr, nullptr, nullptr);
  return i;
}

std::uintptr_t verdict(SSL* ssl) {
  return reinterpret_cast<std::uintptr_t>(SSL_get_ex_data(ssl, verdict_index()));
}

int on_client_hello(SSL* ssl, int* alert, void* arg) {
  if (verdict(ssl) & kJudged) return SSL_CLIENT_HELLO_SUCCESS;
  const auto* t = static_cast<const ServerTls*>(arg);
  const TicketKeys* keys = t->ticket_keys();
  const unsigned char* p = nullptr;
  std::size_t len = 0;
  // An offer to resume counts only with a ticket levee made: its first 16
  // bytes name one of the listener's keys (a forged ticket names none).
  // TLS 1.3 offers it as the first PSK identity (identities length 2,
  // identity length 2, identity), TLS 1.2 as the session_ticket extension.
  // Session ids are not believed: anyone can send one.
  bool resuming = false;
  if (keys != nullptr) {
    if (SSL_client_hello_get0_ext(ssl, TLSEXT_TYPE_psk, &p, &len) == 1 && len >= 4 + 16) {
      const std::size_t id_len = std::size_t{p[2]} << 8 | p[3];
      resuming = id_len >= 16 && 4 + id_len <= len && keys->find(p + 4).has_value();
    } else if (SSL_client_hello_get0_ext(ssl, TLSEXT_TYPE_session_ticket, &p, &len) == 1 && len >= 16) {
      resuming = keys->find(p).has_value();
    }
  }
  if (!t->admit_handshake(resuming)) {
    SSL_set_ex_data(ssl, verdict_index(), reinterpret_cast<void*>(kJudged | kRefused));
    *alert = SSL_AD_HANDSHAKE_FAILURE;
    return SSL_CLIENT_HELLO_ERROR;
  }
  SSL_set_ex_data(ssl, verdict_index(), reinterpret_cast<void*>(kJudged | (resuming ? kResuming : 0)));
  // In progress from its hello (a connection that sends none holds no place).
  t->in_progress().fetch_add(1, std::memory_order_relaxed);
  return SSL_CLIENT_HELLO_SUCCESS;
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

/// The session ID context: a session resumes only under the client-auth
/// settings it was verified with (mode, depth, the CA and CRL files'
/// contents). Sessions and ticket keys outlive reloads with the slot; a
/// reload that adds a CRL or changes the CA must not let a client resume
/// the identity it had. SHA-256 of the settings, as SSL_MAX_SID_CTX_LENGTH allows.
std::string session_context(const config::ClientAuthConfig& ca) {
  std::string in = "levee;" + std::to_string(static_cast<int>(ca.mode)) + ";" + std::to_string(ca.verify_depth);
  for (const std::string* f : {&ca.ca_file, &ca.crl_file}) {
    in += ";" + *f + ";";
    if (f->empty()) continue;
    std::ifstream file(*f, std::ios::binary);
    in.append(std::istreambuf_iterator<char>(file), std::istreambuf_iterator<char>());
  }
  unsigned char md[EVP_MAX_MD_SIZE];
  unsigned int n = 0;
  EVP_Digest(in.data(), in.size(), md, &n, EVP_sha256(), nullptr);
  return std::string(reinterpret_cast<const char*>(md), std::min<unsigned int>(n, SSL_MAX_SID_CTX_LENGTH));
}

}  // namespace

std::shared_ptr<ServerTls> ServerTls::make(const config::ServerTlsConfig& c, const std::string& source,
                                           std::vector<config::Error>& errors, std::shared_ptr<TicketKeys> keys,
                                           std::shared_ptr<HandshakeBudget> budget,
                                           std::shared_ptr<SessionCache> sessions) {
  Errors err{source, errors};
  const std::size_t before = errors.size();
  std::shared_ptr<ServerTls> t(new ServerTls(c));
  t->budget_ = budget ? std::move(budget) : std::make_shared<HandshakeBudget>();
  t->alpn_wire_ = alpn_wire(c.alpn);
  const std::string sid_ctx = session_context(c.client_auth);
  for (std::size_t i = 0; i < c.certificates.size(); ++i) {
    const auto& cc = c.certificates[i];
    SSL_CTX* ctx = SSL_CTX_new(TLS_server_method());
    if (ctx == nullptr) {
      err.add(c.place, "cannot create a TLS context: " + openssl_reason());
      break;
    }
    t->certs_.push_back(Cert{ctx, {}, {}});
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
    SSL_CTX_set_session_id_context(ctx, reinterpret_cast<const unsigned char*>(sid_ctx.data()),
                                   static_cast<unsigned int>(sid_ctx.size()));
    if (c.session_cache > 0) {
      // The slot's cache, not OpenSSL's per-context one, so a reload keeps it.
      if (!sessions) sessions = std::make_shared<SessionCache>(c.session_cache);
      {
        std::lock_guard lk(sessions->mu);
        sessions->capacity = c.session_cache;
      }
      use_session_cache(ctx, sessions);
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
    if (!cc.ocsp_file.empty() && err.readable(cc.ocsp_place, cc.ocsp_file, "OCSP response")) {
      std::string why;
      t->certs_.back().ocsp = read_ocsp(cc.ocsp_file, ctx, why, t->certs_.back().ocsp_until);
      if (!why.empty()) err.add(cc.ocsp_place, why);
    }

    const auto& ca = c.client_auth;
    if (ca.mode != config::ClientAuth::None) {
      if (!err.readable(ca.ca_place, ca.ca_file, "CA bundle")) continue;
      if (SSL_CTX_load_verify_locations(ctx, ca.ca_file.c_str(), nullptr) != 1) {
        err.add(ca.ca_place, "'" + ca.ca_file + "' is not a PEM CA bundle (" + openssl_reason() + ")");
        continue;
      }
      if (STACK_OF(X509_NAME)* names = SSL_load_client_CA_file(ca.ca_file.c_str())) SSL_CTX_set_client_CA_list(ctx, names);
      ERR_clear_error();
      if (!ca.crl_file.empty()) {
        if (!err.readable(ca.crl_place, ca.crl_file, "CRL")) continue;
        X509_STORE* store = SSL_CTX_get_cert_store(ctx);
        X509_LOOKUP* lookup = X509_STORE_add_lookup(store, X509_LOOKUP_file());
        if (lookup == nullptr || X509_load_crl_file(lookup, ca.crl_file.c_str(), X509_FILETYPE_PEM) <= 0) {
          err.add(ca.crl_place, "'" + ca.crl_file + "' holds no PEM CRL (" + openssl_reason() + ")");
          continue;
        }
        // The leaf's issuer must have a CRL here: a certificate it lists is refused.
        X509_STORE_set_flags(store, X509_V_FLAG_CRL_CHECK);
      }
      int mode = SSL_VERIFY_PEER;
      if (ca.mode == config::ClientAuth::Required) mode |= SSL_VERIFY_FAIL_IF_NO_PEER_CERT;
      SSL_CTX_set_verify(ctx, mode, nullptr);
      SSL_CTX_set_verify_depth(ctx, static_cast<int>(ca.verify_depth));
    }
  }
  if (errors.size() > before || t->certs_.empty()) return nullptr;
  // Stapling, once certs_ no longer moves (the callback keeps a pointer).
  for (auto& cert : t->certs_) {
    if (cert.ocsp.empty()) continue;
    SSL_CTX_callback_ctrl(cert.ctx, SSL_CTRL_SET_TLSEXT_STATUS_REQ_CB, reinterpret_cast<void (*)()>(&on_status_request));
    SSL_CTX_ctrl(cert.ctx, SSL_CTRL_SET_TLSEXT_STATUS_REQ_CB_ARG, 0, &cert);
  }
  // SSL_CTX_set_tlsext_servername_callback, without its C cast.
  SSL_CTX_callback_ctrl(t->certs_[0].ctx, SSL_CTRL_SET_TLSEXT_SERVERNAME_CB,
                        reinterpret_cast<void (*)()>(&on_server_name));
  SSL_CTX_set_tlsext_servername_arg(t->certs_[0].ctx, t.get());
  SSL_CTX_set_client_hello_cb(t->certs_[0].ctx, on_client_hello, t.get());
  if (c.session_tickets) {
    // A key file is read now but used (the slot's keys replaced) only by
    // adopt(), once the Runtime is installed: a reload that fails later
    // keeps the keys the running one uses.
    if (!c.session_ticket_keys_file.empty()) {
      std::string why;
      std::vector<TicketKeys::Key> file_keys;
      if (!TicketKeys::read_file(c.session_ticket_keys_file, file_keys, why)) {
        err.add(c.session_ticket_keys_place, why);
        return nullptr;
      }
      t->file_keys_ = std::move(file_keys);
    }
    if (keys) {
      t->keys_ = std::move(keys);
      // Tickets go through levee's keys, on every certificate's context
      // (SNI may have switched to another when the ticket is made).
      for (auto& cert : t->certs_) use_ticket_keys(cert.ctx, t->keys_);
    }
  }
  return t;
}

ServerTls::~ServerTls() {
  for (auto& c : certs_) SSL_CTX_free(c.ctx);
}

void ServerTls::adopt() const {
  if (!keys_ || !cfg_.session_tickets) return;
  if (file_keys_) keys_->use_file_keys(*file_keys_);
  else keys_->use_generated();
  rotate_ticket_keys(now());  // a key at once (the slot's, if it has them already)
}

bool ServerTls::rotate_ticket_keys(core::TimePoint t) const {
  if (!keys_ || !cfg_.session_tickets || !cfg_.session_ticket_keys_file.empty()) return false;
  // Enough keys to decrypt every ticket still within session_timeout, at most 4.
  const auto per = cfg_.session_ticket_rotation.count();
  const auto need = static_cast<std::size_t>((cfg_.session_timeout.count() + per - 1) / per) + 1;
  return keys_->maybe_rotate(t, cfg_.session_ticket_rotation, std::min<std::size_t>(need, 4));
}

bool ServerTls::admit_handshake(bool resuming) const noexcept {
  // Handshakes past their hello, not counting this one.
  if (cfg_.max_handshakes != 0 && in_progress().load(std::memory_order_relaxed) >= cfg_.max_handshakes) return false;
  if (resuming) return true;
  // Above the load, a full handshake would take the worker from the clients
  // it already serves; with none (every client is new, as in a mass
  // reconnect) there is nothing to protect, and refusing would only turn
  // away clients the worker could serve.
  if (load_ != nullptr && cfg_.shed_handshakes_above > 0 &&
      load_->load(std::memory_order_relaxed) > cfg_.shed_handshakes_above &&
      (returning_ == nullptr || returning_->load(std::memory_order_relaxed) > 0))
    return false;
  if (cfg_.handshake_rate <= 0) return true;
  const double burst = std::max(1.0, cfg_.handshake_rate);  // a second's worth
  const auto t = now();
  auto& b = *budget_;
  std::lock_guard lk(b.mu);
  if (b.tokens < -burst) b.tokens = -burst;
  if (b.refill == core::TimePoint{}) {
    b.tokens = burst;
  } else {
    b.tokens = std::min(burst, b.tokens + core::to_seconds(t - b.refill) * cfg_.handshake_rate);
  }
  b.refill = t;
  if (b.tokens < 1.0) return false;
  b.tokens -= 1.0;
  return true;
}

void ServerTls::handshake_done(bool admitted_as_resuming, bool full) const noexcept {
  // A hello that offered a ticket it could not use got a full handshake
  // past the rate: charge it now (the bucket may go below zero), so fake
  // tickets buy nothing.
  if (!admitted_as_resuming || !full || cfg_.handshake_rate <= 0) return;
  std::lock_guard lk(budget_->mu);
  budget_->tokens -= 1.0;
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
  const std::uintptr_t v = verdict(ssl);
  if (v & kJudged && !(v & kRefused)) {
    tls.in_progress().fetch_sub(1, std::memory_order_relaxed);
    // A hello admitted as resuming that was not resumed (its ticket was
    // unusable, or it gave up after the server's expensive flight) is
    // charged to the full-handshake rate now.
    tls.handshake_done((v & kResuming) != 0, !s.resumed());
  }
  if (v & kRefused) count(HandshakeResult::Refused);
  else if (st->expired) count(HandshakeResult::Timeout);
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

std::shared_ptr<const ServerTls> server_tls(const config::ServerTlsConfig& c, const std::string& source,
                                            const std::atomic<double>* executor_load,
                                            const std::atomic<std::uint32_t>* returning_clients,
                                            std::shared_ptr<TicketKeys> keys, std::shared_ptr<HandshakeBudget> budget,
                                            std::shared_ptr<SessionCache> sessions) {
  std::vector<config::Error> errors;
  auto t = ServerTls::make(c, source, errors, std::move(keys), std::move(budget), std::move(sessions));
  if (t) {
    t->watch_load(executor_load, returning_clients);
    return t;
  }
  std::string msg;
  for (const auto& e : errors) msg += (msg.empty() ? "" : "; ") + e.format();
  throw std::runtime_error(msg.empty() ? "TLS: cannot set up the listener" : msg);
}

std::vector<config::Error> check_tls(const config::Config& cfg) {
  std::vector<config::Error> errors;
  for (const auto& l : cfg.listeners)
    if (l.tls.enabled) ServerTls::make(l.tls, cfg.source, errors);
  for (const auto& c : cfg.clusters)
    if (c.tls.enabled) ClientTls::make(c.tls, cfg.source, errors, c.protocol == config::ClusterConfig::Protocol::Http2);
  return errors;
}

}  // namespace levee::proxy
