// The edge's configuration: TLS on listeners (certificates by SNI, ALPN,
// versions, resumption, client certificates, the handshake timeout) and
// who a listener trusts. Defaults live here; src/config/tls.cpp reads
// them; docs/configuration.md is the reference.
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <utility>
#include <vector>

#include "core/classify.hpp"
#include "core/net.hpp"
#include "core/time.hpp"

namespace levee::config {

using core::Duration;
using namespace std::chrono_literals;

/// Where a key was written, for problems found only when its file is
/// loaded (at start-up, or when the file changes).
struct Place {
  int line = 0;    ///< 1-based; 0: unknown
  int column = 0;
  std::string path;  ///< e.g. listeners[0].tls.certificates[1].key_file
};

enum class TlsVersion : std::uint8_t { V1_2, V1_3 };

/// One certificate a TLS listener can present.
struct CertificateConfig {
  std::string cert_file;  ///< `certificate`: PEM, the certificate then its chain
  std::string key_file;   ///< `key`: PEM private key
  /// SNI names it answers (exact or "*.example.com"); empty: the names in
  /// the certificate (SAN DNS entries, else the CN).
  std::vector<std::string> names;
  /// `ocsp_response`: a DER OCSP response to staple (refreshed by whoever
  /// fetches it; reloaded when the file changes); empty: none.
  std::string ocsp_file;
  Place cert_place, key_place, ocsp_place;
};

enum class ClientAuth : std::uint8_t { None, Optional, Required };

struct ClientAuthConfig {
  ClientAuth mode = ClientAuth::None;
  std::string ca_file;  ///< PEM bundle client certificates are verified against
  std::uint32_t verify_depth = 4;
  /// `crl`: PEM revocation lists of the CAs in `ca`; a client certificate
  /// they list is refused. Empty: no revocation check.
  std::string crl_file;
  Place ca_place, crl_place;
};

/// TLS termination on a listener.
struct ServerTlsConfig {
  bool enabled = false;
  std::vector<CertificateConfig> certificates;  ///< the first is the default (no or unknown SNI)
  std::vector<std::string> alpn = {"http/1.1"};
  TlsVersion min_version = TlsVersion::V1_2;
  TlsVersion max_version = TlsVersion::V1_3;
  /// TLS 1.2 cipher list (OpenSSL syntax): forward secrecy and AEAD only.
  std::string ciphers =
      "ECDHE-ECDSA-AES128-GCM-SHA256:ECDHE-RSA-AES128-GCM-SHA256:ECDHE-ECDSA-AES256-GCM-SHA384:"
      "ECDHE-RSA-AES256-GCM-SHA384:ECDHE-ECDSA-CHACHA20-POLY1305:ECDHE-RSA-CHACHA20-POLY1305";
  /// TLS 1.3 suites; empty: OpenSSL's (AES-GCM and ChaCha20-Poly1305).
  std::string ciphersuites;
  std::string groups = "X25519:P-256:P-384";
  bool session_tickets = true;
  std::uint32_t session_cache = 20480;  ///< server-side sessions (TLS 1.2 IDs), 0: none
  Duration session_timeout = 300s;      ///< how long a session may be resumed
  /// A new ticket key this often; older keys still decrypt (as many as
  /// session_timeout needs, at most 4). Keys live with the listener's
  /// slot: reloads keep them.
  Duration session_ticket_rotation = 1h;
  /// `session_ticket_keys`: keys shared by a fleet (80 bytes each, the
  /// first encrypts); then levee does not rotate, the file's owner does.
  std::string session_ticket_keys_file;
  Place session_ticket_keys_place;
  /// The handshake must be done within this, or the connection is closed.
  Duration handshake_timeout = 10s;
  // Handshakes are load (a full one costs some 40 proxied requests of CPU):
  // full handshakes are admitted before requests are refused. A client
  // hello that offers to resume (a ticket, a PSK, a TLS 1.2 session id) is
  // spared the rate and the load rule, but not the cap on handshakes in
  // progress; one that claimed to resume and did not is charged afterwards.
  std::uint32_t max_handshakes = 1024;  ///< in progress on this listener (all workers); 0: no cap
  double handshake_rate = 0;            ///< full handshakes per second on this listener; 0: unlimited
  /// Above this executor load, full handshakes are refused (below the
  /// lowest request threshold of self_protection, 0.8, so handshakes go
  /// first); 0: never.
  double shed_handshakes_above = 0.7;
  ClientAuthConfig client_auth;
  Place place;  ///< the `tls` key
};

/// TLS from levee to a cluster's endpoints (requests; not health checks yet).
struct UpstreamTlsConfig {
  bool enabled = false;
  std::string ca_file;      ///< `ca`: PEM bundle; empty: the system's trusted CAs
  std::string server_name;  ///< SNI and the name verified; empty: the endpoint's host
  bool verify = true;       ///< false: encrypt without checking the server (tests only)
  /// `certificate` / `key`: levee's client certificate, for backends that
  /// require one (mTLS to the upstream); empty: none.
  std::string cert_file, key_file;
  Place ca_place, cert_place, key_place;
  Place place;  ///< the `tls` key
};

/// Who a listener believes.
struct TrustConfig {
  bool set = false;  ///< written in the file; else: everyone on a loopback listener, nobody elsewhere
  core::TrustedSources sources;  ///< networks (or any) and certificate identities
};

/// The PROXY protocol (v1 and v2) on a listener behind an L4 load balancer:
/// connections from `from` must start with a header, whose client address
/// then counts as the peer for trust, per-source caps, X-Forwarded-For and
/// logs. Connections from elsewhere are served as direct clients (a header
/// from them is just bad HTTP).
struct ProxyProtocolConfig {
  bool enabled = false;
  core::TrustedSources from;  ///< default (when enabled): any source
  Duration timeout = 3s;      ///< for the whole header
  std::uint32_t max_v2_bytes = 536;  ///< the v2 header with its TLVs
};

/// Whether an address string (as written in a listener) is loopback.
bool loopback_address(const std::string& address);

}  // namespace levee::config
