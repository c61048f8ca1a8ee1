// Head rewriting for both directions of an HTTP/1.1 hop.
//
// Upstream, the request keeps its end-to-end fields and loses what is
// hop-by-hop (RFC 9110 7.6.1, and whatever Connection names), what levee
// rewrites (the deadline and attempt headers carry levee's own values: the
// remaining budget, this attempt's number) and its framing, which levee
// sets for the body it actually sends. Via and X-Forwarded-For are appended
// to; X-Forwarded-Proto and a request id are set.
//
// Downstream, the response loses its hop-by-hop fields and is re-framed for
// this client: Content-Length when known, chunked for an HTTP/1.1 client
// otherwise, the end of the connection for HTTP/1.0.
#pragma once

#include <array>
#include <cstdint>
#include <optional>
#include <string>
#include <string_view>

#include "core/time.hpp"
#include "http/message.hpp"

namespace levee::http {

/// Names of the request headers levee rewrites (the configurable ones).
struct RewriteNames {
  std::string timeout_ms = "x-request-timeout-ms";
  std::string attempt = "x-attempt-count";
  std::string request_id = "x-request-id";
  std::string no_retry = "x-levee-no-retry";
};

enum class BodyFraming : std::uint8_t { None, Length, Chunked };

struct UpstreamHead {
  const Head& head;
  const RequestInfo& info;
  const RewriteNames& names;
  std::string_view client_ip{};        ///< appended to X-Forwarded-For
  std::string_view proto = "http";     ///< X-Forwarded-Proto
  std::string_view default_host{};     ///< Host when the request had none (HTTP/1.0)
  std::string_view generated_id{};     ///< request id to add (empty: it came with one)
  std::optional<core::Duration> remaining{};  ///< the deadline left, to forward
  bool grpc_timeout = false;           ///< forward it as grpc-timeout too
  std::uint32_t attempt = 1;
  /// endpoint-load-metrics-format to ask for ("text", "json"), replacing
  /// the client's; empty: the client's passes.
  std::string_view load_format{};
  BodyFraming framing = BodyFraming::None;
  std::uint64_t length = 0;            ///< with BodyFraming::Length
  /// Whether the client's X-Forwarded-For chain is kept (appended to); an
  /// untrusted client's is dropped, levee's own entry stays.
  bool forwarded_trusted = true;
  /// Request headers levee did not believe: the client's field is dropped
  /// and, with a value, levee's own decision is sent under that name.
  struct Replace {
    std::string_view name{};
    std::string_view value{};
  };
  std::array<Replace, 2> replace{};
};

/// Appends the request head for the next hop.
void write_upstream_head(std::string& out, const UpstreamHead& u);

struct DownstreamHead {
  const Head& head;
  const ResponseInfo& info;
  const RewriteNames& names;
  bool no_body = false;       ///< HEAD, 1xx, 204, 304: no body follows whatever the fields say
  BodyFraming framing = BodyFraming::None;
  std::uint64_t length = 0;
  bool close = false;         ///< Connection: close
  bool keep_alive_10 = false; ///< HTTP/1.0 client kept alive
  bool no_retry = false;      ///< add "don't retry": levee gave up below because of overload
  std::string_view request_id{};  ///< sent as names.request_id (in place of the upstream's), when not empty
  bool strip_inside = false;  ///< an untrusted client: leave out is_inside_field()s
};

/// A response field that describes the inside, not for an untrusted client:
/// the backend's ORCA load report (either form) and its Server details.
/// `index` is the field's place in the head (ResponseInfo names the load
/// report's by place).
bool is_inside_field(const ResponseInfo& info, const Field& f, std::size_t index) noexcept;

/// Appends the response head for an HTTP/1.1 client.
void write_downstream_head(std::string& out, const DownstreamHead& d);

}  // namespace levee::http
