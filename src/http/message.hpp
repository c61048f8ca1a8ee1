// A message head as the proxy sees it, whichever protocol carried it:
// fields copied into an arena owned by the exchange, and the few facts about
// them the request path needs, noted by index while parsing so that nothing
// is looked up twice. An HTTP/1.1 parser fills these; an HTTP/2 stream will
// fill the same structures from its header block.
#pragma once

// Boost 1.83's beast/http/impl/field.ipp uses std::uint32_t without
// including <cstdint>, which GCC 13's libstdc++ no longer brings in with
// other headers (Debian 13, Ubuntu 24.04): it comes first.
#include <cstdint>

#include <boost/beast/http/field.hpp>
#include <boost/beast/http/verb.hpp>

#include <array>
#include <cstdint>
#include <memory>
#include <optional>
#include <string_view>
#include <vector>

namespace levee::http {

namespace beast_http = boost::beast::http;
using Verb = beast_http::verb;
using FieldId = beast_http::field;

struct Field {
  std::string_view name;
  std::string_view value;
  FieldId id;
};

/// Storage of one message head: fields copied into a block arena. One 4 KiB
/// block covers typical heads; larger ones add blocks (released on reset).
/// Blocks never move, so the string_views handed out stay valid until reset.
class Head {
 public:
  explicit Head(std::size_t max_fields);
  void reset() noexcept {
    fields_.clear();
    if (blocks_.size() > 1) blocks_.resize(1);
    used_ = 0;
  }
  /// False when the field limit is reached.
  bool add(FieldId id, std::string_view name, std::string_view value);
  std::string_view store(std::string_view s);
  const std::vector<Field>& fields() const noexcept { return fields_; }
  std::string_view value(int index) const noexcept {
    return index >= 0 ? fields_[static_cast<std::size_t>(index)].value : std::string_view{};
  }
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

/// What the request path needs to know about a request.
struct RequestInfo {
  Verb method = Verb::unknown;
  std::string_view method_str;
  std::string_view target;     ///< origin-form path and query (":path"), or "*"
  std::string_view authority;  ///< from an absolute-form target; it overrides Host
  int version = 11;            ///< 10, 11; 20 for HTTP/2
  int host = -1;            ///< field indexes, -1 when absent
  int request_id = -1;
  int xff = -1;
  int via = -1;
  bool expect_continue = false;
  bool bad_expect = false;
  bool unsupported_coding = false;  ///< a transfer coding other than chunked (501)
  bool too_many_fields = false;
  bool connection_close = false;        ///< Connection: close seen
  std::uint32_t connection_tokens = 0;  ///< extra tokens in Connection (fields to strip)
};

/// What the request path needs to know about a response.
struct ResponseInfo {
  int status = 0;
  bool content_length = false;  ///< a Content-Length field was seen
  int version = 11;
  std::string_view reason;
  int load_report = -1;      ///< endpoint-load-metrics, by field index
  int load_report_bin = -1;  ///< endpoint-load-metrics-bin
  /// A load report sent as a trailer (gRPC servers do), copied out because
  /// trailers are not kept; one longer than the buffer is dropped and
  /// counted as truncated.
  struct Trailer {
    std::array<char, 768> data;
    std::uint16_t size = 0;
    bool bin = false;
    bool truncated = false;
    std::string_view value() const noexcept { return {data.data(), size}; }
  } trailer_load;
  bool no_retry = false;  ///< x-levee-no-retry, x-envoy-overloaded, negative grpc-retry-pushback-ms
  bool too_many_fields = false;
};

/// The authority a request is for: an absolute-form target's, else Host's.
inline std::string_view authority(const Head& h, const RequestInfo& r) noexcept {
  return !r.authority.empty() ? r.authority : h.value(r.host);
}

/// Whether a Host value (or an absolute-form authority) is well formed:
/// a reg-name, an IPv4 address or a bracketed IPv6 literal, with an
/// optional port (RFC 9110 4.2.3 / RFC 3986 3.2.2). Empty is allowed.
bool valid_authority(std::string_view a) noexcept;

/// Whether a method may be repeated without changing its effect (RFC 9110 9.2.2).
constexpr bool idempotent(Verb m) noexcept {
  switch (m) {
    case Verb::get:
    case Verb::head:
    case Verb::options:
    case Verb::trace:
    case Verb::put:
    case Verb::delete_:
      return true;
    default:
      return false;
  }
}

}  // namespace levee::http
