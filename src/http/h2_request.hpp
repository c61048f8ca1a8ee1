// A request's header block as an HTTP/2 client sends it, decoded by
// nghttp2 field by field, into the Head and RequestInfo every exchange
// reads (proxy/http2_stream.cpp). Protocol-level validation (pseudo-header
// order, forbidden connection fields, bytes that may not appear in a name
// or a value) is nghttp2's; this keeps the size limits, splits the
// pseudo-headers out, joins cookie crumbs and notes what classification and
// the upstream head need. Apart from the connection, so that a fuzz target
// can drive it behind nghttp2's real frame parser (tests/fuzz/fuzz_h2_request.cpp).
#pragma once

#include <cstddef>
#include <cstdint>
#include <optional>
#include <string>
#include <string_view>

#include "http/message.hpp"

namespace levee::http {

class H2RequestDecoder {
 public:
  /// max_bytes: the header list's limit as SETTINGS_MAX_HEADER_LIST_SIZE
  /// counts it (name + value + 32 per field); request_id: its header name.
  H2RequestDecoder(Head& head, RequestInfo& info, std::size_t max_bytes, std::string_view request_id)
      : head_(head), info_(info), max_bytes_(max_bytes), request_id_(request_id) {}

  /// One field. False: reset the stream (four times past the size limit:
  /// an HPACK bomb); past the limit itself nothing more is kept and the
  /// request gets 431.
  bool field(std::string_view name, std::string_view value);
  /// The header block ended; end_stream: no body follows.
  void done(bool end_stream);

  bool too_large() const noexcept { return too_large_; }
  bool too_many() const noexcept { return too_many_; }
  /// Malformed for levee (a bad authority, two Host fields, a bad
  /// content-length); answered 400.
  bool bad() const noexcept { return bad_; }
  bool grpc() const noexcept { return grpc_; }
  bool has_body() const noexcept { return has_body_; }
  std::optional<std::uint64_t> length() const noexcept { return length_; }

 private:
  Head& head_;
  RequestInfo& info_;
  std::size_t max_bytes_;
  std::string request_id_;  ///< a copy: a reload may replace the names while a block is decoded
  std::size_t bytes_ = 0;
  std::string cookie_;  ///< the cookie crumbs, joined
  std::optional<std::uint64_t> length_;
  bool too_large_ = false;
  bool too_many_ = false;
  bool bad_ = false;
  bool grpc_ = false;
  bool has_body_ = false;
};

}  // namespace levee::http
