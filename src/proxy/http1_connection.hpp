// A downstream HTTP/1.1 connection: the socket, its timeouts, keep-alive,
// pipelining, framing of what levee sends, and lingering close. It parses
// each request head, hands the request to an Exchange (to which it is the
// Downstream), and carries on while the connection may be reused.
//
// Between requests it holds no per-request scratch and no read buffer
// (both taken from the worker's stocks when bytes arrive; a TLS connection
// keeps its buffer until it parks), and once idle for 100 ms (and from the
// start, before its first request) no coroutine either: it waits for
// readability with a plain handler and starts run() again when bytes come.
// What is left of an idle connection is this object, its socket and one
// pending wait (about 700 bytes in all, loadtest/idle_conns.py).
#pragma once

#include <memory>
#include <optional>

#include "http/framing.hpp"
#include "proxy/asio.hpp"
#include "proxy/downstream.hpp"
#include "proxy/exchange_buffers.hpp"
#include "proxy/io_buffer.hpp"
#include "proxy/stream.hpp"
#include "proxy/listener.hpp"
#include "proxy/returning_client.hpp"
#include "proxy/watchdog.hpp"
#include "proxy/worker.hpp"

namespace levee::proxy {

class Listener;

class Http1Connection final : public Downstream,
                              public IdleConnection,
                              public Watchdog::Target,
                              public std::enable_shared_from_this<Http1Connection> {
 public:
  Http1Connection(Worker& w, Listener& l, Socket s, const core::Address& addr, std::uint16_t port);
  ~Http1Connection();

  /// Runs the connection: requests in turn until it closes. Between
  /// requests an idle connection may rest with no coroutine at all and
  /// start again here when its client sends (rest()).
  static void start(std::shared_ptr<Http1Connection> c);
  awaitable<void> run();

  // Downstream
  const Peer& peer() const noexcept override { return peer_; }
  bool has_body() const noexcept override;
  std::optional<std::uint64_t> body_length() const noexcept override;
  bool body_done() const noexcept override;
  awaitable<BodyRead> read_body() override;
  awaitable<bool> send_continue() override;
  Sent send_response(const ResponseStart& r, std::string_view first, bool last) override;
  Sent send_body(std::string_view piece, bool last) override;
  awaitable<bool> finish_send() override;
  awaitable<bool> send_local(http::LocalReply& r) override;
  void watch(ClientWatch& w) override;
  void unwatch() noexcept override;
  void cancel_io() noexcept override;
  std::pair<std::uint64_t, std::uint64_t> take_bytes() noexcept override;

  // IdleConnection
  void park() noexcept override;
  void expire() noexcept override;

 private:
  enum class HeadResult : std::uint8_t { Ok, Closed, Failed };

  /// Waits for the first bytes of the next request. False: close.
  awaitable<bool> serve();
  /// A new parser for the next request, and its header timeout.
  void start_head();
  /// Parses what was read: the head's outcome, or nothing while it is
  /// incomplete.
  std::optional<HeadResult> parse_head(core::Reason& why);
  /// Reads until parse_head() has an outcome.
  awaitable<HeadResult> read_head(core::Reason& why);
  /// Sends b_->out_bufs: what the socket takes at once, without waiting.
  Sent put();
  /// put(), then finish_send() when it was not all.
  awaitable<bool> write();
  awaitable<void> lingering_close();
  /// Between requests, an empty connection holds no read buffer: it
  /// borrows one from the worker's stock when bytes come (lend_buffer(),
  /// the space to read into) and gives it back when a read found nothing.
  asio::mutable_buffer lend_buffer();
  void return_buffer();
  /// An HTTP/2 client (ALPN h2, or the cleartext preface): hands the
  /// connection to an Http2Connection (proxy/http2_connection.cpp). True: gone.
  awaitable<bool> try_http2();
  /// Waits for the client's next bytes with a plain completion handler, so
  /// that a parked connection holds no coroutine frame: this object, its
  /// socket and one pending wait. start() runs it again when bytes come.
  void rest();
  void watch_for_close(std::uint64_t gen);
  void format_client();
  /// When `bytes` more must have moved, at the listener's minimum rate.
  core::TimePoint rate_deadline(core::TimePoint start, std::uint64_t bytes) const noexcept;
  void on_deadline(Watchdog::Phase p) noexcept override;

  Worker& w_;
  Listener* l_;  ///< of the request in progress's Runtime (serve() renews it)
  const std::size_t slot_;
  const std::shared_ptr<ListenerSlot> slot_state_;  ///< counts and guards, whatever the Runtime
  Stream stream_;
  Peer peer_;
  core::PeerIdentity identity_;  ///< a verified client certificate's names (peer_.identity points here)
  std::unique_ptr<IoBuffer> in_;
  std::unique_ptr<ExchangeBuffers> b_;
  ClientWatch* watcher_ = nullptr;
  std::uint64_t watch_gen_ = 0;
  std::uint64_t rx_ = 0;
  std::uint64_t tx_ = 0;
  std::uint32_t served_ = 0;  ///< requests answered on this connection
  ReturningClient returning_;  ///< counted once served and kept open
  std::uint32_t shed_run_ = 0;  ///< self-protection refusals in a row (listener shed_backoff)
  // The minimum data rate of an upload: its n-th byte must have arrived by
  // start + grace + n / min_rate. (A download's rate is checked per write.)
  core::TimePoint body_start_{};
  std::uint64_t body_bytes_ = 0;

  // The request in progress.
  bool keep_alive_ = true;
  bool head_ = false;         ///< a HEAD request: no body goes back
  bool chunked_out_ = false;  ///< the response goes out chunked
  bool close_after_ = false;  ///< this answer ends the connection
  // The connection.
  bool linger_ = false;  ///< answered before the whole request was read: drain before closing
  bool parked_ = false;
  bool resumed_ = false;  ///< run() restarted by rest(): the socket is readable
  bool parking_ = false;
  bool expiring_ = false;
  bool handed_ = false;  ///< given to an Http2Connection, with its counts
};

}  // namespace levee::proxy
