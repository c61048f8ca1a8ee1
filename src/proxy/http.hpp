// HTTP/1.1 message heads and parsers for the proxy's hot path.
//
// The parsers derive from Beast's basic_parser, which does the RFC 7230
// grammar (and rejects smuggling shapes such as conflicting lengths); the
// callbacks here copy each field into a per-connection arena reserved once
// to the header limit, so parsing a request never allocates. Interesting
// fields are noted by index as they pass, so nothing is looked up twice.
// Bodies are handed to a BodySink as they are parsed (chunked encoding
// already removed) and streamed on in fixed-size pieces.
#pragma once

#include <boost/asio/buffer.hpp>
#include <boost/beast/http/basic_parser.hpp>
#include <boost/beast/http/field.hpp>
#include <boost/beast/http/verb.hpp>

#include <algorithm>
#include <array>
#include <cstdint>
#include <cstring>
#include <optional>
#include <string>
#include <memory>
#include <string_view>
#include <vector>

namespace levee::proxy {

namespace http = boost::beast::http;
using boost::beast::error_code;

struct Field {
  std::string_view name;
  std::string_view value;
  http::field id;
};

/// Where body bytes go while parsing: a fixed buffer the session flushes.
/// The buffer is allocated on first use and kept: a request without a body
/// (most of them, and every queued GET) never pays for it.
class BodySink {
 public:
  explicit BodySink(std::size_t capacity) : cap_(capacity) {}
  /// Copies what fits; returns the number of bytes taken.
  std::size_t put(std::string_view s) {
    if (!buf_) buf_ = std::make_unique<char[]>(cap_);
    std::size_t n = std::min(s.size(), cap_ - used_);
    std::memcpy(buf_.get() + used_, s.data(), n);
    used_ += n;
    return n;
  }
  bool full() const noexcept { return used_ == cap_; }
  std::string_view data() const noexcept { return {buf_.get(), used_}; }
  std::size_t size() const noexcept { return used_; }
  void clear() noexcept { used_ = 0; }

 private:
  std::unique_ptr<char[]> buf_;
  std::size_t cap_;
  std::size_t used_ = 0;
};

/// Storage of one message head: fields copied into a block arena. One 4 KiB
/// block covers typical heads; larger ones add blocks (released on reset).
/// Blocks never move, so the string_views handed out stay valid until reset.
class Head {
 public:
  explicit Head(std::size_t max_fields) : max_fields_(max_fields) {
    fields_.reserve(std::min<std::size_t>(max_fields, 32));
    blocks_.push_back({std::make_unique<char[]>(kBlock), kBlock});
  }
  void reset() noexcept {
    fields_.clear();
    if (blocks_.size() > 1) blocks_.resize(1);
    used_ = 0;
  }
  /// False when the field limit is reached.
  bool add(http::field id, std::string_view name, std::string_view value);
  std::string_view store(std::string_view s);
  const std::vector<Field>& fields() const noexcept { return fields_; }
  std::size_t max_fields() const noexcept { return max_fields_; }
  void set_max_fields(std::size_t n) noexcept { max_fields_ = n; }

 private:
  static constexpr std::size_t kBlock = 4096;
  struct Block {
    std::unique_ptr<char[]> data;
    std::size_t size;
  };
  std::vector<Field> fields_;
  std::vector<Block> blocks_;
  std::size_t used_ = 0;  // in the last block
  std::size_t max_fields_;
};

/// What the session needs to know about a request, filled while parsing.
struct RequestInfo {
  http::verb method = http::verb::unknown;
  std::string_view method_str;
  std::string_view target;
  int version = 11;
  int host = -1;  ///< field indexes, -1 when absent
  int criticality = -1;
  int tenant = -1;
  int api_key = -1;
  int timeout_ms = -1;
  int grpc_timeout = -1;
  int attempt = -1;
  int envoy_attempt = -1;
  int grpc_attempts = -1;
  int request_id = -1;
  int xff = -1;
  int via = -1;
  bool expect_continue = false;
  bool bad_expect = false;
  bool too_many_fields = false;
  bool connection_close = false;  ///< Connection: close seen
  std::uint32_t connection_tokens = 0;  ///< count of extra tokens in Connection
};

/// Field names the request parser watches for (configurable ones).
struct WatchedNames {
  std::string criticality;
  std::string tenant;
  std::string api_key;
  std::string timeout_ms;
  std::string attempt;
  std::string request_id;
};

/// What both parsers share: fields go into a Head (trailers are dropped),
/// body data streams into a fixed sink, and each stored field is handed to
/// Derived::on_stored(id, name, value, index, ec) to pick out what it watches.
template <bool isRequest, class Derived>
class StreamingParser : public http::basic_parser<isRequest> {
 protected:
  StreamingParser(Head& head, BodySink& sink, bool& too_many_fields)
      : head_(head), sink_(sink), too_many_fields_(too_many_fields) {
    this->eager(true);
    this->body_limit(boost::none);  // streamed, never buffered whole
  }

  void on_request_impl(http::verb, boost::beast::string_view, boost::beast::string_view, int,
                       error_code&) override {}
  void on_response_impl(int, boost::beast::string_view, int, error_code&) override {}

  Head& head_;

 private:
  void on_field_impl(http::field id, boost::beast::string_view name_sv, boost::beast::string_view value_sv,
                     error_code& ec) override {
    if (header_done_) return;  // trailers are not forwarded
    std::string_view name{name_sv.data(), name_sv.size()};
    std::string_view value{value_sv.data(), value_sv.size()};
    if (!head_.add(id, name, value)) {
      too_many_fields_ = true;
      ec = http::error::header_limit;
      return;
    }
    static_cast<Derived*>(this)->on_stored(id, name, value, static_cast<int>(head_.fields().size() - 1), ec);
  }
  void on_header_impl(error_code&) override { header_done_ = true; }
  void on_body_init_impl(const boost::optional<std::uint64_t>&, error_code&) override {}
  std::size_t on_body_impl(boost::beast::string_view body, error_code& ec) override {
    std::size_t n = sink_.put({body.data(), body.size()});
    if (n < body.size()) ec = http::error::need_buffer;  // the sink is full: flush, then resume
    return n;
  }
  void on_chunk_header_impl(std::uint64_t, boost::beast::string_view, error_code&) override {}
  std::size_t on_chunk_body_impl(std::uint64_t, boost::beast::string_view body, error_code& ec) override {
    return on_body_impl(body, ec);
  }
  void on_finish_impl(error_code&) override {}

  BodySink& sink_;
  bool& too_many_fields_;
  bool header_done_ = false;
};

class RequestParser : public StreamingParser<true, RequestParser> {
 public:
  RequestParser(Head& head, RequestInfo& info, BodySink& sink, const WatchedNames& names)
      : StreamingParser(head, sink, info.too_many_fields), info_(info), names_(names) {}

 private:
  friend class StreamingParser<true, RequestParser>;
  void on_request_impl(http::verb method, boost::beast::string_view method_str,
                       boost::beast::string_view target, int version, error_code& ec) override;
  void on_stored(http::field id, std::string_view name, std::string_view value, int at, error_code& ec);

  RequestInfo& info_;
  const WatchedNames& names_;
};

/// What the session needs to know about a response.
struct ResponseInfo {
  int status = 0;
  int version = 11;
  std::string_view reason;
  int load_report = -1;
  bool no_retry = false;   ///< x-levee-no-retry, x-envoy-overloaded, negative pushback
  bool too_many_fields = false;
};

struct ResponseWatched {
  std::string load_report;
  std::string no_retry;
};

class ResponseParser : public StreamingParser<false, ResponseParser> {
 public:
  ResponseParser(Head& head, ResponseInfo& info, BodySink& sink, const ResponseWatched& names)
      : StreamingParser(head, sink, info.too_many_fields), info_(info), names_(names) {}

 private:
  friend class StreamingParser<false, ResponseParser>;
  void on_response_impl(int code, boost::beast::string_view reason, int version, error_code& ec) override;
  void on_stored(http::field id, std::string_view name, std::string_view value, int at, error_code& ec);

  ResponseInfo& info_;
  const ResponseWatched& names_;
};

/// Hop-by-hop fields (RFC 9110 7.6.1) plus the framing fields levee rewrites.
bool is_hop_by_hop(const Field& f) noexcept;

/// Whether `name` is listed as a token in any Connection field of `fields`.
bool named_in_connection(const std::vector<Field>& fields, std::string_view name) noexcept;

/// Appends chunked framing for one piece of body data.
void append_chunk_header(std::string& out, std::size_t n);

/// Writes the chunk-size line for n into buf (at least 20 bytes); returns its length.
std::size_t chunk_header(char* buf, std::size_t n) noexcept;

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

}  // namespace levee::proxy
