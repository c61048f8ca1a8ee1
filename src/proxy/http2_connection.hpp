// A downstream HTTP/2 connection (docs/http2.md), on libnghttp2's server
// session: one coroutine reads the socket into the session, one writes
// what the session produces, and each request stream is a Downstream of
// its own that drives an Exchange, as an HTTP/1.1 request does. Many
// streams run at once, up to max_concurrent_streams.
//
// Flow control follows the exchange, not the socket: the connection
// window is given back as DATA arrives (a stream waiting in admission
// holds none of it), a stream's window only when its exchange has taken
// the bytes, so what one stream buffers is bounded by its window.
//
// It is reached from an HTTP/1.1 connection that found the client preface
// (h2c, prior knowledge) or negotiated "h2" by ALPN (Http1Connection::run),
// which hands over its stream and the bytes it already read.
#pragma once

#include <cstdint>
#include <memory>
#include <string>
#include <unordered_map>
#include <vector>

#include "config/config.hpp"
#include "proxy/asio.hpp"
#include "proxy/downstream.hpp"
#include "proxy/request_metrics.hpp"
#include "proxy/returning_client.hpp"
#include "proxy/stream.hpp"
#include "proxy/worker.hpp"

struct nghttp2_session;

namespace levee::proxy {

class Listener;
class ListenerSlot;
class H2Stream;

class Http2Connection final : public IdleConnection, public std::enable_shared_from_this<Http2Connection> {
 public:
  /// Takes over a connection the listener accepted (its counts included):
  /// `first` is what was already read from it.
  Http2Connection(Worker& w, Listener& l, Stream s, const Peer& peer, const core::PeerIdentity& identity,
                  std::string first);
  ~Http2Connection();
  Http2Connection(const Http2Connection&) = delete;
  Http2Connection& operator=(const Http2Connection&) = delete;

  static void start(std::shared_ptr<Http2Connection> c);

  // IdleConnection: it rests in the worker's idle list while it lives.
  void park() noexcept override {}
  void expire() noexcept override;

 private:
  friend class H2Stream;
  friend struct H2Callbacks;

  awaitable<void> reader();
  awaitable<void> writer();
  /// Feeds bytes to the session; false: the connection ends.
  bool feed(const char* data, std::size_t n);
  /// The writer has something to send.
  void kick() noexcept;
  /// Stops reading new streams (GOAWAY with the last stream seen); open
  /// ones finish, then the connection closes.
  void go_away() noexcept;
  /// A protocol limit: counted, GOAWAY ENHANCE_YOUR_CALM, close.
  void calm(H2Limit which) noexcept;
  void count(H2Limit which) noexcept;
  /// A control frame (SETTINGS, PING, empty DATA...): false past the rate.
  bool control_frame() noexcept;
  /// Work done (a stream opened, a DATA frame sent) earns control frames.
  void earn_control(std::uint32_t n) noexcept { control_earned_ += n; }
  /// A client reset of an unanswered stream: false past the rate.
  bool client_reset() noexcept;
  void stream_ended(std::int32_t id);  ///< exchange finished and the session closed it
  void idle_check();                   ///< no stream open: rest in the worker's idle list
  void start_streams();

  Worker& w_;
  const std::size_t slot_;
  const std::shared_ptr<ListenerSlot> slot_state_;
  const config::Http2Config h2cfg_;
  const std::uint32_t max_header_bytes_;
  const std::uint32_t max_headers_;
  const core::Duration body_timeout_;
  const std::uint32_t min_rate_;         ///< the listener's minimum data rate (bytes/s; 0: none)
  const core::Duration min_rate_grace_;
  const core::Duration idle_timeout_;
  Stream stream_;
  Peer peer_;
  core::PeerIdentity identity_;
  std::string first_;
  nghttp2_session* s_ = nullptr;
  std::unordered_map<std::int32_t, std::unique_ptr<H2Stream>> streams_;
  std::vector<std::int32_t> to_start_;  ///< complete request heads, started after the session returns
  std::vector<std::int32_t> copied_;    ///< streams whose piece went into the current write
  std::vector<std::int32_t> written_;   ///< the same, for the write that just ended
  std::vector<char> rbuf_;
  std::string out_;
  Timer wake_;        ///< the writer's wait
  Timer write_timer_; ///< a write the client does not take
  std::uint64_t consume_conn_ = 0;
  std::uint32_t queued_ = 0;  ///< streams whose exchange waits in admission
  // Rate limits: per-second windows.
  core::TimePoint control_window_{};
  std::uint32_t control_in_window_ = 0;
  std::uint32_t control_earned_ = 0;
  double reset_tokens_ = -1;
  core::TimePoint reset_refill_{};
  std::uint64_t streams_seen_ = 0;
  std::uint64_t resets_seen_ = 0;
  bool reading_done_ = false;
  bool dead_ = false;      ///< the socket failed, or a limit closed it
  bool linger_ = false;    ///< closed for the client's fault: a lingering close, so that it reads the GOAWAY
  bool goaway_ = false;
  bool closed_ = false;
  ReturningClient returning_;  ///< counted once a stream has been answered
  bool handed_ = true;     ///< the accepted connection's counts are ours to give back
};

}  // namespace levee::proxy
