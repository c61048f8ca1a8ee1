// What HTTP/2 needs that is pure: telling the client preface of a
// cleartext HTTP/2 connection (h2c, prior knowledge) from an HTTP/1.1
// request, the header block of a local reply, and the gRPC spelling of a
// local reply (Trailers-Only: :status 200 and grpc-status in one HEADERS
// frame), so that a gRPC client's retry throttling sees a status it knows.
#pragma once

#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

#include "core/decision.hpp"
#include "http/local_reply.hpp"

namespace levee::http {

/// "PRI * HTTP/2.0\r\n\r\nSM\r\n\r\n" (RFC 9113 3.4).
inline constexpr std::string_view kH2Preface = "PRI * HTTP/2.0\r\n\r\nSM\r\n\r\n";

enum class Preface : std::uint8_t { No, NeedMore, Yes };
/// What the first bytes of a connection are: the whole preface, a prefix
/// of it (read more), or anything else (HTTP/1.1).
Preface detect_preface(std::string_view first) noexcept;

/// gRPC status codes levee answers with (grpc/doc/statuscodes.md).
enum class GrpcStatus : std::uint8_t {
  Ok = 0,
  Cancelled = 1,
  Unknown = 2,
  InvalidArgument = 3,
  DeadlineExceeded = 4,
  NotFound = 5,
  PermissionDenied = 7,
  ResourceExhausted = 8,
  Internal = 13,
  Unimplemented = 12,
  Unavailable = 14,
  Unauthenticated = 16,
};

/// The gRPC status of a local reply: its reason's when it has one (quota
/// 8, overload and upstream failures 14, a deadline 4, a bad request 3,
/// no route or an unsupported feature 12), else its HTTP status's (the
/// gRPC HTTP-to-status mapping).
GrpcStatus grpc_status(const LocalReply& r) noexcept;
GrpcStatus grpc_status_of_http(int status) noexcept;

/// Whether a request's content-type is gRPC's ("application/grpc",
/// "application/grpc+proto", ...).
bool is_grpc(std::string_view content_type) noexcept;
/// Whether a gRPC body begins with a whole length-prefixed message (its
/// 5-byte prefix and the bytes it announces).
bool grpc_message_whole(std::string_view body) noexcept;

struct H2Field {
  std::string name;   ///< lower case
  std::string value;
};

/// The header block of a local reply over HTTP/2 (":status" first, no
/// connection-specific fields) and its body. `grpc`: Trailers-Only, no body.
/// request_id_name/request_id: returned to the client when not empty.
void h2_local_reply(const LocalReply& r, bool grpc, std::string_view request_id_name, std::string_view request_id,
                    std::vector<H2Field>& fields, std::string& body);

/// grpc-message's percent-encoding (bytes outside printable ASCII, and '%').
std::string grpc_percent_encode(std::string_view s);

}  // namespace levee::http
