// A listener: an address levee accepts connections on, its routes, and the
// connection guards every worker's acceptor for it shares (the connection
// cap, the accept-rate token bucket, the per-source cap). Each worker runs
// its own accept loop on its own SO_REUSEPORT socket (accept_loop).
//
// What belongs to the address rather than to one configuration lives in a
// ListenerSlot, which a reload carries over for every listener that keeps
// its address and port: the guards' counts, and the workers' sockets and
// idle-connection lists (indexed by the slot's id).
#pragma once

#include <array>
#include <atomic>
#include <cstdint>
#include <memory>
#include <mutex>
#include <string>
#include <unordered_map>
#include <vector>

#include "config/config.hpp"
#include "core/classify.hpp"
#include "core/net.hpp"
#include "core/time.hpp"
#include "proxy/asio.hpp"
#include "proxy/tls_sessions.hpp"

namespace levee::proxy {

class Cluster;
class ServerTls;
class Runtime;
class Worker;

/// The part of a listener that outlives reloads: one per address and port.
class ListenerSlot {
 public:
  ListenerSlot(std::size_t slot_id, std::string k) : id(slot_id), key(std::move(k)) {}
  const std::size_t id;   ///< into each worker's per-slot tables
  const std::string key;  ///< "address:port"

  std::atomic<std::uint32_t> connections{0};
  std::atomic<std::uint32_t> refusing{0};  ///< polite refusals in progress
  // Fuse pools, all clusters (written by the workers, read at scrape).
  std::atomic<std::uint32_t> fuse_open{0};
  std::atomic<std::uint32_t> fuse_in_use{0};
  std::atomic<std::uint32_t> fuse_waiting{0};
  /// Session-ticket keys (TLS listeners): they outlive reloads with the slot.
  const std::shared_ptr<TicketKeys> ticket_keys = std::make_shared<TicketKeys>();
  /// Handshake admission (TLS listeners): in progress and the rate, across reloads.
  const std::shared_ptr<HandshakeBudget> handshakes = std::make_shared<HandshakeBudget>();
  /// TLS 1.2 sessions (by ID), across reloads.
  const std::shared_ptr<SessionCache> sessions = std::make_shared<SessionCache>();

  bool take_accept_token(double rate, core::TimePoint now);
  bool source_enter(const core::Address& addr, std::uint32_t cap);
  void source_leave(const core::Address& addr);

 private:
  std::mutex rate_mu_;
  double tokens_ = -1;
  core::TimePoint last_refill_{};
  std::mutex src_mu_;
  core::SourceCounts per_source_;
};

/// "address:port", the identity of a listener's socket across reloads.
std::string slot_key(const config::ListenerConfig& c);

/// What the data plane adds to a core route rule.
struct Route {
  Cluster* cluster = nullptr;
  std::string name;          ///< metric label and log field
  std::size_t metric_index;  ///< into the request metrics' route axis
  bool fuse = false;         ///< through a fuse pool
};

/// The peer address as classification sees it: IPv4 as IPv4-mapped.
core::Address mapped(const asio::ip::address& a) noexcept;

class Listener {
 public:
  Listener(Runtime& rt, const config::ListenerConfig& c, std::size_t index, core::Classifier classifier,
           std::vector<Route> routes, std::shared_ptr<ListenerSlot> slot);

  const config::ListenerConfig& cfg;
  const std::size_t index;
  const std::shared_ptr<ListenerSlot> slot;
  const core::Classifier classifier;
  const std::vector<Route> routes;  ///< parallel to classifier.routes()
  /// TLS termination (proxy/tls_context.hpp); null: cleartext.
  std::shared_ptr<const ServerTls> tls;

  bool batch() const noexcept { return cfg.mode == config::ListenerConfig::Mode::Batch; }
  /// Whether any of its traffic goes through a fuse: a batch listener, or a
  /// route marked `fuse`.
  bool uses_fuse() const noexcept;

  /// The Runtime this listener belongs to (what its requests use).
  Runtime& runtime() const noexcept { return rt_; }

  // The slot's, under the names the rest of the proxy uses.
  std::atomic<std::uint32_t>& connections;
  std::atomic<std::uint32_t>& refusing;
  std::atomic<std::uint32_t>& fuse_open;
  std::atomic<std::uint32_t>& fuse_in_use;
  std::atomic<std::uint32_t>& fuse_waiting;

  /// Accept-rate limit: a token bucket shared by the workers.
  bool take_accept_token(core::TimePoint now) { return slot->take_accept_token(cfg.accept_rate, now); }
  /// Per-source connection cap; true when the source may open one more.
  bool source_enter(const core::Address& addr) { return slot->source_enter(addr, cfg.max_connections_per_source); }
  void source_leave(const core::Address& addr) { slot->source_leave(addr); }

 private:
  Runtime& rt_;
};

/// One worker's accept loop on one listener slot: connection guards (of
/// the listener the slot has in the worker's current Runtime), then a
/// connection of the listener's protocol. Ends when the acceptor closes.
awaitable<void> accept_loop(Worker& w, std::shared_ptr<Acceptor> a, std::size_t slot);
/// Refuses a connection politely: a 503 with Retry-After and the reason.
awaitable<void> refuse_connection(Worker& w, Socket s, std::shared_ptr<ListenerSlot> l, core::Reason reason);
/// Reads a connection's PROXY protocol header, then starts it as the client
/// the header names (proxy/proxy_header.cpp). The accept loop has counted it.
awaitable<void> read_proxy_header(Worker& w, std::size_t slot, std::shared_ptr<ListenerSlot> st, Socket s,
                                  core::Address addr, std::uint16_t port);

}  // namespace levee::proxy
