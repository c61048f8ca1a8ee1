#include "http/parser.hpp"

#include <boost/beast/http/error.hpp>

#include <cstring>

#include "core/headers.hpp"
#include "core/text.hpp"

namespace levee::http {

using core::iequals;

namespace {

/// Which transfer codings a message declares: RFC 9112 6.1/6.3.
enum class Codings : std::uint8_t { Chunked, Other, NotFinal };
Codings transfer_codings(std::string_view value) noexcept {
  bool last_chunked = false, other = false, any = false;
  core::for_each_token(value, [&](std::string_view t) {
    any = true;
    if (last_chunked) other = true;  // chunked is not the final coding
    last_chunked = iequals(core::trim(t.substr(0, t.find(';'))), "chunked");
    if (!last_chunked) other = true;
  });
  if (!any || !last_chunked) return Codings::NotFinal;
  return other ? Codings::Other : Codings::Chunked;
}

bool digits(std::string_view v) noexcept {
  v = core::trim(v);
  if (v.empty()) return false;
  for (char c : v)
    if (c < '0' || c > '9') return false;
  return true;
}

}  // namespace

void RequestParser::on_request_impl(Verb method, boost::beast::string_view method_str,
                                    boost::beast::string_view target, int version, error_code& ec) {
  count_start_line(method_str.size() + 1 + target.size() + 1 + 8 + 2);  // METHOD SP target SP HTTP/x.y CRLF
  info_.method = method;
  info_.method_str = head_.store({method_str.data(), method_str.size()});
  info_.version = version;
  std::string_view t{target.data(), target.size()};
  // origin-form, asterisk-form (OPTIONS *), or absolute-form: its
  // authority then overrides Host and origin-form goes upstream.
  if (!t.empty() && t.front() == '/') {
    info_.target = head_.store(t);
  } else if (t == "*" && method == Verb::options) {
    info_.target = head_.store(t);
  } else if (method == Verb::connect) {
    info_.target = head_.store(t);  // authority-form: answered 501
  } else {
    std::string_view rest;
    if (t.size() > 7 && iequals(t.substr(0, 7), "http://")) rest = t.substr(7);
    else if (t.size() > 8 && iequals(t.substr(0, 8), "https://")) rest = t.substr(8);
    else {
      ec = beast_http::error::bad_target;
      return;
    }
    const auto slash = rest.find_first_of("/?");
    const std::string_view auth = rest.substr(0, slash);
    if (auth.empty() || auth.find('@') != std::string_view::npos || !valid_authority(auth)) {
      ec = beast_http::error::bad_target;
      return;
    }
    info_.authority = head_.store(auth);
    if (slash == std::string_view::npos) info_.target = "/";
    else if (rest[slash] == '?') info_.target = head_.store(std::string("/").append(rest.substr(slash)));
    else info_.target = head_.store(rest.substr(slash));
  }
}

void RequestParser::on_stored(FieldId id, std::string_view name, std::string_view value, int at,
                              error_code& ec) {
  switch (id) {
    case FieldId::host:
      // Two Host fields, or one that is not an authority: ambiguous target.
      if (info_.host >= 0 || !valid_authority(core::trim(value))) {
        ec = beast_http::error::bad_value;
        return;
      }
      info_.host = at;
      return;
    case FieldId::transfer_encoding:
      // An HTTP/1.0 message cannot be chunked: its framing is faulty.
      if (info_.version < 11) {
        ec = beast_http::error::bad_transfer_encoding;
        return;
      }
      switch (transfer_codings(value)) {
        case Codings::Chunked: return;
        case Codings::Other: info_.unsupported_coding = true; return;  // forwarded re-framed, it would be mangled
        case Codings::NotFinal: ec = beast_http::error::bad_transfer_encoding; return;  // no length can be told
      }
      return;
    case FieldId::content_length:
      // Duplicates (even equal ones), lists and signs are ambiguous framing.
      if (seen_length_ || !digits(value)) {
        ec = beast_http::error::bad_content_length;
        return;
      }
      seen_length_ = true;
      return;
    case FieldId::expect:
      if (iequals(core::trim(value), "100-continue")) info_.expect_continue = true;
      else info_.bad_expect = true;
      return;
    case FieldId::connection:
      core::for_each_token(value, [&](std::string_view t) {
        if (iequals(t, "close")) info_.connection_close = true;
        else if (!iequals(t, "keep-alive")) ++info_.connection_tokens;
      });
      return;
    case FieldId::via:
      info_.via = at;
      return;
    default:
      break;
  }
  if (iequals(name, "x-forwarded-for")) info_.xff = at;
  else if (iequals(name, request_id_)) info_.request_id = at;
}

void ResponseParser::on_response_impl(int code, boost::beast::string_view reason, int version, error_code&) {
  count_start_line(8 + 1 + 3 + 1 + reason.size() + 2);  // HTTP/x.y SP 200 SP reason CRLF
  info_.status = code;
  info_.version = version;
  info_.reason = head_.store({reason.data(), reason.size()});
}

void ResponseParser::on_stored(FieldId id, std::string_view name, std::string_view value, int at, error_code& ec) {
  if (id == FieldId::content_length) {
    if (info_.content_length || !digits(value)) {
      ec = beast_http::error::bad_content_length;
      return;
    }
    info_.content_length = true;
    return;
  }
  if (id == FieldId::transfer_encoding) {
    // Not ending in chunked is legal in a response (the body ends at the
    // close); in an HTTP/1.0 response its framing is faulty.
    if (info_.version < 11) ec = beast_http::error::bad_transfer_encoding;
    return;
  }
  note_response_field(info_, names_, name, value, at);
}

void ResponseParser::on_trailer(std::string_view name, std::string_view value) noexcept {
  note_response_trailer(info_, names_, name, value);
}

void note_response_field(ResponseInfo& info, const ResponseSignals& names, std::string_view name,
                         std::string_view value, int at) noexcept {
  if (iequals(name, names.load_report)) info.load_report = at;
  else if (iequals(name, names.load_report_bin)) info.load_report_bin = at;
  else if (iequals(name, names.no_retry) || iequals(name, "x-envoy-overloaded")) info.no_retry = true;
  else if (iequals(name, "grpc-retry-pushback-ms") && core::pushback_says_no_retry(value)) info.no_retry = true;
}

void note_response_trailer(ResponseInfo& info, const ResponseSignals& names, std::string_view name,
                           std::string_view value) noexcept {
  const bool bin = iequals(name, names.load_report_bin);
  if (!bin && !iequals(name, names.load_report)) return;
  auto& t = info.trailer_load;
  if (value.size() > t.data.size()) {
    t.truncated = true;
    return;
  }
  std::memcpy(t.data.data(), value.data(), value.size());
  t.size = static_cast<std::uint16_t>(value.size());
  t.bin = bin;
}

}  // namespace levee::http
