#include "proxy/tls_sessions.hpp"

#include <openssl/core_names.h>
#include <openssl/evp.h>
#include <openssl/rand.h>
#include <openssl/ssl.h>

#include <algorithm>
#include <cstring>
#include <fstream>
#include <iterator>
#include <memory>
#include <string>
#include <unordered_map>
#include <utility>
#include <vector>

namespace levee::proxy {

namespace {

constexpr std::size_t kRecord = 80;
constexpr std::size_t kMaxFileKeys = 16;

bool read_records(const std::string& path, std::vector<TicketKeys::Key>& out, std::string& why) {
  std::ifstream f(path, std::ios::binary);
  if (!f) {
    why = "cannot read session ticket keys '" + path + "'";
    return false;
  }
  const std::string bytes((std::istreambuf_iterator<char>(f)), std::istreambuf_iterator<char>());
  if (bytes.empty() || bytes.size() % kRecord != 0 || bytes.size() / kRecord > kMaxFileKeys) {
    why = "'" + path + "' must hold 1 to 16 keys of 80 random bytes each (" + std::to_string(bytes.size()) +
          " bytes); e.g. openssl rand 80 > " + path;
    return false;
  }
  for (std::size_t at = 0; at < bytes.size(); at += kRecord) {
    TicketKeys::Key k;
    std::memcpy(k.name.data(), bytes.data() + at, 16);
    std::memcpy(k.hmac.data(), bytes.data() + at + 16, 32);
    std::memcpy(k.aes.data(), bytes.data() + at + 48, 32);
    out.push_back(k);
  }
  return true;
}

}  // namespace

bool TicketKeys::maybe_rotate(core::TimePoint now, core::Duration interval, std::size_t keep) {
  std::lock_guard lk(mu_);
  if (from_file_) return false;
  if (!keys_.empty() && now - rotated_ < interval) return false;
  Key k;
  if (RAND_bytes(k.name.data(), static_cast<int>(k.name.size())) != 1 ||
      RAND_bytes(k.hmac.data(), static_cast<int>(k.hmac.size())) != 1 ||
      RAND_bytes(k.aes.data(), static_cast<int>(k.aes.size())) != 1)
    return false;  // keep the keys there are; the next tick tries again
  keys_.push_front(k);
  while (keys_.size() > std::max<std::size_t>(keep, 1)) keys_.pop_back();
  rotated_ = now;
  return true;
}

bool TicketKeys::read_file(const std::string& path, std::vector<Key>& out, std::string& why) {
  out.clear();
  return read_records(path, out, why);
}

void TicketKeys::use_file_keys(const std::vector<Key>& keys) {
  std::lock_guard lk(mu_);
  keys_.assign(keys.begin(), keys.end());
  from_file_ = true;
}

void TicketKeys::use_generated() {
  std::lock_guard lk(mu_);
  if (!from_file_) return;
  keys_.clear();
  from_file_ = false;
}

std::optional<TicketKeys::Key> TicketKeys::encrypting() const {
  std::lock_guard lk(mu_);
  if (keys_.empty()) return std::nullopt;
  return keys_.front();
}

std::optional<std::pair<TicketKeys::Key, bool>> TicketKeys::find(const unsigned char* name) const {
  std::lock_guard lk(mu_);
  for (std::size_t i = 0; i < keys_.size(); ++i)
    if (std::memcmp(keys_[i].name.data(), name, 16) == 0) return std::pair{keys_[i], i == 0};
  return std::nullopt;
}

std::size_t TicketKeys::size() const {
  std::lock_guard lk(mu_);
  return keys_.size();
}

SessionCache::~SessionCache() {
  for (auto& [id, sess] : by_id) SSL_SESSION_free(sess);
}

// --- OpenSSL's callbacks for both -----------------------------------------

namespace {

/// The slot's session cache, held by each server context (a shared_ptr on
/// the heap, freed with the context: a context outlives its ServerTls while
/// connections made with it remain).
void free_session_cache(void*, void* ptr, CRYPTO_EX_DATA*, int, long, void*) {
  delete static_cast<std::shared_ptr<SessionCache>*>(ptr);
}
int session_cache_index() {
  static const int i = SSL_CTX_get_ex_new_index(0, nullptr, nullptr, nullptr, free_session_cache);
  return i;
}
SessionCache* session_cache_of(SSL_CTX* ctx) {
  auto* p = static_cast<std::shared_ptr<SessionCache>*>(SSL_CTX_get_ex_data(ctx, session_cache_index()));
  return p ? p->get() : nullptr;
}

int on_new_server_session(SSL* ssl, SSL_SESSION* sess) {
  // TLS 1.3 with tickets: the session is the ticket itself, never looked
  // up by ID; caching it would only evict the TLS 1.2 sessions.
  if (SSL_version(ssl) >= TLS1_3_VERSION && (SSL_get_options(ssl) & SSL_OP_NO_TICKET) == 0) return 0;
  SessionCache* c = session_cache_of(SSL_get_SSL_CTX(ssl));
  if (c == nullptr) return 0;
  unsigned int len = 0;
  const unsigned char* id = SSL_SESSION_get_id(sess, &len);
  std::string key(reinterpret_cast<const char*>(id), len);
  std::lock_guard lk(c->mu);
  if (c->capacity == 0) return 0;
  if (c->order.size() > 2 * c->capacity) {
    // Removed sessions leave their ids in `order`: drop those (and repeats).
    std::deque<std::string> kept;
    std::unordered_map<std::string, std::size_t> last;
    for (std::size_t i = 0; i < c->order.size(); ++i) last[c->order[i]] = i;
    for (std::size_t i = 0; i < c->order.size(); ++i)
      if (last[c->order[i]] == i && c->by_id.contains(c->order[i])) kept.push_back(std::move(c->order[i]));
    c->order = std::move(kept);
  }
  while (c->by_id.size() >= c->capacity && !c->order.empty()) {
    auto it = c->by_id.find(c->order.front());
    c->order.pop_front();
    if (it != c->by_id.end()) {
      SSL_SESSION_free(it->second);
      c->by_id.erase(it);
    }
  }
  auto [it, fresh] = c->by_id.try_emplace(key, sess);
  if (!fresh) SSL_SESSION_free(std::exchange(it->second, sess));
  c->order.push_back(std::move(key));
  return 1;  // the cache holds the reference now
}

SSL_SESSION* on_get_server_session(SSL* ssl, const unsigned char* id, int len, int* copy) {
  *copy = 0;
  SessionCache* c = session_cache_of(SSL_get_SSL_CTX(ssl));
  if (c == nullptr) return nullptr;
  std::lock_guard lk(c->mu);
  auto it = c->by_id.find(std::string(reinterpret_cast<const char*>(id), static_cast<std::size_t>(len)));
  if (it == c->by_id.end()) return nullptr;
  SSL_SESSION_up_ref(it->second);  // OpenSSL checks its age and frees its reference
  return it->second;
}

void on_remove_server_session(SSL_CTX* ctx, SSL_SESSION* sess) {
  SessionCache* c = session_cache_of(ctx);
  if (c == nullptr) return;
  unsigned int len = 0;
  const unsigned char* id = SSL_SESSION_get_id(sess, &len);
  std::lock_guard lk(c->mu);
  auto it = c->by_id.find(std::string(reinterpret_cast<const char*>(id), len));
  if (it == c->by_id.end()) return;
  SSL_SESSION_free(it->second);
  c->by_id.erase(it);
}

/// The listener's ticket keys, held by each certificate's context like the
/// session cache (a connection may still make a ticket after a reload).
void free_ticket_keys(void*, void* ptr, CRYPTO_EX_DATA*, int, long, void*) {
  delete static_cast<std::shared_ptr<const TicketKeys>*>(ptr);
}
int ticket_keys_index() {
  static const int i = SSL_CTX_get_ex_new_index(0, nullptr, nullptr, nullptr, free_ticket_keys);
  return i;
}

/// Session tickets under the listener's own keys (proxy/tls_sessions.hpp):
/// AES-256-CBC with HMAC-SHA256, the layout OpenSSL's own keys use.
int on_ticket_key(SSL* ssl, unsigned char* name, unsigned char* iv, EVP_CIPHER_CTX* cipher, EVP_MAC_CTX* mac,
                  int enc) {
  const auto* held =
      static_cast<const std::shared_ptr<const TicketKeys>*>(SSL_CTX_get_ex_data(SSL_get_SSL_CTX(ssl), ticket_keys_index()));
  const TicketKeys* keys = held ? held->get() : nullptr;
  if (keys == nullptr) return 0;  // no ticket made; a ticket offered is not taken
  TicketKeys::Key k;
  int result = 1;
  if (enc) {
    auto e = keys->encrypting();
    if (!e) return 0;
    k = *e;
    std::memcpy(name, k.name.data(), k.name.size());
    if (RAND_bytes(iv, 16) != 1) return -1;
    if (EVP_EncryptInit_ex(cipher, EVP_aes_256_cbc(), nullptr, k.aes.data(), iv) != 1) return -1;
  } else {
    auto f = keys->find(name);
    if (!f) return 0;  // an unknown or aged-out key: a full handshake
    k = f->first;
    // 2: good, and send a fresh ticket. Under an older key, so that it is
    // renewed under the newest; and always in TLS 1.3, whose clients use a
    // ticket once (RFC 8446 C.4: OpenSSL's, browsers'): without a fresh one
    // after each resumption, every other connection is a full handshake.
    result = f->second && SSL_version(ssl) < TLS1_3_VERSION ? 1 : 2;
    if (EVP_DecryptInit_ex(cipher, EVP_aes_256_cbc(), nullptr, k.aes.data(), iv) != 1) return -1;
  }
  char digest[] = "sha256";
  OSSL_PARAM params[] = {OSSL_PARAM_construct_octet_string(OSSL_MAC_PARAM_KEY, k.hmac.data(), k.hmac.size()),
                         OSSL_PARAM_construct_utf8_string(OSSL_MAC_PARAM_DIGEST, digest, 0), OSSL_PARAM_construct_end()};
  if (EVP_MAC_CTX_set_params(mac, params) != 1) return -1;
  return result;
}

}  // namespace

void use_session_cache(ssl_ctx_st* ctx, const std::shared_ptr<SessionCache>& cache) {
  // The slot's cache, not OpenSSL's per-context one, so a reload keeps it.
  SSL_CTX_set_session_cache_mode(ctx, SSL_SESS_CACHE_SERVER | SSL_SESS_CACHE_NO_INTERNAL);
  SSL_CTX_set_ex_data(ctx, session_cache_index(), new std::shared_ptr<SessionCache>(cache));
  SSL_CTX_sess_set_new_cb(ctx, on_new_server_session);
  SSL_CTX_sess_set_get_cb(ctx, on_get_server_session);
  SSL_CTX_sess_set_remove_cb(ctx, on_remove_server_session);
}

void use_ticket_keys(ssl_ctx_st* ctx, std::shared_ptr<const TicketKeys> keys) {
  SSL_CTX_set_ex_data(ctx, ticket_keys_index(), new std::shared_ptr<const TicketKeys>(std::move(keys)));
  SSL_CTX_set_tlsext_ticket_key_evp_cb(ctx, on_ticket_key);
}

}  // namespace levee::proxy
