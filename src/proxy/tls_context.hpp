// TLS termination on a listener: the OpenSSL contexts built from the
// listener's `tls` settings (one per certificate, chosen by SNI, the first
// the default), and the identity a verified client certificate carries.
//
// Built once at start-up, shared read-only by every worker (an SSL_CTX is
// safe to use from several threads once configured). A bad file is a
// configuration error that names it: check_tls() reports it in the same
// file:line:column form as the loader, and main exits 2.
#pragma once

#include <atomic>
#include <memory>
#include <mutex>
#include <optional>
#include <string>
#include <vector>

#include "config/config.hpp"
#include "core/net.hpp"
#include "core/time.hpp"
#include "proxy/asio.hpp"
#include "proxy/tls_sessions.hpp"

struct ssl_st;
struct ssl_ctx_st;

namespace levee::proxy {

class ServerTls {
 public:
  /// Loads every certificate and key. Errors go to `errors` (naming the
  /// file); the result is null when there is one.
  /// `keys`: the listener slot's ticket keys (null: checking only).
  static std::shared_ptr<ServerTls> make(const config::ServerTlsConfig& c, const std::string& source,
                                         std::vector<config::Error>& errors,
                                         std::shared_ptr<TicketKeys> keys = nullptr,
                                         std::shared_ptr<HandshakeBudget> budget = nullptr,
                                         std::shared_ptr<SessionCache> sessions = nullptr);
  ~ServerTls();
  ServerTls(const ServerTls&) = delete;
  ServerTls& operator=(const ServerTls&) = delete;

  /// A new server-side session for one accepted connection.
  ssl_st* session() const;
  core::Duration handshake_timeout() const noexcept { return cfg_.handshake_timeout; }
  bool client_certificates() const noexcept { return cfg_.client_auth.mode != config::ClientAuth::None; }

  /// The context a server name selects (exact, then "*.suffix" one label
  /// deep), or null: the default stays.
  ssl_ctx_st* select(std::string_view server_name) const noexcept;

  /// Handshake admission (the client hello callback): whether a handshake
  /// may go on, given whether its hello offers to resume. Counted in
  /// levee_tls_handshakes_total{result="refused"} when not.
  bool admit_handshake(bool resuming) const noexcept;
  /// A handshake that took its place in `in_progress` ended; `full`: it
  /// was a full one (charged to the rate if it had claimed to resume).
  void handshake_done(bool admitted_as_resuming, bool full) const noexcept;
  /// Where the executor load and the count of returning clients are
  /// published (the process's), for the load rule: full handshakes are shed
  /// above the load only while there are established clients to protect.
  void watch_load(const std::atomic<double>* load, const std::atomic<std::uint32_t>* returning) noexcept {
    load_ = load;
    returning_ = returning;
  }
  /// Handshakes past their hello, of this listener (across reloads).
  std::atomic<std::uint32_t>& in_progress() const noexcept { return budget_->in_progress; }
  /// Draws a new ticket key when the rotation interval has passed (not for
  /// keys from a file). True when it did. On the admin thread's tick.
  bool rotate_ticket_keys(core::TimePoint now) const;
  /// This listener's Runtime is now the running one: its ticket-key
  /// choice (a file's keys, or levee's own) replaces the slot's.
  void adopt() const;
  const TicketKeys* ticket_keys() const noexcept { return keys_.get(); }

 private:
  explicit ServerTls(const config::ServerTlsConfig& c) : cfg_(c) {}
  struct Cert {
    ssl_ctx_st* ctx = nullptr;
    std::vector<std::string> names;  ///< lower case; "*.example.com" for a wildcard
    std::string ocsp;                ///< a DER OCSP response to staple, or empty
    long long ocsp_until = 0;        ///< its nextUpdate (seconds since the epoch); 0: none given
  };
 public:
  using CertEntry = Cert;  // for the stapling callback (tls_context.cpp)
 private:
  config::ServerTlsConfig cfg_;
  std::string alpn_wire_;    ///< the protocols offered, in ALPN's wire format
  std::vector<Cert> certs_;  ///< certs_[0] is the default and owns the session cache and ticket keys
  const std::atomic<double>* load_ = nullptr;
  const std::atomic<std::uint32_t>* returning_ = nullptr;
  std::shared_ptr<TicketKeys> keys_;
  std::optional<std::vector<TicketKeys::Key>> file_keys_;  ///< read from session_ticket_keys_file
  // In progress, and the full-handshake token bucket (a handshake costs far
  // more than its lock): the slot's, so a reload keeps them.
  std::shared_ptr<HandshakeBudget> budget_;
};

class Stream;
struct RequestMetrics;

/// The server side of a TLS handshake on an accepted connection, bounded by
/// the listener's handshake_timeout (a client that is slow or silent is
/// cut off then). False: the connection is to be closed.
/// Counts it in levee_tls_handshakes_total{listener, result}.
awaitable<bool> accept_tls(Stream& s, const ServerTls& tls, RequestMetrics& m, std::size_t shard,
                           std::size_t listener);

/// TLS to a cluster's endpoints: one client context, verifying the server
/// against the CA bundle (or the system's) and the endpoint's name.
class ClientTls {
 public:
  /// h2: offer only "h2" by ALPN (an HTTP/2 cluster), else "http/1.1".
  static std::shared_ptr<ClientTls> make(const config::UpstreamTlsConfig& c, const std::string& source,
                                         std::vector<config::Error>& errors, bool h2 = false);
  ~ClientTls();
  ClientTls(const ClientTls&) = delete;
  ClientTls& operator=(const ClientTls&) = delete;
  /// A client session for `host` (SNI unless it is an IP literal; the name
  /// or address the certificate must carry), or null.
  ssl_st* session(const std::string& host) const;

 private:
  explicit ClientTls(const config::UpstreamTlsConfig& c) : cfg_(c) {}
  config::UpstreamTlsConfig cfg_;
  ssl_ctx_st* ctx_ = nullptr;
};

/// The client side of a handshake on a connected upstream socket (bounded
/// by the caller's watchdog, which cancels the socket). False: failed.
awaitable<bool> connect_tls(Stream& s, const ClientTls& tls, const std::string& host);

/// ClientTls::make at start-up; throws on a bad file.
std::shared_ptr<const ClientTls> client_tls(const config::UpstreamTlsConfig& c, const std::string& source,
                                            bool h2 = false);

/// What a verified peer certificate names (SAN URIs, SAN DNS names, CN).
core::PeerIdentity peer_identity(ssl_st* ssl);

/// ServerTls::make for a listener at start-up; throws (with the errors,
/// formatted) when a file is bad.
std::shared_ptr<const ServerTls> server_tls(const config::ServerTlsConfig& c, const std::string& source,
                                            const std::atomic<double>* executor_load = nullptr,
                                            const std::atomic<std::uint32_t>* returning_clients = nullptr,
                                            std::shared_ptr<TicketKeys> keys = nullptr,
                                            std::shared_ptr<HandshakeBudget> budget = nullptr,
                                            std::shared_ptr<SessionCache> sessions = nullptr);

/// Every listener's TLS files loaded once, for start-up and --validate.
std::vector<config::Error> check_tls(const config::Config& cfg);

}  // namespace levee::proxy
