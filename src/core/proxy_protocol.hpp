// The PROXY protocol header (HAProxy's, versions 1 and 2) that an L4 load
// balancer puts before a connection's first byte to say whom it carries:
// the client's address and port as the balancer saw them.
//
// The parser is incremental and never asks for a byte that might belong to
// the stream after the header: given the bytes read so far, it says either
// "done, the header is the first n bytes", "not yet: every byte you have is
// header, read more (at most `more`)", or "not a PROXY header". The shell
// peeks at the socket, lets the parser judge, and consumes only header
// bytes, so the HTTP or TLS bytes behind it stay in the socket untouched.
//
//   v1  "PROXY TCP4|TCP6|UNKNOWN <src> <dst> <sport> <dport>\r\n", at most 107 bytes
//   v2  a 12-byte signature, version/command, family/transport, a 16-bit
//       length, the addresses and TLVs (TLVs are skipped; the header is
//       bounded by max_v2_bytes)
//
// A LOCAL (v2) or UNKNOWN (v1) header carries no client: the balancer's own
// connection (a health check); the peer stays the socket's.
#pragma once

#include <cstddef>
#include <cstdint>
#include <string_view>

#include "core/net.hpp"

namespace levee::core {

struct ProxyHeader {
  enum class Status : std::uint8_t { Done, More, Invalid };
  Status status = Status::More;
  std::size_t length = 0;     ///< Done: the header's length in bytes
  std::size_t more = 0;       ///< More: bytes that may be read without passing the header
  bool has_source = false;    ///< Done: a client address follows (not LOCAL / UNKNOWN)
  Address source{};
  std::uint16_t source_port = 0;
  std::uint8_t version = 0;   ///< 1 or 2, once known
  std::string_view error;     ///< Invalid: why
};

/// The largest v1 header (the spec's bound, CRLF included).
inline constexpr std::size_t kProxyV1Max = 107;
/// The v2 header's fixed part.
inline constexpr std::size_t kProxyV2Fixed = 16;

/// Judges the first bytes of a connection (all of them read so far).
ProxyHeader parse_proxy_header(std::string_view bytes, std::size_t max_v2_bytes = 536) noexcept;

}  // namespace levee::core
