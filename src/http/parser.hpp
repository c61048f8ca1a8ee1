// HTTP/1.1 parsers for the hot path, in both directions.
//
// They derive from Beast's basic_parser, which does the RFC 9112 grammar;
// the callbacks here copy each field into the exchange's Head arena
// (reserved once, so parsing a request allocates nothing), note the fields
// the request path needs by index, and hand body bytes (chunked framing
// already removed) to a fixed BodySink that the caller flushes.
#pragma once

// Boost 1.83's beast/http/impl/field.ipp uses std::uint32_t without
// including <cstdint>, which GCC 13's libstdc++ no longer brings in with
// other headers (Debian 13, Ubuntu 24.04): it comes first.
#include <cstdint>

#include <boost/beast/http/basic_parser.hpp>
#include <boost/beast/http/error.hpp>

#include <algorithm>
#include <cstring>
#include <memory>
#include <string>
#include <string_view>

#include "http/message.hpp"

namespace levee::http {

using boost::beast::error_code;

/// Where body bytes go while parsing: a fixed buffer the caller flushes.
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

/// Bounds of what a body's framing may carry.
inline constexpr std::size_t kMaxChunkExtension = 4096;
inline constexpr std::size_t kMaxTrailerFields = 64;
inline constexpr std::size_t kMaxTrailerBytes = 16 * 1024;

/// What both parsers share: fields go into a Head (trailers are dropped),
/// body data streams into a fixed sink, and each stored field is handed to
/// Derived::on_stored(id, name, value, index, ec) to pick out what it notes.
template <bool isRequest, class Derived>
class StreamingParser : public beast_http::basic_parser<isRequest> {
  using Base = beast_http::basic_parser<isRequest>;

 public:
  /// The most bytes the whole head (start line and fields) may take.
  /// Beast (1.81) checks its limit only against the bytes not yet consumed:
  /// a head that arrives in pieces has its complete field lines consumed
  /// one read at a time and never reaches the limit, so a client that
  /// trickles its fields could send far more than max_header_bytes. put()
  /// below gives Beast what is left of the budget instead.
  void header_limit(std::uint32_t v) noexcept {
    limit_ = v;
    Base::header_limit(v);
  }
  template <class ConstBufferSequence>
  std::size_t put(const ConstBufferSequence& buffers, error_code& ec) {
    const bool in_head = !this->is_header_done();
    budget_ = head_used_ < limit_ ? limit_ - head_used_ : 0;
    if (in_head) Base::header_limit(static_cast<std::uint32_t>(budget_));
    const std::size_t n = Base::put(buffers, ec);
    if (in_head) {
      if (!this->is_header_done()) head_used_ += n;
      else Base::header_limit(static_cast<std::uint32_t>(limit_));  // trailers: a budget of their own
    }
    return n;
  }

 protected:
  StreamingParser(Head& head, BodySink& sink, bool& too_many_fields)
      : head_(head), sink_(sink), too_many_fields_(too_many_fields) {
    this->eager(true);
    this->body_limit(boost::none);  // streamed, never buffered whole
  }

  void on_request_impl(Verb, boost::beast::string_view, boost::beast::string_view, int, error_code&) override {}
  void on_response_impl(int, boost::beast::string_view, int, error_code&) override {}

  Head& head_;

  /// Called by the derived start-line callbacks with the start line's
  /// length: when it arrives whole, Beast would give the fields a limit of
  /// their own after it; they get what the start line left instead.
  void count_start_line(std::size_t n) noexcept {
    Base::header_limit(static_cast<std::uint32_t>(budget_ > n ? budget_ - n : 0));
  }

 private:
  void on_field_impl(FieldId id, boost::beast::string_view name_sv, boost::beast::string_view value_sv,
                     error_code& ec) override {
    if (header_done_) {
      // Trailers are not forwarded, but they are bounded like a head.
      trailer_bytes_ += name_sv.size() + value_sv.size() + 4;
      if (++trailer_fields_ > kMaxTrailerFields || trailer_bytes_ > kMaxTrailerBytes) ec = beast_http::error::header_limit;
      else static_cast<Derived*>(this)->on_trailer({name_sv.data(), name_sv.size()}, {value_sv.data(), value_sv.size()});
      return;
    }
    std::string_view name{name_sv.data(), name_sv.size()};
    std::string_view value{value_sv.data(), value_sv.size()};
    if (!head_.add(id, name, value)) {
      too_many_fields_ = true;
      ec = beast_http::error::header_limit;
      return;
    }
    static_cast<Derived*>(this)->on_stored(id, name, value, static_cast<int>(head_.fields().size() - 1), ec);
  }
  void on_header_impl(error_code&) override { header_done_ = true; }
  void on_body_init_impl(const boost::optional<std::uint64_t>&, error_code&) override {}
  std::size_t on_body_impl(boost::beast::string_view body, error_code& ec) override {
    std::size_t n = sink_.put({body.data(), body.size()});
    if (n < body.size()) ec = beast_http::error::need_buffer;  // the sink is full: flush, then resume
    return n;
  }
  void on_chunk_header_impl(std::uint64_t, boost::beast::string_view ext, error_code& ec) override {
    // Extensions carry nothing levee uses; a long one is only a way to make
    // the peer buffer and rescan.
    if (ext.size() > kMaxChunkExtension) ec = beast_http::error::bad_chunk_extension;
  }
  std::size_t on_chunk_body_impl(std::uint64_t, boost::beast::string_view body, error_code& ec) override {
    return on_body_impl(body, ec);
  }
  void on_finish_impl(error_code&) override {}

  BodySink& sink_;
  bool& too_many_fields_;
  bool header_done_ = false;
  std::size_t limit_ = 8192;    ///< Beast's default
  std::size_t head_used_ = 0;   ///< head bytes consumed by earlier put() calls
  std::size_t budget_ = 8192;   ///< what the head may still take, as of this put()
  std::size_t trailer_fields_ = 0;
  std::size_t trailer_bytes_ = 0;
};

class RequestParser : public StreamingParser<true, RequestParser> {
 public:
  /// request_id: the configured request-id header name (noted for forwarding).
  RequestParser(Head& head, RequestInfo& info, BodySink& sink, std::string_view request_id)
      : StreamingParser(head, sink, info.too_many_fields), info_(info), request_id_(request_id) {}

 private:
  friend class StreamingParser<true, RequestParser>;
  void on_request_impl(Verb method, boost::beast::string_view method_str, boost::beast::string_view target,
                       int version, error_code& ec) override;
  void on_stored(FieldId id, std::string_view name, std::string_view value, int at, error_code& ec);
  void on_trailer(std::string_view, std::string_view) noexcept {}

  RequestInfo& info_;
  std::string_view request_id_;
  bool seen_length_ = false;
};

/// The response fields levee reads (configurable names).
struct ResponseSignals {
  std::string load_report = "endpoint-load-metrics";
  std::string load_report_bin = "endpoint-load-metrics-bin";  ///< load_report + "-bin"
  std::string no_retry = "x-levee-no-retry";
};

/// What a response field tells levee (a load report's place, "don't
/// retry"), whichever protocol carried it; `at`: its index in the head.
void note_response_field(ResponseInfo& info, const ResponseSignals& names, std::string_view name,
                         std::string_view value, int at) noexcept;
/// A trailer field: a load report in it is copied out (trailers are not kept).
void note_response_trailer(ResponseInfo& info, const ResponseSignals& names, std::string_view name,
                           std::string_view value) noexcept;

class ResponseParser : public StreamingParser<false, ResponseParser> {
 public:
  ResponseParser(Head& head, ResponseInfo& info, BodySink& sink, const ResponseSignals& names)
      : StreamingParser(head, sink, info.too_many_fields), info_(info), names_(names) {}

 private:
  friend class StreamingParser<false, ResponseParser>;
  void on_response_impl(int code, boost::beast::string_view reason, int version, error_code& ec) override;
  void on_stored(FieldId id, std::string_view name, std::string_view value, int at, error_code& ec);
  void on_trailer(std::string_view name, std::string_view value) noexcept;

  ResponseInfo& info_;
  const ResponseSignals& names_;
};

}  // namespace levee::http
