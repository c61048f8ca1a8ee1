#include "http/h2_request.hpp"

#include <boost/beast/http/field.hpp>
#include <boost/beast/http/verb.hpp>

#include <charconv>

#include "core/text.hpp"
#include "http/h2_reply.hpp"

namespace levee::http {

bool H2RequestDecoder::field(std::string_view name, std::string_view value) {
  bytes_ += name.size() + value.size() + 32;
  if (bytes_ > 4 * max_bytes_) return false;
  if (bytes_ > max_bytes_) {
    too_large_ = true;
    return true;
  }
  if (!name.empty() && name[0] == ':') {
    if (name == ":method") {
      info_.method_str = head_.store(value);
      info_.method = boost::beast::http::string_to_verb(value);
    } else if (name == ":path") {
      info_.target = head_.store(value);
    } else if (name == ":authority") {
      if (!valid_authority(value)) bad_ = true;
      info_.authority = head_.store(value);
    }
    return true;  // :scheme, :protocol: not needed
  }
  // Expect is answered by levee (a 100 HEADERS once admitted), as over
  // HTTP/1.1; te is hop-by-hop.
  if (name == "expect") {
    if (core::iequals(core::trim(value), "100-continue")) info_.expect_continue = true;
    return true;
  }
  if (name == "te") return true;
  if (name == "cookie") {
    // Split into crumbs for HPACK; one field again for HTTP/1.1 (RFC 9113 8.2.3).
    if (!cookie_.empty()) cookie_.append("; ");
    cookie_.append(value);
    return true;
  }
  const auto id = boost::beast::http::string_to_field(name);
  const int at = static_cast<int>(head_.fields().size());
  if (!head_.add(id, name, value)) {
    too_many_ = true;
    return true;
  }
  switch (id) {
    case FieldId::host:
      if (info_.host >= 0 || !valid_authority(core::trim(value))) bad_ = true;
      info_.host = at;
      return true;
    case FieldId::via: info_.via = at; return true;
    case FieldId::content_type: grpc_ = is_grpc(value); return true;
    case FieldId::content_length: {
      std::uint64_t n = 0;
      auto [p, ec] = std::from_chars(value.data(), value.data() + value.size(), n);
      if (ec != std::errc{} || p != value.data() + value.size() || (length_ && *length_ != n)) bad_ = true;
      else length_ = n;
      return true;
    }
    default: break;
  }
  if (core::iequals(name, "x-forwarded-for")) info_.xff = at;
  else if (core::iequals(name, request_id_)) info_.request_id = at;
  return true;
}

void H2RequestDecoder::done(bool end_stream) {
  if (!cookie_.empty() && !too_large_ && !head_.add(FieldId::cookie, "cookie", cookie_)) too_many_ = true;
  cookie_.clear();
  info_.version = 20;
  has_body_ = !end_stream;
  if (!has_body_) length_.reset();
}

}  // namespace levee::http
