// One connection to a Redis server, driven with blocking calls that all
// end by a deadline: the quota sync's own thread uses it, so nothing in
// levee's event loops ever waits on Redis.
//
// Why not hiredis's own connection: Debian 12's hiredis 0.14 has no TLS and
// no timeouts in its async API (and its blocking API's timeouts apply per
// call, not to a whole round trip). So levee owns the socket (and the
// OpenSSL session on it) and uses hiredis for what it does well: command
// formatting and the RESP reply parser (redisReader). docs/algorithms.md,
// "Fleet quotas: the client", has the measured reasons.
#pragma once

#include <chrono>
#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "config/config.hpp"
#include "core/fleet_quota.hpp"

struct ssl_ctx_st;
struct ssl_st;
struct redisReader;

namespace levee::quota {

using Deadline = std::chrono::steady_clock::time_point;

enum class LinkError : std::uint8_t {
  None,
  Connect,   ///< refused, unreachable, TLS handshake failed
  Timeout,   ///< the deadline passed
  Protocol,  ///< not RESP
  Closed,    ///< the peer closed the connection
};

struct LinkResult {
  LinkError error = LinkError::None;
  std::string what;  ///< for the log line
  explicit operator bool() const noexcept { return error == LinkError::None; }
};

/// An OpenSSL client context built once from the configuration; throws
/// std::runtime_error when a file cannot be used (at start-up, not later).
class TlsContext {
 public:
  explicit TlsContext(const config::RedisTlsConfig& cfg);
  ~TlsContext();
  TlsContext(const TlsContext&) = delete;
  TlsContext& operator=(const TlsContext&) = delete;
  ssl_ctx_st* get() const noexcept { return ctx_; }
  const config::RedisTlsConfig& cfg() const noexcept { return cfg_; }

 private:
  config::RedisTlsConfig cfg_;
  ssl_ctx_st* ctx_ = nullptr;
};

class RedisLink {
 public:
  /// The most one round trip's replies may hold.
  static constexpr std::size_t kMaxReplyBytes = 8u << 20;
  /// tls: null for plain TCP.
  explicit RedisLink(const TlsContext* tls);
  ~RedisLink();
  RedisLink(const RedisLink&) = delete;
  RedisLink& operator=(const RedisLink&) = delete;

  /// TCP connect (and TLS handshake) to host:port before the deadline.
  LinkResult connect(const std::string& host, std::uint16_t port, Deadline deadline);
  bool connected() const noexcept { return fd_ >= 0; }
  void close() noexcept;
  /// "host:port" of the current or last peer.
  const std::string& peer() const noexcept { return peer_; }

  /// Sends the commands as one pipeline and reads one reply per command,
  /// all before the deadline. On any error the connection is closed.
  LinkResult roundtrip(const std::vector<core::RedisCommand>& cmds, std::vector<core::RedisReply>& out,
                       Deadline deadline);

  /// Bytes written and read so far (for the benchmarks).
  std::uint64_t bytes_out() const noexcept { return bytes_out_; }
  std::uint64_t bytes_in() const noexcept { return bytes_in_; }

 private:
  LinkResult write_all(const std::string& data, Deadline deadline);
  LinkResult read_some(Deadline deadline);
  LinkResult wait(bool for_write, Deadline deadline);
  LinkResult fail(LinkError e, std::string what);

  const TlsContext* tls_;
  int fd_ = -1;
  ssl_st* ssl_ = nullptr;
  redisReader* reader_ = nullptr;
  std::string peer_;
  std::string out_;
  std::uint64_t bytes_out_ = 0, bytes_in_ = 0;
};

}  // namespace levee::quota
