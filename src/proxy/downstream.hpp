// What an exchange sees of its client, whatever carries it: an HTTP/1.1
// connection now, an HTTP/2 stream next. The exchange reads the request
// head and body through it and answers through it; the protocol decides
// framing, keep-alive and how a local reply is spelled.
#pragma once

#include <cstdint>
#include <optional>
#include <string_view>
#include <utility>

#include "core/net.hpp"
#include "http/local_reply.hpp"
#include "http/message.hpp"
#include "proxy/asio.hpp"
#include "proxy/watchdog.hpp"

namespace levee::proxy {

/// The client at the other end.
struct Peer {
  core::Address address{};
  std::uint16_t port = 0;
  /// The verified client certificate's names (mTLS), or null.
  const core::PeerIdentity* identity = nullptr;
  bool tls = false;  ///< the connection is TLS (X-Forwarded-Proto: https)
};

enum class BodyRead : std::uint8_t {
  Data,       ///< the request sink holds more body (and body_done() may now be true)
  Timeout,    ///< the client was too slow (408)
  Gone,       ///< the client went away
  Malformed,  ///< bad framing (400)
};

/// The response head to send, with what the exchange knows of its body.
struct ResponseStart {
  const http::Head& head;
  const http::ResponseInfo& info;
  bool no_body = false;                  ///< HEAD, 1xx, 204, 304
  std::optional<std::uint64_t> length;   ///< the body's length when the upstream framed it so
  bool no_retry = false;                 ///< add "don't retry" (levee gave up below: overload)
  bool strip_inside = false;             ///< an untrusted client: no load report, no Server (http::is_inside_field)
};

/// What a send did before it returned.
enum class Sent : std::uint8_t {
  Done,     ///< all of it is with the transport
  Failed,   ///< the client is gone, or its stream broke
  Pending,  ///< the rest goes out in finish_send(), which the caller awaits next
};

/// Told when the client goes away while the exchange is not reading from it.
class ClientWatch {
 public:
  virtual void on_client_gone() noexcept = 0;

 protected:
  ~ClientWatch() = default;
};

class Downstream {
 public:
  virtual const Peer& peer() const noexcept = 0;
  /// The request had a body (a length or chunked framing).
  virtual bool has_body() const noexcept = 0;
  /// The body's length, when the client declared one.
  virtual std::optional<std::uint64_t> body_length() const noexcept = 0;
  /// Every byte of the request body has been read into the request sink
  /// (true at once without a body).
  virtual bool body_done() const noexcept = 0;
  /// Reads more of the request body into the exchange's request sink.
  virtual awaitable<BodyRead> read_body() = 0;

  /// "100 Continue": the client may send its body now.
  virtual awaitable<bool> send_continue() = 0;
  /// The response head, with `first` (a first piece of body) in the same
  /// write; `last`: nothing follows. Not a coroutine: what the transport
  /// takes at once (an HTTP/1.1 answer, usually all of it) costs no
  /// coroutine frame; on Pending the caller awaits finish_send().
  virtual Sent send_response(const ResponseStart& r, std::string_view first, bool last) = 0;
  /// More of the body, as send_response() sends it.
  virtual Sent send_body(std::string_view piece, bool last) = 0;
  /// The rest of the last send that returned Pending. True: all sent.
  virtual awaitable<bool> finish_send() = 0;
  /// The end of the body with the upstream's trailer fields. HTTP/2
  /// carries them (a gRPC status is there); HTTP/1.1 leaves them out.
  /// strip_inside: an untrusted client gets no load report among them.
  virtual awaitable<bool> send_trailers(const http::Head& trailers, bool strip_inside) {
    (void)trailers;
    (void)strip_inside;
    const Sent s = send_body({}, true);
    if (s != Sent::Pending) co_return s == Sent::Done;
    co_return co_await finish_send();
  }
  /// An answer levee makes itself.
  virtual awaitable<bool> send_local(http::LocalReply& r) = 0;

  /// Reports the client going away to w until unwatch(); only while the
  /// exchange reads nothing from the client (queued, or waiting upstream).
  virtual void watch(ClientWatch& w) = 0;
  virtual void unwatch() noexcept = 0;

  /// The exchange waits in its cluster's admission queue (true), or no
  /// longer (false). HTTP/2 caps how many streams of a connection may.
  virtual void queued(bool) noexcept {}

  /// Cancels pending I/O with the client (a deadline passed).
  virtual void cancel_io() noexcept = 0;
  /// Bytes read from and written to the client since the last call.
  virtual std::pair<std::uint64_t, std::uint64_t> take_bytes() noexcept = 0;

 protected:
  ~Downstream() = default;
};

}  // namespace levee::proxy
