// HTTP/1.1 framing helpers: which fields are hop-by-hop, chunk headers, and
// a small buffer sequence that carries a head and a framed body piece in
// one write without allocating.
#pragma once

#include <boost/asio/buffer.hpp>

#include <array>
#include <cstddef>
#include <string>
#include <string_view>
#include <vector>

#include "http/message.hpp"

namespace levee::http {

/// Hop-by-hop fields (RFC 9110 7.6.1) plus the framing fields levee rewrites.
bool is_hop_by_hop(const Field& f) noexcept;

/// Whether `name` is listed as a token in any Connection field of `fields`.
bool named_in_connection(const std::vector<Field>& fields, std::string_view name) noexcept;

/// Writes the chunk-size line for n into buf (at least 20 bytes); returns its length.
std::size_t chunk_header(char* buf, std::size_t n) noexcept;

/// Appends a decimal number.
void append_uint(std::string& out, std::uint64_t v);
/// Appends "name: value\r\n".
void append_field(std::string& out, std::string_view name, std::string_view value);

/// A buffer sequence of at most 6 pieces on the stack: a head, a chunk
/// header, data, CRLF and the last-chunk marker fit without allocating.
class Buffers {
 public:
  using value_type = boost::asio::const_buffer;
  using const_iterator = const boost::asio::const_buffer*;
  void push(boost::asio::const_buffer b) noexcept {
    if (b.size() > 0 && n_ < bufs_.size()) bufs_[n_++] = b;
  }
  const_iterator begin() const noexcept { return bufs_.data(); }
  const_iterator end() const noexcept { return bufs_.data() + n_; }
  bool empty() const noexcept { return n_ == 0; }
  void clear() noexcept { n_ = 0; }

  /// One piece of body data, framed as a chunk when `chunked` (the chunk
  /// header is written into `chunk_head`, which must outlive the write).
  void push_body(boost::asio::const_buffer body, bool chunked, char (&chunk_head)[24]) noexcept {
    if (body.size() == 0) return;
    if (!chunked) {
      push(body);
      return;
    }
    push(boost::asio::buffer(chunk_head, chunk_header(chunk_head, body.size())));
    push(body);
    push(boost::asio::buffer("\r\n", 2));
  }
  /// The last-chunk marker that ends a chunked body.
  void push_last_chunk() noexcept { push(boost::asio::buffer("0\r\n\r\n", 5)); }

 private:
  std::array<boost::asio::const_buffer, 6> bufs_{};
  std::size_t n_ = 0;
};

}  // namespace levee::http
