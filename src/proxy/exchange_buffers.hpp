// Per-request scratch space: message heads, body buffers, the outgoing head,
// the parsers of the HTTP/1.1 hops, and the exchange's two timers. Pooled
// per worker and taken when a request's first bytes arrive, so an idle
// keep-alive connection holds none of it.
#pragma once

#include <arpa/inet.h>

#include <algorithm>
#include <charconv>
#include <cstring>
#include <optional>
#include <string>

#include "core/net.hpp"

#include "http/framing.hpp"
#include "http/h2_reply.hpp"
#include "http/message.hpp"
#include "http/parser.hpp"
#include "proxy/asio.hpp"
#include "proxy/http2_upstream.hpp"
#include "proxy/watchdog.hpp"

namespace levee::proxy {

class Downstream;

struct ExchangeBuffers {
  static constexpr std::size_t kSinkBytes = 16 * 1024;  ///< each body sink's
  static constexpr std::size_t kOutBytes = 4096;        ///< the head being written, reserved

  ExchangeBuffers(asio::io_context& ctx, std::size_t max_fields)
      : req_head(max_fields),
        req_body(kSinkBytes),
        resp_head(256),
        resp_body(kSinkBytes),
        watchdog(ctx),
        wait_timer(ctx.get_executor()) {
    out.reserve(kOutBytes);
  }

  http::Head req_head;
  http::RequestInfo req;
  http::BodySink req_body;
  http::Head resp_head;
  http::ResponseInfo resp;
  http::BodySink resp_body;
  std::string out;  ///< the head being written (either direction)
  /// The write to the client in progress (HTTP/1.1): its pieces, the
  /// chunk header among them, and what the socket took at once.
  http::Buffers out_bufs;
  char chunk_head[24];
  std::size_t out_taken = 0;
  std::optional<http::RequestParser> req_parser;    ///< HTTP/1.1 downstream
  std::optional<http::ResponseParser> resp_parser;  ///< HTTP/1.1 upstream
  Watchdog watchdog;
  Timer wait_timer;  ///< admission waits and retry backoff
  std::unique_ptr<H2Call> h2;  ///< the stream of an HTTP/2 attempt, made on first use
  // While a request body streams: whether the upstream spoke (an early
  // answer, or its close). Here, not in the exchange, because the wait's
  // handler may run after the exchange is gone; these outlive it.
  std::uint64_t up_watch_gen = 0;
  Downstream* up_watch_target = nullptr;
  bool upstream_spoke = false;
  char request_id[32];
  std::string_view request_id_out;  ///< the request's id, once known (answers carry it)
  std::string extra;                ///< extra header lines of a local answer
  // An HTTP/2 stream's answer: its header block, its trailers (submitted
  // when the last piece is copied) and a local answer's body. Here so that
  // their memory is reused from stream to stream.
  http::H2Fields h2_fields;
  http::H2Fields h2_trailers;
  std::string local_body;
  char client[64];  ///< "ip:port" of the client, for logs
  std::size_t client_len = 0;
  std::size_t ip_len = 0;  ///< the "ip" part of client (brackets stripped for IPv6)
  std::size_t ip_off = 0;

  std::string_view client_text() const noexcept { return {client, client_len}; }
  /// Writes "ip:port" ("[v6]:port") of the client into `client`, for logs
  /// and X-Forwarded-For, whichever protocol carries the request. Runs for
  /// every request: an IPv4 address is formatted with to_chars (glibc's
  /// inet_ntop goes through sprintf, a measurable share of a proxied
  /// request's CPU); IPv6 keeps inet_ntop for its zero-run compression.
  void set_client(const core::Address& a, std::uint16_t port) noexcept {
    char ip[INET6_ADDRSTRLEN] = {};
    const bool v4 = a[10] == 0xff && a[11] == 0xff &&
                    std::all_of(a.begin(), a.begin() + 10, [](std::uint8_t x) { return x == 0; });
    std::size_t iplen = 0;
    if (v4) {
      char* p = ip;
      for (int i = 12; i < 16; ++i) {
        if (i > 12) *p++ = '.';
        p = std::to_chars(p, ip + sizeof ip, a[static_cast<std::size_t>(i)]).ptr;
      }
      iplen = static_cast<std::size_t>(p - ip);
    } else {
      ::inet_ntop(AF_INET6, a.data(), ip, sizeof ip);
      iplen = std::strlen(ip);
    }
    std::size_t n = 0;
    if (!v4) client[n++] = '[';
    std::memcpy(client + n, ip, iplen);
    ip_off = v4 ? 0 : 1;
    ip_len = iplen;
    n += iplen;
    if (!v4) client[n++] = ']';
    client[n++] = ':';
    auto [p, ec] = std::to_chars(client + n, client + sizeof client, port);
    (void)ec;
    client_len = static_cast<std::size_t>(p - client);
  }
  std::string_view client_ip() const noexcept { return {client + ip_off, ip_len}; }

  static constexpr std::size_t kKeepBytes = 16 * 1024;

  void reset() {
    req_head.reset();
    req = http::RequestInfo{};
    req_body.clear();
    resp_head.reset();
    resp = http::ResponseInfo{};
    resp_body.clear();
    out.clear();
    // What a large answer grew goes back rather than into the pool.
    h2_fields.clear_and_trim(kKeepBytes);
    h2_trailers.clear_and_trim(kKeepBytes);
    if (local_body.capacity() > kKeepBytes) std::string().swap(local_body);
    local_body.clear();
    req_parser.reset();
    resp_parser.reset();
    watchdog.reset();
    ++up_watch_gen;
    up_watch_target = nullptr;
    upstream_spoke = false;
    client_len = ip_len = ip_off = 0;
    request_id_out = {};
  }
};

/// About what one scratch holds once used: itself, both body sinks and
/// the head buffer (the heads' own fields are small beside them).
inline constexpr std::size_t kExchangeBuffersBytes =
    sizeof(ExchangeBuffers) + 2 * ExchangeBuffers::kSinkBytes + ExchangeBuffers::kOutBytes;

}  // namespace levee::proxy
