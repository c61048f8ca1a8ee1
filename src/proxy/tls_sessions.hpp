// A TLS listener's resumption and handshake state, kept with its slot so
// that it survives reloads, and the OpenSSL callbacks that use it.
//
// Session-ticket keys: kept across reloads (a reload that drew new keys would send every returning
// client through a full handshake at once: a handshake storm of levee's own
// making). The newest key encrypts new tickets; older ones still decrypt
// (and the ticket is then renewed under the newest) until they age out.
// Keys are drawn from OpenSSL's CSPRNG and rotated on an interval, or read
// from a file shared by a fleet (nginx's 80-byte layout: name 16, HMAC key
// 32, AES key 32; the first record encrypts), which its operator rotates.
#pragma once

#include <array>
#include <atomic>
#include <cstdint>
#include <deque>
#include <memory>
#include <mutex>
#include <optional>
#include <string>
#include <unordered_map>
#include <vector>

#include "core/time.hpp"

struct ssl_session_st;
struct ssl_ctx_st;

namespace levee::proxy {

class TicketKeys {
 public:
  struct Key {
    std::array<unsigned char, 16> name{};
    std::array<unsigned char, 32> hmac{};
    std::array<unsigned char, 32> aes{};
  };

  /// Draws a new encrypting key when `interval` has passed since the last
  /// one (or there is none), keeping at most `keep` keys. Not for keys from
  /// a file. True when it rotated.
  bool maybe_rotate(core::TimePoint now, core::Duration interval, std::size_t keep);
  /// A key file's keys (80 bytes per key, at most 16 keys), read but not
  /// used yet: a reload uses them only once it is certain to take effect.
  /// False, with why, when the file cannot be read or is not whole keys.
  static bool read_file(const std::string& path, std::vector<Key>& out, std::string& why);
  /// Replaces the keys with a file's.
  void use_file_keys(const std::vector<Key>& keys);
  /// Back to keys of levee's own, after a config that named a file (the
  /// file's keys are dropped: they are the fleet's, not to be kept).
  void use_generated();

  std::optional<Key> encrypting() const;
  /// The key a ticket names, and whether it is the encrypting one.
  std::optional<std::pair<Key, bool>> find(const unsigned char* name) const;
  std::size_t size() const;

 private:
  mutable std::mutex mu_;
  std::deque<Key> keys_;  ///< newest first
  core::TimePoint rotated_{};
  bool from_file_ = false;
};

/// A TLS listener's handshake admission, kept with its slot for the same
/// reason: handshakes in progress and the full-handshake token bucket carry
/// across a reload (a new one, starting full and at zero, would let a
/// flood through at every reload, and forget the handshakes still going).
struct HandshakeBudget {
  std::atomic<std::uint32_t> in_progress{0};
  std::mutex mu;
  double tokens = -1;  ///< < 0: not started (full)
  core::TimePoint refill{};
};

/// A TLS listener's server-side session cache (TLS 1.2 session IDs), kept
/// with its slot too: OpenSSL's own cache is per context, and every reload
/// makes new contexts, so returning clients went through full handshakes.
/// Bounded; the oldest session goes first.
struct SessionCache {
  explicit SessionCache(std::size_t cap = 20480) : capacity(cap) {}
  ~SessionCache();
  SessionCache(const SessionCache&) = delete;
  SessionCache& operator=(const SessionCache&) = delete;
  std::mutex mu;
  std::size_t capacity;
  std::unordered_map<std::string, ssl_session_st*> by_id;
  std::deque<std::string> order;  ///< ids, oldest first (may name removed ones)
};

/// Makes a server context keep its TLS 1.2 sessions in `cache` (OpenSSL's
/// per-context cache off) and hold the cache as long as it lives.
void use_session_cache(ssl_ctx_st* ctx, const std::shared_ptr<SessionCache>& cache);
/// Makes a server context encrypt and decrypt session tickets with `keys`
/// (AES-256-CBC and HMAC-SHA256, OpenSSL's own layout), held as long as it
/// lives: a TLS 1.3 resumption is answered with a fresh ticket.
void use_ticket_keys(ssl_ctx_st* ctx, std::shared_ptr<const TicketKeys> keys);

}  // namespace levee::proxy
